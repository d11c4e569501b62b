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

import ipaddress
import re
import socket
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import SettingsConfigDict

from gpuslice.common.logs import LogSettings
from gpuslice.common.resources import ResourceError, parse_cpu, parse_fgpu_per_gpu, parse_mem
from gpuslice.common.settings_files import FileSettings, Section

ENV_PREFIX = "GPUSLICE_AGENT_"
_URL = re.compile(r"^https?://[^\s/,]+(/[^\s,]*)?$")
DEFAULT_DATA_DIR = Path("/var/lib/gpuslice/agent")


def _mem(value: object) -> int:
    if value in (0, "0"):
        return 0
    try:
        return parse_mem(value, field="memory")
    except ResourceError as exc:
        raise ValueError(exc.message) from None


class MockGpu(Section):
    """One ``[[gpu]]`` entry: ``count`` identical simulated devices."""

    model: str = Field(default="Mock GPU", min_length=1, max_length=128, description="Model name.")
    memory: int = Field(default=8 * 1024**3, gt=0, description="Device memory, e.g. 8GiB.")
    sms: int = Field(default=108, ge=1, le=100_000, description="Streaming multiprocessors.")
    count: int = Field(default=1, ge=1, le=64, description="How many devices like this one.")

    @field_validator("memory", mode="before")
    @classmethod
    def _parse_memory(cls, value: object) -> int:
        return _mem(value)


class HardCapsSettings(Section):
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
        description="The MPS control daemon's pipe directory (CUDA_MPS_PIPE_DIRECTORY), "
        "mounted read-only into sessions.",
    )
    mps_shm_directory: Path = Field(
        default=Path("/run/gpuslice/mps-shm"),
        description="The shared-memory directory the MPS control daemon uses as its /dev/shm "
        "(a tmpfs of its own, not the host's /dev/shm), mounted at /dev/shm in MPS sessions.",
    )


class NetworkSettings(Section):
    """What session containers may reach (see ``agent/isolation``)."""

    isolation: Literal["enforce", "off"] = Field(
        default="enforce",
        description="enforce: each session fenced from the others, the host, the manager and "
        "metadata addresses (needs root and iptables); off: Docker's default bridge, unfenced.",
    )
    egress: Literal["open", "none"] = Field(
        default="open",
        description="open: sessions reach outside networks (package registries); none: no "
        "outbound connection at all.",
    )
    deny: list[str] = Field(
        default_factory=list, max_length=256,
        description="More networks sessions must never reach (CIDRs), e.g. the cluster's "
        "internal network.",
    )
    warm_sandboxes: int = Field(
        default=2, ge=0, le=64,
        description="Network sandboxes kept ready in the session network for starting "
        "sessions to join, which then skip Docker's network set-up (most of a start). Each "
        "serves one owner's sessions, one at a time; 0: none.",
    )

    @field_validator("deny")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for item in value:
            try:
                ipaddress.ip_network(item, strict=False)
            except ValueError:
                raise ValueError(f"deny: {item!r} is not a network (e.g. 10.0.0.0/8)") from None
        return value


class AgentSettings(FileSettings):
    """Everything the node agent needs to know about its node."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX)
    file_kind: ClassVar[str] = "agent config"

    node_name: str = Field(
        default_factory=socket.gethostname,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$",
        description="This node's name in the cluster (default: the host name).",
    )
    manager_url: str = Field(
        default="http://127.0.0.1:8080",
        description="Where the manager's API listens; several replicas comma-separated (or a "
        "TOML list): the agent uses one and fails over to the next when it stops answering.",
    )
    ca_bundle: Path | None = Field(
        default=None,
        description="PEM CA certificates the manager's HTTPS certificate is checked against "
        "(default: the system's and certifi's; SSL_CERT_FILE also works).",
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
    resource_group: str | None = Field(
        default=None, pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$",
        description="The node's resource group when it joins, e.g. a100, t4, cpu (default: "
        "\"default\"; an admin may move it with `gpuslice node set-group`).",
    )
    hard_caps: HardCapsSettings = Field(default_factory=HardCapsSettings)
    log: LogSettings = Field(default_factory=LogSettings)
    network: NetworkSettings = Field(default_factory=NetworkSettings)
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
    sample_interval_ms: int = Field(
        default=2000, ge=100, le=60_000,
        description="Milliseconds between GPU readings (per-session usage and the watchdog).",
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
    allow_sudo: bool = Field(
        default=False,
        description="Let sessions on this node use sudo (e.g. apt-get install): their "
        "containers then run without no-new-privileges and with the capabilities sudo and apt "
        "need, so a session's user can become root inside its container. Gives up that part "
        "of the isolation; off by default, when the images' sudo says in one line that it is off.",
    )
    storage_root: Path | None = Field(
        default=None,
        description="Where the storage folders are on this node: the manager's storage root, "
        "the same path on every node (mount the shared filesystem there). Unset: sessions "
        "with folders cannot start here.",
    )

    @field_validator("manager_url", mode="before")
    @classmethod
    def _parse_manager_urls(cls, value: object) -> str:
        return ",".join(split_manager_urls(value))

    @property
    def manager_urls(self) -> list[str]:
        """The manager replicas, in the order the agent tries them."""
        return self.manager_url.split(",")

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


def split_manager_urls(value: object) -> list[str]:
    """``"http://a:8080, http://b:8080"`` or a list of them → the URLs, checked, no duplicates."""
    items = value if isinstance(value, list | tuple) else str(value).split(",")
    urls: list[str] = []
    for item in items:
        url = str(item).strip().rstrip("/")
        if not url:
            continue
        if not _URL.match(url):
            raise ValueError(
                f"manager_url: {url!r} is not an http:// or https:// address (several replicas "
                "are separated by commas)"
            )
        if url not in urls:
            urls.append(url)
    if not urls:
        raise ValueError("manager_url: give at least one http:// or https:// address")
    return urls


def load_agent_settings(path: Path | None = None, **overrides: Any) -> AgentSettings:
    """Read the TOML file at ``path`` (if given) and the environment; ``overrides`` win."""
    return AgentSettings.load(path, **overrides)
