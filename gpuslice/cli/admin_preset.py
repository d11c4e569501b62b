"""`gpuslice admin preset ...`: the resource presets the launch dialog offers (admins)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from gpuslice.cli.output import JsonOpt, console, friendly, mem, number, print_json, table
from gpuslice.client import Client

if TYPE_CHECKING:
    from gpuslice.common.schemas.presets import PresetPublic

app = typer.Typer(help="Resource presets the launch dialog offers.", no_args_is_help=True)

CpuOpt = Annotated[str | None, typer.Option("--cpu", help="CPU cores, e.g. 0.25.")]
MemOpt = Annotated[str | None, typer.Option("--mem", help="Memory, e.g. 1g.")]
GpuOpt = Annotated[str | None, typer.Option("--gpu", help="fGPU, e.g. 0.5 (0: the slider's).")]


@app.command("list")
@friendly
def preset_list(as_json: JsonOpt = False) -> None:
    """All presets, the default first."""
    with Client.from_config() as client:
        presets = client.list_presets()
    if as_json:
        print_json([p.model_dump(mode="json") for p in presets])
        return
    table(["name", "cpu", "mem", "fGPU", "default"],
          [(p.name, number(p.cpu), mem(p.mem), number(p.gpu), "yes" if p.default else "")
           for p in presets])


@app.command("create")
@friendly
def preset_create(
    name: str, cpu: CpuOpt = None, memory: MemOpt = None, gpu: GpuOpt = None,
    default: Annotated[bool, typer.Option("--default", help="Preselect it.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Add a preset (--cpu and --mem are required)."""
    values = _values(cpu, memory, gpu) | {"default": default}
    with Client.from_config() as client:
        _show(client.create_preset(name, **values), "created", as_json)


@app.command("set")
@friendly
def preset_set(
    name: str, cpu: CpuOpt = None, memory: MemOpt = None, gpu: GpuOpt = None,
    default: Annotated[bool, typer.Option("--default", help="Make it the default.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Change a preset's values, or make it the default."""
    values = _values(cpu, memory, gpu) | ({"default": True} if default else {})
    with Client.from_config() as client:
        _show(client.update_preset(name, **values), "changed", as_json)


@app.command("delete")
@friendly
def preset_delete(name: str) -> None:
    """Remove a preset."""
    with Client.from_config() as client:
        client.delete_preset(name)
    console.print(f"deleted preset {name}", markup=False)


def _values(cpu: str | None, memory: str | None, gpu: str | None) -> dict[str, str]:
    # sent as typed: the manager parses and bounds them, with one error line per field
    given = {"cpu": cpu, "mem": memory, "gpu": gpu}
    return {key: value for key, value in given.items() if value is not None}


def _show(preset: PresetPublic, verb: str, as_json: bool) -> None:
    if as_json:
        print_json(preset.model_dump(mode="json"))
        return
    console.print(f"{verb} preset {preset.name}: {number(preset.cpu)} CPU, {mem(preset.mem)}, "
                  f"{number(preset.gpu)} fGPU" + (" (default)" if preset.default else ""),
                  markup=False)
