"""Priority classes and preemption through the API (issue 32): admins define classes; a
waiting session of a higher class stops lower-class batch sessions, which go back to the queue
in their place and start again by themselves; the capacity they free is held for the winner;
every step is in the status histories."""

from __future__ import annotations

from typing import Any

from tests.manager.conftest import AgentFactory, Client, create
from tests.manager.fake_agent import gpu
from tests.manager.helpers import wait_status, wait_until


async def _classes(admin: Client, *extra: dict[str, Any]) -> None:
    """The default "normal" preemptible at once (tests need no 10 minutes), and ``extra``."""
    r = await admin.patch("/api/v1/priority-classes/normal", json={"min_runtime_s": 0,
                                                                   "grace_s": 7})
    assert r.status_code == 200, r.text
    for body in extra:  # every user's, unless limited (a class is admins' by default: F8)
        r = await admin.post("/api/v1/priority-classes",
                             json={"any_project": "projects" not in body, **body})
        assert r.status_code == 201, r.text


def _history(session: dict[str, Any]) -> list[tuple[str, str]]:
    return [(h["status"], h["reason"]) for h in session["history"]]


async def test_admins_manage_classes_and_users_pick_one(admin: Client, make_user: Any) -> None:
    alice = await make_user("alice")
    [normal] = (await alice.get("/api/v1/priority-classes")).json()
    assert (normal["name"], normal["rank"], normal["default"], normal["preempt_interactive"]) \
        == ("normal", 0, True, False)
    await _classes(admin, {"name": "high", "rank": 10, "min_runtime_s": 60})
    listed = (await alice.get("/api/v1/priority-classes")).json()
    assert [(c["name"], c["rank"]) for c in listed] == [("high", 10), ("normal", 0)]
    r = await alice.post("/api/v1/priority-classes", json={"name": "mine", "rank": 99})
    assert r.status_code == 403
    # a session names its class, or gets the default
    [s] = await create(alice, type="batch", command=["sleep", "1"], priority_class="high")
    [d] = await create(alice, type="batch", command=["sleep", "1"])
    assert (s["priority_class"], d["priority_class"]) == ("high", "normal")
    # one-line errors: an unknown class names those that exist; taken names; bounds
    r = await alice.post("/api/v1/sessions", json={"image": "python:3.11",
                                                   "priority_class": "urgent"})
    assert r.status_code == 422 and r.json()["field"] == "priority_class", r.text
    assert r.json()["message"] == ("no priority class 'urgent'; the classes you may use: "
                                   "high, normal (an admin grants others: ask them to let "
                                   "your project use the one you need)")
    r = await admin.post("/api/v1/priority-classes", json={"name": "high", "rank": 1})
    assert r.status_code == 409 and "already exists" in r.json()["message"]
    r = await admin.post("/api/v1/priority-classes", json={"name": "x", "rank": 5000})
    assert r.status_code == 422 and r.json()["field"] == "rank", r.text
    # in use by a session not over yet, or the default: kept
    r = await admin.delete("/api/v1/priority-classes/high")
    assert r.status_code == 409 and "not over yet" in r.json()["message"], r.text
    r = await admin.delete("/api/v1/priority-classes/normal")
    assert r.status_code == 409 and "default" in r.json()["message"], r.text
    await alice.post("/api/v1/sessions/destroy", json={"ids": [s["id"], d["id"]]})
    assert (await admin.delete("/api/v1/priority-classes/high")).status_code == 204


