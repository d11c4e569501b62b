"""folder_invites: a folder shared with a username nobody has yet (so that sharing does not
tell a user who exists); it becomes a grant when that user is created

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "folder_invites",
        sa.Column("folder_id", sa.String(length=36), nullable=False),
        sa.Column("username", sa.String(length=64), nullable=False),
        sa.Column("permission", sa.String(length=2), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["folder_id"], ["folders.id"],
                                name="fk_folder_invites_folder_id_folders", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("folder_id", "username", name="pk_folder_invites"),
    )
    op.create_index("ix_folder_invites_username", "folder_invites", ["username"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_folder_invites_username", table_name="folder_invites")
    op.drop_table("folder_invites")
