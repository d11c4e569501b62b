"""In-process wake-ups, published only after the transaction that caused them commits.

The database is the source of truth; these signals only make waiters (the scheduling loop,
agents' long-polls, status streams, asks waiting for an agent's answer) look again *now* instead
of at their next poll. Waiters always also poll the database, so several manager replicas still
work without them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

_KEY = "gpuslice.wakeups"
HUB_KEY = "gpuslice.hub"


class Signal:
    """Wakes every current waiter at once.

    Take ``listen()`` *before* looking at the database, then wait for it
    (``common.waits.wait_event``): a notify that lands between the look and the wait is not
    missed.
    """

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def notify(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    def listen(self) -> asyncio.Event:
        return self._event


@dataclass
class Hub:
    scheduler: asyncio.Event = field(default_factory=asyncio.Event)
    history: Signal = field(default_factory=Signal)
    answers: Signal = field(default_factory=Signal)  # an agent answered a request
    notify: asyncio.Event = field(default_factory=asyncio.Event)  # a notification to send
    closing: asyncio.Event = field(default_factory=asyncio.Event)
    _nodes: dict[str, Signal] = field(default_factory=dict)

    def close(self) -> None:
        """The server is shutting down: long-polls answer now and event streams end, so that
        no open request holds the shutdown for its whole wait."""
        self.closing.set()
        self.scheduler.set()
        for signal in (self.history, self.answers, *self._nodes.values()):
            signal.notify()

    def node(self, node_id: str) -> Signal:
        return self._nodes.setdefault(node_id, Signal())

    def wake_node(self, node_id: str) -> bool:
        """Wake the node's waiters if anyone ever waited for it here; whether it did."""
        signal = self._nodes.get(node_id)
        if signal is not None:
            signal.notify()
        return signal is not None

    def publish(self, wakeups: Iterable[tuple[str, str]]) -> None:
        for kind, key in wakeups:
            if kind == "scheduler":
                self.scheduler.set()
            elif kind == "node":
                self.node(key).notify()
            elif kind == "history":
                self.history.notify()
            elif kind == "answer":
                self.answers.notify()
            elif kind == "notify":
                self.notify.set()


def wake_after_commit(db: AsyncSession, kind: str, key: str = "") -> None:
    """Queue a wake-up (``scheduler``, ``node``+id, ``history``, ``answer``,
    ``notify``) for the next
    commit."""
    db.info.setdefault(_KEY, set()).add((kind, key))


class HubSession(Session):
    """The manager's ORM session: publishes queued wake-ups to ``info[HUB_KEY]`` on commit."""


def _after_commit(session: Session) -> None:
    wakeups: set[Any] = session.info.pop(_KEY, set())
    hub: Hub | None = session.info.get(HUB_KEY)
    if hub is not None and wakeups:
        hub.publish(wakeups)


def _after_rollback(session: Session) -> None:
    session.info.pop(_KEY, None)


event.listen(HubSession, "after_commit", _after_commit)
event.listen(HubSession, "after_rollback", _after_rollback)
