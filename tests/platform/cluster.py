"""A real cluster on one machine: PostgreSQL, manager replicas, HAProxy in front, node agents.

Every part is a process as an admin runs it: `gpuslice manager serve` (each replica on its own
port, one database of its own on the PostgreSQL server), HAProxy with `deploy/haproxy.cfg`, and
`gpuslice agent serve` per node with its own name and data directory. The agents share the
machine's Docker Engine; their containers carry the `gpuslice.node` label and each agent only
ever lists, watches and removes its own. The CLI talks to the balancer, as users would.

Used by tests/platform/test_cluster.py and bench/recovery.py. `Cluster.close()` stops every
process it started, removes its nodes' containers and drops its database.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx

from tests.conftest import create_pg_database, drop_pg_database
from tests.platform.conftest import GPUSLICE, Process, remove_node_containers
from tests.ports import free_port
from tests.waits import scaled

ROOT = Path(__file__).resolve().parents[2]
HAPROXY_CONFIG = ROOT / "deploy" / "haproxy.cfg"
T = TypeVar("T")

# Short timeouts so that failures are seen in seconds (the defaults are 30 s and 5 s), yet
# above the heartbeat gaps of agents starting 25 containers each on a shared 2-core machine.
NODE_TIMEOUT_S = 10.0
MANAGER_SETTINGS = {
    "GPUSLICE_NODES__NODE_TIMEOUT": str(NODE_TIMEOUT_S),
    "GPUSLICE_NODES__HEARTBEAT_INTERVAL": "1",
    "GPUSLICE_NODES__SWEEP_INTERVAL": "0.5",
    "GPUSLICE_NODES__ASSIGNMENT_POLL": "0.5",
    "GPUSLICE_SCHEDULER__INTERVAL": "1",
    "GPUSLICE_LOG__FORMAT": "json",
    "GPUSLICE_SESSIONS__MAX_COUNT": "100",  # the test fills the cluster in one request
}
FGPU_PER_GPU = "25"  # one mock GPU per node, 25 slots of 1 fGPU


def wait_until(what: str, check: Callable[[], T | None], timeout: float,
               poll: float = 0.1, state: Callable[[], object] | None = None) -> T:
    """Poll ``check`` until it returns something truthy; fail naming ``what`` (and ``state()``,
    what was found instead) after ``timeout`` seconds."""
    deadline = time.monotonic() + scaled(timeout)
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            seen = f"; found {state()}" if state is not None else ""
            raise AssertionError(f"{what}: not within {timeout:.0f} s{seen}")
        time.sleep(poll)


@dataclass
class Cluster:
    tmp: Path
    pg_server: str
    prefix: str = field(default_factory=lambda: f"c14-{uuid.uuid4().hex[:6]}")
    database_url: str = ""
    managers: dict[str, Process] = field(default_factory=dict)
    manager_urls: dict[str, str] = field(default_factory=dict)
    agents: dict[str, Process] = field(default_factory=dict)
    agent_env: dict[str, dict[str, str]] = field(default_factory=dict)
    balancer: Process | None = None
    url: str = ""  # the balancer's
    env: dict[str, str] = field(default_factory=dict)  # the CLI's, logged in as admin

    # ------------------------------------------------------------ start

    def start(self, managers: int = 2) -> None:
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSLICE_")}
        self.env["GPUSLICE_CLIENT_CONFIG"] = str(self.tmp / "client.json")
        name = f"gpuslice_{self.prefix.replace('-', '_')}"
        self.database_url = asyncio.run(create_pg_database(self.pg_server, name))
        for index in range(1, managers + 1):
            self.start_manager(f"m{index}")
        self.start_balancer()
        self.ok("login", self.url, "--username", "admin", "--password-stdin",
                stdin=self.admin_password() + "\n")

    def start_manager(self, name: str, port: int | None = None, **settings: str) -> Process:
        port = port or free_port()
        env = self.env | MANAGER_SETTINGS | {
            "GPUSLICE_DATABASE__URL": self.database_url,
            "GPUSLICE_DATA_DIR": str(self.tmp / "managers"),
        } | settings
        process = Process([GPUSLICE, "manager", "serve", "--port", str(port)], env)
        url = f"http://127.0.0.1:{port}"
        wait_until(f"manager {name} ready at {url}", lambda: _ready(url, process), 90)
        self.managers[name], self.manager_urls[name] = process, url
        return process

    def start_balancer(self) -> None:
        port = free_port()
        m1, m2 = (self.manager_urls[n].removeprefix("http://") for n in ("m1", "m2"))
        env = self.env | {"GPUSLICE_LB_BIND": f"127.0.0.1:{port}", "GPUSLICE_MANAGER_1": m1,
                          "GPUSLICE_MANAGER_2": m2}
        self.balancer = Process([_haproxy(), "-db", "-f", str(HAPROXY_CONFIG)], env)
        self.url = f"http://127.0.0.1:{port}"
        wait_until("the balancer answers", lambda: _ready(self.url, self.balancer), 30)

    def start_agent(self, node: str, managers: list[str]) -> Process:
        """``node``'s agent, trying the managers in this order (a join token the first time)."""
        if node not in self.agent_env:
            token = json.loads(self.ok("admin", "token", "create", "--name", node, "--json"))
            self.agent_env[node] = self.env | {
                "GPUSLICE_AGENT_JOIN_TOKEN": token["token"],
                "GPUSLICE_AGENT_NODE_NAME": node,
                "GPUSLICE_AGENT_DATA_DIR": str(self.tmp / "agents" / node),
                "GPUSLICE_AGENT_ACCELERATOR": "mock",
                "GPUSLICE_AGENT_GPU": '[{"count": 1, "memory": "8GiB", "model": "Mock A100"}]',
                "GPUSLICE_AGENT_FGPU_PER_GPU": FGPU_PER_GPU,
                "GPUSLICE_AGENT_LOG__FORMAT": "json",
            }
        env = self.agent_env[node] | {
            "GPUSLICE_AGENT_MANAGER_URL": ",".join(self.manager_urls[m] for m in managers)}
        agent = Process([GPUSLICE, "agent", "serve"], env)
        agent.wait_for(f"agent {node}: joined", timeout=90)
        self.agents[node] = agent
        return agent

    def node(self, suffix: str) -> str:
        return f"{self.prefix}-{suffix}"

    # ------------------------------------------------------------ faults

    def kill(self, process: Process) -> float:
        """SIGKILL, as a crash or a power cut would; returns when (monotonic)."""
        at = time.monotonic()
        process.popen.send_signal(signal.SIGKILL)
        process.popen.wait(10)
        return at

    # ------------------------------------------------------------ using it

    def cli(self, *args: str, stdin: str | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([GPUSLICE, *args], env=env or self.env, input=stdin, text=True,
                              capture_output=True, timeout=scaled(300), check=False)

    def ok(self, *args: str, stdin: str | None = None) -> str:
        done = self.cli(*args, stdin=stdin)
        assert done.returncode == 0, f"gpuslice {' '.join(args)}: {done.stderr}{done.stdout}"
        return done.stdout

    def json(self, *args: str) -> Any:
        return json.loads(self.ok(*args, "--json"))

    def sessions(self, url: str | None = None, token: str | None = None) -> list[dict[str, Any]]:
        """Every session (all pages), through the balancer or one replica."""
        headers = {"Authorization": f"Bearer {token or self.token()}"}
        found: list[dict[str, Any]] = []
        while True:
            page = httpx.get(f"{url or self.url}/api/v1/sessions", headers=headers,
                             timeout=scaled(30),
                             params={"limit": 500, "offset": len(found)}).json()
            found += page["items"]
            if len(found) >= page["total"] or not page["items"]:
                return found

    def statuses(self, ids: list[str]) -> dict[str, str]:
        by_id = {s["id"]: s for s in self.sessions()}
        return {i: by_id[i]["status"] for i in ids}

    def summary(self, ids: list[str] | None = None) -> dict[str, int]:
        """How many sessions (of ``ids``) are in each status and why, for failure messages."""
        counts: dict[str, int] = {}
        for s in self.sessions():
            if ids is None or s["id"] in ids:
                key = f"{s['status']}: {s['status_reason'][:80]}"
                counts[key] = counts.get(key, 0) + 1
        return counts

    def token(self) -> str:
        return str(json.loads(Path(self.env["GPUSLICE_CLIENT_CONFIG"]).read_text())["token"])

    def admin_password(self) -> str:
        text = (self.tmp / "managers" / "admin-credentials").read_text()
        return next(line.split(": ", 1)[1] for line in text.splitlines()
                    if line.startswith("password: "))

    def containers(self, node: str) -> dict[str, list[str]]:
        """session id -> its containers (ids) on ``node``, running or not."""
        out = subprocess.run(
            ["docker", "ps", "-a", "--filter", f"label=gpuslice.node={node}",
             "--filter", "label=gpuslice.session-id", "--format",
             '{{.ID}} {{.Label "gpuslice.session-id"}}'],
            capture_output=True, text=True, check=True, timeout=scaled(60)).stdout
        found: dict[str, list[str]] = {}
        for line in out.splitlines():
            cid, _, sid = line.partition(" ")
            found.setdefault(sid, []).append(cid)
        return found

    # ------------------------------------------------------------ stop

    def close(self) -> None:
        processes = [*self.agents.values(), *self.managers.values()]
        for process in [*processes, *([self.balancer] if self.balancer else [])]:
            process.stop()
        for node in self.agent_env:
            remove_node_containers(node)
        if self.database_url:
            asyncio.run(drop_pg_database(self.pg_server, self.database_url))


def _ready(url: str, process: Process | None) -> bool:
    if process is not None and process.popen.poll() is not None:
        raise AssertionError(f"{process.argv[1:3]} exited ({process.popen.returncode}):\n"
                             f"{process.output}")
    try:
        return httpx.get(f"{url}/api/v1/health/ready", timeout=scaled(2)).status_code == 200
    except httpx.TransportError:
        return False


def _haproxy() -> str:
    found = shutil.which("haproxy") or "/usr/sbin/haproxy"
    if not Path(found).is_file():
        raise AssertionError("haproxy is not installed (tools/host-setup.sh --postgres does it)")
    return found

