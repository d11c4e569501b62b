"""Storage folders through the API: files in and out, sharing, rules on paths, quotas, mounts."""

from __future__ import annotations

import asyncio
import io
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest

from gpuslice.manager.loop_table import run_once
from gpuslice.manager.settings import ManagerSettings
from tests.waits import Deadline

from .conftest import AgentFactory, Client, UserFactory, create
from .folder_helpers import API, folder, get, on_disk, put, tar_of


async def test_folder_files_round_trip_with_usage(make_user: UserFactory,
                                                  settings: ManagerSettings) -> None:
    alice = await make_user("alice")
    data = await folder(alice, "data")
    assert (data["access"], data["shared"], data["auto_mount"]) == ("owner", False, False)
    payload = os.urandom(3 * 1024 * 1024 + 17)  # more than one 1 MiB piece
    r = await put(alice, data["id"], "train/part-1.bin", payload)
    assert r.status_code == 201, r.text
    assert r.json()["size"] == len(payload)
    assert await get(alice, data["id"], "train/part-1.bin") == payload

    listing = (await alice.get(f"{API}/{data['id']}/files", params={"path": "train"})).json()
    assert [(e["path"], e["type"], e["size"]) for e in listing["entries"]] == [
        ("train/part-1.bin", "file", len(payload))]
    usage = (await alice.get(f"{API}/usage")).json()
    assert (usage["used"], usage["quota"], usage["over_quota"]) == (len(payload), None, False)

    stored = on_disk(settings, data) / "train" / "part-1.bin"
    st = stored.stat()
    assert (st.st_uid, st.st_gid, oct(st.st_mode & 0o777)) == (1000, 1000, "0o644")
    top = on_disk(settings, data).stat()
    assert (top.st_uid, oct(top.st_mode & 0o777)) == (1000, "0o770")
    assert oct(settings.storage_root.stat().st_mode & 0o777) == "0o700"

    r = await alice.get(f"{API}/{data['id']}/content", params={"path": "train/part-1.bin"},
                        headers={"Range": "bytes=100-"})
    assert r.status_code == 206 and r.content == payload[100:]
    assert r.headers["content-range"] == f"bytes 100-{len(payload) - 1}/{len(payload)}"

    r = await alice.patch(f"{API}/{data['id']}", json={"name": "datasets"})
    assert r.json()["name"] == "datasets"
    r = await alice.delete(f"{API}/{data['id']}/files", params={"path": "train"})
    assert r.status_code == 204
    assert not (on_disk(settings, data) / "train").exists()
    assert (await alice.delete(f"{API}/{data['id']}")).status_code == 204
    assert not on_disk(settings, data).exists()


async def test_another_users_folder_is_a_404_like_a_random_id(make_user: UserFactory) -> None:
    alice, bob = await make_user("alice"), await make_user("bob")
    data = await folder(alice, "data")
    await put(alice, data["id"], "secret.txt", b"mine")
    unknown = (await bob.get(f"{API}/no-such-folder")).json()
    for call in (
        bob.get(f"{API}/{data['id']}"),
        bob.get(f"{API}/{data['id']}/files"),
        bob.get(f"{API}/{data['id']}/content", params={"path": "secret.txt"}),
        bob.get(f"{API}/{data['id']}/archive"),
        bob.put(f"{API}/{data['id']}/content", params={"path": "x", "size": 1}, content=b"x"),
        bob.delete(f"{API}/{data['id']}"),
    ):
        r = await call
        assert r.status_code == 404, r.text
        assert r.json()["message"] == unknown["message"].replace("no-such-folder", data["id"])
    assert [f["name"] for f in (await bob.get(API)).json()] == []
    r = await bob.post("/api/v1/sessions", json={"image": "python:3.11", "folders": [data["id"]]})
    assert r.status_code == 422 and r.json()["code"] == "unknown_folder"
    r = await bob.post("/api/v1/sessions", json={"image": "python:3.11", "folders": ["data"]})
    assert r.status_code == 422 and "no folder named data" in r.json()["message"]


