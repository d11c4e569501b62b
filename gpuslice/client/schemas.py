"""The shared schemas (``gpuslice.common.schemas``), each module imported on first use.

``schemas.sessions.SessionPublic`` imports ``gpuslice.common.schemas.sessions`` the first time it
is read. Building the pydantic models of a schema module takes longer than most API calls, and
a command needs one or two of these modules: the SDK and the CLI reach the schemas through
here, and name them at the top of a module only for type checkers (under ``TYPE_CHECKING``).
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpuslice.common.schemas import (
        agents,
        apps,
        audit,
        common,
        config,
        health,
        identity,
        images,
        ldap,
        models,
        monitoring,
        nodes,
        notify,
        presets,
        priorities,
        projects,
        runs,
        sessions,
        ssh,
        sso,
        storage,
        users,
    )

__all__ = ["agents", "apps", "audit", "common", "config", "health", "identity", "images",
           "ldap", "models", "monitoring", "nodes", "notify", "presets", "priorities",
           "projects", "runs", "sessions", "ssh", "sso", "storage", "users"]


def __getattr__(name: str) -> ModuleType:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(f"gpuslice.common.schemas.{name}")
    globals()[name] = module  # later lookups skip this function
    return module
