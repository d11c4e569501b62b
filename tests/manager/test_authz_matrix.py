"""The authorization matrix (issue 16): every route of the OpenAPI document, called as anonymous,
a user (the owner), another user, a node, a revoked token and an admin (and, where the kind
says so, a user the folder is shared with, another node, the scrape token), on a real object
and on a random id. No cross-user read, write or existence leak; non-admins never reach admin
routes; no 5xx.

``ACCESS`` is the one table of decisions, a line per route. A route the API has and the table
lacks fails the test: whoever adds a route decides who may call it, here.

Every call also leaves what the audit log must have of it (issue 43): one row, with the
caller, the outcome and the request id the call sent, for a change, a refusal to someone
known and a login; none for a read of what one may see, a 422 or an unknown caller.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr

from gpuslice.manager.services.audit import actions
from gpuslice.manager.settings import ManagerSettings
from tests.manager.audit_helpers import rows
from tests.manager.conftest import (
    IMAGE,
    AgentFactory,
    Client,
    UserFactory,
    client_for,
    create,
    login,
)
from tests.manager.fake_agent import FakeAgent
from tests.manager.folder_helpers import folder, put, tar_of
from tests.manager.helpers import wait_status


class Access(Enum):
    PUBLIC = "anyone, without a token"
    USER = "any user; answers only what the caller may see"
    OWNER = "the object's owner and admins; anyone else gets the random id's 404"
    SELF = "the caller's own object only; anyone else, admins too, gets the random id's 404"
    SHARED = ("a folder's owner; a user it is shared with read-only reads it (GET) and gets 403 "
              "for anything else; admins (a user's folder is their data) and anyone else get "
              "the random id's 404")
    OWNER_USE = ("the object's owner; admins, who see it, may not use it (403: apps run their "
                 "owner's code, unless apps.admin_access); anyone else gets the random id's 404")
    ADMIN = "admins only (users: 403)"
    SCRAPE = "admins and the scrape token (users: 403), unless monitoring.public_metrics"
    SIGNED = ("whoever holds the presigned URL, with or without a token: the signature is the "
              "credential; a URL altered, or signed for another object, is a 403 for everyone, "
              "admins too")
    NODE = "a node's credential only"
    NODE_OBJECT = "a node, for its own objects; another node gets the random id's 404"


PUBLIC, USER, OWNER, SELF, SHARED, OWNER_USE = (
    Access.PUBLIC, Access.USER, Access.OWNER, Access.SELF, Access.SHARED, Access.OWNER_USE)
ADMIN, SCRAPE, SIGNED, NODE, NODE_OBJECT = (
    Access.ADMIN, Access.SCRAPE, Access.SIGNED, Access.NODE, Access.NODE_OBJECT)

ACCESS: dict[str, Access] = {
    "GET /api/v1/health": PUBLIC,
    "GET /api/v1/health/live": PUBLIC,  # for service managers and load balancers
    "GET /api/v1/health/ready": PUBLIC,
    "GET /api/v1/health/loops": PUBLIC,  # as readiness: an error's type, never its text
    "GET /metrics": SCRAPE,
    "POST /api/v1/auth/login": PUBLIC,
    "POST /api/v1/auth/logout": USER,
    "POST /api/v1/auth/cli-token": PUBLIC,  # a password login whose token is of kind cli
    "GET /api/v1/auth/token": USER,  # the caller's own token, whatever it is
    "GET /api/v1/auth/me": USER,
    "POST /api/v1/auth/password": USER,
    "GET /api/v1/auth/tokens": USER,
    "POST /api/v1/auth/tokens": USER,
    "DELETE /api/v1/auth/tokens/{token_id}": SELF,
    "GET /api/v1/auth/activity": USER,  # one's own security log only
    "GET /api/v1/auth/providers": PUBLIC,  # how to sign in: the login page and CLI read it
    "POST /api/v1/auth/device": PUBLIC,  # a CLI asks for a code (limited per address)
    "POST /api/v1/auth/device/token": PUBLIC,  # the device code is the credential
    "POST /api/v1/auth/device/approve": USER,  # anyone signed in who holds the user code
    "POST /api/v1/auth/cli/token": PUBLIC,  # the code and the PKCE verifier are the credential
    "GET /api/v1/audit": ADMIN,
    "GET /api/v1/audit/verify": ADMIN,
    "GET /api/v1/audit/export": ADMIN,
    "GET /api/v1/ssh-keys": USER,  # one's own keys only
    "POST /api/v1/ssh-keys": USER,
    "DELETE /api/v1/ssh-keys/{key_id}": SELF,
    "GET /api/v1/notifications/channels": USER,  # one's own (admins: also projects')
    "POST /api/v1/notifications/channels": USER,
    "PATCH /api/v1/notifications/channels/{channel_id}": SELF,
    "DELETE /api/v1/notifications/channels/{channel_id}": SELF,
    "POST /api/v1/notifications/channels/{channel_id}/test": SELF,
    "GET /api/v1/notifications/deliveries": USER,  # one's own channels' only
    "GET /api/v1/notifications/failures": ADMIN,
    "GET /api/v1/users": ADMIN,
    "POST /api/v1/users": ADMIN,
    "GET /api/v1/users/{user_id}": ADMIN,
    "PATCH /api/v1/users/{user_id}": ADMIN,
    "GET /api/v1/users/{user_id}/identities": ADMIN,
    "POST /api/v1/users/{user_id}/identities": ADMIN,
    "DELETE /api/v1/users/{user_id}/identities/{identity_id}": ADMIN,
    "GET /api/v1/policies": ADMIN,
    "POST /api/v1/policies": ADMIN,
    "PUT /api/v1/policies/{policy_id}": ADMIN,
    "DELETE /api/v1/policies/{policy_id}": ADMIN,
    "GET /api/v1/presets": USER,  # the launch dialog offers them to everyone
    "POST /api/v1/presets": ADMIN,
    "PATCH /api/v1/presets/{name}": ADMIN,
    "DELETE /api/v1/presets/{name}": ADMIN,
    "GET /api/v1/priority-classes": USER,  # users pick one at launch
    "POST /api/v1/priority-classes": ADMIN,
    "PATCH /api/v1/priority-classes/{name}": ADMIN,
    "DELETE /api/v1/priority-classes/{name}": ADMIN,
    "GET /api/v1/config": ADMIN,
    "POST /api/v1/config/import": ADMIN,
    "POST /api/v1/sessions": USER,
    "GET /api/v1/sessions": USER,
    "GET /api/v1/sessions/events": USER,
    "POST /api/v1/sessions/destroy": USER,
    "POST /api/v1/sessions/preview": USER,
    "GET /api/v1/sessions/{session_id}": OWNER,
    "DELETE /api/v1/sessions/{session_id}": OWNER,
    "GET /api/v1/sessions/{session_id}/logs": OWNER,
    "POST /api/v1/sessions/{session_id}/exec": OWNER,
    "POST /api/v1/sessions/{session_id}/commit": OWNER,
    "GET /api/v1/sessions/{session_id}/stats": OWNER,
    "GET /api/v1/sessions/{session_id}/apps": OWNER_USE,
    "POST /api/v1/sessions/{session_id}/apps/{name}/start": OWNER_USE,
    "GET /api/v1/top": USER,  # a user's own sessions and the nodes they are on
    "GET /api/v1/usage": USER,  # one's own accounting; admins anyone's
    "GET /api/v1/images": USER,
    "POST /api/v1/images": ADMIN,
    "POST /api/v1/images/rescan": ADMIN,
    "GET /api/v1/images/aliases": USER,
    "POST /api/v1/images/aliases": ADMIN,
    "DELETE /api/v1/images/aliases/{name}": ADMIN,
    "PATCH /api/v1/images/{name}": ADMIN,
    "DELETE /api/v1/images/{name}": ADMIN,
    "GET /api/v1/folders": USER,
    "POST /api/v1/folders": USER,  # shared folders: admins (a user's `shared` is a 403)
    "GET /api/v1/folders/usage": USER,  # another user's (`user=`): admins
    "GET /api/v1/folders/{folder_id}": SHARED,
    "PATCH /api/v1/folders/{folder_id}": SHARED,
    "DELETE /api/v1/folders/{folder_id}": SHARED,
    "PUT /api/v1/folders/{folder_id}/grants": SHARED,
    "DELETE /api/v1/folders/{folder_id}/grants/{user}": SHARED,
    "GET /api/v1/folders/{folder_id}/files": SHARED,
    "DELETE /api/v1/folders/{folder_id}/files": SHARED,
    "POST /api/v1/folders/{folder_id}/dirs": SHARED,
    "GET /api/v1/folders/{folder_id}/content": SHARED,
    "PUT /api/v1/folders/{folder_id}/content": SHARED,
    "GET /api/v1/folders/{folder_id}/uploads": SHARED,
    "GET /api/v1/folders/{folder_id}/archive": SHARED,
    "PUT /api/v1/folders/{folder_id}/archive": SHARED,
    # Models are their owner's alone: admins see none (a model is a user's data).
    "GET /api/v1/models": USER,
    "GET /api/v1/models/{name}": SELF,
    "DELETE /api/v1/models/{name}": SELF,
    "GET /api/v1/models/{name}/files": SELF,
    "POST /api/v1/models/{name}/presign": SELF,
    "POST /api/v1/model-uploads": USER,
    "PUT /api/v1/model-uploads/{upload_id}/files": SELF,
    "POST /api/v1/model-uploads/{upload_id}/complete": SELF,
    "GET /api/v1/model-store/{key}": SIGNED,
    "PUT /api/v1/model-store/{key}": SIGNED,
    "POST /api/v1/runs": USER,
    "POST /api/v1/runs/check": USER,
    "GET /api/v1/runs": USER,
    "GET /api/v1/runs/{run}": OWNER,  # a run is a session: admins see every one
    "DELETE /api/v1/runs/{run}": OWNER,
    "GET /api/v1/nodes": ADMIN,
    "PUT /api/v1/nodes/{node}/group": ADMIN,
    "POST /api/v1/projects": ADMIN,
    "GET /api/v1/projects": USER,  # those one may launch in
    "GET /api/v1/projects/{name}": OWNER,  # its members and admins
    "PUT /api/v1/projects/{name}": ADMIN,
    "POST /api/v1/projects/{name}/rename": ADMIN,
    "DELETE /api/v1/projects/{name}": ADMIN,
    "POST /api/v1/projects/{name}/members": ADMIN,
    "DELETE /api/v1/projects/{name}/members/{username}": ADMIN,
    "GET /api/v1/projects/{name}/idp-groups": ADMIN,  # issue 42: groups giving membership
    "PUT /api/v1/projects/{name}/idp-groups": ADMIN,
    "GET /api/v1/ldap/test": ADMIN,  # the directory as the service account sees it
    "GET /api/v1/groups": USER,  # the launch dialog shows each group's free capacity
    "POST /api/v1/nodes/{node_id}/revoke": ADMIN,
    "GET /api/v1/join-tokens": ADMIN,
    "POST /api/v1/join-tokens": ADMIN,
    "DELETE /api/v1/join-tokens/{token_id}": ADMIN,
    "POST /api/v1/agents/register": PUBLIC,
    "POST /api/v1/agents/me/heartbeat": NODE,
    "GET /api/v1/agents/me/assignments": NODE,
    "POST /api/v1/agents/me/sessions/{session_id}/state": NODE_OBJECT,
    "PUT /api/v1/agents/me/requests/{request_id}": NODE_OBJECT,
    # Relayed from inside a session by its node's agent, acting for the session's owner.
    "GET /api/v1/agents/me/sessions/{session_id}/usage": NODE_OBJECT,
    "POST /api/v1/agents/me/sessions/{session_id}/models/uploads": NODE_OBJECT,
    "PUT /api/v1/agents/me/sessions/{session_id}/models/file": NODE_OBJECT,
    "POST /api/v1/agents/me/sessions/{session_id}/models/complete": NODE_OBJECT,
    "POST /api/v1/agents/me/sessions/{session_id}/models/presign": NODE_OBJECT,
    "POST /api/v1/agents/me/sessions/{session_id}/run/saving": NODE_OBJECT,
}

# What a call needs beyond `{}` to get past validation (so that a refusal is about who asks),
# or to return at once (a long-poll, an event stream: a bad value ends them with a 422 once the
# caller is let in). "{param}" stands for the world's real object. Every body is `{}` as sent
# (two bytes: the announced size of the uploads below) unless given here.
NEW_FILE = {"files": [{"path": "a.bin", "size": 2}]}
NEW_RUN = {"name": "new-run", "script": "train.py", "image": IMAGE}
HOOK = "http://127.0.0.1:9/hook"  # allowed below; nothing listens: a test send fails fast
SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFjR3aj3zxPSbiTmxDqEC7FU4nqDfJS9SVZXh3IW9U9b t"
BODIES: dict[str, Any] = {
    "POST /api/v1/auth/device": {"client_host": "gpu-box", "os_user": "alice"},
    "POST /api/v1/auth/device/token": {"device_code": "no-such-code"},
    "POST /api/v1/auth/device/approve": {"user_code": "BBBB-CCCC", "approve": True},
    "POST /api/v1/auth/cli/token": {"code": "no-such-code", "code_verifier": "v" * 43},
    "POST /api/v1/agents/me/sessions/{session_id}/state": {"status": "RUNNING"},
    "PUT /api/v1/agents/me/requests/{request_id}": {"kind": "logs"},
    "POST /api/v1/folders": {"name": "new-folder"},
    "PATCH /api/v1/folders/{folder_id}": {"name": "alice-data"},
    "PUT /api/v1/folders/{folder_id}/grants": {"user": "dave", "permission": "ro"},
    "POST /api/v1/model-uploads": {"name": "new-model", **NEW_FILE},
    "POST /api/v1/agents/me/sessions/{session_id}/models/uploads": {"name": "new-model",
                                                                    **NEW_FILE},
    "POST /api/v1/agents/me/sessions/{session_id}/models/complete": {
        "upload_id": "{relayed_upload_id}"},
    "POST /api/v1/agents/me/sessions/{session_id}/models/presign": {"name": "alice-model"},
    "POST /api/v1/runs": NEW_RUN,
    "POST /api/v1/runs/check": NEW_RUN,
    "POST /api/v1/presets": {"name": "new-preset", "cpu": 1, "mem": "1g"},
    "POST /api/v1/ssh-keys": {"key": SSH_KEY},
    "POST /api/v1/notifications/channels": {"kind": "webhook", "target": HOOK},
    "PATCH /api/v1/notifications/channels/{channel_id}": {"name": "renamed"},
    "PATCH /api/v1/presets/{name}": {"cpu": 0.5},
    "POST /api/v1/priority-classes": {"name": "new-class", "rank": 5},
    "PATCH /api/v1/priority-classes/{name}": {"rank": 3},
    "POST /api/v1/agents/me/sessions/{session_id}/run/saving": {"script_s": 1.5},
    "POST /api/v1/projects": {"name": "new-project"},
    "POST /api/v1/projects/{name}/members": {"username": "dave"},
    "PUT /api/v1/projects/{name}/idp-groups": {"provider": "ldap", "groups": ["vision"]},
    "POST /api/v1/projects/{name}/rename": {"name": "renamed-team"},
    "PUT /api/v1/nodes/{node}/group": {"group": "default"},
}
QUERIES: dict[str, dict[str, str]] = {
    "GET /api/v1/agents/me/assignments": {"wait": "0"},
    "GET /api/v1/sessions/events": {"since": "not-a-number"},
    "DELETE /api/v1/folders/{folder_id}/files": {"path": "victim.txt"},
    "POST /api/v1/folders/{folder_id}/dirs": {"path": "new-dir"},
    "GET /api/v1/folders/{folder_id}/content": {"path": "notes.txt"},
    "PUT /api/v1/folders/{folder_id}/content": {"path": "new.bin", "size": "2"},
    "GET /api/v1/folders/{folder_id}/uploads": {"path": "new.bin"},
    "GET /api/v1/models/{name}/files": {"path": "model.txt"},
    "PUT /api/v1/model-uploads/{upload_id}/files": {"path": "a.bin"},
    "PUT /api/v1/agents/me/sessions/{session_id}/models/file": {
        "upload_id": "{relayed_upload_id}", "path": "a.bin"},
}
# Routes that end the very token they are called with run last.
LAST = ("POST /api/v1/auth/logout",)
SCRAPE_TOKEN = "scrape-" + "s" * 40


@pytest.fixture
def settings(settings: ManagerSettings) -> ManagerSettings:
    """The manager's test settings, with a scrape token for /metrics, and nodes that are not
    lost while the matrix runs: its fake agents beat once, and on a loaded machine the matrix
    outlasted the usual 30 s; the lost node ended alice's run, so its owner's DELETE removed it
    before the admin's could find it (CI, PostgreSQL lane)."""
    monitoring = settings.monitoring.model_copy(update={"scrape_token": SecretStr(SCRAPE_TOKEN)})
    notify = settings.notify.model_copy(update={"allowed_targets": ["127.0.0.1/32"]})
    nodes = settings.nodes.model_copy(update={"node_timeout": 3600})
    return settings.model_copy(update={"monitoring": monitoring, "notify": notify,
                                       "nodes": nodes})


