"""Creating, listing and deleting runs (see the package's docstring for the invariants)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from datetime import datetime

from pydantic import ValidationError
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.durations import format_duration
from gpuslice.common.resources import fgpu_decimal
from gpuslice.common.schemas.common import ResourcesPublic
from gpuslice.common.schemas.models import ModelPublic
from gpuslice.common.schemas.runs import (
    RUNS_FOLDER,
    RunCreate,
    RunPublic,
    RunSaving,
    RunSavingAck,
)
from gpuslice.common.schemas.sessions import (
    FINAL,
    SessionCreate,
    SessionResult,
    SessionStatus,
    SessionType,
)
from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import (
    FolderRow,
    ModelRow,
    RunRow,
    SessionRow,
    StatusHistoryRow,
    UserRow,
)
from gpuslice.manager.errors import Conflict, InvalidRequest, NotFound
from gpuslice.manager.services.models.catalog import READY, public
from gpuslice.manager.services.sessions import launch
from gpuslice.manager.services.sessions.views import visible
from gpuslice.manager.services.storage.fs import StorageFS
from gpuslice.manager.settings import ManagerSettings
from gpuslice.session_tools import CONTAINER_TOOLS_DIR

HOME = "/home/work"
_INTERPRETERS = {".py": ["python3", "-u"], ".sh": ["sh"]}


async def create_run(
    db: AsyncSession, fs: StorageFS, user: UserRow, body: RunCreate, settings: ManagerSettings
) -> RunPublic:
    """Start a run of a script already uploaded to the owner's ``runs/<code dir>/``, a
    directory no other run of theirs keeps."""
    session = _session(body)
    code_dir = body.code_dir or body.name
    await check_run(db, user, body, settings)
    await _check_dir_free(db, user.id, body.name, code_dir)
    folder = await db.scalar(select(FolderRow).where(
        FolderRow.owner_id == user.id, FolderRow.name == RUNS_FOLDER))
    if folder is None or not await _has_script(fs, folder, code_dir, body.script):
        raise InvalidRequest(
            f"{RUNS_FOLDER}/{code_dir}/{body.script} is not in your folders: upload the code "
            "first (`gpuslice run` does)", field="script", code="script_missing")
    [created] = await launch.create_sessions(db, user, session, settings)
    db.add(RunRow(session_id=created.id, owner_id=user.id, script=body.script,
                  args=list(body.args), save_dir=body.save_dir, code_dir=code_dir))
    await db.commit()
    return (await describe(db, user, [created.id]))[0]


async def check_run(
    db: AsyncSession, user: UserRow, body: RunCreate, settings: ManagerSettings
) -> None:
    """What creating the run would refuse, except a missing script: before its code is sent,
    so an impossible run is refused at once (e.g. more GPU memory than any GPU has)."""
    if await _active(db, user.id, body.name):
        raise Conflict(f"a run named {body.name} is not over yet: stop it, or pick another "
                       "name", field="name", code="run_exists")
    await launch.check_create(db, user, _session(body, check=True), settings)
    await db.commit()


def _session(body: RunCreate, check: bool = False) -> SessionCreate:
    """The batch session of a run. ``check``: without the runs folder, which a first run
    has not made yet (it is the caller's own: always mountable)."""
    command = [
        "gpuslice-run", "--dir", f"{HOME}/{RUNS_FOLDER}/{body.code_dir or body.name}",
        "--save-dir", body.save_dir, "--model", body.name, "--",
        *_interpreter(body.script), *_keeping(body), body.script, *body.args,
    ]
    others = [f for f in body.folders if f.split(":")[0] != RUNS_FOLDER]
    try:
        return SessionCreate(
            image=body.image, resources=body.resources, name=body.name,
            type=SessionType.BATCH, command=command,
            env={**body.env, "GPUSLICE_RUN_NAME": body.name}, priority=body.priority,
            priority_class=body.priority_class,
            folders=others if check else [RUNS_FOLDER, *others], project=body.project,
            group=body.group, time_limit=body.time_limit, begin_at=body.begin_at,
        )
    except ValidationError as err:  # RunCreate shares the session's rules; never a 500
        first = err.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or None
        raise InvalidRequest(str(first["msg"]).removeprefix("Value error, "),
                             field=field) from None


async def saving(db: AsyncSession, session: SessionRow, body: RunSaving) -> RunSavingAck:
    """A run's script succeeded and its output is being saved (from its session, through its
    node): keep the script's own time as the run's duration, and say so in its reason."""
    run = await db.get(RunRow, session.id)
    if run is None:
        raise NotFound(f"session {session.id} is not a run", field="session_id")
    run.script_s = body.script_s
    reason = (f"the script succeeded in {_took(body.script_s)}; saving {run.save_dir}/ as "
              f"model {session.name}")
    if body.waited_s >= 1:
        reason += f" (after waiting {_took(body.waited_s)} for the manager)"
    # The reason alone, no status change (no history row), and only while it still runs.
    await db.execute(update(SessionRow).where(
        SessionRow.id == session.id, SessionRow.status == SessionStatus.RUNNING,
    ).values(status_reason=reason))
    await db.commit()
    return RunSavingAck(duration_s=body.script_s)


async def list_runs(
    db: AsyncSession, user: UserRow, *, name: str | None = None, limit: int = 100
) -> list[RunPublic]:
    """The caller's runs, newest first (admins: everyone's)."""
    stmt = visible(select(SessionRow.id).join(RunRow, RunRow.session_id == SessionRow.id), user)
    if name is not None:
        stmt = stmt.where(SessionRow.name == name)
    ids = (await db.scalars(stmt.order_by(SessionRow.created_at.desc()).limit(limit))).all()
    return await describe(db, user, ids)


async def get_run(db: AsyncSession, user: UserRow, ref: str) -> RunPublic:
    """A run by its session id, or by name: the caller's own newest of that name, an admin's
    too (another user's run by its id only); 404 for others'."""
    found = await describe(db, user, [ref])
    if not found:
        own = select(SessionRow.id).join(RunRow, RunRow.session_id == SessionRow.id).where(
            SessionRow.owner_id == user.id, SessionRow.name == ref)
        newest = await db.scalar(own.order_by(SessionRow.created_at.desc()).limit(1))
        found = await describe(db, user, [newest]) if newest is not None else []
    if not found:
        raise NotFound(f"no run '{ref}': give its id, or the name of one of your runs "
                       "(another user's run: by its id)", field="run")
    return found[0]


async def delete_run(db: AsyncSession, fs: StorageFS, user: UserRow, ref: str) -> None:
    """Forget a run that is over and remove its code directory; its model stays."""
    run = await get_run(db, user, ref)
    if run.status not in FINAL:
        raise Conflict(f"run {run.name} is {run.status.value}: stop it first",
                       code="run_not_over")
    row = await db.get(RunRow, run.id)
    if row is None:
        raise NotFound(f"no run with id or name '{ref}'", field="run")
    owner = row.owner_id
    await db.delete(row)
    await db.commit()
    folder = await db.scalar(select(FolderRow).where(
        FolderRow.owner_id == owner, FolderRow.name == RUNS_FOLDER))
    busy = await _dir_keeper(db, owner, run.name, run.code_dir)  # another run's code too
    await db.commit()
    if folder is not None and busy is None:
        await asyncio.to_thread(_remove_code, fs, folder, run.code_dir)


async def describe(db: AsyncSession, viewer: UserRow, ids: Sequence[str]) -> list[RunPublic]:
    """The runs of these session ids the viewer may see, in that order."""
    rows = (await db.execute(visible(
        select(SessionRow, RunRow).join(RunRow, RunRow.session_id == SessionRow.id)
        .where(SessionRow.id.in_(list(ids))), viewer))).all()
    if not rows:
        await db.commit()
        return []
    found = [r[0].id for r in rows]
    times = await _times(db, found)
    models = {m.session_id: m for m in await db.scalars(select(ModelRow).where(
        ModelRow.session_id.in_(found), ModelRow.status == READY))}
    by_id = {}
    for session, run in rows:
        model = models.get(session.id)
        by_id[session.id] = _public(session, run, times.get(session.id, (None, None)),
                                    await public(db, model) if model else None)
    await db.commit()
    return [by_id[i] for i in ids if i in by_id]


def _public(session: SessionRow, run: RunRow, times: tuple[datetime | None, datetime | None],
            model: ModelPublic | None) -> RunPublic:
    started, ended = times
    duration = run.script_s  # the script's own time, once told: no downtime in it
    if duration is None and started is not None:
        duration = ((ended or utcnow()) - started).total_seconds()
    return RunPublic(
        id=session.id, name=session.name, script=run.script, args=run.args,
        save_dir=run.save_dir, code_dir=run.code_dir or session.name, image=session.image,
        resources=ResourcesPublic(gpu=fgpu_decimal(session.gpu), cpu=fgpu_decimal(session.cpu),
                                  mem=session.mem, gpu_mem=session.gpu_mem),
        status=SessionStatus(session.status), status_reason=session.status_reason,
        result=SessionResult(session.result) if session.result else None,
        exit_code=session.exit_code, created_at=session.created_at, started_at=started,
        ended_at=ended, duration_s=duration, model=model,
    )


async def _times(
    db: AsyncSession, ids: list[str]
) -> dict[str, tuple[datetime | None, datetime | None]]:
    """When each session started RUNNING and when it ended (None: not yet)."""
    rows = await db.execute(
        select(StatusHistoryRow.session_id, StatusHistoryRow.to_status, StatusHistoryRow.at)
        .where(StatusHistoryRow.session_id.in_(ids),
               StatusHistoryRow.to_status.in_([SessionStatus.RUNNING, *FINAL]))
        .order_by(StatusHistoryRow.id)
    )
    out: dict[str, tuple[datetime | None, datetime | None]] = {}
    for sid, status, at in rows:
        started, ended = out.get(sid, (None, None))
        if status == SessionStatus.RUNNING and started is None:
            started = at
        elif status != SessionStatus.RUNNING and ended is None:
            ended = at
        out[sid] = (started, ended)
    return out


async def _active(db: AsyncSession, owner_id: str, name: str) -> bool:
    return await db.scalar(
        select(SessionRow.id).join(RunRow, RunRow.session_id == SessionRow.id)
        .where(SessionRow.owner_id == owner_id, SessionRow.name == name,
               SessionRow.status.not_in(list(FINAL))).limit(1)
    ) is not None


async def _check_dir_free(db: AsyncSession, owner_id: str, name: str, code_dir: str) -> None:
    """Refuse a directory an earlier run keeps: its code (and output) stay as they ran."""
    keeper = await _dir_keeper(db, owner_id, name, code_dir)
    await db.commit()
    if keeper is not None:
        raise Conflict(
            f"{RUNS_FOLDER}/{code_dir}/ keeps the code of an earlier run of {name} (session "
            f"{keeper[:12]}): upload this run's code to {RUNS_FOLDER}/{name}.N/ and give "
            f"code_dir {name}.N (`gpuslice run` picks the next free one), or delete that run "
            f"first (`gpuslice run delete {keeper}`)", field="code_dir", code="run_dir_in_use")


async def _dir_keeper(db: AsyncSession, owner_id: str, name: str, code_dir: str) -> str | None:
    """The run (session id) whose code is in ``code_dir`` (runs before code_dir: ``name``)."""
    kept = RunRow.code_dir == code_dir
    if code_dir == name:
        kept = kept | RunRow.code_dir.is_(None)
    return await db.scalar(
        select(SessionRow.id).join(RunRow, RunRow.session_id == SessionRow.id)
        .where(SessionRow.owner_id == owner_id, SessionRow.name == name, kept).limit(1))


async def _has_script(fs: StorageFS, folder: FolderRow, name: str, script: str) -> bool:
    def check() -> bool:
        top = fs.folder_fd(folder.storage_path)
        try:
            return fs.entry(top, f"{name}/{script}").type == "file"
        finally:
            os.close(top)

    try:
        return await asyncio.to_thread(check)
    except (NotFound, InvalidRequest, OSError):
        return False


def _keeping(body: RunCreate) -> list[str]:
    """With ``save_var``: the script runs under ``gpuslice_var.py``, which saves the variable
    into the save directory when it ends (then saved with it as the model)."""
    if body.save_var is None:
        return []
    return [f"{CONTAINER_TOOLS_DIR}/gpuslice_var.py", "--var", body.save_var,
            "--into", body.save_dir, "--"]


def _took(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 60 else format_duration(int(seconds))


def _interpreter(script: str) -> list[str]:
    return _INTERPRETERS.get(os.path.splitext(script)[1], [])


def _remove_code(fs: StorageFS, folder: FolderRow, name: str) -> None:
    top = fs.folder_fd(folder.storage_path)
    try:
        fs.remove(top, name)
    except NotFound:
        pass
    finally:
        os.close(top)
