"""The manager's settings: one typed tree from a TOML file and ``GPUSLICE_*`` variables.

Built once at start by ``load_settings()`` and passed down (``create_app(settings)``); nothing
reads settings at import time. Nested fields use ``__`` in the environment, e.g.
``GPUSLICE_SCHEDULER__INTERVAL=2`` or ``GPUSLICE_DATABASE__URL=postgresql+asyncpg://…``.
"""

from __future__ import annotations

import ipaddress
import re
from decimal import Decimal
from pathlib import Path
from typing import Any, ClassVar, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from gpuslice.common.limits import CREATE_COUNT_MAX
from gpuslice.common.logs import LogSettings
from gpuslice.common.resources import ResourceError, parse_fgpu, parse_fgpu_per_gpu
from gpuslice.common.settings_files import FileSettings, Section
from gpuslice.common.timelimits import MAX_TIME_LIMIT
from gpuslice.manager.scheduler import Policy, SchedulerConfig, Strategy

_HOST = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,252})")


class DatabaseSettings(Section):
    url: str | None = Field(
        default=None,
        description="SQLAlchemy async URL (sqlite+aiosqlite:///… or postgresql+asyncpg://…); "
        "default: sqlite+aiosqlite:///<data_dir>/gpuslice.db",
    )
    migrate_on_start: bool = Field(default=True, description="Run `upgrade head` at start.")
    pool_size: int = Field(default=10, ge=1, le=200, description="PostgreSQL pool size.")
    echo: bool = Field(default=False, description="Log every SQL statement (debugging).")
    busy_timeout: float = Field(
        default=30.0, ge=0.1, le=600,
        description="SQLite: seconds a statement waits for another program's lock on the "
        "database before it fails (the API then answers 503 `database_unavailable`).",
    )


class SchedulerSettings(Section):
    interval: float = Field(
        default=5.0, ge=0.05, le=3600, description="Seconds between safety-net passes."
    )
    policy: Policy = Field(default=Policy.FIFO, description="fifo, backfill or drf.")
    strategy: Strategy = Field(default=Strategy.BINPACK, description="binpack or spread.")
    max_wait_before_reserve: float = Field(
        default=600.0, ge=0, le=7 * 86400,
        description="Backfill: seconds a request waits before capacity is reserved for it.",
    )
    reserve_head: bool = Field(
        default=True,
        description="Backfill: the first waiting request of each pool holds capacity at once "
        "(a job starts on it only if its time limit ends first); false: only after "
        "max_wait_before_reserve.",
    )
    fgpu_step: Decimal = Field(
        default=Decimal("0.01"),
        description="The cluster's fGPU step: a request by GPU memory (`--gpu-mem`) gets the "
        "smallest multiple of it whose memory is enough (0.01: any fGPU amount).",
    )

    @field_validator("fgpu_step", mode="before")
    @classmethod
    def _check_step(cls, value: object) -> Decimal:
        try:
            milli = parse_fgpu(value, field="fgpu_step")
        except ResourceError as exc:
            raise ValueError(exc.message) from None
        if milli <= 0:
            raise ValueError("fgpu_step: must be more than zero, e.g. 0.01 or 0.25")
        return Decimal(milli) / 1000

    @property
    def step_milli(self) -> int:
        return int(self.fgpu_step * 1000)

    def core_config(self) -> SchedulerConfig:
        return SchedulerConfig(
            self.policy, self.strategy, self.max_wait_before_reserve, fgpu_step=self.step_milli,
            reserve_head=self.reserve_head,
        )


class NodeSettings(Section):
    node_timeout: float = Field(
        default=30.0, ge=0.5, le=3600,
        description="A node whose last heartbeat is older than this is LOST.",
    )
    heartbeat_interval: float = Field(
        default=5.0, ge=0.1, le=600, description="Seconds between heartbeats asked of agents."
    )
    sweep_interval: float = Field(
        default=2.0, ge=0.05, le=600, description="Seconds between checks for lost nodes."
    )
    fgpu_per_gpu: Decimal = Field(
        default=Decimal(1), description="Default fGPU per physical GPU (per-node override)."
    )
    assignment_poll: float = Field(
        default=1.0, ge=0.05, le=60,
        description="Long-poll fallback: seconds between database checks, so that a change "
        "made by another manager replica still reaches the agent.",
    )
    advertise_url: str | None = Field(
        default=None, pattern=r"^https?://[^\s]+$",
        description="This manager replica's URL as agents reach it, where they open terminal "
        "and app streams (with several replicas, each its own); default: the URL each agent "
        "is configured with.",
    )

    @field_validator("fgpu_per_gpu", mode="before")
    @classmethod
    def _check_ratio(cls, value: object) -> Decimal:
        try:
            return Decimal(parse_fgpu_per_gpu(value)) / 1000
        except ResourceError as exc:
            raise ValueError(exc.message) from None

    @property
    def device_capacity(self) -> int:
        """One device in milli-fGPU."""
        return int(self.fgpu_per_gpu * 1000)


