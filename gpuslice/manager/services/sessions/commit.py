"""Commit a RUNNING session's container into a new private image, through its node's agent.

Like exec, a ``commit`` request on the channel: the agent commits through the Engine API and
answers the new image's id, size and labels; the user's POST waits for the answer, up to
``sessions.commit_timeout``. Synchronous on purpose: the caller wants the image to launch next,
and a commit of a session image takes seconds to tens of seconds. Should the wait end first,
the image still reaches the catalog: its labels name its owner and origin, so the node's next
heartbeat records it as the owner's private image.

The new image is private to the session's owner (admins see all) until an admin publishes it,
and counts against the owner's policy ``max_private_images``.
"""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.image_refs import tag_of
from gpuslice.common.images import LABEL_ORIGIN_SESSION, LABEL_OWNER
from gpuslice.common.schemas.agents import CommitAnswer, CommitAsk
from gpuslice.common.schemas.images import ImagePublic, SessionCommit, SessionCommitResult
from gpuslice.common.schemas.sessions import SessionStatus
from gpuslice.manager.db.models import Image, ResourcePolicy, SessionRow, User
from gpuslice.manager.errors import Conflict, InvalidRequest
from gpuslice.manager.services.channel import Channel
from gpuslice.manager.services.images import catalog, reports
from gpuslice.manager.services.sessions import agent
from gpuslice.manager.settings import ManagerSettings

NOTE = (
    "files in storage folders are not part of the image: only the container's own filesystem "
    "(e.g. packages installed in the home directory) is"
)


async def commit_session(
    channel: Channel, row: SessionRow, body: SessionCommit, settings: ManagerSettings
) -> SessionCommitResult:
    """Snapshot the session as ``body.name`` (tag: the session's name when none is given).

    Raises ``Conflict`` ``not_running``, ``image_exists``, ``node_lost`` or ``commit_failed``
    (the agent's message), ``InvalidRequest`` ``quota_exceeded`` at the owner's private image
    limit, and ``AgentTimeout`` when no answer came within ``sessions.commit_timeout``.
    """
    if row.status != SessionStatus.RUNNING or row.node_id is None:
        raise Conflict(
            f"session {row.name} is {row.status}: only a RUNNING session can be committed",
            code="not_running",
        )
    if "@" in body.name:
        raise InvalidRequest(
            f"{body.name!r}: a commit is named by repository[:tag], not by digest",
            field="name", code="invalid_image",
        )
    reference = catalog.reference_or_error(
        body.name if tag_of(body.name) else f"{body.name}:{row.name}", "name"
    )
    async with channel.sessionmaker() as db:
        owner = await db.get(User, row.owner_id)
        assert owner is not None  # sessions.owner_id is a RESTRICT foreign key
        await _check_name(db, reference, settings.sessions.allowed_images)
        await _check_limit(db, owner)
        await db.commit()
    wait = settings.sessions.commit_timeout
    ask = CommitAsk(
        reference=reference, labels={LABEL_OWNER: owner.username, LABEL_ORIGIN_SESSION: row.id}
    )
    done = await agent.ask(
        channel, row, ask, CommitAnswer, timeout=wait,
        late=f"finish the commit within {wait:g} s; the image appears in "
        "`gpuslice image list` if it completes later",
    )
    if done.error:
        raise Conflict(done.error, code="commit_failed")
    async with channel.sessionmaker() as db:
        await _record(db, row, reference, done, owner_id=owner.id)
        listed = await catalog.list_images(db, owner, settings.sessions.allowed_images)
    image = next((i for i in listed if i.name == reference), None)
    if image is None:  # its node was lost meanwhile: the image exists, just nowhere usable now
        image = ImagePublic(name=reference, sources=[], image_id=done.image_id, size=done.size,
                            public=False, owner=owner.username, origin_session=row.id)
    return SessionCommitResult(session_id=row.id, image=image, note=NOTE)


async def _check_name(db: AsyncSession, reference: str, configured: list[str]) -> None:
    # Committing under a name the catalog knows would re-tag the node's image under everyone
    # using it (or take over someone's private image): a new image needs a new name.
    existing = await db.get(Image, reference)
    taken = existing is not None and existing.removed_at is None
    if taken or reference in catalog.configured_set(configured):
        raise Conflict(
            f"image {reference} already exists; choose another name or tag",
            field="name", code="image_exists",
        )


async def _check_limit(db: AsyncSession, owner: User) -> None:
    policy = await db.get(ResourcePolicy, owner.policy_id) if owner.policy_id else None
    limit = policy.max_private_images if policy is not None else None
    if limit is None:
        return
    count = await db.scalar(
        select(func.count()).select_from(Image).where(
            Image.owner_id == owner.id, Image.public.is_(False), Image.removed_at.is_(None)
        )
    ) or 0
    if count >= limit:
        raise InvalidRequest(
            f"{owner.username} has {count} private image(s), the most their policy allows "
            f"({limit}); remove one or ask an admin to publish one",
            field="name", code="quota_exceeded",
        )


async def _record(
    db: AsyncSession, session: SessionRow, reference: str, done: CommitAnswer, owner_id: str
) -> None:
    # The node's heartbeat may be recording the new image too (from its labels): same row.
    assert session.node_id is not None  # committed on its node (checked RUNNING above)
    row = await reports.ensure_present(db, reference, session.node_id, done.image_id, done.size)
    row.image_id, row.size, row.labels = done.image_id, done.size, done.labels
    row.public, row.owner_id, row.origin_session_id = False, owner_id, session.id
    row.removed_at = None
    await db.commit()
