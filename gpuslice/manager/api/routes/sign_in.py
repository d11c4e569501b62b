"""How one may sign in (public), and the CLI's device sign-in (identity.md §6.7, §8)."""

from __future__ import annotations

import socket

from fastapi import APIRouter, Request

from gpuslice.common.schemas.errors import ErrorBody
from gpuslice.common.schemas.sso import (
    CliTokenRequest,
    DeviceCode,
    DeviceDecision,
    DeviceRequestPublic,
    DeviceStart,
    DeviceToken,
    DeviceTokenRequest,
    SignInMethod,
    SignInMethods,
)
from gpuslice.manager.api.deps import (
    CurrentToken,
    CurrentUser,
    DbDep,
    SettingsDep,
    ThrottleDep,
)
from gpuslice.manager.errors import NotFound
from gpuslice.manager.services.sso import device, loopback
from gpuslice.manager.settings import ManagerSettings

router = APIRouter(prefix="/auth", tags=["auth"])


@router.get("/providers")
async def providers(request: Request, settings: SettingsDep) -> SignInMethods:
    """How one may sign in here: a password, and the single sign-on provider with the URL a
    browser starts at. Public: the login page and `gpuslice login` read it."""
    methods = [SignInMethod(name="password", kind="password", display_name="password")]
    if request.app.state.sso is not None:
        methods.append(SignInMethod(name="oidc", kind="oidc",
                                    display_name=settings.auth.oidc.display_name,
                                    start_url="/auth/oidc/start"))
    return SignInMethods(methods=methods, device_login=settings.auth.device_login)


@router.post("/device", responses={404: {"model": ErrorBody}, 429: {"model": ErrorBody}})
async def device_start(body: DeviceStart, request: Request, db: DbDep,
                       settings: SettingsDep) -> DeviceCode:
    """Start a device sign-in (`gpuslice login --sso --device`): a code the user approves on
    the `/device` page within ten minutes, after seeing this host, OS user and address."""
    _device_on(settings.auth.device_login)
    address = request.client.host if request.client else None
    return await device.start(db, body, address, _public_url(request, settings))


@router.post("/device/token", responses={400: {"model": ErrorBody}})
async def device_token(body: DeviceTokenRequest, db: DbDep, settings: SettingsDep
                       ) -> DeviceToken:
    """Poll a device sign-in: the token once approved; until then 400 with the code
    `authorization_pending`, `slow_down` (poll 5 s slower), `access_denied` or
    `expired_token`."""
    _device_on(settings.auth.device_login)
    return await device.poll(db, body.device_code, settings.auth)


@router.post("/device/approve", responses={404: {"model": ErrorBody},
                                           429: {"model": ErrorBody}})
async def device_approve(body: DeviceDecision, request: Request, db: DbDep, user: CurrentUser,
                         token: CurrentToken, throttle: ThrottleDep) -> DeviceRequestPublic:
    """Approve (the CLI gets a token as you) or deny a device sign-in by its code. A code not
    found counts as a failed login of yours (429 after as many as a login allows)."""
    address = request.client.host if request.client else None
    return await device.decide(db, user, token, body.user_code, body.approve, address,
                               throttle, page=False)


@router.post("/cli/token", responses={400: {"model": ErrorBody}})
async def cli_token(body: CliTokenRequest, db: DbDep, settings: SettingsDep) -> DeviceToken:
    """`gpuslice login --sso`: exchange the code the CLI's loopback listener got (once, within
    a minute) and the PKCE verifier only the CLI holds for the CLI's token; 400
    `invalid_grant` otherwise (the code is used up either way)."""
    return await loopback.exchange(db, body.code, body.code_verifier, settings.auth)


def _device_on(on: bool) -> None:
    if not on:
        raise NotFound("device sign-in is off on this manager (auth.device_login = false): "
                       "sign in with gpuslice login --sso, or a password", code="device_login_off")


def _public_url(request: Request, settings: ManagerSettings) -> str:
    """Where browsers reach the manager, from its settings, never from a request's Host (a
    phishing page's): auth.public_url, else nodes.advertise_url, else the address
    `manager serve` listens on."""
    if settings.auth.public_url or settings.nodes.advertise_url:
        return settings.auth.public_url or settings.nodes.advertise_url or ""
    host = str(getattr(request.app.state, "bind_host", "127.0.0.1"))
    port = int(getattr(request.app.state, "manager_port", 8080))
    if host in ("", "0.0.0.0", "::"):  # every interface: the machine's own name
        host = socket.getfqdn()
    scheme = "https" if settings.server.tls_cert is not None else "http"
    return f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}"
