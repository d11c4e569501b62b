"""The model store through the API, on both backends: the local store and a real S3 server
(moto). What is checked is our scoping: per-user prefixes, who may see, presign and fetch."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from fastapi import FastAPI

from gpuslice.manager.loop_table import run_once
from gpuslice.manager.services.models import catalog
from gpuslice.manager.services.models import local as local_store
from gpuslice.manager.services.models.local import LocalStore
from gpuslice.manager.settings import ManagerSettings
from tests.s3 import s3_server
from tests.waits import Deadline

from .conftest import AgentFactory, UserFactory, create
from .helpers import wait_status
from .model_helpers import FILES, fetch, save, settings

__all__ = ["s3_server", "settings"]


async def test_save_list_download_delete(make_user: UserFactory, app: FastAPI) -> None:
    alice = await make_user("alice")
    saved = await save(alice, "resnet")
    assert (saved["name"], saved["version"], saved["files"], saved["size"]) == (
        "resnet", 1, 2, sum(len(d) for d in FILES.values()))
    assert [m["ref"] for m in (await alice.get("/api/v1/models")).json()] == ["resnet:1"]
    detail = (await alice.get("/api/v1/models/resnet")).json()
    assert sorted(f["path"] for f in detail["file_list"]) == sorted(FILES)
    for path, data in FILES.items():
        r = await alice.get("/api/v1/models/resnet/files", params={"path": path})
        assert r.status_code == 200 and r.content == data

    store = app.state.model_store
    owner = saved["owner_id"]
    assert len(await store.listing(f"users/{owner}/resnet/")) == 2
    r = await alice.delete("/api/v1/models/resnet")  # its only version
    assert r.status_code == 200 and r.json() == {"name": "resnet", "versions": [1]}
    assert await store.listing(f"users/{owner}/") == []
    assert (await alice.get("/api/v1/models")).json() == []


async def test_another_user_cannot_list_presign_or_fetch(make_user: UserFactory,
                                                         app: FastAPI) -> None:
    alice, bob = await make_user("alice"), await make_user("bob")
    await save(alice, "resnet")
    assert (await bob.get("/api/v1/models")).json() == []
    nobody = (await bob.get("/api/v1/models/no-such-model")).json()["message"]
    for r in (
        await bob.get("/api/v1/models/resnet"),
        await bob.get("/api/v1/models/resnet/files", params={"path": "model.txt"}),
        await bob.post("/api/v1/models/resnet/presign"),
        await bob.delete("/api/v1/models/resnet"),
    ):
        assert r.status_code == 404 and r.json()["message"] == nobody.replace(
            "no-such-model", "resnet"), r.text
    # bob's own model of the same name is his, under his own prefix
    mine = await save(bob, "resnet", {"model.txt": b"bob's"})
    urls = (await bob.post("/api/v1/models/resnet/presign")).json()["urls"]
    assert f"users/{mine['owner_id']}/resnet/" in urls["model.txt"]
    assert (await fetch(app, urls["model.txt"])).content == b"bob's"
    # an upload id of alice's is nobody else's to fill or complete
    r = await alice.post("/api/v1/model-uploads",
                         json={"name": "x", "files": [{"path": "a", "size": 1}]})
    upload = r.json()["upload_id"]
    r = await bob.put(f"/api/v1/model-uploads/{upload}/files", params={"path": "a"}, content=b"1")
    assert r.status_code == 404
    assert (await bob.post(f"/api/v1/model-uploads/{upload}/complete")).status_code == 404


class _HeldClock:
    """The local store's ``time``: the real clock, held still at ``now`` once that is set."""

    def __init__(self) -> None:
        self.now: float | None = None

    def time(self) -> float:
        return time.time() if self.now is None else self.now

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


