"""`GET /config` and `POST /config/import`: the configuration by name, merged all or nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI

from gpuslice.manager.app import create_app
from gpuslice.manager.settings import ManagerSettings
from tests.conftest import new_database
from tests.manager.conftest import Client, UserFactory, client_for, login


async def _setup(admin: Client, make_user: UserFactory) -> None:
    await make_user("alice", policy={"max_sessions": 4, "max_gpu": 1.5, "max_mem": "8g"})
    await make_user("bob")
    r = await admin.post("/api/v1/images/aliases", json={"name": "py", "reference": "python:3.11"})
    assert r.status_code == 201
    assert (await admin.post("/api/v1/images", json={"name": "ghcr.io/x/y:1"})).status_code == 201


async def _export(admin: Client, **params: Any) -> dict[str, Any]:
    r = await admin.get("/api/v1/config", params=params)
    assert r.status_code == 200, r.text
    return r.json()


async def test_export_is_by_name_and_without_password_hashes(
    admin: Client, make_user: UserFactory
) -> None:
    await _setup(admin, make_user)
    doc = await _export(admin)
    assert doc["format"] == "gpuslice-config" and doc["version"] == 1
    assert [p["name"] for p in doc["policies"]] == ["p-alice"]
    assert doc["policies"][0]["max_gpu"] == 1.5 and doc["policies"][0]["max_mem"] == 8 * 1024**3
    users = {u["username"]: u for u in doc["users"]}
    assert users["alice"]["policy"] == "p-alice" and users["admin"]["role"] == "admin"
    assert all(u["password_hash"] is None for u in doc["users"])
    assert doc["aliases"] == [{"name": "py", "reference": "python:3.11"}]
    assert {"name": "ghcr.io/x/y:1", "allowed": True, "public": True, "owner": None} in doc[
        "images"]
    hashed = await _export(admin, password_hashes=True)
    assert all(u["password_hash"].startswith("$argon2") for u in hashed["users"])


async def test_only_admins(make_user: UserFactory) -> None:
    alice = await make_user("alice")
    assert (await alice.get("/api/v1/config")).status_code == 403
    assert (await alice.post("/api/v1/config/import", json={})).status_code == 403


async def test_import_into_a_new_cluster_then_again_changes_nothing(
    admin: Client, make_user: UserFactory, settings: ManagerSettings, tmp_path: Path
) -> None:
    await _setup(admin, make_user)
    doc = await _export(admin, password_hashes=True)
    async with new_database(tmp_path, "second") as url:
        other = create_app(settings.model_copy(update={
            "data_dir": tmp_path / "second",
            "database": settings.database.model_copy(update={"url": url})}))
        async with other.router.lifespan_context(other), client_for(other) as anon:
            creds = dict(line.split(": ", 1) for line in (
                tmp_path / "second" / "admin-credentials").read_text().splitlines())
            async with client_for(other, await login(anon, "admin", creds["password"])) as adm:
                first = (await adm.post("/api/v1/config/import", json=doc)).json()
                assert first["sections"]["users"] == {"created": 2, "updated": 1,
                                                      "unchanged": 0}
                assert first["sections"]["policies"]["created"] == 1
                assert first["notes"] == []
                again = (await adm.post("/api/v1/config/import", json=doc)).json()
                assert all(s["created"] == s["updated"] == 0
                           for s in again["sections"].values())
                # alice's hash came along: her password works on the new cluster
                await login(anon, "alice", "password-alice")
                moved = await _export(adm)
        assert moved["policies"] == doc["policies"] and moved["aliases"] == doc["aliases"]


async def test_a_bad_entry_names_itself_and_nothing_is_written(
    app: FastAPI, admin: Client, make_user: UserFactory
) -> None:
    await _setup(admin, make_user)
    before = await _export(admin)
    doc = {"policies": [{"name": "new-one", "max_sessions": 2}],
           "users": [{"username": "carol", "policy": "new-one"},
                     {"username": "dave", "policy": "nope"}]}
    r = await admin.post("/api/v1/config/import", json=doc)
    assert r.status_code == 422
    assert r.json()["field"] == "users.1.policy"
    assert "no policy named 'nope'" in r.json()["message"]
    after = await _export(admin)
    assert after["policies"] == before["policies"] and after["users"] == before["users"]

    for bad, field in [
        ({"users": [{"username": "Bad Name"}]}, "users.0.username"),
        ({"users": [{"username": "eve", "password_hash": "plain"}]}, "users.0.password_hash"),
        ({"users": [{"username": "eve", "colour": "red"}]}, "users.0.colour"),
        ({"aliases": [{"name": "x", "reference": "not a ref"}]}, "aliases.0.reference"),
        ({"aliases": [{"name": "x", "reference": "a:1"}, {"name": "x", "reference": "b:1"}]},
         "aliases.1"),
        ({"images": [{"name": "a:1", "owner": "nobody"}]}, "images.0.owner"),
        ({"version": 2}, "version"),
        ({"users": [{"username": "admin", "role": "user"}]}, "users"),
    ]:
        r = await admin.post("/api/v1/config/import", json=bad)
        assert r.status_code == 422, (bad, r.text)
        assert r.json()["field"] == field, (bad, r.json())
    final = await _export(admin)
    assert {**final, "exported_at": None} == {**after, "exported_at": None}


async def test_dry_run_counts_and_changes_nothing(admin: Client, make_user: UserFactory) -> None:
    await _setup(admin, make_user)
    doc = {"users": [{"username": "zed"}], "aliases": [{"name": "py", "reference": "python:3.12"}]}
    r = await admin.post("/api/v1/config/import", json=doc, params={"dry_run": True})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["dry_run"] is True
    assert body["sections"]["users"]["created"] == 1
    assert body["sections"]["aliases"]["updated"] == 1
    assert "cannot log in until an admin sets one: zed" in body["notes"][0]
    assert "zed" not in {u["username"] for u in (await _export(admin))["users"]}
    assert (await _export(admin))["aliases"][0]["reference"] == "python:3.11"


async def test_presets_travel_with_the_configuration(admin: Client) -> None:
    """Issue 34: the launch dialog's presets are configuration; the document's default replaces
    the manager's, and two defaults are refused."""
    exported = await _export(admin)
    assert exported["presets"] == [
        {"name": "small", "cpu": 0.25, "mem": 1024**3, "gpu": 0, "default": True}]
    doc = {"presets": [{"name": "gpu-half", "cpu": "1", "mem": "4g", "gpu": "0.5",
                        "default": True}]}
    r = await admin.post("/api/v1/config/import", json=doc)
    assert r.status_code == 200, r.text
    assert r.json()["sections"]["presets"] == {"created": 1, "updated": 0, "unchanged": 0}
    listed = (await admin.get("/api/v1/presets")).json()
    assert [(p["name"], p["gpu"], p["default"]) for p in listed] == [
        ("gpu-half", 0.5, True), ("small", 0, False)]
    again = await admin.post("/api/v1/config/import", json=doc)
    assert again.json()["sections"]["presets"] == {"created": 0, "updated": 0, "unchanged": 1}
    two = {"presets": [{**doc["presets"][0]}, {"name": "b", "cpu": 1, "mem": "1g",
                                                "default": True}]}
    r = await admin.post("/api/v1/config/import", json=two)
    assert r.status_code == 422 and r.json()["field"] == "presets", r.text


