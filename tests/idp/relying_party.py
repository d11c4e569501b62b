"""A minimal OpenID relying party (Authlib's rules, joserfc's signatures, httpx), with nothing of
gpuslice in it: the harness's own self-tests use it to prove the test provider speaks the
protocol, and a gpuslice test may use it to compare."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
from authlib.oauth2.rfc7636 import create_s256_code_challenge
from authlib.oidc.core import CodeIDToken
from authlib.oidc.discovery import OpenIDProviderMetadata
from joserfc import jwt
from joserfc.jwk import KeySet

from tests.idp.oidc import CLIENT_ID, CLIENT_SECRET, OidcProvider
from tests.waits import wait_for

SCOPE = "openid profile email groups offline_access"


@dataclass
class Pending:
    """One authorization request's secrets, kept until its callback."""

    url: str
    state: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    nonce: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    verifier: str = field(default_factory=lambda: secrets.token_urlsafe(48))


class RelyingParty:
    """``authorize`` → (the user signs in) → ``finish`` → tokens, ID token verified."""

    def __init__(self, provider: OidcProvider, redirect_uri: str, client_id: str = CLIENT_ID,
                 secret: str = CLIENT_SECRET) -> None:
        self.provider = provider
        self.redirect_uri = redirect_uri
        self.client_id = client_id
        self.auth = (client_id, secret)
        metadata = OpenIDProviderMetadata(provider.metadata())
        metadata.validate()
        self.metadata = metadata

    def authorize(self, scope: str = SCOPE, prompt: str | None = "consent") -> Pending:
        """A code + PKCE (S256) authorization request; ``prompt=consent`` keeps offline_access
        (oidc-provider drops it otherwise, and then issues no refresh token)."""
        pending = Pending(url="")
        params = {"response_type": "code", "client_id": self.client_id, "scope": scope,
                  "redirect_uri": self.redirect_uri, "state": pending.state,
                  "nonce": pending.nonce, "code_challenge_method": "S256",
                  "code_challenge": create_s256_code_challenge(pending.verifier)}
        if prompt:
            params["prompt"] = prompt
        pending.url = f"{self.metadata['authorization_endpoint']}?{urlencode(params)}"
        return pending

    def finish(self, callback: str, pending: Pending) -> dict[str, Any]:
        """The token response for ``callback`` (the redirect back with ``code``), after checking
        its state and issuer (RFC 9207) and the ID token (signature, claims, nonce)."""
        query = {k: v[0] for k, v in parse_qs(urlsplit(callback).query).items()}
        assert "error" not in query, f"the provider refused: {query}"
        assert query["state"] == pending.state, "state differs"
        assert query["iss"] == self.metadata["issuer"], f"iss {query['iss']!r}"
        answer = httpx.post(self.metadata["token_endpoint"], auth=self.auth, timeout=10, data={
            "grant_type": "authorization_code", "code": query["code"],
            "redirect_uri": self.redirect_uri, "code_verifier": pending.verifier})
        assert answer.status_code == 200, f"token: {answer.status_code} {answer.text}"
        tokens = dict(answer.json())
        tokens["claims"] = self.verify_id_token(tokens["id_token"], nonce=pending.nonce)
        return tokens

    def refresh(self, refresh_token: str) -> httpx.Response:
        return httpx.post(self.metadata["token_endpoint"], auth=self.auth, timeout=10,
                          data={"grant_type": "refresh_token", "refresh_token": refresh_token})

    def userinfo(self, access_token: str) -> dict[str, Any]:
        answer = httpx.get(self.metadata["userinfo_endpoint"], timeout=10,
                           headers={"Authorization": f"Bearer {access_token}"})
        assert answer.status_code == 200, f"userinfo: {answer.status_code} {answer.text}"
        return dict(answer.json())

    def verify_id_token(self, id_token: str, nonce: str | None = None) -> CodeIDToken:
        """The ID token's claims once its signature (the provider's JWKS, RS256 only) and
        claims (iss, aud, exp, iat, nonce, azp) hold."""
        keys = httpx.get(self.metadata["jwks_uri"], timeout=10).json()
        token = jwt.decode(id_token, KeySet.import_key_set(keys), algorithms=["RS256"])
        claims = CodeIDToken(token.claims, token.header, params={"nonce": nonce} if nonce else {},
                             options={"iss": {"essential": True, "value": self.metadata["issuer"]},
                                      "aud": {"essential": True, "value": self.client_id}})
        claims.validate(leeway=60)
        return claims


class Callbacks:
    """What a browser or the provider sent a relying party's listener: each GET's full URL
    (``seen``) and each POST's form (``posts``: a back-channel logout's ``logout_token``)."""

    def __init__(self, origin: str, path: str) -> None:
        self.origin = origin
        self.url = f"{origin}{path}"
        self.seen: list[str] = []
        self.posts: list[dict[str, str]] = []

    def wait(self, timeout: float = 30) -> str:
        """The first GET's full URL, once it came."""
        return str(wait_for(lambda: self.seen[0] if self.seen else None, timeout,
                            f"a request to {self.url}"))

    def wait_post(self, timeout: float = 30) -> dict[str, str]:
        """The first POST's form, once it came."""
        return dict(wait_for(lambda: self.posts[0] if self.posts else None, timeout,
                             f"a POST to {self.origin}"))


@contextmanager
def callback_listener(path: str = "/callback") -> Iterator[Callbacks]:
    """An HTTP listener on a free 127.0.0.1 port that records each request sent to it and
    answers "signed in" (a GET) or 200 (a POST): a relying party's redirect URI
    (``Callbacks.url``) and back-channel logout URI (any other path of ``Callbacks.origin``)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    callbacks = Callbacks(f"http://127.0.0.1:{server.server_address[1]}", path)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            callbacks.seen.append(f"{callbacks.origin}{self.path}")
            self._answer(b"signed in")

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            callbacks.posts.append({k: v[0] for k, v in parse_qs(body.decode()).items()})
            self._answer(b"")

        def _answer(self, body: bytes) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server.RequestHandlerClass = Handler
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield callbacks
    finally:
        server.shutdown()
        server.server_close()
