from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Header, Query, status
from sse_starlette import EventSourceResponse, ServerSentEvent

from gpuslice.common.limits import PAGE_DEFAULT, PAGE_MAX
from gpuslice.common.schemas.common import Page
from gpuslice.common.schemas.images import SessionCommit, SessionCommitResult
from gpuslice.common.schemas.sessions import (
    SessionCreate,
    SessionDestroy,
    SessionExec,
    SessionExecResult,
    SessionLogs,
    SessionPreview,
    SessionPublic,
    SessionStatus,
    SessionType,
)
from gpuslice.manager.api.deps import (
    ChannelDep,
    CurrentUser,
    DbDep,
    HubDep,
    SessionmakerDep,
    SettingsDep,
    VisibleSession,
)
from gpuslice.manager.services.monitoring.stats import describe
from gpuslice.manager.services.sessions import (
    commands,
    commit,
    launch,
    logs,
    preview,
    stream,
    views,
)

router = APIRouter(prefix="/sessions", tags=["sessions"])


@router.post("", status_code=status.HTTP_201_CREATED)
async def create_sessions(
    body: SessionCreate, db: DbDep, user: CurrentUser, settings: SettingsDep
) -> list[SessionPublic]:
    """Create `count` sessions; they are PENDING at once and the scheduling loop places them."""
    return await launch.create_sessions(db, user, body, settings)


@router.post("/preview")
async def preview_sessions(
    body: SessionCreate, db: DbDep, user: CurrentUser, settings: SettingsDep
) -> SessionPreview:
    """What creating `body` would do now, creating nothing: how many of its sessions would
    start at once and how many would queue (with the first one's reason and queue position),
    and the cluster's fGPU step and largest request. Refuses what creating would refuse, with
    the same errors."""
    return await preview.preview(db, user, body, settings)


@router.get("")
async def list_all(
    db: DbDep,
    user: CurrentUser,
    settings: SettingsDep,
    status_: Annotated[list[SessionStatus] | None, Query(alias="status")] = None,
    owner: Annotated[str | None, Query(
        description="A username or user id (another user's: admins only).")] = None,
    mine: Annotated[bool, Query(
        description="Only the caller's own sessions (admins otherwise list everyone's).")]
    = False,
    name: Annotated[str | None, Query(max_length=80, description="Exactly this name.")] = None,
    type_: Annotated[SessionType | None, Query(alias="type")] = None,
    limit: Annotated[int, Query(ge=1, le=PAGE_MAX)] = PAGE_DEFAULT,
    offset: Annotated[int, Query(ge=0)] = 0,
    after: Annotated[str | None, Query(
        max_length=200, description="Begin after this position: a previous page's `next`.",
    )] = None,
) -> Page[SessionPublic]:
    """Sessions the caller may see, newest first; filter by status, type, owner (admins),
    `mine` or name. A page holds fewer than `limit` items when its answer would pass
    `limits.max_answer` bytes. Walk the listing with `after` = the page's `next` (the same
    cost for every page), or with `offset` plus the items returned."""
    return await views.list_sessions(
        db, user, statuses=status_ or (), owner=owner, mine=mine, name=name, kind=type_,
        limit=limit, offset=offset, after=after, max_bytes=settings.limits.max_answer,
    )


@router.get("/events", response_class=EventSourceResponse)
async def events(
    user: CurrentUser,
    sessionmaker: SessionmakerDep,
    hub: HubDep,
    settings: SettingsDep,
    since: Annotated[int | None, Query(description="Resume after this event id.")] = None,
    session_id: Annotated[str | None, Query()] = None,
    last_event_id: Annotated[int | None, Header()] = None,
) -> EventSourceResponse:
    """Server-sent events: one `status` event (a StatusChange) per transition one may see."""
    changes = stream.status_changes(
        sessionmaker, hub, user, since=since if since is not None else last_event_id,
        session_id=session_id, poll=settings.nodes.assignment_poll,
    )

    async def encoded() -> AsyncIterator[ServerSentEvent]:
        async for change in changes:
            yield ServerSentEvent(change.model_dump_json(), event="status", id=str(change.id))

    return EventSourceResponse(encoded())


@router.post("/destroy")
async def destroy_many(body: SessionDestroy, db: DbDep, user: CurrentUser) -> list[SessionPublic]:
    """Destroy several sessions: PENDING ones are CANCELLED, placed ones TERMINATING."""
    return await launch.destroy_sessions(db, user, body.ids)


@router.get("/{session_id}")
async def get_session(row: VisibleSession, db: DbDep, settings: SettingsDep) -> SessionPublic:
    """One session: status, why it waits and its queue position, placement, status history,
    and when its owner's idle rule or lifetime limit will reclaim it."""
    return await describe(db, row, timedelta(seconds=settings.nodes.node_timeout))


@router.delete("/{session_id}")
async def destroy(row: VisibleSession, db: DbDep, user: CurrentUser) -> SessionPublic:
    """Destroy a session: a PENDING one is CANCELLED at once, a placed one is stopped."""
    return (await launch.destroy_sessions(db, user, [row.id]))[0]


@router.get("/{session_id}/logs")
async def get_logs(
    row: VisibleSession,
    channel: ChannelDep,
    settings: SettingsDep,
    tail: Annotated[int | None, Query(ge=1, le=100_000)] = None,
) -> SessionLogs:
    """The last `tail` lines of the session's output: from its agent while it may run, kept
    from its final report once it ended, empty before it started."""
    cfg = settings.sessions
    return await logs.fetch_logs(channel, row, tail or cfg.log_tail, cfg.log_timeout)


@router.post("/{session_id}/exec")
async def exec_command(
    row: VisibleSession, body: SessionExec, channel: ChannelDep, settings: SettingsDep
) -> SessionExecResult:
    """Run a command in a RUNNING session (409 `not_running` otherwise) and answer its exit code
    and output. Waits for the node's agent up to `timeout` plus `sessions.log_timeout` seconds
    (504 `agent_timeout` after); 409 `exec_failed` when the agent could not run it."""
    return await commands.run_command(channel, row, body, settings.sessions.log_timeout)


@router.post("/{session_id}/commit")
async def commit_session(
    row: VisibleSession, body: SessionCommit, channel: ChannelDep, settings: SettingsDep
) -> SessionCommitResult:
    """Snapshot a RUNNING session's container into a new image private to its owner (`name` is
    `repository[:tag]`, the tag defaulting to the session's name). Waits for the node's agent up
    to `sessions.commit_timeout` (504 `agent_timeout` after). Storage folders are not part of
    the image. 409 `not_running`, `image_exists`, `commit_failed`; 422 `quota_exceeded` at the
    owner's `max_private_images`."""
    return await commit.commit_session(channel, row, body, settings)
