"""One node's session network and its fence, from the agent's start to its stop."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from gpuslice.agent.isolation.firewall import Firewall, FirewallError
from gpuslice.agent.isolation.policy import Fence, Rules, rules
from gpuslice.agent.runtime.networks import NetworkInfo, NetworkOps
from gpuslice.agent.runtime.spec import LABEL_NODE
from gpuslice.agent.settings import NetworkSettings

log = logging.getLogger(__name__)
BRIDGE_FILTERING = Path("/proc/sys/net/bridge/bridge-nf-call-iptables")
IPV6 = Path("/proc/sys/net/ipv6")


class IsolationError(RuntimeError):
    """The fence cannot be set up; the message says why and what to do."""


class SessionNetwork:
    """Sets up the node's session network and fence (:meth:`start`), takes it down
    (:meth:`stop`). ``name`` is what session containers join."""

    def __init__(
        self,
        docker: NetworkOps,
        node: str,
        settings: NetworkSettings,
        manager_url: str,
        *,
        firewall: Firewall | None = None,
        say: Callable[[str], None] = log.info,
    ) -> None:
        self.docker = docker
        self.fence = Fence(node)
        self.settings = settings
        self.manager_url = manager_url
        self.firewall = firewall or Firewall(self.fence)
        self.say = say
        self.info: NetworkInfo | None = None
        self._rules: Rules | None = None

    @property
    def name(self) -> str:
        return self.fence.network

    async def start(self) -> NetworkInfo:
        """The network, created when missing, and the fence installed (idempotent)."""
        try:
            await self.firewall.check()
            _bridge_filtering()
            self.info = await self.docker.ensure_network(
                self.fence.network, self.fence.bridge,
                {LABEL_NODE: self.fence.node, "gpuslice.network": "sessions"},
            )
            deny = [*await manager_addresses(self.manager_url), *self.settings.deny]
            self._rules = rules(self.fence, deny=deny, egress=self.settings.egress,
                                forward_from=await self.firewall.forward_chain())
            await self.firewall.apply(self._rules)
        except FirewallError as err:
            raise IsolationError(
                f"session network isolation could not be set up: {err}. Fix that, or set "
                "network.isolation = \"off\" (GPUSLICE_AGENT_NETWORK__ISOLATION=off) to run "
                "sessions unfenced"
            ) from None
        egress = "no outbound access" if self.settings.egress == "none" else "outbound open"
        self.say(f"agent: sessions run in network {self.name} ({self.info.subnet}), fenced "
                 f"from each other, the host and the manager; {egress}")
        return self.info

    async def stop(self) -> bool:
        """Take the fence and the network down, unless session containers still use them
        (they stay fenced until the next start adopts them). Whether it was taken down."""
        current = await self.docker.network(self.name)
        if current is not None and current.containers:
            self.say(f"agent: {current.containers} session container(s) still run in "
                     f"{self.name}: their network fence stays")
            return False
        await self.remove()
        return True

    async def remove(self) -> None:
        """The fence and the network, taken down whatever uses them (tests, uninstall)."""
        wanted = self._rules or rules(self.fence, deny=[], egress="open",
                                      forward_from=await self.firewall.forward_chain())
        await self.firewall.remove(wanted)
        await self.docker.remove_network(self.name)


async def manager_addresses(urls: str) -> list[str]:
    """The IPv4 addresses of every manager replica (``urls``: comma-separated, as the agent's
    ``manager_url``) a session must not reach (loopback ones are the host's, fenced anyway)."""
    addresses: set[str] = set()
    for url in urls.split(","):
        host = urlsplit(url.strip()).hostname or ""
        try:
            found = await asyncio.get_running_loop().getaddrinfo(
                host, None, family=socket.AF_INET, type=socket.SOCK_STREAM)
        except OSError:
            log.warning("manager host %s does not resolve now; it is not in the fence", host)
            continue
        addresses.update(str(info[4][0]) for info in found)
    return sorted(f"{a}/32" for a in addresses if not ipaddress.ip_address(a).is_loopback)


def ipv6_available() -> bool:
    """Whether the kernel has IPv6 (then sessions get it switched off by sysctl)."""
    return IPV6.is_dir()


def _bridge_filtering() -> None:
    # Traffic between two containers on one bridge passes iptables only with bridge netfilter
    # on; without it neither Docker's inter-container switch nor the fence holds.
    try:
        if BRIDGE_FILTERING.read_text().strip() != "1":
            BRIDGE_FILTERING.write_text("1\n")
    except OSError as err:
        raise FirewallError(
            f"bridge netfilter is not available ({err}): load it with `modprobe br_netfilter`"
        ) from None