async def test_shared_read_only_cannot_be_written_and_mounts_read_only(
    make_user: UserFactory,
) -> None:
    alice, bob = await make_user("alice"), await make_user("bob")
    data = await folder(alice, "data")
    await put(alice, data["id"], "a.txt", b"hello")
    r = await alice.put(f"{API}/{data['id']}/grants", json={"user": "bob", "permission": "ro"})
    assert r.status_code == 200, r.text
    [seen] = (await bob.get(API)).json()
    assert (seen["name"], seen["access"], seen["owner"], seen["grants"]) == (
        "data", "ro", "alice", None)
    assert await get(bob, data["id"], "a.txt") == b"hello"
    r = await put(bob, data["id"], "b.txt", b"no")
    assert r.status_code == 403 and r.json()["code"] == "read_only"
    assert (await bob.delete(f"{API}/{data['id']}/files", params={"path": "a.txt"})).status_code \
        == 403
    assert (await bob.patch(f"{API}/{data['id']}", json={"name": "x"})).status_code == 403

    [session] = await create(bob, folders=["data"])
    assert session["folders"] == [{"folder_id": data["id"], "name": "data", "read_only": True}]
    r = await bob.post("/api/v1/sessions", json={"image": "python:3.11", "folders": ["data:rw"]})
    assert r.status_code == 422 and "mount it as data:ro" in r.json()["message"]
    r = await alice.delete(f"{API}/{data['id']}")
    assert r.status_code == 409 and r.json()["code"] == "folder_in_use"

    assert (await alice.delete(f"{API}/{data['id']}/grants/bob")).status_code == 204
    assert (await bob.get(f"{API}/{data['id']}")).status_code == 404


@pytest.mark.parametrize("bad", ["../escape.txt", "/etc/passwd", "a/../../b", "a/\x00b", ""])
async def test_paths_that_leave_the_folder_are_refused(make_user: UserFactory, bad: str) -> None:
    alice = await make_user("alice")
    data = await folder(alice, "data")
    for r in (
        await put(alice, data["id"], bad, b"x"),
        await alice.get(f"{API}/{data['id']}/content", params={"path": bad}),
        await alice.delete(f"{API}/{data['id']}/files", params={"path": bad}),
    ):
        assert r.status_code == 422, r.text
        # NUL is no text at all: the API's edge refuses it before the folder's rules run
        code = "validation_error" if "\x00" in bad else "path_not_allowed"
        assert r.json()["code"] == code and r.json()["field"] == "path"


async def test_symbolic_links_are_never_followed(
    make_user: UserFactory, settings: ManagerSettings, tmp_path: Path
) -> None:
    alice = await make_user("alice")
    data = await folder(alice, "data")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("host secret")
    top = on_disk(settings, data)
    (top / "link-dir").symlink_to(outside)  # as a session could have made them
    (top / "link-file").symlink_to(outside / "secret")
    os.mkfifo(top / "pipe")

    for path in ("link-file", "link-dir/secret", "pipe"):
        r = await alice.get(f"{API}/{data['id']}/content", params={"path": path})
        assert r.status_code == 422 and r.json()["code"] == "path_not_allowed", (path, r.text)
    r = await put(alice, data["id"], "link-dir/planted", b"x")
    assert r.status_code == 422 and "symbolic link" in r.json()["message"]
    assert not (outside / "planted").exists()
    r = await alice.get(f"{API}/{data['id']}/archive", params={"path": "link-dir"})
    assert r.status_code == 422
    r = await alice.put(f"{API}/{data['id']}/archive", params={"path": "link-dir"},
                        content=tar_of({"x": b"1"}))
    assert r.status_code == 422 and not (outside / "x").exists()
    # a listing shows links for what they are; the archive of the top leaves them out
    entries = (await alice.get(f"{API}/{data['id']}/files")).json()["entries"]
    assert {e["path"]: e["type"] for e in entries} == {
        "link-dir": "link", "link-file": "link", "pipe": "other"}
    r = await alice.get(f"{API}/{data['id']}/archive")
    assert tarfile.open(fileobj=io.BytesIO(r.content)).getnames() == []
    # deleting a link removes the link, not what it points at
    assert (await alice.delete(f"{API}/{data['id']}/files", params={"path": "link-dir"})
            ).status_code == 204
    assert (outside / "secret").read_text() == "host secret"


