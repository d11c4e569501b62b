"""Sessions API: validation answers, visibility, listing, destroy."""

from __future__ import annotations

from typing import Any

import pytest

from tests.manager.conftest import AgentFactory, Client, UserFactory, create
from tests.manager.fake_agent import gpu
from tests.waits import await_for


@pytest.mark.parametrize(
    ("body", "field", "needle"),
    [
        ({"resources": {"gpu": "abc"}}, "resources.gpu", "not a number"),
        ({"resources": {"gpu": 0.333}}, "resources.gpu", "decimal places"),
        ({"resources": {"mem": "lots"}}, "resources.mem", "Memory: 'lots' is not a size"),
        ({"resources": {"cpu": 0}}, "resources.cpu", "more than zero"),
        ({"count": 101}, "count", "100"),
        ({"count": 0}, "count", "1"),
        ({"type": "daemon"}, "type", "interactive"),
        ({"name": "Bad_Name"}, "name", "lowercase"),
        ({"env": {"1BAD": "x"}}, "env", "variable name"),
        ({"image": ""}, "image", "at least 1"),
    ],
)
async def test_bad_input_is_a_422_with_the_field(
    admin: Client, body: dict[str, Any], field: str, needle: str
) -> None:
    r = await admin.post("/api/v1/sessions", json={"image": "python:3.11", **body})
    assert r.status_code == 422, r.text
    answer = r.json()
    assert set(answer) == {"code", "message", "field"}
    assert answer["code"] == "validation_error" and answer["field"] == field
    assert needle in answer["message"], answer["message"]


async def test_memory_below_what_docker_starts_a_container_with_is_refused(
    admin: Client,
) -> None:
    # Docker refuses a container with less than 6 MiB: refused here, not on the node later
    answer = await create(admin, expect=422, resources={"mem": "1k"})
    assert answer == {"code": "validation_error", "field": "resources.mem",
                      "message": "Memory: '1k' is below the minimum 6 MiB"}
    run = await admin.post("/api/v1/runs/check", json={
        "name": "tiny", "script": "t.py", "image": "python:3.11", "resources": {"mem": 4096}})
    assert (run.status_code, run.json()["field"]) == (422, "resources.mem"), run.text
    [made] = await create(admin, resources={"mem": "6m"})
    assert made["resources"]["mem"] == 6 * 1024**2