class IdentityMapping(Section):
    """Who a provider's user becomes in gpuslice (shared by ``auth.oidc`` and ``auth.ldap``;
    see gpuslice/manager/services/identity/README.md)."""

    allow_all: bool = Field(
        default=False,
        description="Every user the provider signs in may use gpuslice; otherwise only members "
        "of allowed_groups (the manager refuses to start with the provider on and neither set).",
    )
    allowed_groups: list[str] = Field(
        default_factory=list, max_length=1000,
        description="Groups (compared exactly, as the provider sends them) whose members may "
        "sign in.",
    )
    admin_groups: list[str] = Field(
        default_factory=list, max_length=1000,
        description="Groups whose members are admins; when set, the role of this provider's "
        "users follows them at every sign-in and re-check (an admin cannot change it).",
    )
    provision: Literal["auto", "existing-only", "inactive"] = Field(
        default="auto",
        description="At a first sign-in: auto creates the user; existing-only refuses anyone "
        "an admin has not linked; inactive creates the user disabled until an admin enables it.",
    )
    link_existing: Literal["never", "by-username"] = Field(
        default="never",
        description="A first sign-in whose user name belongs to an account not linked to any "
        "provider: never (refused, the admin links it) or by-username (linked once: a "
        "migration aid). An e-mail address never links accounts.",
    )


class OidcSettings(IdentityMapping):
    """OpenID Connect single sign-on; off while ``issuer`` is empty."""

    issuer: str = Field(
        default="", max_length=512,
        description="The provider's issuer URL (https unless on a loopback address); empty: "
        "no OIDC sign-in.",
    )
    client_id: str = Field(default="", max_length=256, description="gpuslice's client id.")
    client_secret: SecretStr | None = Field(
        default=None,
        description="gpuslice's client secret (GPUSLICE_AUTH__OIDC__CLIENT_SECRET); never "
        "logged nor shown.",
    )
    display_name: str = Field(
        default="single sign-on", min_length=1, max_length=64,
        description="The provider's name on the login page (Log in with ...).",
    )
    scopes: list[str] = Field(
        default_factory=lambda: ["openid", "profile", "email", "groups"], max_length=20,
        description="Scopes asked for (openid is always asked).",
    )
    username_claim: str = Field(
        default="preferred_username", min_length=1, max_length=128,
        description="The claim (a dotted path) a new user's name comes from, fixed at the "
        "first sign-in.",
    )
    username_strip_domain: str = Field(
        default="", max_length=253,
        description="A domain taken off the user name claim (alice@lab.org: alice); a name "
        "with another domain is refused.",
    )
    name_claim: str = Field(default="name", max_length=128,
                            description="The claim of the user's display name.")
    email_claim: str = Field(default="email", max_length=128,
                             description="The claim of the user's e-mail address.")
    trust_email: bool = Field(
        default=False,
        description="Take the e-mail address as verified without an email_verified claim "
        "(it never links accounts either way).",
    )
    groups_claim: str = Field(
        default="groups", min_length=1, max_length=128,
        description="The claim (a dotted path, e.g. realm_access.roles) of the user's groups.",
    )
    redirect_url: str = Field(
        default="", max_length=512,
        description="The redirect URI registered at the provider; default "
        "<auth.public_url>/auth/oidc/callback. Never taken from a request's Host.",
    )
    id_token_algorithms: list[str] = Field(
        default_factory=lambda: ["RS256", "ES256", "PS256", "EdDSA"], min_length=1,
        max_length=12,
        description="Signature algorithms an ID token may use (none is never accepted; HS256 "
        "only when listed).",
    )
    expected_audiences: list[str] = Field(
        default_factory=list, max_length=20,
        description="Audiences an ID token may name besides client_id (ADFS's prefixed one); "
        "client_id is always accepted.",
    )
    use_userinfo: bool = Field(
        default=False,
        description="Also read the userinfo endpoint at sign-in; its sub must equal the ID "
        "token's.",
    )
    clock_leeway: int = Field(
        default=60, ge=0, le=600,
        description="Seconds of clock difference allowed when checking exp and iat.",
    )
    recheck_interval: float = Field(
        default=900.0, ge=1, le=86400,
        description="Seconds between re-checks of each sign-in with its refresh token (groups "
        "synced; a refused refresh ends the sign-in's tokens).",
    )
    session_max: float = Field(
        default=28800.0, ge=60, le=90 * 86400,
        description="Seconds a console sign-in lasts at most when the provider gives no "
        "refresh token (back-channel logout then ends it earlier).",
    )
    offline_max_age: float = Field(
        default=30 * 86400.0, ge=0, le=3650 * 86400,
        description="Seconds an SSO user's API and CLI tokens keep working after the user's "
        "last successful sign-in or re-check at the provider (then 401 sso_required until "
        "they sign in again); 0: no such bound (a sign-in then clears it).",
    )
    api_token_max_days: int = Field(
        default=365, ge=1, le=3650,
        description="Days an SSO user's API token may last at most (one asked with no expiry "
        "or a longer one gets this).",
    )
    auto_redirect: bool = Field(
        default=False,
        description="/login goes straight to the provider; /login?local=1 still shows the "
        "password form (the local admin's way in when the provider is down).",
    )
    logout: Literal["idp", "local"] = Field(
        default="idp",
        description="Console logout: idp also signs out at the provider (its "
        "end_session_endpoint, when it has one); local only ends the gpuslice sign-in.",
    )