async def test_directories_as_tar_streams_all_or_nothing(make_user: UserFactory) -> None:
    alice = await make_user("alice")
    data = await folder(alice, "data")
    good = tar_of({"src": None, "src/train.py": b"print(1)\n", "src/conf/a.yaml": b"a: 1\n"})
    r = await alice.put(f"{API}/{data['id']}/archive", params={"path": "code"}, content=good)
    assert r.status_code == 200, r.text
    assert (r.json()["files"], r.json()["bytes"]) == (2, 14)
    assert await get(alice, data["id"], "code/src/conf/a.yaml") == b"a: 1\n"
    back = (await alice.get(f"{API}/{data['id']}/archive", params={"path": "code"})).content
    with tarfile.open(fileobj=io.BytesIO(back)) as tar:
        assert sorted(tar.getnames()) == ["src", "src/conf", "src/conf/a.yaml", "src/train.py"]
        assert tar.extractfile("src/train.py").read() == b"print(1)\n"  # type: ignore[union-attr]

    for bad, why in (
        (tar_of({"ok.txt": b"1", "../evil": b"2"}), "'..' is not allowed"),
        (tar_of({"/abs": b"2"}), "absolute paths are not allowed"),
        (tar_of({"ok.txt": b"1"}, links={"l": "/etc"}), "is a link"),
        (b"not a tar at all" * 100, "not a valid tar archive"),
    ):
        r = await alice.put(f"{API}/{data['id']}/archive", params={"path": "bad"}, content=bad)
        assert r.status_code == 422, r.text
        assert why in r.json()["message"]
    listing = (await alice.get(f"{API}/{data['id']}/files")).json()["entries"]
    assert [e["path"] for e in listing] == ["code"]  # nothing of the refused archives landed


async def test_an_interrupted_upload_resumes(make_user: UserFactory, app: Any) -> None:
    alice = await make_user("alice")
    data = await folder(alice, "data")
    whole = b"0123456789"
    r = await alice.put(f"{API}/{data['id']}/content",
                        params={"path": "f.bin", "size": 10}, content=whole[:4])
    assert r.status_code == 202 and r.json()["offset"] == 4
    assert (await alice.get(f"{API}/{data['id']}/content", params={"path": "f.bin"})
            ).status_code == 404  # nothing where readers look until it is complete
    state = await alice.get(f"{API}/{data['id']}/uploads", params={"path": "f.bin"})
    assert state.json() == {"path": "f.bin", "offset": 4}
    r = await alice.put(f"{API}/{data['id']}/content",
                        params={"path": "f.bin", "size": 10, "offset": 2}, content=whole[2:])
    assert r.status_code == 409 and "resume from offset 4" in r.json()["message"]
    r = await alice.put(f"{API}/{data['id']}/content",
                        params={"path": "f.bin", "size": 10, "offset": 4}, content=whole[4:])
    assert r.status_code == 201, r.text
    assert await get(alice, data["id"], "f.bin") == whole
    r = await alice.put(f"{API}/{data['id']}/content",
                        params={"path": "g.bin", "size": 3}, content=b"toolong")
    assert r.status_code == 422 and r.json()["field"] == "size"
    # an upload nobody resumes is purged by the storage loop after a while
    r = await alice.put(f"{API}/{data['id']}/content",
                        params={"path": "h.bin", "size": 10}, content=b"abc")
    assert r.status_code == 202
    assert app.state.storage.purge_uploads(older_than=-1) >= 1
    state = await alice.get(f"{API}/{data['id']}/uploads", params={"path": "h.bin"})
    assert state.json()["offset"] == 0


async def test_uploads_beyond_the_storage_quota_are_refused(make_user: UserFactory) -> None:
    alice = await make_user("alice", policy={"max_storage": "1m"})
    data = await folder(alice, "data")
    assert (await put(alice, data["id"], "a.bin", b"x" * 700_000)).status_code == 201
    r = await put(alice, data["id"], "b.bin", b"x" * 700_000)
    assert r.status_code == 422 and r.json()["code"] == "quota_exceeded"
    assert "leaves 340.4 KiB free" in r.json()["message"]
    r = await alice.put(f"{API}/{data['id']}/archive",
                        content=tar_of({"big.bin": b"y" * 700_000}))
    assert r.status_code == 422 and r.json()["code"] == "quota_exceeded"
    usage = (await alice.get(f"{API}/usage")).json()
    assert (usage["used"], usage["quota"], usage["over_quota"]) == (700_000, 1024**2, False)


