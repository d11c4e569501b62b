"""Issue 32, what admins do to projects and priority classes: rename and delete a project,
limit a priority class to some projects, and remove a member whose sessions still queue."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gpuslice.manager.services.projects import admin as projects_admin
from tests.manager.conftest import AgentFactory, Client, UserFactory, create
from tests.manager.fake_agent import gpu
from tests.manager.folder_helpers import folder, tar_of
from tests.manager.helpers import make_project, wait_status, wait_until


async def test_a_renamed_project_keeps_its_members_sessions_folders_and_classes(
    admin: Client, make_user: UserFactory, make_agent: AgentFactory
) -> None:
    await make_agent()
    alice = await make_user("alice")
    await make_project(admin, "vision", "alice", max_gpu=2)
    r = await admin.post("/api/v1/folders", json={"name": "images", "project": "vision"})
    assert r.status_code == 201, r.text
    r = await admin.post("/api/v1/priority-classes",
                         json={"name": "high", "rank": 10, "projects": ["vision"]})
    assert r.status_code == 201, r.text
    [s] = await create(alice, resources={"gpu": 1}, project="vision")
    await wait_status(alice, s["id"], {"RUNNING"})

    r = await admin.post("/api/v1/projects/vision/rename", json={"name": "cv"})
    assert r.status_code == 200, r.text
    cv = r.json()
    assert (cv["name"], cv["members"], cv["max_gpu"], cv["usage"]["sessions"]) == (
        "cv", ["alice"], 2, 1)
    assert (await alice.get(f"/api/v1/sessions/{s['id']}")).json()["project"] == "cv"
    assert {f["name"]: f["project"] for f in (await alice.get("/api/v1/folders")).json()}[
        "images"] == "cv"
    classes = {c["name"]: c["projects"] for c in (await alice.get(
        "/api/v1/priority-classes")).json()}
    assert classes["high"] == ["cv"]
    assert (await admin.get("/api/v1/projects/vision")).status_code == 404
    await create(alice, project="cv", priority_class="high")
    r = await alice.post("/api/v1/sessions", json={"image": "python:3.11", "project": "vision"})
    assert r.status_code == 404 and r.json()["message"] == "no project vision"


async def test_rename_is_refused_with_one_line(admin: Client, make_user: UserFactory) -> None:
    alice = await make_user("alice")
    await make_project(admin, "vision", "alice")
    await make_project(admin, "nlp")
    r = await alice.post("/api/v1/projects/vision/rename", json={"name": "mine"})
    assert r.status_code == 403, r.text
    r = await admin.post("/api/v1/projects/nowhere/rename", json={"name": "x"})
    assert r.status_code == 404 and r.json()["message"] == "no project nowhere"
    r = await admin.post("/api/v1/projects/vision/rename", json={"name": "nlp"})
    assert r.status_code == 409 and r.json()["message"] == "project 'nlp' already exists"
    r = await admin.post("/api/v1/projects/vision/rename", json={"name": "Bad Name"})
    assert r.status_code == 422 and r.json()["field"] == "name", r.text
    r = await admin.post("/api/v1/projects/~admin/rename", json={"name": "mine"})
    assert r.status_code == 422 and r.json()["message"] == (
        "~admin is a personal project: it follows its user and cannot be renamed")
    assert (await alice.get("/api/v1/projects/vision")).status_code == 200


async def test_delete_is_refused_while_sessions_folders_or_runs_hold_the_project(
    admin: Client, make_user: UserFactory, make_agent: AgentFactory
) -> None:
    await make_agent()
    alice = await make_user("alice")
    await make_project(admin, "vision", "alice")
    images = (await admin.post("/api/v1/folders", json={"name": "images",
                                                         "project": "vision"})).json()
    [s] = await create(alice, project="vision", name="work")
    await wait_status(alice, s["id"], {"RUNNING"})
    assert (await alice.delete("/api/v1/projects/vision")).status_code == 403
    assert (await admin.delete("/api/v1/projects/nowhere")).status_code == 404
    r = await admin.delete("/api/v1/projects/vision")
    assert r.status_code == 409 and r.json()["message"] == (
        "project vision still has 1 session(s) not ended; 1 folder(s)"), r.text
    await alice.post("/api/v1/sessions/destroy", json={"ids": [s["id"]]})
    await wait_status(alice, s["id"], {"TERMINATED"})
    assert (await admin.delete(f"/api/v1/folders/{images['id']}")).status_code == 204
    runs = await folder(alice, "runs")
    r = await alice.put(f"/api/v1/folders/{runs['id']}/archive", params={"path": "train"},
                        content=tar_of({"train.py": b"print('hi')\n"}))
    assert r.status_code == 200, r.text
    r = await alice.post("/api/v1/runs", json={"name": "train", "script": "train.py",
                                               "image": "python:3.11", "project": "vision"})
    assert r.status_code == 201, r.text
    run = r.json()["id"]
    await alice.post("/api/v1/sessions/destroy", json={"ids": [run]})
    await wait_until(alice, [run], lambda x: x[0]["status"] in ("CANCELLED", "TERMINATED"))
    r = await admin.delete("/api/v1/projects/vision")
    assert r.status_code == 409 and r.json()["message"] == "project vision still has 1 run(s)"
    r = await admin.delete("/api/v1/projects/~alice")
    assert r.status_code == 422 and "cannot be deleted" in r.json()["message"]


async def test_a_deleted_project_is_gone_and_its_ended_sessions_stay(
    admin: Client, make_user: UserFactory, make_agent: AgentFactory
) -> None:
    await make_agent()
    alice = await make_user("alice")
    await make_project(admin, "vision", "alice")
    [s] = await create(alice, project="vision")
    await wait_status(alice, s["id"], {"RUNNING"})
    await alice.post("/api/v1/sessions/destroy", json={"ids": [s["id"]]})
    await wait_status(alice, s["id"], {"TERMINATED"})
    assert (await admin.delete("/api/v1/projects/vision")).status_code == 204
    assert (await admin.get("/api/v1/projects/vision")).status_code == 404
    assert "vision" not in (await alice.get("/api/v1/projects")).text
    ended = (await alice.get(f"/api/v1/sessions/{s['id']}")).json()
    assert ended["status"] == "TERMINATED" and ended["project"] is None
    assert [h["status"] for h in ended["history"]][-1] == "TERMINATED"
    await make_project(admin, "vision")  # the name is free again


async def test_a_class_limited_to_projects_is_refused_elsewhere_naming_those_usable(
    admin: Client, make_user: UserFactory, make_agent: AgentFactory
) -> None:
    await make_agent()
    alice = await make_user("alice")
    await make_project(admin, "vision", "alice")
    await make_project(admin, "nlp", "alice")
    r = await admin.post("/api/v1/priority-classes",
                         json={"name": "high", "rank": 10, "projects": ["vision", "nlp"]})
    assert r.status_code == 201 and r.json()["projects"] == ["nlp", "vision"], r.text
    await admin.post("/api/v1/priority-classes",
                     json={"name": "low", "rank": 1, "any_project": True})
    [ok] = await create(alice, project="vision", priority_class="high")
    assert ok["priority_class"] == "high"
    r = await alice.post("/api/v1/sessions", json={"image": "python:3.11",
                                                   "priority_class": "high"})
    assert r.status_code == 403, r.text
    assert r.json()["message"] == ("project ~alice may not use priority class high; the "
                                   "classes it may use: low, normal (or ask an admin to let "
                                   "project ~alice use high)")
    run = {"name": "t", "script": "t.py", "image": "python:3.11", "priority_class": "high"}
    r = await alice.post("/api/v1/runs/check", json=run)
    assert r.status_code == 403 and "classes it may use: low, normal" in r.text
    assert (await alice.post("/api/v1/runs/check", json={**run, "project": "nlp"})
            ).status_code == 204
    r = await admin.patch("/api/v1/priority-classes/high", json={"projects": ["nlp"]})
    assert r.json()["projects"] == ["nlp"]
    r = await alice.post("/api/v1/sessions", json={"image": "python:3.11", "project": "vision",
                                                   "priority_class": "high"})
    assert r.status_code == 403 and r.json()["field"] == "priority_class"
    r = await admin.patch("/api/v1/priority-classes/high", json={"any_project": True})
    assert (r.json()["projects"], r.json()["any_project"]) == ([], True)
    await create(alice, priority_class="high")


async def test_bad_class_limits_are_refused_with_one_line(
    admin: Client, make_user: UserFactory
) -> None:
    alice = await make_user("alice")
    await make_project(admin, "vision", "alice")
    r = await admin.post("/api/v1/priority-classes",
                         json={"name": "high", "rank": 10, "projects": ["nowhere"]})
    assert r.status_code == 422 and r.json()["message"] == "projects: no project 'nowhere'"
    assert "high" not in (await admin.get("/api/v1/priority-classes")).text
    r = await admin.patch("/api/v1/priority-classes/normal", json={"projects": ["vision"]})
    assert r.status_code == 422 and r.json()["code"] == "default_class_limited", r.text
    await admin.post("/api/v1/priority-classes",
                     json={"name": "team", "rank": 2, "projects": ["vision"]})
    r = await admin.patch("/api/v1/priority-classes/team", json={"default": True})
    assert r.status_code == 422 and "--any-project first" in r.json()["message"]
    r = await alice.patch("/api/v1/priority-classes/team", json={"projects": []})
    assert r.status_code == 403
    r = await admin.delete("/api/v1/projects/vision")
    assert r.status_code == 409 and r.json()["message"] == (
        "project vision still has priority class(es) usable by it alone: team")


async def test_a_removed_members_queued_sessions_end_and_running_ones_go_on(
    admin: Client, make_user: UserFactory, make_agent: AgentFactory
) -> None:
    await make_agent(devices=[gpu(0), gpu(1)])
    alice = await make_user("alice")
    await make_project(admin, "vision", "alice", max_gpu=1)
    [running] = await create(alice, resources={"gpu": 1}, project="vision")
    await wait_status(alice, running["id"], {"RUNNING"})
    [queued] = await create(alice, resources={"gpu": 1}, project="vision")
    later = (datetime.now(UTC) + timedelta(days=30)).isoformat()
    [mine] = await create(alice, resources={"gpu": 1}, begin_at=later)  # PENDING, elsewhere
    await wait_until(alice, [queued["id"]], lambda s: s[0]["wait_code"] == "quota")

    r = await admin.delete("/api/v1/projects/vision/members/alice")
    assert r.status_code == 200 and r.json()["members"] == [], r.text
    gone = (await alice.get(f"/api/v1/sessions/{queued['id']}")).json()
    assert (gone["status"], gone["status_reason"]) == ("CANCELLED",
                                                      "removed from project vision")
    assert gone["history"][-1]["reason"] == "removed from project vision"
    # an admin raising the quota starts nothing of hers there now; the rest is untouched
    await admin.put("/api/v1/projects/vision", json={"max_gpu": 4})
    assert (await alice.get(f"/api/v1/sessions/{running['id']}")).json()["status"] == "RUNNING"
    assert (await alice.get(f"/api/v1/sessions/{mine['id']}")).json()["status"] == "PENDING"
    assert (await alice.get(f"/api/v1/sessions/{queued['id']}")).json()["status"] == "CANCELLED"


async def test_a_user_listing_classes_learns_of_no_project_but_their_own(
    admin: Client, make_user: UserFactory
) -> None:
    alice = await make_user("alice")
    bob = await make_user("bob")
    await bob.get("/api/v1/projects")  # his personal project, ~bob
    await make_project(admin, "vision", "alice")
    await make_project(admin, "secret", "bob")
    for body in ({"name": "team", "rank": 5, "projects": ["vision", "secret"]},
                 {"name": "bobs", "rank": 6, "projects": ["~bob"]}):
        r = await admin.post("/api/v1/priority-classes", json=body)
        assert r.status_code == 201, r.text
    r = await alice.get("/api/v1/priority-classes")
    assert r.status_code == 200
    assert "secret" not in r.text and "bob" not in r.text, r.text
    # what she may use, limited to her projects as before; the rest for everyone
    assert {c["name"]: c["projects"] for c in r.json()} == {"team": ["vision"], "normal": []}
    listed = {c["name"]: c["projects"] for c in (await admin.get(
        "/api/v1/priority-classes")).json()}
    assert listed == {"bobs": ["~bob"], "team": ["secret", "vision"], "normal": []}


async def test_a_folder_made_while_its_project_is_deleted_keeps_the_project(
    admin: Client, make_user: UserFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The delete checks for folders, then deletes: a folder made in between (another
    admin's request) was cascaded away with the project's row. The database refuses now."""
    await make_user("alice")
    await make_project(admin, "vision", "alice")
    images = (await admin.post("/api/v1/folders", json={"name": "images",
                                                         "project": "vision"})).json()
    checked = projects_admin._holders
    calls = 0

    async def before_the_folder(db: Any, project_id: str) -> list[str]:
        nonlocal calls
        calls += 1  # the first look happened before the folder was made
        return [] if calls == 1 else await checked(db, project_id)

    monkeypatch.setattr(projects_admin, "_holders", before_the_folder)
    r = await admin.delete("/api/v1/projects/vision")
    assert r.status_code == 409 and r.json()["message"] == (
        "project vision got new sessions or folders meanwhile; it still has 1 folder(s)"), r.text
    assert (await admin.get("/api/v1/projects/vision")).status_code == 200
    kept = {f["id"]: f["project"] for f in (await admin.get("/api/v1/folders")).json()}
    assert kept[images["id"]] == "vision"