class LdapSettings(IdentityMapping):
    """An LDAP directory (OpenLDAP, Active Directory) users sign in with; off while ``url`` is
    empty."""

    url: str = Field(
        default="", max_length=512,
        description="ldaps://host[:port], or ldap://host[:port] with start_tls (plain ldap only "
        "to a loopback address); empty: no directory.",
    )
    start_tls: bool = Field(default=False, description="Upgrade ldap:// with StartTLS.")
    ca_file: Path | None = Field(
        default=None, description="CA certificates the directory's certificate is checked "
        "with; default: the system's.",
    )
    bind_dn: str = Field(
        default="", max_length=1024,
        description="The service account that finds users and their groups; empty: anonymous "
        "searches.",
    )
    bind_password: SecretStr | None = Field(
        default=None,
        description="The service account's password (GPUSLICE_AUTH__LDAP__BIND_PASSWORD); "
        "never logged nor shown.",
    )
    user_base: str = Field(default="", max_length=1024,
                           description="Where users are searched.")
    user_filter: str = Field(
        default="(&(objectClass=inetOrgPerson)(uid={username}))", max_length=1024,
        description="Finds the user signing in ({username} is escaped); AD: "
        "(&(objectClass=user)(sAMAccountName={username})).",
    )
    subject_attribute: str = Field(
        default="entryUUID", min_length=1, max_length=64,
        description="The directory's stable id of a user (objectGUID on AD): what a gpuslice "
        "user is linked by, never the DN.",
    )
    email_attribute: str = Field(default="mail", max_length=64,
                                 description="The user's e-mail address attribute.")
    name_attribute: str = Field(default="cn", max_length=64,
                                description="The user's display name attribute.")
    group_base: str = Field(default="", max_length=1024,
                            description="Where groups are searched; empty: memberOf is read.")
    group_filter: str = Field(
        default="(|(member={user_dn})(uniqueMember={user_dn})(memberUid={username}))",
        max_length=1024, description="Finds the user's groups under group_base.",
    )
    group_value: Literal["cn", "dn"] = Field(
        default="cn", description="What a group is named by in the group settings: cn or dn.",
    )
    timeout: float = Field(default=10.0, ge=0.5, le=120,
                           description="Seconds a directory operation may take.")
    recheck_interval: float = Field(
        default=300.0, ge=10, le=86400,
        description="Seconds between re-checks of signed-in directory users (gone or locked: "
        "every token ends; groups synced).",
    )
    lockout_threshold: int | None = Field(
        default=None, ge=1, le=10_000,
        description="Failed binds after which the directory locks an account (its password "
        "policy); when given, auth.login_failures_per_user must stay below it, so a flood "
        "through gpuslice cannot lock people out of the directory.",
    )

    @model_validator(mode="after")
    def _password_not_in_clear(self) -> LdapSettings:
        """ldaps://, or ldap:// upgraded with StartTLS; plain ldap:// only to a loopback
        address (a password crosses it)."""
        if not self.url:
            return self
        parts = urlsplit(self.url)
        if parts.scheme not in ("ldap", "ldaps") or not parts.hostname:
            raise ValueError(f"auth.ldap.url must be ldaps://host[:port] or "
                             f"ldap://host[:port], got {self.url!r}")
        if parts.scheme == "ldap" and not self.start_tls and not _loopback(parts.hostname):
            raise ValueError(f"auth.ldap.url {self.url!r} is plain ldap:// to another host: "
                             "passwords would cross the network in clear; use ldaps:// or set "
                             "auth.ldap.start_tls = true")
        return self


