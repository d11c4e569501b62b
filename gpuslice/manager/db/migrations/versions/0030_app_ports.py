"""app_ports: the port of each app opened while `apps.port_range` is set (issue 31), so that
an app's URL stays the same across a manager's restart while its session lives. Empty for
existing data: no app had a port before.

Revision ID: 0030
Revises: 0029
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0030"
down_revision: str | None = "0029"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "app_ports",
        sa.Column("port", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("session_id", sa.String(36),
                  sa.ForeignKey("sessions.id", ondelete="CASCADE"), nullable=False),
        sa.Column("app", sa.String(40), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("session_id", "app", name="uq_app_ports_session_app"),
    )


def downgrade() -> None:
    op.drop_table("app_ports")
