"""What the benchmarks share: their command line's ``--short`` (the test suite's run); and for
those that start a manager of their own, a free port, waiting until it answers, the first admin's
password (from the file the manager writes at its first start), a database of their own (SQLite,
or made on a PostgreSQL server and dropped after), an API client logged in as that admin, and
forgetting a bench node once it stopped (its containers and its session network: each run's
node has a name of its own, and Docker runs out of network address pools after a few dozen)."""

from __future__ import annotations

import argparse
import socket
import subprocess
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx


def parse_args(parser: argparse.ArgumentParser, short: dict[str, Any]) -> argparse.Namespace:
    """The command line, with ``--short``: the run tests/bench makes, ``short``'s values (small
    sizes, fixed waits scaled down, the same code paths) in place of the defaults; an option
    given on the command line still wins."""
    shown = " ".join(f"--{key.replace('_', '-')} {value}" for key, value in short.items())
    parser.add_argument("--short", action="store_true",
                        help=f"a short run, as the test suite makes: {shown}")
    if parser.parse_known_args()[0].short:
        parser.set_defaults(**short)
    return parser.parse_args()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_live(url: str, manager: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    """Until the manager at ``url`` answers its liveness check (exits if it stops first)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if manager.poll() is not None:
            raise SystemExit("the manager exited")
        try:
            if httpx.get(url + "/api/v1/health/live", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SystemExit("the manager did not start")


def admin_password(data_dir: Path) -> str:
    text = (data_dir / "admin-credentials").read_text()
    return next(line.split(": ", 1)[1] for line in text.splitlines()
                if line.startswith("password: "))


def node_containers(node: str, *, sessions_only: bool = False) -> list[str]:
    """The ids of node ``node``'s containers, running or not: its session containers, and its
    network sandboxes unless ``sessions_only``."""
    wanted = ["--filter", f"label=gpuslice.node={node}"]
    if sessions_only:
        wanted += ["--filter", "label=gpuslice.session-id"]
    out = subprocess.run(["docker", "ps", "-aq", *wanted], capture_output=True, text=True).stdout
    return out.split()


def forget_node(node: str) -> None:
    """Remove what the stopped node ``node`` left on this Docker Engine: its containers, and
    the session network its agent made (``gpuslice-<node>``, see agent/isolation)."""
    if left := node_containers(node):
        subprocess.run(["docker", "rm", "-f", *left], capture_output=True)
    subprocess.run(["docker", "network", "rm", f"gpuslice-{node}"], capture_output=True)


@asynccontextmanager
async def scratch_database(pg: str | None, tmp: Path) -> AsyncIterator[str]:
    """A database URL of the bench's own: SQLite in ``tmp``, or a new database on the
    PostgreSQL server ``pg``, dropped afterwards."""
    from sqlalchemy import text
    from sqlalchemy.engine import make_url
    from sqlalchemy.ext.asyncio import create_async_engine

    if pg is None:
        yield f"sqlite+aiosqlite:///{tmp / 'bench.db'}"
        return
    server = make_url(pg).set(drivername="postgresql+asyncpg")
    name = f"gpuslice_bench_{uuid.uuid4().hex[:12]}"
    admin = create_async_engine(server, isolation_level="AUTOCOMMIT")
    try:
        async with admin.connect() as conn:
            await conn.execute(text(f'CREATE DATABASE "{name}"'))
        yield server.set(database=name).render_as_string(hide_password=False)
        async with admin.connect() as conn:
            await conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        await admin.dispose()


async def login_admin(client: httpx.AsyncClient, data_dir: Path) -> None:
    """Log ``client`` in as the first admin (the credentials file the manager wrote)."""
    from gpuslice.manager.services.users import CREDENTIALS_FILE

    lines = (data_dir / CREDENTIALS_FILE).read_text().splitlines()
    creds = dict(line.split(": ", 1) for line in lines)
    r = await client.post("/api/v1/auth/login", json=creds)
    r.raise_for_status()
    client.headers["Authorization"] = f"Bearer {r.json()['access_token']}"
