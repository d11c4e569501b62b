"""The manager's assignment → the runtime's session spec: exact integers and the manager's share,
kept to the digit in the container (no Docker needed)."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest

from gpuslice.agent.runtime import (
    ALLOCATION_PATH,
    SpecError,
    SpecOptions,
    build_container_spec,
    session_spec,
)
from gpuslice.common.resources import GiB, slice_fraction, sm_percent
from gpuslice.common.schemas.agents import Assignment

OPTIONS = SpecOptions(node_name="gpu-01", accelerator="nvidia", device_requests=True)


def wire_slice(index: int = 0, gpu: int = 1000, capacity: int = 3000, **changes: Any) -> dict:
    """A slice as the manager puts it on the wire (JSON), its share from common.resources."""
    body = {
        "device_index": index,
        "device_uuid": f"GPU-{index}",
        "gpu": gpu,
        "capacity": capacity,
        "fraction": str(slice_fraction(gpu, capacity)),
        "mem": 8 * GiB,
        "sms": 36,
        "sm_percent": sm_percent(gpu, capacity),
    }
    body.update(changes)
    return body


def assignment(*slices: dict, **changes: Any) -> Assignment:
    body = {
        "session_id": "s-1",
        "name": "train",
        "owner": "alice",
        "image": "gpuslice/base:0.1.0",
        "type": "batch",
        "command": ["python3", "train.py"],
        "env": {"SEED": "1"},
        "status": "SCHEDULED",
        "desired": "running",
        "resources": {"gpu": sum(s["gpu"] for s in slices), "cpu": 1500, "mem": 3 * GiB},
        "slices": list(slices),
    }
    body.update(changes)
    return Assignment.model_validate_json(json.dumps(body))


def env_of(config: dict[str, Any]) -> dict[str, str]:
    return dict(item.split("=", 1) for item in config["Env"])


def test_one_fgpu_of_three_shows_the_managers_fraction_to_the_digit() -> None:
    session = session_spec(assignment(wire_slice(gpu=1000, capacity=3000)))
    assert session.slices[0].fraction == Decimal("0.3333")
    assert session.device_capacity == 3000
    spec = build_container_spec(session, OPTIONS)
    allocation = json.loads(spec.files()[ALLOCATION_PATH])
    assert allocation["devices"][0]["fraction"] == "0.3333"
    assert allocation["devices"][0]["sm_percent"] == 33
    assert allocation["fgpu"] == "1.0" and allocation["fgpu_per_gpu"] == "3.0"
    env = env_of(spec.create_config())
    assert env["GPUSLICE_GPU_FRACTION"] == "0.3333"
    assert env["GPUSLICE_GPU_SM_PERCENT"] == "33"


def test_the_share_is_the_managers_never_recomputed() -> None:
    # Whatever the manager decided (here a share no formula on this side would give) is shown.
    odd = wire_slice(gpu=500, capacity=2000, fraction="0.2", sm_percent=40)
    spec = build_container_spec(session_spec(assignment(odd)), OPTIONS)
    assert spec.allocation["devices"][0]["fraction"] == "0.2"
    env = env_of(spec.create_config())
    assert (env["GPUSLICE_GPU_FRACTION"], env["GPUSLICE_GPU_SM_PERCENT"]) == ("0.2", "40")


def test_exact_integers_go_through_unconverted() -> None:
    session = session_spec(assignment(wire_slice(gpu=250, capacity=2000)))
    assert (session.cpu, session.mem) == (1500, 3 * GiB)
    assert [(s.gpu, s.mem, s.sms) for s in session.slices] == [(250, 8 * GiB, 36)]
    assert session.command == ("python3", "train.py") and session.type == "batch"
    host = build_container_spec(session, OPTIONS).create_config()["HostConfig"]
    assert host["NanoCpus"] == 1_500_000_000 and host["Memory"] == 3 * GiB


def test_a_session_without_gpu_has_no_slice_and_a_unit_device() -> None:
    session = session_spec(assignment(type="interactive", command=None))
    assert session.slices == () and session.device_capacity == 1000
    assert session.command is None


def test_slices_that_disagree_on_the_device_size_are_refused() -> None:
    mixed = assignment(wire_slice(0, 2000, 2000), wire_slice(1, 3000, 3000))
    with pytest.raises(SpecError, match="disagree"):
        session_spec(mixed)


def test_a_share_out_of_range_is_refused() -> None:
    bad = session_spec(assignment(wire_slice(fraction="1.5")))
    with pytest.raises(SpecError, match="share"):
        build_container_spec(bad, OPTIONS)
