"""session_time_limits: a session's time limit, scheduled start, end time and warning

Existing sessions get none of them (NULL): nothing changes for what already runs.

Revision ID: 0026
Revises: 0025
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0026"
down_revision: str | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("sessions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("time_limit", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("begin_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("ends_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("warned_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("sessions", schema=None) as batch_op:
        for column in ("warned_at", "ends_at", "begin_at", "time_limit"):
            batch_op.drop_column(column)
