from __future__ import annotations

from tests.manager.conftest import Client


async def test_health_and_me(anon: Client, admin: Client) -> None:
    assert (await anon.get("/api/v1/health")).json() == {"status": "ok"}
    me = (await admin.get("/api/v1/auth/me")).json()
    assert me["role"] == "admin"
