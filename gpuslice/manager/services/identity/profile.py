"""A provider's user as gpuslice reads it: the claims of an ID token (or a directory entry)
mapped by the settings to a user name, display name, e-mail address and groups."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuslice.common.schemas.users import USERNAME_PATTERN
from gpuslice.manager.errors import Forbidden
from gpuslice.manager.settings import OidcSettings

MAX_GROUPS = 1000
MAX_GROUPS_BYTES = 64 * 1024
_USERNAME = re.compile(USERNAME_PATTERN)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


class SignInRefused(Forbidden):
    """The provider signed the person in, but gpuslice does not let them in: ``message`` is the
    one line the login page and the CLI show."""

    code = "sign_in_refused"


@dataclass(frozen=True, slots=True)
class Profile:
    """Who the provider says signed in. ``groups`` is None when the provider did not say (the
    claim is absent, cut, or signalled as too large): nothing is synced from it then."""

    provider: str  # oidc | ldap
    subject: str
    username: str
    display_name: str | None = None
    email: str | None = None
    email_verified: bool = False
    groups: tuple[str, ...] | None = None


def claim(claims: Mapping[str, Any], path: str) -> Any:
    """The value at a dotted ``path`` (``realm_access.roles``), None when absent."""
    value: Any = claims
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def username_of(raw: Any, source: str, strip_domain: str = "") -> str:
    """A gpuslice user name from a claim or attribute, or a refusal naming where it came from.
    Never rewritten to make it fit."""
    if not isinstance(raw, str) or not raw:
        raise SignInRefused(f"the identity provider sent no {source}: gpuslice cannot name "
                            "your account (an administrator sets which claim names users)",
                            code="no_username")
    name = raw.strip().lower()
    if strip_domain:
        local, at, domain = name.rpartition("@")
        if not at or domain != strip_domain.lower():
            raise SignInRefused(f"{source} {_shown(raw)} is not an address at {strip_domain}",
                                code="bad_username")
        name = local
    if not _USERNAME.fullmatch(name):
        raise SignInRefused(
            f"{source} {_shown(raw)} is not a gpuslice user name (a-z, 0-9, . _ -, starting "
            "with a letter or _; 64 at most): an administrator can name users by another claim",
            code="bad_username")
    return name


def groups_of(raw: Any) -> tuple[str, ...] | None:
    """A groups claim as a tuple of strings: a list, or one string split on commas. None (not
    known) when absent or larger than gpuslice takes (1,000 groups, 64 KiB)."""
    if raw is None:
        return None
    if isinstance(raw, str):
        raw = [part.strip() for part in raw.split(",") if part.strip()]
    if not isinstance(raw, list):
        return None
    groups = tuple(g for g in raw if isinstance(g, str))
    if len(groups) > MAX_GROUPS or len(json.dumps(groups)) > MAX_GROUPS_BYTES:
        return None
    return groups


def text_of(raw: Any, size: int) -> str | None:
    """A display text: control characters shown as U+FFFD, cut to ``size``."""
    if not isinstance(raw, str) or not raw.strip():
        return None
    return _CONTROL.sub("\ufffd", raw.strip())[:size]


def oidc_profile(claims: Mapping[str, Any], settings: OidcSettings) -> Profile:
    """The profile of verified ID-token (and userinfo) ``claims``."""
    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject or len(subject) > 255:
        raise SignInRefused("the identity provider's answer has no valid subject (sub)",
                            code="bad_subject")
    email = text_of(claim(claims, settings.email_claim), 320) if settings.email_claim else None
    verified = claims.get("email_verified") is True or settings.trust_email
    overage = "groups" in (claims.get("_claim_names") or {}) or claims.get("hasgroups") is True
    return Profile(
        provider="oidc", subject=subject,
        username=username_of(claim(claims, settings.username_claim), settings.username_claim,
                             settings.username_strip_domain),
        display_name=text_of(claim(claims, settings.name_claim), 128)
        if settings.name_claim else None,
        email=email, email_verified=bool(email) and verified,
        groups=None if overage else groups_of(claim(claims, settings.groups_claim)),
    )


def _shown(raw: str) -> str:
    return repr(_CONTROL.sub("\ufffd", raw[:80]))
