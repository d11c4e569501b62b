"""commit_requests (sessions committed into images by their agent); max_private_images

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("resource_policies", schema=None) as batch_op:
        batch_op.add_column(sa.Column("max_private_images", sa.Integer(), nullable=True))

    op.create_table(
        "commit_requests",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("session_id", sa.String(length=36), nullable=False),
        sa.Column("node_id", sa.String(length=36), nullable=False),
        sa.Column("reference", sa.String(length=255), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("image_id", sa.String(length=128), nullable=True),
        sa.Column("size", sa.BigInteger(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["node_id"], ["nodes.id"], name=op.f("fk_commit_requests_node_id_nodes"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["session_id"], ["sessions.id"], name=op.f("fk_commit_requests_session_id_sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_commit_requests")),
    )
    with op.batch_alter_table("commit_requests", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_commit_requests_node_id"), ["node_id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("commit_requests", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_commit_requests_node_id"))
    op.drop_table("commit_requests")
    with op.batch_alter_table("resource_policies", schema=None) as batch_op:
        batch_op.drop_column("max_private_images")
