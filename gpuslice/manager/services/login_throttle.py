"""Login throttling: attempts are counted per username and per client address in a window
(``auth.login_window``, starting with the first attempt); past ``auth.login_failures_per_user``
or ``…_per_address`` the caller gets 429 with ``Retry-After`` until the window ends.

An attempt is counted *before* its password hash runs (one conditional upsert per counter that
returns the new count) and taken back when it succeeds, so however many requests arrive at once,
no more hashes run in a window than the limit allows. A throttled attempt costs one read and no
hash; each manager also remembers which keys it found throttled until their window ends, so a
flood from one address is answered without touching the database at all (the database stays the
truth: another replica reads it). Hashes that do run take turns (``auth.password_checks`` at
once) at the lowest CPU priority, so a flood never takes the cores other requests need (argon2
is deliberately slow).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import case, delete, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import LoginFailureRow
from gpuslice.manager.errors import TooManyRequests
from gpuslice.manager.security import PasswordChecks
from gpuslice.manager.settings import AuthSettings

MAX_REMEMBERED = 10_000  # throttled keys remembered in memory (oldest forgotten first)


@dataclass(frozen=True)
class LoginThrottle:
    """The limits, the slots password hashes take turns in, and the keys known throttled."""

    window: float
    per_user: int
    per_address: int
    checks: PasswordChecks = field(compare=False)
    blocked: dict[str, float] = field(default_factory=dict, compare=False)  # key -> until
    refused: dict[str, int] = field(default_factory=dict, compare=False)  # address -> count

    @classmethod
    def of(cls, auth: AuthSettings) -> LoginThrottle:
        return cls(auth.login_window, auth.login_failures_per_user,
                   auth.login_failures_per_address,
                   PasswordChecks(auth.password_checks, auth.password_check_nice))

    def gate(self, address: str | None) -> float | None:
        """Seconds an address this manager found throttled must still wait (``None``: it may
        try), known before its request is even read: the API's edge answers it at once."""
        until = self.blocked.get(_address_key(address)) if address else None
        left = until - time.monotonic() if until is not None else 0
        return left if left > 0 else None

    async def admit(self, db: AsyncSession, username: str, address: str | None) -> None:
        """Count this attempt, or refuse it with ``TooManyRequests`` (commits)."""
        limits = self._limits(username, address)
        try:
            self._refuse_remembered(limits)
            now = utcnow()
            rows = await db.scalars(select(LoginFailureRow).where(LoginFailureRow.key.in_(limits)))
            for row in rows:  # already full: refuse without writing
                self._refuse_if_full(row.key, row.failures, row.window_start, limits, now)
            counted = [await self._count(db, key, now) for key in limits]
            await db.commit()
            for key, failures, start in counted:
                self._refuse_if_full(key, failures - 1, start, limits, now)
        except TooManyRequests as refused:
            if address:
                self._note_refusal(_address_key(address), refused.retry_after)
            raise

    async def succeeded(self, db: AsyncSession, username: str, address: str | None) -> None:
        """Take the attempt back: the user's count starts over, the address's loses this one.
        In the caller's transaction."""
        await db.execute(delete(LoginFailureRow).where(LoginFailureRow.key == _user_key(username)))
        if address:
            await db.execute(
                update(LoginFailureRow)
                .where(LoginFailureRow.key == _address_key(address), LoginFailureRow.failures > 0)
                .values(failures=LoginFailureRow.failures - 1)
            )

    def _note_refusal(self, key: str, seconds: float) -> None:
        # An address that goes on after being refused as often as its limit allows attempts is
        # flooding: from now on it is refused before its request is read (``gate``).
        count = self.refused.pop(key, 0) + 1
        if count >= self.per_address:
            self._remember(key, seconds)
        else:
            if len(self.refused) >= MAX_REMEMBERED:
                self.refused.pop(next(iter(self.refused)))
            self.refused[key] = count

    def _remember(self, key: str, seconds: float) -> None:
        if len(self.blocked) >= MAX_REMEMBERED:
            self.blocked.pop(next(iter(self.blocked)))
        self.blocked[key] = time.monotonic() + seconds

    def _refuse_remembered(self, limits: dict[str, int]) -> None:
        now = time.monotonic()
        for key in limits:
            until = self.blocked.get(key)
            if until is not None and until > now:
                raise _too_many(key, until - now)
            self.blocked.pop(key, None)

    def _refuse_if_full(self, key: str, failures: int, start: datetime,
                        limits: dict[str, int], now: datetime) -> None:
        ends = start + timedelta(seconds=self.window)
        left = (ends - now).total_seconds()
        if left > 0 and failures >= limits[key]:
            self._remember(key, left)
            raise _too_many(key, left)

    async def _count(
        self, db: AsyncSession, key: str, now: datetime
    ) -> tuple[str, int, datetime]:
        """One more attempt on ``key`` (a new window when the last one ended): its count and
        window start after it."""
        stale = now - timedelta(seconds=self.window)
        dialect = postgresql if db.bind.dialect.name == "postgresql" else sqlite
        fresh = LoginFailureRow.window_start < stale
        statement = (
            dialect.insert(LoginFailureRow).values(key=key, window_start=now, failures=1)
            .on_conflict_do_update(
                index_elements=[LoginFailureRow.key],
                set_={"failures": case((fresh, 1), else_=LoginFailureRow.failures + 1),
                      "window_start": case((fresh, now), else_=LoginFailureRow.window_start)},
            )
            .returning(LoginFailureRow.failures, LoginFailureRow.window_start)
        )
        failures, start = (await db.execute(statement)).one()
        return key, int(failures), start

    def _limits(self, username: str, address: str | None) -> dict[str, int]:
        limits = {_user_key(username): self.per_user}
        if address:
            limits[_address_key(address)] = self.per_address
        return limits


def too_many(address: bool, seconds: float) -> tuple[str, int]:
    """The message and the Retry-After seconds of a throttled login."""
    wait = max(1, math.ceil(seconds))
    what = "this address" if address else "this user"
    return f"too many failed logins for {what}; try again in {wait} s", wait


def _too_many(key: str, seconds: float) -> TooManyRequests:
    message, wait = too_many(key.startswith("addr:"), seconds)
    return TooManyRequests(message, retry_after=wait)


def _user_key(username: str) -> str:
    return f"user:{username}"[:160]


def _address_key(address: str) -> str:
    return f"addr:{address}"[:160]
