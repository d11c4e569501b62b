"""Projects (issue 32) through the API: admins make them and add members; a user launches in
one of theirs (the personal one by default); both quotas hold, and a waiting session says which;
resource groups bound where a session runs."""

from __future__ import annotations

import pytest

from tests.manager.conftest import AgentFactory, Client, UserFactory, create
from tests.manager.fake_agent import gpu
from tests.manager.folder_helpers import put
from tests.manager.helpers import make_project, wait_status, wait_until


async def test_a_session_runs_in_the_personal_project_unless_told(
    admin: Client, make_user: UserFactory, make_agent: AgentFactory
) -> None:
    await make_agent()
    alice = await make_user("alice")
    await make_project(admin, "vision", "alice")
    [mine] = await create(alice, resources={"gpu": 0.25})
    [team] = await create(alice, resources={"gpu": 0.25}, project="vision")
    assert (mine["project"], team["project"]) == ("~alice", "vision")
    assert (await wait_status(alice, team["id"], {"RUNNING"}))["project"] == "vision"
    listed = (await alice.get("/api/v1/projects")).json()
    assert [p["name"] for p in listed] == ["vision", "~alice"]
    vision = (await alice.get("/api/v1/projects/vision")).json()
    assert vision["members"] == ["alice"] and vision["usage"]["sessions"] == 1


async def test_a_user_never_learns_of_a_project_they_are_not_in(
    admin: Client, make_user: UserFactory, make_agent: AgentFactory
) -> None:
    await make_agent()
    alice, bob = await make_user("alice"), await make_user("bob")
    await make_project(admin, "secret-lab", "alice")
    for path in ("/api/v1/projects/secret-lab", "/api/v1/projects/no-such"):
        r = await bob.get(path)
        assert r.status_code == 404, r.text
    assert "secret-lab" not in (await bob.get("/api/v1/projects")).text
    r = await bob.post("/api/v1/sessions", json={"image": "python:3.11",
                                                 "project": "secret-lab"})
    assert r.status_code == 404
    assert r.json()["message"] == (await bob.post("/api/v1/sessions", json={
        "image": "python:3.11", "project": "no-such"})).json()["message"].replace(
        "no-such", "secret-lab")
    r = await bob.post("/api/v1/sessions", json={"image": "python:3.11", "project": "~alice"})
    assert r.status_code == 404
    await create(alice, project="secret-lab")


async def test_the_project_quota_holds_and_the_reason_names_it(
    admin: Client, make_user: UserFactory, make_agent: AgentFactory
) -> None:
    await make_agent(devices=[gpu(i) for i in range(4)])
    alice, bob = await make_user("alice"), await make_user("bob")
    await make_project(admin, "vision", "alice", "bob", max_gpu=1.5)
    [a] = await create(alice, resources={"gpu": 1}, project="vision")
    await wait_status(alice, a["id"], {"RUNNING"})
    [b] = await create(bob, resources={"gpu": 1}, project="vision")
    [solo] = await create(bob, resources={"gpu": 1})  # his personal project: no such quota
    [waiting] = await wait_until(bob, [b["id"]], lambda s: s[0]["wait_code"] == "quota")
    assert waiting["status"] == "PENDING"
    assert waiting["status_reason"] == (
        "project vision: 1.0 of 1.5 fGPU in use; this session needs 1.0 fGPU more")
    assert (await wait_status(bob, solo["id"], {"RUNNING"}))["status"] == "RUNNING"
    r = await bob.post("/api/v1/sessions", json={"image": "python:3.11", "project": "vision",
                                                 "resources": {"gpu": 2}})
    assert r.status_code == 422, r.text
    assert r.json()["message"] == (
        "asks for 2.0 fGPU but project vision's quota allows at most 1.5 fGPU in total")
    await alice.delete(f"/api/v1/sessions/{a['id']}")
    assert (await wait_status(bob, b["id"], {"RUNNING"}))["status"] == "RUNNING"


async def test_both_the_users_and_the_projects_quota_hold(
    admin: Client, make_user: UserFactory, make_agent: AgentFactory
) -> None:
    await make_agent(devices=[gpu(i) for i in range(4)])
    alice = await make_user("alice", policy={"max_gpu": 1})
    await make_project(admin, "vision", "alice", max_gpu=8)
    [a] = await create(alice, resources={"gpu": 1}, project="vision")
    await wait_status(alice, a["id"], {"RUNNING"})
    [b] = await create(alice, resources={"gpu": 0.5}, project="vision")
    [b] = await wait_until(alice, [b["id"]], lambda s: s[0]["wait_code"] == "quota")
    assert b["status_reason"].startswith("user quota: 1.0 of 1.0 fGPU in use")


