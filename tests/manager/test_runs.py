"""Runs through the API: a script uploaded to `runs/<name>/`, run as a batch session on the
slice asked (by fGPU or GPU memory), shown with its result, duration and saved model."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.waits import Deadline

from .conftest import IMAGE, AgentFactory, Client, UserFactory
from .fake_agent import gpu
from .folder_helpers import folder, tar_of

GiB = 1024**3


async def upload_code(client: Client, name: str, files: dict[str, bytes | None]) -> None:
    listed = (await client.get("/api/v1/folders")).json()
    runs = next((f for f in listed if f["name"] == "runs"), None) or await folder(client, "runs")
    r = await client.put(f"/api/v1/folders/{runs['id']}/archive", params={"path": name},
                         content=tar_of(files))
    assert r.status_code == 200, r.text


async def start(client: Client, name: str, expect: int = 201, **body: Any) -> Any:
    body = {"name": name, "script": "train.py", "image": IMAGE, **body}
    body.setdefault("resources", {"gpu_mem": "2048m", "cpu": 1, "mem": "1g"})
    r = await client.post("/api/v1/runs", json=body)
    assert r.status_code == expect, r.text
    return r.json()


async def until(client: Client, run: str, status: str) -> dict[str, Any]:
    deadline = Deadline(10)
    while True:
        got: dict[str, Any] = (await client.get(f"/api/v1/runs/{run}")).json()
        if got["status"] == status:
            return got
        if deadline.passed:
            raise AssertionError(f"run {run} is {got['status']}, not {status}")
        await asyncio.sleep(0.1)


async def test_a_run_on_a_slice_by_gpu_memory(make_user: UserFactory,
                                              make_agent: AgentFactory) -> None:
    alice = await make_user("alice")
    agent = await make_agent("node-1", devices=[gpu(0, mem=8 * GiB)], fgpu_per_gpu=2)
    data = await folder(alice, "data")
    await upload_code(alice, "train-1", {"train.py": b"print('hi')\n", "conf": None})
    run = await start(alice, "train-1", args=["--epochs", "2"], folders=["data:ro"],
                      save_var="net")
    assert (run["name"], run["script"], run["args"], run["model"]) == (
        "train-1", "train.py", ["--epochs", "2"], None)
    run = await until(alice, "train-1", "RUNNING")
    session = (await alice.get(f"/api/v1/sessions/{run['id']}")).json()
    assert session["resources"]["gpu"] == 0.5 and session["resources"]["gpu_mem"] == 2 * GiB
    assert session["placement"]["devices"][0]["mem"] == 2 * GiB  # the caps apply 2 GiB
    assert session["type"] == "batch" and session["env"]["GPUSLICE_RUN_NAME"] == "train-1"
    assert session["command"] == [
        "gpuslice-run", "--dir", "/home/work/runs/train-1", "--save-dir", "output",
        "--model", "train-1", "--", "python3", "-u", "/opt/gpuslice/bin/gpuslice_var.py",
        "--var", "net", "--into", "output", "--", "train.py", "--epochs", "2"]
    assert [(f["name"], f["read_only"]) for f in session["folders"]] == [
        ("runs", False), ("data", True)]
    assert data["id"] in {f["folder_id"] for f in session["folders"]}
    assert run["started_at"] is not None and run["duration_s"] >= 0

    await start(alice, "train-1", expect=409)  # one run of a name at a time
    sid = run["id"]
    base = f"/api/v1/agents/me/sessions/{sid}/models"
    started = (await agent.client.post(f"{base}/uploads", json={
        "name": "train-1", "files": [{"path": "model.txt", "size": 2}]})).json()
    await agent.client.put(f"{base}/file", content=b"ok",
                           params={"upload_id": started["upload_id"], "path": "model.txt"})
    await agent.client.post(f"{base}/complete", json={"upload_id": started["upload_id"]})
    r = await alice.delete(f"/api/v1/runs/{sid}")
    assert r.status_code == 409 and r.json()["code"] == "run_not_over"
    await agent.report(sid, "TERMINATED", exit_code=0, logs="done\n")
    done = await until(alice, "train-1", "TERMINATED")
    assert (done["result"], done["exit_code"]) == ("SUCCESS", 0)
    assert done["ended_at"] is not None and done["model"]["name"] == "train-1"
    assert [r["name"] for r in (await alice.get("/api/v1/runs")).json()] == ["train-1"]

    assert (await alice.delete("/api/v1/runs/train-1")).status_code == 204
    assert (await alice.get("/api/v1/runs")).json() == []
    runs_folder = next(f for f in (await alice.get("/api/v1/folders")).json()
                       if f["name"] == "runs")
    listing = (await alice.get(f"/api/v1/folders/{runs_folder['id']}/files")).json()
    assert listing["entries"] == []  # its code went with it
    assert [m["name"] for m in (await alice.get("/api/v1/models")).json()] == ["train-1"]


async def test_a_failed_run_and_what_others_see(make_user: UserFactory,
                                                make_agent: AgentFactory) -> None:
    alice, bob = await make_user("alice"), await make_user("bob")
    agent = await make_agent("node-1", devices=[gpu(0, mem=8 * GiB)], fgpu_per_gpu=2)
    r = await alice.post("/api/v1/runs", json={"name": "x", "script": "train.py",
                                               "image": IMAGE})
    assert r.status_code == 422 and r.json()["code"] == "script_missing"
    await upload_code(alice, "boom", {"train.py": b"raise SystemExit(3)\n"})
    run = await start(alice, "boom", resources={"gpu": 0.5, "cpu": 1, "mem": "1g"})
    await until(alice, "boom", "RUNNING")
    await agent.report(run["id"], "TERMINATED", exit_code=3, logs="Traceback...\n")
    done = await until(alice, "boom", "TERMINATED")
    assert (done["result"], done["exit_code"], done["model"]) == ("FAILED", 3, None)
    for path in (f"/api/v1/runs/{run['id']}", "/api/v1/runs/boom"):
        r = await bob.get(path)
        assert r.status_code == 404
    assert (await bob.get("/api/v1/runs")).json() == []
    assert (await bob.delete(f"/api/v1/runs/{run['id']}")).status_code == 404
    big = {"name": "big", "script": "train.py", "image": IMAGE,
           "resources": {"gpu_mem": "12g", "cpu": 1, "mem": "1g"}}
    for path in ("/api/v1/runs/check", "/api/v1/runs"):  # before any code is sent
        r = await alice.post(path, json=big)
        assert r.status_code == 422 and "the most possible is 8 GiB" in r.json()["message"]
    fine = {**big, "resources": {"gpu_mem": "1g", "cpu": 1, "mem": "1g"}}
    assert (await alice.post("/api/v1/runs/check", json=fine)).status_code == 204
    assert (await alice.post("/api/v1/runs/check", json={**fine, "folders": ["nope"]})
            ).status_code == 422


BAD_RUNS = [  # (what the body changes, the field named, words of the one-line answer)
    ({"folders": ["a b"]}, "folders", "write NAME, NAME:ro or NAME:rw"),
    ({"folders": ["x:zz"]}, "folders", "write NAME, NAME:ro or NAME:rw"),
    ({"folders": [""]}, "folders", "write NAME, NAME:ro or NAME:rw"),
    ({"folders": ["f" * 81]}, "folders", "write NAME, NAME:ro or NAME:rw"),
    ({"env": {"A=B": "v"}}, "env", "'A=B' is not a valid variable name"),
    ({"env": {"1": ""}}, "env", "'1' is not a valid variable name"),
    ({"name": "n" * 81}, "name", "use 1-63 lowercase letters, digits and dashes"),
    ({"name": "Bad_Name"}, "name", "use 1-63 lowercase letters, digits and dashes"),
    ({"args": ["a"] * 256}, "args", "at most"),
    ({"save_var": "1model"}, "save_var", "'1model' is not a Python variable name"),
    ({"save_var": "model", "script": "train.sh"}, "save_var",
     "train.sh is not a Python script (.py)"),
]


async def test_bad_run_input_is_a_422_naming_the_field(make_user: UserFactory,
                                                       make_agent: AgentFactory) -> None:
    # Issue 35, finding 9: these were 500s (the run's session refused what the run took in).
    alice = await make_user("alice")
    await make_agent("node-1", devices=[gpu(0, mem=8 * GiB)], fgpu_per_gpu=2)
    await upload_code(alice, "ok", {"train.py": b"print(1)\n"})
    good = {"name": "ok", "script": "train.py", "image": IMAGE,
            "resources": {"gpu": 0.5, "cpu": 1, "mem": "1g"}}
    for change, field, words in BAD_RUNS:
        for path in ("/api/v1/runs/check", "/api/v1/runs"):
            r = await alice.post(path, json={**good, **change})
            answer = r.json()
            assert r.status_code == 422, (change, path, r.text)
            assert answer["code"] == "validation_error" and answer["field"].startswith(field)
            assert words in answer["message"] and "\n" not in answer["message"], answer
    session = {k: v for k, v in good.items() if k != "script"}
    for change, _field, _words in BAD_RUNS[:7]:  # the same rule, the same answer, for sessions
        r = await alice.post("/api/v1/sessions", json={**session, **change})
        assert r.status_code == 422, (change, r.text)


async def test_less_gpu_memory_than_the_smallest_slice_is_refused_naming_it(
    make_user: UserFactory, make_agent: AgentFactory
) -> None:
    # Issue 35, finding 7: 2048 bytes ran on a 0.01 fGPU sliver (41 MiB) and "succeeded".
    alice = await make_user("alice")
    await make_agent("node-1", devices=[gpu(0, mem=8 * GiB)], fgpu_per_gpu=2)
    tiny = {"name": "tiny", "script": "train.py", "image": IMAGE,
            "resources": {"gpu_mem": 2048, "cpu": 1, "mem": "1g"}}
    smallest = ("asks for 2 KiB of GPU memory, less than the smallest slice in resource group "
                "'default' (0.01 fGPU of the 8 GiB Mock A100: 40.95 MiB); ask for at least 41 MiB")
    for path in ("/api/v1/runs/check", "/api/v1/runs", "/api/v1/sessions"):
        r = await alice.post(path, json=tiny)
        assert r.status_code == 422 and smallest in r.json()["message"], (path, r.text)
    enough = {**tiny, "resources": {**tiny["resources"], "gpu_mem": "41m"}}
    assert (await alice.post("/api/v1/runs/check", json=enough)).status_code == 204


async def test_a_run_lasts_as_long_as_its_script_not_the_wait_to_save(
    make_user: UserFactory, make_agent: AgentFactory
) -> None:
    # Issue 35, finding 4: a run whose script ended while the manager was down counted the
    # downtime in its duration. Its runner tells the script's own time before it saves.
    alice = await make_user("alice")
    agent = await make_agent("node-1", devices=[gpu(0, mem=8 * GiB)], fgpu_per_gpu=2)
    other = await make_agent("node-2", devices=[gpu(0, mem=8 * GiB)], fgpu_per_gpu=2)
    await upload_code(alice, "slow", {"train.py": b"print(1)\n"})
    run = await start(alice, "slow", resources={"gpu": 0.5, "cpu": 1, "mem": "1g"})
    await until(alice, "slow", "RUNNING")
    told = {"script_s": 15.1, "waited_s": 42}
    path = f"/api/v1/agents/me/sessions/{run['id']}/run/saving"
    mine = agent if (await alice.get(f"/api/v1/sessions/{run['id']}")).json()[
        "placement"]["node_name"] == "node-1" else other
    stranger = other if mine is agent else agent
    assert (await stranger.client.post(path, json=told)).status_code == 404
    r = await mine.client.post(path, json=told)
    assert r.status_code == 200 and r.json() == {"duration_s": 15.1}, r.text
    shown = (await alice.get("/api/v1/runs/slow")).json()
    assert shown["duration_s"] == 15.1 and shown["status"] == "RUNNING"
    assert shown["status_reason"] == ("the script succeeded in 15.1 s; saving output/ as model "
                                      "slow (after waiting 42.0 s for the manager)")
    assert (await mine.client.post(path, json={"script_s": -1})).status_code == 422
    await mine.report(run["id"], "TERMINATED", exit_code=0, logs="done\n")
    done = await until(alice, "slow", "TERMINATED")
    assert (done["result"], done["duration_s"]) == ("SUCCESS", 15.1)


async def save_model(agent: Any, sid: str, name: str, data: bytes) -> dict[str, Any]:
    """What `gpuslice-save` in the run's session does, through its node."""
    base = f"/api/v1/agents/me/sessions/{sid}/models"
    started = (await agent.client.post(f"{base}/uploads", json={
        "name": name, "files": [{"path": "model.txt", "size": len(data)}]})).json()
    r = await agent.client.put(f"{base}/file", content=data,
                               params={"upload_id": started["upload_id"], "path": "model.txt"})
    assert r.status_code == 204, r.text
    r = await agent.client.post(f"{base}/complete", json={"upload_id": started["upload_id"]})
    assert r.status_code == 200, r.text
    return r.json()