async def test_projects_and_groups_travel_with_the_configuration(
    admin: Client, make_user: UserFactory, make_agent: Any
) -> None:
    """Issue 32: projects (quotas, groups, members by username) and nodes' resource groups are
    configuration; importing the export again changes nothing; a member nobody is refused."""
    await make_user("alice")
    await make_agent("n1")
    r = await admin.post("/api/v1/projects", json={"name": "vision", "max_gpu": 8,
                                                    "groups": ["a100"], "max_mem": "64g"})
    assert r.status_code == 201, r.text
    await admin.post("/api/v1/projects/vision/members", json={"username": "alice"})
    await admin.put("/api/v1/nodes/n1/group", json={"group": "a100"})
    exported = await _export(admin)
    assert exported["projects"] == [{
        "name": "vision", "description": "", "members": ["alice"], "max_sessions": None,
        "max_gpu": 8, "max_cpu": None, "max_mem": 64 * 1024**3, "max_storage": None,
        "max_gpu_models": None, "groups": ["a100"], "default_time_limit": None,
        "max_time_limit": None, "idp_groups": []}]
    assert exported["groups"] == [{"node": "n1", "group": "a100"}]
    again = await admin.post("/api/v1/config/import", json=exported)
    assert again.status_code == 200, again.text
    assert again.json()["sections"]["projects"] == {"created": 0, "updated": 0, "unchanged": 1}
    doc = {"projects": [{"name": "nlp", "max_gpu": "2", "members": ["alice"]}],
           "groups": [{"node": "n1", "group": "t4"}, {"node": "elsewhere", "group": "t4"}]}
    r = await admin.post("/api/v1/config/import", json=doc)
    assert r.status_code == 200, r.text
    assert r.json()["sections"]["projects"]["created"] == 1
    assert any("elsewhere" in note for note in r.json()["notes"])
    nlp = (await admin.get("/api/v1/projects/nlp")).json()
    assert (nlp["max_gpu"], nlp["members"]) == (2, ["alice"])
    nodes = {n["name"]: n["pool"] for n in (await admin.get("/api/v1/nodes")).json()}
    assert nodes["n1"] == "t4"
    bad = {"projects": [{"name": "cv", "members": ["nobody"]}]}
    r = await admin.post("/api/v1/config/import", json=bad)
    assert r.status_code == 422 and r.json()["field"] == "projects.0.members", r.text


