"""Tests on a real NVIDIA GPU: they run only where NVML finds one, and skip with the reason
everywhere else (CI machines have none). No Docker: GPU test machines may have no engine, so
processes run on the host, where NVML's PIDs are the test's own.

A child process (``gpu_child``) holds GPU memory and keeps the GPU busy with PyTorch; the
framework-cap tests run PyTorch and JAX with the hook as a session container would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from gpuslice.hook import HOOK_DIR


@dataclass(frozen=True)
class Gpu:
    """NVML's device 0, as the agent sees it."""

    nvml: Any
    uuid: str
    name: str
    memory: int  # bytes


def _nvml() -> tuple[Any | None, str]:
    try:
        import pynvml
    except ImportError as exc:
        return None, f"nvidia-ml-py is not installed ({exc})"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # library missing, driver not loaded
        return None, f"NVML did not initialize: {exc}"
    if pynvml.nvmlDeviceGetCount() == 0:
        pynvml.nvmlShutdown()
        return None, "NVML found no GPU"
    return pynvml, ""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = os.path.dirname(__file__)
    mine = [item for item in items if str(item.fspath).startswith(here)]
    if not mine:
        return
    nvml, why_not = _nvml()
    if nvml is None:
        skip = pytest.mark.skip(reason=f"needs an NVIDIA GPU: {why_not}")
        for item in mine:
            item.add_marker(skip)
    else:
        nvml.nvmlShutdown()


@pytest.fixture(scope="session")
def gpu() -> Iterator[Gpu]:
    nvml, why_not = _nvml()
    if nvml is None:
        pytest.skip(f"needs an NVIDIA GPU: {why_not}")
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    uuid = nvml.nvmlDeviceGetUUID(handle)
    name = nvml.nvmlDeviceGetName(handle)
    yield Gpu(nvml, uuid if isinstance(uuid, str) else uuid.decode(),
              name if isinstance(name, str) else name.decode(),
              int(nvml.nvmlDeviceGetMemoryInfo(handle).total))
    nvml.nvmlShutdown()


def child_env(gpu: Gpu, *, hook_fraction: str | None = None) -> dict[str, str]:
    """The environment of a process pinned to ``gpu`` by UUID, as the agent pins sessions;
    with ``hook_fraction``, also the slice and the framework hook, as in a session."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUSLICE_", "XLA_"))}
    env.update(CUDA_DEVICE_ORDER="PCI_BUS_ID", CUDA_VISIBLE_DEVICES=gpu.uuid,
               NVIDIA_VISIBLE_DEVICES=gpu.uuid)
    if hook_fraction is not None:
        env.update(GPUSLICE_GPU_FRACTION=hook_fraction,
                   GPUSLICE_GPU_MEMORY_BYTES=str(int(gpu.memory * float(hook_fraction))),
                   PYTHONPATH=os.pathsep.join([str(HOOK_DIR), env.get("PYTHONPATH", "")]))
    return env


def run_python(program: str, env: dict[str, str], timeout: float = 300) -> Any:
    """Run ``program`` in a fresh interpreter; the JSON of its last output line."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(program)], env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"exit {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return json.loads(done.stdout.strip().splitlines()[-1])


BUSY = """
    import sys, time, torch
    held = torch.empty({size}, dtype=torch.uint8, device="cuda")  # GPU memory, held
    a = torch.randn(4096, 4096, device="cuda")
    print("ready", flush=True)
    end = time.monotonic() + {seconds}
    while time.monotonic() < end:  # keep the SMs busy until stopped
        a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize()
"""


@pytest.fixture
def gpu_child(gpu: Gpu) -> Iterator[subprocess.Popen[str]]:
    """A PyTorch process on ``gpu`` holding 1 GiB and computing, until the test ends."""
    pytest.importorskip("torch", reason="the busy GPU process is written with PyTorch")
    program = textwrap.dedent(BUSY.format(size=1024**3, seconds=300))
    child = subprocess.Popen([sys.executable, "-u", "-c", program], env=child_env(gpu),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        if line.strip() != "ready":
            child.kill()
            raise AssertionError(f"the GPU process did not start: {child.stderr.read()}")
        time.sleep(2)  # a few utilization samples for NVML
        yield child
    finally:
        child.kill()
        child.wait(30)