@dataclass
class World:
    """Who calls, and the real objects of the routes' path parameters."""

    clients: dict[str, Client]
    objects: dict[str, str]  # "<route key>:<param>" or "<param>" -> a real value
    secrets: list[str]  # what must never appear in another user's answers
    other_node: FakeAgent
    app: FastAPI


def _operations(app: FastAPI) -> list[str]:
    paths = app.openapi()["paths"]
    return [f"{method.upper()} {path}" for path, ops in paths.items() for method in ops]


async def _world(app: FastAPI, admin: Client, anon: Client, make_user: UserFactory,
                 make_agent: AgentFactory) -> World:
    node = await make_agent()
    other_node = await make_agent("node-2")
    spare_node = await make_agent("node-3", devices=[], cpu=1, mem=1)  # holds nothing
    alice, bob = await make_user("alice"), await make_user("bob")
    carol, _dave = await make_user("carol"), await make_user("dave")  # grantees of alice's
    [s] = await create(alice, env={"ALICE_SECRET": "s3cret-value"}, name="alice-work")
    [doomed] = await create(alice, name="alice-doomed")  # the one DELETE ends
    placed = (await wait_status(alice, s["id"], {"RUNNING"}))["placement"]["node_id"]
    if placed != node.node_id:  # "the node" is the one running the owner's session
        node, other_node = other_node, node
    r = await alice.post(f"/api/v1/sessions/{s['id']}/commit", json={"name": "secret-img"})
    assert r.status_code == 200, r.text
    image = r.json()["image"]["name"]
    await admin.post("/api/v1/images/aliases", json={"name": "al", "reference": image})
    token = (await alice.post("/api/v1/auth/tokens", json={"name": "alice-t"})).json()
    revoked = await login(anon, "alice", "password-alice")
    async with client_for(app, revoked) as gone:
        assert (await gone.post("/api/v1/auth/logout")).status_code == 204
    policy = (await admin.post("/api/v1/policies", json={"name": "spare"})).json()
    join = (await admin.post("/api/v1/join-tokens", json={"name": "j"})).json()
    r = await admin.post("/api/v1/presets", json={"name": "doomed", "cpu": 1, "mem": "1g"})
    assert r.status_code == 201, r.text
    r = await admin.post("/api/v1/priority-classes", json={"name": "doomed", "rank": 1})
    assert r.status_code == 201, r.text
    users = {u["username"]: u["id"] for u in (await admin.get("/api/v1/users")).json()}
    r = await alice.post("/api/v1/ssh-keys", json={"key": SSH_KEY.replace(" t", " alice")})
    assert r.status_code == 201, r.text
    ssh_key = r.json()
    hooks = []
    for name in ("alice-hook", "alice-doomed-hook"):  # the second for DELETE
        r = await alice.post("/api/v1/notifications/channels",
                             json={"kind": "webhook", "target": HOOK, "name": name})
        assert r.status_code == 201, r.text
        hooks.append(r.json())
    r = await admin.post("/api/v1/projects", json={"name": "alice-team"})
    assert r.status_code == 201, r.text
    r = await admin.post("/api/v1/projects/alice-team/members", json={"username": "alice"})
    assert r.status_code == 200, r.text
    r = await admin.post("/api/v1/priority-classes",  # bob's answers never name it
                         json={"name": "alice-class", "rank": 2, "projects": ["alice-team"]})
    assert r.status_code == 201, r.text
    for spare in ("spare-team", "doomed-team"):  # the ones rename and DELETE change
        r = await admin.post("/api/v1/projects", json={"name": spare})
        assert r.status_code == 201, r.text
    clients = {
        "anonymous": client_for(app),  # `anon` keeps the login cookies of the logins above
        "revoked": client_for(app, revoked), "owner": alice,
        "other": bob, "node": node.client, "admin": admin, "grantee": carol,
        "scraper": client_for(app, SCRAPE_TOKEN),
    }
    objects = {
        "session_id": s["id"], "token_id": token["id"], "user_id": users["alice"],
        "policy_id": policy["id"], "node_id": spare_node.node_id, "request_id": str(uuid.uuid4()),
        "key_id": ssh_key["id"], "channel_id": hooks[0]["id"],
        "identity_id": str(uuid.uuid4()),
        "DELETE /api/v1/notifications/channels/{channel_id}:channel_id": hooks[1]["id"],
        "DELETE /api/v1/sessions/{session_id}:session_id": doomed["id"],
        "DELETE /api/v1/join-tokens/{token_id}:token_id": join["id"],
        "DELETE /api/v1/images/aliases/{name}:name": "al",
        "PATCH /api/v1/presets/{name}:name": "small",
        "DELETE /api/v1/presets/{name}:name": "doomed",
        "PATCH /api/v1/priority-classes/{name}:name": "normal",
        "DELETE /api/v1/priority-classes/{name}:name": "doomed",
        "POST /api/v1/projects/{name}/rename:name": "spare-team",
        "DELETE /api/v1/projects/{name}:name": "doomed-team",
        "PATCH /api/v1/images/{name}:name": image, "DELETE /api/v1/images/{name}:name": image,
        "POST /api/v1/sessions/{session_id}/apps/{name}/start:name": "terminal",
        "node": spare_node.node_id, "username": "dave",
        **{f"{route}:name": "alice-team" for route in (
            "GET /api/v1/projects/{name}", "PUT /api/v1/projects/{name}",
            "POST /api/v1/projects/{name}/members",
            "DELETE /api/v1/projects/{name}/members/{username}",
            "GET /api/v1/projects/{name}/idp-groups",
            "PUT /api/v1/projects/{name}/idp-groups")},
    }
    secrets = [s["id"], "s3cret-value", image, token["id"], "alice-work", ssh_key["id"],
               "alice-team", "alice-class", hooks[0]["id"], hooks[0]["secret"], "alice-hook"]
    for more, hidden in (await _folders(alice), await _models(app, alice, users["alice"]),
                         await _runs(alice)):
        objects.update(more)
        secrets += hidden
    return World(clients, objects, secrets, other_node, app)


