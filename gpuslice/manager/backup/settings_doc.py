"""The manager's settings in a backup: recorded without secrets, given back as a TOML file.

Secrets (``SecretStr`` fields, the password of the database URL) are never written: the
document lists them under ``"_withheld"`` and the TOML names them in comments, so the admin sets
them again. The database URL is the old database's: the TOML keeps it as a comment only.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, SecretStr

from gpuslice.manager.backup.dump import safe_url
from gpuslice.manager.settings import ManagerSettings

WITHHELD = "_withheld"


def settings_document(settings: ManagerSettings) -> dict[str, Any]:
    """The settings as plain JSON values, secrets left out (their keys under ``_withheld``)."""
    withheld: list[str] = []
    doc = _plain(settings, "", withheld)
    if settings.database.url:
        doc["database"]["url"] = safe_url(settings.database.url)
    doc[WITHHELD] = withheld
    return doc


def settings_toml(doc: dict[str, Any]) -> str:
    """A TOML file for `gpuslice manager serve --config` from a backup's settings document."""
    lines = ["# gpuslice manager settings, from a backup (gpuslice admin restore --settings-to)"]
    for key in doc.get(WITHHELD, []):
        lines.append(f"# {key}: a secret, not kept in backups; set it again")
    top = {k: v for k, v in doc.items() if k != WITHHELD and not isinstance(v, dict)}
    lines += _assignments(top, "")
    for section, values in doc.items():
        if isinstance(values, dict):
            lines += ["", f"[{section}]", *_assignments(values, section)]
    return "\n".join(lines) + "\n"


def _plain(model: BaseModel, prefix: str, withheld: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in type(model).model_fields:
        value = getattr(model, name)
        key = f"{prefix}{name}"
        if isinstance(value, SecretStr):
            withheld.append(key)
        elif isinstance(value, BaseModel):
            out[name] = _plain(value, f"{key}.", withheld)
        elif value is not None:
            out[name] = json.loads(json.dumps(value, default=str))
    return out


def _assignments(values: dict[str, Any], section: str) -> list[str]:
    lines = []
    for key, value in values.items():
        if isinstance(value, dict):  # deeper tables do not exist in the settings today
            continue
        line = f"{key} = {_toml_value(value)}"
        if section == "database" and key == "url":
            line = f"# {line}  (the backed-up manager's database: set the new one)"
        lines.append(line)
    return lines


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(str(value))  # a TOML basic string is a JSON string