async def test_a_higher_class_preempts_a_batch_session_which_comes_back_by_itself(
    admin: Client, make_agent: AgentFactory, make_user: Any
) -> None:
    agent = await make_agent("node-1", devices=[gpu(0)])
    await _classes(admin, {"name": "high", "rank": 10})
    alice, bob = await make_user("alice"), await make_user("bob")
    [low] = await create(alice, name="train-1", type="batch", command=["python", "t.py"],
                         resources={"gpu": 1})
    await wait_status(alice, low["id"], {"RUNNING"})
    [later] = await create(alice, name="later", type="batch", command=["true"],
                           resources={"gpu": 1})
    [win] = await create(bob, name="train-3", type="batch", command=["python", "t.py"],
                         resources={"gpu": 1}, priority_class="high")
    won = await wait_status(bob, win["id"], {"RUNNING"})
    assert won["status"] == "RUNNING", won
    back = await wait_status(alice, low["id"], {"PENDING"})
    # alice is told a session of another user preempted hers, never whose or which
    reason = "preempted by a session of another user (priority high)"
    assert back["status_reason"] == f"{reason}; back in the queue: needs 1.0 fGPU on one " \
        "GPU; no GPU has a free slice", back
    assert back["queue_position"] == 1 and back["preemptions"] == 1  # ahead of "later"
    got = (await alice.get(f"/api/v1/sessions/{low['id']}")).json()
    assert _history(got)[-3:] == [("RUNNING", "running"), ("TERMINATING", reason),
                                  ("PENDING", f"{reason}; back in the queue in its place")]
    # the victim was told its grace, and its node stopped it with it
    told = agent.assignments[low["id"]]
    assert (told["env"]["GPUSLICE_PREEMPT_GRACE_S"], told["stop_grace_s"]) == ("7", 7)
    seen_by_bob = (await bob.get(f"/api/v1/sessions/{win['id']}")).json()
    history = _history(seen_by_bob)
    assert [s for s, _ in history] == ["PENDING", "PENDING", "SCHEDULED", "PREPARING",
                                       "RUNNING"]
    # and bob that his preempted one of another user's, never whose or which
    assert history[1][1].startswith("preempting 1 session of other users on node node-1"), \
        history
    assert "train-1" not in str(seen_by_bob) and "alice" not in str(seen_by_bob), seen_by_bob
    assert "train-3" not in str(got) and "bob" not in str(got), got
    # the winner ends: the victim starts again by itself, before the later one
    await bob.post("/api/v1/sessions/destroy", json={"ids": [win["id"]]})
    again = await wait_status(alice, low["id"], {"RUNNING"})
    assert again["status"] == "RUNNING" and again["preemptions"] == 1, again
    assert (await alice.get(f"/api/v1/sessions/{later['id']}")).json()["status"] == "PENDING"


async def test_interactive_sessions_are_kept_unless_their_class_says_so(
    admin: Client, make_agent: AgentFactory, make_user: Any
) -> None:
    await make_agent("node-1", devices=[gpu(0)])
    await _classes(admin, {"name": "high", "rank": 10},
                   {"name": "spot", "rank": 0, "min_runtime_s": 0, "preempt_interactive": True})
    alice, bob = await make_user("alice"), await make_user("bob")
    [lab] = await create(alice, name="lab", resources={"gpu": 1})  # interactive, normal
    await wait_status(alice, lab["id"], {"RUNNING"})
    [win] = await create(bob, type="batch", command=["true"], resources={"gpu": 1},
                         priority_class="high")
    waits = await wait_until(bob, [win["id"]], lambda s: s[0]["wait_code"] == "capacity")
    assert waits[0]["status"] == "PENDING", waits
    # the pass that wrote that reason considered preempting (after its placements): it kept
    # the interactive session
    assert (await alice.get(f"/api/v1/sessions/{lab['id']}")).json()["status"] == "RUNNING"
    await alice.post("/api/v1/sessions/destroy", json={"ids": [lab["id"]]})
    await wait_status(bob, win["id"], {"RUNNING"})
    await bob.post("/api/v1/sessions/destroy", json={"ids": [win["id"]]})
    # an interactive session of a class marked so is preempted
    [spot] = await create(alice, name="spot-lab", resources={"gpu": 1}, priority_class="spot")
    await wait_status(alice, spot["id"], {"RUNNING"})
    [win2] = await create(bob, type="batch", command=["true"], resources={"gpu": 1},
                          priority_class="high")
    assert (await wait_status(bob, win2["id"], {"RUNNING"}))["status"] == "RUNNING"
    got = await wait_status(alice, spot["id"], {"PENDING"})
    assert got["status_reason"].startswith("preempted by a session of another user"), got


