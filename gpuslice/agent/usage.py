"""What a heartbeat says: the node's allocatable capacity, devices, images and measured usage
(per session: CPU and memory from its cgroup, GPU figures of its own processes)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from gpuslice.agent.accelerators import Accelerator
from gpuslice.agent.runtime.docker import DockerRuntime
from gpuslice.agent.runtime.models import ContainerStats
from gpuslice.agent.sampling import GpuSampler
from gpuslice.agent.settings import AgentSettings
from gpuslice.common.schemas.agents import (
    DeviceReport,
    Heartbeat,
    ImageReport,
    SessionGpuUsage,
    SessionUsage,
)

MAX_INTERVAL_MS = 86_400_000  # the wire's bound; the manager caps it far lower anyway


class UsageCollector:
    """Builds heartbeats. CPU rates need two readings, so the last reading sent is kept here
    (a measurement cache only: losing it costs one heartbeat without CPU rates). Readings
    advance only when a heartbeat reached the manager (:meth:`sent`): a lost one is covered by
    the next, whose ``interval_ms`` then spans both."""

    def __init__(
        self, settings: AgentSettings, runtime: DockerRuntime, accelerator: Accelerator,
        sampler: GpuSampler | None = None,
    ) -> None:
        self.settings = settings
        self.runtime = runtime
        self.accelerator = accelerator
        self.sampler = sampler or GpuSampler(accelerator)
        self._previous: dict[str, ContainerStats] = {}
        self._pending: tuple[dict[str, ContainerStats], int] | None = None
        self.latest: dict[str, SessionUsage] = {}  # the last heartbeat's, by session id

    async def heartbeat(self) -> Heartbeat:
        containers, stats, images = await asyncio.gather(
            self.runtime.list_managed(),
            self.runtime.stats_all(),
            self.runtime.image_details(),
        )
        if not self.sampler.devices:  # no reading yet (the sampling loop has just started)
            running = [c for c in containers if c.running]
            await asyncio.to_thread(self.sampler.read, running)
        gpus, marker = self.sampler.take()
        by_uuid = {u.uuid: u for u in self.sampler.devices}
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
        slices = {c.session_id: c.allocation.get("devices", []) for c in containers}
        sessions = self._session_usage(stats, gpus, slices)
        self._pending = (stats, marker)
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
            agent_id=self.runtime.agent_id,
        )

    def sent(self) -> None:
        """The last heartbeat reached the manager: the next readings are measured from it."""
        if self._pending is not None:
            stats, marker = self._pending
            self._previous, self._pending = stats, None
            self.sampler.sent(marker)

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
        return Heartbeat(cpu=cpu, mem=mem, devices=devices, engine_error=problem[:500],
                         agent_id=self.runtime.agent_id)

    def _session_usage(
        self,
        stats: dict[str, ContainerStats],
        gpus: dict[str, list[SessionGpuUsage]],
        slices: dict[str, list[dict[str, object]]],
    ) -> list[SessionUsage]:
        """Each running session's memory, its CPU and the time since the previous reading
        sent (``None`` on its first: a rate needs two), and its GPU figures."""
        usage = []
        for sid, reading in sorted(stats.items()):
            before = self._previous.get(sid)
            cpu = reading.cpu_milli_since(before) if before is not None else None
            interval = (
                min(max(0, round((reading.read_at - before.read_at) * 1000)), MAX_INTERVAL_MS)
                if before is not None else None
            )
            # A session with a slice that no GPU reading covered yet: unknown, never idle.
            unknown = [SessionGpuUsage(uuid=str(d["uuid"])) for d in slices.get(sid, [])]
            usage.append(SessionUsage(
                session_id=sid, cpu=cpu, mem=reading.memory_used,
                at_ms=max(0, round(reading.read_at * 1000)), interval_ms=interval,
                gpus=gpus.get(sid, unknown),
            ))
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
