"""Port forwarding as people use it: `gpuslice session port-forward` against `gpuslice up`, a
real session running a TCP echo server, bytes through the manager and the agent's link."""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import subprocess
import threading
import uuid

import httpx
import pytest
import websockets.sync.client as ws_client
from websockets.exceptions import InvalidStatus

from gpuslice.client import Client
from tests.platform.conftest import GPUSLICE, Platform, Process
from tests.ports import free_port
from tests.waits import scaled, wait_for

pytestmark = pytest.mark.docker

MiB = 1024 * 1024
ECHO_PORT = 5000
LOOPBACK_PORT = 5002
# A threaded echo server: each connection gets its bytes back, and a half-close once it
# half-closed; started detached so that the exec that starts it returns.
ECHO = """
import socket, threading
server = socket.create_server((HOST, PORT), reuse_port=True)
def serve(conn):
    while data := conn.recv(1 << 20):
        conn.sendall(data)
    conn.shutdown(socket.SHUT_WR)
    conn.close()
while True:
    conn, _ = server.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""
# Starts ARGV... detached and returns once PORT answers.
LAUNCH = """
import socket, subprocess, sys, time
subprocess.Popen(sys.argv[2:], start_new_session=True,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
for _ in range(100):
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1).close()
        break
    except OSError:
        time.sleep(0.1)
"""
# Stops the processes whose command line holds ARGV[1].
STOP = """
import os, sys
for pid in filter(str.isdigit, os.listdir("/proc")):
    command = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\\0", b" ")
    if int(pid) != os.getpid() and sys.argv[1].encode() in command:
        os.kill(int(pid), 15)
"""


def start(client: Client, sid: str, port: int, *argv: str) -> None:
    """Run ``argv`` in the session, detached, until it answers on ``port``."""
    done = client.exec(sid, ["python3", "-c", LAUNCH, str(port), *argv])
    assert done.exit_code == 0, done.stderr


def start_echo(client: Client, sid: str, port: int = ECHO_PORT, host: str = "0.0.0.0") -> None:
    code = ECHO.replace("PORT", str(port)).replace("HOST", repr(host))
    start(client, sid, port, "python3", "-c", code)


def apps(plat: Platform, session: str) -> dict[str, dict[str, object]]:
    listed = json.loads(plat.ok("app", "list", session, "--json"))
    return {str(a["name"]): a for a in listed}


def wait_app(plat: Platform, session: str, name: str) -> dict[str, dict[str, object]]:
    """The session's apps once ``name`` is among them."""
    def listed() -> dict[str, dict[str, object]] | None:
        found = apps(plat, session)
        return found if name in found else None

    return wait_for(listed, 30, f"app {name} of {session}", interval=0.5)


def test_a_server_started_in_the_session_is_an_app_until_it_stops(
    shared_platform: Platform, base_image: str,
) -> None:
    plat, client = shared_platform, shared_platform.client()
    sid = plat.session("served", base_image, "--cpu", "0.5", "--mem", "256m")
    start(client, sid, 8000, "python3", "-m", "http.server", "8000")
    start(client, sid, 8001, "python3", "-m", "http.server", "8001", "--bind", "127.0.0.1")

    listed = wait_app(plat, "served", "8000")
    app = listed["8000"]
    assert app["port"] == 8000 and app["state"] == "ready" and app["discovered"] is True
    assert app["process"] == "python3" and "http.server 8000" in str(app["command"])
    assert str(app["url"]).startswith(f"http://8000--{sid}.")  # its own origin, as any app
    assert "8001" not in listed  # on the session's loopback alone: its own business
    assert list(listed)[0] == "terminal"
    table = plat.ok("app", "list", "served")
    assert re.search(r"8000\W+ready\W+8000\W+python3", table), table

    assert client.exec(sid, ["python3", "-c", STOP, "http.server 8000"]).exit_code == 0
    wait_for(lambda: "8000" not in apps(plat, "served"), 30, "port 8000 to leave the apps",
             interval=0.5)


