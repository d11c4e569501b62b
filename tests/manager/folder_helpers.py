"""Storage folders through the API, as the folder tests and others that need files take
them: make one, put and get a file, where its files lie on disk, a tar to upload."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Any

from gpuslice.manager.settings import ManagerSettings
from tests.manager.conftest import Client

API = "/api/v1/folders"


async def folder(client: Client, name: str, **body: Any) -> dict[str, Any]:
    r = await client.post(API, json={"name": name, **body})
    assert r.status_code == 201, r.text
    return r.json()


async def put(client: Client, fid: str, path: str, data: bytes, **params: Any) -> Any:
    params = {"path": path, "size": len(data), **params}
    return await client.put(f"{API}/{fid}/content", params=params, content=data)


async def get(client: Client, fid: str, path: str) -> bytes:
    r = await client.get(f"{API}/{fid}/content", params={"path": path})
    assert r.status_code == 200, r.text
    return r.content


def on_disk(settings: ManagerSettings, f: dict[str, Any]) -> Path:
    owner = f"users/{f['owner_id']}" if f["owner_id"] else "shared"
    return settings.storage_root / owner / f["id"]


def tar_of(entries: dict[str, bytes | None], links: dict[str, str] | None = None) -> bytes:
    """A tar of files (bytes) and directories (None), plus symbolic links."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return out.getvalue()
