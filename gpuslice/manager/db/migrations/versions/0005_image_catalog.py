"""image catalog: image details, visibility and tombstones; per-node presence; aliases; rescan

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Rows so far are the admin allow list: they stay allowed and public.
    with op.batch_alter_table("images", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("allowed", sa.Boolean(), nullable=False, server_default=sa.true())
        )
        batch_op.add_column(sa.Column("image_id", sa.String(length=128), nullable=True))
        batch_op.add_column(sa.Column("size", sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column("labels", sa.JSON(), nullable=False, server_default="{}"))
        batch_op.add_column(
            sa.Column("public", sa.Boolean(), nullable=False, server_default=sa.true())
        )
        batch_op.add_column(sa.Column("owner_id", sa.String(length=36), nullable=True))
        batch_op.add_column(sa.Column("origin_session_id", sa.String(length=36), nullable=True))
        batch_op.add_column(sa.Column("removed_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.create_index(batch_op.f("ix_images_owner_id"), ["owner_id"], unique=False)
        batch_op.create_foreign_key(
            batch_op.f("fk_images_owner_id_users"), "users", ["owner_id"], ["id"],
            ondelete="SET NULL",
        )
    with op.batch_alter_table("images", schema=None) as batch_op:
        batch_op.alter_column("allowed", server_default=None)
        batch_op.alter_column("labels", server_default=None)
        batch_op.alter_column("public", server_default=None)

    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("rescan", sa.BigInteger(), nullable=False, server_default="0")
        )
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.alter_column("rescan", server_default=None)

    op.create_table(
        "image_nodes",
        sa.Column("image_name", sa.String(length=255), nullable=False),
        sa.Column("node_id", sa.String(length=36), nullable=False),
        sa.Column("image_id", sa.String(length=128), nullable=True),
        sa.Column("size", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(
            ["image_name"], ["images.name"], name=op.f("fk_image_nodes_image_name_images"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["node_id"], ["nodes.id"], name=op.f("fk_image_nodes_node_id_nodes"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("image_name", "node_id", name=op.f("pk_image_nodes")),
    )
    with op.batch_alter_table("image_nodes", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_image_nodes_node_id"), ["node_id"], unique=False)

    op.create_table(
        "image_aliases",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("reference", sa.String(length=255), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_image_aliases")),
    )


def downgrade() -> None:
    op.drop_table("image_aliases")
    with op.batch_alter_table("image_nodes", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_image_nodes_node_id"))
    op.drop_table("image_nodes")
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.drop_column("rescan")
    op.execute("DELETE FROM images WHERE allowed = false")
    with op.batch_alter_table("images", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("fk_images_owner_id_users"), type_="foreignkey")
        batch_op.drop_index(batch_op.f("ix_images_owner_id"))
        for column in ("removed_at", "origin_session_id", "owner_id", "public", "labels",
                       "size", "image_id", "allowed"):
            batch_op.drop_column(column)
