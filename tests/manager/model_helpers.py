"""The model store as the model tests run it, on both backends: ``settings`` (a fixture,
imported into a test module) is the manager's with the local store, then with a real S3 server
(moto: the module needs ``s3_server`` from tests/s3.py too); a model saved through the API,
and a presigned URL fetched."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from gpuslice.manager.settings import ManagerSettings, load_settings
from tests.manager.conftest import IMAGE, Client


@pytest.fixture(params=["local", "s3"])
def settings(
    request: pytest.FixtureRequest, tmp_path: Path, migrated_database_url: str
) -> ManagerSettings:
    store = {} if request.param == "local" else request.getfixturevalue("s3_server").settings()
    return load_settings(
        data_dir=tmp_path / "data", database={"url": migrated_database_url},
        scheduler={"interval": 1.0},
        nodes={"node_timeout": 30, "sweep_interval": 0.2, "assignment_poll": 0.5},
        sessions={"allowed_images": [IMAGE], "log_timeout": 3}, model_store=store,
    )


FILES = {"model.txt": b"weights: 42\n", "ckpt/step-1.bin": bytes(range(256)) * 4096}


async def save(client: Client, name: str, files: dict[str, bytes] = FILES) -> dict[str, Any]:
    listed = [{"path": p, "size": len(d)} for p, d in files.items()]
    r = await client.post("/api/v1/model-uploads", json={"name": name, "files": listed})
    assert r.status_code == 201, r.text
    started = r.json()
    assert started["mode"] == "stream"
    for path, data in files.items():
        r = await client.put(f"/api/v1/model-uploads/{started['upload_id']}/files",
                             params={"path": path}, content=data)
        assert r.status_code == 204, r.text
    r = await client.post(f"/api/v1/model-uploads/{started['upload_id']}/complete")
    assert r.status_code == 200, r.text
    return r.json()


async def fetch(app: FastAPI, url: str) -> httpx.Response:
    """GET a presigned URL: the manager's own (local store) or the S3 server's."""
    if url.startswith("http://manager/"):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app)) as client:
            return await client.get(url)
    async with httpx.AsyncClient() as client:
        return await client.get(url)
