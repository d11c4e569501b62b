"""A validation error as a sentence a person reads: ``Memory: 'lots' is not a size …``.

The manager's answers (``manager/api/errors.py``) and the CLI's own checks use it. The console
shows an error's ``message`` as it comes, so it names the field as a form labels it (never
``resources.mem``) and says what is allowed in words (never Pydantic's ``String should have at
least 8 characters``). An API answer's ``field`` keeps the path for programs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

# A field as the launch dialog, the password form and the CLI's help name it.
LABELS = {
    "mem": "Memory", "cpu": "CPU", "gpu": "GPU", "gpu_mem": "GPU memory", "image": "Image",
    "name": "Name", "count": "Number of sessions", "command": "Command",
    "command_line": "Command", "folders": "Folders", "env": "Environment variables",
    "priority": "Priority", "resources": "Resources", "new_password": "New password",
    "current_password": "Current password", "password": "Password", "username": "User name",
    "role": "Role", "type": "Type", "node": "Node", "tag": "Tag", "path": "Path",
    "expires_in_hours": "Expires in (hours)", "gpu_model": "GPU model", "user": "User",
}

# A pattern's rule in words, where a schema's pattern is a common one.
_PATTERNS = {r"^[^\s]+$": "write it without spaces"}


def label(loc: Sequence[str | int]) -> str:
    """The field's name as a form shows it; a list's item is named by its place (1st = 1)."""
    names = [p for p in loc if isinstance(p, str)]
    if not names:
        return "The request"
    last = names[-1]
    text = LABELS.get(last, last.replace("_", " ").capitalize())
    items = [p for p in loc if isinstance(p, int)]
    return f"{text} (item {items[-1] + 1})" if items else text


def sentence(error: Mapping[str, Any]) -> str:
    """One error of ``RequestValidationError.errors()`` in words, naming its field."""
    loc = [p for p in error.get("loc", ()) if p not in ("body", "query", "path", "header")]
    text, names_itself = reason(error)
    if names_itself:
        return text[:1].upper() + text[1:]
    return f"{label(loc)}: {text}"


def reason(error: Mapping[str, Any]) -> tuple[str, bool]:
    """What is wrong, without the field's name, and whether the text names its subject itself
    (a validator's own sentence, e.g. "folder name 'x': use ...")."""
    loc = [p for p in error.get("loc", ()) if p not in ("body", "query", "path", "header")]
    kind = str(error.get("type", ""))
    if kind == "value_error":  # our validators' own text, written for people
        text = str(error.get("msg", "")).removeprefix("Value error, ")
        last = next((p for p in reversed(loc) if isinstance(p, str)), None)
        if last and text.startswith(f"{last}: "):  # resources.py names its field: relabel it
            return text[len(last) + 2:], False
        return text, True
    if kind == "json_invalid":
        return "the request is not valid JSON", True
    if not loc and kind in ("model_attributes_type", "dict_type", "model_type"):
        return "the request must be a JSON object", True
    return _builtin(kind, error.get("ctx") or {}, str(error.get("msg", "not accepted"))), False


def _builtin(kind: str, ctx: Mapping[str, Any], fallback: str) -> str:
    def plural(n: Any, what: str) -> str:
        return f"{n} {what}" + ("" if n == 1 else "s")

    texts = {
        "missing": "required; fill it in",
        "string_too_short": f"use at least {plural(ctx.get('min_length'), 'character')}",
        "string_too_long": f"use at most {plural(ctx.get('max_length'), 'character')}",
        "too_short": f"give at least {plural(ctx.get('min_length'), 'item')}",
        "too_long": f"give at most {plural(ctx.get('max_length'), 'item')}",
        "greater_than_equal": f"must be {ctx.get('ge')} or more",
        "greater_than": f"must be more than {ctx.get('gt')}",
        "less_than_equal": f"must be {ctx.get('le')} or less",
        "less_than": f"must be less than {ctx.get('lt')}",
        "int_parsing": "write a whole number, e.g. 1 or 2",
        "int_type": "write a whole number, e.g. 1 or 2",
        "int_from_float": "write a whole number, e.g. 1 or 2",
        "float_parsing": "write a number, e.g. 0.5 or 2",
        "bool_parsing": "write true or false",
        "bool_type": "write true or false",
        "string_type": "write it as text",
        "string_pattern_mismatch": _PATTERNS.get(str(ctx.get("pattern")),
                                                 "has characters that are not allowed here"),
        "literal_error": f"choose {ctx.get('expected')}",
        "enum": f"choose {ctx.get('expected')}",
        "list_type": "give a list",
        "dict_type": "give names and values",
        "extra_forbidden": "is not something this form takes",
    }
    return texts.get(kind, fallback[:1].lower() + fallback[1:])
