"""The node agent's settings: a TOML file plus ``GPUSLICE_AGENT_*`` environment variables.

Built once at start with :func:`load_agent_settings`; nothing reads settings at import time.
Environment variables win over the file; nested fields use ``__``
(``GPUSLICE_AGENT_HARD_CAPS__MODE=hami``).

Example ``agent.toml``::

    node_name = "lab-01"
    manager_url = "https://gpuslice.example.org"
    accelerator = "mock"

    [[gpu]]
    model = "Mock A100"
    memory = "8GiB"
    sms = 108
    count = 2
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, SecretStr, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from gpuslice.common.resources import ResourceError, parse_cpu, parse_fgpu_per_gpu, parse_mem

ENV_PREFIX = "GPUSLICE_AGENT_"
DEFAULT_DATA_DIR = Path("/var/lib/gpuslice/agent")


def _mem(value: object) -> int:
    if value in (0, "0"):
        return 0
    try:
        return parse_mem(value, field="memory")
    except ResourceError as exc:
        raise ValueError(exc.message) from None


class MockGpu(BaseModel):
    """One ``[[gpu]]`` entry: ``count`` identical simulated devices."""

    model: str = Field(default="Mock GPU", min_length=1, max_length=128, description="Model name.")
    memory: int = Field(default=8 * 1024**3, gt=0, description="Device memory, e.g. 8GiB.")
    sms: int = Field(default=108, ge=1, le=100_000, description="Streaming multiprocessors.")
    count: int = Field(default=1, ge=1, le=64, description="How many devices like this one.")

    @field_validator("memory", mode="before")
    @classmethod
    def _parse_memory(cls, value: object) -> int:
        return _mem(value)


class HardCapsSettings(BaseModel):
    """Driver-level caps the node admin installed (strongest enforcement layer)."""

    mode: Literal["none", "hami", "mps"] = Field(
        default="none", description="none, hami (HAMi-core libvgpu.so) or mps (NVIDIA MPS)."
    )
    hami_library: Path = Field(
        default=Path("/usr/local/vgpu/libvgpu.so"),
        description="HAMi-core's libvgpu.so on the node; mounted read-only into sessions.",
    )
    hami_cache_root: Path = Field(
        default=Path("/var/lib/gpuslice/vgpu"),
        description="Node directory holding one shared-cache directory per session.",
    )
    mps_pipe_directory: Path = Field(
        default=Path("/tmp/nvidia-mps"),
        description="The MPS control daemon's pipe directory (CUDA_MPS_PIPE_DIRECTORY).",
    )


class AgentSettings(BaseSettings):
    """Everything the node agent needs to know about its node."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        extra="forbid",
    )

    node_name: str = Field(
        default_factory=socket.gethostname,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$",
        description="This node's name in the cluster (default: the host name).",
    )
    manager_url: str = Field(
        default="http://127.0.0.1:8080", description="Where the manager's API listens."
    )
    join_token: SecretStr | None = Field(
        default=None, description="Token from the manager to join the cluster (first start)."
    )
    data_dir: Path = Field(default=DEFAULT_DATA_DIR, description="The agent's files on this node.")
    docker_url: str | None = Field(
        default=None, description="Docker Engine address; default DOCKER_HOST or the local socket."
    )
    accelerator: Literal["auto", "nvidia", "mock"] = Field(
        default="auto", description="auto: nvidia when NVML finds GPUs, else mock."
    )
    gpu: list[MockGpu] = Field(
        default_factory=list,
        max_length=64,
        description="Simulated GPUs for the mock accelerator (``[[gpu]]`` tables).",
    )
    fgpu_per_gpu: int | None = Field(
        default=None,
        description="This node's fGPU per GPU (config: 2 or 0.5), overriding the cluster's; "
        "held in milli-fGPU.",
    )
    hard_caps: HardCapsSettings = Field(default_factory=HardCapsSettings)
    reserved_cpu: int = Field(
        # already in milli-cores: the default is not run through the cores parser below
        default=500, ge=0, validate_default=False,
        description="CPU kept for the host, in milli-cores (500: half a core; config: cores, "
        "e.g. 0.5).",
    )
    reserved_mem: int = Field(
        default=1024**3, ge=0, description="Memory kept for the host, bytes (config: size, 1g)."
    )
    watchdog_tolerance: int = Field(
        default=0,
        ge=0,
        description="GPU memory a session may hold beyond its slice before the watchdog stops "
        "it (config: a size, e.g. 256m), e.g. for CUDA context overhead outside framework caps.",
    )
    pids_limit: int = Field(default=4096, ge=64, le=4_194_304, description="Per-session pids.")
    stop_grace_s: int = Field(
        default=10, ge=0, le=3600, description="Seconds between SIGTERM and SIGKILL on stop."
    )
    image_wait_s: int = Field(
        default=300, ge=0, le=86_400,
        description="Seconds a session waits (PREPARING, saying so) for an image missing from "
        "this node, e.g. one deleted and being rebuilt, before it fails.",
    )
    session_user: str = Field(
        default="1000:1000",
        pattern=r"^[1-9][0-9]*:[1-9][0-9]*$",
        description="uid:gid sessions run as; never root.",
    )

    @field_validator("fgpu_per_gpu", mode="before")
    @classmethod
    def _parse_fgpu_per_gpu(cls, value: object) -> int | None:
        if value is None or value == "":
            return None
        try:
            return parse_fgpu_per_gpu(value)
        except ResourceError as exc:
            raise ValueError(exc.message) from None

    @field_validator("reserved_cpu", mode="before")
    @classmethod
    def _parse_reserved_cpu(cls, value: object) -> int:
        if value in (0, "0"):
            return 0
        try:
            return parse_cpu(value, field="reserved_cpu")
        except ResourceError as exc:
            raise ValueError(exc.message) from None

    @field_validator("reserved_mem", "watchdog_tolerance", mode="before")
    @classmethod
    def _parse_reserved_mem(cls, value: object) -> int:
        return _mem(value)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Precedence: explicit arguments, then the environment, then the TOML file.
        return init_settings, env_settings, TomlConfigSettingsSource(settings_cls)


def load_agent_settings(path: Path | None = None, **overrides: Any) -> AgentSettings:
    """Read the TOML file at ``path`` (if given) and the environment; ``overrides`` win."""
    if path is None:
        return AgentSettings(**overrides)
    if not path.is_file():
        raise FileNotFoundError(f"agent config {path} does not exist")

    class _FromFile(AgentSettings):
        model_config = SettingsConfigDict(toml_file=path)

    return _FromFile(**overrides)
