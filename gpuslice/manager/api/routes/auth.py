from __future__ import annotations

from fastapi import APIRouter, Request, Response, status
from fastapi.responses import JSONResponse

from gpuslice.common.schemas.errors import ErrorBody
from gpuslice.common.schemas.users import (
    ApiTokenCreate,
    ApiTokenCreated,
    ApiTokenPublic,
    CliLoginRequest,
    LoginRequest,
    PasswordChange,
    TokenInfo,
    TokenPublic,
    UserPublic,
)
from gpuslice.manager.api import browser
from gpuslice.manager.api.deps import (
    CurrentToken,
    CurrentUser,
    DbDep,
    SettingsDep,
    ThrottleDep,
)
from gpuslice.manager.services import auth, users
from gpuslice.manager.services.identity import ldap

router = APIRouter(prefix="/auth", tags=["auth"])


@router.post("/login", responses={429: {"model": ErrorBody}})
async def login(
    body: LoginRequest, request: Request, response: Response, db: DbDep, settings: SettingsDep,
    throttle: ThrottleDep,
) -> TokenPublic:
    """Exchange a username and password for a bearer token that expires; browsers also get it
    as the HttpOnly login cookie (`gpuslice_login`), which expires with it. After too many
    failed logins for the username or from the client's address, 429 with `Retry-After`
    (seconds)."""
    address = request.client.host if request.client else None
    token, row = await auth.login(
        db, body.username, body.password, settings.auth.login_token_ttl, throttle, address,
        ldap.signer(settings.auth.ldap, throttle.checks.run), settings.auth.password_login,
    )
    browser.set_login_cookie(response, request, token, row.expires_at)
    return TokenPublic(access_token=token, expires_at=row.expires_at)


@router.post("/logout", status_code=status.HTTP_204_NO_CONTENT,
             responses={200: {"description": "Signed out here; `redirect` signs out at the "
                              "single sign-on provider too (auth.oidc.logout = \"idp\")."}})
async def logout(
    db: DbDep, user: CurrentUser, token: CurrentToken, request: Request
) -> Response:
    """Revoke the token this request was made with (and clear the login cookie). A console
    sign-in made with single sign-on answers `{"redirect": URL}`: the provider's sign-out,
    which comes back to the login page."""
    await auth.revoke_token(db, user, token.id)
    redirect = None
    if token.sso_session_id and request.app.state.sso is not None:
        from gpuslice.manager.services.sso.sessions import sign_out

        redirect = await sign_out(db, request.app.state.sso, token.sso_session_id)
    response: Response = (JSONResponse({"redirect": redirect}) if redirect
                          else Response(status_code=status.HTTP_204_NO_CONTENT))
    browser.clear_login_cookie(response, request)
    return response


@router.post("/cli-token", responses={429: {"model": ErrorBody}})
async def cli_login(
    body: CliLoginRequest, request: Request, db: DbDep, settings: SettingsDep,
    throttle: ThrottleDep,
) -> TokenPublic:
    """Exchange a username and password for a token of kind `cli` (what `gpuslice login`
    keeps): it ends after `auth.cli_token_idle` seconds unused and `auth.cli_token_max`
    seconds after it is made, whichever comes first. Checked and throttled as a login."""
    address = request.client.host if request.client else None
    token, row = await auth.cli_login(
        db, body.username, body.password, body.host, settings.auth, throttle, address,
        ldap.signer(settings.auth.ldap, throttle.checks.run),
    )
    return TokenPublic(access_token=token, expires_at=row.expires_at)


@router.get("/token")
async def current_token(token: CurrentToken) -> TokenInfo:
    """The token this request is made with: its kind, and when it ends (absolute and
    idle), never its secret."""
    return auth.token_info(token)


@router.get("/me")
async def me(user: CurrentUser) -> UserPublic:
    """The caller."""
    return users.public(user)


@router.post("/password", status_code=status.HTTP_204_NO_CONTENT,
             responses={429: {"model": ErrorBody}})
async def change_password(
    body: PasswordChange, request: Request, db: DbDep, user: CurrentUser, token: CurrentToken,
    throttle: ThrottleDep,
) -> None:
    """Change your password. Every other login ends; your API tokens too unless
    `keep_api_tokens`. A wrong current password counts as a failed login (401, then 429)."""
    address = request.client.host if request.client else None
    await auth.change_password(db, user, token, body, throttle, address)


@router.post("/tokens", status_code=status.HTTP_201_CREATED)
async def create_token(body: ApiTokenCreate, db: DbDep, user: CurrentUser,
                       settings: SettingsDep) -> ApiTokenCreated:
    """Create an API token; its secret is shown only in this answer. A single sign-on user's
    token lasts at most `auth.oidc.api_token_max_days` (its `expires_at` says when it ends)."""
    return await auth.create_api_token(db, user, body, settings.auth.oidc.api_token_max_days)


@router.get("/tokens")
async def list_tokens(db: DbDep, user: CurrentUser) -> list[ApiTokenPublic]:
    """The caller's API tokens and CLI logins (kind `cli`) not revoked, each `active` or
    `expired` (never a secret)."""
    return await auth.list_api_tokens(db, user)


@router.delete("/tokens/{token_id}", status_code=status.HTTP_204_NO_CONTENT)
async def revoke_token(token_id: str, db: DbDep, user: CurrentUser) -> None:
    """Revoke one of the caller's tokens."""
    await auth.revoke_token(db, user, token_id)
