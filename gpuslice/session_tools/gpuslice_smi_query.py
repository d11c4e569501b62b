"""The script-facing side of the session's ``nvidia-smi``: ``-L``, ``-q``, ``--query-gpu``,
``--query-compute-apps`` with ``--format=csv[,noheader][,nounits]``, worded and laid out as
NVIDIA's own tool does, so parsers written for it (monitoring agents, ``gpustat``-style
scripts, notebooks) read the slice's figures unchanged.

Every figure is the session's: ``memory.total`` is the slice's memory, ``memory.used`` what
the session's own processes hold, ``utilization.gpu`` their share of the device, GPU indexes
count from 0 over the slice's devices (as CUDA numbers them inside the session). Every field
the real ``--help-query-gpu`` lists is accepted (``gpuslice_smi_fields``); what the platform
does not measure is ``[N/A]``, as nvidia-smi prints for an unsupported field, never an
invented number. Standard library only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from gpuslice_smi_fields import APP_FIELDS, DEPRECATED, DEPRECATED_TEXT, GPU_FIELDS, Field

MiB = 1024**2
NA = "[N/A]"
#: nvidia-smi's exit status for a bad argument or field (what callers test for).
EXIT_BAD_ARGUMENT = 2


class QueryError(Exception):
    """A query nvidia-smi would refuse: its message, printed as nvidia-smi words it."""


# One GPU as the queries see it (built by ``gpus``).
Gpu = dict[str, Any]
# the value of a field for one GPU (or one process joined with its GPU), None for [N/A]
Getter = Callable[[Gpu], object]


def _mem(key: str) -> Getter:
    def get(gpu: Gpu) -> object:
        value = gpu.get(key)
        return None if value is None else value // MiB
    return get


# What the platform knows of a slice, by the field's own name; every other field nvidia-smi
# lists is [N/A] (nothing measures it for a slice), or deprecated as current drivers say.
_GPU_VALUES: dict[str, Getter] = {
    "timestamp": lambda g: g["timestamp"],
    "driver_version": lambda g: g.get("driver_version"),
    "kmd_version": lambda g: g.get("driver_version"),
    "count": lambda g: g["count"],
    "name": lambda g: g["name"],
    "uuid": lambda g: g["uuid"],
    "index": lambda g: g["index"],
    "memory.total": _mem("total"),
    "memory.reserved": lambda g: 0,
    "memory.used": _mem("used"),
    "memory.free": _mem("free"),
    "utilization.gpu": lambda g: g.get("utilization"),
    "compute_mode": lambda g: "Default",
}
# --query-compute-apps: one process of this session joined with its GPU
_APP_VALUES: dict[str, Getter] = {
    "timestamp": lambda p: p["timestamp"],
    "gpu_name": lambda p: p["gpu"]["name"],
    "gpu_uuid": lambda p: p["gpu"]["uuid"],
    "pid": lambda p: p.get("pid"),
    "process_name": lambda p: p.get("name"),
    "used_gpu_memory": _mem("used"),
}


def gpus(allocation: dict[str, Any], usage: dict[str, Any] | None) -> list[Gpu]:
    """The slice's GPUs with what the session uses of each (``None``: not measured)."""
    readings = {g.get("uuid"): g for g in (usage or {}).get("gpus", [])}
    devices = allocation.get("devices", [])
    stamp = time.strftime("%Y/%m/%d %H:%M:%S.") + f"{int(time.time() * 1000) % 1000:03d}"
    found = []
    for position, device in enumerate(devices):
        reading = readings.get(device.get("uuid"), {})
        total, used = device.get("memory_bytes"), reading.get("mem_used")
        free = total - used if isinstance(total, int) and isinstance(used, int) else None
        found.append({
            "index": position, "name": device.get("model") or "GPU", "uuid": device.get("uuid"),
            "total": total, "used": used, "free": None if free is None else max(0, free),
            "utilization": reading.get("utilization"), "count": len(devices),
            "driver_version": allocation.get("driver_version"), "timestamp": stamp,
            "fgpu": device.get("fgpu"), "sm_percent": device.get("sm_percent"),
        })
    return found


def parse_format(value: str) -> tuple[bool, bool]:
    """``--format``: (header, units). Only CSV, as nvidia-smi's queries allow."""
    words = [w.strip() for w in value.split(",") if w.strip()]
    if "csv" not in words or set(words) - {"csv", "noheader", "nounits"}:
        raise QueryError(f'"{value}" is not a valid format. '
                         "Use --format=csv[,noheader][,nounits].")
    return "noheader" not in words, "nounits" not in words


