"""resource_presets: admin-defined CPU/memory/GPU sets for the launch dialog, with a default
"small" one (0.25 CPU, 1 GiB) so that a session asked for by its GPU slice alone is limited by
the GPU, not by the CPU of a small node.

The default is added here only to a platform in use (it has users); a new one gets it at its
first start, with its first admin (services/users.py ensure_admin), so that a database that is
only migrated stays empty (a backup is restored into it with exactly its own rows).

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-26
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    table = op.create_table(
        "resource_presets",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("cpu", sa.BigInteger(), nullable=False),
        sa.Column("mem", sa.BigInteger(), nullable=False),
        sa.Column("gpu", sa.BigInteger(), nullable=False),
        sa.Column("is_default", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_resource_presets")),
        sa.UniqueConstraint("name", name=op.f("uq_resource_presets_name")),
    )
    if op.get_bind().execute(sa.text("SELECT COUNT(*) FROM users")).scalar():
        op.bulk_insert(table, [{
            "id": str(uuid.uuid4()), "name": "small", "cpu": 250, "mem": 1024**3, "gpu": 0,
            "is_default": True, "created_at": datetime.now(UTC),
        }])


def downgrade() -> None:
    op.drop_table("resource_presets")
