"""The ID-token and logout-token checks (identity.md §13.2-13.6), with tokens signed by a key
of the test's own and served from a JWKS it controls (what the real provider cannot be made
to send): each forgery is refused, naming what does not hold."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from joserfc import jwt
from joserfc.jwk import KeySet, RSAKey

from gpuslice.manager.services.sso.provider import BACKCHANNEL_EVENT, Provider, ProviderError
from gpuslice.manager.settings import AuthSettings

ISSUER = "https://idp.test"
CLIENT = "gpuslice"
NONCE = "n-0S6_WzA2Mj"


class Forger:
    """A provider the test controls: its discovery, its keys (``publish``), its tokens."""

    def __init__(self) -> None:
        self.key = RSAKey.generate_key(2048, parameters={"kid": "k1"})
        self.published = [self.key]
        self.jwks_fetches = 0

    def publish(self, *keys: RSAKey) -> None:
        self.published = list(keys)

    def token(self, key: Any = None, header: dict[str, Any] | None = None,
              **claims: Any) -> str:
        now = int(time.time())
        body = {"iss": ISSUER, "sub": "alice-sub", "aud": CLIENT, "iat": now,
                "exp": now + 300, "nonce": NONCE, **claims}
        body = {k: v for k, v in body.items() if v is not None}
        signing = key or self.key
        head = {"alg": "RS256", "kid": signing.kid, **(header or {})}
        return jwt.encode(head, body, signing)

    def handler(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/.well-known/openid-configuration":
            return httpx.Response(200, json={
                "issuer": ISSUER, "authorization_endpoint": f"{ISSUER}/auth",
                "token_endpoint": f"{ISSUER}/token", "jwks_uri": f"{ISSUER}/jwks",
                "response_types_supported": ["code"], "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": ["RS256"]})
        if request.url.path == "/jwks":
            self.jwks_fetches += 1
            return httpx.Response(200, json=KeySet(self.published).as_dict(private=False))
        return httpx.Response(404)


@pytest.fixture
def forger() -> Forger:
    return Forger()


@pytest.fixture
async def provider(forger: Forger) -> AsyncIterator[Provider]:
    auth = AuthSettings(public_url="https://gpu.test",
                        oidc={"issuer": ISSUER, "client_id": CLIENT, "allow_all": True})
    provider = Provider(auth, httpx.AsyncClient(transport=httpx.MockTransport(forger.handler)))
    yield provider
    await provider.close()


async def test_a_token_of_the_provider_with_this_nonce_holds(forger: Forger,
                                                             provider: Provider) -> None:
    claims = await provider.verify_id_token(forger.token(), nonce=NONCE)
    assert claims["sub"] == "alice-sub"


def _part(value: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


def _claims() -> dict[str, Any]:
    now = int(time.time())
    return {"iss": ISSUER, "sub": "x", "aud": CLIENT, "iat": now, "exp": now + 300,
            "nonce": NONCE}


def _hs256_with_public_key(f: Forger) -> str:
    """Key confusion: HMAC with the RSA public key's PEM as the secret (by hand: joserfc
    itself refuses to make that key)."""
    signed = _part({"alg": "HS256", "kid": "k1"}) + "." + _part(_claims())
    mac = hmac.new(f.key.as_pem(private=False), signed.encode(), hashlib.sha256).digest()
    return signed + "." + base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


def _unsigned(f: Forger) -> str:
    return _part({"alg": "none", "kid": "k1"}) + "." + _part(_claims()) + "."


FORGERIES: dict[str, Callable[[Forger], str]] = {
    "wrong audience": lambda f: f.token(aud="another-client"),
    "wrong issuer": lambda f: f.token(iss="https://evil.test"),
    "expired": lambda f: f.token(exp=int(time.time()) - 120),
    "issued in the future": lambda f: f.token(iat=int(time.time()) + 600),
    "wrong nonce": lambda f: f.token(nonce="another-nonce"),
    "no nonce": lambda f: f.token(nonce=None),
    "alg none": _unsigned,
    "HS256 with the public key": _hs256_with_public_key,
    "signed by a key the provider does not publish": lambda f: f.token(
        key=RSAKey.generate_key(2048, parameters={"kid": "k1"})),
    "azp of another client": lambda f: f.token(azp="another-client"),
}


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
async def test_a_forged_id_token_is_refused(forger: Forger, provider: Provider,
                                            forgery: str) -> None:
    with pytest.raises(ProviderError) as refused:
        await provider.verify_id_token(FORGERIES[forgery](forger), nonce=NONCE)
    assert refused.value.code == "token_invalid"


async def test_an_unknown_kid_fetches_the_keys_once_more_then_refuses(
        forger: Forger, provider: Provider) -> None:
    await provider.verify_id_token(forger.token(), nonce=NONCE)
    rotated = RSAKey.generate_key(2048, parameters={"kid": "k2"})
    forger.publish(forger.key, rotated)
    provider._keys_at -= 120  # the last fetch a while ago: a refetch is allowed
    assert (await provider.verify_id_token(forger.token(key=rotated), nonce=NONCE))["sub"]
    assert forger.jwks_fetches == 2
    stranger = RSAKey.generate_key(2048, parameters={"kid": "k3"})
    with pytest.raises(ProviderError, match="does not publish"):
        await provider.verify_id_token(forger.token(key=stranger), nonce=NONCE)
    assert forger.jwks_fetches == 2  # at most one refetch a minute


def _logout(f: Forger, **claims: Any) -> str:
    return f.token(**{"nonce": None, "exp": None, "jti": "jti-1", "sid": "sid-1",
                      "events": {BACKCHANNEL_EVENT: {}}, **claims})


async def test_logout_tokens_hold_only_with_the_event_and_without_a_nonce(
        forger: Forger, provider: Provider) -> None:
    claims = await provider.verify_logout_token(_logout(forger))
    assert claims["sid"] == "sid-1"
    for bad in (forger.token(nonce=None, jti="j", sid="s"),  # no events
                _logout(forger, nonce="n"),
                _logout(forger, aud="another-client")):
        with pytest.raises(ProviderError):
            await provider.verify_logout_token(bad)


@pytest.mark.parametrize(("oidc", "public_url", "said"), [
    ({"issuer": ISSUER, "allow_all": True}, "https://gpu.test",
     "auth.oidc.issuer is set but auth.oidc.client_id is not"),
    ({"issuer": ISSUER, "client_id": CLIENT, "allow_all": True}, "",
     "auth.oidc needs auth.public_url"),
    ({"issuer": "http://idp.example.org", "client_id": CLIENT, "allow_all": True},
     "https://gpu.test", "auth.oidc.issuer must be an https:// URL"),
    ({"issuer": ISSUER, "client_id": CLIENT}, "https://gpu.test",
     "auth.oidc is on but nobody may sign in with it"),
])
def test_settings_refuse_an_sso_nobody_can_use(oidc: dict[str, Any], public_url: str,
                                               said: str) -> None:
    with pytest.raises(ValueError, match=re.escape(said)):
        AuthSettings(public_url=public_url, oidc=oidc)


def test_a_manager_without_sso_and_the_cli_never_import_authlib() -> None:
    code = ("import sys; from gpuslice.manager.app import create_app; "
            "from gpuslice.manager.settings import load_settings; import tempfile; "
            "create_app(load_settings(data_dir=tempfile.mkdtemp())); "
            "import gpuslice.cli.main, gpuslice.cli.login; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('authlib', 'joserfc')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)
    assert done.stdout.strip() == "[]", done.stdout
