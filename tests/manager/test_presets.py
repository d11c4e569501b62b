"""Resource presets (issue 34, finding 6): admins define CPU/memory/GPU sets, every user reads
them, one is the default the launch dialog preselects; a fresh platform has a "small" default
small enough that the guide's scenario on a small node is limited by the GPU, not the CPU."""

from __future__ import annotations

from typing import Any

from tests.manager.conftest import IMAGE, AgentFactory, Client, create
from tests.manager.fake_agent import gpu
from tests.manager.helpers import wait_until

GiB = 1024**3


async def test_a_fresh_platform_offers_a_small_default(make_user: Any) -> None:
    alice = await make_user("alice")
    r = await alice.get("/api/v1/presets")
    assert r.status_code == 200, r.text
    [small] = r.json()
    assert (small["name"], small["cpu"], small["mem"], small["gpu"], small["default"]) == (
        "small", 0.25, GiB, 0, True)


async def test_admins_manage_presets_and_one_is_the_default(
    admin: Client, make_user: Any
) -> None:
    alice = await make_user("alice")
    r = await admin.post("/api/v1/presets",
                         json={"name": "large", "cpu": 4, "mem": "16g", "gpu": 1, "default": True})
    assert r.status_code == 201, r.text
    listed = (await alice.get("/api/v1/presets")).json()
    assert [(p["name"], p["default"]) for p in listed] == [("large", True), ("small", False)]
    r = await admin.patch("/api/v1/presets/small", json={"cpu": 0.5, "default": True})
    assert r.status_code == 200 and r.json()["cpu"] == 0.5, r.text
    listed = (await alice.get("/api/v1/presets")).json()
    assert [(p["name"], p["default"]) for p in listed] == [("small", True), ("large", False)]
    # a user reads them, never changes them
    r = await alice.post("/api/v1/presets", json={"name": "mine", "cpu": 8, "mem": "1g"})
    assert r.status_code == 403
    assert (await admin.delete("/api/v1/presets/large")).status_code == 204
    assert [p["name"] for p in (await alice.get("/api/v1/presets")).json()] == ["small"]


async def test_bad_presets_get_one_line_errors(admin: Client) -> None:
    taken = await admin.post("/api/v1/presets", json={"name": "small", "cpu": 1, "mem": "1g"})
    assert taken.status_code == 409 and "already exists" in taken.json()["message"]
    tiny = await admin.post("/api/v1/presets", json={"name": "tiny", "cpu": 1, "mem": "1k"})
    assert tiny.status_code == 422 and tiny.json()["field"] == "mem", tiny.text
    bad = await admin.post("/api/v1/presets", json={"name": "Bad Name", "cpu": 1, "mem": "1g"})
    assert bad.status_code == 422 and bad.json()["field"] == "name", bad.text
    missing = await admin.patch("/api/v1/presets/nope", json={"cpu": 1})
    assert missing.status_code == 404 and "no preset 'nope'" in missing.json()["message"]


async def test_the_default_preset_lets_the_gpu_decide_on_a_small_node(
    make_agent: AgentFactory, make_user: Any
) -> None:
    """The guide's scenario with the default preset: 3 sessions of 1 fGPU on one
    GPU of 2 fGPU, on a node of 1.5 free cores (a 2-core machine less the agent's reserve):
    two run, the third waits for the GPU, not for CPU."""
    await make_agent("node-1", devices=[gpu(0, mem=8 * GiB)], fgpu_per_gpu=2, cpu=1500,
                     mem=8 * GiB)
    alice = await make_user("alice")
    [small] = (await alice.get("/api/v1/presets")).json()
    shape = {"resources": {"gpu": 1, "cpu": small["cpu"], "mem": small["mem"]}}
    r = await alice.post("/api/v1/sessions/preview", json={"image": IMAGE, "count": 3,
                                                           **shape})
    answer = r.json()
    assert (answer["fits_now"], answer["will_queue"]) == (2, 1), answer
    assert "fGPU" in answer["reason"] and "CPU" not in answer["reason"].replace("fGPU", "")
    assert answer["gpu_models"] == [{"model": "Mock A100", "mem": 8 * GiB, "sms": 108,
                                     "fgpu_per_gpu": 2.0}]
    ids = [s["id"] for s in await create(alice, count=3, **shape)]
    await wait_until(alice, ids, lambda s: sum(x["status"] == "RUNNING" for x in s) == 2)
