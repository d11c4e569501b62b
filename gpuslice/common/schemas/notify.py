"""Notification channels and their deliveries (issue 43): the API's and the CLI's models."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, Field, field_validator


class ChannelKind(StrEnum):
    WEBHOOK = "webhook"  # JSON, signed (Standard Webhooks)
    SLACK = "slack"  # a Slack-compatible incoming webhook: {"text": ...}
    EMAIL = "email"  # through the site's SMTP server


# Every event a channel may choose; `notify.test` is sent by `notify test` whatever is chosen.
EVENTS = (
    "session.started", "session.finished", "session.failed", "session.preempted",
    "session.cancelled", "session.time_limit_warning", "session.idle_warning",
    "session.pending_long",
)
DEFAULT_EVENTS = ("session.started", "session.finished", "session.failed",
                  "session.preempted", "session.cancelled", "session.time_limit_warning",
                  "session.idle_warning")


def _events(value: list[str]) -> list[str]:
    full = [e if e.startswith("session.") else f"session.{e}" for e in value]
    if unknown := [e for e in full if e not in EVENTS]:
        raise ValueError(f"unknown event {', '.join(unknown)}; the events: "
                         f"{', '.join(e.removeprefix('session.') for e in EVENTS)}")
    return sorted(set(full), key=EVENTS.index)


class ChannelCreate(BaseModel):
    """A new channel: a webhook or Slack URL (`target`), or an e-mail address (admins set
    those: the manager mails nobody a user typed in)."""

    kind: ChannelKind
    target: str = Field(min_length=1, max_length=2048,
                        description="The URL (webhook, slack) or the e-mail address (email).")
    name: str = Field(default="", max_length=64)
    events: list[str] = Field(default_factory=lambda: list(DEFAULT_EVENTS), max_length=20,
                              description="Events to send (`finished` or `session.finished`).")
    pending_after: int = Field(default=1800, ge=1, le=7 * 86400,
                               description="Seconds PENDING before `session.pending_long`.")
    project: str | None = Field(default=None, max_length=80,
                                description="A project's channel: its sessions' events "
                                "(admins only).")
    user: str | None = Field(default=None, max_length=64,
                             description="Admins: the user whose channel this is (an e-mail "
                             "channel for them); default: the caller.")

    _check_events = field_validator("events")(_events)


class ChannelUpdate(BaseModel):
    name: str | None = Field(default=None, max_length=64)
    events: list[str] | None = Field(default=None, max_length=20)
    pending_after: int | None = Field(default=None, ge=1, le=7 * 86400)
    enabled: bool | None = Field(default=None, description="true: enable it again.")

    @field_validator("events")
    @classmethod
    def _check(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else _events(value)


class ChannelPublic(BaseModel):
    id: str
    kind: ChannelKind
    name: str
    target: str = Field(description="The URL with its path hidden (it is often the secret), "
                        "or the e-mail address.")
    owner: str | None = None  # the user's name, for a user's channel
    project: str | None = None
    events: list[str]
    pending_after: int
    enabled: bool
    disabled_reason: str = ""
    created_at: datetime


class ChannelCreated(ChannelPublic):
    secret: str | None = Field(default=None, description="The webhook's signing secret: "
                               "shown this once, never again.")


class DeliveryPublic(BaseModel):
    id: str = Field(description="Also the `webhook-id` header: receivers dedupe on it.")
    channel_id: str
    channel: str
    owner: str | None = None
    event: str
    session: str | None = None
    status: str = Field(description="pending, sent or dead.")
    attempts: int
    last_status: str = Field(description="The receiver's HTTP status or the SMTP reply.")
    last_error: str
    created_at: datetime
    next_attempt_at: datetime | None
    sent_at: datetime | None


class TestResult(BaseModel):
    ok: bool
    status: str = Field(description="The receiver's HTTP status or the SMTP server's reply.")
    error: str = ""
