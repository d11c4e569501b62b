"""One reader of every node's assignment version per replica, instead of one per long-poll.

A change made by this process wakes the node's long-poll through the hub when it commits. A
change made by another manager replica reaches this one only through the database: every
``interval`` seconds this watcher reads all nodes' versions in one query and wakes the
long-polls of the nodes whose version moved since its last look (or that it sees for the first
time). 1,000 parked long-polls then cost one query a second, not a thousand.

Nothing is missed: a long-poll takes its wake-up (``listen``) before it reads the version, so a
change after that read moves the version past what this watcher last saw, and the watcher's
next look wakes it. A wake-up that finds nothing new only costs that long-poll one read.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gpuslice.manager.db.models import NodeRow
from gpuslice.manager.events import Hub


class VersionWatch:
    def __init__(self, sessionmaker: async_sessionmaker[AsyncSession], hub: Hub) -> None:
        self._sessionmaker = sessionmaker
        self._hub = hub
        self._seen: dict[str, int] = {}

    async def look(self) -> int:
        """Wake the long-polls of nodes whose version moved; how many were woken."""
        async with self._sessionmaker() as db:
            versions = dict(
                (await db.execute(select(NodeRow.id, NodeRow.assignment_version))).tuples().all()
            )
            await db.commit()
        moved = [n for n, v in versions.items() if self._seen.get(n) != v]
        self._seen = versions
        return sum(self._hub.wake_node(node_id) for node_id in moved)
