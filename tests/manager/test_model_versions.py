"""Model versions and what an upload may announce, on both backends (the local store and a
real S3 server): a save of a used name is its next version and replaces nothing (finding 5);
a file of the wrong length is a 422 naming both sizes, and an upload over the quota or the
store's free space is refused before a byte is sent (finding 13)."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import FastAPI

from gpuslice.manager.services.models.quota import used_bytes
from gpuslice.manager.settings import ManagerSettings
from tests.s3 import s3_server

from .conftest import Client, UserFactory
from .model_helpers import fetch, save, settings

__all__ = ["s3_server", "settings"]
TiB = 1024**4
V1 = {"model.txt": b"first\n", "ckpt/step-1.bin": bytes(range(256)) * 16}
V2 = {"model.txt": b"second\n"}


async def text(client: Client, ref: str, path: str = "model.txt") -> bytes:
    r = await client.get(f"/api/v1/models/{ref}/files", params={"path": path})
    assert r.status_code == 200, r.text
    return r.content


async def test_a_second_save_of_a_name_is_version_2_and_the_first_stays(
    make_user: UserFactory, app: FastAPI
) -> None:
    alice = await make_user("alice")
    first = await save(alice, "resnet", V1)
    second = await save(alice, "resnet", V2)
    assert (first["ref"], second["ref"], second["latest"]) == ("resnet:1", "resnet:2", True)
    listed = (await alice.get("/api/v1/models")).json()
    assert [(m["ref"], m["latest"]) for m in listed] == [("resnet:1", False), ("resnet:2", True)]
    # the bare name is the latest; resnet:1 is the first, whole, files and all
    assert await text(alice, "resnet") == b"second\n"
    assert await text(alice, "resnet:1") == b"first\n"
    assert await text(alice, "resnet:1", "ckpt/step-1.bin") == V1["ckpt/step-1.bin"]
    assert (await alice.get("/api/v1/models/resnet:1")).json()["version"] == 1
    # as the console sends it (encodeURIComponent)
    assert (await alice.get("/api/v1/models/resnet%3A1")).json()["version"] == 1
    urls = (await alice.post("/api/v1/models/resnet:1/presign")).json()
    assert urls["version"] == 1 and (await fetch(app, urls["urls"]["model.txt"])
                                     ).content == b"first\n"
    store = app.state.model_store
    assert len(await store.listing(f"users/{first['owner_id']}/resnet/")) == 3

    # deleting the bare name of several versions says what it would do instead of doing it
    r = await alice.delete("/api/v1/models/resnet")
    assert r.status_code == 409 and r.json()["code"] == "model_has_versions"
    assert "has 2 versions (1, 2)" in r.json()["message"] and "all=true" in r.json()["message"]
    assert len((await alice.get("/api/v1/models")).json()) == 2
    r = await alice.delete("/api/v1/models/resnet:1")
    assert r.status_code == 200 and r.json() == {"name": "resnet", "versions": [1]}
    r = await alice.get("/api/v1/models/resnet:1")
    assert r.status_code == 404 and r.json()["message"] == (
        "model resnet has no version 1; its versions: 2")
    assert await text(alice, "resnet") == b"second\n"
    # a deleted version's number is never given again, the latest one's included
    assert (await save(alice, "resnet", {"model.txt": b"third\n"}))["ref"] == "resnet:3"
    assert (await alice.delete("/api/v1/models/resnet:3")).json()["versions"] == [3]
    latest = (await alice.get("/api/v1/models/resnet")).json()
    assert (latest["ref"], latest["latest"]) == ("resnet:2", True)
    assert (await save(alice, "resnet", {"model.txt": b"fourth\n"}))["ref"] == "resnet:4"
    r = await alice.delete("/api/v1/models/resnet", params={"all": "true"})
    assert r.status_code == 200 and r.json() == {"name": "resnet", "versions": [2, 4]}
    assert (await alice.get("/api/v1/models")).json() == []
    assert await store.listing(f"users/{first['owner_id']}/") == []


async def test_a_model_reference_is_checked_and_another_users_versions_are_unknown(
    make_user: UserFactory,
) -> None:
    alice, bob = await make_user("alice"), await make_user("bob")
    await save(alice, "resnet", V2)
    for ref in ("resnet:0", "resnet:x", "resnet:01", "resnet:"):
        r = await alice.get(f"/api/v1/models/{ref}")
        assert r.status_code == 422 and r.json()["code"] == "bad_model_ref", ref
        assert "NAME:VERSION" in r.json()["message"]
    r = await alice.delete("/api/v1/models/resnet:1", params={"all": "true"})
    assert r.status_code == 422 and "give resnet, not resnet:1" in r.json()["message"]
    nobody = (await bob.get("/api/v1/models/nothing:1")).json()["message"]
    for r in (await bob.get("/api/v1/models/resnet:1"), await bob.delete("/api/v1/models/resnet"),
              await bob.post("/api/v1/models/resnet:1/presign")):
        assert r.status_code == 404 and r.json()["message"] == nobody.replace(
            "nothing", "resnet")


async def start(client: Client, name: str, files: list[dict[str, Any]]) -> Any:
    return await client.post("/api/v1/model-uploads", json={"name": name, "files": files})


async def test_a_file_of_the_wrong_length_is_a_422_naming_both_sizes(
    make_user: UserFactory, app: FastAPI
) -> None:
    alice = await make_user("alice")
    r = await start(alice, "short", [{"path": "w.bin", "size": 10}])
    upload = r.json()["upload_id"]
    url = f"/api/v1/model-uploads/{upload}/files"
    r = await alice.put(url, params={"path": "w.bin"}, content=b"12345")
    assert r.status_code == 422 and r.json()["code"] == "upload_size_mismatch", r.text
    assert r.json()["message"] == (
        "file w.bin: 10 bytes were announced and 5 came: send exactly the bytes announced")
    r = await alice.put(url, params={"path": "w.bin"}, content=b"x" * 12)
    assert r.status_code == 422 and r.json()["code"] == "upload_size_mismatch", r.text
    assert "10 bytes were announced and more than 10 came" in r.json()["message"]
    r = await alice.post(f"/api/v1/model-uploads/{upload}/complete")
    assert r.status_code == 422 and "w.bin is missing" in r.json()["message"]  # nothing kept
    r = await alice.put(url, params={"path": "w.bin"}, content=b"x" * 10)
    assert r.status_code == 204, r.text
    assert (await alice.post(f"/api/v1/model-uploads/{upload}/complete")).status_code == 200


async def test_an_upload_over_the_quota_or_the_free_space_is_refused_before_a_byte(
    make_user: UserFactory, app: FastAPI, settings: ManagerSettings
) -> None:
    alice = await make_user("alice")
    r = await start(alice, "huge", [{"path": "w.bin", "size": 5 * TiB}])
    assert r.status_code == 413 and r.json()["code"] == "model_quota_exceeded", r.text
    assert r.json()["message"].startswith(
        "this upload announces 5 TiB, and your models already take 0 B of your model-store "
        "quota of 100 GiB (model_store.user_quota)")
    async with app.state.sessionmaker() as db:
        assert await used_bytes(db, (await alice.get("/api/v1/auth/me")).json()["id"]) == 0

    settings.model_store.user_quota = 1024**2  # 1 MiB each: versions and uploads count
    await save(alice, "small", {"a.bin": b"x" * 600 * 1024})
    r = await start(alice, "small", [{"path": "a.bin", "size": 600 * 1024}])
    assert r.status_code == 413 and "already take 600 KiB of your model-store quota of 1 MiB" \
        in r.json()["message"]
    assert r.json()["message"].endswith("(gpuslice model delete NAME:VERSION) or ask an admin "
                                        "to raise it")
    assert (await alice.delete("/api/v1/models/small:1")).status_code == 200
    assert (await start(alice, "small", [{"path": "a.bin", "size": 600 * 1024}])
            ).status_code == 201

    settings.model_store.user_quota = 1024**5  # now the store's own space is the bound
    r = await start(alice, "vast", [{"path": f"{i}.bin", "size": 5 * TiB} for i in range(50)])
    if settings.model_store.backend == "s3":  # S3 grows as needed: only the quota holds
        assert r.status_code == 201, r.text
        return
    assert r.status_code == 413 and r.json()["code"] == "model_store_full", r.text
    assert r.json()["message"].startswith("this upload announces 250 TiB, more than the ")
    assert r.json()["message"].endswith(" the model store has free")


async def test_saves_completing_at_once_take_one_version_each(make_user: UserFactory) -> None:
    alice = await make_user("alice")
    uploads = []
    for i in range(4):
        r = await start(alice, "resnet", [{"path": "m.txt", "size": 1}])
        uploads.append(r.json()["upload_id"])
        r = await alice.put(f"/api/v1/model-uploads/{uploads[-1]}/files",
                            params={"path": "m.txt"}, content=str(i).encode())
        assert r.status_code == 204, r.text
    done = await asyncio.gather(*(alice.post(f"/api/v1/model-uploads/{u}/complete")
                                  for u in uploads))
    assert all(r.status_code == 200 for r in done), [r.text for r in done]
    assert sorted(r.json()["version"] for r in done) == [1, 2, 3, 4]
    listed = (await alice.get("/api/v1/models", params={"name": "resnet"})).json()
    assert [m["version"] for m in listed] == [1, 2, 3, 4]


async def test_uploads_racing_for_the_last_room_never_both_fit(
    make_user: UserFactory, settings: ManagerSettings
) -> None:
    alice = await make_user("alice")
    settings.model_store.user_quota = 1024**2
    files = [{"path": "a.bin", "size": 600 * 1024}]
    answers = await asyncio.gather(*(start(alice, f"m{i}", files) for i in range(4)))
    codes = sorted(r.status_code for r in answers)
    assert codes.count(201) <= 1 and set(codes) <= {201, 413}, [r.text for r in answers]