async def test_resource_groups_bound_where_a_session_runs(
    admin: Client, make_user: UserFactory, make_agent: AgentFactory
) -> None:
    a100 = await make_agent("a100-1", pool="a100")
    t4 = await make_agent("t4-1", pool="t4", devices=[gpu(0, "Mock T4", 16 * 2**30)])
    alice = await make_user("alice")
    await make_project(admin, "vision", "alice", groups=["t4"])
    [s] = await create(alice, resources={"gpu": 1}, project="vision")
    s = await wait_status(alice, s["id"], {"RUNNING"})
    assert s["placement"]["node_id"] == t4.node_id and s["group"] is None
    [more] = await create(alice, resources={"gpu": 1}, project="vision")
    [more] = await wait_until(alice, [more["id"]], lambda x: x[0]["wait_code"] == "capacity")
    assert more["status_reason"].endswith("in resource group 't4'")
    r = await alice.post("/api/v1/sessions", json={"image": "python:3.11", "project": "vision",
                                                   "group": "a100"})
    assert r.status_code == 404, r.text
    assert r.json()["message"] == (
        "project vision may not use resource group 'a100'; it may use t4")
    [mine] = await create(alice, resources={"gpu": 1}, group="a100")  # personal: any group
    mine = await wait_status(alice, mine["id"], {"RUNNING"})
    assert mine["placement"]["node_id"] == a100.node_id and mine["group"] == "a100"
    groups = {g["name"]: g for g in (await alice.get("/api/v1/groups")).json()}
    assert groups["t4"]["gpu_models"] == ["Mock T4"] and groups["a100"]["gpu_free"] == 0


async def test_an_admin_moves_a_node_to_another_group_and_waiting_sessions_follow(
    admin: Client, make_user: UserFactory, make_agent: AgentFactory
) -> None:
    node = await make_agent("n1")
    alice = await make_user("alice")
    [s] = await create(alice, resources={"gpu": 1}, group="t4")
    s = await wait_until(alice, [s["id"]], lambda x: x[0]["wait_code"] == "no_node")
    assert s[0]["status_reason"] == "no schedulable node in resource group 't4'"
    r = await admin.put("/api/v1/nodes/n1/group", json={"group": "t4"})
    assert r.status_code == 200 and r.json()["pool"] == "t4"
    placed = await wait_status(alice, s[0]["id"], {"RUNNING"})
    assert placed["placement"]["node_id"] == node.node_id
    r = await admin.put("/api/v1/nodes/n1/group", json={"group": "Bad Group"})
    assert r.status_code == 422 and "group" in r.text


@pytest.mark.parametrize(("body", "needle"), [
    ({"name": "Vision"}, "name"),
    ({"name": "~mine"}, "name"),
    ({"name": "ok", "max_gpu": "lots"}, "max_gpu"),
    ({"name": "ok", "groups": ["A100!"]}, "groups"),
])
async def test_bad_projects_are_refused_with_the_field(
    admin: Client, body: dict, needle: str
) -> None:
    r = await admin.post("/api/v1/projects", json=body)
    assert r.status_code == 422 and needle in r.text, r.text


async def test_members_are_managed_by_admins(admin: Client, make_user: UserFactory) -> None:
    alice = await make_user("alice")
    await make_project(admin, "vision", "alice")
    assert (await alice.post("/api/v1/projects/vision/members",
                             json={"username": "alice"})).status_code == 403
    r = await admin.post("/api/v1/projects/vision/members", json={"username": "nobody"})
    assert r.status_code == 404 and r.json()["message"] == "no user nobody"
    r = await admin.post("/api/v1/projects", json={"name": "vision"})
    assert r.status_code == 409
    r = await admin.delete("/api/v1/projects/vision/members/alice")
    assert r.json()["members"] == []
    r = await alice.post("/api/v1/sessions", json={"image": "python:3.11", "project": "vision"})
    assert r.status_code == 404
    r = await admin.put("/api/v1/projects/vision", json={"max_sessions": 3, "groups": ["a"]})
    assert (r.json()["max_sessions"], r.json()["groups"]) == (3, ["a"])


