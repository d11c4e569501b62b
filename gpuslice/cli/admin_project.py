"""`gpuslice admin project ...`: projects, their members, quotas and resource groups (admins)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuslice.cli.output import (
    CliError,
    JsonOpt,
    console,
    friendly,
    mem,
    number,
    print_json,
    table,
)
from gpuslice.client import Client
from gpuslice.common.timelimits import format_limit

if TYPE_CHECKING:
    from gpuslice.common.schemas.projects import IdpGroups, ProjectPublic

app = typer.Typer(help="Projects: members, quotas, resource groups.", no_args_is_help=True)

GpuOpt = Annotated[str | None, typer.Option("--gpu", help="fGPU in use at once, e.g. 8.")]
CpuOpt = Annotated[str | None, typer.Option("--cpu", help="CPU cores in use at once.")]
MemOpt = Annotated[str | None, typer.Option("--mem", help="Memory in use at once, e.g. 256g.")]
SessionsOpt = Annotated[int | None, typer.Option("--sessions", help="Sessions at once.")]
StorageOpt = Annotated[str | None, typer.Option(
    "--storage", help="Bytes its folders may hold, e.g. 500g.")]
ModelOpt = Annotated[list[str] | None, typer.Option(
    "--gpu-model", help="fGPU of one GPU model at once, MODEL=N, e.g. a100=4 (repeat).")]
GroupsOpt = Annotated[list[str] | None, typer.Option(
    "--group", help="A resource group it may use (repeat; none: any).")]
DefaultTimeOpt = Annotated[str | None, typer.Option(
    "--default-time", help="Time limit of its sessions that name no --time, e.g. 2h, 1:30:00.")]
MaxTimeOpt = Annotated[str | None, typer.Option(
    "--max-time", help="The longest --time its sessions may ask for, e.g. 1d.")]


@app.command("create")
@friendly
def project_create(
    name: str, gpu: GpuOpt = None, cpu: CpuOpt = None, memory: MemOpt = None,
    sessions: SessionsOpt = None, storage: StorageOpt = None, gpu_model: ModelOpt = None,
    group: GroupsOpt = None, default_time: DefaultTimeOpt = None, max_time: MaxTimeOpt = None,
    description: Annotated[str, typer.Option(help="What it is for.")] = "",
    as_json: JsonOpt = False,
) -> None:
    """Make a project, with its quotas, the resource groups it may use and its time limits."""
    quotas = _quotas(gpu, cpu, memory, sessions, storage, gpu_model, group)
    quotas |= {"default_time_limit": default_time, "max_time_limit": max_time}
    with Client.from_config() as client:
        _show(client.create_project(name, description=description, **quotas), as_json)


@app.command("set")
@friendly
def project_set(
    name: str, gpu: GpuOpt = None, cpu: CpuOpt = None, memory: MemOpt = None,
    sessions: SessionsOpt = None, storage: StorageOpt = None, gpu_model: ModelOpt = None,
    group: GroupsOpt = None, default_time: DefaultTimeOpt = None, max_time: MaxTimeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Replace a project's quotas, groups and time limits (what is not given: no limit)."""
    quotas = _quotas(gpu, cpu, memory, sessions, storage, gpu_model, group)
    quotas |= {"default_time_limit": default_time, "max_time_limit": max_time}
    with Client.from_config() as client:
        _show(client.update_project(name, **quotas), as_json)


@app.command("rename")
@friendly
def project_rename(name: str, new_name: str, as_json: JsonOpt = False) -> None:
    """Rename a project: its members, quotas, sessions, folders and usage stay with it."""
    with Client.from_config() as client:
        project = client.rename_project(name, new_name)
    if as_json:
        print_json(project.model_dump(mode="json"))
        return
    console.print(f"renamed project {name} to {project.name}", markup=False)


@app.command("delete")
@friendly
def project_delete(name: str, as_json: JsonOpt = False) -> None:
    """Delete a project that has no sessions not ended, no folders and no runs."""
    with Client.from_config() as client:
        client.delete_project(name)
    if as_json:
        print_json({"deleted": name})
        return
    console.print(f"deleted project {name}", markup=False)


@app.command("add")
@friendly
def project_add(name: str, username: str, as_json: JsonOpt = False) -> None:
    """Let USERNAME launch in the project and use its folders."""
    with Client.from_config() as client:
        _show(client.add_project_member(name, username), as_json)


@app.command("remove")
@friendly
def project_remove(name: str, username: str, as_json: JsonOpt = False) -> None:
    """Take USERNAME out of the project (queued sessions cancelled, running ones kept).

    Waiting ones end CANCELLED: "removed from project NAME"; running ones go on."""
    with Client.from_config() as client:
        _show(client.remove_project_member(name, username), as_json)


