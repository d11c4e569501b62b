"""Identities (issue 42): users who sign in at an OIDC provider or an LDAP directory, linked by
(provider, subject); project members added by a provider's group; project ↔ group links.

Revision ID: 0037
Revises: 0036
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0037"
down_revision: str | None = "0036"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Columns are added in place (SQLite's ALTER TABLE ADD COLUMN: tables that refer to these
    # are not rebuilt); the server defaults fill the rows there are and stay.
    for column in (
        sa.Column("source", sa.String(16), nullable=False, server_default="local"),
        sa.Column("display_name", sa.String(128), nullable=True),
        sa.Column("email", sa.String(320), nullable=True),
        sa.Column("email_verified", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("last_login_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("disabled_reason", sa.String(128), nullable=True),
    ):
        op.add_column("users", column)
    op.create_table(
        "user_identities",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("user_id", sa.String(36), sa.ForeignKey("users.id", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("provider", sa.String(16), nullable=False),
        sa.Column("subject", sa.String(255), nullable=False),
        sa.Column("claimed_username", sa.String(255), nullable=False),
        sa.Column("groups", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_login_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("checked_at", sa.DateTime(timezone=True), nullable=True),
        sa.UniqueConstraint("provider", "subject"),
    )
    op.create_index("ix_user_identities_user_id", "user_identities", ["user_id"])
    op.add_column("project_members", sa.Column("source", sa.String(8), nullable=False,
                                               server_default="manual"))
    op.create_table(
        "project_idp_groups",
        sa.Column("project_id", sa.String(36),
                  sa.ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("provider", sa.String(16), primary_key=True),
        sa.Column("group_value", sa.String(1024), primary_key=True),
    )


def downgrade() -> None:
    op.drop_table("project_idp_groups")
    with op.batch_alter_table("project_members", schema=None) as batch_op:
        batch_op.drop_column("source")
    op.drop_index("ix_user_identities_user_id", table_name="user_identities")
    op.drop_table("user_identities")
    with op.batch_alter_table("users", schema=None) as batch_op:
        for column in ("disabled_reason", "last_login_at", "email_verified", "email",
                       "display_name", "source"):
            batch_op.drop_column(column)
