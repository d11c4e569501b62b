"""Settings trees read from a TOML file and the environment, the same way for every component.

The manager's tree (``GPUSLICE_*``) and the agent's (``GPUSLICE_AGENT_*``) are both
``FileSettings``: explicit arguments win over the environment (nested fields joined by ``__``,
e.g. ``GPUSLICE_SCHEDULER__INTERVAL=2``), which wins over the TOML file. An unknown key is an
error at any depth: in the file, in a ``GPUSLICE_*`` variable (``settings_names``: which such
variables are not settings) and in the arguments (every section is a ``Section``, which forbids
extras). Built once at start by ``load``; nothing reads settings at import time.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from gpuslice.common.settings_names import UnknownSetting, unknown_setting


class Section(BaseModel):
    """A section of a settings tree (``[scheduler]``): a key it does not have is an error."""

    model_config = ConfigDict(extra="forbid")


class FileSettings(BaseSettings):
    """A settings tree from a TOML file (optional) and the environment: set ``env_prefix`` in
    the subclass's ``model_config``; ``file_kind`` names the file when it is missing."""

    model_config = SettingsConfigDict(env_nested_delimiter="__", extra="forbid")
    file_kind: ClassVar[str] = "settings file"
    # Variables of other components' trees under this one's prefix (the manager's GPUSLICE_
    # holds the agent's GPUSLICE_AGENT_): not this tree's to judge.
    env_others: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def load(cls, path: Path | None = None, **overrides: Any) -> Self:
        """Build the tree: ``overrides`` > the environment > the TOML file at ``path``.
        Raises :class:`UnknownSetting` (a ``ValueError``, one line) for a key no setting has."""
        if path is not None and not path.is_file():
            raise FileNotFoundError(f"{cls.file_kind} {path} does not exist")
        cls.check_names(path)
        return cls(_toml_file=path, **overrides)  # type: ignore[call-arg]

    @classmethod
    def check_names(cls, path: Path | None = None) -> None:
        """Refuse an unknown key in the TOML file at ``path`` or in this tree's variables."""
        prefix = str(cls.model_config.get("env_prefix") or "").upper()
        problem = unknown_setting(cls, path, os.environ, prefix, cls.env_others)
        if problem is not None:
            raise UnknownSetting(problem)

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