async def _folders(alice: Client) -> tuple[dict[str, str], list[str]]:
    """alice's folder with files, shared read-only with carol (and dave, for the grant routes);
    a second one for DELETE."""
    data, scratch = await folder(alice, "alice-data"), await folder(alice, "scratch")
    for path, content in (("notes.txt", b"alice-notes"), ("victim.txt", b"to delete")):
        assert (await put(alice, data["id"], path, content)).status_code == 201
    for fid in (data["id"], scratch["id"]):
        for user in ("carol", "dave"):
            r = await alice.put(f"/api/v1/folders/{fid}/grants",
                                json={"user": user, "permission": "ro"})
            assert r.status_code == 200, r.text
    objects = {"folder_id": data["id"], "user": "dave",
               "DELETE /api/v1/folders/{folder_id}:folder_id": scratch["id"]}
    return objects, [data["id"], scratch["id"], "alice-notes"]


async def _models(app: FastAPI, alice: Client, alice_id: str) -> tuple[dict[str, str], list[str]]:
    """Two models alice saved (one for DELETE), uploads she began (one for the routes a node
    relays from her session), presigned URLs."""
    for name in ("alice-model", "old-model"):
        upload = await _upload(alice, name, "model.txt", b"alice-weights")
        await alice.put(f"/api/v1/model-uploads/{upload}/files", params={"path": "model.txt"},
                        content=b"alice-weights")
        r = await alice.post(f"/api/v1/model-uploads/{upload}/complete")
        assert r.status_code == 200, r.text
    pending = await _upload(alice, "alice-pending", "a.bin", b"{}")
    relayed = await _upload(alice, "alice-relayed", "a.bin", b"{}")
    r = await alice.post("/api/v1/models/alice-model/presign")
    assert r.status_code == 200, r.text
    get_url = r.json()["urls"]["model.txt"]
    put_url = app.state.model_store.presign(  # as an S3-like store hands out for uploads
        "PUT", f"users/{alice_id}/alice-pending/v1/a.bin", 300, "http://manager")
    objects = {"upload_id": pending, "relayed_upload_id": relayed,
               "DELETE /api/v1/models/{name}:name": "old-model"}
    for method, url in (("GET", get_url), ("PUT", put_url)):  # the key, and its signature
        objects[f"{method} /api/v1/model-store/{{key}}:key"] = url.split("/model-store/", 1)[1]
    for route in ("GET /api/v1/models/{name}", "GET /api/v1/models/{name}/files",
                  "POST /api/v1/models/{name}/presign"):
        objects[f"{route}:name"] = "alice-model"
    return objects, ["alice-model", "old-model", "alice-pending", pending, relayed]


