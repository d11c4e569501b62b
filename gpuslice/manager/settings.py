"""The manager's settings: one typed tree from a TOML file and ``GPUSLICE_*`` variables.

Built once at start by ``load_settings()`` and passed down (``create_app(settings)``); nothing
reads settings at import time. Nested fields use ``__`` in the environment, e.g.
``GPUSLICE_SCHEDULER__INTERVAL=2`` or ``GPUSLICE_DATABASE__URL=postgresql+asyncpg://…``.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, SecretStr, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from gpuslice.common.resources import ResourceError, parse_fgpu_per_gpu
from gpuslice.manager.scheduler import Policy, SchedulerConfig, Strategy


class DatabaseSettings(BaseModel):
    url: str | None = Field(
        default=None,
        description="SQLAlchemy async URL (sqlite+aiosqlite:///… or postgresql+asyncpg://…); "
        "default: sqlite+aiosqlite:///<data_dir>/gpuslice.db",
    )
    migrate_on_start: bool = Field(default=True, description="Run `upgrade head` at start.")
    pool_size: int = Field(default=10, ge=1, le=200, description="PostgreSQL pool size.")
    echo: bool = Field(default=False, description="Log every SQL statement (debugging).")
    busy_timeout: float = Field(
        default=30.0, ge=0.1, le=600,
        description="SQLite: seconds a statement waits for another program's lock on the "
        "database before it fails (the API then answers 503 `database_unavailable`).",
    )


class SchedulerSettings(BaseModel):
    interval: float = Field(
        default=5.0, ge=0.05, le=3600, description="Seconds between safety-net passes."
    )
    policy: Policy = Field(default=Policy.FIFO, description="fifo, backfill or drf.")
    strategy: Strategy = Field(default=Strategy.BINPACK, description="binpack or spread.")
    max_wait_before_reserve: float = Field(
        default=600.0, ge=0, le=7 * 86400,
        description="Backfill: seconds a request waits before capacity is reserved for it.",
    )

    def core_config(self) -> SchedulerConfig:
        return SchedulerConfig(self.policy, self.strategy, self.max_wait_before_reserve)


class NodeSettings(BaseModel):
    node_timeout: float = Field(
        default=30.0, ge=0.5, le=3600,
        description="A node whose last heartbeat is older than this is LOST.",
    )
    heartbeat_interval: float = Field(
        default=5.0, ge=0.1, le=600, description="Seconds between heartbeats asked of agents."
    )
    sweep_interval: float = Field(
        default=2.0, ge=0.05, le=600, description="Seconds between checks for lost nodes."
    )
    fgpu_per_gpu: Decimal = Field(
        default=Decimal(1), description="Default fGPU per physical GPU (per-node override)."
    )
    assignment_poll: float = Field(
        default=1.0, ge=0.05, le=60,
        description="Long-poll fallback: seconds between database checks, so that a change "
        "made by another manager replica still reaches the agent.",
    )

    @field_validator("fgpu_per_gpu", mode="before")
    @classmethod
    def _check_ratio(cls, value: object) -> Decimal:
        try:
            return Decimal(parse_fgpu_per_gpu(value)) / 1000
        except ResourceError as exc:
            raise ValueError(exc.message) from None

    @property
    def device_capacity(self) -> int:
        """One device in milli-fGPU."""
        return int(self.fgpu_per_gpu * 1000)


class AuthSettings(BaseModel):
    login_token_ttl: float = Field(
        default=12 * 3600, ge=60, le=90 * 86400, description="Seconds a login token lasts."
    )
    admin_username: str = Field(default="admin", description="The admin created on first start.")


class SessionSettings(BaseModel):
    default_max_priority: int = Field(
        default=0, ge=-100, le=100, description="Highest priority for users without a policy."
    )
    allowed_images: list[str] = Field(
        default_factory=list,
        description="Images always accepted, besides those nodes report and admins add.",
    )
    log_timeout: float = Field(
        default=10.0, ge=0.1, le=300, description="Seconds to wait for an agent's log upload."
    )
    log_tail: int = Field(default=1000, ge=1, le=100_000, description="Default log lines.")
    commit_timeout: float = Field(
        default=600.0, ge=1, le=3600,
        description="Seconds a commit request waits for the agent to snapshot the container.",
    )


class RegistrySettings(BaseModel):
    url: str | None = Field(
        default=None, pattern=r"^https?://[^/\s]+/?$",
        description="A Docker registry (HTTP API v2) whose images the catalog lists on rescan, "
        "e.g. https://registry.example.com:5000; nodes pull them on demand.",
    )
    username: str | None = Field(default=None, description="Basic auth user for the registry.")
    password: SecretStr | None = Field(default=None, description="Basic auth password.")
    timeout: float = Field(default=10.0, ge=0.5, le=120, description="Seconds per request.")
    max_tags: int = Field(
        default=2000, ge=1, le=100_000, description="Most image tags one rescan records."
    )


class ManagerSettings(BaseSettings):
    """Everything the manager needs; see the field descriptions."""

    model_config = SettingsConfigDict(
        env_prefix="GPUSLICE_", env_nested_delimiter="__", extra="forbid"
    )

    data_dir: Path = Field(
        default=Path("~/.local/share/gpuslice"),
        description="Where the SQLite database and the admin credentials file live.",
    )
    database: DatabaseSettings = Field(default_factory=DatabaseSettings)
    scheduler: SchedulerSettings = Field(default_factory=SchedulerSettings)
    nodes: NodeSettings = Field(default_factory=NodeSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    sessions: SessionSettings = Field(default_factory=SessionSettings)
    registry: RegistrySettings = Field(default_factory=RegistrySettings)

    @field_validator("data_dir")
    @classmethod
    def _expand(cls, value: Path) -> Path:
        return value.expanduser()

    @property
    def database_url(self) -> str:
        return self.database.url or f"sqlite+aiosqlite:///{self.data_dir / 'gpuslice.db'}"

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
        toml_file = init_settings.init_kwargs.pop("_toml_file", None)  # type: ignore[attr-defined]
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if toml_file is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=toml_file))
        return tuple(sources)


def load_settings(config_file: Path | None = None, **overrides: Any) -> ManagerSettings:
    """Build the settings once: ``overrides`` > ``GPUSLICE_*`` env > ``config_file`` (TOML)."""
    if config_file is not None and not config_file.is_file():
        raise FileNotFoundError(f"settings file {config_file} does not exist")
    return ManagerSettings(_toml_file=config_file, **overrides)  # type: ignore[call-arg]
