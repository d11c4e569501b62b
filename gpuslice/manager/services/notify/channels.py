"""Channels: who may make, see and use which.

A user's channel is theirs alone: anyone else, admins too, gets the 404 of a missing one (it
may carry the user's secret URL). A project's channel is made and seen by admins only (it
carries every member's session names); a user who is no member of the project gets the same
404 as for a missing project. E-mail goes only to addresses an admin set: a user cannot make
the manager mail whoever they like.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.schemas.notify import (
    ChannelCreate,
    ChannelCreated,
    ChannelKind,
    ChannelPublic,
    ChannelUpdate,
    DeliveryPublic,
    TestResult,
)
from gpuslice.common.schemas.users import Role
from gpuslice.manager.db.base import new_id
from gpuslice.manager.db.models import (
    NotificationChannelRow,
    NotificationOutboxRow,
    ProjectMemberRow,
    ProjectRow,
    UserRow,
)
from gpuslice.manager.errors import Forbidden, InvalidRequest, NotFound
from gpuslice.manager.services.notify import enqueue
from gpuslice.manager.services.notify.guard import redact, resolve
from gpuslice.manager.services.notify.send import new_secret, send
from gpuslice.manager.settings import NotifySettings

MAX_CHANNELS = 20  # per user or project
_EMAIL = r"^[^@\s<>,;\"]+@[^@\s<>,;\"]+\.[^@\s<>,;\"]+$"


async def create(db: AsyncSession, user: UserRow, body: ChannelCreate,
                 settings: NotifySettings) -> ChannelCreated:
    owner_id, project_id = await _owner(db, user, body)
    target = body.target.strip()
    if body.kind is ChannelKind.EMAIL:
        if user.role != Role.ADMIN:
            raise Forbidden("e-mail channels are set by admins (the manager mails only "
                            "addresses an admin set); add a webhook, or ask an admin",
                            field="kind")
        if not settings.smtp_host:
            raise InvalidRequest("no SMTP server is set (notify.smtp_host): e-mail cannot "
                                 "be sent", field="kind")
        if not re.fullmatch(_EMAIL, target):
            raise InvalidRequest(f"{target!r} is not an e-mail address", field="target")
    else:
        await resolve(target, settings.allowed_targets)  # refused now, and again at each send
    same = (NotificationChannelRow.owner_id == owner_id if owner_id
            else NotificationChannelRow.project_id == project_id)
    if len((await db.scalars(select(NotificationChannelRow.id).where(same))).all()) \
            >= MAX_CHANNELS:
        raise InvalidRequest(f"at most {MAX_CHANNELS} channels each; remove one first")
    row = NotificationChannelRow(
        id=new_id(), owner_id=owner_id, project_id=project_id, kind=body.kind.value,
        name=body.name, target=target, events=body.events, pending_after=body.pending_after,
        secret=new_secret() if body.kind is ChannelKind.WEBHOOK else None, enabled=True,
        disabled_reason="")
    db.add(row)
    await db.commit()
    public = await _public(db, row)
    return ChannelCreated(**public.model_dump(), secret=row.secret)


async def list_channels(db: AsyncSession, user: UserRow) -> list[ChannelPublic]:
    """The caller's channels; an admin's list also has every project's."""
    mine = NotificationChannelRow.owner_id == user.id
    if user.role == Role.ADMIN:
        mine = mine | NotificationChannelRow.project_id.is_not(None)
    rows = (await db.scalars(select(NotificationChannelRow).where(mine)
                             .order_by(NotificationChannelRow.created_at))).all()
    return [await _public(db, row) for row in rows]


async def get(db: AsyncSession, user: UserRow, channel_id: str) -> NotificationChannelRow:
    row = await db.get(NotificationChannelRow, channel_id)
    if row is None or not _mine(user, row):
        raise NotFound(f"no notification channel {channel_id}", field="channel")
    return row


async def update(db: AsyncSession, user: UserRow, channel_id: str,
                 body: ChannelUpdate) -> ChannelPublic:
    row = await get(db, user, channel_id)
    if body.name is not None:
        row.name = body.name
    if body.events is not None:
        row.events = body.events
    if body.pending_after is not None:
        row.pending_after = body.pending_after
    if body.enabled is not None:
        row.enabled = body.enabled
        row.disabled_reason = "" if body.enabled else "disabled by its owner"
    await db.commit()
    return await _public(db, row)


async def remove(db: AsyncSession, user: UserRow, channel_id: str) -> None:
    await db.delete(await get(db, user, channel_id))
    await db.commit()


async def test(db: AsyncSession, user: UserRow, channel_id: str, settings: NotifySettings,
               console_url: str | None) -> TestResult:
    """Send a `notify.test` now, not through the outbox: the answer is the receiver's."""
    row = await get(db, user, channel_id)
    kind, target, secret = row.kind, row.target, row.secret
    name, sender = row.name or row.kind, user.username
    await db.rollback()  # no transaction held while the receiver answers
    now = datetime.now(UTC)
    delivery_id = new_id()
    event = {"type": "notify.test", "id": delivery_id, "time": enqueue.iso(now),
             "session": None,
             "data": {"message": f"a test of channel {name}, sent by {sender}"}}
    outcome = await send(kind, target, secret, delivery_id, event, settings)
    return TestResult(ok=outcome.ok, status=outcome.status or "no answer",
                      error=outcome.error)


