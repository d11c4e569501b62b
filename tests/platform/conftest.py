"""The whole platform as a user runs it: real processes, real Docker, mock GPUs.

``platform`` is `gpuslice up` (manager + local agent in one process); ``split_platform`` is
`gpuslice manager serve` and `gpuslice agent serve` as two processes, so that the agent can be
killed alone. Each gets its own data directory, port, node name and CLI config; its session
containers are removed afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from gpuslice.client import ApiError, Client
from tests.conftest import seed_database
from tests.dockerd import (
    base_image,
    docker_ready,
    private_dockerd,
    remove_fence,
    running_private_dockerd,
)
from tests.platform import app_image
from tests.ports import free_port
from tests.waits import Deadline, scaled, wait_for

__all__ = ["base_image", "docker_ready", "private_dockerd", "running_private_dockerd"]

GPUSLICE = str(Path(sys.executable).with_name("gpuslice"))


class Process:
    """A child process whose output is collected as it comes (for waiting on a line)."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.argv = argv
        self.env = env
        self.popen = subprocess.Popen(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, text: str, timeout: float = 180.0, after: int = 0) -> None:
        deadline = Deadline(timeout)
        while not any(text in line for line in self.lines[after:]):
            if self.popen.poll() is not None:
                self._reader.join(5)  # the last lines, up to the end of its output
                if any(text in line for line in self.lines[after:]):
                    return
                raise AssertionError(f"{self.argv[1:3]} exited ({self.popen.returncode}) "
                                     f"before {text!r}:\n{self.output}")
            if deadline.passed:
                raise AssertionError(
                    f"no {text!r} within {deadline.seconds:.0f}s:\n{self.output}")
            time.sleep(0.1)

    def stop(self, sig: int = signal.SIGINT, timeout: float = 30.0) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
            try:
                self.popen.wait(scaled(timeout))
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(10)


