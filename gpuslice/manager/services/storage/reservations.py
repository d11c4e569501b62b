"""Bytes uploads in progress hold against a storage quota, reserved before a byte is written.

A file upload reserves its whole declared ``size`` when it starts or resumes, under its
partial file's name: the bytes held in ``<root>/.uploads`` count as the whole file until it is
finished (``finish``: the reservation becomes the folder's usage, in one transaction) or
expires (``expire``, from the storage loop: the partial file and its reservation go together).
An archive reserves as it unpacks: each file's size, read from its header before its bytes.

The check and the reservation are one step, whichever manager runs it. On PostgreSQL the
owner's row (the user, or the project for a project's folder) is locked first, so reservations
for one owner take turns and each reads the totals the one before committed. On SQLite the
reservation is written first, which takes the database's one write lock, and the totals are
read after it in the same transaction. A reservation that does not fit is rolled back.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

from sqlalchemy import ColumnElement, delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.resources import format_mem
from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import (
    FolderRow,
    ProjectRow,
    ResourcePolicyRow,
    UploadReservationRow,
    UserRow,
)
from gpuslice.manager.services.storage.archive import QuotaExceeded
from gpuslice.manager.services.storage.fs import StorageFS

log = logging.getLogger(__name__)
R = UploadReservationRow


async def reserve(
    db: AsyncSession, folder: FolderRow, key: str, user_id: str, size: int, *, spare: int = 0
) -> int:
    """Hold ``size`` bytes for upload ``key`` into ``folder`` (replacing what ``key`` held),
    plus up to ``spare`` more where the quota leaves them; the bytes now held.
    ``QuotaExceeded`` when ``size`` does not fit, and nothing held changes."""
    limit, whose, owner, mine = await _quota(db, folder)
    wanted = size + spare if limit is not None else size
    if owner is not None and db.get_bind().dialect.name == "postgresql":
        await db.execute(owner.with_for_update())
    await _hold(db, folder.id, key, user_id, wanted)
    if limit is not None and mine is not None:
        used, held = (await db.execute(select(
            _used(mine).scalar_subquery(), _held(mine).scalar_subquery()))).one()
        used, held = int(used), int(held) - wanted  # what others hold
        room = max(0, limit - used - held)
        if size > room:
            await db.rollback()
            raise QuotaExceeded(_refusal(size, whose, limit, room, used, held), field="size")
        if wanted > room:
            wanted = room
            await _hold(db, folder.id, key, user_id, wanted)
    await db.commit()
    return wanted


async def finish(db: AsyncSession, key: str, folder_id: str, size: int, files: int) -> None:
    """Upload ``key`` is in the folder: its reservation goes and the folder's figures grow,
    together (the next measurement replaces the figures)."""
    await db.execute(delete(R).where(R.id == key))
    await db.execute(update(FolderRow).where(FolderRow.id == folder_id).values(
        size=func.coalesce(FolderRow.size, 0) + size,
        files=func.coalesce(FolderRow.files, 0) + files,
    ))
    await db.commit()


async def release(db: AsyncSession, key: str) -> None:
    """Upload ``key`` failed and keeps nothing: its reservation goes."""
    await db.execute(delete(R).where(R.id == key))
    await db.commit()


async def held_by(db: AsyncSession, owner_id: str) -> int:
    """What the uploads in progress into the user's own folders hold."""
    return int(await db.scalar(_held(FolderRow.owner_id == owner_id)) or 0)


async def expire(db: AsyncSession, fs: StorageFS, older_than: float) -> int:
    """Drop the reservations of uploads nobody touched for ``older_than`` seconds, with their
    partial files (one still being written is kept: its reservation is touched instead);
    how many went."""
    cutoff = utcnow() - timedelta(seconds=older_than)
    stale = list(await db.scalars(select(R.id).where(R.touched_at < cutoff)))
    await db.commit()
    gone = 0
    for key in stale:
        if await asyncio.to_thread(fs.drop_partial, key, cutoff.timestamp()):
            await db.execute(delete(R).where(R.id == key, R.touched_at < cutoff))
            gone += 1
        else:
            await db.execute(update(R).where(R.id == key).values(touched_at=utcnow()))
        await db.commit()
    if gone:
        log.info("storage: %d unfinished upload(s) expired", gone)
    return gone


# ------------------------------------------------------------------ helpers


async def _quota(
    db: AsyncSession, folder: FolderRow
) -> tuple[int | None, str, Any, ColumnElement[bool] | None]:
    """The folder's quota (None: none), whose it is, a query of the row to lock, and which
    folders count against it."""
    result: tuple[int | None, str, Any, ColumnElement[bool] | None]
    if folder.project_id is not None:
        limit = await db.scalar(
            select(ProjectRow.max_storage).where(ProjectRow.id == folder.project_id))
        owner = select(ProjectRow.id).where(ProjectRow.id == folder.project_id)
        result = (limit, "project's storage quota", owner,
                  FolderRow.project_id == folder.project_id)
    elif folder.owner_id is not None:
        limit = await db.scalar(
            select(ResourcePolicyRow.max_storage)
            .join(UserRow, UserRow.policy_id == ResourcePolicyRow.id)
            .where(UserRow.id == folder.owner_id))
        owner = select(UserRow.id).where(UserRow.id == folder.owner_id)
        result = (limit, "storage quota", owner, FolderRow.owner_id == folder.owner_id)
    else:
        result = (None, "", None, None)
    await db.commit()  # nothing held before the lock (SQLite: before the write)
    return result


async def _hold(db: AsyncSession, folder_id: str, key: str, user_id: str, size: int) -> None:
    values = {"folder_id": folder_id, "user_id": user_id, "size": size, "touched_at": utcnow()}
    done: Any = await db.execute(update(R).where(R.id == key).values(**values))
    if done.rowcount == 0:
        await db.execute(insert(R).values(id=key, **values))


def _used(mine: ColumnElement[bool]) -> Any:
    return select(func.coalesce(func.sum(FolderRow.size), 0)).where(mine)


def _held(mine: ColumnElement[bool]) -> Any:
    return (select(func.coalesce(func.sum(R.size), 0))
            .join(FolderRow, FolderRow.id == R.folder_id).where(mine))


def _refusal(size: int, whose: str, limit: int, room: int, used: int, held: int) -> str:
    uploads = f", {format_mem(held)} held by unfinished uploads" if held else ""
    return (f"this needs {format_mem(size)} but the {whose} of {format_mem(limit)} leaves "
            f"{format_mem(room)} free ({format_mem(used)} used{uploads}): delete files you no "
            "longer need, finish your unfinished uploads (they count until finished, or for a "
            "day), or ask an admin to raise it")
