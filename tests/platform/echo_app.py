"""A small HTTP app for the proxy's tests and benchmark: standard library only, so it runs in the
base session image; HTTP/1.1 with keep-alive, one thread per connection.

    python3 echo_app.py PORT

GET  /headers                  the request's headers, as JSON (what reached the app)
GET  /small                    "ok"
GET  /bytes?n=N                N bytes, with their Content-Length, written in 1 MiB blocks
GET  /stream?chunks=K&every=S  K lines, one every S seconds (chunked, no Content-Length)
GET  /cookie                   sets a cookie at Path=/ and redirects to /small
POST /echo                     the request body back
"""

from __future__ import annotations

import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

BLOCK = b"x" * (1024 * 1024)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body are separate writes: with Nagle's algorithm the body would wait for the
    # client's delayed ACK (40 ms), as no real app server lets it.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        if url.path == "/headers":
            self._send(200, json.dumps([[k, v] for k, v in self.headers.items()]).encode(),
                       "application/json")
        elif url.path == "/small":
            self._send(200, b"ok", "text/plain")
        elif url.path == "/bytes":
            self._bytes(int(query.get("n", "0")))
        elif url.path == "/stream":
            self._stream(int(query.get("chunks", "3")), float(query.get("every", "1")))
        elif url.path == "/cookie":
            self.send_response(302)
            self.send_header("Set-Cookie", "app_session=abc; Path=/; Domain=localhost")
            self.send_header("Set-Cookie", "gpuslice_login=stolen; Path=/")
            self.send_header("Location", "/small")
            self.send_header("Content-Length", "0")
            self.end_headers()
        else:
            self._send(404, b"not found", "text/plain")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        self._send(200, self.rfile.read(length), "application/octet-stream")

    def _send(self, status: int, body: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _bytes(self, n: int) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(n))
        self.end_headers()
        while n > 0:
            block = BLOCK[: min(n, len(BLOCK))]
            self.wfile.write(block)
            n -= len(block)

    def _stream(self, chunks: int, every: float) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i in range(chunks):
            if i:
                time.sleep(every)
            line = f"chunk {i} at {time.time():.1f}\n".encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")


if __name__ == "__main__":
    server = ThreadingHTTPServer(("0.0.0.0", int(sys.argv[1])), Handler)
    server.daemon_threads = True
    server.serve_forever()
