"""Where the CLI keeps its login: a small JSON file readable only by its owner.

``GPUSLICE_URL`` and ``GPUSLICE_TOKEN`` override what the file says; ``GPUSLICE_CLIENT_CONFIG``
moves the file (default ``$XDG_CONFIG_HOME/gpuslice/client.json``, else ``~/.config/...``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class ClientConfig:
    url: str | None = None
    token: str | None = None


def config_path() -> Path:
    explicit = os.environ.get("GPUSLICE_CLIENT_CONFIG")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gpuslice" / "client.json"


def load_config() -> ClientConfig:
    """The stored login, with the environment's overrides applied."""
    stored: dict[str, str] = {}
    path = config_path()
    if path.is_file():
        try:
            loaded = json.loads(path.read_text())
            stored = loaded if isinstance(loaded, dict) else {}
        except (OSError, ValueError):
            stored = {}
    return ClientConfig(
        url=os.environ.get("GPUSLICE_URL") or stored.get("url"),
        token=os.environ.get("GPUSLICE_TOKEN") or stored.get("token"),
    )


def save_config(config: ClientConfig) -> Path:
    """Write the login atomically with mode 0600 (the token is a secret)."""
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump({"url": config.url, "token": config.token}, out)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
    return path


def stored_config() -> ClientConfig:
    """What the file says, without the environment's overrides (``gpuslice logout`` ends the
    stored login, never one a variable brings)."""
    path = config_path()
    try:
        loaded = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError):
        loaded = {}
    stored = loaded if isinstance(loaded, dict) else {}
    return ClientConfig(url=stored.get("url"), token=stored.get("token"))
