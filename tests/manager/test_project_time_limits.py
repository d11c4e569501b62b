"""A project's own default and maximum time limit (issue 32): its sessions get its default when
they name no --time; a --time above its maximum is refused naming it, in creating, a preview and
a run check alike; the settings' maximum still holds (the smaller wins)."""

from __future__ import annotations

import pytest

from gpuslice.manager.settings import ManagerSettings
from tests.manager.conftest import Client, UserFactory, create
from tests.manager.helpers import make_project

IMAGE = {"image": "python:3.11"}
TOO_LONG = "time_limit: {asked} is longer than allowed; at most {most} ({source})"


@pytest.fixture
def settings(settings: ManagerSettings) -> ManagerSettings:
    settings.sessions.default_time_limit = 3600
    settings.sessions.max_time_limit = 2 * 86400
    return settings


async def test_a_session_gets_its_projects_default_and_none_above_its_maximum(
    admin: Client, make_user: UserFactory
) -> None:
    alice = await make_user("alice")
    made = await make_project(admin, "vision", "alice", default_time_limit="2h",
                          max_time_limit="1d")
    assert (made["default_time_limit"], made["max_time_limit"]) == (7200, 86400)
    [team] = await create(alice, project="vision")
    [mine] = await create(alice)  # the personal project has none: the settings' default
    assert (team["time_limit"], mine["time_limit"]) == (7200, 3600)
    assert team["env"]["GPUSLICE_TIME_LIMIT"] == "7200"
    [asked] = await create(alice, project="vision", time_limit="1:30:00")
    assert asked["time_limit"] == 5400
    for path, body in (("/api/v1/sessions", {**IMAGE}),
                       ("/api/v1/sessions/preview", {**IMAGE}),
                       ("/api/v1/runs/check", {**IMAGE, "name": "t", "script": "train.py"})):
        r = await alice.post(path, json={**body, "project": "vision", "time_limit": "25h"})
        assert r.status_code == 422, (path, r.text)
        assert r.json()["code"] == "time_limit_too_long"
        assert r.json()["message"] == TOO_LONG.format(
            asked="1d1h", most="1d", source="the maximum of project vision")
    # in the personal project 25h is within the settings' 2d
    assert (await create(alice, time_limit="25h"))[0]["time_limit"] == 90000


async def test_the_settings_maximum_holds_over_a_larger_projects_one(
    admin: Client, make_user: UserFactory
) -> None:
    alice = await make_user("alice")
    await make_project(admin, "long", "alice", max_time_limit="7d", default_time_limit="3d")
    r = await alice.post("/api/v1/sessions", json={**IMAGE, "project": "long",
                                                   "time_limit": "3d"})
    assert r.status_code == 422, r.text
    assert r.json()["message"] == TOO_LONG.format(asked="3d", most="2d",
                                                  source="sessions.max_time_limit")
    # its default is cut to the smaller maximum, as the settings' own default would be
    assert (await create(alice, project="long"))[0]["time_limit"] == 2 * 86400


async def test_an_admin_sets_and_clears_a_projects_time_limits(admin: Client) -> None:
    await make_project(admin, "vision")
    r = await admin.put("/api/v1/projects/vision", json={"max_time_limit": "90"})
    assert r.status_code == 200, r.text
    assert (r.json()["default_time_limit"], r.json()["max_time_limit"]) == (None, 5400)
    assert (await create(admin, project="vision"))[0]["time_limit"] == 3600
    r = await admin.put("/api/v1/projects/vision", json={})
    assert r.json()["max_time_limit"] is None  # replaced like every quota: none given, none
    assert (await admin.get("/api/v1/projects/vision")).json()["max_time_limit"] is None


@pytest.mark.parametrize("body, needle", [
    ({"default_time_limit": "soon"}, "'soon' is not a time limit; use e.g. 30m, 2h, 1d"),
    ({"max_time_limit": 0}, "Max time limit: must be between 1 second and 365 days"),
    ({"max_time_limit": "400d"}, "between 1 second and 365 days"),
    ({"default_time_limit": "2d", "max_time_limit": "1d"},
     "The default time limit 2d is longer than the maximum 1d"),
])
async def test_bad_project_time_limits_are_one_line_422s(
    admin: Client, body: dict, needle: str
) -> None:
    r = await admin.post("/api/v1/projects", json={"name": "bad", **body})
    assert r.status_code == 422, r.text
    message = r.json()["message"]
    assert needle in message and "\n" not in message, message
    assert "Traceback" not in r.text


async def test_only_admins_set_a_projects_time_limits(
    admin: Client, make_user: UserFactory
) -> None:
    alice = await make_user("alice")
    await make_project(admin, "vision", "alice", max_time_limit="1d")
    r = await alice.put("/api/v1/projects/vision", json={"max_time_limit": "7d"})
    assert r.status_code == 403, r.text
    r = await alice.post("/api/v1/projects", json={"name": "mine", "max_time_limit": "7d"})
    assert r.status_code == 403, r.text
    assert (await admin.get("/api/v1/projects/vision")).json()["max_time_limit"] == 86400
