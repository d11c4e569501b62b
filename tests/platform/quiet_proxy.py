"""A TCP proxy that drops WebSocket connections quiet for a while, like many load balancers
and reverse proxies (nginx's ``proxy_read_timeout``, cloud load balancers' idle timeouts).

Plain HTTP passes untouched (a long-poll may be silent for half a minute); a connection whose
request asks for a WebSocket upgrade is closed after ``idle`` seconds without a byte either
way. Runs its own event loop in a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

from tests.ports import free_port


class QuietProxy:
    def __init__(self, target_port: int, idle: float) -> None:
        self.target_port = target_port
        self.idle = idle
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.dropped = 0  # WebSocket connections it closed for being quiet
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self._ready.wait(10)

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(
            asyncio.start_server(self._serve, "127.0.0.1", self.port))
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        last = [time.monotonic()]
        websocket = [False]

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, first: bool) -> None:
            while data := await src.read(65536):
                if first and b"upgrade: websocket" in data.lower():
                    websocket[0] = True
                first = False
                last[0] = time.monotonic()
                dst.write(data)
                await dst.drain()

        tasks = [asyncio.create_task(pipe(reader, up_writer, True)),
                 asyncio.create_task(pipe(up_reader, writer, False))]
        while not any(t.done() for t in tasks):
            await asyncio.wait(tasks, timeout=0.2)
            if websocket[0] and time.monotonic() - last[0] > self.idle:
                self.dropped += 1
                break
        for task in tasks:
            task.cancel()
        for stream in (writer, up_writer):
            stream.close()
            with contextlib.suppress(Exception):
                await stream.wait_closed()
