"""Login throttling: failed logins are counted per username and per client address in a window
(``auth.login_window``, starting with the first failure); past ``auth.login_failures_per_user``
or ``…_per_address`` the caller gets 429 with ``Retry-After`` until the window ends.

The check comes before anything costly: a throttled attempt reads one or two rows and never
computes a password hash. Hashes that do run are at most ``auth.password_checks`` at a time, so
a flood of logins queues instead of taking every core (argon2 is deliberately slow). Counters
live in the database (``login_failures``), so every manager replica counts the same failures.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field
from datetime import timedelta

from sqlalchemy import case, delete, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import LoginFailure
from gpuslice.manager.errors import TooManyRequests
from gpuslice.manager.settings import AuthSettings


@dataclass(frozen=True)
class LoginThrottle:
    """The limits, and the slots password hashes take turns in (one set per manager)."""

    window: float
    per_user: int
    per_address: int
    slots: asyncio.Semaphore = field(compare=False)

    @classmethod
    def of(cls, auth: AuthSettings) -> LoginThrottle:
        return cls(auth.login_window, auth.login_failures_per_user,
                   auth.login_failures_per_address, asyncio.Semaphore(auth.password_checks))

    async def check(self, db: AsyncSession, username: str, address: str | None) -> None:
        """``TooManyRequests`` (with the seconds to wait) when either counter is full."""
        limits = self._limits(username, address)
        now = utcnow()
        rows = await db.scalars(select(LoginFailure).where(LoginFailure.key.in_(limits)))
        for row in rows:
            ends = row.window_start + timedelta(seconds=self.window)
            if ends > now and row.failures >= limits[row.key]:
                wait = max(1, math.ceil((ends - now).total_seconds()))
                what = "this user" if row.key.startswith("user:") else "this address"
                await db.commit()
                raise TooManyRequests(
                    f"too many failed logins for {what}; try again in {wait} s", retry_after=wait
                )

    async def failed(self, db: AsyncSession, username: str, address: str | None) -> None:
        """Count one failure for the username and the address (committed)."""
        now = utcnow()
        stale = now - timedelta(seconds=self.window)
        dialect = postgresql if db.bind.dialect.name == "postgresql" else sqlite
        for key in self._limits(username, address):
            insert = dialect.insert(LoginFailure).values(key=key, window_start=now, failures=1)
            fresh = LoginFailure.window_start < stale
            await db.execute(insert.on_conflict_do_update(
                index_elements=[LoginFailure.key],
                set_={"failures": case((fresh, 1), else_=LoginFailure.failures + 1),
                      "window_start": case((fresh, now), else_=LoginFailure.window_start)},
            ))
        await db.commit()

    async def succeeded(self, db: AsyncSession, username: str) -> None:
        """The user's counter starts over (the address's does not). In the caller's
        transaction."""
        await db.execute(delete(LoginFailure).where(LoginFailure.key == _user_key(username)))

    def _limits(self, username: str, address: str | None) -> dict[str, int]:
        limits = {_user_key(username): self.per_user}
        if address:
            limits[f"addr:{address}"[:160]] = self.per_address
        return limits


def _user_key(username: str) -> str:
    return f"user:{username}"[:160]
