"""Network sandbox calls of :class:`DockerRuntime` (the pool is ``agent/isolation/sandboxes.py``).

A sandbox is a small container in the node's session network whose network namespace session
containers join (``NetworkMode: container:<id>``). A joined container's own listing shows no
address, so the runtime keeps each sandbox's (``sandbox_addresses``) and gives it to the
containers that joined it.

A mixin like ``networks``: ``DockerRuntime`` supplies ``_call`` and ``remove_container``.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import aiodocker

from gpuslice.agent.runtime.models import ContainerRuntimeError, ContainerState, addresses_of
from gpuslice.agent.runtime.spec import LABEL_NODE

LABEL_SANDBOX = "gpuslice.sandbox"  # value: the network the sandbox is in


class SandboxUnusable(ContainerRuntimeError):
    """A session container just created could not join its sandbox (gone or stopped); the
    container was removed again, so the start can go another way."""


@dataclass(frozen=True, slots=True)
class SandboxState:
    """A sandbox container as a listing shows it."""

    id: str
    image: str
    running: bool
    addresses: Mapping[str, str]


class SandboxOps:
    _call: Callable[[Callable[[aiodocker.Docker], Awaitable[Any]]], Awaitable[Any]]
    _client: Callable[[], aiodocker.Docker]
    remove_container: Callable[[str], Awaitable[None]]
    node_name: str
    sandbox_addresses: dict[str, Mapping[str, str]]

    async def start_sandbox(self, config: dict[str, Any], name: str) -> str:
        """Create and start a sandbox; its id, once it runs and has its address. One that
        cannot run (its image has no ``sleep``, say) is removed again and refused."""
        try:
            container = await self._call(lambda d: d.containers.create(config=config, name=name))
        except aiodocker.DockerError as exc:
            raise ContainerRuntimeError(f"creating sandbox {name} failed: {exc.message}") from exc
        try:
            await self._call(lambda _d: container.start())
            info = await self._call(lambda _d: container.show())
        except BaseException as exc:  # nothing half made is left behind
            await self.remove_container(container.id)
            if isinstance(exc, aiodocker.DockerError):
                raise ContainerRuntimeError(
                    f"starting sandbox {name} failed: {exc.message}") from exc
            raise
        addresses = addresses_of(info)
        if not (info.get("State") or {}).get("Running") or not addresses:
            await self.remove_container(container.id)
            raise ContainerRuntimeError(f"sandbox {name} stopped at once (exit code "
                                        f"{(info.get('State') or {}).get('ExitCode')})")
        self.sandbox_addresses[container.id] = addresses
        return str(container.id)

    async def wake_sandbox(self, sandbox_id: str) -> None:
        """Start a stopped sandbox again (the Docker Engine restarted), before a session that
        joined it starts again; its address is looked up anew."""
        container = self._client().containers.container(sandbox_id)
        try:
            await self._call(lambda _d: container.start())
        except aiodocker.DockerError as exc:
            if exc.status == 404:
                raise ContainerRuntimeError(
                    f"the session's network sandbox {sandbox_id[:12]} is gone (removed by "
                    "hand?); the session cannot start again in it") from exc
            if exc.status != 304:  # 304: it runs
                raise ContainerRuntimeError(
                    f"starting network sandbox {sandbox_id[:12]} failed: {exc.message}"
                ) from exc
        info = await self._call(lambda _d: container.show())
        self.sandbox_addresses[sandbox_id] = addresses_of(info)

    async def list_sandboxes(self, network: str) -> list[SandboxState]:
        """This node's sandboxes in ``network``, running or not."""
        filters = {"label": [f"{LABEL_SANDBOX}={network}", f"{LABEL_NODE}={self.node_name}"]}
        listed = await self._call(
            lambda d: d.containers.list(all=True, filters=json.dumps(filters)))
        found = []
        for container in listed:
            entry = container._container
            found.append(SandboxState(
                id=str(entry["Id"]), image=str(entry.get("Image", "")),
                running=entry.get("State") == "running", addresses=addresses_of(entry),
            ))
        for sandbox in found:
            if sandbox.addresses:
                self.sandbox_addresses[sandbox.id] = sandbox.addresses
        return found

    async def remove_sandbox(self, sandbox_id: str) -> None:
        """Remove a sandbox (no session may be in it: the pool sees to that)."""
        self.sandbox_addresses.pop(sandbox_id, None)
        await self.remove_container(sandbox_id)

    def with_sandbox_address(self, state: ContainerState) -> ContainerState:
        """A container that joined a sandbox has that sandbox's address."""
        if state.sandbox and not state.addresses:
            known = self.sandbox_addresses.get(state.sandbox)
            if known:
                return replace(state, addresses=known)
        return state
