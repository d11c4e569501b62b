"""A folder in use is not deleted, and the refusal names only the sessions the caller may see
(security review 2026-12, F10): another user's session mounting a shared folder is counted,
never named."""

from __future__ import annotations

from .conftest import UserFactory, create
from .folder_helpers import API, folder


async def test_deleting_a_shared_folder_counts_other_users_sessions_unnamed(
    make_user: UserFactory,
) -> None:
    alice, bob = await make_user("alice"), await make_user("bob")
    data = await folder(alice, "data")
    r = await alice.put(f"{API}/{data['id']}/grants", json={"user": "bob", "permission": "rw"})
    assert r.status_code == 200, r.text
    await create(bob, name="secret-x", folders=["data"])

    r = await alice.delete(f"{API}/{data['id']}")
    assert r.status_code == 409 and r.json()["code"] == "folder_in_use"
    message = r.json()["message"]
    assert "secret-x" not in message
    assert "1 session of another user" in message and "ask them, or an admin" in message

    await create(alice, name="mine", folders=["data"])
    r = await alice.delete(f"{API}/{data['id']}")
    message = r.json()["message"]
    assert r.status_code == 409 and "secret-x" not in message
    assert message.startswith(
        "folder data is mounted by session(s) mine and 1 session of another user; "
        "destroy yours, then delete it once theirs end")


async def test_a_folder_only_the_callers_sessions_mount_names_them(
    make_user: UserFactory,
) -> None:
    alice = await make_user("alice")
    data = await folder(alice, "data")
    await create(alice, name="a1", folders=["data"])
    await create(alice, name="a2", folders=["data"])
    r = await alice.delete(f"{API}/{data['id']}")
    assert r.status_code == 409 and r.json()["message"] == (
        "folder data is mounted by session(s) a1, a2; destroy them first")