async def test_broken_json_is_a_422_not_a_500(admin: Client) -> None:
    r = await admin.post(
        "/api/v1/sessions", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert r.status_code == 422 and r.json()["code"] == "validation_error"


async def test_unknown_image_is_refused(admin: Client) -> None:
    answer = await create(admin, expect=404, image="nosuch:1")
    assert answer["code"] == "unknown_image" and answer["field"] == "image"
    assert "nosuch:1" in answer["message"]


async def test_image_from_a_node_or_the_allow_list_is_accepted(
    admin: Client, make_agent: AgentFactory
) -> None:
    await make_agent(images=["torch:2.3"])
    await create(admin, image="torch:2.3")
    assert (await admin.post("/api/v1/images", json={"name": "jax:0.4"})).status_code == 201
    await create(admin, image="jax:0.4")
    names = {i["name"]: i["sources"] for i in (await admin.get("/api/v1/images")).json()}
    assert names["torch:2.3"] == ["node-1"] and names["jax:0.4"] == ["allowed"]


async def test_impossible_request_is_refused(admin: Client, make_agent: AgentFactory) -> None:
    await make_agent(devices=[gpu(0), gpu(1)])
    answer = await create(admin, expect=422, resources={"gpu": 1.5})
    assert answer["code"] == "impossible_request" and "whole" in answer["message"]
    answer = await create(admin, expect=422, resources={"gpu": 4})
    assert answer["code"] == "impossible_request" and "could ever hold" in answer["message"]


async def test_quota_that_can_never_fit_is_refused(
    make_user: UserFactory, make_agent: AgentFactory
) -> None:
    await make_agent()
    user = await make_user(policy={"max_gpu": 0.5})
    answer = await create(user, expect=422, resources={"gpu": 1})
    assert answer["code"] == "quota_exceeded" and "quota" in answer["message"]


async def test_priority_is_bounded_by_policy(make_user: UserFactory) -> None:
    plain = await make_user()
    assert (await create(plain, expect=422, priority=5))["code"] == "priority_not_allowed"
    vip = await make_user(policy={"max_priority": 10})
    assert (await create(vip, priority=10))[0]["priority"] == 10


async def test_users_see_only_their_own_sessions(admin: Client, make_user: UserFactory) -> None:
    alice, bob = await make_user("alice"), await make_user("bob")
    [mine] = await create(alice, name="mine")
    await create(bob, count=2)
    r = await bob.get(f"/api/v1/sessions/{mine['id']}")
    assert r.status_code == 404 and r.json()["code"] == "not_found"
    assert (await bob.delete(f"/api/v1/sessions/{mine['id']}")).status_code == 404
    assert (await bob.get(f"/api/v1/sessions/{mine['id']}/logs")).status_code == 404
    assert (await bob.get("/api/v1/sessions")).json()["total"] == 2
    assert (await alice.get("/api/v1/sessions")).json()["total"] == 1
    assert (await admin.get("/api/v1/sessions")).json()["total"] == 3
    by_owner = (await admin.get("/api/v1/sessions", params={"owner": "alice"})).json()
    assert [s["name"] for s in by_owner["items"]] == ["mine"]
    assert (await bob.get("/api/v1/sessions", params={"owner": "alice"})).status_code == 403
    destroyed = (await bob.post("/api/v1/sessions/destroy", json={"ids": [mine["id"]]})).json()
    assert destroyed == []  # not hers to destroy, and not revealed


async def test_list_filters_and_pages(admin: Client) -> None:
    created = await create(admin, count=5, name="job")
    assert [s["name"] for s in created] == [f"job-{i}" for i in range(1, 6)]
    await admin.delete(f"/api/v1/sessions/{created[0]['id']}")
    page = (await admin.get("/api/v1/sessions", params={"limit": 2, "offset": 1})).json()
    assert page["total"] == 5 and page["limit"] == 2 and len(page["items"]) == 2
    cancelled = (await admin.get("/api/v1/sessions", params={"status": "CANCELLED"})).json()
    assert [s["id"] for s in cancelled["items"]] == [created[0]["id"]]
    both = await admin.get(
        "/api/v1/sessions", params=[("status", "CANCELLED"), ("status", "PENDING")]
    )
    assert both.json()["total"] == 5
    assert (await admin.get("/api/v1/sessions", params={"status": "NOPE"})).status_code == 422


async def test_list_by_exact_name_newest_first(admin: Client, make_user: UserFactory) -> None:
    [old] = await create(admin, name="train")
    await create(admin, name="train-x")  # a longer name is not a match
    await create(admin, count=2, name="train")  # train-1, train-2
    [new] = await create(admin, name="train")
    page = (await admin.get("/api/v1/sessions", params={"name": "train"})).json()
    assert page["total"] == 2
    assert [s["id"] for s in page["items"]] == [new["id"], old["id"]]
    first = (await admin.get("/api/v1/sessions", params={"name": "train", "limit": 1})).json()
    assert [s["id"] for s in first["items"]] == [new["id"]] and first["total"] == 2
    other = await make_user("carol")
    assert (await other.get("/api/v1/sessions", params={"name": "train"})).json()["total"] == 0
    [hers] = await create(other, name="train")
    mine = (await other.get("/api/v1/sessions", params={"name": "train"})).json()
    assert [s["id"] for s in mine["items"]] == [hers["id"]]
    none = (await admin.get("/api/v1/sessions", params={"name": "nope"})).json()
    assert none == {"items": [], "total": 0, "limit": 100, "offset": 0, "next": None}


async def test_pages_walked_with_next_see_each_session_once(
    admin: Client, make_user: UserFactory
) -> None:
    created = await create(admin, count=7, name="walk")
    bob = await make_user("bob")
    await create(bob, count=2, name="his")  # not hers to see: never on her pages
    alice = await make_user("alice")
    [theirs] = await create(alice, name="hers")
    seen: list[str] = []
    params: dict[str, object] = {"limit": 3, "owner": "admin"}
    newer = 0
    while True:
        page = (await admin.get("/api/v1/sessions", params=params)).json()
        assert page["total"] == 7 + newer and len(page["items"]) <= 3
        seen += [s["id"] for s in page["items"]]
        if page["next"] is None:
            break
        params = {"limit": 3, "owner": "admin", "after": page["next"]}
        await create(admin, name="newer")  # created meanwhile: before the cursor, not on a page
        newer += 1
    assert seen == [s["id"] for s in reversed(created)]  # newest first, each once, none skipped
    # A user's cursor walks her own sessions only, whatever position it names.
    mine = (await alice.get("/api/v1/sessions", params={"limit": 1})).json()
    assert [s["id"] for s in mine["items"]] == [theirs["id"]] and mine["next"] is None
    first = (await admin.get("/api/v1/sessions", params={"limit": 1})).json()
    after_admin = await alice.get("/api/v1/sessions", params={"after": first["next"]})
    assert [s["owner"] for s in after_admin.json()["items"]] in ([], ["alice"])
    for bad in ("not-a-cursor", "eA", "MjAyNnx4"):  # junk, "x", "2026|x"
        r = await admin.get("/api/v1/sessions", params={"after": bad})
        assert r.status_code == 422, bad
        assert '"after" is not a position this listing gave' in r.json()["message"]
    both = await admin.get("/api/v1/sessions", params={"after": first["next"], "offset": 1})
    assert both.status_code == 422 and "not both" in both.text


async def test_a_stop_says_who_stopped_it(admin: Client, make_user: UserFactory) -> None:
    """Issue 34: an owner's own stop read "destroyed by admin"; it names who and in what role."""
    alice = await make_user("alice")
    [mine, other] = await create(alice, count=2)
    await alice.delete(f"/api/v1/sessions/{mine['id']}")
    await admin.delete(f"/api/v1/sessions/{other['id']}")
    for session, reason in ((mine, "stopped by alice"), (other, "stopped by admin admin")):
        body = (await alice.get(f"/api/v1/sessions/{session['id']}")).json()
        assert (body["status"], body["history"][-1]["reason"]) == ("CANCELLED", reason)


async def test_destroying_a_pending_session_cancels_it_at_once(admin: Client) -> None:
    [s] = await create(admin)
    r = await admin.delete(f"/api/v1/sessions/{s['id']}")
    assert r.json()["status"] == "CANCELLED"
    again = await admin.delete(f"/api/v1/sessions/{s['id']}")  # idempotent
    assert again.status_code == 200 and again.json()["status"] == "CANCELLED"
    body = (await admin.get(f"/api/v1/sessions/{s['id']}")).json()
    assert [(h["from_status"], h["status"]) for h in body["history"]] == [
        (None, "PENDING"), ("PENDING", "CANCELLED")
    ]
    assert body["history"][1]["reason"] == "stopped by admin"


async def test_pending_without_nodes_says_why(admin: Client) -> None:
    [s] = await create(admin, resources={"gpu": 0.5})

    async def said() -> dict[str, Any] | None:  # once the scheduler's pass looked at it
        body: dict[str, Any] = (await admin.get(f"/api/v1/sessions/{s['id']}")).json()
        return body if body["wait_code"] else None

    body = await await_for(said, 10, "a reason for the wait")
    assert body["status"] == "PENDING" and body["wait_code"] == "no_node"
    assert body["queue_position"] == 1 and body["status_reason"]


async def test_openapi_and_docs(anon: Client) -> None:
    spec = (await anon.get("/api/v1/openapi.json")).json()
    for path in ("/api/v1/sessions", "/api/v1/sessions/{session_id}", "/api/v1/sessions/events",
                 "/api/v1/agents/me/assignments", "/api/v1/agents/register"):
        assert path in spec["paths"]
    for path, method in (("/api/v1/sessions/{session_id}/exec", "post"),
                         ("/api/v1/sessions/{session_id}/logs", "get"),
                         ("/api/v1/agents/me/requests/{request_id}", "put")):
        assert spec["paths"][path][method]["description"], path
    docs = await anon.get("/docs")
    assert docs.status_code == 200 and "/api/v1/openapi.json" in docs.text
