"""ssh_keys: users' SSH public keys, the only keys a session's SSH server accepts for its owner
(`gpuslice ssh-key add`). A new table: existing data is untouched.

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "ssh_keys",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("user_id", sa.String(36), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("key_type", sa.String(64), nullable=False),
        sa.Column("public_key", sa.Text(), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name=op.f("fk_ssh_keys_user_id_users"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ssh_keys")),
        sa.UniqueConstraint("user_id", "fingerprint", name=op.f("uq_ssh_keys_user_id")),
    )
    op.create_index(op.f("ix_ssh_keys_user_id"), "ssh_keys", ["user_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_ssh_keys_user_id"), table_name="ssh_keys")
    op.drop_table("ssh_keys")
