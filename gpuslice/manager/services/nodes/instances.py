"""One live agent per node: a node's credential or name in a second agent's hands (a copied
data directory, a re-key token used while the node runs, two agents given one name) would have
two agents act on the same sessions. Each agent sends its own id (kept in its data directory,
``agent/identity.py``) when it registers and with its heartbeats; while the node's agent of
another id is alive (a heartbeat within ``live_s``), the newcomer is refused in one sentence.
Once that agent is silent, the next one takes the node over (a node moved to a new machine or
a restored data directory). An agent that sends no id (from before ids) is never refused.
"""

from __future__ import annotations

from gpuslice.common.schemas.agents import NodeStatus
from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import NodeRow
from gpuslice.manager.errors import Conflict

# An agent is live while its last heartbeat is within this many of its intervals.
LIVE_HEARTBEATS = 3


class NodeInUse(Conflict):
    code = "node_in_use"


def check_agent(node: NodeRow, agent_id: str | None, live_s: float) -> None:
    """Raise :class:`NodeInUse` when another agent than ``agent_id`` runs ``node`` now."""
    if agent_id is None or node.agent_id in (None, agent_id):
        return
    last = node.last_heartbeat_at
    if node.status != NodeStatus.ALIVE or last is None:
        return
    age = (utcnow() - last).total_seconds()
    if age >= live_s:
        return
    raise NodeInUse(
        f"node {node.name!r} is run by another live agent (its last heartbeat came {age:.0f} s "
        "ago): stop that agent first, or give this one another node name", field="name",
    )