async def test_a_second_run_of_a_name_keeps_the_first_runs_code_and_model(
    make_user: UserFactory, make_agent: AgentFactory
) -> None:
    alice = await make_user("alice")
    agent = await make_agent("node-1", devices=[gpu(0, mem=8 * GiB)], fgpu_per_gpu=2)
    await upload_code(alice, "resnet", {"train.py": b"print('first')\n"})
    first = await start(alice, "resnet")
    assert first["code_dir"] == "resnet"
    await until(alice, first["id"], "RUNNING")
    assert (await save_model(agent, first["id"], "resnet", b"v1"))["ref"] == "resnet:1"
    await agent.report(first["id"], "TERMINATED", exit_code=0, logs="done\n")
    await until(alice, first["id"], "TERMINATED")

    # runs/resnet/ is the first run's: a second run may not take it over
    r = await alice.post("/api/v1/runs", json={"name": "resnet", "script": "train.py",
                                               "image": IMAGE})
    assert r.status_code == 409 and r.json()["code"] == "run_dir_in_use", r.text
    assert r.json()["message"].startswith("runs/resnet/ keeps the code of an earlier run of "
                                          "resnet")
    r = await alice.post("/api/v1/runs", json={"name": "resnet", "script": "train.py",
                                               "image": IMAGE, "code_dir": "other"})
    assert r.status_code == 422 and "use resnet or resnet.N" in r.text
    await upload_code(alice, "resnet.2", {"train.py": b"print('second')\n"})
    second = await start(alice, "resnet", code_dir="resnet.2")
    session = (await alice.get(f"/api/v1/sessions/{second['id']}")).json()
    assert session["command"][:3] == ["gpuslice-run", "--dir", "/home/work/runs/resnet.2"]
    await until(alice, second["id"], "RUNNING")
    assert (await save_model(agent, second["id"], "resnet", b"v2"))["ref"] == "resnet:2"
    await agent.report(second["id"], "TERMINATED", exit_code=0, logs="done\n")
    await until(alice, second["id"], "TERMINATED")

    runs = (await alice.get("/api/v1/runs")).json()
    assert [(r["code_dir"], r["model"]["ref"]) for r in runs] == [
        ("resnet.2", "resnet:2"), ("resnet", "resnet:1")]
    models = (await alice.get("/api/v1/models")).json()
    assert [m["ref"] for m in models] == ["resnet:1", "resnet:2"]
    assert (await alice.delete(f"/api/v1/runs/{second['id']}")).status_code == 204
    runs_folder = next(f for f in (await alice.get("/api/v1/folders")).json()
                       if f["name"] == "runs")
    listing = (await alice.get(f"/api/v1/folders/{runs_folder['id']}/files")).json()
    assert [e["path"] for e in listing["entries"]] == ["resnet"]  # the first run's stays
