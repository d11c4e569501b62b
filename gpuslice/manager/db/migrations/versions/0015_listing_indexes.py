"""sessions: listing indexes end with the id (the listing's tie-break), so a page of any
listing (all, by status, by owner; newest first) is read in index order, never sorted

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# (old name, new name, columns): the old indexes are prefixes of the new ones
CHANGES = [
    ("ix_sessions_created", "ix_sessions_created_id", ["created_at", "id"]),
    ("ix_sessions_status_created", "ix_sessions_status_created_id",
     ["status", "created_at", "id"]),
    ("ix_sessions_owner_created", "ix_sessions_owner_created_id",
     ["owner_id", "created_at", "id"]),
]


def upgrade() -> None:
    for old, new, columns in CHANGES:
        op.create_index(new, "sessions", columns)
        op.drop_index(old, table_name="sessions")


def downgrade() -> None:
    for old, new, columns in CHANGES:
        op.create_index(old, "sessions", columns[:-1])
        op.drop_index(new, table_name="sessions")
