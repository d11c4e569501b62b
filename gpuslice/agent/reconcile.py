"""One reconciliation pass: make the node's containers match the sessions it should run.

Desired state comes from the caller (the manager's assignments); actual state from Docker's
labels, read fresh on every pass. Nothing else is remembered between passes, so a pass after
an agent or dockerd restart is the same as any other: adopt what runs, start what is missing,
stop and remove what is no longer wanted, and never leave two containers for one session.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpuslice.agent.runtime.docker import DockerRuntime
from gpuslice.agent.runtime.models import (
    ContainerRuntimeError,
    ContainerState,
    DockerUnavailable,
)
from gpuslice.agent.runtime.spec import ContainerSpec, container_name


@dataclass
class ReconcileResult:
    states: dict[str, ContainerState] = field(default_factory=dict)  # wanted sessions, now
    adopted: list[str] = field(default_factory=list)  # already running, left alone
    created: list[str] = field(default_factory=list)
    restarted: list[str] = field(default_factory=list)  # stopped interactive, started again
    stopped: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)  # session id → why it failed


async def reconcile(
    runtime: DockerRuntime,
    wanted: Sequence[ContainerSpec],
    *,
    grace_s: int = 10,
    remove_unwanted: bool = True,
    concurrency: int = 4,
) -> ReconcileResult:
    """Converge once. :class:`DockerUnavailable` propagates: the caller waits and retries."""
    result = ReconcileResult()
    wanted_ids = {spec.session_id for spec in wanted}
    actual = await runtime.list_managed()
    before = {s.session_id: s for s in actual if s.name == container_name(s.session_id)}

    for state in actual:
        stray = state.name != container_name(state.session_id)
        if state.session_id in wanted_ids and not stray:
            continue
        if stray:  # a second container claiming a session: only the named one may exist
            await runtime.remove_container(state.container_id)
            result.removed.append(state.session_id)
            continue
        if state.running:
            await runtime.stop(state.session_id, grace_s)
            result.stopped.append(state.session_id)
        if remove_unwanted:
            await runtime.remove(state.session_id)
            result.removed.append(state.session_id)

    limit = asyncio.Semaphore(concurrency)

    async def converge(spec: ContainerSpec) -> None:
        async with limit:
            try:
                state = await runtime.ensure_running(spec)
            except DockerUnavailable:
                raise
            except ContainerRuntimeError as exc:  # e.g. image missing: this session only
                result.errors[spec.session_id] = str(exc)
                return
        result.states[spec.session_id] = state
        previous = before.get(spec.session_id)
        if previous is None:
            result.created.append(spec.session_id)
        elif previous.running:
            result.adopted.append(spec.session_id)
        elif state.running:
            result.restarted.append(spec.session_id)

    await asyncio.gather(*(converge(spec) for spec in wanted))
    await runtime.prune_files()  # node files of sessions whose container is gone
    return result
