"""SSH into sessions with the real OpenSSH client (issue 31): `gpuslice ssh-key add`, then
`gpuslice session ssh` and plain `ssh`/`scp`/`sftp`/`rsync` through `gpuslice ssh-config`'s
block, as a user types them. The server side is the real one too: the base image's sshd, run
by the agent as `sshd -i` per connection.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import aiodocker
import pytest

from gpuslice.imagebuild.base import build_context_image
from tests.waits import scaled

from . import app_image
from .conftest import Platform
from .users import as_user

pytestmark = [
    pytest.mark.docker,
    pytest.mark.skipif(shutil.which("ssh") is None or shutil.which("rsync") is None,
                       reason="needs OpenSSH's client and rsync (tools/host-setup.sh)"),
]
SMALL = ["--cpu", "0.25", "--mem", "256m"]
TRICKY = 'TRICKY=say "hi" \\ to $HOME # now'
NO_SSHD = """ARG BASE_IMAGE
FROM ${BASE_IMAGE}
USER root
RUN rm -f /usr/sbin/sshd
USER 1000:1000
"""


@pytest.fixture
def platform(shared_platform: Platform) -> Platform:
    return shared_platform


@pytest.fixture
def user(platform: Platform, tmp_path: Path) -> Iterator[tuple[Platform, Path]]:
    """A new user of the platform, with a key pair of their own registered."""
    alice = as_user(platform, f"u{uuid.uuid4().hex[:8]}")
    key = _keypair(tmp_path, "alice")
    alice.ok("ssh-key", "add", f"{key}.pub")
    yield alice, key


def test_ssh_runs_a_command_with_the_terminals_slice_and_environment(
        user: tuple[Platform, Path]) -> None:
    """`gpuslice session ssh S -- CMD` shows the slice (nvidia-smi, GPUSLICE_*), with the very
    variables an exec (the web terminal's way in) gets."""
    alice, key = user
    alice.session("box", "gpuslice/base:0.1.0", "--gpu", "0.5", "--env", TRICKY, *SMALL)
    shown = alice.cli("session", "ssh", "box", "-i", str(key), "--", "nvidia-smi")
    assert shown.returncode == 0, shown.stderr
    assert "0.5 fGPU" in shown.stdout and "2048 MiB" in shown.stdout
    env_cmd = "env | grep -E '^(GPUSLICE_|CUDA_|PATH=|PYTHONPATH=|TRICKY=)' | sort"
    over_ssh = alice.cli("session", "ssh", "box", "-i", str(key), "--", env_cmd)
    assert over_ssh.returncode == 0, over_ssh.stderr
    by_exec = alice.ok("session", "exec", "box", "--", "sh", "-c", env_cmd)
    assert "GPUSLICE_FGPU=0.5\n" in over_ssh.stdout
    assert f"{TRICKY}\n" in over_ssh.stdout  # quotes, a backslash, a $ and a # as they were
    assert "PYTHONPATH=/opt/gpuslice/hook" in over_ssh.stdout  # the framework caps' hook
    assert over_ssh.stdout == by_exec
    failed = alice.cli("session", "ssh", "box", "-i", str(key), "--", "exit 7")
    assert failed.returncode == 7


def test_scp_sftp_and_a_resumed_rsync_through_the_ssh_config_block(
        user: tuple[Platform, Path], tmp_path: Path) -> None:
    """`gpuslice ssh-config --install`, then plain OpenSSH by the session's name."""
    alice, key = user
    alice.session("data", "gpuslice/base:0.1.0", "--gpu", "0", *SMALL)
    home = tmp_path / "home"
    env = {"HOME": str(home)}
    done = alice.cli("ssh-config", "--install", env_extra=env)
    assert done.returncode == 0, done.stderr
    config = home / ".ssh" / "config"
    assert "Host *.gpuslice" in config.read_text()
    config.write_text(config.read_text() + f"Host *\n    IdentityFile {key}\n"
                      "    IdentitiesOnly yes\n")
    assert alice.cli("ssh-config", "--install", env_extra=env).returncode == 0
    assert config.read_text().count("Host *.gpuslice") == 1  # replaced, the rest kept
    assert f"IdentityFile {key}" in config.read_text()

    def run(*argv: str, stdin: str | None = None) -> str:
        # OpenSSH reads the config of the passwd entry's home, not $HOME: named here.
        if argv[0] in ("ssh", "scp", "sftp"):
            argv = (argv[0], "-F", str(config), *argv[1:])
        elif argv[0] == "rsync":
            argv = (argv[0], "-e", f"ssh -F {config}", *argv[1:])
        done = subprocess.run(argv, env=alice.env | env, capture_output=True, text=True,
                              input=stdin, timeout=scaled(120))
        assert done.returncode == 0, f"{argv}: {done.stderr}"
        return done.stdout

    assert run("ssh", "data.gpuslice", "echo $GPUSLICE_SESSION_ID").strip()
    payload = (uuid.uuid4().bytes * 100_000)[:1_500_000]
    local = tmp_path / "weights.bin"
    local.write_bytes(payload)
    run("scp", str(local), "data.gpuslice:up.bin")
    run("scp", "data.gpuslice:up.bin", str(tmp_path / "scp-back.bin"))
    assert (tmp_path / "scp-back.bin").read_bytes() == payload
    batch = tmp_path / "batch"
    batch.write_text(f"put {local} sftp.bin\nget sftp.bin {tmp_path / 'sftp-back.bin'}\n")
    run("sftp", "-b", str(batch), "data.gpuslice")
    assert (tmp_path / "sftp-back.bin").read_bytes() == payload

    # A transfer cut short: a third of the file there; rsync sends only the rest.
    (tmp_path / "part.bin").write_bytes(payload[:500_000])
    run("scp", str(tmp_path / "part.bin"), "data.gpuslice:resumed.bin")
    stats = run("rsync", "--append-verify", "--stats", str(local), "data.gpuslice:resumed.bin")
    assert "Literal data: 1,000,000 bytes" in stats, stats
    assert run("ssh", "data.gpuslice", "sha256sum < resumed.bin").split()[0] == \
        run("sha256sum", str(local)).split()[0]

    # What VS Code Remote-SSH does to reach its server in the session: a TCP channel to a
    # port on the session's loopback, through the SSH connection (ssh -W: direct-tcpip).
    serve = ("nohup python3 -m http.server 8123 --bind 127.0.0.1 >/dev/null 2>&1 & "
             "python3 -c 'import socket, time\nfor _ in range(200):\n    try:\n"
             "        socket.create_connection((\"127.0.0.1\", 8123), 1); break\n"
             "    except OSError: time.sleep(0.1)'")
    alice.ok("session", "exec", "data", "--", "sh", "-c", serve)
    answer = run("ssh", "-W", "127.0.0.1:8123", "data.gpuslice",
                 stdin="GET / HTTP/1.0\r\n\r\n")
    assert answer.startswith("HTTP/1.0 200"), answer[:200]
    assert "up.bin" in answer  # the listing of the session's home


def test_each_sessions_host_key_is_pinned_and_a_reused_name_gets_its_own(
        platform: Platform, user: tuple[Platform, Path], tmp_path: Path) -> None:
    """The block records a session's host key on the first connection and refuses a changed
    one (F3 of the 2026-12 review: it used to check none); the next session of that name has
    a key of its own, and connects."""
    alice, key = user
    first = alice.session("pinned", "gpuslice/base:0.1.0", "--gpu", "0", *SMALL)
    home = tmp_path / "home"
    assert alice.cli("ssh-config", "--install", env_extra={"HOME": str(home)}).returncode == 0
    config = home / ".ssh" / "config"
    config.write_text(config.read_text() + f"Host *\n    IdentityFile {key}\n")

    def ssh(host: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["ssh", "-F", str(config), host, "true"], capture_output=True,
                              text=True, env=alice.env | {"HOME": str(home)},
                              timeout=scaled(120))

    assert ssh("pinned.gpuslice").returncode == 0
    known = Path(alice.env["GPUSLICE_CLIENT_CONFIG"]).parent / "known_hosts"
    recorded = (known / "sessions" / first).read_text()
    assert recorded.startswith("pinned.gpuslice ssh-ed25519 "), recorded
    assert ssh("pinned.gpuslice").returncode == 0  # the same key: still fine
    alice.ok("session", "exec", "pinned", "--", "sh", "-c", "rm /tmp/.gpuslice-sshd/host_*")
    changed = ssh("pinned.gpuslice")  # the next connection's server has a new key
    assert changed.returncode == 255 and "Host key verification failed" in changed.stderr

    alice.ok("session", "destroy", "pinned")
    again = alice.session("pinned", "gpuslice/base:0.1.0", "--gpu", "0", *SMALL)
    assert ssh("pinned.gpuslice").returncode == 0, "a new session of the name: its own key"
    assert (known / "sessions" / again).read_text() != recorded
    assert (known / "sessions" / first).read_text() == recorded

    stranger = alice.cli("ssh-proxy", "pinned.admin.gpuslice")  # NAME.OWNER: the admin's
    assert stranger.returncode != 0 and len(stranger.stderr.strip().splitlines()) == 1
    assert "no session named 'pinned' of user 'admin'" in stranger.stderr, stranger.stderr


def test_a_wrong_key_and_another_users_session_are_refused(
        platform: Platform, user: tuple[Platform, Path], tmp_path: Path) -> None:
    alice, key = user
    private = alice.cli("ssh-key", "add", str(key))
    assert private.returncode == 2
    assert private.stderr.startswith("error: this is a private key: give its public half")
    assert len(private.stderr.strip().splitlines()) == 1 and "PRIVATE" not in private.stderr
    [listed] = json.loads(alice.ok("ssh-key", "list", "--json"))
    assert listed["name"] == "alice" and listed["type"] == "ssh-ed25519"
    sid = alice.session("mine", "gpuslice/base:0.1.0", "--gpu", "0", *SMALL)
    stranger = _keypair(tmp_path, "stranger")
    wrong = alice.cli("session", "ssh", "mine", "-i", str(stranger), "--", "true")
    assert wrong.returncode == 255
    assert "Permission denied (publickey)" in wrong.stderr

    bob = as_user(platform, f"b{uuid.uuid4().hex[:8]}")
    no_key = bob.cli("ssh-proxy", sid)
    assert no_key.returncode != 0
    assert no_key.stderr.strip().startswith("error: no session")  # as if it did not exist
    bob.ok("ssh-key", "add", f"{stranger}.pub")
    theirs = bob.cli("session", "ssh", sid, "-i", str(stranger), "--", "true")
    assert theirs.returncode != 0 and "no session" in theirs.stderr
    assert len(theirs.stderr.strip().splitlines()) == 1, theirs.stderr

    keyless = as_user(platform, f"k{uuid.uuid4().hex[:8]}")
    keyless.session("bare", "gpuslice/base:0.1.0", "--gpu", "0", *SMALL)
    said = keyless.cli("session", "ssh", "bare", "--", "true")
    assert said.returncode == 1
    assert said.stderr.strip() == ("error: you have no SSH key registered: add one with "
                                   "`gpuslice ssh-key add ~/.ssh/id_ed25519.pub` (make one "
                                   "with `ssh-keygen -t ed25519`)")


def test_the_ssh_server_is_reachable_only_through_the_platform(
        user: tuple[Platform, Path]) -> None:
    """Nothing listens in a session, even while an SSH connection is open; no port is
    published; and an sshd a user starts on a port of their own is out of another session's
    reach (the node's session network fence)."""
    alice, key = user
    alice.session("one", "gpuslice/base:0.1.0", "--gpu", "0", *SMALL)
    alice.session("two", "gpuslice/base:0.1.0", "--gpu", "0", *SMALL)
    # Listening TCP sockets but Docker's embedded DNS resolver (127.0.0.11, on a network of
    # the node's own): none.
    listening = ("awk 'NR > 1 && $4 == \"0A\" && $2 !~ /^0B00007F:/' /proc/net/tcp "
                 "/proc/net/tcp6 | wc -l")
    during = alice.cli("session", "ssh", "one", "-i", str(key), "--", listening)
    assert during.returncode == 0, during.stderr
    assert during.stdout.strip() == "0"
    for name in ("one", "two"):
        shown = json.loads(alice.ok("session", "show", name, "--json"))
        ports = _published_ports(shown["id"])
        assert ports == {}, ports

    # A server the user starts themselves in "one", on port 2222, with the same config.
    start = ("/usr/sbin/sshd -f /tmp/.gpuslice-sshd/sshd_config -p 2222 -o ListenAddress=0.0.0.0 "
             "-E /tmp/own-sshd.log; sleep 1; "
             "python3 -c \"import socket; print(socket.gethostbyname(socket.gethostname()))\"")
    address = alice.ok("session", "exec", "one", "--", "sh", "-c", start).split()[-1]
    probe = ("import socket, sys\ntry:\n    s = socket.create_connection((sys.argv[1], 2222), 5)"
             "\n    print(s.recv(64).decode().strip())\nexcept OSError as e:\n"
             "    print('refused:', e)\n")
    inside = alice.ok("session", "exec", "one", "--", "python3", "-c", probe, address)
    assert inside.startswith("SSH-2.0-OpenSSH"), inside  # it runs, and answers there
    across = alice.ok("session", "exec", "two", "--", "python3", "-c", probe, address)
    assert across.startswith("refused:"), across


def test_an_image_without_an_ssh_server_is_said_in_one_line(
        user: tuple[Platform, Path], tmp_path: Path) -> None:
    alice, key = user
    tag = f"gpuslice-test/no-sshd:{uuid.uuid4().hex[:8]}"
    _build(tag, NO_SSHD, "gpuslice/base:0.1.0")
    try:
        sid = alice.session("plain", tag, "--gpu", "0", *SMALL)
        said = alice.cli("session", "ssh", "plain", "-i", str(key), "--", "true")
        assert said.returncode == 1
        assert said.stderr.strip() == (
            f"error: image {tag} has no SSH server (sshd); use `gpuslice session shell plain` "
            "for a shell, or an image built FROM gpuslice/base")
        proxied = alice.cli("ssh-proxy", f"{sid}.gpuslice")
        assert proxied.returncode != 0
        assert proxied.stderr.strip().startswith(f"error: image {tag} has no SSH server")
        assert len(proxied.stderr.strip().splitlines()) == 1, proxied.stderr
    finally:
        alice.cli("session", "destroy", "plain")
        app_image.remove(tag)


def _keypair(tmp_path: Path, name: str) -> Path:
    key = tmp_path / f"id_{name}"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)],
                   check=True, capture_output=True)
    return key


def _published_ports(session_id: str) -> dict:
    info = subprocess.run(["docker", "inspect", f"gpuslice-{session_id}"], capture_output=True,
                          text=True, check=True).stdout
    [container] = json.loads(info)
    bound = container["HostConfig"].get("PortBindings") or {}
    ports = container["NetworkSettings"].get("Ports") or {}
    return {**bound, **{k: v for k, v in ports.items() if v}}


def _build(tag: str, dockerfile: str, base: str) -> None:
    async def run() -> None:
        async with aiodocker.Docker() as docker:
            await build_context_image(docker, {"Dockerfile": dockerfile.encode()}, tag,
                                      build_args={"BASE_IMAGE": base}, labels={},
                                      progress=lambda line: None, prefix="no-sshd")
    asyncio.run(run())

