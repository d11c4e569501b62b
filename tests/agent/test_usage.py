"""Heartbeats in wire units against the real Docker Engine: no float anywhere, per-session usage
as milli-cores (from two readings) and bytes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import pytest

from gpuslice.agent.accelerators.mock import MockAccelerator
from gpuslice.agent.runtime import ContainerSpec, DockerRuntime
from gpuslice.agent.settings import AgentSettings, MockGpu
from gpuslice.agent.usage import UsageCollector

pytestmark = pytest.mark.docker


def floats_in(value: object) -> list[float]:
    if isinstance(value, float):
        return [value]
    if isinstance(value, dict):
        return [f for v in value.values() for f in floats_in(v)]
    if isinstance(value, list):
        return [f for v in value for f in floats_in(v)]
    return []


async def test_heartbeat_states_usage_in_exact_units(
    runtime: DockerRuntime, make_spec: Callable[..., ContainerSpec]
) -> None:
    busy = make_spec(cpu=500, command=("sh", "-c", "while :; do :; done"))
    await runtime.ensure_running(busy)
    settings = AgentSettings(node_name=runtime.node_name, manager_url="http://manager.test",
                             accelerator="mock", gpu=[MockGpu(model="Mock", memory="8g", sms=8)])
    collector = UsageCollector(
        settings, runtime, MockAccelerator(settings.node_name, settings.gpu)
    )

    first = await collector.heartbeat()
    mine = {u.session_id: u for u in first.usage}[busy.session_id]
    assert mine.cpu is None and mine.mem > 0  # a rate needs two readings
    assert mine.interval_ms is None and mine.at_ms and mine.gpus == []  # no GPU slice
    collector.sent()  # the manager took it
    await asyncio.sleep(1.0)
    lost = await collector.heartbeat()  # never reaches the manager: the next one covers it
    await asyncio.sleep(0.5)
    second = await collector.heartbeat()
    mine = {u.session_id: u for u in second.usage}[busy.session_id]
    assert isinstance(mine.cpu, int) and 0 < mine.cpu <= 600  # a busy loop held to 0.5 cores
    lost_one = {u.session_id: u for u in lost.usage}[busy.session_id]
    assert mine.interval_ms is not None and lost_one.interval_ms is not None
    assert mine.interval_ms > lost_one.interval_ms >= 900  # measured from the reading sent
    assert [d.utilization for d in second.devices] == [0]
    assert floats_in(json.loads(second.model_dump_json())) == []
