"""What a heartbeat says: the node's allocatable capacity, devices, images and measured usage."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from gpuslice.agent.accelerators import Accelerator
from gpuslice.agent.config import AgentSettings
from gpuslice.agent.runtime.docker import DockerRuntime
from gpuslice.agent.runtime.models import ContainerStats
from gpuslice.common.schemas.agents import DeviceReport, Heartbeat, ImageReport, SessionUsage


class UsageCollector:
    """Builds heartbeats. CPU rates need two readings, so the previous one is kept here
    (a measurement cache only: losing it costs one heartbeat without CPU rates)."""

    def __init__(
        self, settings: AgentSettings, runtime: DockerRuntime, accelerator: Accelerator
    ) -> None:
        self.settings = settings
        self.runtime = runtime
        self.accelerator = accelerator
        self._previous: dict[str, ContainerStats] = {}
        self.latest: dict[str, SessionUsage] = {}  # the last heartbeat's, by session id

    async def heartbeat(self) -> Heartbeat:
        containers, stats, images, usage = await asyncio.gather(
            self.runtime.list_managed(),
            self.runtime.stats_all(),
            self.runtime.image_details(),
            asyncio.to_thread(self.accelerator.usage),
        )
        by_uuid = {u.uuid: u for u in usage}
        devices = []
        for dev in self.accelerator.devices():
            reading = by_uuid.get(dev.uuid)
            devices.append(
                DeviceReport(
                    index=dev.index,
                    uuid=dev.uuid,
                    model=dev.model,
                    mem=dev.memory,
                    sms=dev.sms,
                    mem_used=reading.memory_used if reading else 0,
                    utilization=reading.utilization if reading else 0,
                )
            )
        sessions = self._session_usage(stats)
        self._previous = stats
        self.latest = {u.session_id: u for u in sessions}
        cpu, mem = allocatable(self.settings)
        return Heartbeat(
            cpu=cpu,
            mem=mem,
            devices=devices,
            images=sorted({i.tag for i in images})[:10_000],
            image_details=[
                ImageReport(tag=i.tag, image_id=i.image_id, size=i.size, labels=i.labels)
                for i in images[:10_000]
            ],
            running=sorted(c.session_id for c in containers if c.running),
            usage=sessions,
        )

    def without_engine(self, problem: str) -> Heartbeat:
        """A heartbeat while the Docker Engine does not answer: capacity and devices as ever,
        and ``engine_error`` saying why, which tells the manager to keep what it knows of the
        node's images and sessions until the engine answers again."""
        cpu, mem = allocatable(self.settings)
        devices = [
            DeviceReport(index=d.index, uuid=d.uuid, model=d.model, mem=d.memory, sms=d.sms,
                         mem_used=0, utilization=0)
            for d in self.accelerator.devices()
        ]
        return Heartbeat(cpu=cpu, mem=mem, devices=devices, engine_error=problem[:500])

    def _session_usage(self, stats: dict[str, ContainerStats]) -> list[SessionUsage]:
        """Each running session's memory, and its CPU since the previous heartbeat's reading
        (``None`` on its first: a rate needs two)."""
        usage = []
        for sid, reading in sorted(stats.items()):
            before = self._previous.get(sid)
            cpu = reading.cpu_milli_since(before) if before is not None else None
            usage.append(SessionUsage(session_id=sid, cpu=cpu, mem=reading.memory_used))
        return usage[:10_000]


def allocatable(settings: AgentSettings, meminfo: Path = Path("/proc/meminfo")) -> tuple[int, int]:
    """CPU (milli-cores) and memory (bytes) sessions may use: the host's less what it keeps."""
    cores = len(os.sched_getaffinity(0)) * 1000
    total = _mem_total(meminfo)
    return max(cores - settings.reserved_cpu, 100), max(total - settings.reserved_mem, 64 * 2**20)


def _mem_total(meminfo: Path) -> int:
    for line in meminfo.read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no MemTotal in {meminfo}")
