"""Settings trees read from a TOML file and the environment, the same way for every component.

The manager's tree (``GPUSLICE_*``) and the agent's (``GPUSLICE_AGENT_*``) are both
``FileSettings``: explicit arguments win over the environment (nested fields joined by ``__``,
e.g. ``GPUSLICE_SCHEDULER__INTERVAL=2``), which wins over the TOML file; an unknown key is an
error. Built once at start by ``load``; nothing reads settings at import time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Self

from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)


class FileSettings(BaseSettings):
    """A settings tree from a TOML file (optional) and the environment: set ``env_prefix`` in
    the subclass's ``model_config``; ``file_kind`` names the file when it is missing."""

    model_config = SettingsConfigDict(env_nested_delimiter="__", extra="forbid")
    file_kind: ClassVar[str] = "settings file"

    @classmethod
    def load(cls, path: Path | None = None, **overrides: Any) -> Self:
        """Build the tree: ``overrides`` > the environment > the TOML file at ``path``."""
        if path is not None and not path.is_file():
            raise FileNotFoundError(f"{cls.file_kind} {path} does not exist")
        return cls(_toml_file=path, **overrides)  # type: ignore[call-arg]

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
