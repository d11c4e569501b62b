"""Which apps a session has, and how each is started and reached.

Every session has the ``terminal`` (a TTY exec, nothing in the image). Its image adds the apps
its ``gpuslice.image.apps`` label declares (the catalog keeps image labels), each started by the
agent with the command from the label, its placeholders filled in here: ``{port}``,
``{base_path}`` (``/``: each app is served at the root of its own origin,
``services/apps/origins.py``) and ``{token}``. A number names a TCP port as an app: whatever
listens on it in the session (nothing the platform starts).

Tokens: each app of each session gets its own, ``HMAC-SHA256(session secret, app name)``, from
256 random bits made once per session (``sessions.app_secret``). Apps that take a token (their
command names ``{token}``: Jupyter's is never empty) are started with it, and the proxy hands it
to them on every request; people never need to see it.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.images import TERMINAL_APP, ImageApp, ImageMeta
from gpuslice.common.schemas.agents import AppLaunch
from gpuslice.manager.db.models import ImageRow, SessionRow
from gpuslice.manager.errors import Conflict, InvalidRequest, NotFound

TERMINAL = TERMINAL_APP


@dataclass(frozen=True, slots=True)
class SessionApp:
    """One app of a session: the terminal (``image_app`` None) or one its image declares."""

    name: str
    image_app: ImageApp | None

    @property
    def protocol(self) -> str:
        return "tty" if self.image_app is None else self.image_app.protocol

    @property
    def port(self) -> int | None:
        return None if self.image_app is None else self.image_app.port

    @property
    def takes_token(self) -> bool:
        return self.image_app is not None and any("{token}" in a for a in self.image_app.command)


BASE_PATH = "/"  # every app at its origin's root: what its base-path flag is given


def port_app(name: str) -> SessionApp | None:
    """The app a TCP port number names (``8000``): what listens there, started by nobody."""
    if not name.isdigit() or not 1 <= int(name) <= 65535 or name != str(int(name)):
        return None
    return SessionApp(name, ImageApp(f"port-{name}", "http", int(name)))


def apps_of(meta: ImageMeta) -> list[SessionApp]:
    """The terminal, then the image's apps, as its label lists them."""
    return [SessionApp(TERMINAL, None)] + [SessionApp(a.name, a) for a in meta.apps]


def find(apps: list[SessionApp], name: str, session_name: str) -> SessionApp:
    """``name`` among ``apps``, or the TCP port it names; ``NotFound`` ``unknown_app`` naming
    the ones there are."""
    for app in apps:
        if app.name == name:
            return app
    port = port_app(name)
    if port is not None:
        return port
    known = ", ".join(a.name for a in apps)
    raise NotFound(f"session {session_name} has no app {name!r}; its apps: {known}, or any "
                   "port a server listens on in it (e.g. 8000)",
                   field="app", code="unknown_app")


def check_startable(meta: ImageMeta, names: list[str], image: str) -> list[str]:
    """``names`` (to start with a session) when each is an app of the image the platform can
    start; otherwise ``InvalidRequest`` naming those it can."""
    startable = [a.name for a in meta.apps if a.command]
    for name in names:
        if name not in startable:
            allowed = ", ".join(startable) or "none"
            raise InvalidRequest(
                f"apps: image {image} has no app {name!r} to start; it can start: {allowed}",
                field="apps", code="unknown_app",
            )
    return list(dict.fromkeys(names))


async def image_meta(db: AsyncSession, reference: str) -> ImageMeta:
    """What the session's image says about itself (no labels known: a plain image)."""
    labels = await db.scalar(select(ImageRow.labels).where(ImageRow.name == reference))
    return ImageMeta.from_labels(labels)


def new_secret() -> str:
    return secrets.token_hex(32)


async def secret_of(db: AsyncSession, row: SessionRow) -> str:
    """The session's app secret, made now for a session from before apps had one (the first
    writer wins; every replica reads the same)."""
    if row.app_secret:
        return row.app_secret
    await db.execute(
        update(SessionRow)
        .where(SessionRow.id == row.id, SessionRow.app_secret.is_(None))
        .values(app_secret=new_secret())
        .execution_options(synchronize_session=False)
    )
    secret = await db.scalar(select(SessionRow.app_secret).where(SessionRow.id == row.id))
    await db.commit()
    if not secret:
        raise Conflict(f"session {row.name} is gone", code="not_running")
    return secret


def token(secret: str, name: str) -> str:
    """The app's token in its session: 192 bits, never empty."""
    return hmac.new(bytes.fromhex(secret), name.encode(), hashlib.sha256).hexdigest()[:48]


def launch(session_id: str, secret: str, app: ImageApp) -> AppLaunch:
    """How the agent starts and reaches ``app`` of the session."""
    argv = app.argv(port=app.port, base_path=BASE_PATH,
                    token=token(secret, app.name))
    return AppLaunch(name=app.name, port=app.port, command=argv,
                     start_timeout_ms=app.start_timeout * 1000)


def launches(session_id: str, secret: str, meta: ImageMeta, names: list[str]) -> list[AppLaunch]:
    """The launches of the apps ``names`` (those the image still declares)."""
    return [launch(session_id, secret, a) for a in meta.apps if a.name in names]
