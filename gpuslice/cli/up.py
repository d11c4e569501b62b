"""`gpuslice up`: a manager (SQLite) and a local agent in one process, ready to use.

Order of start: Docker answers → the standard session image exists (built once, with progress)
→ the manager listens → the CLI of the user who ran `up` is logged in as the admin → the local
agent joins. Ctrl-C stops the agent and the manager but not the session containers: the next
`up` re-adopts them (the node keeps its credential under the data directory).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpuslice.cli._serve import log_to_stderr, run_until_signal, say
from gpuslice.cli.output import CliError, friendly
from gpuslice.client import ApiError, Client, ClientConfig, load_config, save_config
from gpuslice.common.images import DEFAULT_SESSION_IMAGE
from gpuslice.common.resources import parse_mem

if TYPE_CHECKING:
    from gpuslice.manager.settings import ManagerSettings

DEFAULT_DATA_DIR = Path("~/.local/share/gpuslice")
_MOCK_RE = re.compile(r"^(?P<count>\d+)x(?P<mem>[0-9.]+[A-Za-z]*)(?::(?P<model>.+))?$")


@friendly
def up(
    data_dir: Annotated[Path, typer.Option(help="Database, credentials, agent state.")] = (
        DEFAULT_DATA_DIR
    ),
    port: Annotated[int, typer.Option(help="API and console port.")] = 8080,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    mock_gpus: Annotated[str, typer.Option(
        help="Simulated GPUs when no NVIDIA GPU is found: COUNTxMEM[:MODEL], comma-separated.",
    )] = "1x8GiB",
    fgpu_per_gpu: Annotated[str, typer.Option(help="fGPU per physical GPU.")] = "1",
    node_name: Annotated[str | None, typer.Option(help="This node's name.")] = None,
) -> None:
    """Run everything on this machine: manager (SQLite) and a local agent, in one command."""
    options = UpOptions(
        data_dir=data_dir.expanduser().resolve(), host=host, port=port,
        mock_gpus=parse_mock_gpus(mock_gpus), fgpu_per_gpu=fgpu_per_gpu,
        node_name=node_name or _default_node_name(),
    )
    log_to_stderr(quiet=True)
    run_until_signal(lambda stop: run_up(options, stop, say))


@dataclass(frozen=True, slots=True)
class UpOptions:
    data_dir: Path
    host: str
    port: int
    mock_gpus: list[dict[str, object]]
    fgpu_per_gpu: str
    node_name: str


async def run_up(options: UpOptions, stop: asyncio.Event, say: Callable[[str], None]) -> None:
    from gpuslice.agent.config import AgentSettings, MockGpu
    from gpuslice.agent.isolation.network import IsolationError
    from gpuslice.agent.service import Agent
    from gpuslice.manager.app import create_app
    from gpuslice.manager.server import ManagerServer
    from gpuslice.manager.services.users import CREDENTIALS_FILE
    from gpuslice.manager.settings import load_settings

    credentials = options.data_dir / CREDENTIALS_FILE
    options.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    await _ensure_image(options, say)
    _check_port(options.host, options.port)
    try:
        settings = load_settings(
            None, data_dir=options.data_dir, nodes={"fgpu_per_gpu": options.fgpu_per_gpu}
        )
    except ValueError as err:
        raise CliError(f"settings: {err}", 2) from None
    server = ManagerServer(create_app(settings), options.host, options.port)
    serving = asyncio.create_task(server.serve())
    while not server.started:
        if serving.done():
            raise CliError(f"the manager could not start on {options.host}:{options.port}")
        await asyncio.sleep(0.05)
    url = f"http://{_client_host(options.host)}:{options.port}"
    agent_task: asyncio.Task[None] | None = None
    try:
        admin = await asyncio.to_thread(_admin_client, url, credentials)
        cli_note = await asyncio.to_thread(_log_in_cli, admin, url)
        # Bound to this node's name and allowed to re-key it: `up` is its own node's admin, and
        # must join again when the agent's stored credential is gone (a new --port, say).
        join = await asyncio.to_thread(functools.partial(
            admin.create_join_token, f"up:{options.node_name}", 1, node=options.node_name,
            rekey=True,
        ))
        agent = Agent(AgentSettings(
            node_name=options.node_name, manager_url=url, join_token=join.token,
            data_dir=options.data_dir / "agent", accelerator="auto",
            gpu=[MockGpu(**g) for g in options.mock_gpus],
            storage_root=settings.storage_root,  # one machine: the manager's storage root
        ), say=say)
        agent_task = asyncio.create_task(agent.run(stop))
        _announce(say, url, options, cli_note, credentials, settings)
        done, _ = await asyncio.wait(
            [agent_task, serving, asyncio.create_task(stop.wait())],
            return_when=asyncio.FIRST_COMPLETED,
        )
        for task in done:
            failure = task.exception() if task is not serving else None
            if isinstance(failure, IsolationError):
                raise CliError(str(failure))
            if failure is not None:
                raise failure
    finally:
        say("stopping (session containers keep running)")
        stop.set()
        if agent_task is not None:
            with contextlib.suppress(Exception):
                await agent_task
        server.exit()
        with contextlib.suppress(Exception):
            await serving


def parse_mock_gpus(text: str) -> list[dict[str, object]]:
    """``"2x8GiB,1x16g:Mock T4"`` -> the agent's ``[[gpu]]`` entries."""
    gpus = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        match = _MOCK_RE.match(part)
        if not match:
            raise CliError(f"--mock-gpus: {part!r} is not COUNTxMEM[:MODEL], e.g. 1x8GiB", 2)
        count = int(match["count"])
        if not 1 <= count <= 64:
            raise CliError(f"--mock-gpus: count must be 1-64, got {count}", 2)
        gpus.append({"count": count, "memory": parse_mem(match["mem"], field="--mock-gpus"),
                     "model": match["model"] or "Mock GPU"})
    return gpus


