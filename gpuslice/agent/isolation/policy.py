"""The session fence as iptables rules (pure): which chains, which rules, which jumps."""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

#: Link-local addresses: cloud metadata services (169.254.169.254) and the like.
LINK_LOCAL = "169.254.0.0/16"
#: How refused traffic is answered: at once, so a session's connect fails fast and clearly.
REJECT = ["-j", "REJECT", "--reject-with", "icmp-admin-prohibited"]
ESTABLISHED = ["-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "RETURN"]


@dataclass(frozen=True, slots=True)
class Fence:
    """The names one node's fence uses: its Docker network, bridge and chains."""

    node: str

    @property
    def tag(self) -> str:
        return hashlib.sha256(self.node.encode()).hexdigest()[:10]

    @property
    def network(self) -> str:
        return f"gpuslice-{self.node}"

    @property
    def bridge(self) -> str:
        return f"gs{self.tag}"  # 12 characters: interface names hold 15

    @property
    def input_chain(self) -> str:
        return f"GS-{self.tag}-IN"

    @property
    def forward_chain(self) -> str:
        return f"GS-{self.tag}-FWD"


@dataclass(frozen=True, slots=True)
class Rules:
    """Every rule of the fence, as ``iptables`` arguments (after ``-t filter``)."""

    chains: dict[str, list[list[str]]]  # chain -> its rules (in order)
    jumps: list[tuple[str, list[str]]]  # (built-in or Docker chain, the rule jumping to ours)


def rules(fence: Fence, *, deny: Sequence[str], egress: str, forward_from: str) -> Rules:
    """The fence of ``fence``'s bridge. ``deny``: networks never reached (the manager's
    addresses and the admin's list); ``egress``: ``open`` or ``none``; ``forward_from``: the
    chain the forward jump goes in (``DOCKER-USER``, or ``FORWARD`` without Docker's)."""
    to_host = [ESTABLISHED, REJECT]  # every address of the host, every port
    outward = [
        ESTABLISHED,
        ["-o", fence.bridge, *REJECT],  # another session on this network
        ["-m", "conntrack", "--ctstate", "DNAT", *REJECT],  # ports the host publishes
        ["-d", LINK_LOCAL, *REJECT],
        *(["-d", network, *REJECT] for network in _ipv4(deny)),
    ]
    outward.append(REJECT if egress == "none" else ["-j", "RETURN"])
    return Rules(
        chains={fence.input_chain: to_host, fence.forward_chain: outward},
        jumps=[("INPUT", ["-i", fence.bridge, "-j", fence.input_chain]),
               (forward_from, ["-i", fence.bridge, "-j", fence.forward_chain])],
    )


def _ipv4(networks: Sequence[str]) -> list[str]:
    """The IPv4 networks of ``networks``, deduplicated (sessions have no IPv6 at all)."""
    out: list[str] = []
    for text in networks:
        network = ipaddress.ip_network(text, strict=False)
        if network.version == 4 and str(network) not in out:
            out.append(str(network))
    return out