async def _upload(client: Client, name: str, path: str, data: bytes) -> str:
    r = await client.post("/api/v1/model-uploads",
                          json={"name": name, "files": [{"path": path, "size": len(data)}]})
    assert r.status_code == 201, r.text
    return str(r.json()["upload_id"])


async def _runs(alice: Client) -> tuple[dict[str, str], list[str]]:
    """A run of alice's (not over: DELETE answers 409 to those who may see it)."""
    runs = await folder(alice, "runs")
    r = await alice.put(f"/api/v1/folders/{runs['id']}/archive", params={"path": "alice-run"},
                        content=tar_of({"train.py": b"print('hi')\n"}))
    assert r.status_code == 200, r.text
    r = await alice.post("/api/v1/runs", json={**NEW_RUN, "name": "alice-run"})
    assert r.status_code == 201, r.text
    return {"run": r.json()["id"]}, [r.json()["id"], "alice-run"]


def _fill(key: str, objects: dict[str, str], random: bool) -> str:
    """The route's path on its real objects; ``random``: its first parameter a random id."""
    method, path = key.split(" ", 1)
    for n, param in enumerate(part[1:-1] for part in path.split("/") if part.startswith("{")):
        specific = objects.get(f"{key}:{param}")
        value = str(uuid.uuid4()) if random and n == 0 else specific or objects[param]
        path = path.replace(f"{{{param}}}", value)
    return path


