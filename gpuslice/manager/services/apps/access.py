"""Who may open a session's apps, and where each app is: the one gate of the proxy and the
app routes.

Only the session's owner opens its apps and terminal; an admin only when ``apps.admin_access``
is on (opening an app runs its owner's code in the browser that opens it). Another user's
session is a 404, as everywhere. The session must be RUNNING.

The proxy asks for every request, so :class:`Gate` keeps each answer for ``apps.auth_cache``
seconds (never past the login's own expiry): a logout, a destroyed session or a revoked
admin setting takes effect within that time; 0 looks the database up every time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gpuslice.common.schemas.agents import AppLaunch
from gpuslice.common.schemas.sessions import SessionStatus
from gpuslice.common.schemas.users import Role
from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import SessionRow, UserRow
from gpuslice.manager.errors import Conflict, Forbidden
from gpuslice.manager.security import token_digest
from gpuslice.manager.services import auth
from gpuslice.manager.services.apps import origins
from gpuslice.manager.services.apps.origins import AppOrigin
from gpuslice.manager.services.images import app_catalog as catalog
from gpuslice.manager.services.images.app_catalog import SessionApp
from gpuslice.manager.services.sessions.views import get_visible
from gpuslice.manager.settings import AppsSettings

_MAX_CACHED = 10_000


@dataclass(frozen=True, slots=True)
class AppRoute:
    """Everything needed to reach one app of one running session, for one person."""

    session_id: str
    session_name: str
    node_id: str
    app: SessionApp
    launch: AppLaunch | None  # None for the terminal
    token: str | None  # the app's own token, for apps that take one
    user_id: str
    login_id: str  # the login (or API token) that asked: an app origin's entry is bound to it


async def openable(db: AsyncSession, viewer: UserRow, session_id: str,
                   settings: AppsSettings) -> SessionRow:
    """The session, if ``viewer`` may open its apps now; ``NotFound`` (not theirs),
    ``Forbidden`` ``not_owner`` (an admin, when not allowed) or ``Conflict`` ``not_running``."""
    row = await get_visible(db, viewer, session_id)
    if row.owner_id != viewer.id and not (viewer.role == Role.ADMIN and settings.admin_access):
        raise Forbidden(
            f"only its owner opens the apps and terminal of session {row.name} (admins may "
            "when the manager setting apps.admin_access is on)", code="not_owner",
        )
    if row.status != SessionStatus.RUNNING or row.node_id is None:
        raise Conflict(
            f"session {row.name} is {row.status}: its apps and terminal open once it runs",
            code="not_running",
        )
    return row


async def route(db: AsyncSession, viewer: UserRow, session_id: str, name: str,
                settings: AppsSettings, login_id: str = "") -> AppRoute:
    """Where app ``name`` of the session is, if ``viewer`` may open it (see :func:`openable`;
    ``NotFound`` ``unknown_app`` for an app the session's image does not have)."""
    row = await openable(db, viewer, session_id, settings)
    app = catalog.find(catalog.apps_of(await catalog.image_meta(db, row.image)), name, row.name)
    assert row.node_id is not None  # openable() checked it runs on a node
    launch = token = None
    if app.image_app is not None:
        secret = await catalog.secret_of(db, row)
        launch = catalog.launch(row.id, secret, app.image_app)
        token = catalog.token(secret, app.name) if app.takes_token else None
    await db.commit()
    return AppRoute(row.id, row.name, row.node_id, app, launch, token, viewer.id, login_id)


class Gate:
    """:func:`route` for a bearer secret (a login cookie or token), remembered a little."""

    def __init__(self, sessionmaker: async_sessionmaker[AsyncSession],
                 settings: AppsSettings) -> None:
        self.sessionmaker = sessionmaker
        self.settings = settings
        self._known: dict[tuple[str, str, str, bool], tuple[AppRoute, float, datetime | None]] = {}

    async def route(self, secret: str, session_id: str, name: str, *,
                    app_cookie: bool = False) -> AppRoute:
        """The app's route for the holder of ``secret`` (a bearer token or login cookie; with
        ``app_cookie``, an app origin's own cookie, good for that app only):
        ``Unauthorized`` for an unknown, revoked or expired login, else as :func:`route`."""
        key = (token_digest(secret), session_id, name, app_cookie)
        found = self._known.get(key)
        now = time.monotonic()
        if found is not None:
            cached, until, expires = found
            if now < until and (expires is None or utcnow() < expires):
                return cached
            del self._known[key]
        async with self.sessionmaker() as db:
            if app_cookie:
                user, login = await origins.authenticate(db, secret,
                                                         AppOrigin(name, session_id))
            else:
                user, login = await auth.authenticate(db, secret)
            answer = await route(db, user, session_id, name, self.settings, login.id)
        if self.settings.auth_cache > 0:
            if len(self._known) >= _MAX_CACHED:
                self._known.clear()
            self._known[key] = (answer, now + self.settings.auth_cache, login.expires_at)
        return answer
