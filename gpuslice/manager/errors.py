"""Domain errors raised by services, each with a stable ``code``.

Services never speak HTTP; ``api/errors.py`` turns these into answers in one place.
"""

from __future__ import annotations


class DomainError(Exception):
    """Base: ``code`` is stable for machines, ``message`` is for people, ``field`` is optional."""

    code = "bad_request"

    def __init__(self, message: str, *, field: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        if code is not None:
            self.code = code


class InvalidRequest(DomainError):
    """The request is well-formed but cannot be accepted (unknown image, impossible shape…)."""

    code = "invalid_request"


class NotFound(DomainError):
    code = "not_found"


class Unauthorized(DomainError):
    code = "unauthorized"


class Forbidden(DomainError):
    code = "forbidden"


class Conflict(DomainError):
    code = "conflict"


class IllegalTransition(Conflict):
    """A status change the lifecycle does not allow (e.g. TERMINATED → RUNNING)."""

    code = "illegal_transition"


class StaleStatus(Conflict):
    """The session's status changed under us (another request or manager won the race)."""

    code = "status_changed"


class TooLarge(DomainError):
    """What a request announces is more than a quota or the space left allows (413)."""

    code = "too_large"


class TooManyRequests(DomainError):
    """Throttled: the caller may try again after ``retry_after`` seconds."""

    code = "too_many_requests"

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class AgentTimeout(DomainError):
    """A node agent did not answer in time."""

    code = "agent_timeout"


class Unavailable(DomainError):
    """A service the manager depends on (e.g. the model store) cannot be used now."""

    code = "unavailable"