async def test_presigned_urls_are_scoped_and_expire(
    make_user: UserFactory, app: FastAPI, settings: ManagerSettings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    alice = await make_user("alice")
    saved = await save(alice, "resnet")
    # The local store's clock stands still from the signing on: a URL good for 1 second is
    # used within it however slow the machine, then expires when the clock moves on.
    clock = _HeldClock()
    monkeypatch.setattr(local_store, "time", clock)
    clock.now = time.time()
    r = await alice.post("/api/v1/models/resnet/presign", params={"ttl": 1})
    urls = r.json()["urls"]
    assert set(urls) == set(FILES)
    query = parse_qs(urlsplit(urls["model.txt"]).query)
    assert f"users/{saved['owner_id']}/resnet/" in urlsplit(urls["model.txt"]).path
    if settings.model_store.backend == "s3":
        # S3 counts from X-Amz-Date, whole seconds: a 1-second URL may be dead at once. The
        # S3 server checks signatures and expiry (tests/s3_server.py, as AWS and MinIO do).
        assert query["X-Amz-Expires"] == ["1"]
        deadline = Deadline(10)
        while (await fetch(app, urls["model.txt"])).status_code != 403:
            assert not deadline.passed, "a URL signed for 1 second still works"
            await asyncio.sleep(0.2)
        r = await alice.post("/api/v1/models/resnet/presign", params={"ttl": 60})
        good = r.json()["urls"]["model.txt"]
        assert (await fetch(app, good)).content == FILES["model.txt"]
        tampered = good.replace("model.txt", "ckpt/step-1.bin")
        assert (await fetch(app, tampered)).status_code == 403
        return
    got = await fetch(app, urls["model.txt"])
    assert got.status_code == 200 and got.content == FILES["model.txt"]
    tampered = urls["model.txt"].replace("model.txt", "ckpt/step-1.bin")
    r = await fetch(app, tampered)
    assert r.status_code == 403 and "signature does not match" in r.json()["message"]
    clock.now += 2.1  # past the second it was signed for, rounded up
    r = await fetch(app, urls["model.txt"])
    assert r.status_code == 403 and "expired" in r.json()["message"]


async def test_a_session_saves_for_its_owner_only_through_its_node(
    make_user: UserFactory, make_agent: AgentFactory, app: FastAPI, settings: ManagerSettings,
) -> None:
    alice = await make_user("alice")
    node = await make_agent("node-1")
    other = await make_agent("node-2", devices=[])
    [session] = await create(alice, resources={"cpu": 1, "mem": "1g", "gpu": 0.5})
    sid = session["id"]
    assert (await wait_status(alice, sid, {"RUNNING"}))["status"] == "RUNNING"
    base = f"/api/v1/agents/me/sessions/{sid}/models"
    body = {"name": "run-1", "files": [{"path": "model.txt", "size": 3}]}
    assert (await other.client.post(f"{base}/uploads", json=body)).status_code == 404
    r = await node.client.post(f"{base}/uploads", json=body)
    assert r.status_code == 201, r.text
    started = r.json()
    if settings.model_store.backend == "s3":
        assert started["mode"] == "presigned"
        url = started["urls"]["model.txt"]
        assert f"/users/{session['owner_id']}/run-1/" in url
        async with httpx.AsyncClient() as s3:
            r = await s3.put(url, content=b"abc", headers=started["headers"])
            assert r.status_code == 200, r.text
    else:
        assert started["mode"] == "stream"
        r = await node.client.put(f"{base}/file", content=b"abc",
                                  params={"upload_id": started["upload_id"], "path": "model.txt"})
        assert r.status_code == 204, r.text
    r = await other.client.post(f"{base}/complete", json={"upload_id": started["upload_id"]})
    assert r.status_code == 404
    r = await node.client.post(f"{base}/complete", json={"upload_id": started["upload_id"]})
    assert r.status_code == 200, r.text
    [model] = (await alice.get("/api/v1/models")).json()
    assert (model["name"], model["session_id"], model["session_name"]) == (
        "run-1", sid, session["name"])
    r = await alice.get("/api/v1/models/run-1/files", params={"path": "model.txt"})
    assert r.content == b"abc"

    await alice.delete(f"/api/v1/sessions/{sid}")
    for _ in range(100):
        if (await node.client.post(f"{base}/presign", json={"name": "run-1"})).status_code == 404:
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError("an ended session still presigns")


@pytest.mark.parametrize("settings", ["s3"], indirect=True)
async def test_a_put_url_writes_its_file_once_at_its_announced_size(
    make_user: UserFactory, make_agent: AgentFactory, app: FastAPI
) -> None:
    alice = await make_user("alice")
    node = await make_agent("node-1")
    [session] = await create(alice, resources={"cpu": 1, "mem": "1g", "gpu": 0.5})
    assert (await wait_status(alice, session["id"], {"RUNNING"}))["status"] == "RUNNING"
    base = f"/api/v1/agents/me/sessions/{session['id']}/models"
    r = await node.client.post(f"{base}/uploads",
                               json={"name": "q", "files": [{"path": "a", "size": 1}]})
    started = r.json()
    url, signed = started["urls"]["a"], started.get("headers", {})
    store, mine = app.state.model_store, f"users/{session['owner_id']}/"
    async with httpx.AsyncClient() as s3:
        # S3 itself refuses another length than announced (signed), and a PUT without the
        # signed If-None-Match
        r = await s3.put(url, content=b"x" * 65536, headers=signed)
        assert r.status_code == 403 and "SignatureDoesNotMatch" in r.text, r.text
        assert signed == {"If-None-Match": "*"}
        assert (await s3.put(url, content=b"x")).status_code == 403
        assert await store.listing(mine) == []
        assert (await s3.put(url, content=b"x", headers=signed)).status_code == 200
        r = await node.client.post(f"{base}/complete", json={"upload_id": started["upload_id"]})
        assert r.status_code == 200 and r.json()["size"] == 1, r.text
        # once the file is in (so after complete), the URL writes nothing more
        assert (await s3.put(url, content=b"y", headers=signed)).status_code == 412
        assert (await s3.put(url, content=b"y" * 65536, headers=signed)).status_code == 403
        r = await alice.get("/api/v1/models/q/files", params={"path": "a"})
        assert r.content == b"x"
        assert [s.size for s in await store.listing(mine)] == [1]  # what the quota counts
        # a model deleted while its URL lives frees the key: what is PUT there is no one's,
        # and the model-uploads loop deletes it
        assert (await alice.delete("/api/v1/models/q")).status_code == 200
        assert (await s3.put(url, content=b"z", headers=signed)).status_code == 200
    assert [s.size for s in await store.listing(mine)] == [1]
    await run_once(app, "model_uploads")
    assert await store.listing(mine) == []


async def test_an_incomplete_upload_is_not_a_model_and_is_purged(
    make_user: UserFactory, app: FastAPI, settings: ManagerSettings
) -> None:
    alice = await make_user("alice")
    files = [{"path": "a.bin", "size": 4}, {"path": "b.bin", "size": 2}]
    r = await alice.post("/api/v1/model-uploads", json={"name": "half", "files": files})
    upload = r.json()["upload_id"]
    await alice.put(f"/api/v1/model-uploads/{upload}/files", params={"path": "a.bin"},
                    content=b"abcd")
    r = await alice.put(f"/api/v1/model-uploads/{upload}/files", params={"path": "c.bin"},
                        content=b"x")
    assert r.status_code == 404 and "has no file c.bin" in r.json()["message"]
    r = await alice.post(f"/api/v1/model-uploads/{upload}/complete")
    assert r.status_code == 422 and r.json()["code"] == "upload_incomplete"
    assert "b.bin is missing" in r.json()["message"]
    assert (await alice.get("/api/v1/models")).json() == []
    for bad in ("../x", "/abs"):
        r = await alice.post("/api/v1/model-uploads",
                             json={"name": "m", "files": [{"path": bad, "size": 1}]})
        assert r.status_code == 422, r.text
    assert (await alice.post("/api/v1/model-uploads", json={"name": "../m", "files": files})
            ).status_code == 422
    store = app.state.model_store
    async with app.state.sessionmaker() as db:
        assert await catalog.purge_stale(db, store, older_than=0) == 1
    assert await store.listing("users/") == []


def test_a_presigned_url_is_good_for_its_whole_ttl(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalStore(tmp_path / "models")
    monkeypatch.setattr(local_store.time, "time", lambda: 1_000.999)  # late in a second
    url = store.presign("GET", "users/u/m/model.txt", 1, "http://m")
    expires = int(parse_qs(urlsplit(url).query)["expires"][0])
    assert expires >= 1_000.999 + 1
    signature = parse_qs(urlsplit(url).query)["signature"][0]
    monkeypatch.setattr(local_store.time, "time", lambda: 1_001.5)  # 0.5 s later: still good
    assert store.check("GET", "users/u/m/model.txt", expires, signature) is None
