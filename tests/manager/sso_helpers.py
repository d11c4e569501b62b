"""A manager with single sign-on at the test OpenID provider (tests/idp/oidc.py), served over
real HTTP on the port its ``auth.public_url`` names, and the steps of a sign-in driven over
HTTP (the provider's login page included) for tests that need no browser."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import uvicorn
from fastapi import FastAPI
from sqlalchemy import select, update

from gpuslice.manager.app import bind
from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import (
    ProjectIdpGroupRow,
    ProjectMemberRow,
    ProjectRow,
    SsoSessionRow,
    UserRow,
)
from gpuslice.manager.loop_table import run_once
from gpuslice.manager.settings import ManagerSettings, load_settings
from tests.idp.oidc import CLIENT_ID, CLIENT_SECRET, OidcProvider
from tests.manager.conftest import IMAGE
from tests.ports import free_port


@dataclass
class SsoManager:
    app: FastAPI
    url: str
    settings: ManagerSettings
    provider: OidcProvider

    def client(self, **kwargs: Any) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, timeout=30, **kwargs)

    async def sign_in(self, http: httpx.AsyncClient, username: str,
                      password: str | None = None, next_path: str = "/") -> httpx.Response:
        """With ``http`` (a browser's cookies): start a sign-in, sign in at the provider as
        ``username``, come back to the callback; the callback's answer."""
        start = await http.get("/auth/oidc/start", params={"next": next_path})
        assert start.status_code == 303, start.text
        callback = await self.at_provider(start.headers["location"], username, password)
        return await http.get(callback)

    async def at_provider(self, url: str, username: str, password: str | None = None) -> str:
        """The provider's sign-in from its authorization URL: the callback URL it sends to."""
        def sign_in() -> str:
            with httpx.Client(timeout=30) as idp:
                return self.provider.sign_in(idp, url, username,
                                             password or f"{username}-password")
        return await asyncio.to_thread(sign_in)


def sso_settings(data_dir: Path, database_url: str, issuer: str, port: int,
                 auth: dict[str, Any] | None = None, **oidc: Any) -> ManagerSettings:
    return load_settings(
        data_dir=data_dir, database={"url": database_url}, scheduler={"interval": 1.0},
        nodes={"node_timeout": 30, "sweep_interval": 0.2, "assignment_poll": 0.5},
        sessions={"allowed_images": [IMAGE], "log_timeout": 3},
        auth={"password_check_nice": 0, "public_url": f"http://127.0.0.1:{port}",
              "oidc": {"issuer": issuer, "client_id": CLIENT_ID,
                       "client_secret": CLIENT_SECRET, "display_name": "Test IdP",
                       "allowed_groups": ["gpu-users"], "admin_groups": ["admins"],
                       **oidc}, **(auth or {})},
    )


@asynccontextmanager
async def sso_manager(app: FastAPI, tmp_path: Path, database_url: str,
                      provider: OidcProvider, loops_off: tuple[str, ...] = ("sso_recheck",),
                      port: int | None = None, auth: dict[str, Any] | None = None,
                      **oidc: Any) -> AsyncIterator[SsoManager]:
    """The routed app bound to settings with ``auth.oidc`` at ``provider``, its lifespan
    running and served by uvicorn on the port of its public URL (``port``: one chosen before,
    e.g. for a back-channel logout URI registered at the provider)."""
    port = port or free_port()
    settings = sso_settings(tmp_path / "data", database_url, provider.issuer, port, auth,
                            **oidc)
    bind(app, settings, loops_off=loops_off)
    async with app.router.lifespan_context(app):
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                               lifespan="off", log_level="warning"))
        task = asyncio.create_task(server.serve())
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
        try:
            yield SsoManager(app, f"http://127.0.0.1:{port}", settings, provider)
        finally:
            server.should_exit = True
            await task


async def link_group(app: FastAPI, project: str, group: str) -> None:
    """A project linked to a provider's group (the link routes are another branch's)."""
    async with app.state.sessionmaker() as db:
        row = ProjectRow(name=project)
        db.add(row)
        await db.flush()
        db.add(ProjectIdpGroupRow(project_id=row.id, provider="oidc", group_value=group))
        await db.commit()


async def members_of(app: FastAPI, project: str) -> dict[str, str]:
    """Usernames → membership source of ``project``."""
    async with app.state.sessionmaker() as db:
        found = await db.execute(
            select(UserRow.username, ProjectMemberRow.source)
            .join(ProjectMemberRow, ProjectMemberRow.user_id == UserRow.id)
            .join(ProjectRow, ProjectRow.id == ProjectMemberRow.project_id)
            .where(ProjectRow.name == project))
        return dict(found.tuples().all())


async def usernames(app: FastAPI) -> set[str]:
    async with app.state.sessionmaker() as db:
        return set(await db.scalars(select(UserRow.username)))


async def recheck_now(app: FastAPI) -> None:
    """The re-check loop's pass, as if every session's last check were an hour old."""
    async with app.state.sessionmaker() as db:
        await db.execute(update(SsoSessionRow).values(
            last_refresh_at=utcnow() - timedelta(hours=1)))
        await db.commit()
    await run_once(app, "sso_recheck")


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode()).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


async def allowed_code(sso: SsoManager, http: httpx.AsyncClient, challenge: str,
                       port: int = 40000) -> str:
    """Allow a CLI on the /auth/cli page with ``http`` (signed in): the code it sends on."""
    state = secrets.token_urlsafe(16)
    fields = {"port": str(port), "state": state, "code_challenge": challenge, "host": "box"}
    page = await http.get("/auth/cli", params=fields)
    assert page.status_code == 200 and "Allow" in page.text, page.text
    answer = await http.post("/auth/cli/allow", headers={"Origin": sso.url},
                             data={**fields, "decision": "allow"})
    target = answer.headers["refresh"].split("url=", 1)[1]
    assert target.startswith(f"http://127.0.0.1:{port}/callback?")
    query = parse_qs(urlsplit(target).query)
    assert query["state"] == [state]
    return query["code"][0]