class AuthSettings(Section):
    login_token_ttl: float = Field(
        default=12 * 3600, ge=60, le=90 * 86400, description="Seconds a login token lasts."
    )
    admin_username: str = Field(
        default="admin", pattern=r"^[a-z_][a-z0-9_.-]{0,63}$",
        description="The admin created on first start.",
    )
    cli_token_idle: int = Field(
        default=30 * 86400, ge=60, le=3650 * 86400,
        description="Seconds a CLI login (`gpuslice login`) lasts unused; each use moves its "
        "end on. Set when the token is made.",
    )
    cli_token_max: int = Field(
        default=90 * 86400, ge=60, le=3650 * 86400,
        description="Seconds a CLI login lasts at most, however often it is used; then "
        "`gpuslice login` again. Set when the token is made.",
    )
    login_window: float = Field(
        default=300, ge=1, le=86400,
        description="Login throttling: the window (seconds) failed logins are counted in; a "
        "throttled caller may try again when it ends (429 with Retry-After meanwhile).",
    )
    login_failures_per_user: int = Field(
        default=10, ge=1, le=10_000,
        description="Failed logins for one username within the window before it is throttled.",
    )
    login_failures_per_address: int = Field(
        default=30, ge=1, le=100_000,
        description="Failed logins from one client address within the window before it is "
        "throttled.",
    )
    password_checks: int = Field(
        default=1, ge=1, le=64,
        description="Password checks (argon2, deliberately slow) run at once; more logins wait "
        "their turn.",
    )
    password_check_nice: int = Field(
        default=19, ge=0, le=19,
        description="CPU niceness of password checks: 19 lets every other request go first, so "
        "a login flood cannot slow the API; 0 checks at full speed.",
    )
    allowed_origins: list[str] = Field(
        default_factory=list, max_length=100,
        description="Web origins (https://host[:port]) besides the manager's own from which a "
        "browser holding the login cookie may write (POST, PUT, DELETE, WebSocket).",
    )
    password_login: Literal["all", "local", "admins"] = Field(
        default="all",
        description="Who may sign in with a password: all (local and directory users), local "
        "(local accounts only), admins (local admins only: everyone else signs in with single "
        "sign-on; the break-glass admin keeps /login?local=1).",
    )
    public_url: str = Field(
        default="", max_length=512,
        description="The manager's URL as browsers reach it (https://gpu.lab.org): sign-in "
        "redirects and links are built from it, never from a request's Host. Default: "
        "nodes.advertise_url, else the address the manager serves on.",
    )
    device_login: bool = Field(
        default=True,
        description="gpuslice login --sso --device: a code the user approves on the /device "
        "page; false turns device sign-in off.",
    )
    oidc: OidcSettings = Field(default_factory=OidcSettings)
    ldap: LdapSettings = Field(default_factory=LdapSettings)

    @model_validator(mode="after")
    def _someone_may_sign_in(self) -> AuthSettings:
        for name, section, on in (("oidc", self.oidc, bool(self.oidc.issuer)),
                                  ("ldap", self.ldap, bool(self.ldap.url))):
            if on and not section.allow_all and not section.allowed_groups:
                raise ValueError(
                    f"auth.{name} is on but nobody may sign in with it: set "
                    f"auth.{name}.allowed_groups (e.g. [\"gpu-users\"]) or "
                    f"auth.{name}.allow_all = true")
        threshold = self.ldap.lockout_threshold if self.ldap.url else None
        if threshold is not None and self.login_failures_per_user >= threshold:
            raise ValueError(
                f"auth.login_failures_per_user ({self.login_failures_per_user}) must stay below "
                f"auth.ldap.lockout_threshold ({threshold}): otherwise failed sign-ins through "
                "gpuslice lock directory accounts; lower login_failures_per_user")
        if self.oidc.issuer:
            self._oidc_complete()
        if self.public_url and not re.fullmatch(r"https?://[^/?#\s]+(/[^?#\s]*)?",
                                                self.public_url):
            raise ValueError(f"auth.public_url must be an http(s) URL such as "
                             f"https://gpu.lab.org, got {self.public_url!r}")
        return self

    def _oidc_complete(self) -> None:
        oidc = self.oidc
        if not oidc.client_id:
            raise ValueError("auth.oidc.issuer is set but auth.oidc.client_id is not: set the "
                             "client id registered for gpuslice at the provider")
        if not (self.public_url or oidc.redirect_url):
            raise ValueError("auth.oidc needs auth.public_url (the URL browsers reach the "
                             "manager at, e.g. https://gpu.lab.org) or auth.oidc.redirect_url")
        host = urlsplit(oidc.issuer).hostname or ""
        loopback = host in ("localhost", "127.0.0.1", "::1")
        if not oidc.issuer.startswith("https://") and not (
                loopback and oidc.issuer.startswith("http://")):
            raise ValueError(f"auth.oidc.issuer must be an https:// URL (http only on a "
                             f"loopback address), got {oidc.issuer!r}")
        if "none" in (a.lower() for a in oidc.id_token_algorithms):
            raise ValueError("auth.oidc.id_token_algorithms may not list none")