def _real(value: Any, objects: dict[str, str]) -> Any:
    """``value`` with each "{param}" string replaced by that real object."""
    if isinstance(value, dict):
        return {k: _real(v, objects) for k, v in value.items()}
    if isinstance(value, str) and value.startswith("{") and value.endswith("}"):
        return objects[value[1:-1]]
    return value


async def _call(client: Client, key: str, path: str, objects: dict[str, str],
                request_id: str) -> httpx.Response:
    method = key.split(" ", 1)[0]
    body = BODIES.get(key, {}) if method in ("POST", "PUT", "PATCH") else None
    return await client.request(method, path, params=_real(QUERIES.get(key), objects),
                                content=None if body is None else json.dumps(_real(body, objects)),
                                headers={"content-type": "application/json",
                                         "x-request-id": request_id})


USERNAMES = {"owner": "alice", "revoked": "alice", "other": "bob", "admin": "admin",
             "grantee": "carol"}


def _audit_row(key: str, who: str, r: httpx.Response) -> tuple[str, str] | None:
    """The (outcome, actor type) of the one audit row a call leaves; None: it leaves none."""
    method, path = key.split(" ", 1)
    if not path.startswith("/api/") or r.status_code >= 500:
        return None
    access = ACCESS[key]
    as_user = who in USERNAMES and access not in (PUBLIC, SIGNED, NODE, NODE_OBJECT)
    as_node = who in ("node", "another node") and access in (NODE, NODE_OBJECT)
    actor = "user" if as_user else "node" if as_node else "anonymous"
    if r.status_code < 400:
        return None if actions.quiet(method, path) else ("success", actor)
    code = r.json().get("code") if "json" in r.headers.get("content-type", "") else None
    if r.status_code in (413, 422) and code in ("validation_error", "too_large"):
        return None
    if key == "POST /api/v1/auth/login":
        return ("denied" if r.status_code == 429 else "failure", "anonymous")
    if r.status_code == 401:
        return ("denied", "user") if who == "revoked" and as_user else None
    if not (as_user or as_node):
        return None  # unknown callers cannot grow the log
    if r.status_code in (403, 404):
        return ("denied", actor)
    return None if method == "GET" else ("failure", actor)


