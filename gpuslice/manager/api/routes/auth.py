from __future__ import annotations

from fastapi import APIRouter, Request, Response, status

from gpuslice.common.schemas.users import (
    ApiTokenCreate,
    ApiTokenCreated,
    ApiTokenPublic,
    LoginRequest,
    TokenPublic,
    UserPublic,
)
from gpuslice.manager.api import browser
from gpuslice.manager.api.deps import CurrentToken, CurrentUser, DbDep, SettingsDep
from gpuslice.manager.services import auth, users

router = APIRouter(prefix="/auth", tags=["auth"])


@router.post("/login")
async def login(
    body: LoginRequest, db: DbDep, settings: SettingsDep, request: Request, response: Response
) -> TokenPublic:
    """Exchange a username and password for a bearer token that expires; browsers also get it
    as the HttpOnly login cookie (`gpuslice_login`), which expires with it."""
    token, row = await auth.login(db, body.username, body.password, settings.auth.login_token_ttl)
    browser.set_login_cookie(response, request, token, row.expires_at)
    return TokenPublic(access_token=token, expires_at=row.expires_at)


@router.post("/logout", status_code=status.HTTP_204_NO_CONTENT)
async def logout(
    db: DbDep, user: CurrentUser, token: CurrentToken, request: Request, response: Response
) -> None:
    """Revoke the token this request was made with (and clear the login cookie)."""
    await auth.revoke_token(db, user, token.id)
    browser.clear_login_cookie(response, request)


@router.get("/me")
async def me(user: CurrentUser) -> UserPublic:
    """The caller."""
    return users.public(user)


@router.post("/tokens", status_code=status.HTTP_201_CREATED)
async def create_token(body: ApiTokenCreate, db: DbDep, user: CurrentUser) -> ApiTokenCreated:
    """Create an API token; its secret is shown only in this answer."""
    return await auth.create_api_token(db, user, body)


@router.get("/tokens")
async def list_tokens(db: DbDep, user: CurrentUser) -> list[ApiTokenPublic]:
    """The caller's active API tokens (never their secrets)."""
    return await auth.list_api_tokens(db, user)


@router.delete("/tokens/{token_id}", status_code=status.HTTP_204_NO_CONTENT)
async def revoke_token(token_id: str, db: DbDep, user: CurrentUser) -> None:
    """Revoke one of the caller's tokens."""
    await auth.revoke_token(db, user, token_id)
