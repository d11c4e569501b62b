"""The in-process link (``agent/streams/memory.py``): what `gpuslice up`'s manager and its own
agent use instead of a loopback WebSocket. Bytes pass intact and in order both ways, a sender
is held back once a lane is full, and a close reaches the other end as a WebSocket's would."""

from __future__ import annotations

import asyncio
import os

import aiohttp
import pytest

from gpuslice.agent.streams.memory import LANE, pipe
from tests.waits import scaled


async def test_bytes_and_text_pass_intact_and_in_order_both_ways() -> None:
    manager, agent = pipe()
    down = [os.urandom(size) for size in (0, 1, 1000, 1 << 20, 3 << 20)]
    up = [os.urandom(size) for size in (7, 1 << 16, 2 << 20)]

    async def send_down() -> None:
        await manager.send_text('{"op": "tcp", "port": 5000}')
        for chunk in down:
            await manager.send_bytes(chunk)
        await manager.send_text('{"op": "end"}')

    async def send_up() -> None:
        for chunk in up:
            await agent.send_bytes(chunk)
        await agent.send_str('{"op": "end"}')

    async def read_down() -> list[object]:
        return [(await agent.receive()).data for _ in range(len(down) + 2)]

    async def read_up() -> list[object]:
        got = []
        for _ in range(len(up) + 1):
            message = await manager.receive()
            got.append(message.get("bytes", message.get("text")))
        return got

    async with asyncio.timeout(scaled(10)):
        _, _, got_down, got_up = await asyncio.gather(send_down(), send_up(), read_down(),
                                                      read_up())
    assert got_down == ['{"op": "tcp", "port": 5000}', *down, '{"op": "end"}']
    assert got_up == [*up, '{"op": "end"}']


async def test_a_full_lane_holds_the_sender_back_until_the_reader_reads() -> None:
    manager, agent = pipe()
    sent = 0

    async def flood() -> None:
        nonlocal sent
        while True:
            await agent.send_bytes(b"x" * 1024)
            sent += 1

    sender = asyncio.create_task(flood())
    try:
        async with asyncio.timeout(scaled(5)):
            while sent < LANE:
                await asyncio.sleep(0)
        for _ in range(100):  # the sender had every chance to run on: it waits
            await asyncio.sleep(0)
        assert sent == LANE, f"{sent} messages sent with nobody reading (lane of {LANE})"
        assert (await manager.receive())["bytes"] == b"x" * 1024
        async with asyncio.timeout(scaled(5)):
            while sent < LANE + 1:
                await asyncio.sleep(0)
        for _ in range(100):
            await asyncio.sleep(0)
        assert sent == LANE + 1, "one message read lets exactly one more in"
    finally:
        sender.cancel()
        await asyncio.gather(sender, return_exceptions=True)


async def test_a_close_reaches_the_other_end_after_what_was_sent() -> None:
    manager, agent = pipe()
    await agent.send_bytes(b"last words")
    await agent.close(1001)
    assert (await manager.receive()) == {"type": "websocket.receive", "bytes": b"last words"}
    assert (await manager.receive()) == {"type": "websocket.disconnect", "code": 1001}
    with pytest.raises(ConnectionResetError):
        await manager.send_bytes(b"anyone?")

    manager, agent = pipe()
    blocked = [asyncio.create_task(agent.send_bytes(b"y")) for _ in range(LANE + 1)]
    await asyncio.sleep(0)
    await manager.close(1000)  # the agent, stuck on a full lane, is let go with an error
    async with asyncio.timeout(scaled(5)):
        results = await asyncio.gather(*blocked, return_exceptions=True)
    assert isinstance(results[-1], ConnectionResetError)
    assert (await agent.receive()).type is aiohttp.WSMsgType.CLOSED
    assert agent.close_code == 1000


async def test_an_idle_link_times_out_on_the_agent_end() -> None:
    _, agent = pipe()
    with pytest.raises(TimeoutError):
        await agent.receive(timeout=0.05)
