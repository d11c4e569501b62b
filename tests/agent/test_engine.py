"""Parsing what the Engine API answers, and the archive of files put into containers."""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from gpuslice.agent.runtime.docker import DockerRuntime, _to_event
from gpuslice.agent.runtime.engine import parse_stats
from gpuslice.agent.runtime.models import ContainerState, ContainerStats
from gpuslice.common.resources import MiB


def test_stats_count_memory_as_docker_stats_does() -> None:
    raw = {
        "read": "2026-01-01T00:00:01.500000000Z",
        "cpu_stats": {"cpu_usage": {"total_usage": 3_000_000_000}},
        "memory_stats": {
            "usage": 300 * MiB,
            "limit": 512 * MiB,
            "stats": {"inactive_file": 100 * MiB},
        },
        "pids_stats": {"current": 7},
    }
    stats = parse_stats("s1", raw)
    assert stats is not None
    assert (stats.memory_used, stats.memory_limit, stats.pids) == (200 * MiB, 512 * MiB, 7)
    v1 = parse_stats(
        "s1", {**raw, "memory_stats": {"usage": 10, "stats": {"total_inactive_file": 4}}}
    )
    assert v1 is not None and v1.memory_used == 6
    earlier = ContainerStats("s1", stats.read_at - 2, 1_000_000_000, 0, 0, 0)
    assert stats.cpu_milli_since(earlier) == 1000  # 2 s of CPU time in 2 s of wall time


def test_cpu_rate_is_whole_milli_cores_rounded_down() -> None:
    later = ContainerStats("s1", 1_700_000_004.0, 1_000_999_999, 0, 0, 0)
    earlier = ContainerStats("s1", 1_700_000_000.0, 0, 0, 0, 0)
    assert later.cpu_milli_since(earlier) == 250  # 1.000999999 s of CPU in 4 s: 250.2…
    assert earlier.cpu_milli_since(later) == 0  # readings out of order: no rate, never negative


def test_die_event_carries_session_and_exit_code() -> None:
    event = _to_event(
        {
            "Type": "container",
            "Action": "die",
            "Actor": {"ID": "c1", "Attributes": {"gpuslice.session-id": "s1", "exitCode": "137"}},
        },
        "a" * 32,
    )
    assert event is not None
    assert (event.kind, event.session_id, event.container_id, event.exit_code) == (
        "die",
        "s1",
        "c1",
        137,
    )
    assert _to_event({"Action": "exec_start: sh", "Actor": {}}, "a" * 32) is None


def test_state_from_inspect_reads_labels_and_exit_code() -> None:
    info = {
        "Id": "c1",
        "Name": "/gpuslice-s1",
        "State": {
            "Status": "exited",
            "ExitCode": 3,
            "OOMKilled": False,
            "StartedAt": "2026-01-01T00:00:00Z",
            "FinishedAt": "2026-01-01T00:00:01Z",
        },
        "Config": {
            "Labels": {
                "gpuslice.session-id": "s1",
                "gpuslice.owner": "bob",
                "gpuslice.session-type": "batch",
                "gpuslice.node": "n",
                "gpuslice.allocation": '{"fgpu": "0.5"}',
            }
        },
    }
    state = ContainerState.from_inspect(info)
    assert (state.session_id, state.name, state.exit_code, state.finished) == (
        "s1",
        "gpuslice-s1",
        3,
        True,
    )
    assert state.allocation == {"fgpu": "0.5"} and state.owner == "bob"
    never_ran = {**info, "State": {"Status": "created", "StartedAt": "0001-01-01T00:00:00Z"}}
    assert ContainerState.from_inspect(never_ran).exit_code is None


def test_a_stats_answer_without_a_reading_is_none() -> None:
    # What dockerd answers for a container that stopped meanwhile: zeros, read at year 1.
    stopped = {"read": "0001-01-01T00:00:00Z", "cpu_stats": {"cpu_usage": {"total_usage": 0}},
               "memory_stats": {}, "pids_stats": {}}
    assert parse_stats("s1", stopped) is None  # unknown, never idle (0 % CPU)
    assert parse_stats("s1", {}) is None


async def test_a_container_gone_during_its_stats_read_is_left_out(tmp_path: Path) -> None:
    # Issue 35, finding 8: a container removed while dockerd read its stats is answered with
    # an empty body (null); the heartbeat's reading raised TypeError in one_shot_stats.
    # dockerd is stood in for at the HTTP edge, on a socket of its own, to answer just that.
    entry = {"Id": "c" * 64, "Names": ["/gpuslice-s1"], "State": "running", "Status": "Up",
             "Labels": {"gpuslice.session-id": "s1", "gpuslice.node": "n"}}

    async def engine(request: web.Request) -> web.Response:
        path = request.path
        if path.endswith("/version"):
            return web.json_response({"ApiVersion": "1.43", "Version": "24.0"})
        if path.endswith("/containers/json"):
            return web.json_response([entry])
        if path.endswith("/stats"):
            return web.Response(body=b"null", content_type="application/json")
        return web.json_response({"message": "no such thing"}, status=404)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", engine)
    runner = web.AppRunner(app)
    await runner.setup()
    socket = tmp_path / "engine.sock"
    await web.UnixSite(runner, str(socket)).start()
    try:
        async with DockerRuntime(node_name="n", files_root=tmp_path / "node",
                                 docker_url=f"unix://{socket}") as runtime:
            assert await runtime.stats_all() == {}
            assert await runtime.stats("s1") is None
    finally:
        await runner.cleanup()
