"""The framework slice hook, run in a fresh interpreter as in a session container.

Stand-in ``torch`` / ``tensorflow`` / ``jax`` packages record what the hook does to them;
each test runs a small program with the hook directory first on ``PYTHONPATH``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from decimal import Decimal
from pathlib import Path

import pytest

from gpuslice.common.resources import GiB
from gpuslice.hook import HOOK_DIR, hook_files

FAKE_TORCH = """
import os
calls = []
class _Cuda:
    def __init__(self):
        self.queued = []
    def is_available(self):
        return os.environ.get("FAKE_CUDA", "1") == "1"
    def device_count(self):
        return int(os.environ.get("FAKE_DEVICES", "1"))
    def set_per_process_memory_fraction(self, fraction, device):
        if os.environ.get("FAKE_FAIL"):
            raise RuntimeError("driver says no")
        calls.append(["set_per_process_memory_fraction", fraction, device])
    def init(self):  # what torch.cuda._lazy_init does with queued calls
        for call in self.queued:
            call()
cuda = _Cuda()
if os.environ.get("FAKE_LAZY", "1") == "1":
    cuda._lazy_call = cuda.queued.append
"""

FAKE_TF = """
import os
calls = []
class _Device:
    def __init__(self, name):
        self.name = name
class _Experimental:
    def set_memory_growth(self, device, enable):
        if device.name in configured:
            raise RuntimeError("Cannot set memory growth when virtual devices configured")
        calls.append(["set_memory_growth", device.name, enable])
class _Config:
    experimental = _Experimental()
    def list_physical_devices(self, kind):
        count = int(os.environ.get("FAKE_DEVICES", "1"))
        if kind != "GPU":
            return []
        return [_Device(f"/physical_device:GPU:{i}") for i in range(count)]
    def LogicalDeviceConfiguration(self, memory_limit=None):
        return {"memory_limit": memory_limit}
    def set_logical_device_configuration(self, device, logical):
        configured.add(device.name)
        calls.append(["set_logical_device_configuration", device.name, logical])
configured = set()
config = _Config()
"""

FAKE_JAX = """
import os
names = ("XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_PREALLOCATE")
seen = {k: os.environ.get(k) for k in names}
"""

SLICE_ENV = {
    "GPUSLICE_GPU_FRACTION": "0.25",
    "GPUSLICE_GPU_MEMORY_BYTES": str(10 * GiB),
}


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A hook directory as in a container, plus a directory of stand-in frameworks."""
    hook = tmp_path / "hook"
    hook.mkdir()
    for name, content in hook_files().items():
        (hook / name).write_bytes(content)
    fakes = tmp_path / "fakes"
    for name, source in (("torch", FAKE_TORCH), ("tensorflow", FAKE_TF), ("jax", FAKE_JAX)):
        (fakes / name).mkdir(parents=True)
        (fakes / name / "__init__.py").write_text(source)
    return tmp_path


def run(site: Path, program: str, **env: str) -> subprocess.CompletedProcess[str]:
    paths = [
        site / "hook",
        site / "fakes",
        *(Path(p) for p in env.pop("EXTRA_PATH", "").split(":") if p),
    ]
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUSLICE_", "XLA_"))}
    full_env.update(PYTHONPATH=":".join(map(str, paths)), **env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(program)],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def last_json(result: subprocess.CompletedProcess[str]) -> object:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


TORCH_PROGRAM = """
    import json, torch
    at_import = list(torch.calls)
    torch.cuda.init()
    print(json.dumps([at_import, torch.calls]))
"""


def test_torch_fraction_is_applied_when_cuda_starts_not_at_import(site: Path) -> None:
    at_import, after_init = last_json(run(site, TORCH_PROGRAM, **SLICE_ENV, FAKE_DEVICES="2"))
    assert at_import == []  # CUDA untouched at import: fork-based multiprocessing keeps working
    assert after_init == [
        ["set_per_process_memory_fraction", 0.25, 0],
        ["set_per_process_memory_fraction", 0.25, 1],
    ]


def test_torch_without_lazy_queue_is_capped_at_import(site: Path) -> None:
    at_import, _ = last_json(run(site, TORCH_PROGRAM, **SLICE_ENV, FAKE_LAZY="0"))
    assert at_import == [["set_per_process_memory_fraction", 0.25, 0]]


def test_torch_without_gpu_is_left_alone(site: Path) -> None:
    result = run(site, TORCH_PROGRAM, **SLICE_ENV, FAKE_CUDA="0")
    assert last_json(result) == [[], []]
    assert result.stderr == ""


def test_torch_cap_failure_warns_but_never_breaks_the_program(site: Path) -> None:
    program = TORCH_PROGRAM + "    print('still running')\n"
    result = run(site, program, **SLICE_ENV, FAKE_FAIL="1")
    assert result.returncode == 0
    assert "still running" in result.stdout
    assert "torch: memory cap not applied" in result.stderr


