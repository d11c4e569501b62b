"""Applying and removing the fence's rules with ``iptables`` (Debian's package, run as root).

``iptables -w`` waits for the xtables lock, so the agent and dockerd never step on each other.
Only the agent's own chains are flushed or deleted; in Docker's and the built-in chains it adds
or deletes exactly its own jump rules.
"""

from __future__ import annotations

import asyncio
import shutil

from gpuslice.agent.isolation.policy import Fence, Rules


class FirewallError(RuntimeError):
    """iptables is missing, refused, or failed; the message says which and how to fix it."""


class Firewall:
    """The iptables side of one node's fence."""

    def __init__(self, fence: Fence, iptables: str = "iptables") -> None:
        self.fence = fence
        self.iptables = iptables

    async def check(self) -> None:
        """Fail now, clearly, when the rules could not be applied (no iptables, not root)."""
        if shutil.which(self.iptables) is None:
            raise FirewallError(
                f"{self.iptables} is not installed: session network isolation needs it "
                "(apt-get install iptables; tools/host-setup.sh does)"
            )
        await self._run("-L", "INPUT", "-n")

    async def forward_chain(self) -> str:
        """Where forwarded traffic is filtered first: Docker's DOCKER-USER when it exists."""
        found = await self._run("-L", "DOCKER-USER", "-n", check=False)
        return "DOCKER-USER" if found == 0 else "FORWARD"

    async def apply(self, wanted: Rules) -> None:
        """Make the fence exactly ``wanted`` (whatever an earlier run left)."""
        for chain, chain_rules in wanted.chains.items():
            if await self._run("-N", chain, check=False) != 0:
                await self._run("-F", chain)
            for rule in chain_rules:
                await self._run("-A", chain, *rule)
        for parent, rule in wanted.jumps:
            if await self._run("-C", parent, *rule, check=False) != 0:
                await self._run("-I", parent, "1", *rule)

    async def remove(self, wanted: Rules) -> None:
        """Take the jumps and the chains away (nothing of it left is not an error)."""
        for parent, rule in wanted.jumps:
            while await self._run("-D", parent, *rule, check=False) == 0:
                pass
        for chain in wanted.chains:
            if await self._run("-F", chain, check=False) == 0:
                await self._run("-X", chain, check=False)

    async def _run(self, *args: str, check: bool = True) -> int:
        process = await asyncio.create_subprocess_exec(
            self.iptables, "-w", "-t", "filter", *args,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )
        _out, err = await process.communicate()
        code = process.returncode or 0
        if check and code != 0:
            message = err.decode(errors="replace").strip()
            hint = " (the agent must run as root)" if "ermission" in message else ""
            raise FirewallError(f"iptables {' '.join(args)}: {message}{hint}")
        return code
