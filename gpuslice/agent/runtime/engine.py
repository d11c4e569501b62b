"""The few Engine API calls aiodocker has no public method for, and parsing their answers.

Kept in one module so an aiodocker upgrade has one place to check: the event stream (with
filters, read line by line so a reconnect can follow), one-shot stats, and a container's logs
without the inspect aiodocker makes before every ``log()``.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Mapping
from datetime import datetime
from typing import Any

import aiodocker
import aiohttp
from aiodocker.multiplexed import multiplexed_result_list

from gpuslice.agent.runtime.models import ContainerStats

#: aiodocker's status for "could not connect" (no HTTP answer at all).
CONNECTION_FAILED = 900
_NO_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_read=None, sock_connect=10)
_RFC3339 = re.compile(r"^(?P<head>[^.Z+]+?)(?:\.(?P<frac>\d+))?(?P<tz>Z|[+-]\d\d:\d\d)?$")


async def event_lines(
    docker: aiodocker.Docker, filters: Mapping[str, list[str]]
) -> AsyncIterator[dict[str, Any] | None]:
    """Docker's event stream as dicts. Yields ``None`` first, once the stream is open."""
    params = {"filters": json.dumps(filters)}
    async with docker._query("events", "GET", params=params, timeout=_NO_TIMEOUT) as response:
        yield None
        async for line in response.content:
            if line.strip():
                yield json.loads(line)


async def one_shot_stats(docker: aiodocker.Docker, container_id: str) -> dict[str, Any] | None:
    """One stats reading without the one-second wait for a second sample (API 1.41+);
    ``None`` when there is none: a container removed while dockerd read it answers an empty
    body (``null``)."""
    result = await docker._query_json(
        f"containers/{container_id}/stats", params={"stream": "false", "one-shot": "true"}
    )
    return dict(result) if isinstance(result, dict) else None


async def container_logs(docker: aiodocker.Docker, container_id: str, tail: int | str) -> str:
    """stdout and stderr so far (the last ``tail`` lines, or ``"all"``), interleaved as written.

    aiodocker's ``log()`` inspects the container first, only to learn whether it has a TTY
    (then the stream is not multiplexed): one more call dockerd answers while it starts other
    containers, for every session's final logs. Session containers never have one (``Tty``
    is always false in their spec), so the stream is read as multiplexed.
    """
    params = {"stdout": True, "stderr": True, "follow": False, "tail": tail}
    async with docker._query(f"containers/{container_id}/logs", "GET", params=params) as response:
        chunks = await multiplexed_result_list(response, is_tty=False)  # type: ignore[no-untyped-call]
        return "".join(chunks)


def parse_stats(session_id: str, raw: Mapping[str, Any]) -> ContainerStats | None:
    """Docker stats → usage, memory as `docker stats` counts it (minus inactive page cache).
    ``None`` when the answer holds no reading (a container that stopped meanwhile is answered
    with zeros read at year 1): a session whose figures could not be read is unknown, never
    idle."""
    read_at = _timestamp(str(raw.get("read", "")))
    if read_at <= 0 or not raw.get("cpu_stats"):
        return None
    memory = raw.get("memory_stats") or {}
    details = memory.get("stats") or {}
    inactive = details.get("total_inactive_file", details.get("inactive_file", 0))
    used = max(0, int(memory.get("usage", 0)) - int(inactive))
    cpu = ((raw.get("cpu_stats") or {}).get("cpu_usage") or {}).get("total_usage", 0)
    return ContainerStats(
        session_id=session_id,
        read_at=read_at,
        cpu_ns=int(cpu),
        memory_used=used,
        memory_limit=int(memory.get("limit", 0)),
        pids=int((raw.get("pids_stats") or {}).get("current", 0)),
    )


def _timestamp(text: str) -> float:
    # RFC 3339 with nanoseconds ("2024-05-01T10:00:00.123456789Z"): keep microseconds.
    match = _RFC3339.match(text)
    if not match or text.startswith("0001"):
        return 0.0
    fraction = (match["frac"] or "0")[:6]
    zone = match["tz"] if match["tz"] not in (None, "Z") else "+00:00"
    return datetime.fromisoformat(f"{match['head']}.{fraction}{zone}").timestamp()
