"""Login throttling (issue 16, finding 7): failed logins per user and per client address end in
429 with Retry-After, checked before any password hash; the right password works again after
the window; a flood of anonymous logins costs a bounded number of hashes and leaves /health
answering."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import update

from gpuslice.manager import security
from gpuslice.manager.app import create_app
from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import LoginFailureRow
from gpuslice.manager.settings import ManagerSettings
from tests.manager.conftest import Client, client_for
from tests.waits import scaled


@pytest.fixture
def window() -> float:
    """The throttling window of the test's app: longer than any test (tests move the clock by
    moving the windows' starts)."""
    return 3600.0


@pytest.fixture
def throttled(settings: ManagerSettings, window: float) -> ManagerSettings:
    return settings.model_copy(update={"auth": settings.auth.model_copy(update={
        "login_window": window, "login_failures_per_user": 5,
        "login_failures_per_address": 12,
    })})


@pytest.fixture
async def app_t(throttled: ManagerSettings) -> AsyncIterator[FastAPI]:
    application = create_app(throttled)
    async with application.router.lifespan_context(application):
        yield application


@pytest.fixture
def hashes(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """Every password verification the manager computes (argon2 is the costly part)."""
    seen: list[float] = []
    real = security._verify

    def counting(password_hash: str, password: str) -> bool:
        seen.append(time.monotonic())
        return real(password_hash, password)

    monkeypatch.setattr(security, "_verify", counting)
    yield seen


def _client(app: FastAPI, address: str) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=(address, 40000))
    return httpx.AsyncClient(transport=transport, base_url="http://manager")


def _admin_password(settings: ManagerSettings) -> str:
    text = (settings.data_dir / "admin-credentials").read_text()
    return next(line.split(": ", 1)[1] for line in text.splitlines()
                if line.startswith("password: "))


async def _login(client: Client, username: str, password: str) -> httpx.Response:
    return await client.post("/api/v1/auth/login",
                             json={"username": username, "password": password})


async def test_a_user_is_throttled_then_the_right_password_works_after_the_window(
    app_t: FastAPI, throttled: ManagerSettings, window: float, hashes: list[float]
) -> None:
    async with _client(app_t, "10.0.0.1") as one, _client(app_t, "10.0.0.2") as two:
        for _ in range(5):
            assert (await _login(one, "admin", "wrong")).status_code == 401
        r = await _login(two, "admin", _admin_password(throttled))  # another address: same user
        assert r.status_code == 429 and r.json()["code"] == "too_many_requests", r.text
        assert 1 <= int(r.headers["Retry-After"]) <= window
        assert "this user" in r.json()["message"]
        assert len(hashes) == 5  # the throttled attempt computed no hash
        await _pass_the_window(app_t, window)
        r = await _login(two, "admin", _admin_password(throttled))
        assert r.status_code == 200, r.text


async def _pass_the_window(app: FastAPI, window: float) -> None:
    """Move every counter's window into the past, as the clock would (tests do not sleep)."""
    async with app.state.sessionmaker() as db:
        await db.execute(update(LoginFailureRow).values(
            window_start=utcnow() - timedelta(seconds=window + 1)))
        await db.commit()
    app.state.login_throttle.blocked.clear()  # what this manager remembered ends with it too


async def test_one_address_is_throttled_across_usernames(
    app_t: FastAPI, throttled: ManagerSettings
) -> None:
    async with _client(app_t, "10.0.0.9") as spray, _client(app_t, "10.0.0.10") as other:
        for i in range(12):
            assert (await _login(spray, f"user{i}", "guess")).status_code == 401
        r = await _login(spray, "admin", _admin_password(throttled))
        assert r.status_code == 429 and "this address" in r.json()["message"]
        assert (await _login(other, "admin", _admin_password(throttled))).status_code == 200


async def test_a_success_starts_the_users_count_over(
    app_t: FastAPI, throttled: ManagerSettings
) -> None:
    async with _client(app_t, "10.0.1.1") as client:
        for _ in range(3):  # 9 failures from the address: below its 12
            for _ in range(3):
                assert (await _login(client, "admin", "wrong")).status_code == 401
            assert (await _login(client, "admin", _admin_password(throttled))).status_code == 200


async def test_a_login_flood_costs_bounded_hashes_and_health_answers(
    app_t: FastAPI, throttled: ManagerSettings, hashes: list[float]
) -> None:
    """Ten anonymous clients (one address) hammer one account: every attempt after the limits
    answers 429 without a hash, no answer is a 5xx, and /health keeps answering. (How fast it
    answers is bench/login_flood.py's figure; tests assert no timings.)"""
    statuses: list[int] = []
    stop = asyncio.Event()

    async def hammer(n: int) -> None:
        async with _client(app_t, "192.0.2.77") as client:
            while not stop.is_set():
                statuses.append((await _login(client, f"admin{n % 2 or ''}", "nope")).status_code)
                # in-process, a refusal by the edge never waits on I/O: let the others run
                await asyncio.sleep(0)

    health: list[int] = []

    async def watch() -> None:
        async with client_for(app_t) as client:
            while not stop.is_set():
                health.append((await client.get("/api/v1/health")).status_code)
                await asyncio.sleep(0.01)

    tasks = [asyncio.create_task(hammer(n)) for n in range(10)] + [asyncio.create_task(watch())]
    deadline = time.monotonic() + scaled(120)
    while statuses.count(429) < 200 and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    stop.set()
    await asyncio.gather(*tasks)
    assert set(statuses) <= {401, 429} and statuses.count(429) > statuses.count(401)
    # the users' limits (two names, 5 each): attempts are counted before their hash runs
    assert len(hashes) <= 2 * 5
    assert health and set(health) == {200}
    # the flooding address is now refused before its request is even read
    async with _client(app_t, "192.0.2.77") as client:
        r = await client.post("/api/v1/auth/login", content=b"not even json")
        assert r.status_code == 429 and int(r.headers["Retry-After"]) >= 1