async def test_a_minimum_runtime_protects_a_session(
    admin: Client, make_agent: AgentFactory, make_user: Any
) -> None:
    await make_agent("node-1", devices=[gpu(0)])
    await _classes(admin, {"name": "high", "rank": 10})
    r = await admin.patch("/api/v1/priority-classes/normal", json={"min_runtime_s": 3600})
    assert r.status_code == 200, r.text
    alice, bob = await make_user("alice"), await make_user("bob")
    [low] = await create(alice, type="batch", command=["sleep", "9"], resources={"gpu": 1})
    await wait_status(alice, low["id"], {"RUNNING"})
    [win] = await create(bob, type="batch", command=["true"], resources={"gpu": 1},
                         priority_class="high")
    waits = await wait_until(bob, [win["id"]], lambda s: s[0]["wait_code"] == "capacity")
    assert waits[0]["status"] == "PENDING"
    assert (await alice.get(f"/api/v1/sessions/{low['id']}")).json()["status"] == "RUNNING"


async def test_the_freed_capacity_is_held_for_the_winner(
    admin: Client, make_agent: AgentFactory, make_user: Any
) -> None:
    """Two half-GPU victims; when the first is gone, a waiting half-GPU session of another
    user does not take its half: the winner gets the whole GPU once the second is gone."""
    agent = await make_agent("node-1", devices=[gpu(0)], auto_run=False)
    await _classes(admin, {"name": "high", "rank": 10})
    alice, bob, carol = [await make_user(n) for n in ("alice", "bob", "carol")]
    victims = await create(alice, type="batch", command=["true"], resources={"gpu": 0.5},
                           count=2, name="half")
    for v in victims:
        await wait_status(alice, v["id"], {"SCHEDULED"})
        await agent.report(v["id"], "RUNNING")
    [small] = await create(carol, type="batch", command=["true"], resources={"gpu": 0.5})
    [win] = await create(bob, type="batch", command=["true"], resources={"gpu": 1},
                         priority_class="high")
    stopping = await wait_until(alice, [v["id"] for v in victims],
                                lambda s: all(x["status"] == "TERMINATING" for x in s))
    assert [x["status"] for x in stopping] == ["TERMINATING"] * 2, stopping
    await agent.report(victims[0]["id"], "TERMINATED", reason="stopped")
    await wait_status(alice, victims[0]["id"], {"PENDING"})
    await create(carol, type="batch", command=["true"], resources={"gpu": 0.1})  # a pass
    held = (await bob.get(f"/api/v1/sessions/{win['id']}")).json()
    assert held["wait_code"] == "preempting", held
    assert "capacity is held for it" in held["status_reason"]
    assert (await carol.get(f"/api/v1/sessions/{small['id']}")).json()["status"] == "PENDING"
    await agent.report(victims[1]["id"], "TERMINATED", reason="stopped")
    placed = await wait_status(bob, win["id"], {"SCHEDULED"})
    assert placed["status"] == "SCHEDULED", placed
    assert (await carol.get(f"/api/v1/sessions/{small['id']}")).json()["status"] == "PENDING"