async def test_projects_time_limits_travel_with_the_configuration(admin: Client) -> None:
    """Issue 32: a project's default and maximum time limit are exported in seconds and
    imported in any form `--time` takes; a bad one names its entry and nothing is written."""
    r = await admin.post("/api/v1/projects", json={"name": "vision", "default_time_limit": "2h",
                                                    "max_time_limit": "1d"})
    assert r.status_code == 201, r.text
    [entry] = (await _export(admin))["projects"]
    assert (entry["default_time_limit"], entry["max_time_limit"]) == (7200, 86400)
    doc = {"projects": [{**entry, "max_time_limit": "3d"},
                        {"name": "nlp", "default_time_limit": "1:30:00"}]}
    r = await admin.post("/api/v1/config/import", json=doc)
    assert r.status_code == 200, r.text
    assert r.json()["sections"]["projects"] == {"created": 1, "updated": 1, "unchanged": 0}
    got = {p["name"]: (p["default_time_limit"], p["max_time_limit"])
           for p in (await admin.get("/api/v1/projects")).json()}
    assert (got["vision"], got["nlp"]) == ((7200, 3 * 86400), (5400, None))
    bad = {"projects": [{"name": "cv"}, {"name": "nlp", "max_time_limit": "soon"}]}
    r = await admin.post("/api/v1/config/import", json=bad)
    assert r.status_code == 422 and r.json()["field"] == "projects.1.max_time_limit", r.text
    assert "cv" not in {p["name"] for p in (await admin.get("/api/v1/projects")).json()}


async def test_priority_classes_travel_with_the_configuration(admin: Client) -> None:
    """Issue 32: priority classes are configuration; the document's default replaces the
    manager's; importing the same document again changes nothing."""
    exported = await _export(admin)
    assert exported["priority_classes"] == [
        {"name": "normal", "rank": 0, "min_runtime_s": 600, "grace_s": 30,
         "preempt_interactive": False, "default": True, "projects": [], "any_project": True}]
    doc = {"priority_classes": [
        {"name": "high", "rank": 10, "min_runtime_s": 0, "grace_s": 10},
        {"name": "batch", "rank": 1, "preempt_interactive": True, "default": True}]}
    r = await admin.post("/api/v1/config/import", json=doc)
    assert r.status_code == 200, r.text
    assert r.json()["sections"]["priority_classes"] == {"created": 2, "updated": 0,
                                                        "unchanged": 0}
    listed = (await admin.get("/api/v1/priority-classes")).json()
    assert [(c["name"], c["rank"], c["default"]) for c in listed] == [
        ("high", 10, False), ("batch", 1, True), ("normal", 0, False)]
    again = await admin.post("/api/v1/config/import", json=doc)
    assert again.json()["sections"]["priority_classes"] == {"created": 0, "updated": 0,
                                                            "unchanged": 2}
    assert [c["name"] for c in (await _export(admin))["priority_classes"]] == [
        "batch", "high", "normal"]


