"""Commit a running session into a private image: through the agent, with limits and publish."""

from __future__ import annotations

from tests.manager.conftest import AgentFactory, Client, UserFactory, create
from tests.manager.fake_agent import FakeAgent
from tests.manager.helpers import commit, running_session, wait_status


async def _names(client: Client) -> set[str]:
    return {i["name"] for i in (await client.get("/api/v1/images")).json()}


async def test_commit_makes_a_private_image_of_the_owner(
    admin: Client, make_user: UserFactory, make_agent: AgentFactory
) -> None:
    agent: FakeAgent = await make_agent()
    alice, bob = await make_user("alice"), await make_user("bob")
    s = await running_session(alice, name="work")
    r = await commit(alice, s["id"], "env")
    assert r.status_code == 200, r.text
    answer = r.json()
    assert "storage folders are not part of the image" in answer["note"]
    image = answer["image"]
    assert image["name"] == "u/alice/env:work"  # her namespace; the tag: the session's name
    assert not image["public"] and image["owner"] == "alice"
    assert image["origin_session"] == s["id"] and image["nodes"] == ["node-1"]
    [request] = agent.committed
    # Issue 34, finding 3: titled as hers, naming its parent (the fake node's python:3.11
    # has no title label: its name), not the parent's own title
    assert request["ask"]["labels"] == {
        "gpuslice.image.owner": "alice", "gpuslice.image.origin-session": s["id"],
        "gpuslice.image.title": "alice's custom image (from python:3.11)",
    }
    assert image["title"] == "alice's custom image (from python:3.11)"
    assert "u/alice/env:work" in await _names(alice)
    assert "u/alice/env:work" in await _names(admin)
    assert "u/alice/env:work" not in await _names(bob)
    refused = await create(bob, expect=404, image="u/alice/env:work")
    assert refused["code"] == "unknown_image"
    await agent.heartbeat()  # the node now reports it too: still private
    assert "u/alice/env:work" not in await _names(bob)
    await running_session(alice, image="u/alice/env:work")
    r = await commit(alice, s["id"], "u/alice/env:work")  # her own image, named in full
    assert r.status_code == 409 and r.json()["code"] == "image_exists"
    r = await admin.patch("/api/v1/images/u/alice/env:work", json={"public": True})
    assert r.status_code == 200 and r.json()["public"]
    await running_session(bob, image="u/alice/env:work")


async def test_only_owner_or_admin_may_commit_and_only_running(
    admin: Client, make_user: UserFactory, make_agent: AgentFactory
) -> None:
    agent = await make_agent(auto_run=False)
    alice, bob = await make_user("alice"), await make_user("bob")
    [s] = await create(alice)
    await wait_status(alice, s["id"], {"SCHEDULED"})
    r = await commit(alice, s["id"], "env:1")
    assert r.status_code == 409 and r.json()["code"] == "not_running"
    await agent.report(s["id"], "RUNNING")
    assert (await commit(bob, s["id"], "env:1")).status_code == 404
    r = await commit(alice, s["id"], "Not Valid")
    assert r.status_code == 422 and r.json()["code"] == "invalid_image"


async def test_private_image_limit(
    admin: Client, make_user: UserFactory, make_agent: AgentFactory
) -> None:
    await make_agent()
    alice = await make_user("alice", policy={"max_private_images": 1})
    s = await running_session(alice)
    assert (await commit(alice, s["id"], "one:1")).status_code == 200
    r = await commit(alice, s["id"], "two:1")
    assert r.status_code == 422 and r.json()["code"] == "quota_exceeded"
    assert "(1)" in r.json()["message"]
    assert (await admin.patch("/api/v1/images/u/alice/one:1", json={"public": True})).is_success
    assert (await commit(alice, s["id"], "two:1")).status_code == 200
    policies = (await admin.get("/api/v1/policies")).json()
    assert [p["max_private_images"] for p in policies] == [1]


async def test_agent_failure_is_a_409_with_its_message(
    admin: Client, make_agent: AgentFactory
) -> None:
    agent = await make_agent()
    agent.commit_error = "no space left on device"
    s = await running_session(admin)
    r = await commit(admin, s["id"], "team/env:1")
    assert r.status_code == 409 and r.json()["code"] == "commit_failed"
    assert r.json()["message"] == "no space left on device"
    assert "u/admin/team/env:1" not in await _names(admin)


async def test_a_commit_of_a_commit_names_the_first_parent(
    make_user: UserFactory, make_agent: AgentFactory
) -> None:
    await make_agent()
    alice = await make_user("alice")
    s = await running_session(alice, name="work")
    assert (await commit(alice, s["id"], "env")).status_code == 200
    again = await running_session(alice, name="again", image="u/alice/env:work")
    r = await commit(alice, again["id"], "env2")
    assert r.status_code == 200, r.text
    # not "alice's custom image (from alice's custom image (from python:3.11))"
    assert r.json()["image"]["title"] == "alice's custom image (from python:3.11)"
