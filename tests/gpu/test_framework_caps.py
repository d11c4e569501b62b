"""The framework hook on a real GPU: with a quarter slice, PyTorch and JAX may allocate within
it and fail past it, with no change to the program; without the hook the same allocation
succeeds (so the cap is the hook's doing)."""

from __future__ import annotations

import pytest

from .conftest import Gpu, child_env, run_python

TORCH = """
    import json, torch
    total = torch.cuda.get_device_properties(0).total_memory
    small = torch.empty(int(total * 0.10), dtype=torch.uint8, device="cuda")
    try:
        large = torch.empty(int(total * 0.40), dtype=torch.uint8, device="cuda")
        refused = False
    except torch.cuda.OutOfMemoryError:
        refused = True
    print(json.dumps({"refused": refused, "total": total}))
"""

JAX = """
    import json, os
    import jax, jax.numpy as jnp
    device = jax.devices("gpu")[0]
    stats = device.memory_stats() or {}
    total = int(os.environ["DEVICE_BYTES"])
    small = jnp.zeros(int(total * 0.10) // 4, dtype=jnp.float32).block_until_ready()
    try:
        large = jnp.zeros(int(total * 0.40) // 4, dtype=jnp.float32).block_until_ready()
        refused = False
    except Exception as exc:  # XlaRuntimeError: RESOURCE_EXHAUSTED
        refused = "RESOURCE_EXHAUSTED" in str(exc) or "out of memory" in str(exc).lower()
    print(json.dumps({"refused": refused, "limit": stats.get("bytes_limit"),
                      "fraction": os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION")}))
"""


def _free(gpu: Gpu) -> float:
    handle = gpu.nvml.nvmlDeviceGetHandleByIndex(0)
    info = gpu.nvml.nvmlDeviceGetMemoryInfo(handle)
    return int(info.free) / int(info.total)


def test_pytorch_past_its_slice_fails(gpu: Gpu) -> None:
    pytest.importorskip("torch")
    if _free(gpu) < 0.5:
        pytest.skip("the GPU has less than half its memory free (shared?)")
    capped = run_python(TORCH, child_env(gpu, hook_fraction="0.25"))
    assert capped["refused"] is True
    free = run_python(TORCH, child_env(gpu))  # the same program without the hook
    assert free["refused"] is False


def test_jax_past_its_slice_fails(gpu: Gpu) -> None:
    pytest.importorskip("jax")
    if _free(gpu) < 0.5:
        pytest.skip("the GPU has less than half its memory free (shared?)")
    env = child_env(gpu, hook_fraction="0.25") | {"DEVICE_BYTES": str(gpu.memory)}
    capped = run_python(JAX, env)
    assert capped["fraction"] == "0.25" and capped["refused"] is True
    if capped["limit"] is not None:
        assert capped["limit"] <= gpu.memory * 0.25 + 64 * 1024**2
    free = run_python(JAX, child_env(gpu) | {"DEVICE_BYTES": str(gpu.memory),
                                             "XLA_PYTHON_CLIENT_PREALLOCATE": "false"})
    assert free["refused"] is False
