"""priority_classes: admin-defined ranks with preemption settings, and each session's class
and preemption state (issue 32).

A platform in use (it has users) gets the default class "normal" (rank 0) and every existing
session is put in it; a new platform gets it at its first start, with its first admin
(services/users.py ensure_admin), so that a database that is only migrated stays empty.

Revision ID: 0027
Revises: 0026
Create Date: 2026-11-26
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0027"
down_revision: str | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_SESSION_COLUMNS = ("priority_class", "preempted_by", "preemptions", "preempt_reason",
                    "held_node_id", "held_slices", "running_since")


def upgrade() -> None:
    table = op.create_table(
        "priority_classes",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("min_runtime_s", sa.Integer(), nullable=False),
        sa.Column("grace_s", sa.Integer(), nullable=False),
        sa.Column("preempt_interactive", sa.Boolean(), nullable=False),
        sa.Column("is_default", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_priority_classes")),
        sa.UniqueConstraint("name", name=op.f("uq_priority_classes_name")),
    )
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(sa.Column("priority_class", sa.String(64), nullable=True))
        batch.add_column(sa.Column("preempted_by", sa.String(36), nullable=True))
        batch.add_column(sa.Column("preemptions", sa.Integer(), nullable=False,
                                   server_default="0"))
        batch.add_column(sa.Column("preempt_reason", sa.Text(), nullable=True))
        batch.add_column(sa.Column("held_node_id", sa.String(36), nullable=True))
        batch.add_column(sa.Column("held_slices", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("running_since", sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table("sessions") as batch:
        batch.alter_column("preemptions", server_default=None)
    if op.get_bind().execute(sa.text("SELECT COUNT(*) FROM users")).scalar():
        op.bulk_insert(table, [{
            "id": str(uuid.uuid4()), "name": "normal", "rank": 0, "min_runtime_s": 600,
            "grace_s": 30, "preempt_interactive": False, "is_default": True,
            "created_at": datetime.now(UTC),
        }])
        op.execute("UPDATE sessions SET priority_class = 'normal'")


def downgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        for column in reversed(_SESSION_COLUMNS):
            batch.drop_column(column)
    op.drop_table("priority_classes")