async def test_a_projects_folder_is_its_members_and_nobody_elses(
    admin: Client, make_user: UserFactory, make_agent: AgentFactory
) -> None:
    await make_agent()
    alice, bob = await make_user("alice"), await make_user("bob")
    await make_project(admin, "vision", "alice")
    r = await admin.post("/api/v1/folders", json={"name": "images", "project": "vision"})
    assert r.status_code == 201, r.text
    folder = r.json()
    assert (folder["project"], folder["shared"]) == ("vision", True)
    mine = {f["name"]: f for f in (await alice.get("/api/v1/folders")).json()}
    assert mine["images"]["access"] == "rw" and mine["images"]["project"] == "vision"
    assert (await alice.get(f"/api/v1/folders/{folder['id']}")).status_code == 200
    assert "images" not in (await bob.get("/api/v1/folders")).text
    gone = await bob.get(f"/api/v1/folders/{folder['id']}")
    assert gone.status_code == 404 and gone.json()["message"] == f"no folder {folder['id']}"
    [s] = await create(alice, folders=["images"], project="vision")
    assert [(f["name"], f["read_only"]) for f in s["folders"]] == [("images", False)]
    r = await bob.post("/api/v1/sessions", json={"image": "python:3.11", "folders": ["images"]})
    assert r.status_code == 422 and "no folder named images" in r.json()["message"]
    r = await alice.post("/api/v1/folders", json={"name": "mine", "project": "vision"})
    assert r.status_code == 403  # only admins make a project's folders
    await admin.delete("/api/v1/projects/vision/members/alice")
    assert (await alice.get(f"/api/v1/folders/{folder['id']}")).status_code == 404


async def test_a_projects_quota_per_gpu_model_holds(
    admin: Client, make_user: UserFactory, make_agent: AgentFactory
) -> None:
    await make_agent("a100-1", devices=[gpu(i) for i in range(3)])
    await make_agent("t4-1", devices=[gpu(0, "Mock T4", 16 * 2**30)])
    alice = await make_user("alice")
    await make_project(admin, "vision", "alice", max_gpu_models={"A100": 1})
    [a] = await create(alice, resources={"gpu": 1}, project="vision", gpu_model="a100")
    await wait_status(alice, a["id"], {"RUNNING"})
    [b] = await create(alice, resources={"gpu": 1}, project="vision", gpu_model="a100")
    [t] = await create(alice, resources={"gpu": 1}, project="vision", gpu_model="t4")
    [b] = await wait_until(alice, [b["id"]], lambda s: s[0]["wait_code"] == "quota")
    assert b["status_reason"] == ("project vision: 1.0 of 1.0 fGPU of a100 GPUs in use; this "
                                  "session needs 1.0 fGPU of a100 GPUs more")
    assert (await wait_status(alice, t["id"], {"RUNNING"}))["status"] == "RUNNING"


async def test_a_projects_storage_quota_holds_for_its_folders(
    admin: Client, make_user: UserFactory
) -> None:
    alice = await make_user("alice")
    await make_project(admin, "vision", "alice", max_storage=1000)
    folder = (await admin.post("/api/v1/folders", json={"name": "images",
                                                        "project": "vision"})).json()
    assert (await put(alice, folder["id"], "a.bin", b"x" * 600)).status_code == 201
    r = await put(alice, folder["id"], "b.bin", b"x" * 600)
    assert r.status_code == 422, r.text
    assert r.json()["message"].startswith(
        "this needs 600 B but the project's storage quota of 1000 B leaves 400 B free "
        "(600 B used): delete files")


async def test_a_run_is_checked_against_its_project_and_group(
    admin: Client, make_user: UserFactory, make_agent: AgentFactory
) -> None:
    await make_agent()
    alice = await make_user("alice")
    await make_project(admin, "vision", "alice", groups=["t4"])
    run = {"name": "train", "script": "train.py", "image": "python:3.11"}
    r = await alice.post("/api/v1/runs/check", json={**run, "project": "nlp"})
    assert r.status_code == 404 and r.json()["message"] == "no project nlp"
    r = await alice.post("/api/v1/runs/check", json={**run, "project": "vision",
                                                     "group": "a100"})
    assert r.status_code == 404 and "may use t4" in r.json()["message"]
    r = await alice.post("/api/v1/runs/check", json={**run, "project": "vision"})
    assert r.status_code == 204, r.text
