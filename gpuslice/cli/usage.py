"""`gpuslice usage`: fGPU-hours, GPU-memory-hours, CPU-hours and sessions per user and UTC day."""

from __future__ import annotations

import csv
import sys
from typing import TYPE_CHECKING, Annotated

import typer

from gpuslice.cli.output import CliError, JsonOpt, console, friendly, print_json, table
from gpuslice.client import Client

if TYPE_CHECKING:
    from gpuslice.common.schemas.monitoring import UsageReport

FIELDS = ["user", "day", "sessions", "fgpu_hours", "gpu_mem_gib_hours", "cpu_hours",
          "mem_gib_hours", "hours_measured"]


@friendly
def usage(
    user: Annotated[str | None, typer.Option(help="Admins: this user only.")] = None,
    since: Annotated[str, typer.Option(help="Days back (7d) or a date (2026-01-31).")] = "7d",
    until: Annotated[str | None, typer.Option(help="Last day, a date (default today).")] = None,
    as_csv: Annotated[bool, typer.Option("--csv", help="CSV on stdout, one row per user and "
                                         "day.")] = False,
    by: Annotated[str, typer.Option(help="Rows per user or per project.")] = "user",
    as_json: JsonOpt = False,
) -> None:
    """Usage per user (or project) and UTC day: fGPU-hours, GPU memory, CPU-hours, sessions."""
    if by not in ("user", "project"):
        raise CliError(f"--by: {by!r}: use user or project", 2)
    with Client.from_config() as client:
        report = client.usage(user=user, since=since, until=until, by=by)
    if as_json:
        print_json(report)
    elif as_csv:
        out = csv.writer(sys.stdout, lineterminator="\n")
        out.writerow([by, *FIELDS[1:]])
        out.writerows(_rows(report))
    else:
        rows = _rows(report)
        table([by, "day", "sessions", "fGPU-h", "GPU mem GiB-h", "CPU-h", "mem GiB-h",
               "hours measured"], rows,
              title=f"usage {report.since} to {report.until} (UTC days)")
        if not rows:
            console.print("no usage measured in that period")


def _rows(report: UsageReport) -> list[list[str]]:
    return [
        [r.project if r.project is not None else r.user, r.day.isoformat(), str(r.sessions),
         str(r.totals.fgpu_hours),
         str(r.totals.gpu_mem_gib_hours), str(r.totals.cpu_hours),
         str(r.totals.mem_gib_hours), str(round(r.totals.seconds / 3600, 4))]
        for r in report.rows
    ]
