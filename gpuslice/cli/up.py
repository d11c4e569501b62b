"""`gpuslice up`: a manager (SQLite) and a local agent in one process, ready to use.

Order of start: the data directory is usable and this process holds its lock (a second `up`
on it is refused, naming the first's pid and port) → Docker answers → the standard session image
exists (built once, with progress) → the manager's database opens → the manager listens → the
CLI of the user who ran `up` is logged in as the admin → the local agent joins. Each step that
fails says why in one line. Ctrl-C stops the agent and the manager but not the session
containers: the next `up` re-adopts them (the node keeps its credential under the data
directory), and so does one after a SIGKILL (the kernel drops the lock with the process).
While it runs, the standard image is built again if it is deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuslice.cli._serve import (
    Serving,
    check_port,
    lock_data_dir,
    log_to_stderr,
    manager_running,
    prepare_data_dir,
    run_until_signal,
    say,
)
from gpuslice.cli.output import CliError, friendly
from gpuslice.client import ApiError, Client, ClientConfig, load_config, save_config
from gpuslice.common.images import DEFAULT_SESSION_IMAGE
from gpuslice.common.resources import parse_mem

if TYPE_CHECKING:
    from gpuslice.agent.service import Agent
    from gpuslice.manager.settings import ManagerSettings

DEFAULT_DATA_DIR = Path("~/.local/share/gpuslice")
IMAGE_CHECK_S = 5.0  # how often the running platform looks for its standard session image
_NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
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
    node_name: Annotated[str | None, typer.Option(
        help="This node's name (default: the one kept in the data directory; the first time, "
        "the host name and a part of the node's id, so two data directories never share one).",
    )] = None,
    resource_group: Annotated[str | None, typer.Option(
        "--resource-group", help="This node's resource group, e.g. a100 (default: \"default\")."
    )] = None,
    config: Annotated[Path | None, typer.Option(
        "--config", help="The manager's TOML settings file, as `gpuslice manager serve "
        "--config` takes it ([auth], [sessions]...); GPUSLICE_* variables win over it, these "
        "options over both. Its data_dir is --data-dir's to say.",
    )] = None,
) -> None:
    """Run everything on this machine: manager (SQLite) and a local agent, in one command."""
    options = UpOptions(
        data_dir=data_dir.expanduser().resolve(), host=host, port=port,
        mock_gpus=parse_mock_gpus(mock_gpus), fgpu_per_gpu=fgpu_per_gpu,
        node_name=node_name, resource_group=resource_group,
        config=config.expanduser().resolve() if config is not None else None,
    )
    log_to_stderr(quiet=True)
    prepare_data_dir(options.data_dir, "--data-dir")
    # Before anything else: a second `up` on this data directory must not touch the node's
    # registration nor the CLI's login of the first (it would lock the first one's agent out).
    lock, previous = lock_data_dir(options.data_dir, LOCK_FILE, "gpuslice up",
                                   port=port, url=options.url)
    try:
        _record_options(options)
        if previous.get("pid"):
            say(f"the last gpuslice up on {options.data_dir} (pid {previous['pid']}) did not "
                "stop cleanly (killed?): picking up its sessions")
        run_until_signal(lambda stop: run_up(options, stop, say))
    finally:
        lock.release()


LOCK_FILE = "up.lock"
# The manager settings `up` takes from its command line, for the commands that read the data
# directory without it (`gpuslice admin backup --data-dir`: the backup's settings).
UP_OPTIONS_FILE = "up-options.json"


def _record_options(options: UpOptions) -> None:
    path = options.data_dir / UP_OPTIONS_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump({"nodes": {"fgpu_per_gpu": options.fgpu_per_gpu}}, out)


@dataclass(frozen=True, slots=True)
class UpOptions:
    data_dir: Path
    host: str
    port: int
    mock_gpus: list[dict[str, object]]
    fgpu_per_gpu: str
    node_name: str | None  # None: this data directory's own (``local_node_name``)
    resource_group: str | None = None
    config: Path | None = None  # the manager's TOML settings file (--config)

    @property
    def url(self) -> str:
        return f"http://{_client_host(self.host)}:{self.port}"


async def run_up(options: UpOptions, stop: asyncio.Event, say: Callable[[str], None]) -> None:
    from gpuslice.agent.settings import AgentSettings

    check_port(options.host, options.port)  # before a build that may take minutes
    settings = up_settings(options)  # so is a misspelt setting, or a bad --config
    try:
        AgentSettings.check_names()  # the local agent's GPUSLICE_AGENT_* (built once joined)
    except ValueError as err:
        raise CliError(f"settings: {err}", 2) from None
    if not await _image_unless_stopped(stop, say):
        say("stopped before the standard session image was built")
        return
    # `up` keeps the standard image (it builds it again if deleted): sessions of it are
    # accepted meanwhile, and wait for it on the node, rather than refused as unknown.
    if DEFAULT_SESSION_IMAGE not in settings.sessions.allowed_images:
        settings.sessions.allowed_images.append(DEFAULT_SESSION_IMAGE)
    async with manager_running(settings, options.host, options.port) as running:
        keeper = asyncio.create_task(_keep_standard_image(stop, say))
        try:
            await _run_agent(options, settings, running, stop, say)
        finally:
            stop.set()
            keeper.cancel()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await keeper


def up_settings(options: UpOptions) -> ManagerSettings:
    """The manager's settings `up` runs with: its options > ``GPUSLICE_*`` > ``--config``. A
    problem is one line naming the setting and what it may be (exit status 2)."""
    from pydantic import ValidationError

    from gpuslice.manager.settings import load_settings

    where = f"--config {options.config}" if options.config is not None else "settings"
    try:
        if options.config is not None and "data_dir" in _toml(options.config):
            raise CliError(f"{where}: data_dir is --data-dir's to say for gpuslice up: remove "
                           "it from the file", 2)
        return load_settings(
            options.config, data_dir=options.data_dir,
            nodes={"fgpu_per_gpu": options.fgpu_per_gpu},
        )
    except ValidationError as err:
        first = err.errors()[0]
        key = ".".join(str(part) for part in first["loc"])
        raise CliError(f"{where}: {key}: {first['msg']} (got {first['input']!r})", 2) from None
    except (FileNotFoundError, ValueError) as err:
        raise CliError(f"{where}: {err}", 2) from None


def _toml(path: Path) -> dict[str, Any]:
    import tomllib

    try:
        with path.open("rb") as file:
            return tomllib.load(file)
    except OSError as err:
        raise FileNotFoundError(f"cannot read it: {err.strerror}") from None


async def _run_agent(options: UpOptions, settings: ManagerSettings, running: Serving,
                     stop: asyncio.Event, say: Callable[[str], None]) -> None:
    """Log the CLI in, run the local agent, say that all is up once it joined; until stopped
    (or the agent or the manager stops: one line). The agent calls the manager in this
    process, not through its port (`manager_link.InProcess`)."""
    from gpuslice.agent.identity import NameTaken
    from gpuslice.agent.isolation.network import IsolationError
    from gpuslice.agent.manager_link import InProcess, ManagerLink
    from gpuslice.agent.service import Agent
    from gpuslice.agent.settings import AgentSettings, MockGpu
    from gpuslice.manager.services.users import CREDENTIALS_FILE
    from gpuslice.ops import notify

    url, credentials = options.url, options.data_dir / CREDENTIALS_FILE
    admin = await asyncio.to_thread(_admin_client, url, credentials)
    cli_note = await asyncio.to_thread(_log_in_cli, url, credentials)
    node_name = options.node_name or await asyncio.to_thread(
        local_node_name, admin, options.data_dir)
    # Bound to this node's name and allowed to re-key it: `up` is its own node's admin, and
    # must join again when the agent's stored credential is gone (a new --port, say).
    join = await asyncio.to_thread(functools.partial(
        admin.create_join_token, f"up:{node_name}", 1, node=node_name, rekey=True,
    ))
    agent_settings = AgentSettings(
        node_name=node_name, manager_url=url, join_token=join.token,
        data_dir=options.data_dir / "agent", accelerator="auto",
        gpu=[MockGpu(**g) for g in options.mock_gpus], resource_group=options.resource_group,
        storage_root=settings.storage_root,  # one machine: the manager's storage root
    )
    link = ManagerLink(url, agent_settings.data_dir, transport=InProcess(running.app))
    agent = Agent(agent_settings, link=link, say=say)
    serving = running.task
    node_id: str | None = None
    agent_task = asyncio.create_task(agent.run(stop))
    try:
        ready = asyncio.create_task(agent.ready.wait())
        await asyncio.wait([agent_task, ready], return_when=asyncio.FIRST_COMPLETED)
        ready.cancel()
        if agent.ready.is_set():  # up means ready: a session asked for now gets placed
            node_id = _serve_links_in_process(running, agent)
            _announce(say, url, options, cli_note, credentials, settings)
            notify.ready(f"up at {url} (node {options.node_name} joined)")
        done, _ = await asyncio.wait([agent_task, serving, asyncio.create_task(stop.wait())],
                                     return_when=asyncio.FIRST_COMPLETED)
        if agent_task in done and agent_task.exception() is not None:
            failure = agent_task.exception()
            if isinstance(failure, IsolationError | NameTaken):
                raise CliError(str(failure))
            raise CliError(f"the local agent stopped: {failure}")
        if serving in done and not stop.is_set():
            raise CliError("the manager stopped unexpectedly (its log is above)")
    finally:
        say("stopping (session containers keep running)")
        if node_id is not None:
            running.app.state.links.local(node_id, None)
        stop.set()
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await agent_task


def _serve_links_in_process(running: Serving, agent: Agent) -> str | None:
    """The local agent serves its node's links through memory, not a loopback WebSocket it
    dials back (`services/apps/links.py`); its node id, to undo that when it stops."""
    credential = agent.link.credential
    if credential is None:
        return None
    running.app.state.links.local(credential.node_id, agent.streams)
    return credential.node_id


async def _image_unless_stopped(stop: asyncio.Event, say: Callable[[str], None]) -> bool:
    """Docker answers and the standard image exists; ``False`` when Ctrl-C came first (it
    stops a build at once: the next `up` builds again from the start)."""
    image = asyncio.create_task(_ensure_image(say))
    await asyncio.wait([image, asyncio.create_task(stop.wait())],
                       return_when=asyncio.FIRST_COMPLETED)
    if not image.done():
        image.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await image
        return False
    image.result()  # its CliError, if any
    return True


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


async def _ensure_image(say: Callable[[str], None]) -> None:
    """The Docker Engine answers and the standard session image exists (built if missing)."""
    import aiodocker

    from gpuslice.common.docker_engine import docker_client, explain

    docker = docker_client()
    try:
        try:
            await docker.version()
        except (aiodocker.DockerError, OSError) as err:
            raise CliError(explain(err)) from None
        await _build_standard_image(docker, say)
    finally:
        await docker.close()


async def _build_standard_image(docker: Any, say: Callable[[str], None]) -> None:
    from gpuslice.imagebuild.base import (
        BaseImageOptions,
        default_extra_ca_bundle,
        ensure_base_image,
    )
    from gpuslice.imagebuild.rootfs import ImageBuildError

    image_options = BaseImageOptions.from_env(
        tag=DEFAULT_SESSION_IMAGE, extra_ca_bundle=default_extra_ca_bundle()
    )
    try:
        result = await ensure_base_image(docker, image_options, progress=_progress(say))
    except ImageBuildError as err:
        raise CliError(f"could not build the standard session image: {err}") from None
    if result.built:
        say(f"built {result.tag} in {result.seconds:.0f}s")


async def _keep_standard_image(stop: asyncio.Event, say: Callable[[str], None]) -> None:
    """Build the standard session image again when it disappears while the platform runs
    (deleted by hand, pruned): sessions that need it wait for it meanwhile (the agent's
    ``image_wait_s``) instead of failing."""
    import aiodocker
    import aiohttp

    from gpuslice.common.docker_engine import docker_client
    from gpuslice.common.waits import wait_event

    docker = docker_client()
    try:
        while not stop.is_set():
            await wait_event(stop, IMAGE_CHECK_S)
            if stop.is_set():
                return
            try:
                await docker.images.inspect(DEFAULT_SESSION_IMAGE)
                continue
            except aiodocker.DockerError as err:
                if err.status != 404:
                    continue  # Docker is away: the agent says so and waits for it
            except (OSError, aiohttp.ClientError):
                continue
            say(f"the standard session image {DEFAULT_SESSION_IMAGE} was deleted: building it "
                "again (sessions that need it wait)")
            try:
                await _build_standard_image(docker, say)
            except CliError as err:
                say(f"{err}; trying again in a minute")
                await wait_event(stop, 60)
    finally:
        await docker.close()


def _progress(say: Callable[[str], None]) -> Callable[[str], None]:
    def show(line: str) -> None:
        if "up to date" not in line:
            say(f"  {line}")
    return show


def _client_host(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "") else ("[::1]" if host == "::" else host)


def _admin_credentials(path: Path) -> dict[str, str]:
    try:
        return dict(
            line.split(": ", 1) for line in path.read_text().splitlines() if ": " in line
        )
    except OSError:
        raise CliError(
            f"the admin credentials file {path} is missing: `gpuslice up` needs it to join "
            "its local agent (restore it, or start with a new --data-dir)"
        ) from None


def _admin_client(url: str, path: Path) -> Client:
    fields = _admin_credentials(path)
    client = Client(url)
    try:
        client.login(fields.get("username", "admin"), fields.get("password", ""))
    except ApiError as err:
        raise CliError(f"cannot log in as the admin from {path}: {err.message}") from None
    return client


def _log_in_cli(url: str, path: Path) -> str:
    """Log the CLI of this user in as the admin (a ``cli`` token, which expires as
    ``gpuslice login``'s does), unless it already works against this URL."""
    stored = load_config()
    if stored.url == url and stored.token:
        with Client(url, stored.token) as client, contextlib.suppress(ApiError):
            return f"logged in as {client.me().username}"
    fields = _admin_credentials(path)
    with Client(url) as client:
        try:
            token = client.cli_login(fields.get("username", "admin"),
                                     fields.get("password", ""), socket.gethostname())
        except ApiError as err:
            raise CliError(f"cannot log in as the admin from {path}: {err.message}") from None
        username = client.me().username
    saved = save_config(ClientConfig(url=url, token=token.access_token))
    return f"logged in as {username} (token in {saved})"


def _announce(say: Callable[[str], None], url: str, options: UpOptions, cli_note: str,
              credentials: Path, settings: ManagerSettings) -> None:
    say("")
    say("gpuslice is up")
    say(f"  console      {url}/  (in a browser)")
    say(f"  API          {url}/api/v1  (docs: {url}/docs)")
    say(f"  admin login  in {credentials} (readable only by you)")
    say(f"  CLI          {cli_note}: try `gpuslice session create --gpu 0.5`")
    say(f"  fGPU         1 GPU = {options.fgpu_per_gpu} fGPU")
    say(f"  storage      folders in {settings.storage_root} (try `gpuslice folder create data`)")
    say(f"  models       local store in {settings.model_dir} (`gpuslice run train.py` saves "
        "there)")
    say("Ctrl-C stops it; running sessions keep running and are re-adopted at the next start.")


NODE_NAME_FILE = "node-name"


def local_node_name(admin: Client, data_dir: Path) -> str:
    """This data directory's node name when `up` is given none, kept in ``node-name``.

    The first time: the node this manager's `up` last joined as, when it has one (a data
    directory from before the name was kept, or a restored backup: their sessions are that
    node's), else a new one, the host name and a part of its agent's id (``agent/identity``).
    Two `up` of their own data directories on one Docker Engine so never share a name (one
    name is one session network, and one live agent per name and engine is allowed)."""
    from gpuslice.agent.identity import agent_id

    kept = data_dir / NODE_NAME_FILE
    with contextlib.suppress(FileNotFoundError):
        if _NODE_NAME.fullmatch(name := kept.read_text().strip()):
            return name
    joined = [t.node for t in admin.list_join_tokens()
              if t.name.startswith("up:") and t.used_at is not None and t.node]
    if joined:
        name = joined[-1]
    else:
        host = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname())[:120].lstrip("-._")
        name = f"{host or 'local'}-{agent_id(data_dir / 'agent')[:6]}"
    kept.write_text(name + "\n")
    return name
