"""Agent-side start latency: ``DockerRuntime.ensure_running`` vs a plain create+start.

Both go through the same Engine API and the same image; the difference is what the runtime
adds (label lookup, image inspection, session files and mounts, limits, a final inspection).
This is the agent's share of ``bench/start_latency.py``'s create→RUNNING budget (≤ 1.3×).

    .venv/bin/python scripts/runtime_latency.py [--runs 15] [--image gpuslice/base:0.1.0]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import aiodocker

from gpuslice import __version__
from gpuslice.agent.runtime import DockerRuntime, SessionSpec, SpecOptions, build_container_spec


async def plain_start(docker: aiodocker.Docker, image: str) -> float:
    config = {"Image": image, "Cmd": ["sleep", "infinity"], "HostConfig": {"Init": True}}
    started = time.perf_counter()
    container = await docker.containers.create(config=config, name=f"plain-{uuid.uuid4().hex}")
    await container.start()
    elapsed = time.perf_counter() - started
    await container.delete(force=True)
    return elapsed


async def runtime_start(runtime: DockerRuntime, image: str) -> float:
    session = SessionSpec(
        session_id=f"lat{uuid.uuid4().hex[:12]}",
        owner="bench",
        image=image,
        type="interactive",
        cpu=1000,
        mem=512 * 1024**2,
    )
    spec = build_container_spec(session, SpecOptions(node_name=runtime.node_name))
    started = time.perf_counter()
    state = await runtime.ensure_running(spec)
    elapsed = time.perf_counter() - started
    assert state.status == "running", state
    await runtime.remove(spec.session_id)
    return elapsed


async def main(runs: int, image: str) -> None:
    plain: list[float] = []
    platform: list[float] = []
    files = Path(tempfile.mkdtemp(prefix="gpuslice-latency-"))
    async with (
        aiodocker.Docker() as docker,
        DockerRuntime(node_name="latency-bench", files_root=files) as rt,
    ):
        await plain_start(docker, image)  # warm caches on both paths
        await runtime_start(rt, image)
        for _ in range(runs):  # interleaved, so drift in the machine hits both alike
            plain.append(await plain_start(docker, image))
            platform.append(await runtime_start(rt, image))
    p, r = statistics.median(plain), statistics.median(platform)
    print(f"plain create+start     median {p * 1000:7.1f} ms  (n={runs})")
    print(f"runtime ensure_running median {r * 1000:7.1f} ms  (n={runs})")
    print(f"ratio {r / p:.2f}x")
    shutil.rmtree(files, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--image", default=f"gpuslice/base:{__version__}")
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.image))
