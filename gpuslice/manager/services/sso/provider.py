"""The OpenID provider as gpuslice talks to it: discovery, keys, the token endpoint, and the
checks every ID token and logout token passes (Authlib's rules, joserfc's signatures, the
project's httpx for HTTP).

Imported only when ``auth.oidc`` is on: Authlib and joserfc stay out of the CLI's start and of
a manager without single sign-on.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from typing import Any
from urllib.parse import quote_plus, urlencode

import httpx
from authlib.oauth2.rfc7636 import create_s256_code_challenge
from authlib.oidc.core import CodeIDToken
from authlib.oidc.discovery import OpenIDProviderMetadata
from joserfc import jwt
from joserfc.errors import InvalidKeyIdError, JoseError
from joserfc.jwk import KeySet

from gpuslice.manager.errors import DomainError
from gpuslice.manager.settings import AuthSettings

log = logging.getLogger(__name__)

CALLBACK_PATH = "/auth/oidc/callback"
BACKCHANNEL_EVENT = "http://schemas.openid.net/event/backchannel-logout"
_METADATA_TTL = 3600.0  # discovery is fetched again after an hour
_JWKS_REFETCH_EVERY = 60.0  # an unknown kid fetches the keys again at most this often
_TIMEOUT = httpx.Timeout(10.0)


class ProviderError(DomainError):
    """The provider could not be reached, or what it answered does not hold: ``code`` says
    which (``idp_unreachable``, ``idp_error``, ``token_invalid``, ``invalid_grant``)."""

    code = "idp_error"


class Provider:
    """One configured provider (``auth.oidc``). Discovery and keys are cached in memory
    (they are the provider's, not state: every replica fetches its own)."""

    def __init__(self, auth: AuthSettings, http: httpx.AsyncClient | None = None) -> None:
        self.settings = auth.oidc
        self.redirect_uri = auth.oidc.redirect_url or (
            auth.public_url.rstrip("/") + CALLBACK_PATH)
        self.public_url = auth.public_url.rstrip("/")
        self._http = http or httpx.AsyncClient(timeout=_TIMEOUT, follow_redirects=False)
        self._metadata: dict[str, Any] | None = None
        self._metadata_at = 0.0
        self._keys: KeySet | None = None
        self._keys_at = 0.0
        self._lock = asyncio.Lock()

    async def close(self) -> None:
        await self._http.aclose()

    async def metadata(self) -> dict[str, Any]:
        """The provider's discovery document, checked (its issuer must be ours exactly)."""
        if self._metadata is not None and time.monotonic() - self._metadata_at < _METADATA_TTL:
            return self._metadata
        issuer = self.settings.issuer.rstrip("/")
        body = await self._get_json(f"{issuer}/.well-known/openid-configuration")
        metadata = OpenIDProviderMetadata(body)
        try:
            metadata.validate()
        except ValueError as err:
            raise ProviderError(f"the provider's discovery document is not valid: {err}") from None
        if metadata["issuer"] != self.settings.issuer:
            raise ProviderError(f"the provider says its issuer is {metadata['issuer']!r}, not "
                                f"{self.settings.issuer!r} (auth.oidc.issuer)")
        self._metadata, self._metadata_at = dict(metadata), time.monotonic()
        return self._metadata

    async def authorize_url(self, state: str, nonce: str, verifier: str) -> str:
        """The authorization request (code, PKCE S256, nonce, state; refresh tokens asked
        for with offline_access and prompt=consent)."""
        metadata = await self.metadata()
        scopes = ["openid", *(s for s in self.settings.scopes if s != "openid")]
        if "offline_access" in metadata.get("scopes_supported", ()) and \
                "offline_access" not in scopes:
            scopes.append("offline_access")
        params = {"response_type": "code", "client_id": self.settings.client_id,
                  "redirect_uri": self.redirect_uri, "scope": " ".join(scopes),
                  "state": state, "nonce": nonce, "code_challenge_method": "S256",
                  "code_challenge": create_s256_code_challenge(verifier),
                  "response_mode": "query"}
        if "offline_access" in scopes:
            params["prompt"] = "consent"  # without it, providers drop offline_access
        return f"{metadata['authorization_endpoint']}?{urlencode(params)}"

    async def exchange(self, code: str, verifier: str, nonce: str) -> dict[str, Any]:
        """The token response for ``code``, its ID token verified: ``claims`` added."""
        tokens = await self._token({"grant_type": "authorization_code", "code": code,
                                    "redirect_uri": self.redirect_uri,
                                    "code_verifier": verifier})
        if not isinstance(tokens.get("id_token"), str):
            raise ProviderError("the provider answered without an ID token (gpuslice reads "
                                "who signed in only from a verified ID token)",
                                code="token_invalid")
        tokens["claims"] = await self.verify_id_token(
            tokens["id_token"], nonce=nonce, access_token=tokens.get("access_token"))
        if self.settings.use_userinfo and isinstance(tokens.get("access_token"), str):
            tokens["claims"] = await self._with_userinfo(tokens["claims"],
                                                         tokens["access_token"])
        return tokens

    async def refresh(self, refresh_token: str) -> dict[str, Any]:
        """A refresh; ``claims`` from its new ID token (verified, no nonce) when it has one.
        ``ProviderError`` ``invalid_grant`` when the provider refuses the grant."""
        tokens = await self._token({"grant_type": "refresh_token",
                                    "refresh_token": refresh_token})
        if isinstance(tokens.get("id_token"), str):
            tokens["claims"] = await self.verify_id_token(
                tokens["id_token"], nonce=None, access_token=tokens.get("access_token"))
        elif isinstance(tokens.get("access_token"), str):
            tokens["claims"] = await self._userinfo(tokens["access_token"])
        return tokens

    async def verify_id_token(self, id_token: str, *, nonce: str | None,
                              access_token: str | None = None) -> dict[str, Any]:
        """The claims of ``id_token`` once its signature (a key of the provider's JWKS by kid,
        an allowed algorithm) and claims (iss, aud, azp, exp, iat, nonce, at_hash) hold."""
        token = await self._decode(id_token)
        params: dict[str, Any] = {"client_id": self.settings.client_id}
        if nonce is not None:
            params["nonce"] = nonce  # Authlib checks the nonce only when it is given
        if access_token:
            params["access_token"] = access_token
        claims = CodeIDToken(token.claims, token.header, options=self._claim_options(),
                             params=params)
        self._validate(claims)
        if nonce is not None and claims.get("nonce") != nonce:
            raise ProviderError("the ID token's nonce is not this sign-in's",
                                code="token_invalid")
        return dict(claims)

    async def verify_logout_token(self, logout_token: str) -> dict[str, Any]:
        """A back-channel logout token's claims (OpenID Back-Channel Logout 1.0 §2.6)."""
        token = await self._decode(logout_token)
        claims = CodeIDToken(token.claims, token.header, options=self._claim_options(),
                             params={"client_id": self.settings.client_id})
        claims.ESSENTIAL_CLAIMS = ["iss", "aud", "iat", "jti"]
        self._validate(claims)
        events = claims.get("events")
        if not isinstance(events, dict) or BACKCHANNEL_EVENT not in events:
            raise ProviderError("the logout token has no back-channel logout event",
                                code="token_invalid")
        if "nonce" in claims:
            raise ProviderError("a logout token may not carry a nonce", code="token_invalid")
        if not isinstance(claims.get("sid"), str) and not isinstance(claims.get("sub"), str):
            raise ProviderError("the logout token names neither sid nor sub",
                                code="token_invalid")
        return dict(claims)

    async def end_session_url(self, id_token: str | None) -> str | None:
        """Where a console logout sends the browser to sign out at the provider too (None:
        it has no end_session_endpoint); the way back is fixed: the login page."""
        endpoint = (await self.metadata()).get("end_session_endpoint")
        if not endpoint:
            return None
        params = {"client_id": self.settings.client_id,
                  "post_logout_redirect_uri": f"{self.public_url}/login?logged_out=1"}
        if id_token:
            params["id_token_hint"] = id_token
        return f"{endpoint}?{urlencode(params)}"

    def _claim_options(self) -> dict[str, Any]:
        audiences = [self.settings.client_id, *self.settings.expected_audiences]
        return {"iss": {"essential": True, "value": self.settings.issuer},
                "aud": {"essential": True, "values": audiences}}

    def _validate(self, claims: CodeIDToken) -> None:
        try:
            claims.validate(now=int(time.time()), leeway=self.settings.clock_leeway)
        except JoseError as err:
            raise ProviderError(f"the ID token does not hold: {_said(err)}",
                                code="token_invalid") from None

    async def _decode(self, token: str) -> Any:
        """The token's header and claims once its signature holds (the key picked by kid;
        the keys fetched again once, at most once a minute, for an unknown kid)."""
        algorithms = self.settings.id_token_algorithms
        for attempt in (0, 1):
            keys = await self._key_set(refetch=attempt == 1)
            try:
                return jwt.decode(token, keys, algorithms=algorithms)
            except InvalidKeyIdError:
                continue  # a key the provider published since: fetch the keys once more
            except (JoseError, ValueError) as err:
                raise ProviderError(f"the token cannot be verified: {_said(err)}",
                                    code="token_invalid") from None
        raise ProviderError("the token is signed with a key the provider does not publish",
                            code="token_invalid")

    async def _key_set(self, *, refetch: bool) -> KeySet:
        async with self._lock:
            stale = self._keys is None or (
                refetch and time.monotonic() - self._keys_at >= _JWKS_REFETCH_EVERY)
            if stale:
                body = await self._get_json((await self.metadata())["jwks_uri"])
                try:
                    self._keys = KeySet.import_key_set(body)  # type: ignore[arg-type]
                except (ValueError, JoseError, KeyError, TypeError) as err:
                    raise ProviderError(f"the provider's keys (jwks_uri) cannot be read: "
                                        f"{err}") from None
                self._keys_at = time.monotonic()
            assert self._keys is not None
            return self._keys

    async def _with_userinfo(self, claims: dict[str, Any], access_token: str
                             ) -> dict[str, Any]:
        info = await self._userinfo(access_token)
        if info.get("sub") != claims.get("sub"):
            raise ProviderError("the provider's userinfo names another subject than the ID "
                                "token", code="token_invalid")
        return {**info, **claims}  # the ID token's iss, aud, sub win

    async def _userinfo(self, access_token: str) -> dict[str, Any]:
        endpoint = (await self.metadata()).get("userinfo_endpoint")
        if not endpoint:
            raise ProviderError("the provider has no userinfo endpoint (auth.oidc.use_userinfo)")
        return await self._get_json(endpoint, headers={"Authorization": f"Bearer {access_token}"})

    async def _token(self, form: dict[str, str]) -> dict[str, Any]:
        endpoint = (await self.metadata())["token_endpoint"]
        secret = self.settings.client_secret
        if secret is None:  # a public client names itself in the form
            form = {**form, "client_id": self.settings.client_id}
        headers = {"Accept": "application/json"}
        if secret is not None:  # client_secret_basic: each part form-encoded (RFC 6749 §2.3.1)
            pair = f"{quote_plus(self.settings.client_id)}:{quote_plus(secret.get_secret_value())}"
            headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        try:
            answer = await self._http.post(endpoint, data=form, headers=headers)
        except httpx.HTTPError as err:
            raise ProviderError(f"the provider's token endpoint cannot be reached: {err}",
                                code="idp_unreachable") from None
        body = _json(answer)
        if answer.status_code in (400, 401) and body.get("error") in (
                "invalid_grant", "invalid_token", "unauthorized_client"):
            raise ProviderError(f"the provider refused: {body.get('error')}",
                                code="invalid_grant")
        if answer.status_code != 200 or not body:
            code = "idp_unreachable" if answer.status_code >= 500 else "idp_error"
            raise ProviderError(f"the provider's token endpoint answered "
                                f"{answer.status_code} {body.get('error', '')}".rstrip(),
                                code=code)
        return body

    async def _get_json(self, url: str, headers: dict[str, str] | None = None
                        ) -> dict[str, Any]:
        try:
            answer = await self._http.get(url, headers=headers)
        except httpx.HTTPError as err:
            raise ProviderError(f"the identity provider cannot be reached ({url}): {err}",
                                code="idp_unreachable") from None
        body = _json(answer)
        if answer.status_code != 200 or not body:
            raise ProviderError(f"the identity provider answered {answer.status_code} at {url}",
                                code="idp_unreachable" if answer.status_code >= 500
                                else "idp_error")
        return body


def _json(answer: httpx.Response) -> dict[str, Any]:
    try:
        body = answer.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _said(err: Exception) -> str:
    if isinstance(err, JoseError):
        return f"{err.error}: {err.description}" if err.description else err.error
    return str(err)
