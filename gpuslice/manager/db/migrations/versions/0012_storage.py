"""storage folders, grants, the model store's index, runs; sessions by GPU memory

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("resource_policies", schema=None) as batch_op:
        batch_op.add_column(sa.Column("max_storage", sa.BigInteger(), nullable=True))
    with op.batch_alter_table("sessions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("gpu_mem", sa.BigInteger(), nullable=True))
        batch_op.add_column(
            sa.Column("folders", sa.JSON(), nullable=False, server_default=sa.text("'[]'"))
        )
    op.create_table(
        "folders",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("scope", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=80), nullable=False),
        sa.Column("owner_id", sa.String(length=36), nullable=True),
        sa.Column("created_at", _TIME, nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=True),
        sa.Column("files", sa.BigInteger(), nullable=True),
        sa.Column("measured_at", _TIME, nullable=True),
        sa.ForeignKeyConstraint(["owner_id"], ["users.id"], name="fk_folders_owner_id_users",
                                ondelete="RESTRICT"),
        sa.PrimaryKeyConstraint("id", name="pk_folders"),
        sa.UniqueConstraint("scope", "name", name="uq_folders_scope_name"),
    )
    op.create_index("ix_folders_owner_id", "folders", ["owner_id"], unique=False)
    op.create_table(
        "folder_grants",
        sa.Column("folder_id", sa.String(length=36), nullable=False),
        sa.Column("user_id", sa.String(length=36), nullable=False),
        sa.Column("permission", sa.String(length=2), nullable=False),
        sa.Column("created_at", _TIME, nullable=False),
        sa.ForeignKeyConstraint(["folder_id"], ["folders.id"],
                                name="fk_folder_grants_folder_id_folders", ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"],
                                name="fk_folder_grants_user_id_users", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("folder_id", "user_id", name="pk_folder_grants"),
    )
    op.create_index("ix_folder_grants_user_id", "folder_grants", ["user_id"], unique=False)
    op.create_table(
        "models",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("owner_id", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("version", sa.String(length=36), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("files", sa.Integer(), nullable=False),
        sa.Column("file_list", sa.JSON(), nullable=False),
        sa.Column("session_id", sa.String(length=36), nullable=True),
        sa.Column("created_at", _TIME, nullable=False),
        sa.Column("completed_at", _TIME, nullable=True),
        sa.ForeignKeyConstraint(["owner_id"], ["users.id"], name="fk_models_owner_id_users",
                                ondelete="RESTRICT"),
        sa.ForeignKeyConstraint(["session_id"], ["sessions.id"],
                                name="fk_models_session_id_sessions", ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id", name="pk_models"),
    )
    op.create_index("ix_models_owner_name", "models", ["owner_id", "name"], unique=False)
    op.create_index("ix_models_session_id", "models", ["session_id"], unique=False)
    op.create_table(
        "runs",
        sa.Column("session_id", sa.String(length=36), nullable=False),
        sa.Column("owner_id", sa.String(length=36), nullable=False),
        sa.Column("script", sa.Text(), nullable=False),
        sa.Column("args", sa.JSON(), nullable=False),
        sa.Column("save_dir", sa.Text(), nullable=False),
        sa.Column("created_at", _TIME, nullable=False),
        sa.ForeignKeyConstraint(["session_id"], ["sessions.id"],
                                name="fk_runs_session_id_sessions", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("session_id", name="pk_runs"),
    )
    op.create_index("ix_runs_owner_id", "runs", ["owner_id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_runs_owner_id", table_name="runs")
    op.drop_table("runs")
    op.drop_index("ix_models_session_id", table_name="models")
    op.drop_index("ix_models_owner_name", table_name="models")
    op.drop_table("models")
    op.drop_index("ix_folder_grants_user_id", table_name="folder_grants")
    op.drop_table("folder_grants")
    op.drop_index("ix_folders_owner_id", table_name="folders")
    op.drop_table("folders")
    with op.batch_alter_table("sessions", schema=None) as batch_op:
        batch_op.drop_column("folders")
        batch_op.drop_column("gpu_mem")
    with op.batch_alter_table("resource_policies", schema=None) as batch_op:
        batch_op.drop_column("max_storage")
