"""images.registry: the image is in the configured registry (nodes pull it on demand)

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("images", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("registry", sa.Boolean(), nullable=False, server_default=sa.false())
        )
    with op.batch_alter_table("images", schema=None) as batch_op:
        batch_op.alter_column("registry", server_default=None)


def downgrade() -> None:
    with op.batch_alter_table("images", schema=None) as batch_op:
        batch_op.drop_column("registry")
