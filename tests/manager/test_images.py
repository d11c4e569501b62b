"""The image catalog: node reports with metadata, visibility, aliases, minimums, curation."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tests.manager.conftest import AgentFactory, Client, UserFactory, create
from tests.manager.fake_agent import FakeAgent, GiB
from tests.waits import Deadline

SKLEARN = "gpuslice/sklearn:1.5"
LABELS = {
    "gpuslice.image.title": "scikit-learn 1.5 (CPU)",
    "gpuslice.image.frameworks": json.dumps({"python": "3.11", "scikit-learn": "1.5.2"}),
    "gpuslice.image.min-mem": "2g",
    "gpuslice.image.min-cpu": "0.5",
    "gpuslice.image.apps": json.dumps([{"name": "jupyter", "protocol": "http", "port": 8888}]),
}


def detail(tag: str, labels: dict[str, str] | None = None, image_id: str = "") -> dict[str, Any]:
    return {"tag": tag, "image_id": image_id or f"sha256:{abs(hash(tag)):064x}"[:71],
            "size": 123 * 1024**2, "labels": labels or {}}


async def _agent(make_agent: AgentFactory, *details: dict[str, Any]) -> FakeAgent:
    return await make_agent(
        images=[d["tag"] for d in details], image_details=list(details)
    )


async def _names(client: Client) -> dict[str, dict[str, Any]]:
    r = await client.get("/api/v1/images")
    assert r.status_code == 200, r.text
    return {i["name"]: i for i in r.json()}


async def test_listing_shows_what_images_say_about_themselves(
    admin: Client, make_user: UserFactory, make_agent: AgentFactory
) -> None:
    await _agent(make_agent, detail(SKLEARN, LABELS), detail("plain:1"))
    user = await make_user()
    image = (await _names(user))[SKLEARN]
    assert image["title"] == "scikit-learn 1.5 (CPU)" and image["size"] == 123 * 1024**2
    assert image["frameworks"] == {"python": "3.11", "scikit-learn": "1.5.2"}
    assert image["apps"] == [{"name": "jupyter", "protocol": "http", "port": 8888}]
    assert (image["min_mem"], image["min_cpu"], image["min_gpu"]) == (2 * GiB, 0.5, 0)
    assert image["public"] and image["nodes"] == ["node-1"] and image["owner"] is None
    plain = (await _names(user))["plain:1"]  # no labels: a plain image that still works
    assert plain["title"] == "" and plain["min_mem"] == 0
    await create(user, image="plain:1")


async def test_below_the_image_minimum_is_refused_naming_it(
    make_user: UserFactory, make_agent: AgentFactory
) -> None:
    await _agent(make_agent, detail(SKLEARN, LABELS))
    user = await make_user()
    answer = await create(user, expect=422, image=SKLEARN, resources={"mem": "1g"})
    assert answer["code"] == "below_image_minimum" and answer["field"] == "resources"
    assert answer["message"] == (
        f"image {SKLEARN} needs at least 2 GiB of memory; you asked for 1 GiB"
    )
    answer = await create(user, expect=422, image=SKLEARN, resources={"mem": "2g", "cpu": 0.25})
    assert "needs at least 0.5 CPU cores; you asked for 0.25" in answer["message"]
    await create(user, image=SKLEARN, resources={"mem": "2g", "cpu": 0.5})


async def test_malformed_references_are_refused_saying_what_is_allowed(admin: Client) -> None:
    for bad in ("Bad Image", "UPPER:1", "a:b:c", "x:" + "t" * 200, "-lead:1", "a//b"):
        answer = await create(admin, expect=422, image=bad)
        assert answer["code"] == "invalid_image" and answer["field"] == "image", bad
        assert f"{bad!r} is not an image name: write lower-case letters" in answer["message"]
    answer = await create(admin, expect=404, image="registry.example.com:5000/team/nosuch:2")
    assert answer["code"] == "unknown_image"


async def test_untagged_means_latest(admin: Client, make_agent: AgentFactory) -> None:
    await _agent(make_agent, detail("busybox:latest"))
    [s] = await create(admin, image="busybox")
    assert s["image"] == "busybox:latest"


async def test_aliases_resolve_and_only_admins_set_them(
    admin: Client, make_user: UserFactory, make_agent: AgentFactory
) -> None:
    await _agent(make_agent, detail(SKLEARN, LABELS))
    user = await make_user()
    body = {"name": "sk", "reference": SKLEARN}
    assert (await user.post("/api/v1/images/aliases", json=body)).status_code == 403
    assert (await admin.post("/api/v1/images/aliases", json=body)).status_code == 201
    [s] = await create(user, image="sk", resources={"mem": "2g"})
    assert s["image"] == SKLEARN
    assert (await _names(user))[SKLEARN]["aliases"] == ["sk"]
    assert [a["name"] for a in (await user.get("/api/v1/images/aliases")).json()] == ["sk"]
    bad = await admin.post("/api/v1/images/aliases", json={"name": "x", "reference": "No Way"})
    assert bad.status_code == 422 and bad.json()["code"] == "invalid_image"
    assert (await admin.delete("/api/v1/images/aliases/sk")).status_code == 204
    assert (await create(user, expect=404, image="sk"))["code"] == "unknown_image"


async def test_private_image_is_its_owners_alone_until_published(
    admin: Client, make_user: UserFactory, make_agent: AgentFactory
) -> None:
    alice, bob = await make_user("alice"), await make_user("bob")
    mine = {**LABELS, "gpuslice.image.owner": "alice", "gpuslice.image.origin-session": "s-1"}
    await _agent(make_agent, detail("alice/env:1", mine))
    image = (await _names(alice))["alice/env:1"]
    assert not image["public"] and image["owner"] == "alice"
    assert image["origin_session"] == "s-1"
    assert "alice/env:1" not in await _names(bob)
    assert "alice/env:1" in await _names(admin)
    refused = await create(bob, expect=404, image="alice/env:1", resources={"mem": "2g"})
    unknown = await create(bob, expect=404, image="alice/nothing:1")
    assert refused["code"] == unknown["code"] == "unknown_image"
    assert refused["message"].replace("env", "nothing") == unknown["message"]
    await create(alice, image="alice/env:1", resources={"mem": "2g"})
    assert (await bob.patch("/api/v1/images/alice/env:1", json={"public": True})).status_code \
        == 403
    r = await admin.patch("/api/v1/images/alice/env:1", json={"public": True})
    assert r.status_code == 200 and r.json()["public"] is True
    assert "alice/env:1" in await _names(bob)


async def test_removed_image_leaves_the_catalog_and_its_nodes(
    admin: Client, make_user: UserFactory, make_agent: AgentFactory
) -> None:
    agent = await _agent(make_agent, detail("old:1"), detail("keep:1"))
    user = await make_user()
    assert (await admin.delete("/api/v1/images/old:1")).status_code == 204
    assert "old:1" not in await _names(user)
    assert (await create(user, expect=404, image="old:1"))["code"] == "unknown_image"
    assert (await admin.delete("/api/v1/images/old:1")).status_code == 404
    await _until(lambda: any(a["remove_images"] == ["old:1"] for a in agent.seen))
    await agent.heartbeat()  # still there (in use, say): stays removed
    assert "old:1" not in await _names(admin)
    agent.image_details = [detail("keep:1")]
    agent.images = ["keep:1"]
    await agent.heartbeat()
    r = await agent.client.get("/api/v1/agents/me/assignments")
    assert r.json()["remove_images"] == []
    agent.image_details = [detail("keep:1"), detail("old:1", image_id="sha256:" + "f" * 64)]
    await agent.heartbeat()  # rebuilt under the same name: a new image
    assert "old:1" in await _names(user)


async def test_configured_images_are_listed_and_cannot_be_removed(admin: Client) -> None:
    names = await _names(admin)
    assert names["python:3.11"]["sources"] == ["allowed"]
    r = await admin.delete("/api/v1/images/python:3.11")
    assert r.status_code == 409 and r.json()["code"] == "image_configured"


async def test_rescan_asks_nodes_to_report_at_once(
    admin: Client, make_user: UserFactory, make_agent: AgentFactory
) -> None:
    agent = await make_agent()
    await _until(lambda: bool(agent.seen))
    before = agent.seen[-1]["rescan"]
    user = await make_user()
    assert (await user.post("/api/v1/images/rescan")).status_code == 403
    r = await admin.post("/api/v1/images/rescan")
    assert r.status_code == 200 and r.json() == {"nodes": 1, "registry": None}
    await _until(lambda: agent.seen[-1]["rescan"] == before + 1)


async def _until(check: Any, timeout: float = 5.0) -> None:
    deadline = Deadline(timeout)
    while not check():
        if deadline.passed:
            raise AssertionError(f"condition not reached within {deadline.seconds:.0f}s")
        await asyncio.sleep(0.02)
