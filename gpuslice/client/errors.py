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


def error_of(status: int, content: bytes, host: str | None = None) -> ApiError:
    """The manager's error answer (``{code, message, field}``) as an ``ApiError``; a load
    balancer's own 502/503/504 page in front of ``host`` as ``unreachable``."""
    import json

    try:
        body = json.loads(content)
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    if not body and status in (502, 503, 504):
        # a load balancer's own page: the replica it chose died or none is ready
        where = f" behind {host}" if host else ""
        return ApiError(
            f"no manager answered{where} (HTTP {status} from the proxy in front of it); try "
            "again in a moment", status=status, code="unreachable")
    message = body.get("message") or (
        f"HTTP {status}: {content[:200].decode(errors='replace')}")
    return ApiError(message, status=status, code=body.get("code", "error"),
                    field=body.get("field"))
