"""`gpuslice ssh-key add` given a private key by mistake: refused here, in one line, before
anything reaches the manager (it once went there, to be refused by it)."""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from tests.waits import scaled

from .conftest import GPUSLICE


class _Recorder(BaseHTTPRequestHandler):
    """A manager that refuses every call, as the real one refuses a private key, and keeps
    what was sent to it."""

    received: list[bytes] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        length = int(self.headers.get("Content-Length") or 0)
        self.received.append(self.rfile.read(length))
        body = (b'{"code":"private_key","message":"this is a private key: give its public '
                b'half","field":"key"}')
        self.send_response(422)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def recorder() -> Iterator[tuple[str, list[bytes]]]:
    received: list[bytes] = []
    handler = type("Recorder", (_Recorder,), {"received": received})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", received
    server.shutdown()
    server.server_close()


def test_a_private_key_never_leaves_this_machine(
        tmp_path: Path, recorder: tuple[str, list[bytes]]) -> None:
    url, received = recorder
    private = ed25519.Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption())
    key = tmp_path / "id_ed25519"
    key.write_bytes(private)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSLICE_")} | {
        "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / ".config"),
        "GPUSLICE_URL": url, "GPUSLICE_TOKEN": "gsu_" + "x" * 43}
    for args, given in (((str(key),), None), (("-",), private.decode())):
        done = subprocess.run([GPUSLICE, "ssh-key", "add", *args], env=env, input=given,
                              capture_output=True, text=True, timeout=scaled(60), check=False)
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("error: this is a private key: give its public half")
        assert len(done.stderr.strip().splitlines()) == 1 and "PRIVATE" not in done.stderr
    assert received == []