async def test_which_projects_may_use_a_class_travels_with_the_configuration(
    admin: Client,
) -> None:
    """Issue 32: a class limited to some projects is exported with their names and imported
    after the projects (a document may make both); an unknown project names its entry."""
    for name in ("vision", "nlp"):
        assert (await admin.post("/api/v1/projects", json={"name": name})).status_code == 201
    r = await admin.post("/api/v1/priority-classes",
                         json={"name": "high", "rank": 10, "projects": ["vision", "nlp"]})
    assert r.status_code == 201, r.text
    exported = await _export(admin)
    [high] = [c for c in exported["priority_classes"] if c["name"] == "high"]
    assert high["projects"] == ["nlp", "vision"]
    again = await admin.post("/api/v1/config/import", json=exported)
    assert again.json()["sections"]["priority_classes"]["unchanged"] == 2, again.text
    doc = {"projects": [{"name": "cv"}],
           "priority_classes": [{**high, "projects": ["cv"]},
                                {"name": "team", "rank": 3, "projects": ["cv", "nlp"]}]}
    r = await admin.post("/api/v1/config/import", json=doc)
    assert r.status_code == 200, r.text
    assert r.json()["sections"]["priority_classes"] == {"created": 1, "updated": 1,
                                                        "unchanged": 0}
    listed = {c["name"]: c["projects"] for c in (await admin.get("/api/v1/priority-classes")
                                                 ).json()}
    assert listed == {"high": ["cv"], "team": ["cv", "nlp"], "normal": []}
    bad = {"priority_classes": [{"name": "x", "rank": 1, "projects": ["nowhere"]}]}
    r = await admin.post("/api/v1/config/import", json=bad)
    assert r.status_code == 422 and r.json()["field"] == "priority_classes.0.projects", r.text
    assert r.json()["message"] == "priority_classes.0: projects: no project 'nowhere'"
    assert "x" not in {c["name"] for c in (await admin.get("/api/v1/priority-classes")).json()}


async def test_an_import_cannot_make_a_limited_class_the_default(admin: Client) -> None:
    """The default class is every project's: a document making a class the default while it
    keeps the class's project limits is refused, as `priority-class set --default` is (an
    unchanged limit was not looked at, and a limited class became the default)."""
    assert (await admin.post("/api/v1/projects", json={"name": "vision"})).status_code == 201
    r = await admin.post("/api/v1/priority-classes",
                         json={"name": "team", "rank": 3, "projects": ["vision"]})
    assert r.status_code == 201, r.text
    doc = {"priority_classes": [{"name": "team", "rank": 3, "default": True,
                                 "projects": ["vision"]}]}
    r = await admin.post("/api/v1/config/import", json=doc)
    assert r.status_code == 422 and r.json()["field"] == "priority_classes.0.projects", r.text
    assert r.json()["message"].startswith("priority_classes.0: team is the default class")
    listed = {c["name"]: (c["default"], c["projects"]) for c in (await admin.get(
        "/api/v1/priority-classes")).json()}
    assert listed == {"team": (False, ["vision"]), "normal": (True, [])}


async def test_project_group_links_travel_with_the_configuration(admin: Client) -> None:
    """Issue 42: the groups at identity providers linked to a project are exported and
    imported by project name; a document without them leaves a project's links alone."""
    assert (await admin.post("/api/v1/projects", json={"name": "vision"})).status_code == 201
    r = await admin.put("/api/v1/projects/vision/idp-groups",
                        json={"provider": "ldap", "groups": ["vision", "cv-lab"]})
    assert r.status_code == 200, r.text
    [entry] = (await _export(admin))["projects"]
    assert entry["idp_groups"] == [{"provider": "ldap", "groups": ["cv-lab", "vision"]}]
    again = await admin.post("/api/v1/config/import", json={"projects": [entry]})
    assert again.json()["sections"]["projects"]["unchanged"] == 1, again.text
    moved = {**entry, "idp_groups": [{"provider": "oidc", "groups": ["/vision"]}]}
    r = await admin.post("/api/v1/config/import", json={"projects": [moved]})
    assert r.json()["sections"]["projects"]["updated"] == 1, r.text
    links = (await admin.get("/api/v1/projects/vision/idp-groups")).json()
    assert links == [{"provider": "oidc", "groups": ["/vision"]}]
    untouched = {k: v for k, v in entry.items() if k != "idp_groups"}
    r = await admin.post("/api/v1/config/import", json={"projects": [untouched]})
    assert r.status_code == 200, r.text
    assert (await admin.get("/api/v1/projects/vision/idp-groups")).json() == links
    bad = await admin.put("/api/v1/projects/vision/idp-groups",
                          json={"provider": "saml", "groups": ["x"]})
    assert bad.status_code == 422 and "provider" in bad.json()["field"], bad.text
