"""notification_channels and notification_outbox (issue 43): where users' and projects'
session events are sent, and each delivery, enqueued once per (channel, event).

Revision ID: 0036
Revises: 0035
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0036"
down_revision: str | None = "0035"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "notification_channels",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("owner_id", sa.String(36), sa.ForeignKey("users.id", ondelete="CASCADE")),
        sa.Column("project_id", sa.String(36),
                  sa.ForeignKey("projects.id", ondelete="CASCADE")),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("target", sa.Text(), nullable=False),
        sa.Column("secret", sa.String(64)),
        sa.Column("events", sa.JSON(), nullable=False),
        sa.Column("pending_after", sa.Integer(), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("disabled_reason", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_notification_channels_owner_id", "notification_channels", ["owner_id"])
    op.create_index("ix_notification_channels_project_id", "notification_channels",
                    ["project_id"])
    op.create_table(
        "notification_outbox",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("channel_id", sa.String(36),
                  sa.ForeignKey("notification_channels.id", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("event_key", sa.String(160), nullable=False),
        sa.Column("event", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(8), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True)),
        sa.Column("locked_until", sa.DateTime(timezone=True)),
        sa.Column("last_status", sa.String(200), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("sent_at", sa.DateTime(timezone=True)),
        sa.UniqueConstraint("channel_id", "event_key", name="uq_notification_outbox_event"),
    )
    op.create_index("ix_notification_outbox_channel_id", "notification_outbox", ["channel_id"])
    op.create_index("ix_notification_outbox_due", "notification_outbox",
                    ["status", "next_attempt_at"])


def downgrade() -> None:
    op.drop_index("ix_notification_outbox_due", table_name="notification_outbox")
    op.drop_index("ix_notification_outbox_channel_id", table_name="notification_outbox")
    op.drop_table("notification_outbox")
    op.drop_index("ix_notification_channels_project_id", table_name="notification_channels")
    op.drop_index("ix_notification_channels_owner_id", table_name="notification_channels")
    op.drop_table("notification_channels")