class SessionSettings(Section):
    default_max_priority: int = Field(
        default=0, ge=-100, le=100, description="Highest priority for users without a policy."
    )
    allowed_images: list[str] = Field(
        default_factory=list,
        description="Images always accepted, besides those nodes report and admins add.",
    )
    log_timeout: float = Field(
        default=10.0, ge=0.1, le=300, description="Seconds to wait for an agent's log upload."
    )
    log_tail: int = Field(default=1000, ge=1, le=100_000, description="Default log lines.")
    commit_timeout: float = Field(
        default=600.0, ge=1, le=3600,
        description="Seconds a commit request waits for the agent to snapshot the container.",
    )
    max_count: int = Field(
        default=10, ge=1, le=CREATE_COUNT_MAX,
        description="Most sessions one create request may ask for.",
    )
    max_definition: int = Field(
        default=64 * 1024, ge=1024, le=1024**2,
        description="Most bytes of a session's command and environment together (UTF-8).",
    )
    default_time_limit: int | None = Field(
        default=None, ge=1, le=MAX_TIME_LIMIT,
        description="Seconds a session may run once RUNNING when it asks for no time limit "
        "(none: no limit); a project's own default replaces it.",
    )
    max_time_limit: int | None = Field(
        default=None, ge=1, le=MAX_TIME_LIMIT,
        description="The longest time limit a session may ask for, in seconds (none: any; "
        "with a maximum, a session that asks for none gets the default, else this); a "
        "project's own maximum holds too, the smaller wins.",
    )
    time_limit_warning: int = Field(
        default=300, ge=0, le=86400,
        description="Seconds before its time limit that a session gets the warning signal.",
    )
    time_limit_signal: str = Field(
        default="SIGUSR1", pattern=r"^SIG[A-Z0-9]+$",
        description="The warning signal sent to a session's processes before its time limit.",
    )
    time_limit_interval: float = Field(
        default=5.0, ge=0.1, le=3600,
        description="Seconds between sweeps for sessions due a warning or at their limit.",
    )
    max_pending: int = Field(
        default=100, ge=0, le=100_000,
        description="PENDING sessions one user may have waiting at once, unless their policy "
        "says otherwise.",
    )
    retention_days: int = Field(
        default=30, ge=0, le=36500,
        description="Days after a session ended that its kept logs and environment are purged "
        "(its status history stays); expired tokens and used join tokens go too. 0: never.",
    )


