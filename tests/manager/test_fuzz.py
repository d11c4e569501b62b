"""Fuzzing the API (issue 16): hypothesis draws requests for every operation of the OpenAPI
document, from its own schemas, mixed with hostile values (lone surrogates, NUL and control
characters, huge and negative integers, long strings, wrong types, real ids of other objects),
and the manager must never answer a 5xx. The world holds what once made one (issue 35): a
file name that is not UTF-8 in a folder, folder names to rename onto, names at Docker's
255-character limit; streamed bodies come with byte counts that disagree with their length.

Bounded: ``GPUSLICE_FUZZ_EXAMPLES`` examples (default 12), each calling every operation once;
derandomized so CI is repeatable (``GPUSLICE_FUZZ_SEED`` picks another sequence).
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from fastapi import FastAPI
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from gpuslice.manager.settings import ManagerSettings
from tests.manager.conftest import AgentFactory, Client, UserFactory, create
from tests.manager.folder_helpers import folder, tar_of
from tests.manager.helpers import wait_status

EXAMPLES = int(os.environ.get("GPUSLICE_FUZZ_EXAMPLES", "12"))
SEED = int(os.environ.get("GPUSLICE_FUZZ_SEED", "16"))
# An endless answer (the event stream) cannot be fuzzed through an in-process transport; the
# edge tests cover its parameters. Logging out would end the fuzzing admin's own token.
SKIP = {"GET /api/v1/sessions/events", "POST /api/v1/auth/logout"}
FIXED_QUERY = {"GET /api/v1/agents/me/assignments": {"wait": "0"}}  # a long-poll: answer now
# The sweep (every operation once on the world as it is, before the drawn requests): what
# once made a 5xx, for certain rather than by chance. Bodies not named here are `{}`.
SWEEP_QUERY = {
    "PUT /api/v1/folders/{folder_id}/content": {"path": "f.bin", "size": "3"},  # body: 8 bytes
    "GET /api/v1/folders/{folder_id}/content": {"raw_path": "bad%FFname"},
}
SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFjR3aj3zxPSbiTmxDqEC7FU4nqDfJS9SVZXh3IW9U9b f"
RUN = {"name": "fuzz-run", "script": "train.py", "image": "python:3.11"}
SWEEP_BODY: dict[str, Any] = {
    "PATCH /api/v1/folders/{folder_id}": {"name": "fuzz-b"},  # a name taken: a 409
    "POST /api/v1/images": {"name": "a" * 249},  # 256 characters with ":latest"
    "PUT /api/v1/folders/{folder_id}/grants": {"user": "nobody-here"},
    # The routes added since issue 16's matrix, each past validation onto a real object
    # ("fuzz-b" names the preset, class and project the world makes).
    "POST /api/v1/sessions": {"image": "python:3.11", "priority_class": "fuzz-b"},
    "POST /api/v1/sessions/preview": {"image": "python:3.11", "priority_class": "fuzz-b"},
    "POST /api/v1/runs/check": {**RUN, "priority_class": "fuzz-b"},
    "POST /api/v1/presets": {"name": "fuzz-p", "cpu": 1, "mem": "1g"},
    "PATCH /api/v1/presets/{name}": {"cpu": 0.5},
    "POST /api/v1/priority-classes": {"name": "fuzz-c", "rank": 3, "projects": ["fuzz-b"]},
    "PATCH /api/v1/priority-classes/{name}": {"rank": 4, "any_project": True},
    "POST /api/v1/projects": {"name": "fuzz-p"},
    "PUT /api/v1/projects/{name}": {"max_gpu": 1, "description": "fuzzed"},
    "POST /api/v1/projects/{name}/rename": {"name": "fuzz-p"},  # a name taken: a 409
    "POST /api/v1/projects/{name}/members": {"username": "alice"},
    "POST /api/v1/ssh-keys": {"key": SSH_KEY},  # the admin's own, already there: a 409
    "POST /api/v1/notifications/channels": {"kind": "webhook", "target": "http://[::1]:9/x"},
    "PATCH /api/v1/notifications/channels/{channel_id}": {"events": ["finished"]},
    "PUT /api/v1/nodes/{node}/group": {"group": "fuzz-g"},
    "POST /api/v1/agents/me/sessions/{session_id}/run/saving": {"script_s": 1.5},
}

HOOK = "http://127.0.0.1:9/hook"  # allowed below; nothing listens: a test send fails fast


@pytest.fixture(name="settings")  # `settings` is also hypothesis's
def _allow_hook(settings: ManagerSettings) -> ManagerSettings:
    """The test settings, with the admin's webhook (127.0.0.1) allowed."""
    notify = settings.notify.model_copy(update={"allowed_targets": ["127.0.0.1/32"]})
    return settings.model_copy(update={"notify": notify})


