"""Runs: a training script as a batch session on a GPU slice, saving its output as a model."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status

from gpuslice.common.limits import PAGE_DEFAULT, PAGE_MAX
from gpuslice.common.schemas.runs import RunCreate, RunPublic
from gpuslice.manager.api.deps import CurrentUser, DbDep, SettingsDep, StorageDep
from gpuslice.manager.services.runs import runs

router = APIRouter(prefix="/runs", tags=["runs"])


@router.post("", status_code=status.HTTP_201_CREATED)
async def create_run(
    body: RunCreate, db: DbDep, user: CurrentUser, storage: StorageDep, settings: SettingsDep
) -> RunPublic:
    """Start a run of a script uploaded to one's `runs/<name>/` folder: a batch session with
    the slice asked (fGPU, or GPU memory), which saves `save_dir` as model `<name>` when the
    script succeeds. 409 `run_exists` while a run of that name is not over."""
    return await runs.create_run(db, storage, user, body, settings)


@router.post("/check", status_code=status.HTTP_204_NO_CONTENT)
async def check_run(body: RunCreate, db: DbDep, user: CurrentUser, settings: SettingsDep) -> None:
    """Would this run be accepted (its script aside)? Ask before uploading its code: a run no
    GPU can hold, an unknown image or folder, or a name in use is refused at once."""
    await runs.check_run(db, user, body, settings)


@router.get("")
async def list_runs(
    db: DbDep, user: CurrentUser,
    name: Annotated[str | None, Query(max_length=80)] = None,
    limit: Annotated[int, Query(ge=1, le=PAGE_MAX)] = PAGE_DEFAULT,
) -> list[RunPublic]:
    """One's runs, newest first: status, result, exit code, duration, saved model."""
    return await runs.list_runs(db, user, name=name, limit=limit)


@router.get("/{run}")
async def get_run(run: str, db: DbDep, user: CurrentUser) -> RunPublic:
    """A run by id or name (the newest of that name)."""
    return await runs.get_run(db, user, run)


@router.delete("/{run}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_run(run: str, db: DbDep, user: CurrentUser, storage: StorageDep) -> None:
    """Forget a run that is over and remove its code; its saved model stays. 409 while it
    runs (stop it first: `DELETE /sessions/{id}`)."""
    await runs.delete_run(db, storage, user, run)