class AppsSettings(Section):
    admin_access: bool = Field(
        default=False,
        description="Admins may open other users' apps and terminals. Off by default: an app "
        "runs its owner's code in the browser that opens it.",
    )
    dial_back_timeout: float = Field(
        default=10.0, ge=0.5, le=300,
        description="Seconds to wait for a node's agent to open a stream (504 after).",
    )
    link_idle: float = Field(
        default=30.0, ge=1, le=3600,
        description="Seconds an idle link to an agent is kept for the next app request.",
    )
    max_links: int = Field(
        default=32, ge=1, le=1000,
        description="Most streams (requests, WebSockets, terminals) one session has at once.",
    )
    ping_interval: float = Field(
        default=20.0, ge=0.1, le=600,
        description="Seconds between WebSocket pings (browsers, CLI and agent links): idle "
        "terminals and notebooks stay open through proxies that drop quiet connections.",
    )
    ping_timeout: float = Field(
        default=20.0, ge=0.1, le=600,
        description="Seconds a WebSocket peer has to answer a ping before it is dropped.",
    )
    max_message: int = Field(
        default=64 * 1024 * 1024, ge=1024 * 1024, le=4 * 1024**3,
        description="Largest WebSocket message relayed, bytes (a notebook's output can be big).",
    )
    terminal_keep: float = Field(
        default=60.0, ge=0, le=86400,
        description="Seconds a terminal's shell outlives its dropped connection, so that a "
        "reconnect finds it (its recent output replayed).",
    )
    auth_cache: float = Field(
        default=5.0, ge=0, le=300,
        description="Seconds the proxy reuses who may reach an app for a login (0: look up "
        "every request); a logout or a stopped session takes effect within this time.",
    )
    domain: str = Field(
        default="apps.localhost", min_length=1, max_length=200,
        pattern=r"^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$",
        description="Each app of each session is served at its own origin, "
        "<app>--<session id>.<domain>. The default needs no DNS on one machine (browsers and "
        "curl resolve *.localhost to this machine); a cluster names a wildcard domain whose "
        "names all lead to the manager (and a wildcard certificate for HTTPS).",
    )
    origin_port: int | None = Field(
        default=None, ge=1, le=65535,
        description="The port in apps' URLs; default: the port the manager was reached at "
        "(a load balancer in front may use another).",
    )
    console_url: str | None = Field(
        default=None, pattern=r"^https?://[^/\s]+/?$",
        description="The manager's URL as browsers reach it, where an app's origin sends a "
        "browser that is not logged in there yet; default: http(s)://localhost on the apps' "
        "port.",
    )
    enter_timeout: float = Field(
        default=60.0, ge=5, le=600,
        description="Seconds the single-use code that hands a login to an app's origin is "
        "valid.",
    )
    port_range: str = Field(
        default="",
        description="Where neither *.localhost nor a wildcard domain works: each app opened "
        "gets a port of this range (e.g. 20000-20999), its origin http(s)://<port_host>:<port>; "
        "empty (the default): apps are at <app>--<session>.<domain>.",
    )
    port_host: str | None = Field(
        default=None, pattern=r"^[A-Za-z0-9.-]{1,253}$|^\[[0-9a-fA-F:.]+\]$",
        description="The manager's host name as browsers reach it, in apps' port URLs; "
        "default: apps.console_url's host, else localhost.",
    )

    @field_validator("port_range")
    @classmethod
    def _port_range(cls, value: str) -> str:
        low, _, high = value.partition("-")
        if value and not (low.isdigit() and high.isdigit()
                          and 1024 <= int(low) <= int(high) <= 65535):
            raise ValueError("apps.port_range is FIRST-LAST, e.g. 20000-20999, with "
                             f"1024 <= FIRST <= LAST <= 65535 (got {value!r})")
        return value

    def ports(self) -> range | None:
        """The ports of ``port_range``; None when apps have name-based origins."""
        if not self.port_range:
            return None
        low, high = (int(part) for part in self.port_range.split("-"))
        return range(low, high + 1)


class RegistrySettings(Section):
    url: str | None = Field(
        default=None, pattern=r"^https?://[^/\s]+/?$",
        description="A Docker registry (HTTP API v2) whose images the catalog lists on rescan, "
        "e.g. https://registry.example.com:5000; nodes pull them on demand.",
    )
    username: str | None = Field(default=None, description="Basic auth user for the registry.")
    password: SecretStr | None = Field(default=None, description="Basic auth password.")
    timeout: float = Field(default=10.0, ge=0.5, le=120, description="Seconds per request.")
    max_tags: int = Field(
        default=2000, ge=1, le=100_000, description="Most image tags one rescan records."
    )


class MonitoringSettings(Section):
    scrape_token: SecretStr | None = Field(
        default=None,
        description="Bearer token Prometheus sends to scrape /metrics (admins' API tokens work "
        "too).",
    )
    public_metrics: bool = Field(
        default=False, description="Serve /metrics without authentication (a trusted network)."
    )
    minute_retention_days: int = Field(
        default=35, ge=30, le=3650,
        description="Days usage history keeps 1-minute points before rolling them up to hours.",
    )
    hour_retention_days: int = Field(
        default=400, ge=30, le=36500,
        description="Days usage history keeps hourly points (accounting is kept longer).",
    )
    maintenance_interval: float = Field(
        default=60.0, ge=0.05, le=3600,
        description="Seconds between history maintenance passes (close, pack, roll up, drop).",
    )
    reclaim_interval: float = Field(
        default=15.0, ge=0.05, le=3600,
        description="Seconds between idle/lifetime reclaim passes.",
    )

    @model_validator(mode="after")
    def _hours_outlive_minutes(self) -> MonitoringSettings:
        if self.hour_retention_days < self.minute_retention_days:
            raise ValueError("monitoring.hour_retention_days must be at least "
                             "minute_retention_days")
        return self


class StorageSettings(Section):
    root: Path | None = Field(
        default=None,
        description="The storage root holding every folder; in a cluster a shared filesystem "
        "mounted at the same path on the manager and every node (the agents' storage_root). "
        "Default: <data_dir>/storage.",
    )
    owner: str = Field(
        default="1000:1000", pattern=r"^[0-9]+:[0-9]+$",
        description="uid:gid that owns folders and the files the manager writes: the agents' "
        "session_user, so sessions and the API can both change them.",
    )
    usage_interval: float = Field(
        default=60.0, ge=1, le=86400, description="Seconds between measurements of usage."
    )
    max_listing: int = Field(
        default=10_000, ge=10, le=1_000_000, description="Most entries one listing returns."
    )
    max_archive_entries: int = Field(
        default=100_000, ge=1, le=10_000_000,
        description="Most files and directories one directory upload (tar) may hold.",
    )

    @property
    def uid_gid(self) -> tuple[int, int]:
        uid, gid = self.owner.split(":")
        return int(uid), int(gid)