def test_a_declared_app_keeps_its_place_and_its_port_is_not_listed_twice(
    shared_platform: Platform, apps_image: str,
) -> None:
    plat, client = shared_platform, shared_platform.client()
    sid = plat.session("declared", apps_image, "--cpu", "0.5", "--mem", "256m")
    client.start_app(sid, "echo")
    start(client, sid, 7000, "python3", "-m", "http.server", "7000")
    listed = wait_app(plat, "declared", "7000")
    echo = listed["echo"]
    assert echo["discovered"] is False and echo["process"] == "python3"
    assert [a["port"] for a in listed.values()].count(echo["port"]) == 1
    assert list(listed) == ["terminal", "echo", "slow", "broken", "7000"]


def forward(plat: Platform, *args: str, count: int = 1) -> tuple[Process, list[int]]:
    """`gpuslice session port-forward ARGS` running, and the local ports it listens on (of
    ``count`` forwards), in the order given."""
    process = Process([GPUSLICE, "session", "port-forward", *args], plat.env)
    plat.processes.append(process)  # stopped with the platform if the test fails
    wait_for(lambda: sum("Forwarding from" in line for line in process.lines) >= count
             or process.popen.poll() is not None, 60, "the forwards")
    ports = [int(found.group(1)) for line in process.lines
             if (found := re.search(r"127\.0\.0\.1:(\d+) -> ", line))]
    assert len(ports) == count, process.output
    return process, ports


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=scaled(120))


def test_an_echo_and_100_mib_pass_byte_for_byte_and_forwarding_ends_with_the_session(
    shared_platform: Platform, base_image: str,
) -> None:
    plat = shared_platform
    sid = plat.session("fwd", base_image, "--cpu", "0.5", "--mem", "256m")
    start_echo(plat.client(), sid)
    # and one on the session's loopback alone (as `mlflow ui` and many debuggers listen)
    start_echo(plat.client(), sid, LOOPBACK_PORT, "127.0.0.1")
    local = free_port()
    process, [port, loopback] = forward(plat, "fwd", f"{local}:{ECHO_PORT}",
                                        f"0:{LOOPBACK_PORT}", "--address", "127.0.0.1",
                                        count=2)
    assert port == local
    with connect(loopback) as conn:
        conn.sendall(b"on loopback\n")
        assert receive_exactly(conn, 12) == b"on loopback\n"

    with connect(port) as conn:
        conn.sendall(b"hello through the platform\n")
        assert receive_exactly(conn, 27) == b"hello through the platform\n"

    sent, received = transfer(port, 100 * MiB)
    assert received == sent  # sha256 of the 100 MiB each way

    # stdin/stdout as the one connection (what OpenSSH's ProxyCommand runs)
    piped = subprocess.run([GPUSLICE, "session", "port-forward", "fwd", "--stdio",
                            str(LOOPBACK_PORT)], input=b"over stdio\n", capture_output=True,
                           env=plat.env, timeout=scaled(60))
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout == b"over stdio\n"

    held = connect(port)
    held.sendall(b"x")
    assert receive_exactly(held, 1) == b"x"
    plat.ok("session", "destroy", "fwd")
    process.wait_for("port forwarding stopped", timeout=60)
    assert process.popen.wait(scaled(30)) == 1
    assert re.search(r"session fwd is (TERMINATING|TERMINATED)", process.output), \
        process.output
    held.settimeout(scaled(30))
    try:
        assert held.recv(10) == b""  # the open connection ended too
    except ConnectionResetError:
        pass
    held.close()
    with pytest.raises(ConnectionRefusedError):  # and nothing listens any more
        connect(port).close()


