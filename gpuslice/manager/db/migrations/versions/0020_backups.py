"""backups: each successful `gpuslice admin backup`, written by the backup at its end, so that
/metrics can say when the platform was last backed up

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "backups",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("rows", sa.BigInteger(), nullable=False),
        sa.Column("entries", sa.BigInteger(), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("database_only", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_backups")),
    )
    with op.batch_alter_table("backups", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_backups_finished_at"), ["finished_at"],
                              unique=False)


def downgrade() -> None:
    with op.batch_alter_table("backups", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_backups_finished_at"))
    op.drop_table("backups")
