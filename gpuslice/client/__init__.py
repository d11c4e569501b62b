"""The gpuslice Python SDK; the CLI is built on it.

Its names are imported on first use (PEP 562), so that importing the package, its error or its
login file does not import httpx and pydantic: CLI commands that never call the manager, and
`gpuslice --help`, do without them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuslice.client.client import Client
    from gpuslice.client.config import ClientConfig, load_config, save_config
    from gpuslice.client.errors import ApiError

_MODULE_OF = {
    "ApiError": "gpuslice.client.errors",
    "Client": "gpuslice.client.client",
    "ClientConfig": "gpuslice.client.config",
    "load_config": "gpuslice.client.config",
    "save_config": "gpuslice.client.config",
}

__all__ = ["ApiError", "Client", "ClientConfig", "load_config", "save_config"]


def __getattr__(name: str) -> Any:
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_MODULE_OF[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value
