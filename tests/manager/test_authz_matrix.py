"""The authorization matrix (issue 16): every route of the OpenAPI document, called as anonymous,
a user (the owner), another user, a node, a revoked token and an admin, on a real object and on
a random id. No cross-user read, write or existence leak; non-admins never reach admin routes.

``ACCESS`` is the one table of decisions, a line per route. A route the API has and the table
lacks fails the test: whoever adds a route decides who may call it, here.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from enum import Enum
from typing import Any

import httpx
from fastapi import FastAPI

from tests.manager.conftest import AgentFactory, Client, UserFactory, client_for, create, login
from tests.manager.fake_agent import FakeAgent
from tests.manager.test_e2e import wait_status


class Access(Enum):
    PUBLIC = "anyone, without a token"
    USER = "any user; answers only what the caller may see"
    OWNER = "the object's owner and admins; anyone else gets the random id's 404"
    SELF = "the caller's own object only; anyone else, admins too, gets the random id's 404"
    ADMIN = "admins only (users: 403)"
    NODE = "a node's credential only"
    NODE_OBJECT = "a node, for its own objects; another node gets the random id's 404"


PUBLIC, USER, OWNER, SELF, ADMIN = (Access.PUBLIC, Access.USER, Access.OWNER, Access.SELF,
                                    Access.ADMIN)
NODE, NODE_OBJECT = Access.NODE, Access.NODE_OBJECT

ACCESS: dict[str, Access] = {
    "GET /api/v1/health": PUBLIC,
    "POST /api/v1/auth/login": PUBLIC,
    "POST /api/v1/auth/logout": USER,
    "GET /api/v1/auth/me": USER,
    "POST /api/v1/auth/password": USER,
    "GET /api/v1/auth/tokens": USER,
    "POST /api/v1/auth/tokens": USER,
    "DELETE /api/v1/auth/tokens/{token_id}": SELF,
    "GET /api/v1/users": ADMIN,
    "POST /api/v1/users": ADMIN,
    "GET /api/v1/users/{user_id}": ADMIN,
    "PATCH /api/v1/users/{user_id}": ADMIN,
    "GET /api/v1/policies": ADMIN,
    "POST /api/v1/policies": ADMIN,
    "PUT /api/v1/policies/{policy_id}": ADMIN,
    "DELETE /api/v1/policies/{policy_id}": ADMIN,
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
    "GET /api/v1/images": USER,
    "POST /api/v1/images": ADMIN,
    "POST /api/v1/images/rescan": ADMIN,
    "GET /api/v1/images/aliases": USER,
    "POST /api/v1/images/aliases": ADMIN,
    "DELETE /api/v1/images/aliases/{name}": ADMIN,
    "PATCH /api/v1/images/{name}": ADMIN,
    "DELETE /api/v1/images/{name}": ADMIN,
    "GET /api/v1/nodes": ADMIN,
    "POST /api/v1/nodes/{node_id}/revoke": ADMIN,
    "GET /api/v1/join-tokens": ADMIN,
    "POST /api/v1/join-tokens": ADMIN,
    "DELETE /api/v1/join-tokens/{token_id}": ADMIN,
    "POST /api/v1/agents/register": PUBLIC,
    "POST /api/v1/agents/me/heartbeat": NODE,
    "GET /api/v1/agents/me/assignments": NODE,
    "POST /api/v1/agents/me/sessions/{session_id}/state": NODE_OBJECT,
    "PUT /api/v1/agents/me/requests/{request_id}": NODE_OBJECT,
}

# What a call needs beyond `{}` to get past validation (so that a refusal is about who asks),
# or to return at once (a long-poll, an event stream: a bad value ends them with a 422 once the
# caller is let in).
BODIES: dict[str, Any] = {
    "POST /api/v1/agents/me/sessions/{session_id}/state": {"status": "RUNNING"},
    "PUT /api/v1/agents/me/requests/{request_id}": {"kind": "logs"},
}
QUERIES: dict[str, dict[str, str]] = {
    "GET /api/v1/agents/me/assignments": {"wait": "0"},
    "GET /api/v1/sessions/events": {"since": "not-a-number"},
}
# Routes that end the very token they are called with run last.
LAST = ("POST /api/v1/auth/logout",)


@dataclass
class World:
    """Who calls, and the real objects of the routes' path parameters."""

    clients: dict[str, Client]
    objects: dict[str, str]  # "<route key>:<param>" or "<param>" -> a real value
    secrets: list[str]  # what must never appear in another user's answers
    other_node: FakeAgent


def _operations(app: FastAPI) -> list[str]:
    paths = app.openapi()["paths"]
    return [f"{method.upper()} {path}" for path, ops in paths.items() for method in ops]


