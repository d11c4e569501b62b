"""Annotated dependencies: the database session, settings, the caller (user or node)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Path, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gpuslice.common.schemas.users import Role
from gpuslice.manager.db.models import ApiToken, NodeRow, SessionRow, User
from gpuslice.manager.errors import Forbidden, Unauthorized
from gpuslice.manager.events import Hub
from gpuslice.manager.services import auth
from gpuslice.manager.services.channel import Channel
from gpuslice.manager.services.login_throttle import LoginThrottle
from gpuslice.manager.services.nodes.registration import authenticate_node
from gpuslice.manager.services.sessions.views import get_visible
from gpuslice.manager.settings import ManagerSettings

_bearer = HTTPBearer(auto_error=False, description="`Authorization: Bearer <token>`")


async def _db(request: Request) -> AsyncIterator[AsyncSession]:
    async with request.app.state.sessionmaker() as db:
        yield db


def _settings(request: Request) -> ManagerSettings:
    return request.app.state.settings


def _hub(request: Request) -> Hub:
    return request.app.state.hub


def _sessionmaker(request: Request) -> async_sessionmaker[AsyncSession]:
    return request.app.state.sessionmaker


def _channel(request: Request) -> Channel:
    return request.app.state.channel


def _throttle(request: Request) -> LoginThrottle:
    return request.app.state.login_throttle


DbDep = Annotated[AsyncSession, Depends(_db)]
SettingsDep = Annotated[ManagerSettings, Depends(_settings)]
HubDep = Annotated[Hub, Depends(_hub)]
SessionmakerDep = Annotated[async_sessionmaker[AsyncSession], Depends(_sessionmaker)]
ChannelDep = Annotated[Channel, Depends(_channel)]
ThrottleDep = Annotated[LoginThrottle, Depends(_throttle)]
Bearer = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


def _secret(credentials: HTTPAuthorizationCredentials | None) -> str:
    if credentials is None or not credentials.credentials:
        raise Unauthorized("send `Authorization: Bearer <token>` (POST /api/v1/auth/login)")
    return credentials.credentials


async def _current(db: DbDep, credentials: Bearer) -> tuple[User, ApiToken]:
    return await auth.authenticate(db, _secret(credentials))


async def _current_user(current: Annotated[tuple[User, ApiToken], Depends(_current)]) -> User:
    return current[0]


async def _current_token(current: Annotated[tuple[User, ApiToken], Depends(_current)]) -> ApiToken:
    return current[1]


CurrentUser = Annotated[User, Depends(_current_user)]
CurrentToken = Annotated[ApiToken, Depends(_current_token)]


async def _admin(user: CurrentUser) -> User:
    if user.role != Role.ADMIN:
        raise Forbidden("only admins may do this")
    return user


AdminUser = Annotated[User, Depends(_admin)]


async def _visible_session(
    db: DbDep, user: CurrentUser, session_id: Annotated[str, Path()]
) -> SessionRow:
    return await get_visible(db, user, session_id)


# The one gate for "may this caller see this session?": another user's session is a 404.
VisibleSession = Annotated[SessionRow, Depends(_visible_session)]


async def _current_node(db: DbDep, credentials: Bearer) -> NodeRow:
    return await authenticate_node(db, _secret(credentials))


CurrentNode = Annotated[NodeRow, Depends(_current_node)]