async def test_dot_folders_mount_in_every_session_and_are_never_shared(
    make_user: UserFactory, make_agent: AgentFactory,
) -> None:
    alice = await make_user("alice")
    await make_user("bob")
    local = await folder(alice, ".local")
    assert local["auto_mount"] is True
    r = await alice.put(f"{API}/{local['id']}/grants", json={"user": "bob"})
    assert r.status_code == 422 and r.json()["code"] == "dot_folder"
    data = await folder(alice, "data")
    r = await alice.put(f"{API}/{data['id']}/grants", json={"user": "bob", "permission": "rw"})
    assert r.status_code == 200
    r = await alice.patch(f"{API}/{data['id']}", json={"name": ".data"})
    assert r.status_code == 422 and r.json()["code"] == "dot_folder"

    agent = await make_agent("node-1")
    [session] = await create(alice, folders=["data:ro"], resources={"cpu": 1, "mem": "1g"})
    assert [(f["name"], f["read_only"]) for f in session["folders"]] == [
        ("data", True), (".local", False)]
    mounts = await _mounts_of(agent, session["id"])
    assert mounts == [
        {"path": f"users/{data['owner_id']}/{data['id']}", "name": "data", "read_only": True},
        {"path": f"users/{local['owner_id']}/{local['id']}", "name": ".local",
         "read_only": False},
    ]


async def test_assignments_follow_grants(make_user: UserFactory, make_agent: AgentFactory,
                                         admin: Client) -> None:
    bob = await make_user("bob")
    r = await bob.post(API, json={"name": "imagenet", "shared": True})
    assert r.status_code == 403
    imagenet = await folder(admin, "imagenet", shared=True)
    assert imagenet["owner"] == "shared"
    await admin.put(f"{API}/{imagenet['id']}/grants", json={"user": "bob", "permission": "rw"})
    assert (await put(bob, imagenet["id"], "labels.txt", b"cat\n")).status_code == 201
    agent = await make_agent("node-1")
    [session] = await create(bob, folders=["imagenet"])
    [mount] = await _mounts_of(agent, session["id"])
    assert mount == {"path": f"shared/{imagenet['id']}", "name": "imagenet", "read_only": False}
    await admin.put(f"{API}/{imagenet['id']}/grants", json={"user": "bob", "permission": "ro"})
    r = await admin.delete(f"/api/v1/sessions/{session['id']}")
    assert r.status_code == 200
    [again] = await create(bob, folders=["imagenet"])
    assert (await _mounts_of(agent, again["id"]))[0]["read_only"] is True
    await admin.delete(f"{API}/{imagenet['id']}/grants/bob")
    assert await _mounts_of(agent, again["id"], until=lambda m: m == []) == []


async def _mounts_of(agent: Any, session_id: str, until: Any = None) -> list[dict[str, Any]]:
    """The session's mounts in its node's assignments, once it is placed (and ``until`` holds)."""
    deadline = Deadline(10)
    while True:
        r = await agent.client.get("/api/v1/agents/me/assignments", params={"wait": 0})
        found = [s for s in r.json()["sessions"] if s["session_id"] == session_id]
        if found and (until is None or until(found[0]["mounts"])):
            return found[0]["mounts"]
        if deadline.passed:
            raise AssertionError(f"{session_id} not assigned as expected: {r.json()}")
        await asyncio.sleep(0.1)


async def test_what_sessions_write_past_the_quota_is_measured_and_reported(
    make_user: UserFactory, settings: ManagerSettings, app: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    alice = await make_user("alice", policy={"max_storage": "1m"})
    data = await folder(alice, "data")
    await create(alice, folders=["data"])
    big = on_disk(settings, data) / "written-in-a-session.bin"
    big.write_bytes(b"x" * (2 * 1024 * 1024))  # as a session writes: past the API
    (on_disk(settings, data) / "link").symlink_to("/etc")  # never followed when measuring
    await run_once(app, "storage_usage")  # a pass of the storage loop, now
    usage = (await alice.get(f"{API}/usage")).json()
    assert (usage["used"], usage["over_quota"]) == (2 * 1024 * 1024, True)
    assert usage["measured_at"] is not None
    [listed] = (await alice.get(API)).json()
    assert (listed["size"], listed["files"]) == (2 * 1024 * 1024, 1)
    assert "user alice uses 2 MiB of a 1 MiB quota (sessions: " in caplog.text
    r = await put(alice, data["id"], "more.txt", b"x")
    assert r.status_code == 422 and r.json()["code"] == "quota_exceeded"