async def deliveries(db: AsyncSession, user: UserRow, *, channel_id: str | None,
                     status: str | None, failed_only: bool = False, everyone: bool = False,
                     limit: int = 50) -> list[DeliveryPublic]:
    """The caller's channels' deliveries, newest first; ``everyone`` (admins): all of them."""
    stmt = (select(NotificationOutboxRow, NotificationChannelRow)
            .join(NotificationChannelRow,
                  NotificationChannelRow.id == NotificationOutboxRow.channel_id)
            .order_by(NotificationOutboxRow.created_at.desc()).limit(limit))
    if not everyone:
        mine = NotificationChannelRow.owner_id == user.id
        if user.role == Role.ADMIN:
            mine = mine | NotificationChannelRow.project_id.is_not(None)
        stmt = stmt.where(mine)
    if channel_id is not None:
        stmt = stmt.where(NotificationOutboxRow.channel_id == channel_id)
    if status is not None:
        stmt = stmt.where(NotificationOutboxRow.status == status)
    if failed_only:
        stmt = stmt.where((NotificationOutboxRow.status == "dead")
                          | (NotificationOutboxRow.last_error != ""))
    rows = (await db.execute(stmt)).all()
    owners = await _usernames(db, {c.owner_id for _, c in rows if c.owner_id})
    return [DeliveryPublic(
        id=r.id, channel_id=c.id, channel=c.name or c.kind, owner=owners.get(c.owner_id or ""),
        event=r.event.get("type", ""), session=(r.event.get("session") or {}).get("name"),
        status=r.status, attempts=r.attempts, last_status=r.last_status,
        last_error=r.last_error, created_at=r.created_at,
        next_attempt_at=r.next_attempt_at if r.status == "pending" else None,
        sent_at=r.sent_at) for r, c in rows]


async def _owner(db: AsyncSession, user: UserRow, body: ChannelCreate
                 ) -> tuple[str | None, str | None]:
    if body.project is not None:
        if body.user is not None:
            raise InvalidRequest("give a project or a user, not both", field="user")
        project = await _project(db, user, body.project)
        if user.role != Role.ADMIN:
            raise Forbidden("a project's channels are set by admins (they carry every "
                            "member's session names)", field="project")
        return None, project.id
    if body.user is None or body.user == user.username:
        return user.id, None
    if user.role != Role.ADMIN:
        raise Forbidden("you can add channels for yourself only", field="user")
    owner = await db.scalar(select(UserRow).where(UserRow.username == body.user))
    if owner is None:
        raise NotFound(f"no user {body.user}", field="user")
    return owner.id, None


async def _project(db: AsyncSession, user: UserRow, name: str) -> ProjectRow:
    """The project ``name`` if ``user`` may see it (admins any, users theirs); to anyone else
    the 404 of a project that does not exist (as ``projects.get_project``, which this package,
    below ``lifecycle``, cannot import)."""
    stmt = select(ProjectRow).where((ProjectRow.name == name) | (ProjectRow.id == name))
    if user.role != Role.ADMIN:
        members = select(ProjectMemberRow.project_id).where(ProjectMemberRow.user_id == user.id)
        stmt = stmt.where(ProjectRow.id.in_(members) | (ProjectRow.personal_of == user.id))
    row = await db.scalar(stmt)
    if row is None:
        raise NotFound(f"no project {name}", field="project")
    return row


def _mine(user: UserRow, row: NotificationChannelRow) -> bool:
    if row.owner_id is not None:
        return row.owner_id == user.id
    return user.role == Role.ADMIN


async def _public(db: AsyncSession, row: NotificationChannelRow) -> ChannelPublic:
    owner = project = None
    if row.owner_id:
        owner = await db.scalar(select(UserRow.username).where(UserRow.id == row.owner_id))
    if row.project_id:
        project = await db.scalar(select(ProjectRow.name).where(ProjectRow.id == row.project_id))
    target = row.target if row.kind == ChannelKind.EMAIL else redact(row.target)
    return ChannelPublic(
        id=row.id, kind=ChannelKind(row.kind), name=row.name, target=target, owner=owner,
        project=project, events=list(row.events), pending_after=row.pending_after,
        enabled=row.enabled, disabled_reason=row.disabled_reason, created_at=row.created_at)


async def _usernames(db: AsyncSession, ids: set[str]) -> dict[str, str]:
    if not ids:
        return {}
    rows = await db.execute(select(UserRow.id, UserRow.username).where(UserRow.id.in_(ids)))
    return {user_id: name for user_id, name in rows.all()}  # noqa: C416 -- Row, not tuple