@dataclass
class Platform:
    url: str
    data_dir: Path
    node: str
    env: dict[str, str]
    processes: list[Process] = field(default_factory=list)
    _clients: dict[str, Client] = field(default_factory=dict, repr=False)

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def up_argv(self, *more: str) -> list[str]:
        """`gpuslice up` for this platform: one mock 8 GiB GPU, 2 fGPU per GPU."""
        return [GPUSLICE, "up", "--data-dir", str(self.data_dir), "--port", str(self.port),
                "--mock-gpus", "1x8GiB", "--fgpu-per-gpu", "2", "--node-name", self.node,
                *more]

    def start_up(self, prefix: tuple[str, ...] = (), env: dict[str, str] | None = None,
                 ) -> Process:
        """Run `gpuslice up` (after ``prefix``, e.g. a wrapper) until its agent joined."""
        up = Process([*prefix, *self.up_argv()], self.env | (env or {}))
        self.processes.append(up)
        up.wait_for("gpuslice is up")
        up.wait_for(f"console      {self.url}/")  # where a newcomer opens a browser
        up.wait_for(f"agent {self.node}: joined")
        return up

    def cli(self, *args: str, stdin: str | None = None, timeout: float = 120.0,
            env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """Run `gpuslice ARGS` as a user would, logged in as the admin."""
        return subprocess.run([GPUSLICE, *args], env=self.env | (env_extra or {}), input=stdin,
                              text=True, capture_output=True, timeout=scaled(timeout))

    def ok(self, *args: str, stdin: str | None = None) -> str:
        done = self.cli(*args, stdin=stdin)
        assert done.returncode == 0, f"gpuslice {' '.join(args)}: {done.stderr}{done.stdout}"
        return done.stdout

    def client(self) -> Client:
        """The SDK, with the CLI's stored login."""
        return Client(self.url, self._cli_token())

    def _cli_token(self) -> str:
        """The token of the CLI's stored login."""
        return str(json.loads(Path(self.env["GPUSLICE_CLIENT_CONFIG"]).read_text())["token"])

    def admin_password(self) -> str:
        text = (self.data_dir / "admin-credentials").read_text()
        return next(line.split(": ", 1)[1] for line in text.splitlines()
                    if line.startswith("password: "))

    def session(self, name: str, image: str, *args: str) -> str:
        """Create a session and wait until it runs: its id."""
        for _ in range(50):  # a new image reaches the catalog with the node's next heartbeat
            done = self.cli("session", "create", "--name", name, "--image", image, "--wait",
                            "--json", *args)
            if done.returncode == 0 or "unknown image" not in done.stderr:
                break
            time.sleep(0.2)
        assert done.returncode == 0, done.stderr
        [created] = json.loads(done.stdout)
        assert created["status"] == "RUNNING", created["status_reason"]
        return str(created["id"])

    def login(self, username: str, password: str) -> tuple[str, str]:
        """A login token, and the login cookie a browser gets with it."""
        answer = httpx.post(f"{self.url}/api/v1/auth/login",
                            json={"username": username, "password": password})
        assert answer.status_code == 200, answer.text
        return answer.json()["access_token"], answer.cookies["gpuslice_login"]

    def sdk(self) -> Client:
        """The SDK as whoever the CLI is logged in as now (a test may log in as another user),
        one client per login, kept: waits ask through it in this process, not through a CLI
        process started for each look (~0.3 s of a core apiece)."""
        token = self._cli_token()
        if token not in self._clients:
            self._clients[token] = Client(self.url, token)
        return self._clients[token]

    def wait_status(self, ref: str, statuses: set[str], timeout: float = 30.0) -> dict:
        """Until session ``ref`` has one of ``statuses`` (it may not exist yet: another
        process is creating it); the session as `gpuslice session show --json` prints it."""
        deadline = Deadline(timeout)
        while True:
            try:
                session = self.sdk().get_session(ref).model_dump(mode="json")
            except ApiError as err:
                assert err.status == 404, str(err)
                if deadline.passed:
                    raise AssertionError(f"no session {ref} after {deadline.seconds:.0f}s") \
                        from None
                time.sleep(0.1)
                continue
            if session["status"] in statuses:
                return session
            if deadline.passed:
                raise AssertionError(f"{ref} is {session['status']} after "
                                     f"{deadline.seconds:.0f}s (wanted {statuses}): "
                                     f"{session['status_reason']}")
            time.sleep(0.1)

    def wait_next_heartbeat(self, count: int = 1, timeout: float = 60.0) -> None:
        """Until the node's heartbeat has come ``count`` more times: what its agent does in
        between (a reconcile pass, adopting containers) has been reported by then."""
        def last() -> str | None:
            return next((str(n.last_heartbeat_at) for n in self.sdk().list_nodes()
                         if n.name == self.node), None)

        seen = [last()]
        wait_for(lambda: (seen.append(last()) or len(set(seen)) > count), timeout,
                 f"{count} more heartbeats of node {self.node}")

    def wait_reason(self, ref: str, text: str, timeout: float = 30.0) -> dict:
        """Until session ``ref``'s reason holds ``text``."""
        deadline = Deadline(timeout)
        while True:
            session = self.wait_status(ref, set(STATUSES), timeout)
            if text in (session["status_reason"] or ""):
                return session
            if deadline.passed:
                raise AssertionError(f"{ref}: no reason with {text!r}: {session}")
            time.sleep(0.1)


STATUSES = ("PENDING", "SCHEDULED", "PREPARING", "RUNNING", "TERMINATING", "TERMINATED",
            "ERROR", "CANCELLED")


def _base_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSLICE_")}
    env["GPUSLICE_CLIENT_CONFIG"] = str(tmp / "client.json")
    env["COLUMNS"] = "200"  # tables as on a wide terminal: no cell is cut short
    return env


def remove_node_containers(node: str, env: dict[str, str] | None = None) -> None:
    listed = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=gpuslice.node={node}"],
        capture_output=True, text=True, check=False, env=env,
    ).stdout.split()
    if listed:
        subprocess.run(["docker", "rm", "-f", *listed], capture_output=True, check=False,
                       env=env)
    # the node's own network (its sessions and sandboxes), gone once they are
    subprocess.run(["docker", "network", "rm", f"gpuslice-{node}"], capture_output=True,
                   check=False, env=env)
    remove_fence(node)  # the agent left it in place while those containers ran


