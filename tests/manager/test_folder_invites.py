"""Sharing a folder tells a user nothing about who exists (issue 35, finding 14): a username
that exists and one nobody has get the same answers; a share to a name nobody has becomes a
grant once that user is created. Admins, who see every user, are told."""

from __future__ import annotations

from typing import Any

from .conftest import Client, UserFactory
from .folder_helpers import API, folder, get, put


def _shape(answer: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in answer.items() if k != "created_at"}


async def test_sharing_answers_alike_whether_the_user_exists(make_user: UserFactory) -> None:
    await make_user("alice")
    bob = await make_user("bob")
    mine = await folder(bob, "mine")
    answers = {}
    for name in ("alice", "nobody"):
        r = await bob.put(f"{API}/{mine['id']}/grants", json={"user": name, "permission": "rw"})
        assert r.status_code == 200, r.text
        answers[name] = _shape(r.json())
    assert answers == {name: {"user_id": None, "username": name, "permission": "rw"}
                       for name in ("alice", "nobody")}
    grants = (await bob.get(f"{API}/{mine['id']}")).json()["grants"]
    assert [_shape(g) for g in grants] == list(answers.values())

    await make_user("carol")
    for name in ("carol", "ghost"):  # never shared: one answer, whether the user exists or not
        r = await bob.delete(f"{API}/{mine['id']}/grants/{name}")
        assert (r.status_code, r.json()["message"]) == (404, f"mine is not shared with {name}")
    for name in ("alice", "nobody"):
        assert (await bob.delete(f"{API}/{mine['id']}/grants/{name}")).status_code == 204
    assert (await bob.get(f"{API}/{mine['id']}")).json()["grants"] == []

    r = await bob.put(f"{API}/{mine['id']}/grants", json={"user": "Not A Name"})
    assert r.status_code == 422 and "is not a username" in r.json()["message"], r.text


async def test_a_share_to_a_name_nobody_has_becomes_a_grant_when_the_user_exists(
    make_user: UserFactory, admin: Client
) -> None:
    bob = await make_user("bob")
    mine = await folder(bob, "mine")
    await put(bob, mine["id"], "a.txt", b"for dora")
    for name in ("dora", "erin"):
        r = await bob.put(f"{API}/{mine['id']}/grants", json={"user": name, "permission": "ro"})
        assert r.status_code == 200, r.text
    dora = await make_user("dora")  # POST /users
    [seen] = (await dora.get(API)).json()
    assert (seen["name"], seen["access"]) == ("mine", "ro")
    assert await get(dora, mine["id"], "a.txt") == b"for dora"

    r = await admin.post("/api/v1/config/import", json={"users": [{"username": "erin"}]})
    assert r.status_code == 200, r.text  # a user made by a config import claims hers too
    grants = (await bob.get(f"{API}/{mine['id']}")).json()["grants"]
    assert [(g["username"], g["permission"]) for g in grants] == [("dora", "ro"), ("erin", "ro")]


async def test_admins_sharing_shared_folders_are_told_who_exists(
    make_user: UserFactory, admin: Client
) -> None:
    await make_user("alice")
    data = await folder(admin, "datasets", shared=True)
    r = await admin.put(f"{API}/{data['id']}/grants", json={"user": "nobody"})
    assert (r.status_code, r.json()["message"]) == (404, "no user named 'nobody'")
    users = {u["username"]: u["id"] for u in (await admin.get("/api/v1/users")).json()}
    r = await admin.put(f"{API}/{data['id']}/grants", json={"user": users["alice"]})
    assert r.status_code == 200, r.text
    assert (r.json()["user_id"], r.json()["username"]) == (users["alice"], "alice")
    [grant] = (await admin.get(f"{API}/{data['id']}")).json()["grants"]
    assert grant["user_id"] == users["alice"]
