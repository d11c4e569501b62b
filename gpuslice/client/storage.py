"""The SDK's storage calls: folders and their files, the model store, runs (a mixin of
``Client``). Transfers stream in 1 MiB pieces with an optional progress callback; a file
upload that breaks resumes from what the manager holds, and a download from what is on disk.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote

import httpx

from gpuslice.client import fetch, schemas, transfer
from gpuslice.client.errors import ApiError
from gpuslice.client.transfer import Progress
from gpuslice.common.limits import PAGE_DEFAULT
from gpuslice.common.storage_paths import path_query

if TYPE_CHECKING:
    from gpuslice.common.schemas.models import (
        ModelDeleted,
        ModelDetail,
        ModelPublic,
        ModelUrls,
    )
    from gpuslice.common.schemas.runs import RunPublic
    from gpuslice.common.schemas.storage import (
        ArchiveUploaded,
        FileEntry,
        FolderGrantPublic,
        FolderListing,
        FolderPublic,
        StorageUsage,
    )

API = "/api/v1"
M = TypeVar("M")
RETRIES = 3  # a broken file upload is resumed this many times
_LONG = httpx.Timeout(30.0, read=600.0, write=600.0)


class StorageCalls:
    """Folders, models and runs; ``Client`` provides ``_call``, ``_send``, ``_http``."""

    url: str
    _http: httpx.Client
    _call: Callable[..., Any]
    _send: Callable[..., httpx.Response]
    _headers: Callable[[], dict[str, str]]

    # ------------------------------------------------------------ folders

    def list_folders(self) -> list[FolderPublic]:
        """One's folders, those shared with one (admins: every shared folder), with sizes."""
        return self._call("GET", "/folders", list[schemas.storage.FolderPublic])

    def find_folder(self, ref: str) -> FolderPublic:
        """A folder by id or name (one's own first, then those shared with one)."""
        folders = self.list_folders()
        for folder in folders:
            if folder.id == ref:
                return folder
        named = sorted((f for f in folders if f.name == ref), key=lambda f: f.access != "owner")
        if not named:
            raise ApiError(f"no folder named '{ref}' (gpuslice folder list shows yours)",
                           status=404, code="not_found")
        return named[0]

    def create_folder(self, name: str, shared: bool = False, project: str | None = None
                      ) -> FolderPublic:
        """A folder of one's own, or (admins) a shared one, or one of ``project``."""
        body: dict[str, Any] = {"name": name, "shared": shared}
        if project is not None:
            body["project"] = project
        return self._call("POST", "/folders", schemas.storage.FolderPublic, json=body)

    def rename_folder(self, ref: str, name: str) -> FolderPublic:
        fid = self.find_folder(ref).id
        return self._call("PATCH", f"/folders/{fid}", schemas.storage.FolderPublic,
                          json={"name": name})

    def delete_folder(self, ref: str) -> None:
        self._call("DELETE", f"/folders/{self.find_folder(ref).id}", None)

    def share_folder(self, ref: str, user: str, permission: str = "ro") -> FolderGrantPublic:
        fid = self.find_folder(ref).id
        return self._call("PUT", f"/folders/{fid}/grants", schemas.storage.FolderGrantPublic,
                          json={"user": user, "permission": permission})

    def revoke_folder(self, ref: str, user: str) -> None:
        self._call("DELETE", f"/folders/{self.find_folder(ref).id}/grants/{user}", None)

    def storage_usage(self, user: str | None = None) -> StorageUsage:
        params = {"user": user} if user else None
        return self._call("GET", "/folders/usage", schemas.storage.StorageUsage, params=params)

    def list_files(self, ref: str, path: str = "") -> FolderListing:
        fid = self.find_folder(ref).id
        return self._call("GET", f"/folders/{fid}/files", schemas.storage.FolderListing,
                          params=path_query(path))

    def make_dirs(self, ref: str, path: str) -> FileEntry:
        fid = self.find_folder(ref).id
        return self._call("POST", f"/folders/{fid}/dirs", schemas.storage.FileEntry,
                          params=path_query(path))

    def delete_file(self, ref: str, path: str) -> None:
        fid = self.find_folder(ref).id
        self._call("DELETE", f"/folders/{fid}/files", None, params=path_query(path))

    def upload_file(self, ref: str, local: Path, path: str,
                    progress: Progress | None = None) -> FileEntry:
        """Upload one file, streamed; resumed (up to 3 times) if the connection breaks."""
        fid = self.find_folder(ref).id
        size = local.stat().st_size
        offset, sent = 0, [0]

        def counted(moved: int) -> None:
            sent[0] += moved
            if progress:
                progress(moved)

        for attempt in range(RETRIES + 1):
            try:
                return self._upload_from(fid, local, path, size, offset, counted)
            except ApiError as err:
                if err.code != "unreachable" or attempt == RETRIES:
                    raise
            state = self._call("GET", f"/folders/{fid}/uploads", schemas.storage.UploadState,
                               params=path_query(path))
            if progress:  # back to what the manager holds: part of what was read never arrived
                progress(state.offset - offset - sent[0])
            offset, sent[0] = state.offset, 0
        raise AssertionError("unreachable")

    def upload_dir(self, ref: str, local: Path, path: str = "",
                   progress: Progress | None = None,
                   tree: transfer.Tree | None = None) -> ArchiveUploaded:
        """Upload a directory (its files and directories) as one tar stream, all or nothing;
        ``tree`` (from ``transfer.scan``): what to send, e.g. without ignored files."""
        fid = self.find_folder(ref).id
        tree = tree or transfer.scan(local)
        return self._call("PUT", f"/folders/{fid}/archive", schemas.storage.ArchiveUploaded,
                          params=path_query(path), content=transfer.tar_chunks(tree, progress),
                          headers={"Content-Type": "application/x-tar"},
                          timeout=_LONG)

    def download_file(self, ref: str, path: str, local: Path,
                      progress: Progress | None = None) -> int:
        """Download one file to ``local`` (atomically), resuming a partial ``.part`` file."""
        fid = self.find_folder(ref).id
        return self._download(f"{API}/folders/{fid}/content", path_query(path), local,
                              progress)

    def download_dir(self, ref: str, path: str, local: Path,
                     progress: Progress | None = None) -> int:
        """Download a directory into ``local`` (tar stream, safely extracted); files count."""
        fid = self.find_folder(ref).id
        with self._get(f"{API}/folders/{fid}/archive", path_query(path)) as answer:
            return transfer.extract(fetch.chunks(answer), local, progress)

    # ------------------------------------------------------------ models

    def list_models(self, name: str | None = None) -> list[ModelPublic]:
        """Every version of one's models (of ``name`` only, if given)."""
        params = {"name": name} if name else None
        return self._call("GET", "/models", list[schemas.models.ModelPublic], params=params)

    def get_model(self, ref: str) -> ModelDetail:
        """``ref``: ``NAME`` (its latest version) or ``NAME:VERSION``."""
        return self._call("GET", f"/models/{_ref(ref)}", schemas.models.ModelDetail)

    def delete_model(self, ref: str, every: bool = False) -> ModelDeleted:
        """Delete ``NAME:VERSION``, or a ``NAME`` of one version; ``every``: all versions of
        ``NAME`` (without it a name of several versions is refused: 409)."""
        params = {"all": "true"} if every else None
        return self._call("DELETE", f"/models/{_ref(ref)}", schemas.models.ModelDeleted,
                          params=params)

    def presign_model(self, ref: str, ttl: int = 300) -> ModelUrls:
        return self._call("POST", f"/models/{_ref(ref)}/presign", schemas.models.ModelUrls,
                          params={"ttl": ttl})

    def download_model(self, ref: str, local: Path,
                       progress: Progress | None = None) -> ModelDetail:
        """Every file of a model version (``NAME``: the latest) under directory ``local``;
        the version asked is pinned first, so a save meanwhile does not mix two."""
        model = self.get_model(ref)
        for item in model.file_list:
            target = local.joinpath(*transfer_parts(item.path))
            self._download(f"{API}/models/{_ref(model.ref)}/files", {"path": item.path},
                           target, progress)
        return model

    def upload_model(self, local: Path, name: str,
                     progress: Progress | None = None) -> ModelPublic:
        """Save a file or a directory's files as model ``name``, through the manager: its next
        version (the earlier ones stay)."""
        if local.is_dir():
            files = [(rel, path, size) for rel, path, size in transfer.scan(local).files]
        else:
            files = [(local.name, local, local.stat().st_size)]
        listed = [{"path": rel, "size": size} for rel, _, size in files]
        started = self._call("POST", "/model-uploads", schemas.models.ModelUploadStarted,
                             json={"name": name, "files": listed})
        for rel, path, size in files:
            with open(path, "rb") as source:
                self._send("PUT", f"/model-uploads/{started.upload_id}/files",
                           params={"path": rel}, content=transfer.file_chunks(source, progress),
                           headers={"Content-Length": str(size)},
                           timeout=_LONG)
        return self._call("POST", f"/model-uploads/{started.upload_id}/complete",
                          schemas.models.ModelPublic)

    # ------------------------------------------------------------ runs

    def check_run(self, **body: Any) -> None:
        """Would this run be accepted (its script aside)? ``ApiError`` saying why not."""
        self._call("POST", "/runs/check", None, json=body)

    def create_run(self, **body: Any) -> RunPublic:
        return self._call("POST", "/runs", schemas.runs.RunPublic, json=body)

    def list_runs(self, name: str | None = None, limit: int = PAGE_DEFAULT,
                  ) -> list[RunPublic]:
        params: dict[str, Any] = {"limit": limit} | ({"name": name} if name else {})
        return self._call("GET", "/runs", list[schemas.runs.RunPublic], params=params)

    def get_run(self, ref: str) -> RunPublic:
        return self._call("GET", f"/runs/{ref}", schemas.runs.RunPublic)

    def delete_run(self, ref: str) -> None:
        self._call("DELETE", f"/runs/{ref}", None)

    # ------------------------------------------------------------ plumbing

    def _upload_from(self, fid: str, local: Path, path: str, size: int, offset: int,
                     progress: Progress | None) -> FileEntry:
        with open(local, "rb") as source:
            source.seek(offset)
            answer = self._send(
                "PUT", f"/folders/{fid}/content",
                params={**path_query(path), "size": size, "offset": offset},
                content=transfer.file_chunks(source, progress), timeout=_LONG,
                headers={"Content-Length": str(size - offset)},
            )
        if answer.status_code == 202:  # the manager holds part of it: go on from there
            raise ApiError("the upload stopped early", code="unreachable")
        return schemas.storage.FileEntry.model_validate_json(answer.content)

    def _download(self, url: str, params: dict[str, str], local: Path,
                  progress: Progress | None) -> int:
        local.parent.mkdir(parents=True, exist_ok=True)
        partial = local.with_name(f".{local.name}.part")
        have = partial.stat().st_size if partial.exists() else 0
        headers = {"Range": f"bytes={have}-"} if have else {}
        with self._get(url, params, headers) as answer:
            if answer.status != 206:
                have = 0  # the manager sends the whole file: start again
            if progress and have:
                progress(have)
            with open(partial, "ab" if have else "wb") as out:
                for piece in fetch.chunks(answer):
                    out.write(piece)
                    if progress:
                        progress(len(piece))
        os.replace(partial, local)
        return local.stat().st_size

    def _get(self, url: str, params: dict[str, str],
             headers: dict[str, str] | None = None) -> Any:
        """A large answer to stream (``fetch``: http.client, for its CPU cost)."""
        return fetch.get_stream(self.url, url, params, {**self._headers(), **(headers or {})},
                                timeout=_LONG.read or 600.0)


def _ref(ref: str) -> str:
    """A model reference as one path segment (``:`` stays readable)."""
    return quote(ref, safe=":")


def transfer_parts(path: str) -> list[str]:
    """A model file's path as local parts; refused if it would leave the directory."""
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if not parts or ".." in parts or path.startswith("/"):
        raise ApiError(f"the manager sent a file path that leaves the directory: {path!r}")
    return parts
