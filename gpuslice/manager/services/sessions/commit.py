"""Commit a RUNNING session's container into a new private image, through its node's agent.

Like exec, a ``commit`` request on the channel: the agent commits through the Engine API and
answers the new image's id, size and labels; the user's POST waits for the answer, up to
``sessions.commit_timeout``. Synchronous on purpose: the caller wants the image to launch next,
and a commit of a session image takes seconds to tens of seconds. Should the wait end first,
the image still reaches the catalog: its labels name its owner and origin, so the node's next
heartbeat records it as the owner's private image.

The new image is named in the owner's namespace, ``u/<owner>/<name>``, so it never collides
with a public, allowed or registry image (nobody else's sessions can be made to run it by
name); it is private to the owner (admins see all) until an admin publishes it, and counts
against the owner's policy ``max_private_images``.

It is titled as its owner's, naming what it was made from ("alice's custom image (from
scikit-learn 1.5)"), so the launch dialog never lists it under its parent's title; of the
parent's apps it keeps only those whose programs the container still has (the agent looks
before it commits: ``agent/commit_apps.py``).
"""

from __future__ import annotations

import re

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.image_refs import is_user_image, tag_of, user_namespace
from gpuslice.common.images import (
    KIND_PRIVATE,
    LABEL_ORIGIN_SESSION,
    LABEL_OWNER,
    LABEL_TITLE,
    TITLE_MAX,
    ImageMeta,
)
from gpuslice.common.schemas.agents import CommitAnswer, CommitAsk
from gpuslice.common.schemas.images import ImagePublic, SessionCommit, SessionCommitResult
from gpuslice.common.schemas.sessions import SessionStatus
from gpuslice.manager.db.models import ImageRow, ResourcePolicyRow, SessionRow, UserRow
from gpuslice.manager.errors import Conflict, InvalidRequest
from gpuslice.manager.services.channel import Channel
from gpuslice.manager.services.images import catalog, reports
from gpuslice.manager.services.sessions import agent
from gpuslice.manager.settings import ManagerSettings

_COMMITTED = re.compile(r"^.+'s custom image \(from (?P<parent>.+)\)$")
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
    async with channel.sessionmaker() as db:
        owner = await db.get(UserRow, row.owner_id)
        assert owner is not None  # sessions.owner_id is a RESTRICT foreign key
        reference = commit_reference(body.name, row.name, owner.username)
        await _check_name(db, reference, settings.sessions.allowed_images)
        await _check_limit(db, owner)
        title = await _title(db, row, owner.username)
        await db.commit()
    wait = settings.sessions.commit_timeout
    # The agent keeps, of the parent's apps, those whose programs the container still has.
    ask = CommitAsk(reference=reference, labels={
        LABEL_OWNER: owner.username, LABEL_ORIGIN_SESSION: row.id, LABEL_TITLE: title,
    })
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
                            public=False, owner=owner.username, origin_session=row.id,
                            kind=KIND_PRIVATE)
    return SessionCommitResult(session_id=row.id, image=image, note=NOTE)


def commit_reference(name: str, session_name: str, owner: str) -> str:
    """Where a commit named ``name`` goes: ``u/<owner>/<name>``, tagged with the session's name
    when ``name`` has no tag. Only the owner's namespace: never a public or registry name."""
    namespace = user_namespace(owner)
    given = name.strip()
    if "@" in given:
        raise _bad_name(name, "a commit is named by repository[:tag], not by digest")
    if given.startswith(f"{namespace}/"):
        given = given[len(namespace) + 1 :]
    elif is_user_image(given):
        raise _bad_name(name, f"commits of this session go to {namespace}/; name it without "
                              "a namespace")
    first, slash, _rest = given.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        raise _bad_name(name, f"a commit is named within {namespace}/, without a registry host")
    reference = f"{namespace}/{given}" if tag_of(given) else f"{namespace}/{given}:{session_name}"
    try:
        return catalog.reference_or_error(reference, "name")
    except InvalidRequest:  # said of what the user typed, not of the name it became
        raise _bad_name(name, "write lower-case letters and digits joined by . _ or - (e.g. "
                              "my-env), then optionally : and a tag of up to 128 letters, "
                              "digits, _ . or - (e.g. my-env:v2)") from None


async def _title(db: AsyncSession, session: SessionRow, owner: str) -> str:
    """The new image's title: its owner's, naming what it was made from. Keeping the
    parent's title would list two images under one name in the launch dialog."""
    parent = await db.get(ImageRow, session.image)
    base = ImageMeta.from_labels(parent.labels if parent is not None else None).title
    base = base or session.image
    if (earlier := _COMMITTED.match(base)) is not None:  # a commit of a commit: the first parent
        base = earlier["parent"]
    return f"{owner}'s custom image (from {base})"[:TITLE_MAX]


def _bad_name(name: str, why: str) -> InvalidRequest:
    return InvalidRequest(f"image name {name!r}: {why}", field="name", code="invalid_image")


async def _check_name(db: AsyncSession, reference: str, configured: list[str]) -> None:
    # The name is in the owner's own namespace: it can only collide with their own images.
    # Re-tagging one would change it under the sessions using it: a new image, a new name.
    existing = await db.get(ImageRow, reference)
    taken = existing is not None and existing.removed_at is None
    if taken or reference in catalog.configured_set(configured):
        raise Conflict(
            f"image {reference} already exists; choose another name or tag",
            field="name", code="image_exists",
        )


async def _check_limit(db: AsyncSession, owner: UserRow) -> None:
    policy = await db.get(ResourcePolicyRow, owner.policy_id) if owner.policy_id else None
    limit = policy.max_private_images if policy is not None else None
    if limit is None:
        return
    count = await db.scalar(
        select(func.count()).select_from(ImageRow).where(
            ImageRow.owner_id == owner.id, ImageRow.public.is_(False),
            ImageRow.removed_at.is_(None),
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