def test_tensorflow_gets_a_logical_device_limited_to_the_slice(site: Path) -> None:
    program = """
        import json, tensorflow as tf
        gpu = tf.config.list_physical_devices("GPU")[0]
        tf.config.experimental.set_memory_growth(gpu, True)  # common in user code
        print(json.dumps(tf.calls))
    """
    calls = last_json(run(site, program, **SLICE_ENV, FAKE_DEVICES="2"))
    assert calls == [
        ["set_logical_device_configuration", "/physical_device:GPU:0", [{"memory_limit": 10240}]],
        ["set_logical_device_configuration", "/physical_device:GPU:1", [{"memory_limit": 10240}]],
    ]


def test_tensorflow_without_gpu_is_left_alone(site: Path) -> None:
    program = "import json, tensorflow as tf; print(json.dumps(tf.calls))"
    assert last_json(run(site, program, **SLICE_ENV, FAKE_DEVICES="0")) == []


def test_jax_sees_the_fraction_and_no_preallocation_before_import(site: Path) -> None:
    program = "import json, jax; print(json.dumps(jax.seen))"
    assert last_json(run(site, program, **SLICE_ENV)) == {
        "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.25",
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
    }


def test_jax_fraction_is_lowered_never_raised(site: Path) -> None:
    program = "import json, jax; print(json.dumps(jax.seen))"
    lower = last_json(run(site, program, **SLICE_ENV, XLA_PYTHON_CLIENT_MEM_FRACTION="0.1"))
    assert lower["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.1"
    higher = last_json(run(site, program, **SLICE_ENV, XLA_PYTHON_CLIENT_MEM_FRACTION="0.9"))
    assert higher["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.25"


def test_absent_framework_fails_exactly_as_without_the_hook(site: Path) -> None:
    result = run(site, "import tensorflow_nonexistent", **SLICE_ENV)
    assert result.returncode == 1
    assert "ModuleNotFoundError: No module named 'tensorflow_nonexistent'" in result.stderr
    (site / "fakes" / "torch" / "__init__.py").unlink()
    (site / "fakes" / "torch").rmdir()
    result = run(site, "import torch", **SLICE_ENV)
    assert "ModuleNotFoundError: No module named 'torch'" in result.stderr
    assert "gpuslice" not in result.stderr


def test_a_framework_import_error_propagates_unchanged(site: Path) -> None:
    (site / "fakes" / "torch" / "__init__.py").write_text("raise ImportError('libcudart missing')")
    result = run(site, "import torch", **SLICE_ENV)
    assert result.stderr.strip().splitlines()[-1] == "ImportError: libcudart missing"
    assert "gpuslice: warning" not in result.stderr


@pytest.mark.parametrize(
    "env",
    [
        {},  # a CPU-only session
        {**SLICE_ENV, "GPUSLICE_GPU_FRACTION": "1"},  # whole GPUs: nothing to cap
        {**SLICE_ENV, "GPUSLICE_HOOK": "off"},
        {**SLICE_ENV, "GPUSLICE_GPU_FRACTION": "garbage"},
    ],
)
def test_nothing_is_capped_without_a_fractional_slice(site: Path, env: dict[str, str]) -> None:
    result = run(site, TORCH_PROGRAM, **env)
    assert last_json(result) == [[], []]
    assert result.stderr == ""


def test_the_module_keeps_its_real_loader(site: Path) -> None:
    program = """
        import json, torch
        print(json.dumps([type(torch.__loader__).__name__, type(torch.__spec__.loader).__name__]))
    """
    assert last_json(run(site, program, **SLICE_ENV)) == ["SourceFileLoader", "SourceFileLoader"]


def test_the_images_own_sitecustomize_still_runs(site: Path, tmp_path: Path) -> None:
    other = tmp_path / "image-site"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import builtins; builtins.IMAGE_SITE = True\n")
    program = "import json, builtins; print(json.dumps(getattr(builtins, 'IMAGE_SITE', False)))"
    assert last_json(run(site, program, **SLICE_ENV, EXTRA_PATH=str(other))) is True


def test_slice_from_env_parses_exactly() -> None:
    sys.path.insert(0, str(HOOK_DIR))
    try:
        import gpuslice_hook
    finally:
        sys.path.pop(0)
    the_slice = gpuslice_hook.slice_from_env(SLICE_ENV)
    assert the_slice is not None
    assert the_slice.fraction == Decimal("0.25")
    assert the_slice.memory_mib == 10240
    assert gpuslice_hook.slice_from_env({"GPUSLICE_GPU_FRACTION": "0.5"}) is None  # no memory
