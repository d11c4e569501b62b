"""`gpuslice session list --json` prints the manager's page as it came, without building the
models: the very text that dumping the models printed before; it says how much it holds
(`total`) and `--all-pages` gets everything."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from gpuslice.cli.output import print_json
from gpuslice.common.schemas.sessions import SessionPublic

from .conftest import IMAGE, Manager


def test_the_json_is_what_the_models_print(
    manager: Manager, capsys: pytest.CaptureFixture[str]
) -> None:
    done = manager.cli("session", "list", "--json")
    assert done.returncode == 0, done.stderr
    with manager.client() as client:
        print_json(client.list_sessions(owner="admin").model_dump(mode="json"))
    assert done.stdout == capsys.readouterr().out


def test_a_page_says_it_is_partial_and_all_pages_gets_everything(manager: Manager) -> None:
    with manager.client() as client:  # 3 sessions already; 600 more: more than a full page
        for _ in range(6):
            client.create_sessions(image=IMAGE, cpu="0.25", mem="64m", count=100, name="many")
    page = json.loads(manager.cli("session", "list", "--json", "--limit", "2").stdout)
    assert (len(page["items"]), page["total"], page["limit"], page["offset"]) == (2, 603, 2, 0)
    newest = json.loads(
        manager.cli("session", "list", "--json", "--limit", "2", "--offset", "1").stdout)
    assert newest["items"][0] == page["items"][1]

    done = manager.cli("session", "list", "--json", "--all-pages")
    assert done.returncode == 0, done.stderr
    everything = json.loads(done.stdout)
    ids = [s["id"] for s in everything["items"]]
    assert everything["total"] == len(ids) == len(set(ids)) == 603
    assert [s["name"] for s in everything["items"][-3:]] == ["idle-3", "idle-2", "idle-1"]
    table = manager.cli("session", "list").stdout
    assert "(100 of 603; use --limit, --offset or --all-pages for more)" in table

    bad = manager.cli("session", "list", "--limit", "501")
    assert bad.returncode == 2 and bad.stderr.strip() == (
        "error: --limit: must be between 1 and 500, got 501")


def test_a_session_with_every_field_set_round_trips_through_its_model(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # What a PENDING session leaves empty: a placement on two devices, a result, odd decimals.
    at = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    device = {"device_uuid": "GPU-1", "device_model": "Mock A100", "mem": 2 * 1024**3, "sms": 27}
    session = SessionPublic(
        id="s1", name="job", owner_id="u1", owner="alice", image="img:1", type="batch",
        command=["python3", "-c", "print(1)"], env={"A": "é"}, priority=3,
        resources={"gpu": "1.25", "cpu": "0.1", "mem": 256 * 1024**2}, gpu_model="Mock A100",
        status="TERMINATED", status_reason="exited 0", wait_code=None, queue_position=None,
        result="SUCCESS", exit_code=0, created_at=at, updated_at=at,
        placement={"node_id": "n1", "node_name": "vm", "devices": [
            device | {"device_index": 0, "gpu": "1", "fraction": "1"},
            device | {"device_index": 1, "gpu": "0.25", "fraction": "0.125"},
        ]},
    )
    sent = session.model_dump_json()  # as the manager answers
    print_json([json.loads(sent)])
    as_sent = capsys.readouterr().out
    print_json([SessionPublic.model_validate_json(sent)])
    assert capsys.readouterr().out == as_sent
