"""Container specs and hard caps, checked on the Engine API body (no Docker needed)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from gpuslice.agent.runtime import (
    ALLOCATION_PATH,
    LABEL_ALLOCATION,
    SessionSpec,
    SpecError,
    SpecOptions,
    apply_hami,
    apply_hard_caps,
    apply_mps,
    build_container_spec,
)
from gpuslice.agent.runtime.spec import DeviceInfo, Mount
from gpuslice.agent.settings import HardCapsSettings
from gpuslice.common.resources import GiB, MiB
from tests.agent.factories import gpu_slice

UUID = "GPU-0b1c2d3e-aaaa-bbbb-cccc-111122223333"
NVIDIA = SpecOptions(node_name="gpu-01", accelerator="nvidia", device_requests=True)
MOCK = SpecOptions(node_name="laptop", accelerator="mock")


def session(**changes: object) -> SessionSpec:
    values: dict[str, object] = {
        "session_id": "s-123",
        "owner": "alice",
        "image": "gpuslice/base:0.1.0",
        "type": "interactive",
        "cpu": 1500,
        "mem": 2 * GiB,
        "env": {"MY_VAR": "1", "CUDA_VISIBLE_DEVICES": "all"},
        # 0.5 fGPU on a node where 1 GPU = 2 fGPU: a quarter of a 40 GiB, 108 SM device.
        "slices": (gpu_slice(UUID, 3, 500, 10 * GiB, 27, capacity=2000),),
        "device_capacity": 2000,
    }
    values.update(changes)
    return SessionSpec(**values)  # type: ignore[arg-type]


def env_of(config: dict[str, object]) -> dict[str, str]:
    return dict(item.split("=", 1) for item in config["Env"])  # type: ignore[union-attr]


def test_limits_user_and_security_options() -> None:
    config = build_container_spec(session(), NVIDIA).create_config()
    host = config["HostConfig"]
    assert host["NanoCpus"] == 1_500_000_000
    assert host["Memory"] == host["MemorySwap"] == 2 * GiB
    assert host["PidsLimit"] == 4096
    assert config["User"] == "1000:1000"
    assert host["Privileged"] is False
    assert host["CapDrop"] == ["ALL"]
    assert host["SecurityOpt"] == ["no-new-privileges"]
    assert host["Init"] is True
    assert host["Mounts"] == []  # in particular, no Docker socket
    assert config["Cmd"] == ["sleep", "infinity"]


def test_sudo_only_where_the_node_allows_it_and_then_still_unprivileged() -> None:
    default = build_container_spec(session(), NVIDIA).create_config()["HostConfig"]
    assert "CapAdd" not in default and default["SecurityOpt"] == ["no-new-privileges"]
    config = build_container_spec(session(), replace(NVIDIA, allow_sudo=True)).create_config()
    host = config["HostConfig"]
    assert host["SecurityOpt"] == []  # setuid sudo works
    assert host["CapDrop"] == ["ALL"]
    assert host["CapAdd"] == ["AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID",
                              "KILL", "SETGID", "SETUID"]
    assert host["Privileged"] is False and config["User"] == "1000:1000"


def test_labels_carry_session_owner_and_allocation() -> None:
    spec = build_container_spec(session(), NVIDIA)
    labels = spec.create_config()["Labels"]
    assert labels["gpuslice.session-id"] == "s-123"
    assert labels["gpuslice.owner"] == "alice"
    assert labels["gpuslice.session-type"] == "interactive"
    assert labels["gpuslice.node"] == "gpu-01"
    allocation = json.loads(labels[LABEL_ALLOCATION])
    assert allocation == json.loads(spec.files()[ALLOCATION_PATH])
    assert allocation["devices"] == [
        {
            "uuid": UUID,
            "index": 3,
            "fgpu": "0.5",
            "fraction": "0.25",
            "memory_bytes": 10 * GiB,
            "sms": 27,
            "sm_percent": 25,
        }
    ]
    assert allocation["fgpu"] == "0.5" and allocation["fgpu_per_gpu"] == "2.0"
    assert allocation["cpu"] == "1.5" and allocation["memory_bytes"] == 2 * GiB
    assert allocation["enforcement"] == ["device-pinning", "framework-hook"]


def test_env_states_the_slice_and_pins_the_device_over_user_env() -> None:
    env = env_of(build_container_spec(session(), NVIDIA).create_config())
    assert env["MY_VAR"] == "1"
    assert env["CUDA_VISIBLE_DEVICES"] == UUID  # the session's own "all" is overridden
    assert env["NVIDIA_VISIBLE_DEVICES"] == UUID
    assert env["GPUSLICE_GPU_FRACTION"] == "0.25"
    assert env["GPUSLICE_GPU_MEMORY_BYTES"] == str(10 * GiB)
    assert env["GPUSLICE_GPU_SMS"] == "27"
    assert env["GPUSLICE_GPU_SM_PERCENT"] == "25"
    assert env["GPUSLICE_FGPU"] == "0.5"
    assert env["GPUSLICE_SESSION_ID"] == "s-123"
    assert env["GPUSLICE_ALLOCATION_FILE"] == ALLOCATION_PATH
    assert env["GPUSLICE_ENDPOINT"] == "/run/gpuslice/agent.sock"
    assert env["PYTHONPATH"] == "/opt/gpuslice/hook:/opt/gpuslice/bin"
    assert env["PATH"].startswith("/opt/gpuslice/bin:/usr/local/sbin:")  # Docker's default


def test_nvidia_gets_device_requests_mock_gets_the_same_env_without() -> None:
    real = build_container_spec(session(), NVIDIA).create_config()
    assert real["HostConfig"]["DeviceRequests"] == [
        {"Driver": "nvidia", "DeviceIDs": [UUID], "Capabilities": [["gpu"]]}
    ]
    mock = build_container_spec(session(), MOCK).create_config()
    assert "DeviceRequests" not in mock["HostConfig"]
    differ = {k for k, v in env_of(real).items() if env_of(mock).get(k) != v}
    assert differ == {"GPUSLICE_NODE", "GPUSLICE_ACCELERATOR"}


def test_cpu_only_session_sees_no_device() -> None:
    env = env_of(build_container_spec(session(slices=()), NVIDIA).create_config())
    assert env["CUDA_VISIBLE_DEVICES"] == ""
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert env["GPUSLICE_GPU_COUNT"] == "0"
    assert "GPUSLICE_GPU_FRACTION" not in env


def test_whole_gpus_session_pins_every_device() -> None:
    slices = (
        gpu_slice("GPU-a", 0, 2000, 40 * GiB, 108, capacity=2000),
        gpu_slice("GPU-b", 1, 2000, 40 * GiB, 108, capacity=2000),
    )
    env = env_of(build_container_spec(session(slices=slices), NVIDIA).create_config())
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-a,GPU-b"
    assert env["GPUSLICE_GPU_FRACTION"] == "1"
    assert env["GPUSLICE_FGPU"] == "4.0"


def test_image_pythonpath_and_path_are_kept_behind_ours() -> None:
    config = build_container_spec(session(), MOCK).create_config(
        ["PYTHONPATH=/app:/lib", "PATH=/opt/conda/bin:/usr/bin", "A=1"]
    )
    assert env_of(config)["PYTHONPATH"] == "/opt/gpuslice/hook:/opt/gpuslice/bin:/app:/lib"
    assert env_of(config)["PATH"] == "/opt/gpuslice/bin:/opt/conda/bin:/usr/bin"


def test_batch_runs_its_command_interactive_keeps_running() -> None:
    batch = build_container_spec(session(type="batch", command=("python3", "-c", "1")), MOCK)
    assert batch.create_config()["Cmd"] == ["python3", "-c", "1"]
    with pytest.raises(SpecError, match="needs a command"):
        build_container_spec(session(type="batch"), MOCK)


def test_files_hold_allocation_hook_and_tools() -> None:
    tools = {f"/opt/gpuslice/bin/{name}" for name in (
        "gpuslice-smi", "gpuslice_smi.py", "gpuslice_smi_query.py", "gpuslice_smi_fields.py",
        "gpuslice_smi_xml.py", "gpuslice_endpoint.py", "gpuslice-save", "gpuslice_save.py",
        "gpuslice-run", "gpuslice_run.py", "gpuslice_var.py")}
    files = build_container_spec(session(), MOCK).files()
    assert set(files) == {
        ALLOCATION_PATH,
        "/opt/gpuslice/hook/gpuslice_hook.py",
        "/opt/gpuslice/hook/sitecustomize.py",
        *tools,
        "/opt/gpuslice/bin/nvidia-smi",  # a simulated GPU says so under the usual name
        "/opt/gpuslice/bin/gpuslice-mock-gpu",  # and takes a declared load
        "/opt/gpuslice/bin/gpuslice_mock_gpu.py",
    }
    real = build_container_spec(session(), NVIDIA).files()  # the real nvidia-smi stays
    assert "/opt/gpuslice/bin/nvidia-smi" not in real and tools <= set(real)
    assert "/opt/gpuslice/bin/gpuslice-mock-gpu" not in real


def test_the_allocation_names_the_nodes_device() -> None:
    options = replace(MOCK, devices={UUID: DeviceInfo("Mock A100", 40 * GiB)})
    [device] = build_container_spec(session(), options).allocation["devices"]
    assert (device["model"], device["device_memory_bytes"]) == ("Mock A100", 40 * GiB)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"session_id": "../etc"}, "container name"),
        ({"cpu": 0}, "positive"),
        ({"slices": (gpu_slice("a", 0, 500, 1, 1, capacity=2000),
                     gpu_slice("b", 1, 2000, 1, 1, capacity=2000))}, "whole"),
        ({"slices": (replace(gpu_slice("a", 0, 500, 1, 1), gpu=2500),)}, "out of range"),
    ],
)
def test_impossible_sessions_are_refused(changes: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        build_container_spec(session(**changes), NVIDIA)


def test_a_docker_socket_is_never_mounted() -> None:
    spec = build_container_spec(session(), NVIDIA)
    bad = replace(spec, mounts=(Mount("/var/run/docker.sock", "/var/run/docker.sock"),))
    with pytest.raises(SpecError, match="engine socket"):
        bad.create_config()


# ---------------------------------------------------------------- hard caps

SHIM = Path("/var/lib/gpuslice/agent/capshim/capshim-0.so")


def test_hami_preloads_libvgpu_with_memory_and_sm_limits() -> None:
    spec = apply_hami(
        build_container_spec(session(), NVIDIA),
        library=Path("/usr/local/vgpu/libvgpu.so"),
        cache_root=Path("/var/lib/gpuslice/vgpu"),
        shim=SHIM,
    )
    config = spec.create_config()
    env = env_of(config)
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "10240m"
    assert env["CUDA_DEVICE_SM_LIMIT"] == "25"
    assert env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] == "/tmp/vgpu/s-123.cache"
    assert config["HostConfig"]["Mounts"] == [
        {"Type": "bind", "Source": str(SHIM), "Target": "/usr/local/lib/gpuslice/capshim.so",
         "ReadOnly": True},
        {
            "Type": "bind",
            "Source": "/usr/local/vgpu/libvgpu.so",
            "Target": "/usr/local/vgpu/libvgpu.so",
            "ReadOnly": True,
        },
        {
            "Type": "bind",
            "Source": "/var/lib/gpuslice/vgpu/s-123",
            "Target": "/tmp/vgpu",
            "ReadOnly": False,
        },
    ]
    assert spec.files()["/etc/ld.so.preload"] == (
        b"/usr/local/lib/gpuslice/capshim.so\n/usr/local/vgpu/libvgpu.so\n"
    )
    assert spec.files()["/etc/gpuslice/hardcaps.env"] == (
        b"CUDA_DEVICE_MEMORY_LIMIT_0=10240m\nCUDA_DEVICE_SM_LIMIT=25\n"
        b"CUDA_DEVICE_MEMORY_SHARED_CACHE=/tmp/vgpu/s-123.cache\n"
    )
    assert [(d.path, d.uid, d.gid) for d in spec.host_dirs] == [
        ("/var/lib/gpuslice/vgpu/s-123", 1000, 1000)
    ]
    allocation = json.loads(spec.files()[ALLOCATION_PATH])
    assert allocation["enforcement"] == ["device-pinning", "framework-hook", "hami-core"]


def test_mps_sets_pinned_memory_and_thread_percentage() -> None:
    spec = apply_mps(build_container_spec(session(), NVIDIA), pipe_directory=Path("/tmp/mps"),
                     shm_directory=Path("/run/mps-shm"), shim=SHIM)
    config = spec.create_config()
    env = env_of(config)
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == "/tmp/mps"
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=10240M"
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    # No way into another session: its own IPC namespace, the pipes read-only, caps kept.
    assert "IpcMode" not in config["HostConfig"]
    mounts = config["HostConfig"]["Mounts"]
    assert {"Type": "bind", "Source": "/tmp/mps", "Target": "/tmp/mps", "ReadOnly": True} in (
        mounts)
    assert {"Type": "bind", "Source": "/run/mps-shm", "Target": "/dev/shm",
            "ReadOnly": False} in mounts
    assert spec.files()["/etc/ld.so.preload"] == b"/usr/local/lib/gpuslice/capshim.so\n"
    assert b"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25\n" in spec.files()["/etc/gpuslice/hardcaps.env"]
    assert json.loads(config["Labels"][LABEL_ALLOCATION])["enforcement"][-1] == "mps"


def test_hard_caps_leave_whole_gpu_and_cpu_sessions_alone() -> None:
    whole_slice = gpu_slice("G", 0, 2000, 40 * GiB, 108, capacity=2000)
    whole = build_container_spec(session(slices=(whole_slice,)), NVIDIA)
    cpu_only = build_container_spec(session(slices=()), NVIDIA)
    for spec in (whole, cpu_only):
        for mode in ("hami", "mps"):
            assert apply_hard_caps(spec, HardCapsSettings(mode=mode), SHIM) == spec


def test_hard_caps_follow_the_configured_mode() -> None:
    spec = build_container_spec(session(), NVIDIA)
    assert apply_hard_caps(spec, HardCapsSettings(), SHIM) == spec
    hami = apply_hard_caps(spec, HardCapsSettings(mode="hami"), SHIM)
    assert "CUDA_DEVICE_MEMORY_LIMIT_0" in hami.env
    mps = apply_hard_caps(spec, HardCapsSettings(mode="mps"), SHIM)
    assert mps.env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={10 * GiB // MiB}M"


def test_hard_caps_read_the_typed_slices_not_the_allocation_text() -> None:
    # 1 fGPU of 3: the slice's own bytes and SM share, whatever the allocation label says.
    third = gpu_slice(UUID, 0, 1000, 13 * GiB + 5 * MiB, 36, capacity=3000)
    spec = build_container_spec(session(slices=(third,), device_capacity=3000), NVIDIA)
    spec = replace(spec, allocation={**spec.allocation, "devices": []})
    hami = apply_hard_caps(spec, HardCapsSettings(mode="hami"), SHIM)
    assert hami.env["CUDA_DEVICE_MEMORY_LIMIT_0"] == f"{13 * 1024 + 5}m"
    assert hami.env["CUDA_DEVICE_SM_LIMIT"] == "33"
    mps = apply_hard_caps(spec, HardCapsSettings(mode="mps"), SHIM)
    assert mps.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "33"


def test_a_whole_device_is_whole_by_capacity_not_by_fraction_text() -> None:
    three_of_three = gpu_slice(UUID, 0, 3000, 40 * GiB, 108, capacity=3000)
    spec = build_container_spec(session(slices=(three_of_three,), device_capacity=3000), NVIDIA)
    assert spec.slices == (three_of_three,) and spec.device_capacity == 3000
    assert apply_hard_caps(spec, HardCapsSettings(mode="hami"), SHIM) == spec
