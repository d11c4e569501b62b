"""The test OpenID provider itself, with nothing of gpuslice: discovery, a code + PKCE login
through its login page, the ID token checked against its JWKS, refreshes that see a groups
change, a disabled account refused, key rotation, and a login in Chromium."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest

from tests.browser import browser  # noqa: F401  (the module's Chromium)
from tests.idp.oidc import CLIENT_ID, LoginRefused, OidcProvider, client
from tests.idp.oidc import oidc_provider as start_oidc_provider
from tests.idp.relying_party import SCOPE, RelyingParty, callback_listener
from tests.ports import free_port


def _party(provider: OidcProvider) -> RelyingParty:
    # a native client: any port of 127.0.0.1 matches its registered redirect (RFC 8252)
    return RelyingParty(provider, f"http://127.0.0.1:{free_port()}/callback")


def _login(party: RelyingParty, username: str, prompt: str | None = "consent",
           http: httpx.Client | None = None) -> dict:
    if http is None:
        with httpx.Client(timeout=10) as fresh:
            return _login(party, username, prompt, fresh)
    pending = party.authorize(prompt=prompt)
    callback = party.provider.sign_in(http, pending.url, username, f"{username}-password")
    assert callback.startswith(f"{party.redirect_uri}?"), callback
    return party.finish(callback, pending)


def test_code_pkce_login_refresh_and_groups_change(oidc_provider: OidcProvider) -> None:
    party = _party(oidc_provider)
    assert party.metadata["issuer"] == oidc_provider.issuer
    assert party.metadata["code_challenge_methods_supported"] == ["S256"]
    assert "groups" in party.metadata["scopes_supported"]
    # PKCE is required: a request without a code challenge goes back with an error
    bare = party.authorize().url.split("&code_challenge_method=")[0]
    refused = httpx.get(bare, follow_redirects=False)
    assert refused.status_code == 303
    error = parse_qs(urlsplit(refused.headers["location"]).query)
    assert error["error"] == ["invalid_request"], error
    assert "PKCE" in error["error_description"][0]

    tokens = _login(party, "alice")
    claims = tokens["claims"]
    assert claims["sub"] == oidc_provider.accounts()["alice"]["sub"]
    assert claims["preferred_username"] == "alice"
    assert claims["groups"] == ["gpu-users", "vision"]
    assert claims["email"] == "alice@lab.test" and claims["email_verified"] is True
    assert party.userinfo(tokens["access_token"])["groups"] == ["gpu-users", "vision"]

    oidc_provider.set_groups("alice", ["gpu-users"])
    refreshed = party.refresh(tokens["refresh_token"])
    assert refreshed.status_code == 200, refreshed.text
    assert party.verify_id_token(refreshed.json()["id_token"])["groups"] == ["gpu-users"]

    # rotated: the old refresh token, used again, revokes the grant (the new one with it)
    rotated = refreshed.json()["refresh_token"]
    assert rotated != tokens["refresh_token"]
    for reused in (tokens["refresh_token"], rotated):
        refused = party.refresh(reused)
        assert refused.status_code == 400 and refused.json()["error"] == "invalid_grant"


def test_disabled_or_removed_account_refused(oidc_provider: OidcProvider) -> None:
    party = _party(oidc_provider)
    session = httpx.Client(timeout=10)  # keeps alice's session at the provider
    alice = _login(party, "alice", http=session)
    bob = _login(party, "bob")
    # her session signs her in again without the login page (no password asked)
    again = oidc_provider.sign_in(session, party.authorize().url, "alice", "never asked")
    assert again.startswith(f"{party.redirect_uri}?code="), again

    oidc_provider.disable("alice")
    oidc_provider.remove("bob")
    for tokens in (alice, bob):
        refused = party.refresh(tokens["refresh_token"])
        assert refused.status_code == 400 and refused.json()["error"] == "invalid_grant"
    # her session at the provider no longer signs her in: the login page refuses her
    with pytest.raises(LoginRefused, match="disabled"):
        oidc_provider.sign_in(session, party.authorize().url, "alice", "alice-password")
    session.close()
    with httpx.Client(timeout=10) as http, pytest.raises(LoginRefused, match="Wrong"):
        oidc_provider.sign_in(http, party.authorize().url, "bob", "bob-password")
    with httpx.Client(timeout=10) as http, pytest.raises(LoginRefused, match="Wrong"):
        oidc_provider.sign_in(http, party.authorize().url, "carol", "not-carol's")

    oidc_provider.disable("alice", False)
    assert _login(party, "alice")["claims"]["preferred_username"] == "alice"


def test_offline_access_needs_prompt_consent(oidc_provider: OidcProvider) -> None:
    """oidc-provider drops offline_access without prompt=consent: no refresh token then."""
    tokens = _login(_party(oidc_provider), "carol", prompt=None)
    assert "refresh_token" not in tokens
    assert "offline_access" not in tokens["scope"].split()
    assert set(tokens["scope"].split()) == set(SCOPE.split()) - {"offline_access"}


def test_key_rotation(oidc_provider: OidcProvider) -> None:
    party = _party(oidc_provider)
    tokens = _login(party, "alice")
    assert tokens["claims"].header["kid"] == "key-1"
    jwks = httpx.get(party.metadata["jwks_uri"]).json()
    assert [key["kid"] for key in jwks["keys"]] == ["key-1"]

    assert oidc_provider.rotate_keys() == "key-2"
    jwks = httpx.get(party.metadata["jwks_uri"]).json()
    assert [key["kid"] for key in jwks["keys"]] == ["key-2", "key-1"]
    refreshed = party.refresh(tokens["refresh_token"]).json()
    assert party.verify_id_token(refreshed["id_token"]).header["kid"] == "key-2"


def test_login_in_chromium(oidc_provider: OidcProvider, browser: Any) -> None:  # noqa: F811
    with callback_listener() as callbacks:
        party = RelyingParty(oidc_provider, callbacks.url)
        pending = party.authorize()
        page = browser.new_page()
        page.goto(pending.url)
        page.fill("input[name=login]", "alice")
        page.fill("input[name=password]", "alice-password")
        page.click("button[type=submit]")
        page.wait_for_selector("text=signed in")
        callback = callbacks.wait()
    assert page.url == callback
    assert parse_qs(urlsplit(callback).query)["state"] == [pending.state]
    assert party.finish(callback, pending)["claims"]["groups"] == ["gpu-users", "vision"]


def test_logout_at_the_provider_reaches_the_back_channel(tmp_path: Path) -> None:
    """A web client (exact URIs, port included) with a back-channel logout URI on 127.0.0.1:
    signing out at the provider posts it a logout token for the session it signed in."""
    with callback_listener() as rp:
        registered = client(redirect_uris=[rp.url],
                            post_logout_redirect_uris=[f"{rp.origin}/logged-out"],
                            backchannel_logout_uri=f"{rp.origin}/backchannel-logout")
        with start_oidc_provider(tmp_path, clients=[registered]) as provider:
            party = RelyingParty(provider, rp.url)
            pending = party.authorize()
            with httpx.Client(timeout=10) as http:
                tokens = party.finish(
                    provider.sign_in(http, pending.url, "bob", "bob-password"), pending)
                end = urlencode({"id_token_hint": tokens["id_token"], "client_id": CLIENT_ID,
                                 "post_logout_redirect_uri": f"{rp.origin}/logged-out"})
                after = provider.sign_out(
                    http, f"{party.metadata['end_session_endpoint']}?{end}")
            assert after == f"{rp.origin}/logged-out"
            logout = party.verify_id_token(rp.wait_post()["logout_token"])
        assert provider.process.returncode == 0, provider.log_tail()  # SIGTERM: a clean exit
    assert logout["sub"] == tokens["claims"]["sub"]
    assert logout["sid"] == tokens["claims"]["sid"]
    assert "http://schemas.openid.net/event/backchannel-logout" in logout["events"]
    assert "nonce" not in logout
