"""Reconciliation against a real Docker Engine, including a dockerd restart."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from gpuslice.agent.reconcile import reconcile
from gpuslice.agent.runtime import ContainerSpec, DockerRuntime, RuntimeEvent

from .conftest import can_restart_dockerd, restart_dockerd

pytestmark = pytest.mark.docker
MakeSpec = Callable[..., ContainerSpec]


async def test_reconcile_adopts_creates_and_stops(
    runtime: DockerRuntime, make_spec: MakeSpec
) -> None:
    keep, add, drop = make_spec(), make_spec(), make_spec()
    await runtime.ensure_running(keep)
    await runtime.ensure_running(drop)
    missing_image = make_spec(image="gpuslice/does-not-exist:1")

    result = await reconcile(runtime, [keep, add, missing_image], grace_s=5)

    assert result.adopted == [keep.session_id]
    assert sorted(result.created) == sorted([add.session_id])
    assert result.stopped == [drop.session_id] and result.removed == [drop.session_id]
    assert "not present on this node" in result.errors[missing_image.session_id]
    running = {s.session_id for s in await runtime.list_managed() if s.running}
    assert running == {keep.session_id, add.session_id}

    again = await reconcile(runtime, [keep, add])
    assert sorted(again.adopted) == sorted([keep.session_id, add.session_id])
    assert not (again.created or again.stopped or again.removed or again.errors)


async def test_reconcile_leaves_one_container_per_session(
    runtime: DockerRuntime, make_spec: MakeSpec
) -> None:
    spec = make_spec()
    await runtime.ensure_running(spec)
    # A stray claiming the same session under another name (e.g. made by hand).
    stray_config = spec.create_config()
    docker = runtime._client()
    await docker.containers.create(config=stray_config, name=f"stray-{spec.session_id}")
    assert len(await runtime.list_managed()) == 2

    result = await reconcile(runtime, [spec])

    assert result.removed == [spec.session_id] and result.adopted == [spec.session_id]
    managed = await runtime.list_managed()
    assert [s.name for s in managed] == [spec.name]


async def test_finished_batch_is_not_rerun_by_reconcile(
    runtime: DockerRuntime, make_spec: MakeSpec
) -> None:
    spec = make_spec(type="batch", command=("sh", "-c", "echo once"))
    await runtime.ensure_running(spec)
    async with asyncio.timeout(30):
        while not (state := await runtime.find(spec.session_id)) or not state.finished:
            await asyncio.sleep(0.1)
    result = await reconcile(runtime, [spec])
    assert result.states[spec.session_id].exit_code == 0
    assert (await runtime.logs(spec.session_id)).count("once") == 1


@pytest.mark.slow
async def test_dockerd_restart_runtime_reconnects_and_reconciles(
    runtime: DockerRuntime, make_spec: MakeSpec
) -> None:
    reason = can_restart_dockerd()
    if reason:
        pytest.skip(reason)
    spec = make_spec()
    before = await runtime.ensure_running(spec)
    events: list[RuntimeEvent] = []
    reconnected = asyncio.Event()

    async def watch() -> None:
        async for event in runtime.events():
            events.append(event)
            if event.kind == "connected" and any(e.kind == "disconnected" for e in events):
                reconnected.set()

    watcher = asyncio.create_task(watch())
    try:
        await asyncio.to_thread(restart_dockerd)
        await runtime.wait_ready(timeout=90)  # the same runtime object, no restart of its own
        await asyncio.wait_for(reconnected.wait(), 60)

        # dockerd stopped the session's container on its way down; reconcile starts it again.
        result = await reconcile(runtime, [spec])
        assert result.restarted == [spec.session_id]
        state = result.states[spec.session_id]
        assert state.status == "running" and state.container_id == before.container_id
        probe = await runtime.exec(spec.session_id, ["cat", "/etc/gpuslice/allocation.json"])
        assert probe.exit_code == 0 and spec.session_id in probe.stdout
    finally:
        watcher.cancel()
    kinds = [e.kind for e in events]
    assert kinds[0] == "connected" and "disconnected" in kinds
