"""Image names (issue 16, findings 3 and 4): a user's commits live in u/<user>/…, so they never
squat a public name; private images are invisible to others in every answer."""

from __future__ import annotations

import pytest
from fastapi import FastAPI

from gpuslice.common.image_refs import user_namespace
from gpuslice.manager.db.models import ImageRow
from tests.manager.conftest import AgentFactory, Client, UserFactory, create
from tests.manager.helpers import commit, running_session, wait_status


async def test_a_commit_cannot_squat_a_public_name(
    admin: Client, make_user: UserFactory, make_agent: AgentFactory
) -> None:
    agent = await make_agent()
    alice, bob = await make_user("alice"), await make_user("bob")
    s = await running_session(alice)
    r = await commit(alice, s["id"], "python:3.12")
    assert r.status_code == 200, r.text
    assert r.json()["image"]["name"] == "u/alice/python:3.12"
    assert agent.committed[-1]["ask"]["reference"] == "u/alice/python:3.12"
    # the admin later allows the public python:3.12: no clash, and bob runs the public one
    r = await admin.post("/api/v1/images", json={"name": "python:3.12"})
    assert r.status_code == 201, r.text
    [b] = await create(bob, image="python:3.12")
    assert b["image"] == "python:3.12"
    await wait_status(bob, b["id"], {"RUNNING"})
    delivered = {a["session_id"]: a["image"] for x in agent.seen for a in x["sessions"]}
    assert delivered[b["id"]] == "python:3.12"
    # nobody may name an image in the users' namespace on the allow list
    r = await admin.post("/api/v1/images", json={"name": "u/alice/python:3.12"})
    assert r.status_code == 409 and r.json()["code"] == "reserved_name"


async def test_allowing_a_legacy_private_image_warns(app: FastAPI, admin: Client,
                                                     make_user: UserFactory) -> None:
    """A private image committed under a public-looking name before namespaces existed."""
    await make_user("alice")
    alice_id = next(u["id"] for u in (await admin.get("/api/v1/users")).json()
                    if u["username"] == "alice")
    async with app.state.sessionmaker() as db:
        db.add(ImageRow(name="python:3.13", labels={}, public=False, owner_id=alice_id,
                     origin_session_id="s-1"))
        await db.commit()
    r = await admin.post("/api/v1/images", json={"name": "python:3.13"})
    assert r.status_code == 409 and r.json()["code"] == "image_private", r.text
    assert "alice" in r.json()["message"] and "s-1" in r.json()["message"]


async def test_others_private_names_do_not_leak_through_commits(
    admin: Client, make_user: UserFactory, make_agent: AgentFactory
) -> None:
    await make_agent()
    alice, bob = await make_user("alice"), await make_user("bob")
    sa, sb = await running_session(alice), await running_session(bob)
    assert (await commit(alice, sa["id"], "env:1")).status_code == 200
    # bob's same name is his own image: no 409 that would reveal alice's
    r = await commit(bob, sb["id"], "env:1")
    assert r.status_code == 200 and r.json()["image"]["name"] == "u/bob/env:1"
    # and he cannot write into alice's namespace; the answer says nothing of her images
    for name in ("u/alice/env:1", "u/alice/other:1"):
        r = await commit(bob, sb["id"], name)
        assert r.status_code == 422 and "u/bob/" in r.json()["message"]
        assert "exists" not in r.json()["message"]


async def test_aliases_of_private_images_are_invisible_to_others(
    admin: Client, make_user: UserFactory, make_agent: AgentFactory
) -> None:
    await make_agent()
    alice, bob = await make_user("alice"), await make_user("bob")
    s = await running_session(alice)
    assert (await commit(alice, s["id"], "secret-project:1")).status_code == 200
    private = "u/alice/secret-project:1"
    for name, ref in (("sp", private), ("py", "python:3.11")):
        r = await admin.post("/api/v1/images/aliases", json={"name": name, "reference": ref})
        assert r.status_code == 201, r.text
    seen = {c: {a["name"] for a in (await c.get("/api/v1/images/aliases")).json()}
            for c in (alice, bob, admin)}
    assert seen[alice] == seen[admin] == {"sp", "py"}
    assert seen[bob] == {"py"}
    refused = await create(bob, expect=404, image="sp")
    assert "secret-project" not in refused["message"] and "u/alice" not in refused["message"]
    unknown = await create(bob, expect=404, image="nosuch")
    assert refused["message"].replace("'sp'", "'X'") == unknown["message"].replace(
        "'nosuch'", "'X'")  # alike, but for the name asked for
    await running_session(alice, image="sp")  # the owner still launches it by alias


async def test_publishing_says_what_it_exposes(
    admin: Client, make_user: UserFactory, make_agent: AgentFactory
) -> None:
    await make_agent()
    alice = await make_user("alice")
    s = await running_session(alice, name="train")
    assert (await commit(alice, s["id"], "env:1")).status_code == 200
    r = await admin.patch("/api/v1/images/u/alice/env:1", json={"public": True})
    assert r.status_code == 200, r.text
    exposes = r.json()["exposes"]
    assert f"session {s['id']} of alice" in exposes and "readable by anyone" in exposes
    r = await admin.patch("/api/v1/images/u/alice/env:1", json={"public": False})
    assert r.json()["exposes"] is None


@pytest.mark.parametrize(
    ("username", "namespace"),
    [("alice", "u/alice"), ("bob.smith", "u/bob.smith"), ("_svc", "u/05f737663"),
     ("a-", "u/0612d"), ("x..y", "u/0782e2e79")],
)
def test_every_user_has_a_namespace_of_their_own(username: str, namespace: str) -> None:
    assert user_namespace(username) == namespace
