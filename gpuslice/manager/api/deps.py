"""Annotated dependencies: the database session, settings, the caller (user or node)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Annotated

from fastapi import Depends, Path, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gpuslice.common.logs import bind
from gpuslice.common.schemas.agents import Heartbeat
from gpuslice.common.schemas.sessions import HOLDING
from gpuslice.common.schemas.users import Role
from gpuslice.manager.api import browser
from gpuslice.manager.db.models import ApiTokenRow, NodeRow, SessionRow, UserRow
from gpuslice.manager.errors import Forbidden, NotFound, Unauthorized
from gpuslice.manager.events import Hub
from gpuslice.manager.loops import Loop
from gpuslice.manager.services import auth
from gpuslice.manager.services.audit import context as audit
from gpuslice.manager.services.channel import Channel
from gpuslice.manager.services.login_throttle import LoginThrottle
from gpuslice.manager.services.models.store import ModelStore
from gpuslice.manager.services.monitoring.metrics import ManagerMetrics
from gpuslice.manager.services.nodes.registration import authenticate_node, authenticate_node_id
from gpuslice.manager.services.sessions.views import get_visible
from gpuslice.manager.services.storage.access import Access
from gpuslice.manager.services.storage.folders import get_access
from gpuslice.manager.services.storage.fs import StorageFS
from gpuslice.manager.settings import ManagerSettings

_bearer = HTTPBearer(auto_error=False, description="`Authorization: Bearer <token>`")


async def _db(request: Request) -> AsyncIterator[AsyncSession]:
    async with request.app.state.sessionmaker() as db:
        yield db


async def _settings(request: Request) -> ManagerSettings:
    return request.app.state.settings


async def _hub(request: Request) -> Hub:
    return request.app.state.hub


async def _sessionmaker(request: Request) -> async_sessionmaker[AsyncSession]:
    return request.app.state.sessionmaker


async def _channel(request: Request) -> Channel:
    return request.app.state.channel


async def _metrics(request: Request) -> ManagerMetrics:
    return request.app.state.metrics


async def _storage(request: Request) -> StorageFS:
    return request.app.state.storage


async def _model_store(request: Request) -> ModelStore:
    return request.app.state.model_store


async def _loops(request: Request) -> Mapping[str, Loop]:
    return request.app.state.loops


async def _schema_head(request: Request) -> str:
    return request.app.state.schema_head


async def _throttle(request: Request) -> LoginThrottle:
    return request.app.state.login_throttle


DbDep = Annotated[AsyncSession, Depends(_db)]
StorageDep = Annotated[StorageFS, Depends(_storage)]
ModelStoreDep = Annotated[ModelStore, Depends(_model_store)]
SettingsDep = Annotated[ManagerSettings, Depends(_settings)]
HubDep = Annotated[Hub, Depends(_hub)]
SessionmakerDep = Annotated[async_sessionmaker[AsyncSession], Depends(_sessionmaker)]
ChannelDep = Annotated[Channel, Depends(_channel)]
MetricsDep = Annotated[ManagerMetrics, Depends(_metrics)]
LoopsDep = Annotated[Mapping[str, Loop], Depends(_loops)]
SchemaHeadDep = Annotated[str, Depends(_schema_head)]
ThrottleDep = Annotated[LoginThrottle, Depends(_throttle)]
Bearer = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


def _secret(credentials: HTTPAuthorizationCredentials | None) -> str:
    if credentials is None or not credentials.credentials:
        raise Unauthorized(
            "send `Authorization: Bearer <token>` (POST /api/v1/auth/login), or log in (/login)"
        )
    return credentials.credentials


async def _current(
    request: Request, db: DbDep, credentials: Bearer, settings: SettingsDep
) -> tuple[UserRow, ApiTokenRow]:
    # A browser's login cookie stands in for the bearer token; it writes only from our origin.
    cookie = None if credentials is not None else browser.login_cookie(request)
    if cookie is None:
        user, token = await auth.authenticate(db, _secret(credentials))
    else:
        # A page of another origin (an app's own, at <app>--<session>.<apps.domain>, is one)
        # says so in Origin even when it only reads: its cookie-carrying call gets nothing.
        if request.method not in browser.SAFE_METHODS or "origin" in request.headers:
            browser.check_origin(request, settings.auth.allowed_origins)
        user, token = await auth.authenticate(db, cookie)
    audit.arm_user(user.id, user.username, "cookie" if cookie else f"{token.kind}_token",
                   token.id)
    return user, token


async def _current_user(
    current: Annotated[tuple[UserRow, ApiTokenRow], Depends(_current)],
) -> UserRow:
    return current[0]


async def _current_token(
    current: Annotated[tuple[UserRow, ApiTokenRow], Depends(_current)],
) -> ApiTokenRow:
    return current[1]


CurrentUser = Annotated[UserRow, Depends(_current_user)]
CurrentToken = Annotated[ApiTokenRow, Depends(_current_token)]


async def _admin(user: CurrentUser) -> UserRow:
    if user.role != Role.ADMIN:
        raise Forbidden("only admins may do this")
    return user


AdminUser = Annotated[UserRow, Depends(_admin)]


async def _visible_session(
    db: DbDep, user: CurrentUser, session_id: Annotated[str, Path()]
) -> SessionRow:
    session = await get_visible(db, user, session_id)
    bind(session_id=session.id)  # what this request logs names the session
    return session


# The one gate for "may this caller see this session?": another user's session is a 404.
VisibleSession = Annotated[SessionRow, Depends(_visible_session)]


async def _current_node(db: DbDep, credentials: Bearer) -> NodeRow:
    node = await authenticate_node(db, _secret(credentials))
    bind(node_id=node.id)  # what this request logs names the node
    audit.arm_node(node.id)
    return node


CurrentNode = Annotated[NodeRow, Depends(_current_node)]


async def _current_node_id(db: DbDep, credentials: Bearer) -> str:
    node_id = await authenticate_node_id(db, _secret(credentials))
    bind(node_id=node_id)
    audit.arm_node(node_id)
    return node_id


# The node's id alone, for a route that needs no more of it (the long-poll, state reports,
# answers): its row is not mapped, nor its usage and images JSON decoded.
CurrentNodeId = Annotated[str, Depends(_current_node_id)]


async def _heartbeat_credential(request: Request, credentials: Bearer) -> str:
    secret = _secret(credentials)
    try:
        Heartbeat.model_validate_json(await request.body())
    except ValidationError:  # who asks is checked before what is wrong with the body is told
        async with request.app.state.sessionmaker() as db:
            await authenticate_node(db, secret)
    return secret


# A node's bearer secret, for the heartbeat, which authenticates it itself: its usual case
# finds the node and writes it in one statement (``heartbeats.heartbeat``).
HeartbeatCredential = Annotated[str, Depends(_heartbeat_credential)]


async def _folder_access(
    db: DbDep, user: CurrentUser, folder_id: Annotated[str, Path()]
) -> Access:
    return await get_access(db, user, folder_id)


# The one gate for "may this caller use this folder, and how?": otherwise a 404.
FolderAccess = Annotated[Access, Depends(_folder_access)]


async def _node_session(
    db: DbDep, node_id: CurrentNodeId, session_id: Annotated[str, Path()]
) -> SessionRow:
    row = await db.scalar(select(SessionRow).where(
        SessionRow.id == session_id, SessionRow.node_id == node_id,
        SessionRow.status.in_(list(HOLDING))))
    await db.commit()  # the gate of calls that stream: hold no transaction meanwhile
    if row is None:
        raise NotFound(f"session {session_id} is not running on this node", field="session_id")
    return row


# The one gate for calls a node relays from inside a session (the in-session endpoint): the
# session must be placed on the calling node, and acts for its owner only.
NodeSession = Annotated[SessionRow, Depends(_node_session)]