def _same_404(real: httpx.Response, random: httpx.Response, real_id: str, random_id: str) -> bool:
    if real.status_code != 404 or random.status_code != 404:
        return False
    a, b = real.json(), random.json()
    return (a["code"], a["field"], a["message"].replace(real_id, "X")) == (
        b["code"], b["field"], b["message"].replace(random_id, "X"))


def reached(code: int) -> bool:
    return code not in (401, 403)


def found(code: int) -> bool:
    return code not in (401, 403, 404)


def only(*codes: int) -> Callable[[int], bool]:
    return lambda code: code in codes


class Probe:
    """One route called as each identity; ``problems`` is what went wrong (empty: all held)."""

    def __init__(self, world: World, key: str) -> None:
        self.world, self.key = world, key
        self.problems: list[str] = []
        self.real = _fill(key, world.objects, False)
        self.random = _fill(key, world.objects, True)

    async def expect(self, who: str, ok: Callable[[int], bool], path: str | None = None,
                     client: Client | None = None) -> httpx.Response:
        path = path or self.real
        request_id = f"matrix-{uuid.uuid4().hex}"
        r = await _call(client or self.world.clients[who], self.key, path, self.world.objects,
                        request_id)
        if r.status_code >= 500 or not ok(r.status_code):
            self.problems.append(f"{self.key} as {who} ({path}): {r.status_code} {r.text[:200]}")
        await self._audited(who, r, request_id)
        if who == "other" and any(secret in r.text and secret not in path
                                  for secret in self.world.secrets):  # not what it sent itself
            self.problems.append(f"{self.key} as another user leaks the owner's data: "
                                 f"{r.text[:200]}")
        return r

    async def _audited(self, who: str, r: httpx.Response, request_id: str) -> None:
        found = await rows(self.world.app, request_id=request_id)
        want = _audit_row(self.key, who, r)
        got = [(row.outcome, row.actor_type) for row in found]
        if want is not None and want[0] != "success" and got[:1] == [("success", want[1])]:
            got = got[1:]  # a step it committed before it failed (a folder made): its own row
        if r.headers.get("x-request-id") != request_id or got != ([want] if want else []):
            self.problems.append(f"{self.key} as {who}: {r.status_code}, audit rows {got}, "
                                 f"expected {[want] if want else []}")
        elif found and found[0].actor_type == "user" and \
                found[0].actor_name != USERNAMES.get(who, found[0].actor_name):
            self.problems.append(f"{self.key} as {who}: the row names {found[0].actor_name}")

    async def refused(self, *who: str, code: int = 401) -> None:
        for name in who:
            await self.expect(name, only(code))


