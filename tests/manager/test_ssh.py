"""SSH (issue 31) at the manager: users' public keys (validated, per user, a clear one-line
error for anything else), and the SSH WebSocket: who may open it, that the agent is handed
the session owner's keys, and that its bytes pass both ways. The real sshd and OpenSSH client
are in tests/platform/test_ssh.py."""

from __future__ import annotations

import base64
import struct
from collections.abc import AsyncIterator
from urllib.parse import quote

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from fastapi import FastAPI
from websockets.asyncio.client import connect

from tests.manager.conftest import IMAGE, UserFactory, client_for
from tests.manager.fake_agent import FakeAgent
from tests.manager.proxy_helpers import running, settings, token_of, upgrade, url

__all__ = ["settings", "url"]
NO_SSHD = "no-sshd:1"
OPENSSH = serialization.Encoding.OpenSSH
PUBLIC = serialization.PublicFormat.OpenSSH


@pytest.fixture
async def agent(app: FastAPI, admin: httpx.AsyncClient, url: str) -> AsyncIterator[FakeAgent]:
    """A node that dials back, with an image with an SSH server and one without."""
    r = await admin.post("/api/v1/join-tokens", json={"name": "join-node-1"})
    node = FakeAgent(client_for(app), r.json()["token"], "node-1", images=[IMAGE, NO_SSHD],
                     ws_url="ws" + url.removeprefix("http"))
    await node.start()
    yield node
    await node.stop()


def ed25519_key(comment: str = "me@laptop") -> str:
    key = ed25519.Ed25519PrivateKey.generate().public_key()
    return key.public_bytes(OPENSSH, PUBLIC).decode() + f" {comment}"


async def test_a_user_adds_lists_and_removes_keys_and_sees_only_their_own(
        make_user: UserFactory, admin: httpx.AsyncClient) -> None:
    alice, bob = await make_user("alice"), await make_user("bob")
    r = await alice.post("/api/v1/ssh-keys", json={"key": ed25519_key() + "\n"})
    assert r.status_code == 201, r.text
    added = r.json()
    assert (added["name"], added["type"]) == ("me@laptop", "ssh-ed25519")
    assert added["fingerprint"].startswith("SHA256:") and len(added["fingerprint"]) == 50
    ecdsa = ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(OPENSSH, PUBLIC)
    r = await alice.post("/api/v1/ssh-keys", json={"key": ecdsa.decode(), "name": "work"})
    assert r.status_code == 201 and r.json()["name"] == "work", r.text
    assert [k["name"] for k in (await alice.get("/api/v1/ssh-keys")).json()] == [
        "me@laptop", "work"]
    assert (await bob.get("/api/v1/ssh-keys")).json() == []
    assert (await admin.get("/api/v1/ssh-keys")).json() == []  # an admin's are theirs only
    assert (await bob.delete(f"/api/v1/ssh-keys/{added['id']}")).status_code == 404
    again = await alice.post("/api/v1/ssh-keys", json={"key": ed25519_key("other")})
    assert again.status_code == 201
    same = await alice.post("/api/v1/ssh-keys", json={"key": ed25519_key()})
    assert same.status_code == 201  # another key, the same comment
    r = await alice.delete("/api/v1/ssh-keys/me@laptop")
    assert r.status_code == 409 and r.json()["code"] == "ambiguous_ssh_key"
    by_fingerprint = quote(added["fingerprint"], safe="")  # as the SDK sends it: it holds /
    assert (await alice.delete(f"/api/v1/ssh-keys/{by_fingerprint}")).status_code == 204
    assert (await alice.delete("/api/v1/ssh-keys/work")).status_code == 204
    assert len((await alice.get("/api/v1/ssh-keys")).json()) == 2


