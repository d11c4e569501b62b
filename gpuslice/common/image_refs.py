"""Docker image references: the grammar Docker accepts, and the one spelling the catalog keeps.

The grammar is Docker's (``distribution/reference``): ``[domain[:port]/]path[:tag][@digest]``
where each path component is lower case ``[a-z0-9]`` runs joined by ``.``, ``_``, ``__`` or
dashes, a tag is ``[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`` and a digest ``algorithm:hex``. The
catalog keeps references as nodes report them (``RepoTags``: ``python:3.11``, not
``docker.io/library/python:3.11``), with ``:latest`` added when neither tag nor digest is given,
so ``busybox`` and ``busybox:latest`` name one image.
"""

from __future__ import annotations

import re

ALLOWED = (
    "lower-case letters and digits, joined by . _ or - and with / between parts, then "
    "optionally : and a tag of up to 128 letters, digits, _ . or - (e.g. python:3.11, "
    "team/torch:2.3 or registry.example.com:5000/team/torch:2.3)"
)
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*(?::[0-9]+)?)"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_REFERENCE = re.compile(
    rf"^(?P<name>(?:(?P<domain>{_DOMAIN})/)?{_COMPONENT}(?:/{_COMPONENT})*)"
    rf"(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?$",
    re.ASCII,
)
MAX_NAME = 255
# The catalog keeps a reference whole (tag included) in a 255-character column, and Docker
# refuses a name longer than 255: one limit for the whole reference, ``:latest`` included.
MAX_REFERENCE = 255
# Users' committed images live under u/<user>/…: a first component without a dot or colon is
# Docker Hub's, whose namespaces have at least 4 characters, and a registry's references carry
# its host, so no public or registry image can ever be named u/….
USER_PREFIX = "u/"
_WHOLE_COMPONENT = re.compile(rf"^{_COMPONENT}$", re.ASCII)


class InvalidReference(ValueError):
    """Not an image reference Docker would accept; the message says what is allowed."""


def normalize(reference: str) -> str:
    """The catalog's spelling of ``reference``: as given, with ``:latest`` when untagged.

    Raises :class:`InvalidReference` for anything Docker would refuse.
    """
    ref = reference.strip()
    match = _REFERENCE.match(ref)
    if match is None or len(match["name"]) > MAX_NAME or _bad_domain(match["name"]):
        raise InvalidReference(f"{reference!r} is not an image name: write {ALLOWED}")
    if match["tag"] is None and match["digest"] is None:
        ref = f"{ref}:latest"
    if len(ref) > MAX_REFERENCE:
        raise InvalidReference(
            f"{reference[:40]!r}... is {len(ref)} characters long (with its tag); an image "
            f"reference may have at most {MAX_REFERENCE}, ':latest' included when untagged")
    return ref


def repository_and_tag(reference: str) -> tuple[str, str]:
    """``repo:tag`` split in two (``latest`` when untagged); a digest stays on the repository."""
    ref = normalize(reference)
    match = _REFERENCE.match(ref)
    assert match is not None  # normalize() accepted it
    return match["name"], match["tag"] or "latest"


def tag_of(reference: str) -> str | None:
    """The tag written in ``reference`` (``None`` when untagged or malformed)."""
    match = _REFERENCE.match(reference.strip())
    return match["tag"] if match is not None else None


def user_namespace(username: str) -> str:
    """``u/<user>``: the namespace of a user's committed images, distinct for every username.

    A username that is a valid path component and does not start with a digit is itself
    (usernames never start with a digit); any other is ``0`` + its UTF-8 in hex, which always
    starts with a digit and so never equals another user's.
    """
    if _WHOLE_COMPONENT.match(username) and not username[0].isdigit():
        return f"{USER_PREFIX}{username}"
    return f"{USER_PREFIX}0{username.encode().hex()}"


def is_user_image(reference: str) -> bool:
    """Whether ``reference`` is in the users' namespace (``u/…``)."""
    return reference.startswith(USER_PREFIX)


def _bad_domain(name: str) -> bool:
    # Docker reads the first component as a registry only when it looks like a host; a first
    # component with upper case that is not a host is refused (`Foo/bar`).
    first, sep, _rest = name.partition("/")
    if not sep:
        return False
    is_host = "." in first or ":" in first or first == "localhost"
    return not is_host and first != first.lower()
