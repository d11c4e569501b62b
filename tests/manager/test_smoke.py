from __future__ import annotations

import gc

from fastapi import FastAPI

from tests.manager.conftest import Client


async def test_health_and_me(anon: Client, admin: Client) -> None:
    assert (await anon.get("/api/v1/health")).json() == {"status": "ok"}
    me = (await admin.get("/api/v1/auth/me")).json()
    assert me["role"] == "admin"


async def test_the_manager_serves_with_its_start_up_heap_out_of_the_collectors_passes(
    app: FastAPI,
) -> None:
    assert gc.get_freeze_count() > 0  # common/heap.py: a full pass walks only what came after
