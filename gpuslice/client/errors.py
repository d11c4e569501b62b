"""The SDK's error: the manager refused a request, or could not be reached."""

from __future__ import annotations


class ApiError(Exception):
    """The manager refused a request, or could not be reached. ``str()`` is one clear line."""

    def __init__(self, message: str, *, status: int = 0, code: str = "error",
                 field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.field = field


def error_of(status: int, content: bytes) -> ApiError:
    """The manager's error answer (``{code, message, field}``) as an ``ApiError``."""
    import json

    try:
        body = json.loads(content)
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    message = body.get("message") or (
        f"HTTP {status}: {content[:200].decode(errors='replace')}")
    return ApiError(message, status=status, code=body.get("code", "error"),
                    field=body.get("field"))
