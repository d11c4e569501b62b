"""``nvidia-smi -q -x``: the session's slice as nvidia-smi's XML report, for tools that read
the XML rather than the CSV queries (monitoring agents, scripts with an XML parser).

The document has the real one's layout (``<nvidia_smi_log>`` holding ``<gpu>`` elements, in
the order and with the element names of NVIDIA's ``nvsmi_device_v13.dtd``) and the same
figures as ``-q``: the slice's memory, what the session's processes hold and use of it, and
those processes. What nothing measures for a slice is ``N/A``, the XML's word (without the
CSV's brackets); fields current drivers no longer report carry their deprecation text.
Standard library only.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from xml.sax.saxutils import escape, quoteattr

from gpuslice_smi_fields import DEPRECATED_TEXT

MiB = 1024**2
NA = "N/A"
if TYPE_CHECKING:  # only for the checker: images may have a Python older than 3.10
    # An element: its name and its text, or its children (an empty list: an empty element).
    Node = tuple[str, str | list["Node"]]


def report(found: Sequence[dict[str, Any]], processes: Sequence[dict[str, Any]]) -> list[str]:
    """The whole document, one line per element, tab-indented as nvidia-smi writes it."""
    driver = found[0]["driver_version"] if found else None
    lines = ['<?xml version="1.0" ?>',
             '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v13.dtd">', "<nvidia_smi_log>"]
    for node in [("timestamp", time.strftime("%a %b %d %H:%M:%S %Y")),
                 ("driver_version", driver or NA), ("cuda_version", NA),
                 ("attached_gpus", str(len(found)))]:
        lines += _lines(node, 1)
    for gpu in found:
        own = [p for p in processes if p.get("uuid") == gpu["uuid"]]
        lines.append(f"\t<gpu id={quoteattr(NA)}>")  # its PCI address: none for a slice
        for node in _gpu(gpu, own):
            lines += _lines(node, 2)
        lines.append("\t</gpu>")
    return [*lines, "", "</nvidia_smi_log>"]


def _gpu(gpu: dict[str, Any], processes: Sequence[dict[str, Any]]) -> list[Node]:
    util = gpu["utilization"]
    deprecated = [("graphics_clock", DEPRECATED_TEXT), ("mem_clock", DEPRECATED_TEXT)]
    return [
        ("product_name", gpu["name"]), *_na("product_brand", "product_architecture"),
        ("display_mode", DEPRECATED_TEXT),
        *_na("display_attached", "display_active", "persistence_mode", "addressing_mode"),
        ("mig_mode", _na("current_mig", "pending_mig")), ("mig_devices", "None"),
        *_na("accounting_mode", "accounting_mode_buffer_size"),
        ("driver_model", _na("current_dm", "pending_dm")),
        ("serial", NA), ("uuid", gpu["uuid"] or NA),
        *_na("minor_number", "vbios_version", "multigpu_board", "board_id",
             "board_part_number", "gpu_part_number", "gpu_fru_part_number"),
        ("inforom_version", _na("img_version", "oem_object", "ecc_object", "pwr_object")),
        ("gpu_operation_mode", _na("current_gom", "pending_gom")), ("c2c_mode", NA),
        ("gpu_virtualization_mode", _na("virtualization_mode", "host_vgpu_mode")),
        *_na("gpu_recovery_action", "gsp_firmware_version"),
        ("pci", [*_na("pci_bus", "pci_device", "pci_domain", "pci_device_id", "pci_bus_id",
                      "pci_sub_system_id"),
                 ("pci_gpu_link_info", [
                     ("pcie_gen", _na("max_link_gen", "current_link_gen")),
                     ("link_widths", _na("max_link_width", "current_link_width"))])]),
        *_na("fan_speed", "performance_state"),
        ("fb_memory_usage", [("total", _mib(gpu["total"])), ("reserved", "0 MiB"),
                             ("used", _mib(gpu["used"])), ("free", _mib(gpu["free"]))]),
        ("bar1_memory_usage", _na("total", "used", "free")),
        ("compute_mode", "Default"),
        ("utilization", [("gpu_util", NA if util is None else f"{util} %"),
                         *_na("memory_util", "encoder_util", "decoder_util", "jpeg_util",
                              "ofa_util")]),
        ("encoder_stats", _na("session_count", "average_fps", "average_latency")),
        ("fbc_stats", _na("session_count", "average_fps", "average_latency")),
        ("ecc_mode", _na("current_ecc", "pending_ecc")),
        ("temperature", _na("gpu_temp", "gpu_temp_tlimit", "gpu_target_temperature",
                            "memory_temp")),
        ("gpu_power_readings", [
            ("power_state", DEPRECATED_TEXT),
            *_na("average_power_draw", "instant_power_draw", "current_power_limit",
                 "requested_power_limit", "default_power_limit", "min_power_limit",
                 "max_power_limit")]),
        ("clocks", _na("graphics_clock", "sm_clock", "mem_clock", "video_clock")),
        ("applications_clocks", deprecated), ("default_applications_clocks", deprecated),
        ("max_clocks", _na("graphics_clock", "sm_clock", "mem_clock", "video_clock")),
        ("processes", [("process_info", _process(p)) for p in processes]),
        ("accounted_processes", []),
    ]


def _process(process: dict[str, Any]) -> list[Node]:
    pid, name = process.get("pid"), process.get("name")
    return [*_na("gpu_instance_id", "compute_instance_id"),
            ("pid", NA if pid is None else str(pid)), ("type", "C"),
            ("process_name", name or NA), ("used_memory", _mib(process.get("used")))]


def _na(*names: str) -> list[Node]:
    return [(name, NA) for name in names]


def _mib(size: object) -> str:
    return f"{size // MiB} MiB" if isinstance(size, int) else NA


def _lines(node: Node, depth: int) -> list[str]:
    name, value = node
    pad = "\t" * depth
    if isinstance(value, str):
        return [f"{pad}<{name}>{escape(value)}</{name}>"]
    inner = [line for child in value for line in _lines(child, depth + 1)]
    return [f"{pad}<{name}>", *inner, f"{pad}</{name}>"]
