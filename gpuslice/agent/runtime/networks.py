"""Network calls of :class:`DockerRuntime`: the node's session network (see ``agent/isolation``).

A mixin like ``image_ops``: ``DockerRuntime`` supplies ``_call``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiodocker

from gpuslice.agent.runtime.models import ContainerRuntimeError

ICC = "com.docker.network.bridge.enable_icc"
BRIDGE_NAME = "com.docker.network.bridge.name"


@dataclass(frozen=True, slots=True)
class NetworkInfo:
    """A Docker network as the fence needs it."""

    name: str
    bridge: str
    subnet: str
    gateway: str
    containers: int  # containers attached now


class NetworkOps:
    _call: Callable[[Callable[[aiodocker.Docker], Awaitable[Any]]], Awaitable[Any]]

    async def ensure_network(
        self, name: str, bridge: str, labels: Mapping[str, str]
    ) -> NetworkInfo:
        """The bridge network ``name`` with inter-container traffic off and its interface named
        ``bridge``, created when missing; one that exists but is not so is refused."""
        found = await self.network(name)
        if found is None:
            config = {
                "Name": name, "Driver": "bridge", "CheckDuplicate": True,
                "Options": {ICC: "false", BRIDGE_NAME: bridge}, "Labels": dict(labels),
            }
            try:
                await self._call(lambda d: d.networks.create(config))
            except aiodocker.DockerError as exc:
                if exc.status != 409:  # 409: another agent of this node made it meanwhile
                    raise ContainerRuntimeError(
                        f"creating network {name} failed: {exc.message}") from exc
            found = await self.network(name)
        if found is None or found.bridge != bridge:
            raise ContainerRuntimeError(
                f"network {name} exists but is not the session network this agent makes "
                f"(bridge {bridge}, inter-container traffic off): remove it "
                f"(`docker network rm {name}`) and start the agent again"
            )
        return found

    async def network(self, name: str) -> NetworkInfo | None:
        """The network ``name`` as it is now, or ``None``."""
        try:
            network = await self._call(lambda d: d.networks.get(name))
            info = await self._call(lambda _d: network.show())
        except aiodocker.DockerError as exc:
            if exc.status == 404:
                return None
            raise
        options = info.get("Options") or {}
        ipam = ((info.get("IPAM") or {}).get("Config") or [{}])[0]
        bridge = options.get(BRIDGE_NAME, "") if options.get(ICC) == "false" else ""
        return NetworkInfo(
            name=str(info.get("Name", name)), bridge=str(bridge),
            subnet=str(ipam.get("Subnet", "")), gateway=str(ipam.get("Gateway", "")),
            containers=len(info.get("Containers") or {}),
        )

    async def remove_network(self, name: str) -> bool:
        """Remove the network; ``False`` when it is gone already or containers still use it."""
        try:
            network = await self._call(lambda d: d.networks.get(name))
            await self._call(lambda _d: network.delete())
        except aiodocker.DockerError as exc:
            if exc.status in (403, 404, 409):  # in use (older engines say 403), or gone
                return False
            raise
        return True
