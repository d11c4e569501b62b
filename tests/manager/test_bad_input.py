"""Input that once made the manager answer 5xx (issue 35): a file name a session wrote that is
not UTF-8, a rename onto a taken name, an image name past Docker's limit (and rows stored
before it). Each gets a 4xx with a sentence, or works."""

from __future__ import annotations

import asyncio
import io
import os
import tarfile
from typing import Any

from fastapi import FastAPI

from gpuslice.manager.db.models import ImageRow, UserRow
from gpuslice.manager.settings import ManagerSettings

from .conftest import Client, UserFactory
from .folder_helpers import API, folder, on_disk

BAD = b"bad\xffname"  # what `printf x > "$(printf 'bad\377name')"` leaves in a session


def _write_bad_name(settings: ManagerSettings, f: dict[str, Any], *, sub: bytes = b"") -> bytes:
    """Make a file whose name is not UTF-8 directly on disk, as a session would."""
    top = os.fsencode(on_disk(settings, f))
    if sub:
        os.mkdir(top + b"/" + sub)
    name = top + b"/" + (sub + b"/" if sub else b"") + BAD
    with open(name, "wb") as out:
        out.write(b"x")
    return name


async def test_a_file_name_that_is_not_utf8_is_listed_and_handled_through_the_api(
    make_user: UserFactory, settings: ManagerSettings
) -> None:
    alice, bob = await make_user("alice"), await make_user("bob")
    data = await folder(alice, "data")
    r = await alice.put(f"{API}/{data['id']}/grants", json={"user": "bob", "permission": "ro"})
    assert r.status_code == 200, r.text
    on_disk_name = _write_bad_name(settings, data)
    for who in (alice, bob):  # the owner and a grantee alike
        r = await who.get(f"{API}/{data['id']}/files")
        assert r.status_code == 200, r.text
        [entry] = r.json()["entries"]
        assert (entry["path"], entry["raw_path"], entry["type"]) == (
            "bad\ufffdname", "bad%FFname", "file")
    r = await bob.get(f"{API}/{data['id']}/content", params={"raw_path": "bad%FFname"})
    assert (r.status_code, r.content) == (200, b"x")

    tar = (await alice.get(f"{API}/{data['id']}/archive")).content
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        assert [os.fsencode(m.name) for m in archive.getmembers()] == [BAD]

    r = await alice.delete(f"{API}/{data['id']}/files", params={"raw_path": "bad%FFname"})
    assert r.status_code == 204, r.text
    assert not os.path.exists(on_disk_name)
    assert (await alice.get(f"{API}/{data['id']}/files")).json()["entries"] == []


async def test_a_directory_not_utf8_is_listed_and_uploaded_into_by_its_raw_path(
    make_user: UserFactory, settings: ManagerSettings
) -> None:
    alice = await make_user("alice")
    data = await folder(alice, "data")
    _write_bad_name(settings, data, sub=b"d\xfe")
    [d] = (await alice.get(f"{API}/{data['id']}/files")).json()["entries"]
    assert (d["path"], d["raw_path"], d["type"]) == ("d\ufffd", "d%FE", "dir")
    r = await alice.get(f"{API}/{data['id']}/files", params={"raw_path": d["raw_path"]})
    assert r.status_code == 200, r.text
    assert (r.json()["path"], r.json()["raw_path"]) == ("d\ufffd", "d%FE")
    assert [e["raw_path"] for e in r.json()["entries"]] == ["d%FE/bad%FFname"]
    r = await alice.put(f"{API}/{data['id']}/content",
                        params={"raw_path": "d%FE/new", "size": 2}, content=b"hi")
    assert r.status_code == 201, r.text
    assert open(os.fsencode(on_disk(settings, data)) + b"/d\xfe/new", "rb").read() == b"hi"


async def test_raw_paths_follow_the_path_rules(make_user: UserFactory) -> None:
    alice = await make_user("alice")
    data = await folder(alice, "data")
    for params, words in (
        ({"raw_path": "%2E%2E/etc/passwd"}, "'..' is not allowed"),
        ({"raw_path": "%2Fetc%2Fpasswd"}, "absolute paths are not allowed"),
        ({"raw_path": "a%00b"}, "NUL characters are not allowed"),
        ({"raw_path": "a", "path": "a"}, "not both"),
        ({}, "name a file or directory"),
    ):
        r = await alice.get(f"{API}/{data['id']}/content", params=params)
        assert r.status_code == 422, (params, r.text)
        assert r.json()["code"] == "path_not_allowed" and words in r.json()["message"], r.text


async def test_renaming_a_folder_onto_a_taken_name_is_a_409(make_user: UserFactory) -> None:
    alice = await make_user("alice")
    await folder(alice, "a")
    b = await folder(alice, "b")
    r = await alice.patch(f"{API}/{b['id']}", json={"name": "a"})
    assert r.status_code == 409, r.text
    assert r.json() == {"code": "folder_exists", "field": "name",
                        "message": "you already have a folder named a"}
    assert (await alice.get(f"{API}/{b['id']}")).json()["name"] == "b"


