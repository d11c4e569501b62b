"""TLS: the manager serves HTTPS (server.tls_cert / tls_key, `manager serve --tls-cert`), and an
agent checks the manager's certificate, against its own CA bundle when given one."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from gpuslice.agent.manager_link import LinkError, ManagerLink
from gpuslice.common.schemas.agents import NodeRegister
from gpuslice.manager.app import create_app
from gpuslice.manager.server import ManagerServer
from gpuslice.manager.services.users import CREDENTIALS_FILE
from gpuslice.manager.settings import ManagerSettings
from tests.ports import free_port

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")


@dataclass(frozen=True)
class Pki:
    ca: Path
    cert: Path
    key: Path


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    """A throwaway CA and a certificate for 127.0.0.1 it signed (openssl, as admins do)."""
    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=tmp_path, check=True, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
        "-days", "1", "-subj", "/CN=gpuslice test CA")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
        "-subj", "/CN=127.0.0.1")
    (tmp_path / "san.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.pem", "-days", "1", "-extfile", "san.cnf")
    return Pki(tmp_path / "ca.pem", tmp_path / "server.pem", tmp_path / "server.key")


@pytest.fixture
async def https_url(settings: ManagerSettings, pki: Pki) -> AsyncIterator[str]:
    tls = settings.model_copy(update={"server": settings.server.model_copy(
        update={"tls_cert": pki.cert, "tls_key": pki.key})})
    port = free_port()
    server = ManagerServer(create_app(tls), "127.0.0.1", port, tls.server)
    serving = asyncio.create_task(server.serve())
    while not server.started:
        assert not serving.done(), "the manager did not start"
        await asyncio.sleep(0.05)
    try:
        yield f"https://127.0.0.1:{port}"
    finally:
        server.exit()
        await serving


async def _join_token(url: str, settings: ManagerSettings, ca: Path) -> str:
    creds = dict(line.split(": ", 1) for line in
                 (settings.data_dir / CREDENTIALS_FILE).read_text().splitlines())
    verify = ssl.create_default_context(cafile=str(ca))
    async with httpx.AsyncClient(base_url=url, verify=verify) as http:
        r = await http.post("/api/v1/auth/login", json={"username": creds["username"],
                                                        "password": creds["password"]})
        headers = {"Authorization": f"Bearer {r.json()['access_token']}"}
        r = await http.post("/api/v1/join-tokens", json={"name": "tls"}, headers=headers)
        return str(r.json()["token"])


async def test_an_agent_joins_over_https_checking_the_certificate(
    https_url: str, settings: ManagerSettings, pki: Pki, tmp_path: Path
) -> None:
    token = await _join_token(https_url, settings, pki.ca)
    untrusting = ManagerLink(https_url, tmp_path / "a1")
    try:
        with pytest.raises(LinkError, match="CERTIFICATE_VERIFY_FAILED"):
            await untrusting.connect(NodeRegister(join_token=token, name="tls-node"))
    finally:
        await untrusting.close()
    trusting = ssl.create_default_context(cafile=str(pki.ca))  # the agent's `ca_bundle`
    link = ManagerLink(https_url, tmp_path / "a2", verify=trusting)
    try:
        credential = await link.connect(NodeRegister(join_token=token, name="tls-node"))
        assert credential.manager_url == https_url  # the token was not used by the refusal
    finally:
        await link.close()

