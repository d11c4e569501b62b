"""`gpuslice admin recover`: the local first admin back, when no admin can log in.

It runs on the manager host with the database at hand (as `admin backup` does), not through the
API, so it works when every admin is locked out, disabled or demoted. In one transaction it
resets the admin's password (or makes the admin again), makes it an active admin, ends every
token it had, and writes its audit row (actor ``host:<hostname>/<os user>``); the new password
goes to ``<data_dir>/admin-credentials`` (0600) as the first start's did. It works while the
managers run: SQLite in WAL mode waits its turn, PostgreSQL takes it as any client.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import inspect, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.schemas.users import Role
from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.engine import make_engine
from gpuslice.manager.db.in_use import database_file
from gpuslice.manager.db.models import ApiTokenRow, UserRow
from gpuslice.manager.security import hash_password, new_password
from gpuslice.manager.services.audit.record import record
from gpuslice.manager.services.users import CREDENTIALS_FILE, write_private


class RecoverError(Exception):
    """Why the admin could not be recovered (one line)."""


@dataclass(frozen=True, slots=True)
class Recovered:
    username: str
    created: bool  # no user had the name: the admin was made anew
    tokens_ended: int
    credentials: Path
    actor: str


def actor() -> str:
    """Who recovers: this host and the operating-system user running the command."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"host:{socket.gethostname()}/{user}"


async def recover(url: str, username: str, data_dir: Path) -> Recovered:
    """Reset (or make) the local admin ``username`` in the database at ``url``; its new
    password in ``data_dir/admin-credentials``, written only once the change is committed."""
    sqlite_file = database_file(url)
    if sqlite_file is not None and not sqlite_file.is_file():
        raise RecoverError(f"no database at {sqlite_file}: is this the data directory (or "
                           "--config) the manager runs with?")
    password = new_password()
    password_hash = await hash_password(password)
    who = actor()
    credentials = data_dir / CREDENTIALS_FILE
    staged = data_dir / f".{CREDENTIALS_FILE}.new"
    engine = make_engine(url, pool_size=1)
    try:
        async with AsyncSession(engine, expire_on_commit=False) as db:
            await _require_schema(db)
            write_private(staged, f"username: {username}\npassword: {password}\n")
            created, ended = await _reset(db, username, password_hash, who)
            await db.commit()
    except SQLAlchemyError as exc:
        with contextlib.suppress(OSError):
            staged.unlink()
        detail = str(getattr(exc, "orig", None) or exc).splitlines()[0][:300]
        raise RecoverError(f"the database refused the change: {detail}") from None
    except OSError as exc:
        raise RecoverError(f"{exc.filename or data_dir}: {exc.strerror or exc}") from None
    finally:
        await engine.dispose()
    os.replace(staged, credentials)
    return Recovered(username, created, ended, credentials, who)


async def _reset(db: AsyncSession, username: str, password_hash: str,
                 who: str) -> tuple[bool, int]:
    """The change itself, in ``db``'s transaction: (made anew?, tokens ended)."""
    user = await db.scalar(select(UserRow).where(UserRow.username == username))
    created = user is None
    if user is None:
        user = UserRow(username=username, password_hash=password_hash, role=Role.ADMIN,
                       is_active=True)
        db.add(user)
        await db.flush()
        before = None
    else:
        before = {"role": Role(user.role).value, "is_active": user.is_active}
        user.password_hash, user.role, user.is_active = password_hash, Role.ADMIN, True
    ended = await db.execute(
        update(ApiTokenRow)
        .where(ApiTokenRow.user_id == user.id, ApiTokenRow.revoked_at.is_(None))
        .values(revoked_at=utcnow())
    )
    count = int(ended.rowcount or 0)  # type: ignore[attr-defined]
    row = record(db, "admin.recover", actor=who, target_type="user", target_id=user.id,
                 details={"created": created, "before": before, "tokens_ended": count,
                          "severity": "high"})
    row.via = "host"  # a system actor named by the host and OS user, not by a loop
    return created, count


async def _require_schema(db: AsyncSession) -> None:
    """The database is a gpuslice one, migrated (its manager started once at least)."""
    tables = await (await db.connection()).run_sync(lambda c: inspect(c).get_table_names())
    missing = {"users", "api_tokens", "audit_log"} - set(tables)
    if missing:
        raise RecoverError(
            f"the database has no {', '.join(sorted(missing))} table: start the manager once "
            "(it migrates the database), or name the database it uses (--config)")
