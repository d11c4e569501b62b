"""A real S3 server for tests: moto's server mode (PyPI ``moto[server]``), one per test run.

The tests check *our* scoping (per-user prefixes, who may presign, what a URL allows): moto
implements the S3 API but enforces no IAM and checks no presigned URL, so it runs behind
``s3_server.py``, which checks presigned URLs' signatures (with the headers signed into them)
and expiry as AWS and MinIO do. Import the fixture into a ``conftest.py`` (or a test module)
to use it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.ports import free_port
from tests.waits import scaled

KEY, SECRET = "gpuslice-test", "gpuslice-test-secret"


@dataclass(frozen=True)
class S3Server:
    url: str  # as the manager and the tests reach it
    host: str
    port: int

    def settings(self, bucket: str | None = None) -> dict[str, str]:
        """``model_store`` settings for a fresh bucket on this server."""
        return {
            "backend": "s3", "s3_endpoint_url": self.url,
            "s3_bucket": bucket or f"test-{uuid.uuid4().hex[:12]}",
            "s3_access_key": KEY, "s3_secret_key": SECRET,
        }


def start_s3(host: str = "127.0.0.1") -> tuple[subprocess.Popen[bytes], S3Server]:
    port = free_port(host)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    server = Path(__file__).with_name("s3_server.py")
    process = subprocess.Popen(
        [sys.executable, "-P", str(server), host, str(port), KEY, SECRET], env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    reach = "127.0.0.1" if host == "0.0.0.0" else host
    url = f"http://{reach}:{port}"
    deadline = time.monotonic() + scaled(30)
    while True:
        try:
            httpx.get(url, timeout=1)
            break
        except httpx.TransportError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError(f"moto's S3 server did not start on {url}") from None
            time.sleep(0.1)
    return process, S3Server(url, reach, port)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    process, server = start_s3()
    try:
        yield server
    finally:
        process.terminate()
        process.wait(10)
