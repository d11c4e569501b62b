"""Real receivers for the notification tests, on 127.0.0.1 free ports: an HTTP server that
records each POST and answers from a script (``500, 500, 200``; ``(429, {"Retry-After":
"1"})``), and an SMTP server (aiosmtpd) that keeps each message."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from aiosmtpd.controller import Controller

from tests.ports import free_port
from tests.waits import Deadline

Answer = int | tuple[int, dict[str, str]]


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float  # time.monotonic() when it came


@dataclass
class Receiver:
    """What came in; ``script``: the next answers (then 200s)."""

    port: int = 0
    script: list[Answer] = field(default_factory=list)
    posts: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def answer(self) -> Answer:
        with self.lock:
            return self.script.pop(0) if self.script else 200

    async def wait(self, count: int, timeout: float = 10.0) -> list[Received]:
        """The first ``count`` posts, once they came (AssertionError if not in time)."""
        deadline = Deadline(timeout)
        while len(self.posts) < count:
            if deadline.passed:
                raise AssertionError(f"{len(self.posts)} of {count} posts in "
                                     f"{deadline.seconds:.0f}s: {self.posts}")
            await asyncio.sleep(0.02)
        return self.posts[:count]


@contextmanager
def http_receiver(port: int = 0, script: list[Answer] | None = None) -> Iterator[Receiver]:
    receiver = Receiver(script=list(script or []))

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 -- http.server's name
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            answer = receiver.answer()
            code, headers = answer if isinstance(answer, tuple) else (answer, {})
            with receiver.lock:
                receiver.posts.append(Received(
                    self.path, {k.lower(): v for k, v in self.headers.items()}, body,
                    time.monotonic()))
            self.send_response(code)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("content-length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    receiver.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()


class _Keeper:
    def __init__(self) -> None:
        self.messages: list[tuple[list[str], Message]] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802
        self.messages.append((list(envelope.rcpt_tos), message_from_bytes(envelope.content)))
        return "250 Message accepted for delivery"


@dataclass
class Mailbox:
    port: int
    keeper: _Keeper

    @property
    def messages(self) -> list[tuple[list[str], Message]]:
        return self.keeper.messages

    async def wait(self, count: int, timeout: float = 10.0) -> list[tuple[list[str], Message]]:
        deadline = Deadline(timeout)
        while len(self.messages) < count:
            if deadline.passed:
                raise AssertionError(f"{len(self.messages)} of {count} mails in "
                                     f"{deadline.seconds:.0f}s")
            await asyncio.sleep(0.02)
        return self.messages[:count]


@contextmanager
def smtp_server() -> Iterator[Mailbox]:
    keeper = _Keeper()
    port = free_port()
    controller = Controller(keeper, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield Mailbox(port, keeper)
    finally:
        controller.stop()
