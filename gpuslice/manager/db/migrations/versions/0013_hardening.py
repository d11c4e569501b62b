"""Hardening (issue 16): single-use, name-bound join tokens; node revocation; PENDING limits;
retention of ended sessions; login throttling.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("join_tokens", schema=None) as batch_op:
        batch_op.add_column(sa.Column("node_name", sa.String(length=128), nullable=True))
        batch_op.add_column(
            sa.Column("rekey", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch_op.add_column(sa.Column("used_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("used_by", sa.String(length=36), nullable=True))
        batch_op.create_foreign_key(
            batch_op.f("fk_join_tokens_used_by_nodes"), "nodes", ["used_by"], ["id"],
            ondelete="SET NULL",
        )
    with op.batch_alter_table("join_tokens", schema=None) as batch_op:
        batch_op.alter_column("rekey", server_default=None)
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table("resource_policies", schema=None) as batch_op:
        batch_op.add_column(sa.Column("max_pending", sa.Integer(), nullable=True))
    with op.batch_alter_table("sessions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("purged_at", sa.DateTime(timezone=True), nullable=True))
    op.create_table(
        "login_failures",
        sa.Column("key", sa.String(length=160), nullable=False),
        sa.Column("window_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_login_failures")),
    )
    with op.batch_alter_table("login_failures", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_login_failures_window_start"), ["window_start"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("login_failures", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_login_failures_window_start"))
    op.drop_table("login_failures")
    with op.batch_alter_table("sessions", schema=None) as batch_op:
        batch_op.drop_column("purged_at")
    with op.batch_alter_table("resource_policies", schema=None) as batch_op:
        batch_op.drop_column("max_pending")
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.drop_column("revoked_at")
    with op.batch_alter_table("join_tokens", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("fk_join_tokens_used_by_nodes"), type_="foreignkey")
        batch_op.drop_column("used_by")
        batch_op.drop_column("used_at")
        batch_op.drop_column("rekey")
        batch_op.drop_column("node_name")