def query_gpus(found: Sequence[Gpu], fields: str, header: bool, units: bool) -> list[str]:
    """``--query-gpu``: CSV lines, one per GPU, as nvidia-smi prints them."""
    chosen = _fields(fields, GPU_FIELDS)
    return _csv(chosen, found, _GPU_VALUES, header, units)


def query_apps(
    found: Sequence[Gpu], processes: Sequence[dict[str, Any]], fields: str,
    header: bool, units: bool,
) -> list[str]:
    """``--query-compute-apps``: one CSV line per process of this session on its GPUs."""
    chosen = _fields(fields, APP_FIELDS)
    by_uuid = {g["uuid"]: g for g in found}
    rows = []
    for process in processes:
        gpu = by_uuid.get(process.get("uuid"))
        if gpu is None:
            continue  # a device outside the slice: not this session's to show
        rows.append({**process, "gpu": gpu, "timestamp": gpu["timestamp"]})
    return _csv(chosen, rows, _APP_VALUES, header, units)


def list_gpus(found: Sequence[Gpu]) -> list[str]:
    """``-L``: ``GPU 0: <name> (UUID: <uuid>)``, the line tools split on."""
    return [f"GPU {g['index']}: {g['name']} (UUID: {g['uuid']})" for g in found]


def report(found: Sequence[Gpu], simulated: bool) -> list[str]:
    """``-q``: the "NVSMI LOG" layout (key, colon at column 43), the slice's figures."""
    def line(depth: int, key: str, value: object = None) -> str:
        text = "    " * depth + key
        return text if value is None else f"{text:<42}: {value}"

    def mib(value: object) -> str:
        return "N/A" if value is None else f"{int(str(value)) // MiB} MiB"

    driver = found[0]["driver_version"] if found else None
    lines = ["", "==============NVSMI LOG==============", "",
             line(0, "Timestamp", time.strftime("%a %b %d %H:%M:%S %Y")),
             line(0, "Driver Version", driver or "N/A"), line(0, "CUDA Version", "N/A"), "",
             line(0, "Attached GPUs", len(found))]
    for gpu in found:
        util = gpu["utilization"]
        lines += [f"GPU {gpu['index']}", line(1, "Product Name", gpu["name"]),
                  line(1, "GPU UUID", gpu["uuid"]),
                  line(1, "Slice", f"{gpu['fgpu']} fGPU, {gpu['sm_percent']}% of its SMs"),
                  line(1, "FB Memory Usage"), line(2, "Total", mib(gpu["total"])),
                  line(2, "Reserved", "0 MiB"), line(2, "Used", mib(gpu["used"])),
                  line(2, "Free", mib(gpu["free"])), line(1, "Utilization"),
                  line(2, "Gpu", "N/A" if util is None else f"{util} %"),
                  line(2, "Memory", "N/A"), line(1, "Temperature"),
                  line(2, "GPU Current Temp", "N/A")]
    if simulated:
        lines += ["", "Simulated GPU: this node has no NVIDIA GPU (gpuslice's mock accelerator)."]
    return lines


def _fields(fields: str, known: dict[str, Field]) -> list[Field]:
    names = [f.strip() for f in fields.split(",")]
    if not names or any(not n for n in names):
        raise QueryError(f'Field "{fields}" is not a valid field to query.')
    for name in names:
        if name not in known:
            raise QueryError(f'Field "{name}" is not a valid field to query.')
    return [known[name] for name in names]


def _csv(
    chosen: Sequence[Field], rows: Sequence[Gpu], values: dict[str, Getter],
    header: bool, units: bool,
) -> list[str]:
    """The header (each field under its own name, with its unit) and one line per row."""
    lines = [", ".join(_head(f, units) for f in chosen)] if header else []
    for row in rows:
        lines.append(", ".join(_cell(f, row, values, units) for f in chosen))
    return lines


def _head(field: Field, units: bool) -> str:
    return f"{field.name} [{field.unit}]" if field.unit and units else field.name


def _cell(field: Field, row: Gpu, values: dict[str, Getter], units: bool) -> str:
    if field.name in DEPRECATED:
        return f"[{DEPRECATED_TEXT}]"
    get = values.get(field.name)
    value = None if get is None else get(row)
    if value is None:
        return NA
    return f"{value} {field.unit}" if field.unit and units else str(value)
