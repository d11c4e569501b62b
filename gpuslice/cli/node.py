"""`gpuslice node ...`: the nodes, their GPUs and who holds which slice (admins)."""

from __future__ import annotations

from collections import defaultdict

import typer

from gpuslice.cli.output import JsonOpt, ago, friendly, mem, number, print_json, table
from gpuslice.client import Client, schemas

app = typer.Typer(help="Nodes and their GPUs (admins).", no_args_is_help=True)


@app.command("list")
@friendly
def node_list(as_json: JsonOpt = False) -> None:
    """Nodes, their devices, and the slices each device has in use."""
    with Client.from_config() as client:
        nodes = client.list_nodes()
        holders = defaultdict(list)
        holding = client.list_all_sessions(status=[s.value for s in schemas.sessions.HOLDING])
        for s in holding:
            for dev in s.placement.devices if s.placement else ():
                holders[dev.device_uuid].append(f"{s.name} {number(dev.gpu)}")
    if as_json:
        print_json([n.model_dump(mode="json") | {"slices": {
            d.uuid: holders.get(d.uuid, []) for d in n.devices}} for n in nodes])
        return
    rows = []
    for n in nodes:
        head = [n.name, n.status.value, n.pool, f"{number(n.cpu_used)}/{number(n.cpu)}",
                f"{mem(n.mem_used)}/{mem(n.mem)}", ago(n.last_heartbeat_at)]
        if not n.devices:
            rows.append(head + ["-", "", ""])
        for i, d in enumerate(n.devices):
            rows.append((head if i == 0 else [""] * len(head)) + [
                f"GPU {d.index} {d.model} ({mem(d.mem)})",
                f"{number(d.used)}/{number(d.capacity)}",
                ", ".join(holders.get(d.uuid, [])) or "-",
            ])
    table(["node", "status", "pool", "cpu", "mem", "heartbeat", "device", "fGPU used",
           "slices"], rows)
