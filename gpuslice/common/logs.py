"""Logs for operators: one line per event, as text or JSON, with the session and node in context.

The manager and the agent log through the standard `logging` module; `configure()` installs one
handler on the root logger. Invariants:

- **One line per event.** A message or a traceback with newlines stays one line: text escapes
  them (``\\n``), JSON carries them inside its string. journald, `docker logs` and log shippers
  then see one record per event.
- **Context, not string formatting.** `log_context(session_id=…, node_id=…)` (or `bind`) puts
  the ids in a context variable: every record logged inside it, in this task and the tasks it
  starts, carries them (``session=… node=…`` in text, ``"session_id"``/``"node_id"`` in JSON).
- **No secret is ever written.** Every record passes `redact()`: bearer tokens (``gsu_``,
  ``gsn_``, ``gsj_``), ``Authorization`` values and the password of a URL
  (``postgresql://user:…@host``) are masked, whatever the message or the traceback held.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import IO, Literal

from pydantic import BaseModel, ConfigDict, Field

LogFormat = Literal["text", "json"]
_CONTEXT: ContextVar[dict[str, str]] = ContextVar("gpuslice_log_context")
_FIELDS = ("session_id", "node_id")

_SECRETS = (
    # our bearer tokens: 32 random bytes, URL-safe base64, after a prefix naming their kind
    (re.compile(r"\b(gs[unj]_)[A-Za-z0-9_-]{6,}"), r"\1***"),
    (re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]+"), r"\1***"),
    # scheme://user:password@host
    (re.compile(r"(\b[a-z][a-z0-9+.-]*://[^:/@\s]*:)[^@\s/]+@"), r"\1***@"),
    (re.compile(r"(?i)\b(password|secret|token)(\s*[=:]\s*)(?!\*\*\*)[^\s,;&]+"), r"\1\2***"),
)


class LogSettings(BaseModel):
    """How the process logs (on stderr: journald, `docker logs` or a terminal collect it)."""

    model_config = ConfigDict(extra="forbid")  # a section of the settings trees

    format: LogFormat = Field(
        default="text",
        description="text (one readable line per event) or json (one JSON object per line).",
    )
    level: Literal["debug", "info", "warning", "error"] = Field(
        default="info", description="The least severe level written."
    )


def redact(text: str) -> str:
    """``text`` with every secret it holds masked (tokens, Authorization, URL passwords)."""
    for pattern, replacement in _SECRETS:
        text = pattern.sub(replacement, text)
    return text


@contextmanager
def log_context(**ids: str | None) -> Iterator[None]:
    """Records logged inside carry these ids (``session_id``, ``node_id``); None leaves one out."""
    token = _CONTEXT.set(_merged(ids))
    try:
        yield
    finally:
        _CONTEXT.reset(token)


def bind(**ids: str | None) -> None:
    """Like `log_context` for the rest of the current task (asyncio copies the context into
    each task it creates, so a loop's binding does not leak into its siblings)."""
    _CONTEXT.set(_merged(ids))


def configure(settings: LogSettings | None = None, *, stream: IO[str] | None = None) -> None:
    """Send every record to ``stream`` (stderr) in the chosen format; replaces earlier handlers."""
    settings = settings or LogSettings()
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if settings.format == "json" else TextFormatter())
    handler.addFilter(ContextFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(settings.level.upper())
    # uvicorn's own loggers propagate to the root: one format for the whole process
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers.clear()
    # httpx writes a line per request at INFO (every heartbeat): events only, unless debugging
    for name in ("httpx", "httpcore"):
        logging.getLogger(name).setLevel(logging.DEBUG if settings.level == "debug"
                                         else logging.WARNING)


class ContextFilter(logging.Filter):
    """Adds the context's ids to each record (an ``extra=`` given to the call wins)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in _CONTEXT.get({}).items():
            if getattr(record, key, None) is None:
                setattr(record, key, value)
        return True


class TextFormatter(logging.Formatter):
    """``2026-01-02T03:04:05.678Z INFO gpuslice.agent: message session=… node=…``"""

    def format(self, record: logging.LogRecord) -> str:
        parts = [f"{_timestamp(record)} {record.levelname} {record.name}: {_message(record)}"]
        parts += [f"{key.removesuffix('_id')}={value}" for key, value in _ids(record).items()]
        if record.exc_info:
            parts.append("| " + self.formatException(record.exc_info))
        return redact(" ".join(parts)).replace("\r", "").replace("\n", "\\n")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, the context's ids, exc."""

    def format(self, record: logging.LogRecord) -> str:
        body: dict[str, object] = {
            "ts": _timestamp(record), "level": record.levelname, "logger": record.name,
            "msg": redact(_message(record)), **_ids(record),
        }
        if record.exc_info:
            body["exc"] = redact(self.formatException(record.exc_info))
        return json.dumps(body, ensure_ascii=False, default=str)


def _merged(ids: dict[str, str | None]) -> dict[str, str]:
    unknown = set(ids) - set(_FIELDS)
    if unknown:
        raise TypeError(f"unknown log context field(s): {sorted(unknown)}")
    merged = dict(_CONTEXT.get({}))
    merged.update({key: str(value) for key, value in ids.items() if value is not None})
    return merged


def _ids(record: logging.LogRecord) -> dict[str, str]:
    return {key: str(value) for key in _FIELDS
            if (value := getattr(record, key, None)) is not None}


def _message(record: logging.LogRecord) -> str:
    try:
        return record.getMessage()
    except (TypeError, ValueError):  # a bad format string must not lose the event
        return f"{record.msg!r} {record.args!r}"


def _timestamp(record: logging.LogRecord) -> str:
    whole = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
    return f"{whole}.{int(record.msecs):03d}Z"
