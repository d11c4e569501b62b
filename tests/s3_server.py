"""moto's S3 server, checking presigned URLs as AWS and MinIO do (run by tests/s3.py).

moto's server mode takes any presigned URL as it comes: neither its signature, nor the headers
signed into it, nor its expiry are checked. What our URLs allow (the one key, the length and
``If-None-Match`` signed into a PUT, the expiry) is what the model tests check, so this runs
moto's own WSGI app behind a SigV4 query-signature check (the AWS specification, computed
here independently of botocore's signer): a request with ``X-Amz-Signature`` in its query is
answered 403 (``SignatureDoesNotMatch`` or ``AccessDenied``) unless the signature matches the
method, path, query and every signed header as sent, and it has not expired. Requests signed
in an ``Authorization`` header (the manager's own, through boto3) pass as before.

Usage: ``python -P tests/s3_server.py HOST PORT ACCESS_KEY SECRET_KEY`` (``-P``: not with
tests/ first on the path, where ``tests/platform`` would hide the standard library's).
"""

from __future__ import annotations

import hashlib
import hmac
import sys
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import unquote

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import run_simple

Start = Callable[..., Any]
App = Callable[[dict[str, Any], Start], Iterable[bytes]]


def checking(app: App, access_key: str, secret_key: str) -> App:
    def check(environ: dict[str, Any], start: Start) -> Iterable[bytes]:
        query = environ.get("QUERY_STRING", "")
        if "X-Amz-Signature=" not in query:
            return app(environ, start)
        refused = _refusal(environ, query, access_key, secret_key)
        if refused is None:
            return app(environ, start)
        code, message = refused
        body = (f"<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{code}</Code>"
                f"<Message>{message}</Message></Error>").encode()
        start("403 Forbidden", [("Content-Type", "application/xml"),
                                ("Content-Length", str(len(body))), ("Connection", "close")])
        return [body]

    return check


def _refusal(
    environ: dict[str, Any], query: str, access_key: str, secret_key: str
) -> tuple[str, str] | None:
    pairs = [p.partition("=") for p in query.split("&") if p]
    params = {k: unquote(v) for k, _, v in pairs}
    credential = params.get("X-Amz-Credential", "").split("/")
    if len(credential) != 5 or credential[0] != access_key:
        return "InvalidAccessKeyId", "The access key is not known."
    stamp = params.get("X-Amz-Date", "")
    signed_at = datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    if datetime.now(UTC) > signed_at + timedelta(seconds=int(params["X-Amz-Expires"])):
        return "AccessDenied", "Request has expired"
    names = params["X-Amz-SignedHeaders"].split(";")
    headers = []
    for name in names:
        value = _header(environ, name)
        if value is None:
            return "SignatureDoesNotMatch", f"The signed header {name} is missing."
        headers.append(f"{name}:{' '.join(value.split())}\n")
    canonical_query = "&".join(f"{k}={v}" for k, v in sorted(
        (k, v) for k, _, v in pairs if k != "X-Amz-Signature"))
    path = environ.get("RAW_URI", environ.get("PATH_INFO", "/")).split("?", 1)[0]
    request = "\n".join([environ["REQUEST_METHOD"], path, canonical_query, "".join(headers),
                         ";".join(names), "UNSIGNED-PAYLOAD"])
    scope = "/".join(credential[1:])
    to_sign = "\n".join(["AWS4-HMAC-SHA256", stamp, scope,
                         hashlib.sha256(request.encode()).hexdigest()])
    key = ("AWS4" + secret_key).encode()
    for part in credential[1:]:
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    expected = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, params["X-Amz-Signature"]):
        return "SignatureDoesNotMatch", "The request signature we calculated does not match."
    return None


def _header(environ: dict[str, Any], name: str) -> str | None:
    if name == "host":
        return environ.get("HTTP_HOST")
    if name in ("content-length", "content-type"):
        return environ.get(name.upper().replace("-", "_")) or None
    return environ.get("HTTP_" + name.upper().replace("-", "_"))


def main(argv: list[str]) -> None:
    host, port, access_key, secret_key = argv
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(host, int(port), checking(app, access_key, secret_key), threaded=True,
               request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main(sys.argv[1:])
