"""`gpuslice top`: live, per node and GPU, who holds which slice and how much of it they use."""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuslice.cli.output import JsonOpt, console, friendly, mem, number, print_json
from gpuslice.client import Client
from gpuslice.common.durations import format_duration

if TYPE_CHECKING:
    from gpuslice.common.schemas.monitoring import Top, TopSlice

COLUMNS = ["node", "GPU", "GPU mem used", "GPU util", "session", "user", "fGPU", "its GPU mem",
           "its util", "CPU", "memory", "reclaim"]


@friendly
def top(
    once: Annotated[bool, typer.Option("--once", help="Print once and exit (default when "
                                       "output is not a terminal).")] = False,
    interval: Annotated[float, typer.Option(help="Seconds between refreshes.")] = 2.0,
    as_json: JsonOpt = False,
) -> None:
    """Live, per node and GPU: who holds which slice and how much they use."""
    if not 0.5 <= interval <= 3600:
        raise typer.BadParameter("must be between 0.5 and 3600 seconds", param_hint="--interval")
    with Client.from_config() as client:
        if as_json:
            print_json(client.top())
            return
        if once or not sys.stdout.isatty():
            console.print(_table(client.top()))
            return
        from rich.live import Live

        with Live(_table(client.top()), console=console, screen=False) as live:
            try:
                while True:
                    time.sleep(interval)
                    live.update(_table(client.top()))
            except KeyboardInterrupt:
                pass


def _table(view: Top) -> Any:
    from rich.table import Table

    out = Table(title=f"gpuslice top  {view.at:%H:%M:%S} UTC", show_edge=False,
                header_style="bold")
    for column in COLUMNS:
        out.add_column(column, overflow="fold")
    for node in view.nodes:
        head = f"{node.name} ({node.status})"
        for device in node.devices:
            used = "" if device.used is None else f" {number(device.used)}/"
            label = f"{device.index} {device.model}{used}{number(device.capacity)} fGPU"
            totals = [f"{mem(device.mem_used)} / {mem(device.mem)}",
                      _percent(device.utilization)]
            for i, held in enumerate(device.slices or [None]):
                first = i == 0
                out.add_row(head, label if first else "", *(totals if first else ["", ""]),
                            *_slice(held))
                head = ""
        for held in node.cpu_only:
            out.add_row(head, "(no GPU)", "", "", *_slice(held))
            head = ""
        if head:
            out.add_row(head, "-", "", "", *[""] * 8)
    return out


def _slice(held: TopSlice | None) -> list[str]:
    if held is None:
        return ["(free)"] + [""] * 7
    reclaim = ""
    if held.reclaim is not None:
        seconds = max(0, int((held.reclaim.at - datetime.now(UTC)).total_seconds()))
        reclaim = f"in {format_duration(seconds)}"
    cpu = "-" if held.cpu is None else number(held.cpu)
    return [held.name, held.user, number(held.fgpu), mem(held.gpu_mem),
            _percent(held.gpu_util), f"{cpu}/{number(held.cpu_alloc)}",
            f"{mem(held.mem)}/{mem(held.mem_alloc)}", reclaim]


def _percent(value: int | None) -> str:
    return "n/a" if value is None else f"{value} %"