HOSTILE_TEXT = st.sampled_from([
    "\ud800", "a\udfffb", "\x00", "nul\x00led", "\x07\x08\x1b[31m", "\u202ertl", "\x85",
    "x" * 5000, "'; DROP TABLE users; --", "../../../etc/passwd", "%00%ff", "😀" * 10, " ",
    "a" * 249, "a" * 255, "bad%FFname", "%2E%2E/x", "bad\ufffdname",
    "", "null", "0", "-1", "1e400", "NaN", "u/alice/secret:1", "gpuslice/base:0.1.0",
])
HOSTILE_INT = st.sampled_from([2**63, -(2**63) - 1, 2**64, 10**30, -1, 0, 2**31, 2**63 - 1,
                               -(2**31)])
HOSTILE = st.one_of(
    HOSTILE_TEXT, HOSTILE_INT, st.none(), st.booleans(),
    st.floats(allow_nan=True, allow_infinity=True), st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def _resolve(schema: dict[str, Any], components: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = components[schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def valid(schema: dict[str, Any], components: dict[str, Any], real: st.SearchStrategy[str],
          depth: int = 0) -> st.SearchStrategy[Any]:
    """Values following ``schema`` (loosely: bounds and patterns are hints, not rules)."""
    schema = _resolve(schema, components)
    if depth > 6:
        return st.none()
    for combo in ("anyOf", "oneOf", "allOf"):
        if combo in schema:
            return st.one_of(*(valid(s, components, real, depth + 1) for s in schema[combo]))
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "const" in schema:
        return st.just(schema["const"])
    kind = schema.get("type")
    if kind == "string":
        return st.one_of(real, st.text(max_size=schema.get("maxLength", 40) or 40))
    if kind == "integer":
        return st.integers(schema.get("minimum", -5), schema.get("maximum", 10**6))
    if kind == "number":
        return st.floats(schema.get("minimum", -5), schema.get("maximum", 1e6),
                         allow_nan=False)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        items = schema.get("items", {})
        return st.lists(any_value(items, components, real, depth + 1), max_size=4)
    if kind == "object" or "properties" in schema:
        return _object(schema, components, real, depth)
    return HOSTILE


def any_value(schema: dict[str, Any], components: dict[str, Any], real: st.SearchStrategy[str],
              depth: int = 0) -> st.SearchStrategy[Any]:
    """Mostly valid values, sometimes hostile ones."""
    return st.one_of(valid(schema, components, real, depth), valid(schema, components, real,
                                                                   depth), HOSTILE)


def _object(schema: dict[str, Any], components: dict[str, Any], real: st.SearchStrategy[str],
            depth: int) -> st.SearchStrategy[Any]:
    properties = schema.get("properties", {})
    required = set(schema.get("required", ()))
    fields = {name: any_value(sub, components, real, depth + 1)
              for name, sub in properties.items()}
    extra = schema.get("additionalProperties")
    base = st.fixed_dictionaries(
        {k: v for k, v in fields.items() if k in required},
        optional={k: v for k, v in fields.items() if k not in required},
    )
    if isinstance(extra, dict):
        more = st.dictionaries(st.one_of(st.text(max_size=8), HOSTILE_TEXT),
                               any_value(extra, components, real, depth + 1), max_size=3)
        return st.builds(lambda a, b: {**b, **a}, base, more)
    return base


def _operations(doc: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(method.upper(), path, op) for path, ops in doc["paths"].items()
            for method, op in ops.items() if f"{method.upper()} {path}" not in SKIP]


def request_for(method: str, path: str, op: dict[str, Any], components: dict[str, Any],
                real: st.SearchStrategy[str]) -> st.SearchStrategy[dict[str, Any]]:
    params = op.get("parameters", [])
    path_values = {p["name"]: st.one_of(real, HOSTILE_TEXT.filter(lambda s: "/" not in s),
                                        st.just(str(uuid.uuid4())))
                   for p in params if p["in"] == "path"}
    query = {p["name"]: any_value(p.get("schema", {}), components, real)
             for p in params if p["in"] == "query"}
    body_schema = (((op.get("requestBody") or {}).get("content") or {})
                   .get("application/json") or {}).get("schema")
    body = any_value(body_schema, components, real) if body_schema else st.none()
    if op.get("x-gpuslice-streamed-body"):
        # Raw bytes whose length mostly disagrees with the size and offset announced.
        body = st.binary(max_size=40)
        query.update({name: st.one_of(st.integers(0, 48), query[name])
                      for name in ("size", "offset") if name in query})
    return st.fixed_dictionaries({
        "path": st.fixed_dictionaries(path_values),
        "query": st.fixed_dictionaries({}, optional=query),
        "body": body,
    })


async def _send(client: Client, method: str, path: str, drawn: dict[str, Any],
                key: str) -> httpx.Response:
    for name, value in drawn["path"].items():
        path = path.replace(f"{{{name}}}", _quote(str(value)))
    params = {k: json.dumps(v) if isinstance(v, dict | list) else str(v)
              for k, v in drawn["query"].items()}
    params.update(FIXED_QUERY.get(key, {}))
    query = "&".join(f"{_quote(k)}={_quote(v)}" for k, v in params.items())
    content, kind = None, "application/json"
    if isinstance(drawn["body"], bytes):
        content, kind = drawn["body"], "application/octet-stream"
    elif drawn["body"] is not None or method in ("POST", "PUT", "PATCH"):
        content = json.dumps(drawn["body"]).encode()  # ASCII: lone surrogates as \\udxxx
    return await client.request(method, f"{path}?{query}" if query else path, content=content,
                                headers={"content-type": kind})


def _quote(value: str) -> str:
    """Percent-encoded UTF-8, lone surrogates included (as a hostile client would send)."""
    return quote(value.encode("utf-8", "surrogatepass"), safe="")


async def _odd_folders(app: FastAPI, admin: Client) -> list[str]:
    """Two folders of the fuzzing admin, the first holding a file whose name is not UTF-8
    (as a session writes it): their ids, their names (to rename onto), that name's raw form."""
    made = []
    for name in ("fuzz-a", "fuzz-b"):
        r = await admin.post("/api/v1/folders", json={"name": name})
        assert r.status_code == 201, r.text
        made.append(r.json())
    root = app.state.settings.storage_root
    top = os.fsencode(root / "users" / made[0]["owner_id"] / made[0]["id"])
    with open(top + b"/bad\xffname", "wb") as out:
        out.write(b"x")
    return [made[0]["id"], made[1]["id"], "fuzz-a", "fuzz-b", "bad%FFname"]


async def _added_objects(admin: Client, alice: Client) -> tuple[str, str, str]:
    """What the routes added since the matrix act on: a preset, a project with alice in it and
    a class limited to it (all "fuzz-b"), the admin's SSH key, alice's RUNNING run: the run's
    id, the key's and the admin's webhook channel's."""
    for route, body in (("presets", {"name": "fuzz-b", "cpu": 1, "mem": "1g"}),
                        ("projects", {"name": "fuzz-b"}),
                        ("projects/fuzz-b/members", {"username": "alice"}),
                        ("priority-classes", {"name": "fuzz-b", "rank": 2,
                                              "projects": ["fuzz-b"]})):
        r = await admin.post(f"/api/v1/{route}", json=body)
        assert r.status_code in (200, 201), r.text
    r = await admin.post("/api/v1/ssh-keys", json={"key": SSH_KEY})
    assert r.status_code == 201, r.text
    key = r.json()["id"]
    r = await admin.post("/api/v1/notifications/channels", json={"kind": "webhook",
                                                                 "target": HOOK})
    assert r.status_code == 201, r.text
    hook = r.json()["id"]
    runs = await folder(alice, "runs")
    r = await alice.put(f"/api/v1/folders/{runs['id']}/archive", params={"path": "fuzz-run"},
                        content=tar_of({"train.py": b"print('hi')\n"}))
    assert r.status_code == 200, r.text
    r = await alice.post("/api/v1/runs", json=RUN)
    assert r.status_code == 201, r.text
    await wait_status(alice, r.json()["id"], {"RUNNING"})
    return r.json()["id"], key, hook


async def test_no_request_makes_the_manager_fail(
    app: FastAPI, admin: Client, anon: Client, make_user: UserFactory, make_agent: AgentFactory
) -> None:
    node = await make_agent()
    alice = await make_user("alice")
    [s] = await create(alice, name="fuzzed")
    await wait_status(alice, s["id"], {"RUNNING"})
    users = {u["username"]: u["id"] for u in (await admin.get("/api/v1/users")).json()}
    policy = (await admin.post("/api/v1/policies", json={"name": "fuzz"})).json()
    token = (await alice.post("/api/v1/auth/tokens", json={"name": "t"})).json()
    odd = await _odd_folders(app, admin)
    run, key, hook = await _added_objects(admin, alice)
    spare = await make_agent("node-2", devices=[], cpu=1, mem=1)  # the one the sweep revokes
    real = st.sampled_from([s["id"], users["alice"], policy["id"], token["id"], node.node_id,
                            "python:3.11", "fuzzed", "alice", "small", *odd])
    doc = app.openapi()
    components = doc.get("components", {}).get("schemas", {})
    operations = [(m, p, op, request_for(m, p, op, components, real))
                  for m, p, op in _operations(doc)]
    failures: list[str] = []

    def caller(key: str) -> Client:
        if "/agents/me/" in key:
            return node.client
        return anon if key in ("POST /api/v1/auth/login", "POST /api/v1/agents/register") \
            else admin

    loop = asyncio.get_running_loop()

    # Hypothesis drives a plain function; it runs in a thread and hands each request to this
    # test's event loop, where the app lives.
    @seed(SEED)
    @settings(max_examples=EXAMPLES, deadline=None, derandomize="GPUSLICE_FUZZ_SEED" not in
              os.environ, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                     HealthCheck.data_too_large])
    @given(data=st.data())
    def every_operation(data: st.DataObject) -> None:
        for method, path, _op, strategy in operations:
            key = f"{method} {path}"
            drawn = data.draw(strategy, label=key)
            sent = _send(caller(key), method, path, drawn, key)
            r = asyncio.run_coroutine_threadsafe(sent, loop).result(timeout=300)
            if r.status_code >= 500:
                failures.append(f"{key} {drawn!r}: {r.status_code} {r.text[:300]}")
        assert not failures, "\n".join(failures)

    world = {"session_id": s["id"], "folder_id": odd[0], "user": "alice",
             "user_id": users["alice"], "policy_id": policy["id"], "token_id": token["id"],
             "node_id": node.node_id, "name": "fuzz-b", "node": node.node_id, "run": run,
             "key_id": key, "username": "alice", "channel_id": hook,
             "POST /api/v1/agents/me/sessions/{session_id}/run/saving:session_id": run,
             "POST /api/v1/nodes/{node_id}/revoke:node_id": spare.node_id}
    for method, path, op, _strategy in operations:
        key = f"{method} {path}"
        r = await _send(caller(key), method, path, _sweep(key, op, world), key)
        if r.status_code >= 500:
            failures.append(f"{key} (the sweep): {r.status_code} {r.text[:300]}")
    assert not failures, "\n".join(failures)
    await asyncio.to_thread(every_operation)
    assert (await admin.get("/api/v1/health")).status_code == 200


async def test_a_model_file_of_any_length_is_its_size_or_a_422(make_user: UserFactory) -> None:
    """A model file of another length than announced (fewer or more bytes, or none) is the
    sender's mistake: 422 saying both sizes, never a 5xx; the announced length is a 204."""
    alice = await make_user("alice")
    loop = asyncio.get_running_loop()

    async def send(announced: int, sent: int) -> httpx.Response:
        r = await alice.post("/api/v1/model-uploads", json={
            "name": "fuzzed", "files": [{"path": "w.bin", "size": announced}]})
        assert r.status_code == 201, r.text
        return await alice.put(f"/api/v1/model-uploads/{r.json()['upload_id']}/files",
                               params={"path": "w.bin"}, content=b"x" * sent)

    @seed(SEED)
    @settings(max_examples=max(EXAMPLES, 12), deadline=None, database=None,
              derandomize="GPUSLICE_FUZZ_SEED" not in os.environ,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(announced=st.integers(0, 3 * 1024 * 1024), sent=st.integers(0, 3 * 1024 * 1024))
    def any_length(announced: int, sent: int) -> None:
        r = asyncio.run_coroutine_threadsafe(send(announced, sent), loop).result(timeout=300)
        if sent == announced:
            assert r.status_code == 204, r.text
            return
        assert r.status_code == 422 and r.json()["code"] == "upload_size_mismatch", r.text
        came = str(sent) if sent < announced else f"more than {announced}"
        assert f"{announced} bytes were announced and {came} came" in r.json()["message"]

    await asyncio.to_thread(any_length)


def _sweep(key: str, op: dict[str, Any], world: dict[str, str]) -> dict[str, Any]:
    """One request of the sweep: the world's objects by parameter name, no optional query."""
    path = {p["name"]: world.get(f"{key}:{p['name']}", world.get(p["name"], str(uuid.uuid4())))
            for p in op.get("parameters", []) if p["in"] == "path"}
    body: Any = SWEEP_BODY.get(key, {})
    if op.get("x-gpuslice-streamed-body"):
        body = b"8 bytes!"  # more than any size the sweep announces
    return {"path": path, "query": SWEEP_QUERY.get(key, {}), "body": body}
