"""What crosses the proxy in headers, each way.

Upstream (to the app): never our cookies (the manager's login, the app origin's own; other
cookies pass, they are the app's) and never the person's ``Authorization``; an app that takes
a token gets its own instead (``Authorization: token …``). The app is told it is reached as
``localhost:<port>``: ``Host``, and a same-origin ``Origin``/``Referer`` (the proxy checked
them), say so, which is what apps with DNS-rebinding or cross-origin checks (Jupyter, MLflow
``--allowed-hosts``) accept with no setting of ours; ``X-Forwarded-*`` tell the real host,
scheme and client. The path is the app's own: it is served at its origin's root.

Downstream (to the browser): cookies an app sets get no ``Domain`` (host-only: never sent to
another app or the manager), and one named like ours, or with no name, is dropped, as are
``Date`` and ``Server`` (the manager's server writes its own); a redirect to the app's own
``localhost`` origin becomes a path on its origin.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from starlette.requests import HTTPConnection

from gpuslice.common.schemas.streams import Header, without_hop_by_hop
from gpuslice.manager.api import browser
from gpuslice.manager.errors import DomainError
from gpuslice.manager.services.apps import origins
from gpuslice.manager.services.apps.access import AppRoute

# Replaced by the proxy's own, whatever the client sent.
_REPLACED = frozenset({
    "host", "authorization", "proxy-authorization", "cookie", "origin", "referer", "forwarded",
    "x-forwarded-for", "x-forwarded-host", "x-forwarded-proto", "x-forwarded-prefix",
    "x-real-ip", "content-length",
})
# Dropped from apps' answers: the manager's server writes these for every answer (the app's
# would be doubles).
_DROPPED = frozenset({"date", "server"})
_OURS = frozenset({browser.COOKIE, origins.COOKIE})
_APP_PORT_COOKIE = re.compile(rf"^{origins.COOKIE}_[0-9]+$")  # app ports' (apps.port_range)


def ours(name: str) -> bool:
    """Whether a cookie of this name is one of ours (never to an app, nor from one)."""
    return name in _OURS or _APP_PORT_COOKIE.match(name) is not None


def upstream(conn: HTTPConnection, route: AppRoute, *, body: bool) -> list[Header]:
    """The headers the app gets for this request (``body``: with its Content-Length)."""
    assert route.launch is not None, "the terminal is not an HTTP app"
    local = f"localhost:{route.launch.port}"
    raw = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in conn.headers.raw]
    out = [(k, v) for k, v in without_hop_by_hop(raw) if k.lower() not in _REPLACED]
    out.append(("Host", local))
    if body and "content-length" in conn.headers:
        out.append(("Content-Length", conn.headers["content-length"]))
    cookies = without_our_cookies(conn.headers.getlist("cookie"))
    if cookies:
        out.append(("Cookie", cookies))
    own = browser.normalize(browser.own_origin(conn))
    origin = conn.headers.get("origin")
    if origin is not None:  # a foreign one stays foreign: the app's own checks see it
        out.append(("Origin", f"http://{local}" if browser.normalize(origin) == own else origin))
    referer = conn.headers.get("referer")
    if referer is not None:
        parts = urlsplit(referer)
        if browser.normalize(f"{parts.scheme}://{parts.netloc}") == own:
            query = f"?{parts.query}" if parts.query else ""
            referer = f"http://{local}{parts.path}{query}"
        out.append(("Referer", referer))
    if route.token:
        out.append(("Authorization", f"token {route.token}"))
    client = conn.client.host if conn.client else ""
    out += [("X-Forwarded-For", client), ("X-Forwarded-Proto", browser.scheme(conn)),
            ("X-Forwarded-Host", conn.headers.get("host", ""))]
    return out


def target(conn: HTTPConnection) -> str:
    """The path and query the app gets: as asked (the app is at its origin's root).
    ``DomainError`` ``bad_target`` (400) for a request-target that is not a path
    (``@host/…``, ``http://host/…``, ``*``): some HTTP parsers (h11) pass those on, and the
    agent must only ever reach the session's own address."""
    path = conn.scope.get("raw_path", conn.url.path.encode()).decode("latin-1")
    if not path.startswith("/"):
        raise DomainError(f"the request-target {path[:100]!r} is not a path: an app is asked "
                          "for a path starting with /", code="bad_target")
    query = conn.url.query
    return f"{path}?{query}" if query else path


def downstream(headers: list[Header], route: AppRoute) -> list[Header]:
    """The app's answer headers as the browser gets them."""
    assert route.launch is not None
    out = []
    for key, value in headers:
        lower = key.lower()
        if lower in _DROPPED:
            continue
        if lower == "set-cookie":
            rewritten = confine_cookie(value)
            if rewritten is not None:
                out.append((key, rewritten))
        elif lower == "location":
            out.append((key, own_location(value, route.launch.port)))
        else:
            out.append((key, value))
    return out


def own_location(value: str, port: int) -> str:
    """A redirect to the app's own ``http://localhost:<port>`` as a path on its origin; any
    other ``Location`` as it is. The path keeps one leading slash: ``//host/…`` (or ``/\\``)
    would be another site to the browser, where the app meant a path of its own."""
    local = f"http://localhost:{port}"
    rest = value[len(local):]
    if not value.startswith(local) or rest[:1] not in ("", "/", "?", "#"):
        return value  # another host, or another port (localhost:80001 is not :8000)
    # one slash, whatever follows: browsers read ``\\`` as ``/`` and drop tabs
    return "/" + rest.lstrip("/\\\t")


def without_our_cookies(values: list[str]) -> str:
    """The ``Cookie`` header(s) less our login and app cookies (``""`` when nothing is
    left)."""
    kept = [
        part.strip() for value in values for part in value.split(";")
        if part.strip() and not ours(part.split("=", 1)[0].strip())
    ]
    return "; ".join(kept)


def confine_cookie(value: str) -> str | None:
    """A ``Set-Cookie`` value with no ``Domain`` (host-only: this app's origin alone);
    ``None`` for a cookie named like ours, or with no name: browsers send a nameless cookie
    as its value alone, so ``=gpuslice_login=…`` would reach the manager as its login."""
    first, *attributes = value.split(";")
    name, equals, _ = first.partition("=")
    if not equals or not name.strip() or ours(name.strip()):
        return None
    kept = [a.strip() for a in attributes
            if a.strip() and a.partition("=")[0].strip().lower() != "domain"]
    return "; ".join([first.strip(), *kept])
