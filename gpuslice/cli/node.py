"""`gpuslice node ...`: the nodes, their GPUs and who holds which slice (admins)."""

from __future__ import annotations

from collections import defaultdict
from typing import Annotated

import typer

from gpuslice.cli.output import (
    JsonOpt,
    ago,
    console,
    friendly,
    mem,
    number,
    print_json,
    table,
)
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
    table(["node", "status", "group", "cpu", "mem", "heartbeat", "device", "fGPU used",
           "slices"], rows)


@app.command("set-group")
@friendly
def node_set_group(
    node: str,
    group: Annotated[str, typer.Argument(help="The resource group, e.g. a100, t4, cpu.")],
    as_json: JsonOpt = False,
) -> None:
    """Move NODE to another resource group: what runs there stays; from now on only sessions
    that may use GROUP are placed on it. It keeps it when its agent registers again."""
    with Client.from_config() as client:
        moved = client.set_node_group(node, group)
    if as_json:
        print_json(moved.model_dump(mode="json"))
        return
    console.print(f"node {moved.name} is in resource group {moved.pool}", markup=False)


@app.command("groups")
@friendly
def node_groups(as_json: JsonOpt = False) -> None:
    """Resource groups of the alive nodes and their free capacity (any user)."""
    with Client.from_config() as client:
        groups = client.list_groups()
    if as_json:
        print_json([g.model_dump(mode="json") for g in groups])
        return
    table(["group", "nodes", "GPUs", "models", "fGPU free", "largest slice", "cpu free",
           "mem free"],
          [(g.name, str(g.nodes), str(g.gpus), ", ".join(g.gpu_models) or "-",
            f"{number(g.gpu_free)}/{number(g.gpu_total)}", number(g.largest_slice),
            number(g.cpu_free), mem(g.mem_free)) for g in groups])


@app.command("revoke")
@friendly
def node_revoke(node: str, as_json: JsonOpt = False) -> None:
    """Revoke a node: its credential stops working now and its sessions end. Only a re-key
    token (`gpuslice node rekey NODE`) lets it join again."""
    with Client.from_config() as client:
        revoked = client.revoke_node(node)
    if as_json:
        print_json(revoked.model_dump(mode="json"))
        return
    console.print(f"revoked node {revoked.name} ({revoked.id}); its sessions ended", markup=False)


@app.command("rekey")
@friendly
def node_rekey(
    node: str,
    hours: Annotated[int, typer.Option(help="Valid for this many hours.")] = 1,
    as_json: JsonOpt = False,
) -> None:
    """A single-use token that gives the node NODE a new credential (its old one stops working):
    for a node that lost its credential or was revoked."""
    from gpuslice.cli.admin import print_join_token

    with Client.from_config() as client:
        token = client.create_join_token(f"rekey {node}", hours, node=node, rekey=True)
        url = client.url
    print_join_token(token, url, hours, as_json)
