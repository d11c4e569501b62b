"""ORM models of notifications (issue 43): channels and the outbox of their deliveries.

Imported by ``models.py`` so that the metadata has them. A channel goes with its user or
project (CASCADE: nobody is left to read it); a delivery goes with its channel.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from gpuslice.manager.db.base import Base, UTCDateTime, new_id, utcnow

ID = String(36)


class NotificationChannelRow(Base):
    """Where a user's (``owner_id``) or a project's (``project_id``) events are sent."""

    __tablename__ = "notification_channels"

    id: Mapped[str] = mapped_column(ID, primary_key=True, default=new_id)
    owner_id: Mapped[str | None] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), index=True)
    project_id: Mapped[str | None] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(16))  # webhook | slack | email
    name: Mapped[str] = mapped_column(String(64), default="")
    target: Mapped[str] = mapped_column(Text)  # URL or e-mail address
    secret: Mapped[str | None] = mapped_column(String(64))  # webhook signing secret
    events: Mapped[list[str]] = mapped_column(JSON, default=list)
    pending_after: Mapped[int] = mapped_column(Integer, default=1800)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    disabled_reason: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class NotificationOutboxRow(Base):
    """One event for one channel: enqueued once (unique ``(channel_id, event_key)``), sent at
    least once. ``id`` is the ``webhook-id`` receivers dedupe on."""

    __tablename__ = "notification_outbox"
    __table_args__ = (
        UniqueConstraint("channel_id", "event_key", name="uq_notification_outbox_event"),
        Index("ix_notification_outbox_due", "status", "next_attempt_at"),
    )

    id: Mapped[str] = mapped_column(ID, primary_key=True, default=new_id)
    channel_id: Mapped[str] = mapped_column(
        ForeignKey("notification_channels.id", ondelete="CASCADE"), index=True)
    event_key: Mapped[str] = mapped_column(String(160))
    event: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(8), default="pending")  # pending | sent | dead
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    locked_until: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_status: Mapped[str] = mapped_column(String(200), default="")
    last_error: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    sent_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