async def _check(world: World, key: str) -> list[str]:
    """Every identity on ``key``, as its line in ``ACCESS`` says."""
    probe, access = Probe(world, key), ACCESS[key]
    if access is PUBLIC:
        await probe.expect("anonymous", reached)
    elif access is SIGNED:
        await _check_signed(probe)
    elif access in (NODE, NODE_OBJECT):
        await _check_node(probe, access)
    else:
        await probe.refused("anonymous", "revoked", "node")
        if access in (ADMIN, SCRAPE):
            await probe.refused("owner", "other", code=403)
            await probe.expect("admin", reached)
            if access is SCRAPE:
                await probe.expect("scraper", reached)
        elif probe.real == probe.random:  # USER
            for who in ("other", "owner", "admin"):
                await probe.expect(who, reached)
        else:
            await _check_object(probe, access)
    return probe.problems


async def _check_object(probe: Probe, access: Access) -> None:
    """OWNER, SELF, SHARED, OWNER_USE: a real object and a random id's."""
    strangers = ("other", "admin") if access in (SELF, SHARED) else ("other",)
    for who in strangers:
        on_real = await probe.expect(who, only(404))
        on_random = await probe.expect(who, only(404), probe.random)
        if not _same_404(on_real, on_random, *_ids(probe.real, probe.random)):
            probe.problems.append(f"{probe.key} as {who}: a real object answers unlike a "
                                  "random id")
    if access is SHARED:  # carol, whom alice's folders are shared with read-only
        reads = probe.key.startswith("GET ")
        await probe.expect("grantee", found if reads else only(403))
    await probe.expect("owner", only(404), probe.random)
    await probe.expect("owner", found)
    if access is OWNER:
        await probe.expect("admin", found)
    if access is OWNER_USE:
        await probe.expect("admin", only(403))
        await probe.expect("admin", only(404), probe.random)


