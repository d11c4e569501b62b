"""Storage quotas against uploads through the API: parallel uploads, unfinished ones, expiry.
Each upload reserves its whole size before a byte is written (services/storage/
reservations.py); on PostgreSQL (GPUSLICE_TEST_PG) the requests run on connections of their
own, as two managers' would."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

from fastapi import FastAPI
from sqlalchemy import update

from gpuslice.manager.db.base import utcnow
from gpuslice.manager.loop_table import run_once
from gpuslice.manager.settings import ManagerSettings
from tests.waits import Deadline

from .conftest import UserFactory
from .folder_helpers import API, folder, put, tar_of

MiB = 1024 * 1024


async def test_parallel_uploads_past_the_quota_only_those_that_fit_are_accepted(
    make_user: UserFactory,
) -> None:
    alice = await make_user("alice", policy={"max_storage": "1m"})
    data = await folder(alice, "data")
    size, count = 300_000, 5  # three fit in 1 MiB, five do not
    gate, started = asyncio.Event(), set[int]()

    async def body(i: int) -> AsyncIterator[bytes]:
        yield b"x" * 1000
        started.add(i)  # past the quota check, writing: it waits for the others to get here
        await gate.wait()
        yield b"x" * (size - 1000)

    uploads = [asyncio.create_task(alice.put(
        f"{API}/{data['id']}/content", params={"path": f"p{i}.bin", "size": size},
        content=body(i))) for i in range(count)]
    deadline = Deadline(30)
    while not all(i in started or task.done() for i, task in enumerate(uploads)):
        assert not deadline.passed, f"uploads neither refused nor writing: {started}"
        await asyncio.sleep(0.05)
    gate.set()
    answers = await asyncio.gather(*uploads)
    codes = sorted(r.status_code for r in answers)
    assert codes == [201, 201, 201, 422, 422], [r.text for r in answers]
    assert {r.json()["code"] for r in answers if r.status_code == 422} == {"quota_exceeded"}
    usage = (await alice.get(f"{API}/usage")).json()
    assert (usage["used"], usage["uploading"], usage["over_quota"]) == (3 * size, 0, False)


async def test_a_partial_upload_counts_until_it_expires(
    make_user: UserFactory, app: FastAPI, settings: ManagerSettings
) -> None:
    alice = await make_user("alice", policy={"max_storage": "1m"})
    data = await folder(alice, "data")
    r = await alice.put(f"{API}/{data['id']}/content",
                        params={"path": "big.bin", "size": 800_000}, content=b"x" * 100)
    assert r.status_code == 202 and r.json()["offset"] == 100
    usage = (await alice.get(f"{API}/usage")).json()
    assert usage["used"] == 800_000 and usage["uploading"] == 800_000
    r = await put(alice, data["id"], "other.bin", b"y" * 300_000)
    assert r.status_code == 422 and r.json()["code"] == "quota_exceeded"
    assert "781.25 KiB held by unfinished uploads" in r.json()["message"], r.text
    r = await alice.put(f"{API}/{data['id']}/archive", content=tar_of({"t": b"z" * 300_000}))
    assert r.status_code == 422 and r.json()["code"] == "quota_exceeded"

    # nobody resumes it: after a day the storage loop deletes it, and its reservation
    name = app.state.storage.partial_name(data["id"], data["owner_id"], "big.bin")
    partial = settings.storage_root / ".uploads" / name
    assert partial.stat().st_size == 100
    await _age(app, partial, timedelta(days=1, minutes=1))
    await run_once(app, "storage_usage")
    assert not partial.exists()
    usage = (await alice.get(f"{API}/usage")).json()
    assert (usage["used"], usage["uploading"]) == (0, 0)
    assert (await put(alice, data["id"], "other.bin", b"y" * 300_000)).status_code == 201


async def test_a_partial_upload_being_written_does_not_expire(
    make_user: UserFactory, app: FastAPI, settings: ManagerSettings
) -> None:
    alice = await make_user("alice", policy={"max_storage": "1m"})
    data = await folder(alice, "data")
    r = await alice.put(f"{API}/{data['id']}/content",
                        params={"path": "slow.bin", "size": 1000}, content=b"x" * 10)
    assert r.status_code == 202
    name = app.state.storage.partial_name(data["id"], data["owner_id"], "slow.bin")
    partial = settings.storage_root / ".uploads" / name
    await _age(app, partial, timedelta(days=2), file=False)  # the file was written just now
    await run_once(app, "storage_usage")
    assert partial.stat().st_size == 10
    assert (await alice.get(f"{API}/usage")).json()["uploading"] == 1000


async def _age(app: FastAPI, partial: Any, by: timedelta, *, file: bool = True) -> None:
    """As if the upload of ``partial`` were last touched ``by`` ago (its file too)."""
    from gpuslice.manager.db.models import UploadReservationRow  # F5's: not at collection
    async with app.state.sessionmaker() as db:
        await db.execute(update(UploadReservationRow)
                         .where(UploadReservationRow.id == partial.name)
                         .values(touched_at=utcnow() - by))
        await db.commit()
    if file:
        then = time.time() - by.total_seconds()
        os.utime(partial, (then, then))
