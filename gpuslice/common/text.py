"""Which text the platform accepts, stores and sends: one rule for every edge.

Text is a sequence of Unicode scalar values that UTF-8 can encode, without NUL and without
control characters except where they make sense:

- **free text** (a JSON string value: a command argument, an environment value, a program's
  output) may hold tab, newline, carriage return and escape (terminal colours), nothing else
  below U+0020, no DEL and no C1 control (U+0080–U+009F);
- **a line** (a name, a query or path parameter, a header value, a JSON object key) holds no
  control character at all.

A lone surrogate (``"\\ud800"`` in JSON) is never text: it cannot be encoded as UTF-8, so no
database stores it and no answer can carry it. NUL cannot be stored by PostgreSQL, passed in
an argv or an environment. The manager's edge (``manager/api/edge.py``) refuses input that
breaks the rule with a 422 naming the field; the agent cleans what it relays from containers
(program output) with :func:`clean` before sending it; stored data read back for display goes
through :func:`scrub`, so one bad row never breaks an answer.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
REPLACEMENT = "\ufffd"

_NOT_FREE_TEXT = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f-\x9f\ud800-\udfff]")
_NOT_A_LINE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_UNENCODABLE = re.compile("[\ud800-\udfff]")


def problem(value: str, *, line: bool = False) -> str | None:
    """What makes ``value`` unacceptable as free text (or as a line), or ``None``."""
    found = (_NOT_A_LINE if line else _NOT_FREE_TEXT).search(value)
    if found is None:
        return None
    char = found.group()
    code = f"U+{ord(char):04X}"
    if "\ud800" <= char <= "\udfff":
        return (f"contains a lone surrogate ({code}), which is not Unicode text and cannot be "
                "encoded as UTF-8")
    if char == "\x00":
        return "contains a NUL character (U+0000), which is not allowed in text"
    if line:
        return f"contains the control character {code}; no control characters are allowed here"
    return (f"contains the control character {code}; text may hold tab, newline, carriage "
            "return and escape, no other control characters")


def clean(value: str) -> str:
    """``value`` as free text: what the rule refuses becomes U+FFFD (for program output)."""
    return _NOT_FREE_TEXT.sub(REPLACEMENT, value)


def clean_tree(value: Any) -> Any:
    """:func:`clean` on every string (keys included) of a JSON-like value."""
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, dict):
        return {clean_tree(k): clean_tree(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean_tree(v) for v in value]
    return value


def scrub(value: Any) -> Any:
    """A JSON-like value with every unencodable character replaced (keys included), so that it
    can always be answered; everything else is kept as stored."""
    if isinstance(value, str):
        return _UNENCODABLE.sub(REPLACEMENT, value)
    if isinstance(value, dict):
        return {scrub(k): scrub(v) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub(v) for v in value]
    return value


def encodable(value: Any) -> bool:
    """Whether every string of a JSON-like value (keys included) can be encoded as UTF-8."""
    if isinstance(value, str):
        return _UNENCODABLE.search(value) is None
    if isinstance(value, dict):
        return all(encodable(k) and encodable(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return all(encodable(v) for v in value)
    return True


def _check_line(value: str) -> str:
    found = problem(value, line=True)
    if found is not None:
        raise ValueError(found)
    return value


#: A single-line string field (a name or a label): no control characters at all. Fields with a
#: ``pattern`` already exclude them; use this for the others.
Line = Annotated[str, AfterValidator(_check_line)]