def test_an_agent_of_its_own_process_carries_forwarding_and_apps_on_its_dialled_link(
    split_platform: Platform, base_image: str,
) -> None:
    """`gpuslice up` links its agent in memory; an agent process of its own (any other node)
    dials a WebSocket back: the same bytes, the same small and streamed answers."""
    plat, client = split_platform, split_platform.client()
    sid = plat.session("remote", base_image, "--cpu", "0.5", "--mem", "256m")
    start_echo(client, sid)
    files = ("import os; os.makedirs('/tmp/www'); open('/tmp/www/small', 'w').write('hi'); "
             "open('/tmp/www/big', 'wb').write(bytes(range(256)) * 1024)")
    assert client.exec(sid, ["python3", "-c", files]).exit_code == 0
    start(client, sid, 8000, "python3", "-m", "http.server", "8000", "--directory", "/tmp/www")
    process, [port] = forward(plat, "remote", f"0:{ECHO_PORT}", "--address", "127.0.0.1")
    with connect(port) as conn:
        conn.sendall(b"over the dialled link\n")
        assert receive_exactly(conn, 22) == b"over the dialled link\n"
    sent, received = transfer(port, 16 * MiB)
    assert received == sent
    process.stop()

    app = {"Authorization": f"Bearer {client.token}",
           "Host": f"8000--{sid}.apps.localhost:{plat.port}"}
    small = httpx.get(f"{plat.url}/small", headers=app, timeout=scaled(60))  # one message
    assert (small.status_code, small.text) == (200, "hi")
    big = httpx.get(f"{plat.url}/big", headers=app, timeout=scaled(60))  # 256 KiB, streamed
    assert big.status_code == 200 and big.content == bytes(range(256)) * 1024


def test_port_forwarding_is_refused_to_others_and_for_what_does_not_run(
    shared_platform: Platform, base_image: str,
) -> None:
    plat = shared_platform
    sid = plat.session("fwd-mine", base_image, "--cpu", "0.5", "--mem", "256m")
    url = "ws" + plat.url.removeprefix("http") + f"/api/v1/sessions/{sid}/ports/{ECHO_PORT}"
    assert upgrade_status(url, {}) == 401

    name = f"carol-{uuid.uuid4().hex[:6]}"
    plat.ok("admin", "user", "create", name, "--password", "carol-password")
    carol, _ = plat.login(name, "carol-password")
    assert upgrade_status(url, {"Authorization": f"Bearer {carol}"}) == 404
    as_carol = plat.env | {"GPUSLICE_TOKEN": carol, "GPUSLICE_URL": plat.url}
    refused = subprocess.run([GPUSLICE, "session", "port-forward", sid, "5000"], text=True,
                             capture_output=True, env=as_carol, timeout=scaled(60))
    assert refused.returncode == 1
    assert "no session" in refused.stderr.lower() and "Traceback" not in refused.stderr

    owner = {"Authorization": f"Bearer {plat.client().token}"}
    assert upgrade_status(url.replace(f"/{ECHO_PORT}", "/70000"), owner) == 422
    # nothing listens on the port yet: a connection is refused with the reason, in one line
    process, [port] = forward(plat, "fwd-mine", f"0:{ECHO_PORT}")
    with connect(port) as conn:
        assert conn.recv(10) == b""
    process.wait_for(f"a connection to port {ECHO_PORT} failed: nothing accepts connections")
    process.stop()

    plat.ok("session", "destroy", "fwd-mine")
    plat.wait_status(sid, {"TERMINATED"})
    assert upgrade_status(url, owner) == 409
    ended = plat.cli("session", "port-forward", sid, "5000")
    assert ended.returncode == 1
    assert "TERMINATED: its ports are reached once it runs" in ended.stderr
    bad = plat.cli("session", "port-forward", sid, "http")
    assert bad.returncode == 2 and "give PORT or LOCAL:REMOTE" in bad.stderr


def upgrade_status(url: str, headers: dict[str, str]) -> int:
    try:
        with ws_client.connect(url, additional_headers=headers, open_timeout=scaled(60)):
            return 101
    except InvalidStatus as refused:
        return refused.response.status_code


def receive_exactly(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        assert chunk, f"the connection ended after {len(data)} of {size} bytes"
        data += chunk
    return data


def transfer(port: int, size: int) -> tuple[str, str]:
    """Send ``size`` random bytes to the echo server while reading its answer: the sha256 of
    what went and of what came back."""
    sent = hashlib.sha256()
    with connect(port) as conn:
        def send() -> None:
            left = size
            while left:
                block = os.urandom(min(MiB, left))
                sent.update(block)
                conn.sendall(block)
                left -= len(block)
            conn.shutdown(socket.SHUT_WR)

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        received, count = hashlib.sha256(), 0
        while chunk := conn.recv(MiB):
            received.update(chunk)
            count += len(chunk)
        sender.join(scaled(60))
    assert count == size, f"{count} bytes came back of {size}"
    wait_for(lambda: not sender.is_alive(), 10, "the sender to finish")
    return sent.hexdigest(), received.hexdigest()
