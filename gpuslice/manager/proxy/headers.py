"""What crosses the proxy in headers, each way.

Upstream (to the app): never our login cookie (other cookies pass, they are the app's) and
never the person's ``Authorization``; an app that takes a token gets its own instead
(``Authorization: token …``). The app is told it is reached as ``localhost:<port>``: ``Host``,
and a same-origin ``Origin``/``Referer`` (the proxy checked them), say so, which is what apps
with DNS-rebinding or cross-origin checks (Jupyter, MLflow ``--allowed-hosts``) accept with no
setting of ours; ``X-Forwarded-*`` tell the real host, scheme, client and prefix.

Downstream (to the browser): cookies an app sets are confined to the app's path (``Path`` under
``/s/<session>/<app>/``, no ``Domain``), and one named like our login cookie is dropped, as are
headers that would act on the whole manager origin (HSTS, Clear-Site-Data,
Service-Worker-Allowed); a
redirect to the app's own ``localhost`` origin, or (for an app that does not know its prefix) to
a bare path, is turned into the app's path on the proxy.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.requests import HTTPConnection

from gpuslice.common.schemas.streams import Header, without_hop_by_hop
from gpuslice.manager.api import browser
from gpuslice.manager.services.apps.access import AppRoute

# Replaced by the proxy's own, whatever the client sent.
_REPLACED = frozenset({
    "host", "authorization", "proxy-authorization", "cookie", "origin", "referer", "forwarded",
    "x-forwarded-for", "x-forwarded-host", "x-forwarded-proto", "x-forwarded-prefix",
    "x-real-ip", "content-length",
})
# Dropped from apps' answers: the manager's server writes the first two for every answer (the
# app's would be doubles); the others would reach past the app's path to the whole manager
# origin (HTTPS-only for every page, wiping the login cookie, a service worker over "/").
_DROPPED = frozenset({"date", "server", "strict-transport-security", "clear-site-data",
                      "service-worker-allowed"})


def upstream(conn: HTTPConnection, route: AppRoute, *, body: bool) -> list[Header]:
    """The headers the app gets for this request (``body``: with its Content-Length)."""
    assert route.launch is not None, "the terminal is not an HTTP app"
    local = f"localhost:{route.launch.port}"
    raw = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in conn.headers.raw]
    out = [(k, v) for k, v in without_hop_by_hop(raw) if k.lower() not in _REPLACED]
    out.append(("Host", local))
    if body and "content-length" in conn.headers:
        out.append(("Content-Length", conn.headers["content-length"]))
    cookies = without_login_cookie(conn.headers.getlist("cookie"))
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
            referer = f"http://{local}{_app_path(parts.path, route)}{query}"
        out.append(("Referer", referer))
    if route.token:
        out.append(("Authorization", f"token {route.token}"))
    client = conn.client.host if conn.client else ""
    out += [("X-Forwarded-For", client), ("X-Forwarded-Proto", browser.scheme(conn)),
            ("X-Forwarded-Host", conn.headers.get("host", "")),
            ("X-Forwarded-Prefix", route.prefix)]
    return out


def target(conn: HTTPConnection, route: AppRoute) -> str:
    """The path and query the app gets: as asked, less the prefix if the app does not know
    it."""
    path = conn.scope.get("raw_path", conn.url.path.encode()).decode("latin-1")
    path = _app_path(path, route)
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
            rewritten = confine_cookie(value, route.prefix)
            if rewritten is not None:
                out.append((key, rewritten))
        elif lower == "location":
            out.append((key, _location(value, route, f"http://localhost:{route.launch.port}")))
        else:
            out.append((key, value))
    return out


def without_login_cookie(values: list[str]) -> str:
    """The ``Cookie`` header(s) less our login cookie (``""`` when nothing is left)."""
    kept = [
        part.strip() for value in values for part in value.split(";")
        if part.strip() and part.split("=", 1)[0].strip() != browser.COOKIE
    ]
    return "; ".join(kept)


def confine_cookie(value: str, prefix: str) -> str | None:
    """A ``Set-Cookie`` value with its path under ``prefix`` and no domain; ``None`` for a
    cookie named like our login cookie."""
    first, *attributes = value.split(";")
    if first.split("=", 1)[0].strip() == browser.COOKIE:
        return None
    path = "/"
    kept = []
    for attribute in attributes:
        name, _, given = attribute.partition("=")
        name = name.strip().lower()
        if name == "domain":
            continue
        if name == "path":
            path = given.strip() or "/"
            continue
        if attribute.strip():
            kept.append(attribute.strip())
    return "; ".join([first.strip(), f"Path={_under(prefix, path)}", *kept])


def _under(prefix: str, path: str) -> str:
    if path == prefix or path.startswith(prefix + "/"):
        return path
    return f"{prefix}/{path.lstrip('/')}"


def _app_path(path: str, route: AppRoute) -> str:
    if route.app.strips_prefix and (path == route.prefix or path.startswith(route.prefix + "/")):
        return path[len(route.prefix):] or "/"
    return path


def _location(value: str, route: AppRoute, local_origin: str) -> str:
    if value.startswith(local_origin):
        value = value[len(local_origin):] or "/"
    if value.startswith("/") and not value.startswith("//") and route.app.strips_prefix:
        return _under(route.prefix, value)
    return value