async def _world(app: FastAPI, admin: Client, anon: Client, make_user: UserFactory,
                 make_agent: AgentFactory) -> World:
    node = await make_agent()
    other_node = await make_agent("node-2")
    spare_node = await make_agent("node-3", devices=[])
    alice, bob = await make_user("alice"), await make_user("bob")
    [s] = await create(alice, env={"ALICE_SECRET": "s3cret-value"}, name="alice-work")
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
    users = {u["username"]: u["id"] for u in (await admin.get("/api/v1/users")).json()}
    clients = {
        "anonymous": anon, "revoked": client_for(app, revoked), "owner": alice,
        "other": bob, "node": node.client, "admin": admin,
    }
    objects = {
        "session_id": s["id"], "token_id": token["id"], "user_id": users["alice"],
        "policy_id": policy["id"], "node_id": spare_node.node_id, "request_id": str(uuid.uuid4()),
        "DELETE /api/v1/join-tokens/{token_id}:token_id": join["id"],
        "DELETE /api/v1/images/aliases/{name}:name": "al",
        "PATCH /api/v1/images/{name}:name": image, "DELETE /api/v1/images/{name}:name": image,
    }
    return World(clients, objects, [s["id"], "s3cret-value", image, token["id"], "alice-work"],
                 other_node)


def _fill(key: str, objects: dict[str, str], random: bool) -> str:
    method, path = key.split(" ", 1)
    for param in [part[1:-1] for part in path.split("/") if part.startswith("{")]:
        specific = objects.get(f"{key}:{param}")
        value = str(uuid.uuid4()) if random else specific or objects[param]
        path = path.replace(f"{{{param}}}", value)
    return path


async def _call(client: Client, key: str, path: str) -> httpx.Response:
    method = key.split(" ", 1)[0]
    body = BODIES.get(key, {}) if method in ("POST", "PUT", "PATCH") else None
    return await client.request(method, path, params=QUERIES.get(key),
                                content=None if body is None else json.dumps(body),
                                headers={"content-type": "application/json"})


def _same_404(real: httpx.Response, random: httpx.Response, real_id: str, random_id: str) -> bool:
    if real.status_code != 404 or random.status_code != 404:
        return False
    a, b = real.json(), random.json()
    return (a["code"], a["field"], a["message"].replace(real_id, "X")) == (
        b["code"], b["field"], b["message"].replace(random_id, "X"))


async def _check(world: World, key: str) -> list[str]:
    """Every identity on ``key``; the list of what went wrong (empty: all held)."""
    access, c, problems = ACCESS[key], world.clients, []
    real, random = _fill(key, world.objects, False), _fill(key, world.objects, True)
    has_object = real != random

    async def expect(who: str, ok: Any, path: str = real) -> httpx.Response:
        r = await _call(c[who], key, path)
        if r.status_code >= 500 or not ok(r.status_code):
            problems.append(f"{key} as {who} ({path}): {r.status_code} {r.text[:200]}")
        if who == "other" and any(secret in r.text and secret not in path
                                  for secret in world.secrets):  # not what it sent itself
            problems.append(f"{key} as another user leaks the owner's data: {r.text[:200]}")
        return r

    def reached(code: int) -> bool:
        return code not in (401, 403)

    if access is Access.PUBLIC:
        await expect("anonymous", reached)
        return problems
    for who in ("anonymous", "revoked"):
        await expect(who, lambda code: code == 401)
    if access in (Access.NODE, Access.NODE_OBJECT):
        for who in ("owner", "admin"):
            await expect(who, lambda code: code == 401)
        await expect("node", reached)
        if access is Access.NODE_OBJECT:
            r = await _call(world.other_node.client, key, real)
            if r.status_code != 404:
                problems.append(f"{key} as another node: {r.status_code}, not 404")
        return problems
    await expect("node", lambda code: code == 401)
    if access is Access.ADMIN:
        for who in ("owner", "other"):
            await expect(who, lambda code: code == 403)
        await expect("admin", reached)
        return problems
    if not has_object:  # USER
        for who in ("other", "owner", "admin"):
            await expect(who, reached)
        return problems
    ids = (real.rsplit("/", 1)[-1], random.rsplit("/", 1)[-1])
    strangers = ("other", "admin") if access is Access.SELF else ("other",)
    for who in strangers:
        on_real = await expect(who, lambda code: code == 404)
        on_random = await expect(who, lambda code: code == 404, random)
        if not _same_404(on_real, on_random, *_ids(real, random, ids)):
            problems.append(f"{key} as {who}: a real object answers unlike a random id")
    await expect("owner", lambda code: code == 404, random)
    await expect("owner", lambda code: code not in (401, 403, 404))
    if access is Access.OWNER:
        await expect("admin", lambda code: code not in (401, 403, 404))
    return problems


def _ids(real: str, random: str, fallback: tuple[str, str]) -> tuple[str, str]:
    for a, b in zip(real.split("/"), random.split("/"), strict=True):
        if a != b:
            return a, b
    return fallback


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
        await world.clients["revoked"].aclose()
    assert not problems, "\n".join(problems)

