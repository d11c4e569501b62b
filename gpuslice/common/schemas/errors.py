"""The body of every 4xx/5xx answer."""

from __future__ import annotations

from pydantic import BaseModel, Field


class ErrorBody(BaseModel):
    """An error: a stable ``code``, a message for people, and the input ``field`` at fault."""

    code: str = Field(description="Stable error code, e.g. `validation_error`, `not_found`.")
    message: str = Field(description="What went wrong and what is allowed, for people.")
    field: str | None = Field(
        default=None, description="Dotted path of the request field at fault, if any."
    )
