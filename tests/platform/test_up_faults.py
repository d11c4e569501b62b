"""What a one-machine user meets when `gpuslice up` cannot start, or starts where another
runs: one line saying what is wrong and what to do, a non-zero exit, nothing touched.

The Docker cases here never touch a real engine: "absent" hides the sockets in a mount
namespace of the test's own, "stopped" and "not ours to use" are sockets the test makes.
Cases that stop or restart an engine live in test_docker_faults.py (a private engine).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.waits import scaled

from .conftest import GPUSLICE, Platform, Process, new_platform, restart_up

pytestmark = pytest.mark.docker

SMALL = ["--cpu", "0.25", "--mem", "256m"]
AS_NOBODY = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")


def one_line_failure(argv: list[str], env: dict[str, str], timeout: float = 60) -> str:
    """Run ``argv``; it must fail with exactly one `error:` line and no traceback."""
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    output = done.stdout + done.stderr
    assert done.returncode not in (0, None), output
    assert "Traceback" not in output, output
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, output
    return errors[0].removeprefix("error: ")


def needs_root() -> None:
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("setpriv"):
        pytest.skip("needs root, unshare and setpriv (mount namespaces, another user)")


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A directory another user may enter (pytest's tmp_path is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="gpuslice-i17-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_a_second_up_on_one_data_directory_is_refused_and_touches_nothing(
    platform: Platform,
) -> None:
    login_before = Path(platform.env["GPUSLICE_CLIENT_CONFIG"]).read_text()
    first = platform.processes[0]
    other_port = platform.port + 1 if platform.port < 65535 else platform.port - 1
    argv = platform.up_argv()
    argv[argv.index("--port") + 1] = str(other_port)
    message = one_line_failure(argv, platform.env)
    assert message == (
        f"gpuslice up is already running on {platform.data_dir} (pid {first.popen.pid}, port "
        f"{platform.port}): use it ({platform.url}), or stop it first (Ctrl-C where it runs, "
        f"or `kill {first.popen.pid}`)"
    )
    # The first one's login, node credential and agent are as they were: it runs sessions.
    assert Path(platform.env["GPUSLICE_CLIENT_CONFIG"]).read_text() == login_before
    session = json.loads(platform.ok("session", "create", "--name", "still", *SMALL, "--wait",
                                     "--json"))[0]
    assert session["status"] == "RUNNING"
    nodes = json.loads(platform.ok("node", "list", "--json"))
    assert [(n["name"], n["status"]) for n in nodes] == [(platform.node, "ALIVE")]
    assert "agent: the manager no longer accepts" not in first.output


def test_up_after_a_sigkill_recovers_its_lock_and_readopts_its_sessions(
    platform: Platform,
) -> None:
    created = json.loads(platform.ok("session", "create", "--name", "keep", "--gpu", "0.5",
                                     *SMALL, "--count", "2", "--wait", "--json"))
    before = {s["name"]: platform.wait_status(s["name"], {"RUNNING"}) for s in created}
    killed_pid = platform.processes[-1].popen.pid
    again = restart_up(platform, signal.SIGKILL)
    assert (f"the last gpuslice up on {platform.data_dir} (pid {killed_pid}) did not stop "
            "cleanly (killed?): picking up its sessions") in again.output
    for name, session in before.items():
        after = platform.wait_status(name, {"RUNNING"})
        assert after["placement"] == session["placement"]
        assert len(after["history"]) == len(session["history"])  # never left RUNNING
    assert "hi" in platform.ok("session", "exec", "keep-2", "--", "echo", "hi")
    listed = json.loads(platform.ok("session", "list", "--json"))
    assert listed["total"] == 2  # none duplicated


def test_up_on_a_port_in_use(base_image: str, tmp_path: Path) -> None:
    plat = new_platform(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", plat.port))
        taken.listen()
        message = one_line_failure(plat.up_argv(), plat.env)
    assert message == f"port {plat.port} on 127.0.0.1 is in use: pick another with --port"
    assert not Path(plat.env["GPUSLICE_CLIENT_CONFIG"]).exists()  # the CLI's login untouched


def test_up_with_a_data_directory_it_cannot_write(shared_tmp: Path) -> None:
    needs_root()
    locked = shared_tmp / "root-only"
    locked.mkdir(mode=0o755)
    env = _env_for_nobody(shared_tmp)
    message = one_line_failure([*AS_NOBODY, GPUSLICE, "up", "--data-dir", str(locked / "data")],
                               env)
    assert message == (f"cannot write to the data directory {locked / 'data'} (permission "
                       "denied): fix its permissions, or pick one you own with --data-dir")


@pytest.mark.parametrize(("mount", "expected"), [
    ("ro", "the data directory {d} is on a read-only filesystem: pick another with --data-dir"),
    ("full", "the data directory {d} is full (no space left): free some space, or pick "
             "another with --data-dir"),
])
def test_up_with_a_read_only_or_full_data_directory(
    tmp_path: Path, mount: str, expected: str
) -> None:
    needs_root()
    data = tmp_path / "data"
    data.mkdir()
    options = "ro,size=1m" if mount == "ro" else "size=1m"
    fill = f" && (dd if=/dev/zero of={data}/fill bs=64k 2>/dev/null || true)" \
        if mount == "full" else ""
    script = f'mount -t tmpfs -o {options} none {data}{fill} && exec "$@"'
    argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
            GPUSLICE, "up", "--data-dir", str(data)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSLICE_")}
    env["GPUSLICE_CLIENT_CONFIG"] = str(tmp_path / "client.json")
    assert one_line_failure(argv, env) == expected.format(d=data)


def test_up_without_a_docker_engine(tmp_path: Path) -> None:
    needs_root()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GPUSLICE_", "DOCKER_"))} | {
        "GPUSLICE_CLIENT_CONFIG": str(tmp_path / "client.json"), "HOME": str(tmp_path)}
    # Docker's sockets hidden in a mount namespace of this test's own: as if never started.
    hide = 'mount -t tmpfs none /run && { [ -L /var/run ] || mount -t tmpfs none /var/run; }'
    up = [GPUSLICE, "up", "--data-dir", str(tmp_path / "data")]

    def hidden(path: str = "$PATH") -> list[str]:
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                f'{hide} && PATH="{path}" exec "$@"', "sh", *up]

    start = "start it (`sudo systemctl start docker`; `make up` installs and starts it)"
    assert one_line_failure(hidden(), env) == (
        f"the Docker Engine is not running (no socket at /var/run/docker.sock): {start}")
    # ... and with no Docker programs on the PATH either: not installed
    assert one_line_failure(hidden(str(Path(GPUSLICE).parent)), env).startswith(
        "the Docker Engine is not installed on this machine: install it")
    assert not Path(env["GPUSLICE_CLIENT_CONFIG"]).exists()


def test_up_with_a_stopped_docker_engine(tmp_path: Path) -> None:
    dead = tmp_path / "docker.sock"  # a socket nobody listens on: dockerd stopped uncleanly
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(dead))
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSLICE_")} | {
        "GPUSLICE_CLIENT_CONFIG": str(tmp_path / "client.json"), "DOCKER_HOST": f"unix://{dead}"}
    message = one_line_failure([GPUSLICE, "up", "--data-dir", str(tmp_path / "data")], env)
    assert message == (f"the Docker Engine is not running (nothing answers at unix://{dead}): "
                       "start it (`sudo systemctl start docker`; `make up` installs and starts "
                       "it)")


def test_up_with_a_docker_socket_it_may_not_use(shared_tmp: Path) -> None:
    needs_root()
    path = shared_tmp / "docker.sock"
    with socket.socket(socket.AF_UNIX) as sock:  # root's, mode 0660: as Debian's docker.sock
        sock.bind(str(path))
        sock.listen()
        path.chmod(stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IWGRP)
        env = _env_for_nobody(shared_tmp) | {"DOCKER_HOST": f"unix://{path}"}
        message = one_line_failure(
            [*AS_NOBODY, GPUSLICE, "up", "--data-dir", str(shared_tmp / "home" / "data")], env)
    assert message == (
        f"you may not use the Docker Engine at {path} (permission denied): add yourself to the "
        "docker group (`sudo usermod -aG docker $USER`, then log in again) or run gpuslice as "
        "root")


def test_up_joins_again_when_its_node_credential_is_lost_or_damaged(
    platform: Platform,
) -> None:
    platform.ok("session", "create", "--name", "box", *SMALL, "--wait")
    before = platform.wait_status("box", {"RUNNING"})
    credential = platform.data_dir / "agent" / "credential.json"
    for damage in ("lost", "damaged"):
        up = platform.processes.pop()
        up.stop()
        if damage == "lost":
            credential.unlink()
        else:
            credential.write_text('{"manager_url": "http://127.0.0.1:1", "node_id"')
        platform.processes.append(Process(up.argv, up.env))
        platform.processes[-1].wait_for(f"agent {platform.node}: joined")
        after = platform.wait_status("box", {"RUNNING"})
        assert after["placement"] == before["placement"], damage
        assert len(after["history"]) == len(before["history"]), damage
        assert json.loads(credential.read_text())["node_id"] == \
            before["placement"]["node_id"]
    assert "hi" in platform.ok("session", "exec", "box", "--", "echo", "hi")


def test_ctrl_c_while_following_logs_ends_quietly(platform: Platform) -> None:
    platform.ok("session", "create", "--name", "talk", *SMALL, "--type", "batch", "--command",
                "sh -c 'i=0; while true; do i=$((i+1)); echo tick $i; sleep 0.2; done'")
    platform.wait_status("talk", {"RUNNING"})
    follow = subprocess.Popen([GPUSLICE, "session", "logs", "-f", "--tail", "1", "talk"],
                              env=platform.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    assert follow.stdout is not None
    assert "tick" in follow.stdout.readline()  # the one line of the tail
    assert "tick" in follow.stdout.readline()  # a line the follow loop printed: inside it
    follow.send_signal(signal.SIGINT)
    out, err = follow.communicate(timeout=scaled(20))
    assert follow.returncode == 130
    assert err == "" and "Traceback" not in out


def _env_for_nobody(base: Path) -> dict[str, str]:
    home = base / "home"
    home.mkdir(exist_ok=True)
    os.chown(home, 65534, 65534)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUSLICE_", "DOCKER_"))}
    return env | {"HOME": str(home), "GPUSLICE_CLIENT_CONFIG": str(home / "client.json"),
                  "XDG_CONFIG_HOME": str(home / ".config")}