@pytest.mark.parametrize(("key", "says"), [
    ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n"
     "-----END OPENSSH PRIVATE KEY-----\n", "this is a private key: give its public half"),
    ("ssh-ed25519", "a ssh-ed25519 key without its base64 part"),
    ("ssh-ed25519 AAAA!!!notbase64 me", "the ssh-ed25519 key's base64 part is damaged"),
    ("ssh-dss AAAAB3NzaC1kc3MAAACBAP me", "not an OpenSSH public key: it starts with 'ssh-dss'"),
    ("from=\"10.0.0.1\" ssh-ed25519 AAAA", "not an OpenSSH public key"),
    ("hello world", "not an OpenSSH public key: it starts with 'hello'"),
    ("", "one public key per call, on one line; got 0 lines"),
])
async def test_anything_but_a_public_key_is_a_one_line_error(
        make_user: UserFactory, key: str, says: str) -> None:
    alice = await make_user("alice")
    r = await alice.post("/api/v1/ssh-keys", json={"key": key})
    assert r.status_code == 422, r.text
    assert r.json()["message"].startswith(says), r.json()
    assert "\n" not in r.json()["message"] and "BEGIN" not in r.json()["message"]
    assert (await alice.get("/api/v1/ssh-keys")).json() == []


async def test_keys_that_lie_about_their_type_or_are_weak_are_refused(
        make_user: UserFactory) -> None:
    alice = await make_user("alice")
    blob = base64.b64decode(ed25519_key().split()[1])
    lying = f"ssh-rsa {base64.b64encode(blob).decode()}"
    r = await alice.post("/api/v1/ssh-keys", json={"key": lying})
    assert r.status_code == 422 and "the key says it is ssh-rsa" in r.json()["message"]
    cut = blob[:4] + blob[4:][: struct.unpack(">I", blob[:4])[0]] + b"\x00\x00\x00\x05abc"
    r = await alice.post("/api/v1/ssh-keys",
                         json={"key": f"ssh-ed25519 {base64.b64encode(cut).decode()}"})
    assert r.status_code == 422 and "the ssh-ed25519 key is damaged" in r.json()["message"]
    weak = rsa.generate_private_key(65537, 1024).public_key().public_bytes(OPENSSH, PUBLIC)
    r = await alice.post("/api/v1/ssh-keys", json={"key": weak.decode()})
    assert r.status_code == 422 and r.json()["code"] == "weak_ssh_key", r.text
    assert "RSA key of 1024 bits" in r.json()["message"]


async def test_the_ssh_socket_hands_the_owners_keys_and_relays_bytes(
        app: FastAPI, url: str, make_user: UserFactory, agent: FakeAgent) -> None:
    alice, bob = await make_user("alice"), await make_user("bob")
    sid = await running(alice, image=IMAGE)
    ws = "ws" + url.removeprefix("http") + f"/api/v1/sessions/{sid}/ssh"
    mine = {"Authorization": f"Bearer {await token_of(alice)}"}
    assert await upgrade(ws, {}) == 401
    assert await upgrade(ws, {"Authorization": f"Bearer {await token_of(bob)}"}) == 404
    assert await upgrade(ws, mine) == 409  # no key yet: refused before any stream is opened
    assert not [o for o in agent.opened if o["op"] == "ssh"]

    key = ed25519_key()
    await alice.post("/api/v1/ssh-keys", json={"key": key})
    await bob.post("/api/v1/ssh-keys", json={"key": ed25519_key("bob")})
    async with connect(ws, additional_headers=mine, max_size=None) as stream:
        await stream.send(b"SSH-2.0-OpenSSH_9.2\r\n")
        assert await stream.recv() == b"SSH-2.0-OpenSSH_9.2\r\n"
    [opened] = [o for o in agent.opened if o["op"] == "ssh"]
    assert opened["keys"] == [" ".join(key.split()[:2])]  # alice's, without the comment
    assert opened["image"] == IMAGE


async def test_an_image_without_an_ssh_server_is_refused_in_one_line(
        url: str, make_user: UserFactory, agent: FakeAgent) -> None:
    alice = await make_user("alice")
    await alice.post("/api/v1/ssh-keys", json={"key": ed25519_key()})
    sid = await running(alice, image=NO_SSHD)
    async with httpx.AsyncClient(base_url=url) as web:
        r = await web.get(f"/api/v1/sessions/{sid}/ssh",
                          headers={"Authorization": f"Bearer {await token_of(alice)}",
                                   "Connection": "Upgrade", "Upgrade": "websocket",
                                   "Sec-WebSocket-Version": "13",
                                   "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="})
    assert r.status_code == 409, r.text
    assert r.json()["code"] == "no_ssh_server"
    assert r.json()["message"] == "image no-sshd:1 has no SSH server (sshd)"
