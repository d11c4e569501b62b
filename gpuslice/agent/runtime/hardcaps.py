"""Driver-level GPU caps a node admin can enable: HAMi-core or NVIDIA MPS (pure functions).

Each takes a :class:`ContainerSpec` and returns a new one with the env, mounts and files the
cap needs, and the layer recorded in ``allocation.json``. They change nothing for sessions
without a fractional slice (no GPU, or whole GPUs: there is nothing to cap).

Both read their limits from environment variables, which belong to the session's user: the
**cap shim** (``agent/capshim``) is preloaded into every process by ``/etc/ld.so.preload``
(root-owned, read-only, so the user cannot drop it) and keeps the variables listed in the
read-only ``/etc/gpuslice/hardcaps.env`` at the node's values, whatever the user does to them.

- HAMi-core: ``libvgpu.so`` (preloaded after the shim) intercepts the CUDA driver API and reads
  ``CUDA_DEVICE_MEMORY_LIMIT_<i>`` (``<MiB>m`` per visible device), ``CUDA_DEVICE_SM_LIMIT``
  (percent) and a per-session shared cache file, kept in a node directory of that session only.
- MPS: clients of the node's MPS control daemon get ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``
  (``<i>=<MiB>M`` per visible device) and ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``. They reach the
  daemon through its pipe directory, mounted **read-only** (a session cannot plant or replace a
  socket there), and its shared-memory directory at ``/dev/shm``; sessions keep their own IPC
  namespace (never the host's). MPS serves every client of a GPU from one server: sessions on
  an MPS GPU share that shared-memory directory, so MPS suits sessions of one team; the agent
  README says so.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from gpuslice.agent.capshim import CAPS_PATH, caps_file
from gpuslice.agent.capshim import CONTAINER_PATH as SHIM_PATH
from gpuslice.agent.runtime.spec import (
    ContainerSpec,
    GpuSlice,
    HostDir,
    Mount,
    with_enforcement,
)
from gpuslice.agent.settings import HardCapsSettings
from gpuslice.common.resources import MiB

HAMI_LIBRARY_TARGET = "/usr/local/vgpu/libvgpu.so"
HAMI_CACHE_TARGET = "/tmp/vgpu"
LD_SO_PRELOAD = "/etc/ld.so.preload"
MPS_SHM_TARGET = "/dev/shm"


def apply_hard_caps(spec: ContainerSpec, caps: HardCapsSettings, shim: Path) -> ContainerSpec:
    """Apply the cap the admin configured (``mode``), if any; ``shim``: the cap shim library
    on the node (``capshim.build``)."""
    if caps.mode == "hami":
        return apply_hami(
            spec, library=caps.hami_library, cache_root=caps.hami_cache_root, shim=shim
        )
    if caps.mode == "mps":
        return apply_mps(spec, pipe_directory=caps.mps_pipe_directory,
                         shm_directory=caps.mps_shm_directory, shim=shim)
    return spec


def apply_hami(
    spec: ContainerSpec, *, library: Path, cache_root: Path, shim: Path
) -> ContainerSpec:
    """HAMi-core: preload ``libvgpu.so`` with per-device memory and SM limits."""
    slices = _fractional_slices(spec)
    if not slices:
        return spec
    uid, gid = spec.uid_gid
    cache_dir = str(cache_root / spec.session_id)
    caps = {f"CUDA_DEVICE_MEMORY_LIMIT_{i}": f"{piece.mem // MiB}m"
            for i, piece in enumerate(slices)}
    caps["CUDA_DEVICE_SM_LIMIT"] = str(slices[0].sm_percent)
    caps["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = f"{HAMI_CACHE_TARGET}/{spec.session_id}.cache"
    spec = _capped(spec, caps, shim, preload=[HAMI_LIBRARY_TARGET], mounts=(
        Mount(source=str(library), target=HAMI_LIBRARY_TARGET, read_only=True),
        Mount(source=cache_dir, target=HAMI_CACHE_TARGET, read_only=False),
    ))
    spec = replace(spec, host_dirs=(*spec.host_dirs,
                                    HostDir(path=cache_dir, uid=uid, gid=gid, mode=0o700)))
    return with_enforcement(spec, "hami-core", library=str(library))


def apply_mps(
    spec: ContainerSpec, *, pipe_directory: Path, shm_directory: Path, shim: Path
) -> ContainerSpec:
    """NVIDIA MPS: pinned device memory and active thread percentage per client."""
    slices = _fractional_slices(spec)
    if not slices:
        return spec
    caps = {
        "CUDA_MPS_PIPE_DIRECTORY": str(pipe_directory),
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": ",".join(
            f"{i}={piece.mem // MiB}M" for i, piece in enumerate(slices)
        ),
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(slices[0].sm_percent),
    }
    spec = _capped(spec, caps, shim, preload=[], mounts=(
        Mount(source=str(pipe_directory), target=str(pipe_directory), read_only=True),
        Mount(source=str(shm_directory), target=MPS_SHM_TARGET, read_only=False),
    ))
    return with_enforcement(spec, "mps", pipe_directory=str(pipe_directory))


def _capped(
    spec: ContainerSpec, caps: dict[str, str], shim: Path, *, preload: list[str],
    mounts: tuple[Mount, ...],
) -> ContainerSpec:
    """``spec`` with the cap variables set, kept by the shim, and ``preload`` after it."""
    return replace(
        spec,
        env={**spec.env, **caps},
        mounts=(*spec.mounts, Mount(source=str(shim), target=SHIM_PATH, read_only=True),
                *mounts),
        extra_files={
            **spec.extra_files,
            LD_SO_PRELOAD: "".join(f"{lib}\n" for lib in (SHIM_PATH, *preload)).encode(),
            CAPS_PATH: caps_file(caps, list(caps)),
        },
    )


def _fractional_slices(spec: ContainerSpec) -> tuple[GpuSlice, ...]:
    """The slices to cap, in visible-device order: all of them when one is part of its device,
    none for whole devices or no GPU (a session on several devices holds each whole)."""
    if any(piece.gpu < spec.device_capacity for piece in spec.slices):
        return spec.slices
    return ()