async def test_a_preempted_session_its_owner_stops_ends_there(
    admin: Client, make_agent: AgentFactory, make_user: Any
) -> None:
    agent = await make_agent("node-1", devices=[gpu(0)], auto_run=False)
    await _classes(admin, {"name": "high", "rank": 10})
    alice, bob = await make_user("alice"), await make_user("bob")
    [low] = await create(alice, type="batch", command=["true"], resources={"gpu": 1})
    await wait_status(alice, low["id"], {"SCHEDULED"})
    await agent.report(low["id"], "RUNNING")
    await create(bob, type="batch", command=["true"], resources={"gpu": 1},
                 priority_class="high")
    await wait_status(alice, low["id"], {"TERMINATING"})
    await alice.post("/api/v1/sessions/destroy", json={"ids": [low["id"]]})
    await agent.report(low["id"], "TERMINATED", reason="stopped")
    ended = await wait_status(alice, low["id"], {"TERMINATED", "PENDING"})
    assert (ended["status"], ended["status_reason"]) == ("TERMINATED", "stopped by alice")


async def test_a_higher_class_waits_ahead_of_lower_ones(
    admin: Client, make_agent: AgentFactory, make_user: Any
) -> None:
    """The queue orders by class rank first: a high session asked after two normal ones is
    first in line (the preview says so too), and it starts first."""
    await make_agent("node-1", devices=[gpu(0)])
    await _classes(admin, {"name": "high", "rank": 10})
    alice, bob = await make_user("alice"), await make_user("bob")
    [lab] = await create(alice, resources={"gpu": 1})  # interactive: never preempted
    await wait_status(alice, lab["id"], {"RUNNING"})
    lows = await create(alice, type="batch", command=["true"], resources={"gpu": 1}, count=2)
    shape = {"image": "python:3.11", "type": "batch", "command": ["true"],
             "resources": {"gpu": 1}, "priority_class": "high"}
    preview = (await bob.post("/api/v1/sessions/preview", json=shape)).json()
    assert (preview["will_queue"], preview["queue_position"]) == (1, 1), preview
    [high] = await create(bob, **{k: v for k, v in shape.items() if k != "image"})
    waits = await wait_until(bob, [high["id"]], lambda s: s[0]["queue_position"] == 1)
    assert waits[0]["queue_position"] == 1, waits
    await alice.post("/api/v1/sessions/destroy", json={"ids": [lab["id"]]})
    assert (await wait_status(bob, high["id"], {"RUNNING"}))["status"] == "RUNNING"
    assert {(await alice.get(f"/api/v1/sessions/{s['id']}")).json()["status"]
            for s in lows} == {"PENDING"}


async def test_a_session_of_any_group_preempts_in_the_group_where_a_victim_runs(
    admin: Client, make_agent: AgentFactory, make_user: Any
) -> None:
    """Two resource groups; a high session that may run in either (no group asked) preempts
    the batch session of group "a" (the interactive one in "b" is kept) and starts where its
    victim ran."""
    node_a = await make_agent("a-1", pool="a", devices=[gpu(0)])
    await make_agent("b-1", pool="b", devices=[gpu(0)])
    await _classes(admin, {"name": "high", "rank": 10})
    alice, bob = await make_user("alice"), await make_user("bob")
    [low] = await create(alice, name="train-a", type="batch", command=["python", "t.py"],
                         resources={"gpu": 1}, group="a")
    [lab] = await create(alice, name="lab-b", resources={"gpu": 1}, group="b")
    await wait_status(alice, low["id"], {"RUNNING"})
    await wait_status(alice, lab["id"], {"RUNNING"})
    [win] = await create(bob, name="train-3", type="batch", command=["python", "t.py"],
                         resources={"gpu": 1}, priority_class="high")
    won = await wait_status(bob, win["id"], {"RUNNING"})
    assert won["status"] == "RUNNING", won
    assert won["placement"]["node_id"] == node_a.node_id, won
    history = _history(won)
    assert history[1][1].startswith("preempting 1 session of other users on node a-1"), history
    back = await wait_status(alice, low["id"], {"PENDING"})
    assert back["status_reason"].startswith(
        "preempted by a session of another user (priority high)"), back
    assert (await alice.get(f"/api/v1/sessions/{lab['id']}")).json()["status"] == "RUNNING"