async def _ensure_image(options: UpOptions, say: Callable[[str], None]) -> None:
    import aiodocker

    from gpuslice.images.base import BaseImageOptions, default_extra_ca_bundle, ensure_base_image
    from gpuslice.images.rootfs import ImageBuildError

    docker = aiodocker.Docker()
    try:
        try:
            await docker.version()
        except (aiodocker.DockerError, OSError) as err:
            raise CliError(
                f"the Docker Engine does not answer ({err}); start it first "
                "(`make up` installs and starts it)"
            ) from None
        image_options = BaseImageOptions.from_env(
            tag=DEFAULT_SESSION_IMAGE, extra_ca_bundle=default_extra_ca_bundle()
        )
        try:
            result = await ensure_base_image(docker, image_options, progress=_progress(say))
        except ImageBuildError as err:
            raise CliError(f"could not build the standard session image: {err}") from None
        if result.built:
            say(f"built {result.tag} in {result.seconds:.0f}s")
    finally:
        await docker.close()


def _progress(say: Callable[[str], None]) -> Callable[[str], None]:
    def show(line: str) -> None:
        if "up to date" not in line:
            say(f"  {line}")
    return show


def _check_port(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        try:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
        except OSError as err:
            why = "is in use" if err.errno == errno.EADDRINUSE else f"cannot be used ({err})"
            raise CliError(f"port {port} on {host} {why}: pick another with --port") from None


def _client_host(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "") else ("[::1]" if host == "::" else host)


def _admin_client(url: str, path: Path) -> Client:
    try:
        fields = dict(
            line.split(": ", 1) for line in path.read_text().splitlines() if ": " in line
        )
    except OSError:
        raise CliError(
            f"the admin credentials file {path} is missing: `gpuslice up` needs it to join "
            "its local agent (restore it, or start with a new --data-dir)"
        ) from None
    client = Client(url)
    try:
        client.login(fields.get("username", "admin"), fields.get("password", ""))
    except ApiError as err:
        raise CliError(f"cannot log in as the admin from {path}: {err.message}") from None
    return client


def _log_in_cli(admin: Client, url: str) -> str:
    """Log the CLI of this user in as the admin, unless it already works against this URL."""
    stored = load_config()
    if stored.url == url and stored.token:
        with Client(url, stored.token) as client, contextlib.suppress(ApiError):
            return f"logged in as {client.me().username}"
    token = admin.create_token(f"cli@{socket.gethostname()}")
    path = save_config(ClientConfig(url=url, token=token.token))
    return f"logged in as {admin.me().username} (token in {path})"


def _announce(say: Callable[[str], None], url: str, options: UpOptions, cli_note: str,
              credentials: Path, settings: ManagerSettings) -> None:
    say("")
    say("gpuslice is up")
    say(f"  API          {url}/api/v1  (docs: {url}/docs)")
    say(f"  admin login  in {credentials} (readable only by you)")
    say(f"  CLI          {cli_note}: try `gpuslice session create --gpu 0.5`")
    say(f"  fGPU         1 GPU = {options.fgpu_per_gpu} fGPU")
    say(f"  storage      folders in {settings.storage_root} (try `gpuslice folder create data`)")
    say(f"  models       local store in {settings.model_dir} (`gpuslice run train.py` saves "
        "there)")
    say("Ctrl-C stops it; running sessions keep running and are re-adopted at the next start.")


def _default_node_name() -> str:
    name = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname())[:128].lstrip("-._")
    return name or "local"
