"""upload_reservations: the bytes each folder upload in progress holds against its owner's
storage quota (security review F5: unfinished and parallel uploads were counted nowhere).
Empty for existing data: partial uploads from before count from their next resume.

Revision ID: 0034
Revises: 0033
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0034"
down_revision: str | None = "0033"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "upload_reservations",
        sa.Column("id", sa.String(80), primary_key=True),
        sa.Column("folder_id", sa.String(36),
                  sa.ForeignKey("folders.id", ondelete="CASCADE"), nullable=False),
        sa.Column("user_id", sa.String(36),
                  sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("touched_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_upload_reservations_folder_id", "upload_reservations", ["folder_id"])


def downgrade() -> None:
    op.drop_index("ix_upload_reservations_folder_id", table_name="upload_reservations")
    op.drop_table("upload_reservations")