async def _check_node(probe: Probe, access: Access) -> None:
    await probe.refused("anonymous", "revoked", "owner", "admin")
    await probe.expect("node", reached)
    if access is NODE_OBJECT:
        await probe.expect("another node", only(404), client=probe.world.other_node.client)


async def _check_signed(probe: Probe) -> None:
    """The URL works for whoever holds it; one altered (its signature, a later expiry) or
    signed for another object works for no one, whatever token comes with it."""
    url = probe.real
    path, query = url.split("?", 1)
    params = dict(part.split("=", 1) for part in query.split("&"))
    forged = [
        f"{path}?" + "&".join(f"{k}={v}" for k, v in {**params, **change}.items())
        for change in ({"signature": params["signature"][::-1]},
                       {"expires": str(int(params["expires"]) + 86400)})
    ] + [f"{path.rsplit('/', 1)[0]}/{uuid.uuid4()}?{query}"]
    for who in ("anonymous", "revoked", "node", "other", "owner", "admin"):
        await probe.expect(who, found, url)
        for attempt in forged:
            await probe.expect(who, only(403), attempt)


def _ids(real: str, random: str) -> tuple[str, str]:
    """The first segment where the real path and the random one differ."""
    return next((a, b) for a, b in zip(real.split("/"), random.split("/"), strict=True)
                if a != b)


def test_every_route_has_a_decision(app: FastAPI) -> None:
    routes = set(_operations(app))
    missing = sorted(routes - set(ACCESS))
    stale = sorted(set(ACCESS) - routes)
    assert not missing, f"routes without an access decision (add them to ACCESS): {missing}"
    assert not stale, f"ACCESS lists routes the API does not have: {stale}"


async def test_the_matrix_holds_for_every_route(
    app: FastAPI, admin: Client, anon: Client, make_user: UserFactory, make_agent: AgentFactory
) -> None:
    world = await _world(app, admin, anon, make_user, make_agent)
    try:
        keys = sorted(_operations(app), key=lambda k: k in LAST)
        problems = [problem for key in keys for problem in await _check(world, key)]
    finally:
        for who in ("anonymous", "revoked", "scraper"):
            await world.clients[who].aclose()
    assert not problems, "\n".join(problems)


async def test_a_class_limited_to_a_project_is_neither_visible_nor_usable_outside_it(
    admin: Client, make_user: UserFactory
) -> None:
    """A non-member naming a project's class gets the very answer of a class that does not
    exist (it was a 403 that said the class exists, beside a 422 listing every class)."""
    await make_user("alice")
    bob = await make_user("bob")
    assert (await admin.post("/api/v1/projects", json={"name": "team"})).status_code == 201
    await admin.post("/api/v1/projects/team/members", json={"username": "alice"})
    r = await admin.post("/api/v1/priority-classes",
                         json={"name": "team-class", "rank": 2, "projects": ["team"]})
    assert r.status_code == 201, r.text
    session = {"image": IMAGE}
    for route, body in (("/api/v1/sessions", session), ("/api/v1/sessions/preview", session),
                        ("/api/v1/runs/check", NEW_RUN)):
        hidden = await bob.post(route, json={**body, "priority_class": "team-class"})
        unknown = await bob.post(route, json={**body, "priority_class": "no-such-class"})
        assert hidden.status_code == unknown.status_code == 422, (route, hidden.text)
        assert hidden.json()["message"].replace("team-class", "X") == \
            unknown.json()["message"].replace("no-such-class", "X"), route
        assert "team-class" not in unknown.text, route
    assert "team-class" not in (await bob.get("/api/v1/priority-classes")).text
