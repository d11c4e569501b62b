"""The runtime against a real Docker Engine: limits, labels, files, user, lifecycle, logs."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import aiodocker
import pytest

from gpuslice.agent.runtime import (
    ALLOCATION_PATH,
    LABEL_ALLOCATION,
    ContainerSpec,
    DockerRuntime,
    ImageNotFound,
    RuntimeEvent,
    SessionNotFound,
)
from gpuslice.common.resources import GiB, MiB
from tests.agent.factories import gpu_slice
from tests.waits import scaled

pytestmark = pytest.mark.docker
MakeSpec = Callable[..., ContainerSpec]

CPU_MAX = (
    "cat /sys/fs/cgroup/cpu.max 2>/dev/null || "
    'echo "$(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us) $(cat /sys/fs/cgroup/cpu/cpu.cfs_period_us)"'
)
MEMORY_MAX = (
    "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes"
)


async def wait_finished(runtime: DockerRuntime, session_id: str, timeout: float = 30) -> None:
    async with asyncio.timeout(scaled(timeout)):
        while True:
            state = await runtime.find(session_id)
            if state is not None and state.finished:
                return
            await asyncio.sleep(0.1)


async def test_limits_are_visible_in_the_containers_cgroup(
    runtime: DockerRuntime, make_spec: MakeSpec
) -> None:
    spec = make_spec(cpu=1500, mem=300 * MiB)
    state = await runtime.ensure_running(spec)
    assert state.status == "running"
    cpu = await runtime.exec(spec.session_id, ["sh", "-c", CPU_MAX])
    quota, period = cpu.stdout.split()
    assert int(quota) * 1000 // int(period) == 1500  # 1.5 cores
    memory = await runtime.exec(spec.session_id, ["sh", "-c", MEMORY_MAX])
    assert int(memory.stdout) == 300 * MiB


async def test_labels_allocation_file_and_env_are_right(
    runtime: DockerRuntime, make_spec: MakeSpec
) -> None:
    half = gpu_slice("GPU-mock-1234", 0, 500, 4 * GiB, 54)
    spec = make_spec(slices=(half,), env={"MINE": "yes"})
    state = await runtime.ensure_running(spec)
    assert (state.session_id, state.owner, state.session_type) == (
        spec.session_id,
        "alice",
        "interactive",
    )
    inside = await runtime.exec(spec.session_id, ["cat", ALLOCATION_PATH])
    assert json.loads(inside.stdout) == state.allocation == dict(spec.allocation)
    assert state.allocation["devices"][0]["fraction"] == "0.5"
    env = await runtime.exec(spec.session_id, ["env"])
    lines = set(env.stdout.splitlines())
    assert {
        "CUDA_VISIBLE_DEVICES=GPU-mock-1234",
        "NVIDIA_VISIBLE_DEVICES=GPU-mock-1234",
        "GPUSLICE_GPU_FRACTION=0.5",
        f"GPUSLICE_GPU_MEMORY_BYTES={4 * GiB}",
        f"GPUSLICE_SESSION_ID={spec.session_id}",
        "MINE=yes",
    } <= lines
    async with aiodocker.Docker() as docker:
        info = await docker.containers.container(state.container_id).show()
    assert json.loads(info["Config"]["Labels"][LABEL_ALLOCATION]) == state.allocation


async def test_session_runs_unprivileged_and_cannot_gain_privileges(
    runtime: DockerRuntime, make_spec: MakeSpec
) -> None:
    spec = make_spec()
    state = await runtime.ensure_running(spec)
    ids = await runtime.exec(spec.session_id, ["id", "-u"])
    assert ids.stdout.strip() == "1000"
    status = await runtime.exec(
        spec.session_id, ["grep", "-E", "^(CapEff|NoNewPrivs)", "/proc/1/status"]
    )
    assert "CapEff:\t0000000000000000" in status.stdout
    assert "NoNewPrivs:\t1" in status.stdout
    for user in (None, "0"):  # read-only mounts: not even root in the session can change them
        for path in (ALLOCATION_PATH, "/opt/gpuslice/hook/gpuslice_hook.py"):
            write = await runtime.exec(spec.session_id, ["sh", "-c", f": > {path}"], user=user)
            assert write.exit_code != 0 and "Read-only file system" in write.stderr
    async with aiodocker.Docker() as docker:
        host = (await docker.containers.container(state.container_id).show())["HostConfig"]
    assert host["Privileged"] is False
    assert not any("docker.sock" in str(m) for m in host.get("Mounts") or [])


async def test_framework_hook_caps_torch_inside_the_session(
    runtime: DockerRuntime, make_spec: MakeSpec
) -> None:
    spec = make_spec(slices=(gpu_slice("GPU-mock-1", 0, 250, 2 * GiB, 27),))
    await runtime.ensure_running(spec)
    fake_torch = (
        "mkdir -p /tmp/f/torch && cat > /tmp/f/torch/__init__.py <<'EOF'\n"
        "calls = []\n"
        "class _C:\n"
        "    def is_available(self): return True\n"
        "    def device_count(self): return 1\n"
        "    def set_per_process_memory_fraction(self, f, d): calls.append((f, d))\n"
        "cuda = _C()\n"
        "EOF\n"
        'PYTHONPATH="$PYTHONPATH:/tmp/f" python3 -c "import torch; print(torch.calls)"'
    )
    result = await runtime.exec(spec.session_id, ["sh", "-c", fake_torch])
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == "[(0.25, 0)]"


async def test_the_hook_and_tools_are_one_copy_per_node(
    runtime: DockerRuntime, make_spec: MakeSpec
) -> None:
    """Each session has its own allocation, but the hook and the in-session tools are the
    node's one read-only copy (writing and removing 13 files per session cost the agent ~8%
    of its CPU), kept when a session goes."""
    specs = [make_spec(), make_spec()]
    for spec in specs:
        await runtime.ensure_running(spec)
    [shared] = list((runtime.files_root / "shared").iterdir())
    assert (shared / "opt/gpuslice/hook").is_dir() and (shared / "opt/gpuslice/bin").is_dir()
    for spec in specs:
        own = runtime.files_root / "sessions" / spec.session_id
        assert (own / "etc/gpuslice/allocation.json").is_file()
        assert not (own / "opt/gpuslice/hook").exists()
        seen = await runtime.exec(spec.session_id, ["sh", "-c", (
            "ls /opt/gpuslice/hook | grep -c . && test -x /opt/gpuslice/bin/gpuslice-save && "
            "cat /etc/gpuslice/allocation.json && : > /opt/gpuslice/hook/x"
        )])
        assert seen.exit_code != 0 and "Read-only file system" in seen.stderr
        assert int(seen.stdout.split()[0]) > 0
        assert json.loads(seen.stdout.split("\n", 1)[1]) == dict(spec.allocation)
    await runtime.remove(specs[0].session_id)
    assert shared.is_dir() and not (runtime.files_root / "sessions" / specs[0].session_id).exists()


async def test_interactive_lifecycle_and_no_duplicates(
    runtime: DockerRuntime, make_spec: MakeSpec
) -> None:
    spec = make_spec()
    first = await runtime.ensure_running(spec)
    again = await asyncio.gather(*(runtime.ensure_running(spec) for _ in range(5)))
    assert {s.container_id for s in again} == {first.container_id}
    assert [s.session_id for s in await runtime.list_managed()] == [spec.session_id]

    loop = asyncio.get_running_loop()
    started = loop.time()
    stopped = await runtime.stop(spec.session_id, grace_s=60)
    assert stopped is not None and stopped.finished
    # SIGTERM reaches the session: no wait for the (minute-long) grace, and no SIGKILL after
    # it (exit code 137)
    assert stopped.exit_code != 137, stopped
    assert loop.time() - started < scaled(5)
    assert await runtime.stop(spec.session_id) is not None  # stopping twice is fine

    restarted = await runtime.ensure_running(spec)  # an interactive session comes back
    assert restarted.container_id == first.container_id and restarted.status == "running"

    files = runtime.files_root / "sessions" / spec.session_id
    assert (files / "etc/gpuslice/allocation.json").is_file()
    assert await runtime.remove(spec.session_id) is True
    assert await runtime.find(spec.session_id) is None
    assert not files.exists()  # nothing of the session is left on the node
    assert await runtime.remove(spec.session_id) is False
    assert await runtime.stop(spec.session_id) is None


async def test_batch_exit_code_and_logs_and_never_rerun(
    runtime: DockerRuntime, make_spec: MakeSpec
) -> None:
    spec = make_spec(
        type="batch", command=("sh", "-c", "echo out-line; echo err-line >&2; exit 3")
    )
    await runtime.ensure_running(spec)
    await wait_finished(runtime, spec.session_id)
    state = await runtime.find(spec.session_id)
    assert state is not None and (state.status, state.exit_code) == ("exited", 3)
    logs = await runtime.logs(spec.session_id)
    assert "out-line" in logs and "err-line" in logs

    again = await runtime.ensure_running(spec)
    assert (again.container_id, again.exit_code) == (state.container_id, 3)
    assert (await runtime.logs(spec.session_id)).count("out-line") == 1


async def test_successful_batch_and_log_tail(runtime: DockerRuntime, make_spec: MakeSpec) -> None:
    spec = make_spec(
        type="batch", command=("sh", "-c", "for i in 1 2 3 4 5; do echo line-$i; done")
    )
    await runtime.ensure_running(spec)
    await wait_finished(runtime, spec.session_id)
    state = await runtime.find(spec.session_id)
    assert state is not None and state.exit_code == 0
    assert (await runtime.logs(spec.session_id, tail=2)).split() == ["line-4", "line-5"]


async def test_logs_take_one_engine_call(
    runtime: DockerRuntime, make_spec: MakeSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every session's final logs are fetched as dockerd starts others: no inspect first
    # (aiodocker's log() makes one to learn whether the container has a TTY; ours never do).
    spec = make_spec(type="batch", command=("sh", "-c", "echo out-line; echo err-line >&2"))
    await runtime.ensure_running(spec)
    await wait_finished(runtime, spec.session_id)
    state = await runtime.find(spec.session_id)
    assert state is not None
    calls: list[str] = []
    query = aiodocker.Docker._do_query

    def counted(self: aiodocker.Docker, path: Any, method: str, *args: Any, **kw: Any) -> Any:
        calls.append(f"{method} {path}")
        return query(self, path, method, *args, **kw)

    monkeypatch.setattr(aiodocker.Docker, "_do_query", counted)
    logs = await runtime.logs(spec.session_id, container_id=state.container_id)
    assert sorted(logs.split()) == ["err-line", "out-line"]
    assert calls == [f"GET containers/{state.container_id}/logs"]


async def test_follow_logs_streams_until_the_session_ends(
    runtime: DockerRuntime, make_spec: MakeSpec
) -> None:
    spec = make_spec(
        type="batch", command=("sh", "-c", "for i in 1 2 3; do echo tick-$i; sleep 0.3; done")
    )
    await runtime.ensure_running(spec)
    seen = []
    async with asyncio.timeout(scaled(20)):
        async for chunk in runtime.follow_logs(spec.session_id):
            seen.append(chunk)
    assert "".join(seen).split() == ["tick-1", "tick-2", "tick-3"]


async def test_a_fresh_runtime_adopts_what_runs(
    runtime: DockerRuntime, make_spec: MakeSpec
) -> None:
    spec = make_spec()
    created = await runtime.ensure_running(spec)
    async with DockerRuntime(node_name=runtime.node_name, files_root=runtime.files_root) as fresh:
        managed = await fresh.list_managed()
        assert [(s.session_id, s.status, s.container_id) for s in managed] == [
            (spec.session_id, "running", created.container_id)
        ]
        assert managed[0].allocation == dict(spec.allocation)
        adopted = await fresh.ensure_running(spec)
    assert adopted.container_id == created.container_id


async def test_stats_report_usage_and_limits(runtime: DockerRuntime, make_spec: MakeSpec) -> None:
    spec = make_spec(mem=200 * MiB)
    await runtime.ensure_running(spec)
    stats = await runtime.stats(spec.session_id)
    assert stats is not None
    assert stats.memory_limit == 200 * MiB
    assert 0 < stats.memory_used < 200 * MiB
    assert stats.cpu_ns > 0 and stats.pids >= 1
    assert set(await runtime.stats_all()) == {spec.session_id}


async def test_events_report_start_and_exit_code(
    runtime: DockerRuntime, make_spec: MakeSpec
) -> None:
    spec = make_spec(type="batch", command=("sh", "-c", "exit 7"))
    seen: list[RuntimeEvent] = []

    async def collect() -> None:
        async for event in runtime.events():
            seen.append(event)
            if event.kind == "connected":
                await runtime.ensure_running(spec)
            if event.kind == "die":
                return

    await asyncio.wait_for(collect(), scaled(30))
    kinds = [(e.kind, e.session_id) for e in seen]
    assert kinds == [("connected", ""), ("start", spec.session_id), ("die", spec.session_id)]
    assert seen[-1].exit_code == 7


async def test_missing_image_and_unknown_session_are_clear_errors(
    runtime: DockerRuntime, make_spec: MakeSpec
) -> None:
    with pytest.raises(ImageNotFound, match="not present on this node"):
        await runtime.ensure_running(make_spec(image="gpuslice/does-not-exist:1"))
    with pytest.raises(SessionNotFound):
        await runtime.logs("nobody")
    assert await runtime.find("nobody") is None


async def test_a_container_created_but_never_started_is_started(
    runtime: DockerRuntime, make_spec: MakeSpec
) -> None:
    spec = make_spec()
    created, _ = await runtime._create(spec)  # as if the agent died between create and start
    assert created.status == "created" and created.exit_code is None
    state = await runtime.ensure_running(spec)
    assert (state.container_id, state.status) == (created.container_id, "running")


async def test_a_start_is_not_followed_by_an_inspection(
    runtime: DockerRuntime, make_spec: MakeSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The start returns "running" from the start call alone: a batch that ends at once is
    # finished later from its die event, and a look afterwards tells how it ended.
    spec = make_spec(type="batch", command=("true",))
    seen = _count_inspects(monkeypatch)
    state = await runtime.ensure_running(spec)
    assert (state.status, state.exit_code, seen) == ("running", None, [])
    await wait_finished(runtime, spec.session_id)
    found = await runtime.find(spec.session_id)
    assert found is not None and (found.status, found.exit_code) == ("exited", 0)


async def test_listings_inspect_only_stopped_containers_that_need_it(
    runtime: DockerRuntime, make_spec: MakeSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    clean = make_spec(type="batch", command=("true",))
    failed = make_spec(type="batch", command=("sh", "-c", "exit 3"))
    for spec in (clean, failed):
        await runtime.ensure_running(spec)
        await wait_finished(runtime, spec.session_id)
    shown = _count_inspects(monkeypatch)
    # exit code 0 is in the listing's status; a busy session's container is its step's
    quiet = {s.session_id: s for s in await runtime.list_managed(busy={failed.session_id})}
    assert shown == []
    full = {s.session_id: s for s in await runtime.list_managed()}
    assert len(shown) == 1  # only the one that exited with a code to look up
    assert (quiet[clean.session_id].exit_code, quiet[failed.session_id].exit_code) == (0, None)
    assert quiet[failed.session_id].finished
    assert (full[clean.session_id].exit_code, full[failed.session_id].exit_code) == (0, 3)


def _count_inspects(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ids of the containers inspected from now on (restored after the test)."""
    seen: list[str] = []
    show = aiodocker.containers.DockerContainer.show

    async def counting(self: aiodocker.containers.DockerContainer, **kw: object) -> object:
        seen.append(self.id)
        return await show(self, **kw)

    monkeypatch.setattr(aiodocker.containers.DockerContainer, "show", counting)
    return seen