@app.command("list")
@friendly
def project_list(as_json: JsonOpt = False) -> None:
    """Every project (but other users' personal ones), with its use against its quotas."""
    with Client.from_config() as client:
        projects = client.list_projects()
    if as_json:
        print_json([p.model_dump(mode="json") for p in projects])
        return
    table(["project", "members", "sessions", "fGPU", "cpu", "mem", "groups"],
          [(p.name, ", ".join(p.members) or "-", _of(p.usage.sessions, p.max_sessions),
            _of(number(p.usage.gpu), p.max_gpu and number(p.max_gpu)),
            _of(number(p.usage.cpu), p.max_cpu and number(p.max_cpu)),
            _of(mem(p.usage.mem), p.max_mem and mem(p.max_mem)),
            ", ".join(p.groups) if p.groups is not None else "any") for p in projects])


@app.command("show")
@friendly
def project_show(name: str, as_json: JsonOpt = False) -> None:
    """One project: members, quotas, groups, the identity providers' groups linked to it and
    what it uses now."""
    with Client.from_config() as client:
        project = client.get_project(name)
        links = client.get_idp_groups(project.name) if project.personal is False else []
    if as_json:
        print_json(project.model_dump(mode="json")
                   | {"idp_groups": [link.model_dump(mode="json") for link in links]})
        return
    _show(project, False)
    _show_links(links)


ProviderOpt = Annotated[str, typer.Option(
    "--provider", help="The identity provider the group is at: ldap or oidc.")]


@app.command("link-group")
@friendly
def project_link_group(name: str, group: str, provider: ProviderOpt = "ldap",
                       as_json: JsonOpt = False) -> None:
    """Make the members of GROUP at the provider members of the project.

    They join (and leave, when they leave the group) at their next sign-in or at the
    directory's re-check; members an admin added stay. GROUP is named as the provider sends it
    (a cn or a DN for LDAP, as auth.ldap.group_value says)."""
    _links(name, provider, lambda groups: [*groups, group], as_json)


@app.command("unlink-group")
@friendly
def project_unlink_group(name: str, group: str, provider: ProviderOpt = "ldap",
                         as_json: JsonOpt = False) -> None:
    """Stop GROUP at the provider giving membership of the project (its members leave at
    their next sign-in or re-check, unless an admin added them)."""
    def without(groups: list[str]) -> list[str]:
        if group not in groups:
            raise CliError(f"{group} is not linked to project {name} at {provider} (see "
                           f"`gpuslice admin project show {name}`)", 1)
        return [g for g in groups if g != group]
    _links(name, provider, without, as_json)


def _links(name: str, provider: str, change: Callable[[list[str]], list[str]],
           as_json: bool) -> None:
    if provider not in ("ldap", "oidc"):
        raise CliError(f"--provider must be ldap or oidc, got {provider!r}", 2)
    with Client.from_config() as client:
        now: dict[str, list[str]] = {link.provider: link.groups
                                     for link in client.get_idp_groups(name)}
        links = client.set_idp_groups(name, provider, change(now.get(provider, [])))
    if as_json:
        print_json([link.model_dump(mode="json") for link in links])
        return
    _show_links(links)


def _show_links(links: list[IdpGroups]) -> None:
    shown = "; ".join(f"{link.provider}: {', '.join(link.groups)}" for link in links)
    console.print(f"idp_groups: {shown or '-'}", markup=False)


def _quotas(gpu: str | None, cpu: str | None, memory: str | None, sessions: int | None,
            storage: str | None, models: list[str] | None, groups: list[str] | None
            ) -> dict[str, Any]:
    """As typed: the manager parses and bounds each, with one error line per field."""
    by_model: dict[str, str] = {}
    for item in models or []:
        model, sep, amount = item.partition("=")
        if not sep or not model or not amount:
            raise CliError(f"--gpu-model: {item!r} is not MODEL=N (e.g. a100=4)", 2)
        by_model[model] = amount
    return {"max_gpu": gpu, "max_cpu": cpu, "max_mem": memory, "max_sessions": sessions,
            "max_storage": storage, "max_gpu_models": by_model or None,
            "groups": groups or None}


def _of(used: object, limit: object) -> str:
    return f"{used} of {limit}" if limit not in (None, "") else f"{used}"


def _show(project: ProjectPublic, as_json: bool) -> None:
    if as_json:
        print_json(project.model_dump(mode="json"))
        return
    body = project.model_dump(mode="json", exclude={"id", "created_at"})
    for key, value in body.items():
        shown = json.dumps(value) if isinstance(value, dict | list) else value
        if key in ("default_time_limit", "max_time_limit") and value is not None:
            shown = format_limit(value)  # as --time takes it, not seconds
        console.print(f"{key}: {'-' if value is None else shown}", markup=False)