class ModelStoreSettings(Section):
    backend: Literal["local", "s3"] = Field(
        default="local",
        description="local: a directory on the manager (embedded default); s3: any S3 API "
        "(MinIO in production).",
    )
    local_dir: Path | None = Field(
        default=None, description="The local store's directory. Default: <data_dir>/models."
    )
    s3_endpoint_url: str | None = Field(
        default=None, pattern=r"^https?://[^\s]+$",
        description="The S3 API's URL, e.g. https://minio.example.org:9000 (unset: AWS). "
        "Sessions upload to it directly with short-lived URLs: it must be reachable from nodes.",
    )
    s3_bucket: str = Field(
        default="gpuslice-models", min_length=3, max_length=63, description="The bucket."
    )
    s3_region: str = Field(default="us-east-1", max_length=64, description="The S3 region.")
    s3_access_key: SecretStr | None = Field(default=None, description="S3 access key id.")
    s3_secret_key: SecretStr | None = Field(default=None, description="S3 secret key.")
    s3_prefix: str = Field(
        default="", max_length=200, pattern=r"^([A-Za-z0-9._-]+/)*$",
        description="Key prefix inside the bucket (e.g. `gpuslice/`); each user's models are "
        "under <prefix>users/<user id>/.",
    )
    url_ttl: int = Field(
        default=300, ge=1, le=3600,
        description="Seconds a presigned URL for a session's upload lasts.",
    )
    upload_timeout: float = Field(
        default=86400.0, ge=60, le=30 * 86400,
        description="Seconds after which an upload never completed is deleted.",
    )
    user_quota: int = Field(
        default=100 * 1024**3, ge=1024**2, le=1024**5,
        description="Bytes of models (every version, and uploads in progress) one user may "
        "keep in the store; an upload announcing more is refused before any byte is sent.",
    )


class LimitsSettings(Section):
    """What one request may cost; see ``api/edge.py``."""

    max_body: int = Field(
        default=1024**2, ge=1024, le=1024**3,
        description="Largest request body in bytes: 413 before it is read (uploads stream).",
    )
    max_node_body: int = Field(
        default=32 * 1024**2, ge=1024, le=1024**3,
        description="Largest body a node agent may send with its credential (heartbeats, "
        "reports with logs, command output).",
    )
    max_param: int = Field(
        default=2048, ge=64, le=65536,
        description="Longest query, path or header value, in characters.",
    )
    max_json_depth: int = Field(
        default=32, ge=4, le=256, description="Deepest nesting of a JSON body."
    )
    max_answer: int = Field(
        default=4 * 1024**2, ge=64 * 1024, le=1024**3,
        description="A listing page holds fewer items than asked once its answer would pass "
        "this many bytes (continue from offset + the items returned).",
    )


class ServerSettings(Section):
    """How the manager listens (`manager serve`)."""

    tls_cert: Path | None = Field(
        default=None, description="PEM certificate (chain) to serve HTTPS with; with tls_key."
    )
    tls_key: Path | None = Field(default=None, description="PEM private key of tls_cert.")
    trusted_proxies: list[str] = Field(
        default_factory=list,
        description="Addresses of reverse proxies whose X-Forwarded-For / -Proto are believed "
        "(the client address login throttling counts by); none by default.",
    )

    @model_validator(mode="after")
    def _both_or_neither(self) -> ServerSettings:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("server: give both tls_cert and tls_key, or neither")
        return self


class AuditSettings(Section):
    retention_days: int = Field(
        default=400, ge=0, le=36500,
        description="Days the audit log keeps a row in the database; older rows are appended "
        "to a JSON lines file in archive_dir, then purged. 0: keep every row.",
    )
    archive_dir: Path | None = Field(
        default=None, description="Where purged audit rows are archived (audit-YEAR.jsonl, "
        "mode 0600). Default: <data_dir>/audit-archive.",
    )
