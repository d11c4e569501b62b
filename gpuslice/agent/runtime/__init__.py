"""Session containers on the node's Docker Engine: specs (pure), hard caps, the runtime."""

from gpuslice.agent.runtime.adapter import session_spec
from gpuslice.agent.runtime.docker import DockerRuntime
from gpuslice.agent.runtime.hardcaps import apply_hami, apply_hard_caps, apply_mps
from gpuslice.agent.runtime.models import (
    ContainerRuntimeError,
    ContainerState,
    ContainerStats,
    DockerUnavailable,
    ExecResult,
    ImageNotFound,
    RuntimeEvent,
    SessionNotFound,
)
from gpuslice.agent.runtime.spec import (
    ALLOCATION_PATH,
    LABEL_ALLOCATION,
    LABEL_NODE,
    LABEL_OWNER,
    LABEL_SESSION,
    LABEL_TYPE,
    ContainerSpec,
    GpuSlice,
    SessionSpec,
    SpecError,
    SpecOptions,
    build_container_spec,
    container_name,
)

__all__ = [
    "ALLOCATION_PATH",
    "LABEL_ALLOCATION",
    "LABEL_NODE",
    "LABEL_OWNER",
    "LABEL_SESSION",
    "LABEL_TYPE",
    "ContainerRuntimeError",
    "ContainerSpec",
    "ContainerState",
    "ContainerStats",
    "DockerRuntime",
    "DockerUnavailable",
    "ExecResult",
    "GpuSlice",
    "ImageNotFound",
    "RuntimeEvent",
    "SessionNotFound",
    "SessionSpec",
    "SpecError",
    "SpecOptions",
    "apply_hami",
    "apply_hard_caps",
    "apply_mps",
    "build_container_spec",
    "container_name",
    "session_spec",
]
