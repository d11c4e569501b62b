"""A small Docker registry stand-in (HTTP API v2 listings only, no image content): a real HTTP
server on localhost, since no registry is reachable in CI."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

DIGEST = "sha256:" + "a" * 64
ROUTES: dict[str, tuple[int, Any, dict[str, str]]] = {
    "/v2/_catalog?n=100": (
        200, {"repositories": ["team/torch"]},
        {"Link": '</v2/_catalog?last=team%2Ftorch&n=100>; rel="next"'},
    ),
    "/v2/_catalog?last=team%2Ftorch&n=100": (200, {"repositories": ["team/env"]}, {}),
    "/v2/team/torch/tags/list": (200, {"name": "team/torch", "tags": ["2.3"]}, {}),
    "/v2/team/torch/manifests/2.3": (
        200, {"config": {"digest": DIGEST}, "layers": [{"size": 1000}, {"size": 2000}]}, {}
    ),
    f"/v2/team/torch/blobs/{DIGEST}": (
        200, {"config": {"Labels": {"gpuslice.image.title": "Torch 2.3",
                                    "gpuslice.image.min-mem": "2g"}}}, {},
    ),
    "/v2/team/env/tags/list": (200, {"name": "team/env", "tags": ["1"]}, {}),
}


class _Registry(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (the http.server API)
        status, body, headers = ROUTES.get(self.path, (404, {"errors": []}, {}))
        data = json.dumps(body).encode()
        self.send_response(status)
        for key, value in {"Content-Type": "application/json", **headers}.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_args: Any) -> None:
        pass


@pytest.fixture
def registry_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Registry)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