class NotifySettings(Section):
    """Notifications (issue 43): the SMTP server e-mail channels use, which private targets
    webhooks may reach, how deliveries are retried. See docs/operations.md."""

    smtp_host: str | None = Field(
        default=None, description="SMTP server for e-mail channels; none: no e-mail channel "
        "can be added.")
    smtp_port: int = Field(default=587, ge=1, le=65535, description="SMTP server port.")
    smtp_starttls: bool = Field(
        default=True, description="Upgrade the SMTP connection with STARTTLS (the server's "
        "certificate is checked); only a server on a loopback address may go without.")
    smtp_username: str | None = Field(default=None, description="SMTP login, if it needs one.")
    smtp_password: SecretStr | None = Field(
        default=None, description="SMTP password (GPUSLICE_NOTIFY__SMTP_PASSWORD); never "
        "logged nor shown.")
    smtp_from: str = Field(
        default="gpuslice <gpuslice@localhost>", max_length=256,
        description="The From of notification mails.")
    smtp_timeout: float = Field(default=10.0, ge=1, le=120,
                                description="Seconds an SMTP exchange may take.")
    allowed_targets: list[str] = Field(
        default_factory=list,
        description="Host names or CIDRs (`mattermost.lan`, `10.2.0.0/16`, `127.0.0.1/32`) "
        "webhooks may reach although private, loopback or link-local; none by default.")
    retry_schedule: list[float] = Field(
        default_factory=lambda: [10.0, 30.0, 120.0, 600.0, 1800.0, 3600.0, 10800.0, 21600.0],
        min_length=1, max_length=20,
        description="Seconds before each retry of a failed delivery (each ±20 %); after the "
        "last one it is given up (dead).")
    interval: float = Field(default=1.0, ge=0.05, le=60,
                            description="Seconds between delivery passes.")
    timeout: float = Field(default=10.0, ge=0.5, le=60,
                           description="Seconds a webhook request may take.")
    started_min_wait: float = Field(
        default=60.0, ge=0, le=86400,
        description="session.started is sent only for a session that waited this long.")
    idle_warning_before: float = Field(
        default=900.0, ge=0, le=86400,
        description="session.idle_warning is sent this many seconds before an idle (or "
        "over-age) session is reclaimed; 0: none.")

    @field_validator("retry_schedule")
    @classmethod
    def _positive(cls, value: list[float]) -> list[float]:
        if any(v <= 0 or v > 7 * 86400 for v in value):
            raise ValueError("retry_schedule: each delay must be above 0 and at most 604800 s")
        return value

    @field_validator("allowed_targets")
    @classmethod
    def _targets(cls, value: list[str]) -> list[str]:
        for pattern in value:
            try:
                ipaddress.ip_network(pattern, strict=False)
            except ValueError:
                if not _HOST.fullmatch(pattern):
                    raise ValueError(f"allowed_targets: {pattern!r} is neither a host name "
                                     "nor a CIDR (e.g. 10.2.0.0/16)") from None
        return value


class ManagerSettings(FileSettings):
    """Everything the manager needs; see the field descriptions."""

    model_config = SettingsConfigDict(env_prefix="GPUSLICE_")
    env_others: ClassVar[tuple[str, ...]] = ("GPUSLICE_AGENT_",)  # the agent's tree

    data_dir: Path = Field(
        default=Path("~/.local/share/gpuslice"),
        description="Where the SQLite database and the admin credentials file live.",
    )
    database: DatabaseSettings = Field(default_factory=DatabaseSettings)
    scheduler: SchedulerSettings = Field(default_factory=SchedulerSettings)
    nodes: NodeSettings = Field(default_factory=NodeSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    sessions: SessionSettings = Field(default_factory=SessionSettings)
    registry: RegistrySettings = Field(default_factory=RegistrySettings)
    monitoring: MonitoringSettings = Field(default_factory=MonitoringSettings)
    apps: AppsSettings = Field(default_factory=AppsSettings)
    storage: StorageSettings = Field(default_factory=StorageSettings)
    model_store: ModelStoreSettings = Field(default_factory=ModelStoreSettings)
    log: LogSettings = Field(default_factory=LogSettings)
    limits: LimitsSettings = Field(default_factory=LimitsSettings)
    server: ServerSettings = Field(default_factory=ServerSettings)
    audit: AuditSettings = Field(default_factory=AuditSettings)
    notify: NotifySettings = Field(default_factory=NotifySettings)

    @field_validator("data_dir")
    @classmethod
    def _expand(cls, value: Path) -> Path:
        return value.expanduser()

    @property
    def storage_root(self) -> Path:
        return (self.storage.root or self.data_dir / "storage").expanduser()

    @property
    def model_dir(self) -> Path:
        return (self.model_store.local_dir or self.data_dir / "models").expanduser()

    @property
    def database_url(self) -> str:
        return self.database.url or f"sqlite+aiosqlite:///{self.data_dir / 'gpuslice.db'}"


def load_settings(config_file: Path | None = None, **overrides: Any) -> ManagerSettings:
    """Build the settings once: ``overrides`` > ``GPUSLICE_*`` env > ``config_file`` (TOML)."""
    return ManagerSettings.load(config_file, **overrides)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
