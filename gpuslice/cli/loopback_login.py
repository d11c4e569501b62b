"""`gpuslice login URL --sso`: sign in through a browser (as `gcloud auth login` does). The CLI
listens on 127.0.0.1 (an IPv4 literal, RFC 8252 §7.3), the browser allows it on the manager's
/auth/cli page, and the manager sends the browser back to the listener with a code that only
this CLI's PKCE verifier turns into a token."""

from __future__ import annotations

import base64
import hashlib
import secrets
import socket
import threading
import webbrowser
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from gpuslice.cli.output import CliError, console
from gpuslice.client import Client, ClientConfig, save_config

WAIT_S = 300.0  # how long the listener waits for the browser


def loopback_login(url: str) -> None:
    state = secrets.token_urlsafe(24)
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
    got: dict[str, str] = {}
    done = threading.Event()
    server = HTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = int(server.server_address[1])
    server.RequestHandlerClass = _handler(state, port, got, done)
    start = f"{url.rstrip('/')}/auth/cli?" + urlencode({
        "port": port, "state": state, "code_challenge": challenge.rstrip(b"=").decode(),
        "host": socket.gethostname()})
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        console.print(f"opening {start}\n(if no browser opens, open that address yourself; "
                      "without a browser here: gpuslice login URL --sso --device)",
                      markup=False)
        webbrowser.open(start)
        if not done.wait(WAIT_S):
            raise CliError("no sign-in came back from the browser within 5 minutes; run "
                           "gpuslice login again", 1)
    finally:
        server.shutdown()
        server.server_close()
    with Client(url) as client:
        token = client.cli_token(got["code"], verifier)
        client.token = token.access_token
        me = client.me()
    path = save_config(ClientConfig(url=url.rstrip("/"), token=token.access_token))
    console.print(f"logged in to {url} as {me.username} ({me.role.value}) until "
                  f"{token.expires_at[:16].replace('T', ' ')} UTC; token in {path}",
                  markup=False)


def _handler(state: str, port: int, got: dict[str, str], done: threading.Event) -> Any:
    class Callback(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            query = {k: v[0] for k, v in parse_qs(urlsplit(self.path).query).items()}
            # DNS rebinding: only a request addressed to this very listener counts
            if self.headers.get("Host") != f"127.0.0.1:{port}" or \
                    urlsplit(self.path).path != "/callback" or done.is_set():
                self._answer(400, "not a gpuslice sign-in")
                return
            if query.get("state") != state or not query.get("code"):
                self._answer(400, "this sign-in is not the one the CLI started")
                return
            got["code"] = query["code"]
            done.set()
            self._answer(200, "The gpuslice CLI is signed in. You can close this tab.")

        def _answer(self, status: int, text: str) -> None:
            body = text.encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Callback
