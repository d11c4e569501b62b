"""`gpuslice admin priority-class ...`: the priority classes sessions run at (admins).

A waiting session of a higher class may preempt RUNNING batch sessions of a lower one that ran
their class's minimum runtime: they get SIGTERM, the class's grace to checkpoint, then go back
to the queue in their place. Using a class is a grant: the default class is everyone's, another
one is the projects' it is granted to (--project), everyone's with --any-project, and with
neither only admins may use it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from gpuslice.cli.output import CliError, JsonOpt, console, friendly, print_json, table
from gpuslice.client import Client

if TYPE_CHECKING:
    from gpuslice.common.schemas.priorities import PriorityClassPublic

app = typer.Typer(help="Priority classes: ranks, and what preemption may do to each.",
                  no_args_is_help=True)

MinRuntimeOpt = Annotated[int | None, typer.Option(
    "--min-runtime", help="Seconds a session of the class runs before it may be preempted.")]
GraceOpt = Annotated[int | None, typer.Option(
    "--grace", help="Seconds between SIGTERM and SIGKILL when stopped (to checkpoint).")]
InteractiveOpt = Annotated[bool | None, typer.Option(
    "--preempt-interactive/--keep-interactive",
    help="Whether its interactive sessions may be preempted too (kept by default).")]

ProjectsOpt = Annotated[list[str] | None, typer.Option(
    "--project", help="A project whose sessions may use it (repeat).")]
AnyProjectOpt = Annotated[bool, typer.Option(
    "--any-project", help="Let every project (so every user) use it.")]


@app.command("list")
@friendly
def class_list(as_json: JsonOpt = False) -> None:
    """All classes, highest rank first."""
    with Client.from_config() as client:
        classes = client.list_priority_classes()
    if as_json:
        print_json([c.model_dump(mode="json") for c in classes])
        return
    table(["name", "rank", "min runtime", "grace", "interactive", "default", "used by"],
          [(c.name, c.rank, f"{c.min_runtime_s}s", f"{c.grace_s}s",
            "preemptible" if c.preempt_interactive else "kept", "yes" if c.default else "",
            _who(c)) for c in classes])


@app.command("create")
@friendly
def class_create(
    name: str,
    rank: Annotated[int, typer.Option(help="Higher runs first and may preempt lower (0-1000).")],
    min_runtime: MinRuntimeOpt = None, grace: GraceOpt = None,
    preempt_interactive: InteractiveOpt = None,
    default: Annotated[bool, typer.Option("--default", help="Sessions naming none get it.")]
    = False,
    project: ProjectsOpt = None,
    any_project: AnyProjectOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Add a class: usable by the projects given with --project, by every project with
    --any-project, and with neither by admins only (the default class: by everyone)."""
    if project and any_project:
        raise CliError("--project and --any-project: give one of them", 2)
    values: dict[str, object] = dict(_values(min_runtime, grace, preempt_interactive))
    values |= {"default": default, "projects": project or [], "any_project": any_project}
    with Client.from_config() as client:
        _show(client.create_priority_class(name, rank, **values), "created", as_json)


@app.command("set")
@friendly
def class_set(
    name: str,
    rank: Annotated[int | None, typer.Option(help="Its new rank.")] = None,
    min_runtime: MinRuntimeOpt = None, grace: GraceOpt = None,
    preempt_interactive: InteractiveOpt = None,
    default: Annotated[bool, typer.Option("--default", help="Make it the default.")] = False,
    project: ProjectsOpt = None,
    any_project: AnyProjectOpt = False,
    admins_only: Annotated[bool, typer.Option(
        "--admins-only", help="Take it from every project: only admins may use it.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Change a class's values, who may use it (--project replaces its projects), or make it
    the default."""
    if sum(map(bool, (project, any_project, admins_only))) > 1:
        raise CliError("--project, --any-project and --admins-only: give one of them", 2)
    values: dict[str, object] = dict(_values(min_runtime, grace, preempt_interactive))
    if project or any_project or admins_only:
        values |= {"projects": project or [], "any_project": any_project}
    values |= ({"rank": rank} if rank is not None else {}) | ({"default": True} if default
                                                              else {})
    with Client.from_config() as client:
        _show(client.update_priority_class(name, **values), "changed", as_json)


@app.command("delete")
@friendly
def class_delete(name: str) -> None:
    """Remove a class no unfinished session uses."""
    with Client.from_config() as client:
        client.delete_priority_class(name)
    console.print(f"deleted priority class {name}", markup=False)


def _values(min_runtime: int | None, grace: int | None,
            interactive: bool | None) -> dict[str, int | bool]:
    given = {"min_runtime_s": min_runtime, "grace_s": grace, "preempt_interactive": interactive}
    return {key: value for key, value in given.items() if value is not None}


def _show(klass: PriorityClassPublic, verb: str, as_json: bool) -> None:
    if as_json:
        print_json(klass.model_dump(mode="json"))
        return
    interactive = "preemptible" if klass.preempt_interactive else "kept"
    console.print(f"{verb} priority class {klass.name}: rank {klass.rank}, minimum runtime "
                  f"{klass.min_runtime_s}s, grace {klass.grace_s}s, interactive sessions "
                  f"{interactive}" + (" (default)" if klass.default else "")
                  + f", used by {_who(klass)}", markup=False)


def _who(klass: PriorityClassPublic) -> str:
    if klass.any_project:
        return "everyone"
    return f"projects {', '.join(klass.projects)}" if klass.projects else "admins only"
