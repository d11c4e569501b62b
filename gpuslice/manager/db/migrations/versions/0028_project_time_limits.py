"""project_time_limits: a project's own default and maximum time limit for its sessions
(issue 32). Both NULL for every existing project: the settings' default and maximum still
apply to it, as before.

Revision ID: 0028
Revises: 0027
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0028"
down_revision: str | None = "0027"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("projects") as batch:
        batch.add_column(sa.Column("default_time_limit", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("max_time_limit", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("projects") as batch:
        batch.drop_column("max_time_limit")
        batch.drop_column("default_time_limit")
