"""Using a priority class is a grant (F8 of the 2026-12 security review), and a class one may
not use is as private as one that does not exist (the review's issue, "Also"): a class made
without projects was every user's, so anyone could preempt with an admin's `urgent`; and a
non-member naming a project's class got 403 where an unknown name got 422, whose message
listed every class."""

from __future__ import annotations

from tests.manager.conftest import Client, UserFactory
from tests.manager.helpers import make_project

UNKNOWN = ("no priority class {!r}; the classes you may use: {} (an admin grants others: ask "
           "them to let your project use the one you need)")


async def test_a_new_class_is_the_admins_until_granted(
    admin: Client, make_user: UserFactory
) -> None:
    bob = await make_user("bob")
    made = await admin.post("/api/v1/priority-classes", json={"name": "urgent", "rank": 100})
    assert made.status_code == 201, made.text
    r = await bob.post("/api/v1/sessions", json={"image": "python:3.11",
                                                 "priority_class": "urgent"})
    assert r.status_code == 422, f"bob used the admin's new class: {r.text}"
    assert r.json()["message"] == UNKNOWN.format("urgent", "normal")
    assert (made.json()["any_project"], made.json()["projects"]) == (False, [])
    assert [c["name"] for c in (await bob.get("/api/v1/priority-classes")).json()] == [
        "normal"]
    r = await admin.post("/api/v1/sessions", json={"image": "python:3.11",
                                                   "priority_class": "urgent"})
    assert r.status_code == 201, r.text  # its admins' own

    r = await admin.patch("/api/v1/priority-classes/urgent", json={"any_project": True})
    assert r.json()["any_project"] is True, r.text
    r = await bob.post("/api/v1/sessions", json={"image": "python:3.11",
                                                 "priority_class": "urgent"})
    assert r.status_code == 201, r.text
    r = await admin.patch("/api/v1/priority-classes/urgent",
                          json={"any_project": False, "projects": []})
    assert (r.json()["any_project"], r.json()["projects"]) == (False, []), r.text
    r = await bob.post("/api/v1/runs/check", json={
        "name": "t", "script": "t.py", "image": "python:3.11", "priority_class": "urgent"})
    assert r.status_code == 422 and r.json()["code"] == "unknown_priority_class", r.text
    r = await admin.post("/api/v1/priority-classes",
                         json={"name": "x", "rank": 1, "any_project": True, "projects": ["a"]})
    assert r.status_code == 422 and "not both" in r.json()["message"], r.text


async def test_a_non_member_gets_the_answer_of_a_class_that_does_not_exist(
    admin: Client, make_user: UserFactory
) -> None:
    await make_user("alice")
    bob = await make_user("bob")
    await make_project(admin, "vision", "alice")
    for body in ({"name": "secret", "rank": 50, "projects": ["vision"]},
                 {"name": "low", "rank": 1, "any_project": True}):
        assert (await admin.post("/api/v1/priority-classes", json=body)).status_code == 201
    run = {"name": "t", "script": "t.py", "image": "python:3.11"}
    for name in ("secret", "nothing"):
        r = await bob.post("/api/v1/sessions", json={"image": "python:3.11",
                                                     "priority_class": name})
        assert (r.status_code, r.json()["code"], r.json()["message"]) == (
            422, "unknown_priority_class", UNKNOWN.format(name, "low, normal")), r.text
        r2 = await bob.post("/api/v1/runs/check", json={**run, "priority_class": name})
        assert (r2.status_code, r2.json()["message"]) == (422, r.json()["message"]), r2.text
        r3 = await bob.post("/api/v1/sessions/preview", json={"image": "python:3.11",
                                                              "priority_class": name})
        assert (r3.status_code, r3.json()["message"]) == (422, r.json()["message"]), r3.text
    assert "secret" not in (await bob.get("/api/v1/priority-classes")).text