def new_platform(tmp_path: Path, env: dict[str, str] | None = None) -> Platform:
    """A platform's place (data directory, port, node name, CLI login file), nothing started:
    add processes with `Platform.start_up` (or by hand) and let `platforms` stop them."""
    port, node = free_port(), f"node-{uuid.uuid4().hex[:8]}"
    return Platform(f"http://127.0.0.1:{port}", tmp_path / "data", node,
                    _base_env(tmp_path) | (env or {}))


@pytest.fixture
def platforms() -> Iterator[list[Platform]]:
    """Platforms a test starts itself; their processes are stopped and their node's
    containers removed afterwards (on the Docker Engine their environment names)."""
    made: list[Platform] = []
    try:
        yield made
    finally:
        # Every process first: a platform restored elsewhere runs the same node as the one it
        # came from, and its agent would refill the sandboxes removed under it.
        for plat in made:
            for process in reversed(plat.processes):
                process.stop()
        for plat in made:
            remove_node_containers(plat.node, plat.env)


@pytest.fixture
def platform(base_image: str, tmp_path: Path, platforms: list[Platform], sqlite_at_head: Path,
             ) -> Platform:
    """`gpuslice up` with one mock 8 GiB GPU and 2 fGPU per GPU."""
    plat = new_platform(tmp_path)
    seed_database(plat.data_dir, sqlite_at_head)
    platforms.append(plat)
    plat.start_up()
    return plat


@pytest.fixture(scope="module")
def _module_up(base_image: str, tmp_path_factory: pytest.TempPathFactory,
               sqlite_at_head: Path) -> Iterator[Platform]:
    place = tmp_path_factory.mktemp("up")
    seed_database(place / "data", sqlite_at_head)
    yield from run_up(place)


@pytest.fixture
def shared_platform(_module_up: Platform) -> Iterator[Platform]:
    """`gpuslice up` as ``platform`` gives it, started once for the tests of a module that
    neither stop, restart nor break it (starting one is ~5-10 s of a test); each test leaves
    no session that has not ended, so the next finds the node's capacity free."""
    yield _module_up
    end_all_sessions(_module_up)


def end_all_sessions(plat: Platform, timeout: float = 60.0) -> None:
    """Destroy every session that has not ended, and wait until all have."""
    final = {"TERMINATED", "ERROR", "CANCELLED"}

    def live() -> list[str]:
        return [s.id for s in plat.sdk().list_all_sessions() if s.status.value not in final]

    ids = live()
    if ids:
        plat.sdk().destroy_sessions(ids)
        wait_for(lambda: not live(), timeout, "the sessions a test left to end")


def run_up(tmp_path: Path, settings: dict[str, str] | None = None) -> Iterator[Platform]:
    """`gpuslice up` (with these ``GPUSLICE_*`` manager settings), stopped and its node's
    containers removed afterwards: the body of module-wide `up` fixtures."""
    plat = new_platform(tmp_path, settings)
    try:
        plat.start_up()
        yield plat
    finally:
        for process in reversed(plat.processes):
            process.stop()
        remove_node_containers(plat.node, plat.env)


def restart_up(plat: Platform, sig: int = signal.SIGINT) -> Process:
    """Stop the platform's `gpuslice up` with ``sig`` and run it again on the same data."""
    old = plat.processes.pop()
    old.stop(sig)
    again = Process(old.argv, old.env)
    plat.processes.append(again)
    again.wait_for(f"agent {plat.node}: joined")
    return again


