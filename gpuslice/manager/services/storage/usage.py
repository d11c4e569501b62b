"""Storage usage and quotas: what each user's folders hold, measured, and the policy's limit.

A user's usage is the sum of their own folders (dot-folders included; shared folders count
for nobody). The storage loop measures every folder each ``storage.usage_interval`` (a walk
that never follows links) and stores the figures on the folder rows; an upload through the
API adds its bytes at once, so quotas hold between measurements. An upload reserves its bytes
before it writes one, and an unfinished one counts until it finishes or expires
(``reservations.py``): uploads beyond the quota are refused. What sessions write is only seen
by the next measurement, which reports users over their quota (with the sessions they run)
in the manager's log and in every usage answer. Hard
enforcement needs filesystem project quotas (XFS, or ext4 with the ``project`` feature) set
by the node admin on the folder directories; see the storage README.
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
from collections import defaultdict

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gpuslice.common.resources import format_mem
from gpuslice.common.schemas.sessions import FINAL
from gpuslice.common.schemas.storage import StorageUsage
from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import FolderRow, ResourcePolicyRow, SessionRow, UserRow
from gpuslice.manager.services.storage import reservations
from gpuslice.manager.services.storage.fs import StorageFS

log = logging.getLogger(__name__)
# Seconds an unfinished upload waits to be resumed: it holds its whole size of the quota
# meanwhile, so not long.
UPLOADS_KEPT = 86400.0


async def usage_of(db: AsyncSession, user: UserRow) -> StorageUsage:
    used, count, measured = (await db.execute(
        select(func.coalesce(func.sum(FolderRow.size), 0), func.count(),
               func.min(FolderRow.measured_at))
        .where(FolderRow.owner_id == user.id)
    )).one()
    quota = await quota_of(db, user.id)
    uploading = await reservations.held_by(db, user.id)
    await db.commit()
    used = int(used) + uploading
    return StorageUsage(
        user_id=user.id, username=user.username, used=used, uploading=uploading, quota=quota,
        over_quota=quota is not None and used > quota, folders=count, measured_at=measured,
    )


async def quota_of(db: AsyncSession, user_id: str) -> int | None:
    return await db.scalar(
        select(ResourcePolicyRow.max_storage)
        .join(UserRow, UserRow.policy_id == ResourcePolicyRow.id)
        .where(UserRow.id == user_id)
    )


async def measure_all(sessionmaker: async_sessionmaker[AsyncSession], fs: StorageFS) -> None:
    """One pass of the storage loop: measure every folder, report users over quota, and
    delete unfinished uploads nobody resumed for a day (their reservations with them)."""
    async with sessionmaker() as db:
        folders = [(f.id, f.storage_path) for f in await db.scalars(select(FolderRow))]
        await db.commit()
    for folder_id, path in folders:
        try:
            size, files = await asyncio.to_thread(measure, fs, path)
        except OSError as exc:
            log.warning("storage: cannot measure folder %s: %s", folder_id, exc)
            continue
        async with sessionmaker() as db:
            await db.execute(update(FolderRow).where(FolderRow.id == folder_id).values(
                size=size, files=files, measured_at=utcnow()))
            await db.commit()
    async with sessionmaker() as db:
        await report_over_quota(db)
    try:
        async with sessionmaker() as db:
            await reservations.expire(db, fs, UPLOADS_KEPT)
        await asyncio.to_thread(fs.purge_uploads, UPLOADS_KEPT)
    except OSError as exc:
        log.warning("storage: cannot purge old partial uploads: %s", exc)


async def report_over_quota(db: AsyncSession) -> list[str]:
    """Log every user whose folders hold more than their quota, with the sessions they run
    (those may be writing past it); the usernames."""
    rows = (await db.execute(
        select(UserRow.id, UserRow.username, ResourcePolicyRow.max_storage,
               func.coalesce(func.sum(FolderRow.size), 0))
        .join(ResourcePolicyRow, UserRow.policy_id == ResourcePolicyRow.id)
        .join(FolderRow, FolderRow.owner_id == UserRow.id)
        .where(ResourcePolicyRow.max_storage.is_not(None))
        .group_by(UserRow.id, UserRow.username, ResourcePolicyRow.max_storage)
    )).all()
    over = [(uid, name, quota, int(used)) for uid, name, quota, used in rows if used > quota]
    if not over:
        await db.commit()
        return []
    running: dict[str, list[str]] = defaultdict(list)
    for owner, session in await db.execute(
        select(SessionRow.owner_id, SessionRow.name)
        .where(SessionRow.owner_id.in_([o[0] for o in over]),
               SessionRow.status.not_in(list(FINAL)))
    ):
        running[owner].append(session)
    await db.commit()
    for uid, name, quota, used in over:
        sessions = ", ".join(sorted(running[uid])) or "none running"
        log.warning("storage: user %s uses %s of a %s quota (sessions: %s)", name,
                    format_mem(used), format_mem(quota), sessions)
    return [o[1] for o in over]


def measure(fs: StorageFS, storage_path: str) -> tuple[int, int]:
    """Bytes and count of the regular files under a folder; links are not followed."""
    top = fs.folder_fd(storage_path)
    try:
        return _walk(top)
    finally:
        os.close(top)


def _walk(fd: int) -> tuple[int, int]:
    size = files = 0
    with os.scandir(fd) as found:
        entries = list(found)
    for entry in entries:
        try:
            st = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        if stat.S_ISREG(st.st_mode):
            size += st.st_size
            files += 1
        elif stat.S_ISDIR(st.st_mode):
            try:
                sub = os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW,
                              dir_fd=fd)
            except OSError:
                continue
            try:
                more, count = _walk(sub)
            finally:
                os.close(sub)
            size += more
            files += count
    return size, files