async def test_two_renames_racing_to_one_name_give_one_409(make_user: UserFactory) -> None:
    alice = await make_user("alice")
    b, c = await folder(alice, "b"), await folder(alice, "c")
    answers = await asyncio.gather(
        *(alice.patch(f"{API}/{f['id']}", json={"name": "same"}) for f in (b, c)))
    assert sorted(r.status_code for r in answers) == [200, 409], [r.text for r in answers]
    assert sorted(f["name"] for f in (await alice.get(API)).json()) in (
        ["b", "same"], ["c", "same"])


async def test_image_names_past_dockers_limit_are_refused_with_a_sentence(admin: Client) -> None:
    for name in ("a" * 249, "a" * 200 + ":" + "t" * 55):  # 256 with ":latest"; 256 tagged
        r = await admin.post("/api/v1/images", json={"name": name})
        assert r.status_code == 422, r.text
        assert "at most 255" in r.json()["message"], r.text
    r = await admin.post("/api/v1/images", json={"name": "a" * 248})  # 255 with ":latest"
    assert r.status_code == 201, r.text
    r = await admin.post("/api/v1/images", json={"name": "Upper/Case"})
    assert r.status_code == 422 and "lower-case" in r.json()["message"], r.text
    r = await admin.get("/api/v1/config")
    assert r.status_code == 200, r.text
    assert ["a" * 248 + ":latest"] == [i["name"] for i in r.json()["images"]]


async def test_the_config_export_leaves_out_rows_stored_before_a_limit(
    app: FastAPI, admin: Client, settings: ManagerSettings
) -> None:
    odd_user = "Old Style User"  # usernames are lower case without spaces today
    async with app.state.sessionmaker() as db:
        db.add(UserRow(username=odd_user, password_hash="x", role="user"))
        if settings.database_url.startswith("sqlite"):  # PostgreSQL never stored one
            db.add(ImageRow(name="a" * 255 + ":latest", labels={}, allowed=True))
        await db.commit()
    r = await admin.get("/api/v1/config")
    assert r.status_code == 200, r.text
    doc = r.json()
    assert odd_user not in [u["username"] for u in doc["users"]]
    assert any(line.startswith(f"users: {odd_user!r}: username:") for line in doc["left_out"])
    assert "admin" in [u["username"] for u in doc["users"]]
    if settings.database_url.startswith("sqlite"):
        assert doc["images"] == [] and any(x.startswith("images: 'aaa") for x in doc["left_out"])
        r = await admin.delete(f"/api/v1/images/{'a' * 255}:latest")  # removable by its name
        assert r.status_code == 204, r.text
        assert not any(x.startswith("images:") for x in
                       (await admin.get("/api/v1/config")).json()["left_out"])
    r = await admin.post("/api/v1/config/import", json=doc, params={"dry_run": "true"})
    assert r.status_code == 200, r.text


async def test_images_and_aliases_created_at_once_are_never_a_5xx(admin: Client) -> None:
    """Two requests creating one catalog row race on its primary key: one wins, the other
    gets a 4xx with a sentence (PostgreSQL makes them race for real)."""
    allowed = await asyncio.gather(
        *(admin.post("/api/v1/images", json={"name": "raced:1"}) for _ in range(4)))
    codes = sorted(r.status_code for r in allowed)
    assert codes[0] == 201 and set(codes[1:]) <= {409}, [r.text for r in allowed]
    assert all(r.json()["message"] for r in allowed if r.status_code == 409)
    aliased = await asyncio.gather(*(admin.post(
        "/api/v1/images/aliases", json={"name": "raced", "reference": "raced:1"})
        for _ in range(4)))
    assert {r.status_code for r in aliased} <= {201, 409}, [r.text for r in aliased]
    assert [a["reference"] for a in (await admin.get("/api/v1/images/aliases")).json()
            if a["name"] == "raced"] == ["raced:1"]


async def test_an_archive_with_names_not_utf8_unpacks_and_lists(
    make_user: UserFactory, settings: ManagerSettings
) -> None:
    alice = await make_user("alice")
    data = await folder(alice, "data")
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(os.fsdecode(b"t\xfe.bin"))
        info.size = 2
        tar.addfile(info, io.BytesIO(b"ok"))
    r = await alice.put(f"{API}/{data['id']}/archive", content=out.getvalue())
    assert r.status_code == 200, r.text
    assert open(os.fsencode(on_disk(settings, data)) + b"/t\xfe.bin", "rb").read() == b"ok"
    [entry] = (await alice.get(f"{API}/{data['id']}/files")).json()["entries"]
    assert entry["raw_path"] == "t%FE.bin"
