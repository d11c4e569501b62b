"""The Python SDK: every operation of the CLI, typed with the shared schemas.

    from gpuslice.client import Client
    client = Client.from_config()            # GPUSLICE_URL / GPUSLICE_TOKEN, or `gpuslice login`
    [s] = client.create_sessions(gpu=0.5, mem="2g")
    client.wait(s.id, {"RUNNING"})
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar, Unpack

import httpx

from gpuslice import __version__
from gpuslice.client import schemas
from gpuslice.client.config import ClientConfig, load_config
from gpuslice.client.errors import ApiError, error_of
from gpuslice.client.notify import NotifyCalls
from gpuslice.client.projects import ProjectCalls
from gpuslice.client.ssh import SshCalls
from gpuslice.client.storage import StorageCalls
from gpuslice.common.limits import PAGE_DEFAULT, PAGE_MAX
from gpuslice.common.versions import API_HEADER, mismatch

if TYPE_CHECKING:
    from datetime import datetime

    from gpuslice.client.terminal import Terminal
    from gpuslice.common.schemas.apps import AppList, AppPublic
    from gpuslice.common.schemas.audit import AuditPage, AuditVerify
    from gpuslice.common.schemas.common import Page
    from gpuslice.common.schemas.config import ConfigImportResult
    from gpuslice.common.schemas.health import Readiness
    from gpuslice.common.schemas.identity import IdentityPublic
    from gpuslice.common.schemas.images import (
        ImageAliasPublic,
        ImagePublic,
        ImageRescan,
        ImageUpdated,
        SessionCommitResult,
    )
    from gpuslice.common.schemas.ldap import LdapTestResult
    from gpuslice.common.schemas.monitoring import SessionStats, Top, UsageReport
    from gpuslice.common.schemas.nodes import JoinTokenCreated, JoinTokenPublic, NodePublic
    from gpuslice.common.schemas.presets import PresetPublic
    from gpuslice.common.schemas.priorities import PriorityClassPublic
    from gpuslice.common.schemas.sessions import (
        SessionCreate,
        SessionExecResult,
        SessionLogs,
        SessionPreview,
        SessionPublic,
        StatusChange,
    )
    from gpuslice.common.schemas.sso import DeviceCode, DeviceToken
    from gpuslice.common.schemas.users import (
        ApiTokenCreated,
        ApiTokenPublic,
        PolicyPublic,
        TokenInfo,
        TokenPublic,
        UserPublic,
    )

API = "/api/v1"
M = TypeVar("M")


class Client(StorageCalls, SshCalls, ProjectCalls, NotifyCalls):
    """A connection to a gpuslice manager as one user (or as nobody, before `login`).

    Folders, models and runs: see ``StorageCalls`` (``gpuslice.client.storage``)."""

    def __init__(self, url: str, token: str | None = None, *, timeout: float = 30.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.url = url.rstrip("/")
        self.token = token
        # Plain http:// has no TLS to verify, and building the verifying context costs ~60 ms
        # of a CLI command's start; redirects are not followed, so none can lead to https.
        verify = self.url.startswith("https://")
        self._http = httpx.Client(
            base_url=self.url, timeout=timeout, transport=transport, verify=verify
        )
        self._version_checked = False
        self._me: str | None = None
        # Told of each session resolved that is another user's (the CLI says whose it is).
        self.on_other: Callable[[SessionPublic], None] | None = None

    @classmethod
    def from_config(cls, config: ClientConfig | None = None) -> Client:
        """Connect with the stored login, overridden by ``GPUSLICE_URL`` / ``GPUSLICE_TOKEN``."""
        config = config or load_config()
        if not config.url:
            raise ApiError("not logged in: run `gpuslice login URL` or set GPUSLICE_URL",
                           code="not_logged_in")
        return cls(config.url, config.token)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ auth

    def login(self, username: str, password: str) -> TokenPublic:
        token: TokenPublic = self._call("POST", "/auth/login", schemas.users.TokenPublic,
                                        json={"username": username, "password": password})
        self.token = token.access_token
        return token

    def cli_login(self, username: str, password: str, host: str = "") -> TokenPublic:
        """A password login whose token is of kind ``cli`` (what ``gpuslice login`` keeps)."""
        body = {"username": username, "password": password, "host": host}
        token: TokenPublic = self._call("POST", "/auth/cli-token", schemas.users.TokenPublic,
                                        json=body)
        self.token = token.access_token
        return token

    def token_info(self) -> TokenInfo:
        """The token this client uses: its kind and when it ends."""
        return self._call("GET", "/auth/token", schemas.users.TokenInfo)

    def logout(self) -> None:
        """Revoke the token this client uses."""
        self._call("POST", "/auth/logout", None)
        self.token = None

    def me(self) -> UserPublic:
        return self._call("GET", "/auth/me", schemas.users.UserPublic)

    def create_token(self, name: str, expires_in_days: int | None = None) -> ApiTokenCreated:
        body = {"name": name, "expires_in_days": expires_in_days}
        return self._call("POST", "/auth/tokens", schemas.users.ApiTokenCreated, json=body)

    def device_start(self, client_host: str, os_user: str) -> DeviceCode:
        """Start a device sign-in (``gpuslice login --sso --device``)."""
        body = {"client_host": client_host, "os_user": os_user}
        return self._call("POST", "/auth/device", schemas.sso.DeviceCode, json=body)

    def device_token(self, device_code: str) -> DeviceToken:
        """Poll a device sign-in: the token, or ``ApiError`` with the code
        ``authorization_pending``, ``slow_down``, ``access_denied`` or ``expired_token``."""
        return self._call("POST", "/auth/device/token", schemas.sso.DeviceToken,
                          json={"device_code": device_code})

    def cli_token(self, code: str, code_verifier: str) -> DeviceToken:
        """Exchange a loopback sign-in's code (``gpuslice login --sso``) for the CLI's token."""
        return self._call("POST", "/auth/cli/token", schemas.sso.DeviceToken,
                          json={"code": code, "code_verifier": code_verifier})

    def change_password(self, current: str, new: str, *, keep_api_tokens: bool = False) -> None:
        """Change one's own password; every other login ends (API tokens too unless kept)."""
        body = {"current_password": current, "new_password": new,
                "keep_api_tokens": keep_api_tokens}
        self._call("POST", "/auth/password", None, json=body)

    def list_tokens(self) -> list[ApiTokenPublic]:
        return self._call("GET", "/auth/tokens", list[schemas.users.ApiTokenPublic])

    def revoke_token(self, token_id: str) -> None:
        self._call("DELETE", f"/auth/tokens/{token_id}", None)

    # ------------------------------------------------------------ sessions

    def create_sessions(
        self, request: SessionCreate | None = None, /, *, image: str | None = None,
        **shape: Unpack[SessionShape],
    ) -> list[SessionPublic]:
        """Launch sessions: ``request`` as it is, or one made of ``image`` and ``shape`` (see
        :class:`SessionShape`: ``gpu``, ``cpu``, ``mem``, ``count``, ``name``, ``type``,
        ``command``, ``env``, ``priority``, ``priority_class``, ``gpu_model``, ``apps``,
        ``gpu_mem``, ``folders``, ``project``, ``group``, ``time_limit``, ``begin_at``). A
        request the schema refuses raises pydantic's ``ValidationError`` before anything is
        sent."""
        body = _request_of(request, image, shape).model_dump(mode="json")
        return self._call("POST", "/sessions", list[schemas.sessions.SessionPublic], json=body)

    def preview_sessions(
        self, request: SessionCreate | None = None, /, *, image: str | None = None,
        **shape: Unpack[SessionShape],
    ) -> SessionPreview:
        """What ``create_sessions`` with the same arguments would do now, creating nothing:
        how many would start at once, how many would queue and why; the same errors."""
        body = _request_of(request, image, shape).model_dump(mode="json")
        return self._call("POST", "/sessions/preview", schemas.sessions.SessionPreview,
                          json=body)

    def list_sessions(
        self, *, status: Iterable[str] = (), owner: str | None = None, name: str | None = None,
        type: str | None = None, mine: bool = False, limit: int = PAGE_DEFAULT, offset: int = 0,
    ) -> Page[SessionPublic]:
        """One page of sessions, newest first; ``type``: interactive or batch; ``mine``: only
        one's own (an admin otherwise lists everyone's)."""
        params: dict[str, Any] = {"status": list(status), "limit": limit, "offset": offset}
        for key, value in (("owner", owner), ("name", name), ("type", type)):
            if value:
                params[key] = value
        if mine:
            params["mine"] = True
        page = schemas.common.Page[schemas.sessions.SessionPublic]
        return self._call("GET", "/sessions", page, params=params)

    def list_all_sessions(
        self, *, status: Iterable[str] = (), owner: str | None = None
    ) -> list[SessionPublic]:
        """Every session one may see (matching the filters), newest first, page after page."""
        from pydantic import TypeAdapter

        params: dict[str, Any] = {"status": list(status)} | ({"owner": owner} if owner else {})
        items = self.get_all_json("/sessions", params)
        return TypeAdapter(list[schemas.sessions.SessionPublic]).validate_python(items)

    def get_session(self, ref: str) -> SessionPublic:
        """A session by id; by name, the caller's own newest session of that name (an admin's
        too); another user's by ``OWNER/NAME`` (admins) or by its id. ``on_other`` (when set)
        is told of a session found that is not the caller's."""
        owner, _, name = ref.rpartition("/")
        session = None if owner else self._session_by_id(ref)
        if session is None:
            session = self._session_by_name(name, owner or None)
        if self.on_other is not None and (owner or session.name != ref) \
                and session.owner_id != self._my_id():
            self.on_other(session)
        return session
    def destroy_sessions(self, refs: Iterable[str]) -> list[SessionPublic]:
        ids = [self.get_session(ref).id for ref in refs]
        return self._call("POST", "/sessions/destroy", list[schemas.sessions.SessionPublic],
                          json={"ids": ids})

    def session_logs(self, ref: str, tail: int | None = None) -> SessionLogs:
        sid = self.get_session(ref).id
        params = {"tail": tail} if tail else None
        return self._call("GET", f"/sessions/{sid}/logs", schemas.sessions.SessionLogs,
                          params=params)

    def exec(self, ref: str, command: list[str], timeout: float = 60.0) -> SessionExecResult:
        """Run a command in a RUNNING session; its output and exit code."""
        sid = self.get_session(ref).id
        return self._call(
            "POST", f"/sessions/{sid}/exec", schemas.sessions.SessionExecResult,
            json={"command": command, "timeout": timeout},
            timeout=httpx.Timeout(30.0, read=timeout + 30.0),
        )

    def commit(self, ref: str, name: str, timeout: float = 600.0) -> SessionCommitResult:
        """Snapshot a RUNNING session into a new private image named ``name``."""
        sid = self.get_session(ref).id
        return self._call(
            "POST", f"/sessions/{sid}/commit", schemas.images.SessionCommitResult,
            json={"name": name},
            timeout=httpx.Timeout(30.0, read=timeout),
        )

    # ------------------------------------------------------------ monitoring

    def session_stats(self, ref: str, since: str | None = None,
                      step: int | None = None) -> SessionStats:
        """A session's usage now, totals and history (``since``: ``2h``, ``7d`` or an ISO
        time; ``step``: seconds per point), also after it ended."""
        sid = self.get_session(ref).id
        params = {k: v for k, v in (("since", since), ("step", step)) if v is not None}
        return self._call("GET", f"/sessions/{sid}/stats", schemas.monitoring.SessionStats,
                          params=params)

    def top(self) -> Top:
        """Live: per node and device, who holds which slice and how much they use."""
        return self._call("GET", "/top", schemas.monitoring.Top)

    def usage(self, user: str | None = None, since: str | None = None,
              until: str | None = None, by: str = "user") -> UsageReport:
        """Usage per user (``by="project"``: per project) and UTC day (``since``: ``7d`` or a
        date; admins: any ``user``)."""
        params = {k: v for k, v in (("user", user), ("since", since), ("until", until),
                                    ("by", by)) if v}
        return self._call("GET", "/usage", schemas.monitoring.UsageReport, params=params)
    # ------------------------------------------------------------ apps and terminals

    def list_apps(self, ref: str) -> AppList:
        """A running session's apps (its terminal and its image's) with states and URLs."""
        sid = self.get_session(ref).id
        return self._call("GET", f"/sessions/{sid}/apps", schemas.apps.AppList)

    def start_app(self, ref: str, name: str, timeout: float = 600.0) -> AppPublic:
        """Start an app unless it runs and wait until it answers: its URL (a browser opens it
        after logging in). ``ApiError`` ``app_failed`` with its exit code and last lines."""
        sid = self.get_session(ref).id
        return self._call("POST", f"/sessions/{sid}/apps/{name}/start", schemas.apps.AppPublic,
                          timeout=httpx.Timeout(30.0, read=timeout))

    def terminal(self, ref: str, *, rows: int = 24, cols: int = 80,
                 terminal: str | None = None) -> Terminal:
        """A shell in a running session (see ``gpuslice.client.terminal``); ``terminal``: the
        id of one whose connection dropped within the last minute, to reattach to it."""
        from gpuslice.client.terminal import Terminal

        sid = self.get_session(ref).id
        url = "ws" + self.url.removeprefix("http") + f"{API}/sessions/{sid}/terminal"
        return Terminal.open(url, self.token, rows=rows, cols=cols, terminal=terminal)

    # ------------------------------------------------------------ images

    def list_images(self) -> list[ImagePublic]:
        """Images one may use: public ones and one's own private ones (admins: all)."""
        return self._call("GET", "/images", list[schemas.images.ImagePublic])

    def list_image_aliases(self) -> list[ImageAliasPublic]:
        return self._call("GET", "/images/aliases", list[schemas.images.ImageAliasPublic])

    def set_image_alias(self, name: str, reference: str) -> ImageAliasPublic:
        body = {"name": name, "reference": reference}
        return self._call("POST", "/images/aliases", schemas.images.ImageAliasPublic, json=body)

    def delete_image_alias(self, name: str) -> None:
        self._call("DELETE", f"/images/aliases/{name}", None)

    def publish_image(self, reference: str, public: bool = True) -> ImageUpdated:
        """Make an image public (or private again); ``exposes`` says what publishing exposes."""
        return self._call("PATCH", f"/images/{reference}", schemas.images.ImageUpdated,
                          json={"public": public})

    def remove_image(self, reference: str) -> None:
        self._call("DELETE", f"/images/{reference}", None)

    def rescan_images(self) -> ImageRescan:
        return self._call("POST", "/images/rescan", schemas.images.ImageRescan)

    def events(self, session_id: str | None = None, since: int | None = None,
               timeout: float | None = None, reconnect: float = 30.0) -> Iterator[StatusChange]:
        """Status changes one may see, as they happen (server-sent events).

        A stream that breaks (its manager replica stopped or died; a load balancer then sends
        the next connection to another) is opened again after the last event received, so none
        is missed or repeated; ``reconnect`` is how many seconds in a row of failing to
        reconnect are tolerated before `ApiError` (0: never reconnect).
        """
        # Here, not at the top: backoff imports asyncio, which a CLI command that never
        # watches events should not pay for at its start.
        from gpuslice.common.backoff import Backoff

        failing_since: float | None = None
        backoff = Backoff(0.2, 2.0, jitter=0)
        while True:
            try:
                for change in self._event_stream(session_id, since, timeout):
                    failing_since = None
                    backoff.reset()
                    since = change.id
                    yield change
                if not reconnect:
                    return
            except ApiError as err:
                if err.code != "unreachable" or not reconnect:
                    raise
                failing_since = failing_since or time.monotonic()
                if time.monotonic() - failing_since > reconnect:
                    raise
            time.sleep(backoff.next())

    def _event_stream(self, session_id: str | None, since: int | None,
                      timeout: float | None) -> Iterator[StatusChange]:
        params: dict[str, Any] = {}
        if session_id:
            params["session_id"] = session_id
        if since is not None:
            params["since"] = since
        try:
            with self._http.stream(
                "GET", f"{API}/sessions/events", params=params, headers=self._headers(),
                timeout=httpx.Timeout(timeout or 30.0, read=timeout),
            ) as response:
                self._check_version(response)
                if response.status_code >= 400:  # a balancer's 502/503 is "unreachable"
                    response.read()
                    raise _error_of(response)
                for data in _sse_data(response.iter_lines()):
                    yield schemas.sessions.StatusChange.model_validate_json(data)
        except httpx.ReadTimeout:  # the caller's bound on the wait for an event: not a failure
            raise ApiError(f"no status change within {timeout or 0:g}s", code="timeout") from None
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from None

    def wait(self, session_id: str, statuses: Iterable[str], timeout: float = 300.0,
             poll: float = 0.5) -> SessionPublic:
        """Wait until the session reaches one of ``statuses`` (or a final status)."""
        wanted = {schemas.sessions.SessionStatus(s) for s in statuses} | schemas.sessions.FINAL
        deadline = time.monotonic() + timeout
        while True:
            session = self.get_session(session_id)
            if session.status in wanted:
                return session
            if time.monotonic() > deadline:
                raise ApiError(
                    f"session {session.name} is still {session.status.value} after {timeout:g}s"
                    + (f": {session.status_reason}" if session.status_reason else ""),
                    code="timeout",
                )
            time.sleep(poll)

    # ------------------------------------------------------------ admin

    def list_nodes(self) -> list[NodePublic]:
        return self._call("GET", "/nodes", list[schemas.nodes.NodePublic])

    def create_join_token(
        self, name: str, expires_in_hours: int = 1, *, node: str | None = None,
        rekey: bool = False,
    ) -> JoinTokenCreated:
        """A single-use join token; ``node`` binds it to that node name, ``rekey`` lets it
        replace that existing node's credential."""
        body = {"name": name, "expires_in_hours": expires_in_hours, "node": node, "rekey": rekey}
        return self._call("POST", "/join-tokens", schemas.nodes.JoinTokenCreated, json=body)

    def list_join_tokens(self) -> list[JoinTokenPublic]:
        return self._call("GET", "/join-tokens", list[schemas.nodes.JoinTokenPublic])

    def find_node(self, ref: str) -> NodePublic:
        for node in self.list_nodes():
            if ref in (node.name, node.id):
                return node
        raise ApiError(f"no node named '{ref}'", status=404, code="not_found")

    def revoke_node(self, ref: str) -> NodePublic:
        """Refuse a node's credential from now on and end its sessions (admins)."""
        node = self.find_node(ref)
        return self._call("POST", f"/nodes/{node.id}/revoke", schemas.nodes.NodePublic)

    def create_user(self, username: str, password: str, role: str = "user") -> UserPublic:
        body = {"username": username, "password": password, "role": role}
        return self._call("POST", "/users", schemas.users.UserPublic, json=body)

    def reset_password(
        self, username: str, password: str, *, keep_api_tokens: bool = False
    ) -> UserPublic:
        """Set a user's password (admins); the user's logins end, API tokens too unless kept."""
        user = self.find_user(username)
        body = {"password": password, "keep_api_tokens": keep_api_tokens}
        return self._call("PATCH", f"/users/{user.id}", schemas.users.UserPublic, json=body)

    def identities(self, username: str) -> list[IdentityPublic]:
        """A user's identities at OIDC and LDAP providers (admins)."""
        user = self.find_user(username)
        return self._call("GET", f"/users/{user.id}/identities",
                          list[schemas.identity.IdentityPublic])

    def link_identity(self, username: str, provider: str, subject: str) -> IdentityPublic:
        """Link a user to a provider's user (admins)."""
        user = self.find_user(username)
        return self._call("POST", f"/users/{user.id}/identities",
                          schemas.identity.IdentityPublic,
                          json={"provider": provider, "subject": subject})

    def unlink_identity(self, username: str, provider: str) -> IdentityPublic:
        """Unlink a user's identity at ``provider`` (admins): the one unlinked."""
        found = [i for i in self.identities(username) if i.provider == provider]
        if not found:
            raise ApiError(f"{username} is not linked to a user at {provider}", status=404,
                           code="not_found")
        user = self.find_user(username)
        self._call("DELETE", f"/users/{user.id}/identities/{found[0].id}", None)
        return found[0]

    def audit(self, **filters: str | int | None) -> AuditPage:
        """A page of the audit log, newest first (admins): filters ``user``, ``action``,
        ``target``, ``outcome``, ``since``, ``until`` (RFC 3339), ``limit``, ``after``."""
        params = {k: v for k, v in filters.items() if v is not None}
        return self._call("GET", "/audit", schemas.audit.AuditPage, params=params)

    def audit_verify(self) -> AuditVerify:
        """Check the audit log's hash chain (admins)."""
        return self._call("GET", "/audit/verify", schemas.audit.AuditVerify)

    def audit_export(self, since: str | None = None) -> Iterator[str]:
        """The audit log as JSON lines, oldest first, streamed (admins)."""
        try:
            with self._http.stream("GET", f"{API}/audit/export", headers=self._headers(),
                                   params={"since": since} if since else {},
                                   timeout=httpx.Timeout(60.0)) as response:
                self._check_version(response)
                if response.status_code >= 400:
                    response.read()
                    raise _error_of(response)
                yield from response.iter_lines()
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from None

    def activity(self, since: str | None = None, limit: int = 100) -> AuditPage:
        """The caller's own security log: logins, tokens, password changes."""
        params = {"limit": limit, **({"since": since} if since else {})}
        return self._call("GET", "/auth/activity", schemas.audit.AuditPage, params=params)

    def list_users(self) -> list[UserPublic]:
        return self._call("GET", "/users", list[schemas.users.UserPublic])

    def test_ldap(self, user: str | None = None) -> LdapTestResult:
        """The directory as the manager's service account sees it; with ``user``, what
        gpuslice would do with them (admins)."""
        params = {"user": user} if user else None
        return self._call("GET", "/ldap/test", schemas.ldap.LdapTestResult, params=params)

    def find_user(self, username: str) -> UserPublic:
        for user in self.list_users():
            if username in (user.username, user.id):
                return user
        raise ApiError(f"no user named '{username}'", status=404, code="not_found")

    def list_policies(self) -> list[PolicyPublic]:
        return self._call("GET", "/policies", list[schemas.users.PolicyPublic])

    def list_presets(self) -> list[PresetPublic]:
        return self._call("GET", "/presets", list[schemas.presets.PresetPublic])

    def create_preset(self, name: str, **values: Any) -> PresetPublic:
        return self._call("POST", "/presets", schemas.presets.PresetPublic,
                          json={"name": name, **values})

    def update_preset(self, name: str, **values: Any) -> PresetPublic:
        return self._call("PATCH", f"/presets/{name}", schemas.presets.PresetPublic,
                          json=values)

    def delete_preset(self, name: str) -> None:
        self._call("DELETE", f"/presets/{name}", None)

    def list_priority_classes(self) -> list[PriorityClassPublic]:
        """Priority classes, highest rank first (every user)."""
        return self._call("GET", "/priority-classes",
                          list[schemas.priorities.PriorityClassPublic])

    def create_priority_class(self, name: str, rank: int, **values: Any) -> PriorityClassPublic:
        """Add a class (admins): ``min_runtime_s``, ``grace_s``, ``preempt_interactive``,
        ``default``, ``projects`` (the names of those that may use it) or ``any_project``
        (every project); with neither, admins only."""
        return self._call("POST", "/priority-classes", schemas.priorities.PriorityClassPublic,
                          json={"name": name, "rank": rank, **values})

    def update_priority_class(self, name: str, **values: Any) -> PriorityClassPublic:
        """Change a class (admins); ``projects=[...]`` replaces the projects that may use it,
        ``any_project=True`` lets every project, ``projects=[]`` alone: admins only."""
        return self._call("PATCH", f"/priority-classes/{name}",
                          schemas.priorities.PriorityClassPublic, json=values)

    def delete_priority_class(self, name: str) -> None:
        self._call("DELETE", f"/priority-classes/{name}", None)

    def set_user_policy(self, username: str, **limits: Any) -> PolicyPublic:
        """Give a user their own policy (``user-<name>``) with these limits, creating it once."""
        user = self.find_user(username)
        name = f"user-{user.username}"
        existing = next((p for p in self.list_policies() if p.name == name), None)
        model = schemas.users.PolicyPublic
        policy: PolicyPublic
        if existing is None:
            policy = self._call("POST", "/policies", model, json={"name": name, **limits})
        else:
            policy = self._call("PUT", f"/policies/{existing.id}", model, json=limits)
        if user.policy_id != policy.id:
            self._call("PATCH", f"/users/{user.id}", schemas.users.UserPublic,
                       json={"policy_id": policy.id})
        return policy

    def export_config(self, password_hashes: bool = False) -> dict[str, Any]:
        """The platform's configuration document (policies, users, aliases, the image
        catalog), as the manager wrote it: ready to store and to import elsewhere."""
        document: dict[str, Any] = self.get_json(
            "/config", params={"password_hashes": password_hashes})
        return document

    def import_config(self, document: dict[str, Any], dry_run: bool = False
                      ) -> ConfigImportResult:
        """Merge a configuration document by name, all or nothing (``dry_run``: only count)."""
        return self._call("POST", "/config/import", schemas.config.ConfigImportResult,
                          json=document, params={"dry_run": dry_run})

    def readiness(self) -> Readiness:
        """Whether this manager replica is ready for traffic, check by check (503 included)."""
        try:
            response = self._http.get(f"{API}/health/ready")
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from None
        if response.status_code not in (200, 503):
            raise _error_of(response)
        return schemas.health.Readiness.model_validate_json(response.content)

    # ------------------------------------------------------------ raw

    def get_json(self, path: str, params: dict[str, Any] | None = None) -> Any:
        """GET ``path`` (under /api/v1): the manager's JSON as it came, not validated into the
        shared schemas. For printing an answer as is: building the pydantic models of a schema
        module takes longer than the call (failures raise `ApiError` like every method)."""
        return self._send("GET", path, params=params).json()

    def get_all_json(self, path: str, params: dict[str, Any] | None = None,
                     page_size: int = PAGE_MAX) -> list[Any]:
        """Every item of a paged listing (answers ``{"items", "total", ...}``) as the manager's
        JSON, a page at a time. Items created meanwhile push older ones to the next page, so
        one may come twice: each (by ``id``) is kept once."""
        items: dict[Any, Any] = {}
        offset = 0
        position: dict[str, Any] = {"offset": 0}
        while True:
            page = self.get_json(path, (params or {}) | {"limit": page_size} | position)
            for item in page["items"]:
                items.setdefault(item.get("id", len(items)), item)
            offset += len(page["items"])
            if "next" in page:  # a listing that says where its next page begins
                if page["next"] is None:
                    return list(items.values())
                position = {"after": page["next"]}
                continue
            if len(page["items"]) < page_size or offset >= page["total"]:
                return list(items.values())
            position = {"offset": offset}

    # ------------------------------------------------------------ plumbing

    def _session_by_id(self, ref: str) -> SessionPublic | None:
        try:
            return self._call("GET", f"/sessions/{ref}", schemas.sessions.SessionPublic)
        except ApiError as err:
            if err.status != 404:
                raise
        return None

    def _session_by_name(self, name: str, owner: str | None) -> SessionPublic:
        """The newest session named ``name`` of ``owner`` (None: of the caller)."""
        try:
            page = self.list_sessions(name=name, owner=owner, mine=owner is None, limit=1)
        except ApiError as err:
            if err.status != 403:
                raise
            page = None  # a user naming another user: theirs are out of sight
        if page is not None and page.items:
            found = page.items[0].id
            return self._call("GET", f"/sessions/{found}", schemas.sessions.SessionPublic)
        if owner is not None:
            raise ApiError(f"no session named '{name}' of user '{owner}' that you may see",
                           status=404, code="not_found")
        raise ApiError(f"no session '{name}': give its id, or the name of one of your "
                       "sessions (another user's session: OWNER/NAME or its id)",
                       status=404, code="not_found")

    def _my_id(self) -> str:
        if self._me is None:
            self._me = self.me().id
        return self._me

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def _call(self, method: str, path: str, model: type[M] | Any, **kw: Any) -> M:
        # pydantic loads with the first answer to validate (see gpuslice.client.schemas)

        from pydantic import BaseModel, TypeAdapter, ValidationError

        response = self._send(method, path, **kw)
        if model is None or response.status_code == 204:
            return None  # type: ignore[return-value]
        try:
            if isinstance(model, type) and issubclass(model, BaseModel):
                return model.model_validate_json(response.content)  # type: ignore[return-value]
            return TypeAdapter(model).validate_json(response.content)
        except ValidationError as exc:
            raise ApiError(
                f"the manager at {self.url} answered {method} {path} in a form this gpuslice "
                f"({__version__}) does not read ({exc.error_count()} problem(s), the first at "
                f"{_location(exc)}): is it a gpuslice manager of another version?",
                code="bad_answer",
            ) from None

    def _send(self, method: str, path: str, **kw: Any) -> httpx.Response:
        try:
            headers = {**self._headers(), **kw.pop("headers", {})}
            response = self._http.request(method, API + path, headers=headers, **kw)
        except httpx.TransportError as exc:
            raise self._unreachable(exc, method) from None
        self._check_version(response)
        if response.status_code >= 400:
            raise _error_of(response)
        return response

    def _check_version(self, response: httpx.Response) -> None:
        """Once per client: a manager of another API revision is refused in one sentence,
        before any answer of it is read. Only a gpuslice manager's answers count (a proxy's
        error page states no version)."""
        if self._version_checked:
            return
        if API_HEADER not in response.headers and not response.is_success:
            return
        self._version_checked = True
        problem = mismatch(response.headers, self.url)
        if problem is not None:
            self._version_checked = False  # every later call is refused the same way
            raise ApiError(problem, code="version_mismatch")

    def _unreachable(self, exc: Exception, method: str = "GET") -> ApiError:
        if isinstance(exc, httpx.ConnectError):
            why = _reason(exc) or "connection refused"
            return ApiError(
                f"cannot reach the manager at {self.url} ({why}): is it running? "
                "(`gpuslice up` runs one here; `gpuslice login URL` uses another)",
                code="unreachable",
            )
        if isinstance(exc, httpx.TimeoutException):
            return ApiError(f"the manager at {self.url} did not answer in time ({exc!r})",
                            code="timeout")
        done = "" if method == "GET" else ": what was asked may or may not have been done"
        return ApiError(
            f"the manager at {self.url} stopped answering (the connection broke: "
            f"{_reason(exc) or type(exc).__name__}){done}", code="no_answer",
        )