def run_split(tmp_path: Path, manager_settings: dict[str, str],
              env_extra: dict[str, str] | None = None, *, port: int | None = None,
              agent_url: str | None = None) -> Iterator[Platform]:
    """`gpuslice manager serve` (with these ``GPUSLICE_*`` settings, on ``port``) and `gpuslice
    agent serve` (reaching it at ``agent_url``, by default directly) as two processes (both with
    ``env_extra``, e.g. DOCKER_HOST), logged in as the admin; both stopped and the node's
    containers removed afterwards. The body of the split fixtures."""
    port, node = port or free_port(), f"node-{uuid.uuid4().hex[:8]}"
    env = _base_env(tmp_path) | (env_extra or {})
    manager_env = env | {"GPUSLICE_DATA_DIR": str(tmp_path / "data"),
                         "GPUSLICE_NODES__HEARTBEAT_INTERVAL": "1"} | manager_settings
    manager = Process([GPUSLICE, "manager", "serve", "--port", str(port)], manager_env)
    plat = Platform(f"http://127.0.0.1:{port}", tmp_path / "data", node, env, [manager])
    try:
        _wait_http(plat.url, manager)
        plat.ok("login", plat.url, "--username", "admin", "--password-stdin",
                stdin=plat.admin_password() + "\n")
        token = plat.ok("admin", "token", "create", "--name", node, "--json")
        agent_env = env | {
            "GPUSLICE_AGENT_MANAGER_URL": agent_url or plat.url,
            "GPUSLICE_AGENT_JOIN_TOKEN": json.loads(token)["token"],
            "GPUSLICE_AGENT_NODE_NAME": node,
            "GPUSLICE_AGENT_DATA_DIR": str(tmp_path / "agent"),
            "GPUSLICE_AGENT_ACCELERATOR": "mock",
            "GPUSLICE_AGENT_GPU": '[{"count": 1, "memory": "8GiB", "model": "Mock A100"}]',
        }
        plat.env["AGENT_ENV_JSON"] = json.dumps(agent_env)
        plat.processes.append(start_agent(plat))
        yield plat
    finally:
        for process in reversed(plat.processes):
            process.stop()
        remove_node_containers(node, env)


@pytest.fixture
def split_platform(base_image: str, tmp_path: Path) -> Iterator[Platform]:
    """`gpuslice manager serve` and `gpuslice agent serve` as two processes, 2 fGPU per GPU."""
    yield from run_split(tmp_path, {"GPUSLICE_NODES__FGPU_PER_GPU": "2"})


def start_agent(plat: Platform) -> Process:
    agent_env = json.loads(plat.env["AGENT_ENV_JSON"])
    agent = Process([GPUSLICE, "agent", "serve"], agent_env)
    agent.wait_for(f"agent {plat.node}: joined", timeout=60)
    return agent


def _wait_http(url: str, process: Process, timeout: float = 60.0) -> None:
    deadline = Deadline(timeout)
    while True:
        try:
            if httpx.get(f"{url}/api/v1/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if process.popen.poll() is not None or deadline.passed:
            raise AssertionError(f"manager did not answer at {url}:\n{process.output}")
        time.sleep(0.2)


@pytest.fixture(scope="session")
def apps_image(base_image: str) -> Iterator[str]:
    """A session image serving the proxy tests' apps (``app_image.py``), removed afterwards."""
    tag = f"gpuslice-test/apps:{uuid.uuid4().hex[:10]}"
    app_image.build(tag, base_image)
    try:
        yield tag
    finally:
        app_image.remove(tag)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None],
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed test shows the last lines of its platforms' processes (`gpuslice up`, the
    manager, the agent): what the platform said while the test waited is often the why."""
    report = yield
    if report.passed or call.when == "teardown":
        return report
    funcargs = getattr(item, "funcargs", {})
    shown = [v for v in funcargs.values() if isinstance(v, Platform)]
    shown += [p for v in funcargs.values() if isinstance(v, list) for p in v
              if isinstance(p, Platform)]
    for plat in shown:
        for number, process in enumerate(plat.processes):
            tail = "\n".join(process.lines[-60:])
            report.sections.append((f"{plat.node} process {number} ({process.argv[1:3]})", tail))
    return report
