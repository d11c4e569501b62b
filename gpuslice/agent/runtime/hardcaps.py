"""Driver-level GPU caps a node admin can enable: HAMi-core or NVIDIA MPS (pure functions).

Each takes a :class:`ContainerSpec` and returns a new one with the env, mounts and files the
cap needs, and the layer recorded in ``allocation.json``. They change nothing for sessions
without a fractional slice (no GPU, or whole GPUs: there is nothing to cap).

- HAMi-core: ``libvgpu.so`` intercepts the CUDA driver API inside the container. It is loaded
  by ``/etc/ld.so.preload`` (root-owned, so the session user cannot drop it), and reads
  ``CUDA_DEVICE_MEMORY_LIMIT_<i>`` (``<MiB>m`` per visible device), ``CUDA_DEVICE_SM_LIMIT``
  (percent) and a per-session shared cache file, kept in a node directory per session.
- MPS: clients of the node's MPS control daemon get ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``
  (``<i>=<MiB>M`` per visible device) and ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``. They reach
  the daemon through its pipe directory and, as MPS requires, the host IPC namespace.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from gpuslice.agent.config import HardCapsSettings
from gpuslice.agent.runtime.spec import (
    ContainerSpec,
    GpuSlice,
    HostDir,
    Mount,
    with_enforcement,
)
from gpuslice.common.resources import MiB

HAMI_LIBRARY_TARGET = "/usr/local/vgpu/libvgpu.so"
HAMI_CACHE_TARGET = "/tmp/vgpu"
LD_SO_PRELOAD = "/etc/ld.so.preload"


def apply_hard_caps(spec: ContainerSpec, caps: HardCapsSettings) -> ContainerSpec:
    """Apply the cap the admin configured (``mode``), if any."""
    if caps.mode == "hami":
        return apply_hami(spec, library=caps.hami_library, cache_root=caps.hami_cache_root)
    if caps.mode == "mps":
        return apply_mps(spec, pipe_directory=caps.mps_pipe_directory)
    return spec


def apply_hami(spec: ContainerSpec, *, library: Path, cache_root: Path) -> ContainerSpec:
    """HAMi-core: preload ``libvgpu.so`` with per-device memory and SM limits."""
    slices = _fractional_slices(spec)
    if not slices:
        return spec
    uid, gid = spec.uid_gid
    cache_dir = str(cache_root / spec.session_id)
    env = dict(spec.env)
    for i, piece in enumerate(slices):
        env[f"CUDA_DEVICE_MEMORY_LIMIT_{i}"] = f"{piece.mem // MiB}m"
    env["CUDA_DEVICE_SM_LIMIT"] = str(slices[0].sm_percent)
    env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = f"{HAMI_CACHE_TARGET}/{spec.session_id}.cache"
    spec = replace(
        spec,
        env=env,
        mounts=(
            *spec.mounts,
            Mount(source=str(library), target=HAMI_LIBRARY_TARGET, read_only=True),
            Mount(source=cache_dir, target=HAMI_CACHE_TARGET, read_only=False),
        ),
        host_dirs=(*spec.host_dirs, HostDir(path=cache_dir, uid=uid, gid=gid, mode=0o700)),
        extra_files={**spec.extra_files, LD_SO_PRELOAD: f"{HAMI_LIBRARY_TARGET}\n".encode()},
    )
    return with_enforcement(spec, "hami-core", library=str(library))


def apply_mps(spec: ContainerSpec, *, pipe_directory: Path) -> ContainerSpec:
    """NVIDIA MPS: pinned device memory and active thread percentage per client."""
    slices = _fractional_slices(spec)
    if not slices:
        return spec
    env = dict(spec.env)
    env["CUDA_MPS_PIPE_DIRECTORY"] = str(pipe_directory)
    env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = ",".join(
        f"{i}={piece.mem // MiB}M" for i, piece in enumerate(slices)
    )
    env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(slices[0].sm_percent)
    spec = replace(
        spec,
        env=env,
        mounts=(
            *spec.mounts,
            Mount(source=str(pipe_directory), target=str(pipe_directory), read_only=False),
        ),
        ipc_mode="host",  # MPS clients share memory with the control daemon
    )
    return with_enforcement(spec, "mps", pipe_directory=str(pipe_directory))


def _fractional_slices(spec: ContainerSpec) -> tuple[GpuSlice, ...]:
    """The slices to cap, in visible-device order: all of them when one is part of its device,
    none for whole devices or no GPU (a session on several devices holds each whole)."""
    if any(piece.gpu < spec.device_capacity for piece in spec.slices):
        return spec.slices
    return ()
