"""`POST /api/v1/sessions/preview`: what creating would do now (the console's launch dialog),
creating nothing, refusing what creating refuses."""

from __future__ import annotations

from typing import Any

from tests.manager.conftest import IMAGE, AgentFactory, Client, create
from tests.manager.fake_agent import gpu
from tests.manager.helpers import wait_until


async def preview(client: Client, expect: int = 200, **body: Any) -> Any:
    body.setdefault("image", IMAGE)
    r = await client.post("/api/v1/sessions/preview", json=body)
    assert r.status_code == expect, r.text
    return r.json()


async def test_preview_says_what_fits_now_and_what_queues(
    make_agent: AgentFactory, make_user: Any
) -> None:
    await make_agent("node-1", devices=[gpu(0)], fgpu_per_gpu=2)
    alice, bob = await make_user("alice"), await make_user("bob")
    shape = {"resources": {"gpu": 1, "cpu": 1, "mem": "1g"}}

    empty = await preview(alice, count=3, **shape)
    assert (empty["fits_now"], empty["will_queue"]) == (2, 1)
    assert "fGPU" in empty["reason"] and empty["queue_position"] == 1
    assert empty["fgpu_step"] == 0.01 and empty["fgpu_per_gpu"] == [2.0]
    assert empty["max_gpu"] == 2.0 and empty["largest_free"] == 2.0
    listed = (await alice.get("/api/v1/sessions")).json()
    assert listed["total"] == 0  # nothing created

    # Bob's two sessions take the GPU and his third waits: Alice's would queue behind it.
    ids = [s["id"] for s in await create(bob, count=3, **shape)]
    await wait_until(bob, ids, lambda s: sum(x["status"] == "RUNNING" for x in s) == 2)
    full = await preview(alice, count=1, **shape)
    assert (full["fits_now"], full["will_queue"]) == (0, 1)
    assert full["queue_position"] == 2 and full["largest_free"] == 0
    assert "bob" not in full["reason"]  # counts and a reason, never another user's names
    cpu_only = await preview(alice, resources={"gpu": 0, "cpu": 0.5, "mem": "256m"})
    # fifo: nothing passes the waiting session, not even a CPU-only one (as the loop does)
    assert cpu_only["will_queue"] == 1 and "behind" in cpu_only["reason"]


async def test_preview_refuses_what_creating_refuses(
    make_agent: AgentFactory, make_user: Any
) -> None:
    await make_agent("node-1", devices=[gpu(0)], fgpu_per_gpu=2)
    alice = await make_user("alice")
    too_big = await preview(alice, 422, resources={"gpu": 3})
    assert too_big["code"] == "impossible_request" and too_big["field"] == "resources"
    bad = await preview(alice, 422, resources={"gpu": 0.333})
    assert bad["field"] == "resources.gpu" and "decimal places" in bad["message"]
    unknown = await preview(alice, 404, image="no-such-image:1")
    assert unknown["field"] == "image"


async def test_sessions_filter_by_type(make_user: Any) -> None:
    alice = await make_user("alice")
    await create(alice, name="shell")
    await create(alice, name="job", type="batch", command=["true"])
    batch = (await alice.get("/api/v1/sessions", params={"type": "batch"})).json()
    assert [s["name"] for s in batch["items"]] == ["job"] and batch["total"] == 1
    bad = await alice.get("/api/v1/sessions", params={"type": "nope"})
    assert bad.status_code == 422 and bad.json()["field"] == "type"


async def test_a_command_line_is_split_like_a_shell_or_refused(make_user: Any) -> None:
    alice = await make_user("alice")
    [job] = await create(alice, type="batch", command_line="python3 -c 'print(6 * 7)'")
    assert job["command"] == ["python3", "-c", "print(6 * 7)"]
    bad = await create(alice, 422, type="batch", command_line="echo 'unclosed")
    assert bad["field"] == "command_line" and "no closing quotation" in bad["message"]
    both = await create(alice, 422, command=["true"], command_line="true")
    assert "not both" in both["message"]
    assert (await alice.get("/api/v1/sessions")).json()["total"] == 1
