"""app_entries: a login handed to one app's origin (apps served at
``<app>--<session>.<apps domain>``): a single-use code, then that origin's own cookie.

Nothing existing changes; the table starts empty (a browser enters an app again after the
upgrade, by the manager's redirect).

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "app_entries",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("login_id", sa.String(36), nullable=False),
        sa.Column("session_id", sa.String(36), nullable=False),
        sa.Column("app", sa.String(40), nullable=False),
        sa.Column("code_hash", sa.String(64), nullable=False),
        sa.Column("code_expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("cookie_hash", sa.String(64), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["login_id"], ["api_tokens.id"], ondelete="CASCADE",
                                name=op.f("fk_app_entries_login_id_api_tokens")),
        sa.ForeignKeyConstraint(["session_id"], ["sessions.id"], ondelete="CASCADE",
                                name=op.f("fk_app_entries_session_id_sessions")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_app_entries")),
        sa.UniqueConstraint("code_hash", name=op.f("uq_app_entries_code_hash")),
        sa.UniqueConstraint("cookie_hash", name=op.f("uq_app_entries_cookie_hash")),
    )
    op.create_index(op.f("ix_app_entries_login_id"), "app_entries", ["login_id"])
    op.create_index(op.f("ix_app_entries_session_id"), "app_entries", ["session_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_app_entries_session_id"), table_name="app_entries")
    op.drop_index(op.f("ix_app_entries_login_id"), table_name="app_entries")
    op.drop_table("app_entries")