def _reason(exc: Exception) -> str:
    """The innermost cause of a transport error, e.g. "Connection refused"."""
    text = str(exc).strip()
    return text.rsplit("] ", 1)[-1] if text else ""


def _location(exc: Any) -> str:
    errors = exc.errors()
    if not errors:
        return "?"
    return ".".join(str(p) for p in errors[0].get("loc", ())) or "the top"


def _error_of(response: httpx.Response) -> ApiError:
    return error_of(response.status_code, response.content, host=response.request.url.host)


def _sse_data(lines: Iterable[str]) -> Iterator[str]:
    """The data of each `status` event of a server-sent event stream."""
    event, data = "message", list[str]()
    for line in lines:
        if not line:
            if data and event == "status":
                yield "\n".join(data)
            event, data = "message", []
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())
    if data and event == "status":
        yield "\n".join(data)


__all__ = ["ApiError", "Client"]


class SessionShape(TypedDict, total=False):
    """What a request for sessions may say besides its image (the schema's defaults otherwise).
    ``apps``: apps of the image to start as soon as each runs; ``gpu_mem`` (instead of
    ``gpu``): the GPU memory it needs; ``folders``: storage folders, ``NAME`` or ``NAME:ro``;
    ``time_limit``: seconds, or ``"2h"``, ``"30m"``, ``"1:30:00"`` (Slurm's forms);
    ``begin_at``: an aware ``datetime`` it starts no sooner than."""

    gpu: float | str
    cpu: float | str
    mem: int | str
    count: int
    name: str | None
    type: str
    command: list[str] | None
    env: dict[str, str]
    priority: int
    priority_class: str | None
    gpu_model: str | None
    apps: list[str]
    gpu_mem: int | str | None
    folders: list[str]
    project: str | None
    group: str | None
    time_limit: int | str | None
    begin_at: datetime | str | None


def session_request(*, image: str, **shape: Unpack[SessionShape]) -> SessionCreate:
    """A request for sessions, checked by the schema the manager checks it with; what
    ``shape`` leaves out (or gives as None) takes the schema's default."""
    given = {key: value for key, value in shape.items() if value is not None}
    resources = {key: given.pop(key) for key in _RESOURCES if key in given}
    return schemas.sessions.SessionCreate.model_validate(
        {"image": image, "resources": resources, **given})


_RESOURCES = ("gpu", "cpu", "mem", "gpu_mem")


def _request_of(request: SessionCreate | None, image: str | None,
                shape: SessionShape) -> SessionCreate:
    if request is not None:
        if image is not None or shape:
            raise TypeError("give a SessionCreate or image and shape, not both")
        return request
    if image is None:
        raise TypeError("image is required (or a SessionCreate)")
    return session_request(image=image, **shape)
