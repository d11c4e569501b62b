"""Connections that last: an idle terminal kept open by pings through proxies that drop quiet
WebSockets, and a streaming answer whose pieces come far apart, on a manager and an agent as
separate processes.

Timeouts are shortened so that the test takes seconds, not hours: the manager pings every
second, the proxies in front of it (one on the person's side, one on the agent's) drop a
WebSocket quiet for 3 s, the terminal stays idle for 4 times that, and the answer's pieces
come 8 s apart (its link through the agent's proxy would be dropped after 3 quiet seconds but
for the pings). The same holds for the defaults (pings every 20 s) behind proxies that wait a
minute, for as long as one likes.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gpuslice.client import Client
from tests.platform import origins
from tests.platform.conftest import Platform, run_split
from tests.platform.quiet_proxy import QuietProxy
from tests.ports import free_port
from tests.waits import scaled

pytestmark = [pytest.mark.docker, pytest.mark.slow]

QUIET = 3.0  # seconds a proxy lets a WebSocket be silent
IDLE = 4 * QUIET
CHUNKS, EVERY = 4, 8  # the streamed answer: a line every 8 s (well past QUIET), 24 s in all


@pytest.fixture
def proxied(base_image: str, tmp_path: Path) -> Iterator[tuple[Platform, QuietProxy]]:
    """A split platform whose agent reaches the manager through a quiet-dropping proxy; the
    person's proxy is the second value."""
    port = free_port()
    agents_side, persons_side = QuietProxy(port, QUIET), QuietProxy(port, QUIET)
    settings = {"GPUSLICE_APPS__PING_INTERVAL": "1", "GPUSLICE_APPS__PING_TIMEOUT": "5"}
    try:
        yield from ((plat, persons_side) for plat in run_split(
            tmp_path, settings, port=port, agent_url=agents_side.url))
    finally:
        agents_side.close()
        persons_side.close()


def test_idle_terminals_stay_open_and_long_answers_are_not_cut(
    proxied: tuple[Platform, QuietProxy], apps_image: str
) -> None:
    plat, proxy = proxied
    assert proxy_drops_a_quiet_websocket(proxy)
    sid = plat.session("long", apps_image, "--cpu", "0.25", "--mem", "256m")
    client = plat.client()
    client.start_app(sid, "echo")

    streamed: list[tuple[float, bytes]] = []
    url = f"{plat.url}/stream?chunks={CHUNKS}&every={EVERY}"  # at the app's origin
    stream = threading.Thread(target=read_stream,
                              args=(client, url, origins.host(plat, sid, "echo"), streamed))
    stream.start()  # a line every EVERY seconds, while the terminal idles

    behind_proxy = Client(proxy.url, client.token)
    with behind_proxy.terminal(sid) as term:
        term.write(b"printf 'pid=%s.\\n' $$\n")
        pid = wait_for(term, rb"pid=(\d+)\.").group(1)
        time.sleep(IDLE)  # nothing typed, nothing printed: only pings cross the proxies
        term.write(b"printf 'still=%s.\\n' $$\n")
        assert wait_for(term, rb"still=(\d+)\.").group(1) == pid
    stream.join(scaled(CHUNKS * EVERY + 60))
    assert [line.split()[1] for _, line in streamed] == [str(i).encode() for i in range(CHUNKS)]
    assert streamed[-1][0] - streamed[0][0] >= (CHUNKS - 1) * EVERY - 1


def read_stream(client: Client, url: str, host: str,
                lines: list[tuple[float, bytes]]) -> None:
    headers = {"Authorization": f"Bearer {client.token}", "Host": host}
    with httpx.stream("GET", url, headers=headers, timeout=httpx.Timeout(10, read=None)) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            lines.append((time.monotonic(), line.encode()))


def wait_for(term: object, pattern: bytes, timeout: float = 30.0) -> re.Match[bytes]:
    seen = b""
    deadline = time.monotonic() + scaled(timeout)
    while (found := re.search(pattern, seen)) is None:
        assert time.monotonic() < deadline, f"no {pattern!r} in {seen[-1000:]!r}"
        data = term.read(timeout=1.0)  # type: ignore[attr-defined]
        assert data is not None, f"the terminal ended: {seen[-1000:]!r}"
        seen += data
    return found


def proxy_drops_a_quiet_websocket(proxy: QuietProxy) -> bool:
    """The proxy really drops a WebSocket-looking connection that stays quiet."""
    with socket.create_connection(("127.0.0.1", proxy.port)) as conn:
        conn.sendall(b"GET /api/v1/health HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\r\n")
        bound = QUIET + scaled(2 * QUIET)  # its look at the clock may come late when loaded
        conn.settimeout(bound)
        started = time.monotonic()
        while conn.recv(65536):
            pass
        return QUIET <= time.monotonic() - started < bound
