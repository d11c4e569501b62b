"""The few pages the proxy serves itself: the login form, and errors a person can read.

Plain HTML from the manager, no script, nothing fetched from elsewhere (a strict
Content-Security-Policy says so). Programs get the same errors as JSON (``{code, message}``).
"""

from __future__ import annotations

import html
from pathlib import Path
from urllib.parse import quote

from starlette.requests import HTTPConnection
from starlette.responses import HTMLResponse, JSONResponse, Response

from gpuslice.common.schemas.errors import ErrorBody
from gpuslice.common.schemas.streams import AgentReply, Failed

STATIC = Path(__file__).with_name("static")  # /assets: the terminal's script, style, xterm.js
CSP = ("default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
       "frame-ancestors 'none'; base-uri 'none'")
_URL_SAFE = "/?&=%:@!$'()*+,;~-._"  # what a local path keeps as it is
_STYLE = ("body{font-family:system-ui,sans-serif;max-width:42rem;margin:4rem auto;padding:0 1rem}"
          "label{display:block;margin:.8rem 0 .2rem}input{font-size:1rem;padding:.3rem}"
          "pre{background:#f4f4f4;padding:.8rem;overflow:auto}.error{color:#a00}")


def wants_html(conn: HTTPConnection) -> bool:
    """A browser navigating (it asks for HTML first), rather than a program."""
    return "text/html" in conn.headers.get("accept", "").split(",")[0]


def error(conn: HTTPConnection, status: int, code: str, message: str) -> Response:
    """An error as a page for browsers, as ``{code, message}`` for programs."""
    if not wants_html(conn):
        body = ErrorBody(code=code, message=message).model_dump()
        return JSONResponse(body, status_code=status)
    first, _, rest = message.partition("\n")
    detail = f"<pre>{html.escape(rest)}</pre>" if rest else ""
    return page("gpuslice", f"<h1>{status}</h1><p class=error>{html.escape(first)}</p>{detail}",
                status)


def failed(conn: HTTPConnection, reply: Failed | AgentReply) -> Response:
    """The agent could not serve a stream: its reason, with an app's last lines if it failed."""
    if not isinstance(reply, Failed):
        return error(conn, 502, "agent_error", "the agent answered out of step")
    message = reply.message
    if reply.app is not None and reply.app.logs:
        code = f" (exit code {reply.app.exit_code})" if reply.app.exit_code is not None else ""
        message = f"{reply.message}{code}\n{reply.app.logs.rstrip()}"
    return error(conn, reply.status, reply.code, message)


def login(next_path: str, problem: str = "", status: int = 200, *,
          sso: tuple[str, str] | None = None, notice: str = "") -> Response:
    """The login page: ``sso`` (the provider's name, its start URL) puts "Log in with ..."
    above the form, as a link (a form would be held by CSP form-action on its way out)."""
    warning = f"<p class=error>{html.escape(problem)}</p>" if problem else ""
    said = f"<p>{html.escape(notice)}</p>" if notice else ""
    link = ""
    if sso is not None:
        name, start = sso
        href = f"{start}?next={quote(next_path, safe='')}"
        link = (f"<p><a class=sso href=\"{html.escape(href, quote=True)}\">Log in with "
                f"{html.escape(name)}</a></p><p>Or use a password:</p>")
    form = (
        f"<h1>Log in to gpuslice</h1>{said}{warning}{link}"
        "<form method=post action=/login>"
        f"<input type=hidden name=next value=\"{html.escape(next_path, quote=True)}\">"
        "<label for=u>Username</label><input id=u name=username autocomplete=username "
        f"required{'' if sso else ' autofocus'}>"
        "<label for=p>Password</label><input id=p name=password type=password "
        "autocomplete=current-password required>"
        "<p><button type=submit>Log in</button></p></form>"
    )
    return page("Log in: gpuslice", form, status)


def onwards(next_path: str) -> Response:
    """After the login form: on to ``next_path`` by a new navigation (a refresh), not a
    redirect of the form's post. Chromium holds a form post's redirects to ``form-action``,
    and ``/s/<session>/<app>/`` goes on to the app's own origin, which 'self' does not allow."""
    target = html.escape(next_path, quote=True)
    response = page("Logged in: gpuslice",
                    f"<h1>Logged in</h1><p><a href=\"{target}\">Continue</a></p>")
    response.headers["Refresh"] = f"0; url={quote(next_path, safe=_URL_SAFE)}"
    return response


def page(title: str, body: str, status: int = 200) -> Response:
    text = (f"<!doctype html><html lang=en><meta charset=utf-8><title>{html.escape(title)}"
            f"</title><meta name=viewport content=\"width=device-width\"><style>{_STYLE}</style>"
            f"<body>{body}</body></html>")
    return HTMLResponse(text, status_code=status, headers={
        "Content-Security-Policy": CSP, "Cache-Control": "no-store",
        "X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin",
    })


def terminal(conn: HTTPConnection, session_id: str, session_name: str) -> Response:
    """The session's terminal in the browser: xterm.js on the terminal's WebSocket
    (``static/terminal.js``). Without its built assets (``tools/build-web.sh``), says so."""
    if not (STATIC / "vendor" / "xterm.js").is_file():
        return page("Terminal: gpuslice", (
            "<h1>Terminal</h1><p>The browser terminal is not built on this manager (run "
            "<code>tools/build-web.sh</code>). The same shell is reachable with "
            f"<code>gpuslice session shell {html.escape(session_id)}</code>.</p>"), 503)
    host = conn.headers.get("host", "")
    csp = (f"default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
           f"connect-src 'self' ws://{host} wss://{host}; font-src 'self'; img-src 'self' data:;"
           " frame-ancestors 'none'; base-uri 'none'")
    text = (
        "<!doctype html><html lang=en><meta charset=utf-8>"
        f"<title>{html.escape(session_name)}: terminal</title>"
        "<meta name=viewport content=\"width=device-width\">"
        "<link rel=stylesheet href=/assets/vendor/xterm.css>"
        "<link rel=stylesheet href=/assets/terminal.css>"
        f"<body data-session=\"{html.escape(session_id, quote=True)}\">"
        "<div id=terminal></div><div id=status>connecting...</div>"
        "<script src=/assets/vendor/xterm.js></script>"
        "<script src=/assets/vendor/addon-fit.js></script>"
        "<script src=/assets/terminal.js></script></body></html>"
    )
    return HTMLResponse(text, headers={
        "Content-Security-Policy": csp, "Cache-Control": "no-store",
        "X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin",
    })
