"""`gpuslice session list --json` prints the manager's JSON as it came, without building the
models: the very text that dumping the models printed before."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from gpuslice.cli.output import print_json
from gpuslice.common.schemas.sessions import SessionPublic

from .conftest import Manager


def test_the_json_is_what_the_models_print(
    manager: Manager, capsys: pytest.CaptureFixture[str]
) -> None:
    done = manager.cli("session", "list", "--json")
    assert done.returncode == 0, done.stderr
    with manager.client() as client:
        print_json(client.list_sessions(owner="admin").items)
    assert done.stdout == capsys.readouterr().out


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
