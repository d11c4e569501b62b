"""monitoring: usage series, minutes, packed history, daily accounting; idle rules in policies

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_SUMS = ("cpu_ms", "cpu_sum", "mem_sum", "gpu_ms", "gpu_mem_sum", "gpu_util_sum")
_POINT = ("covered_ms", "fgpu_sum", "cpu_ms", "cpu_sum", "mem_sum", "mem_max", "gpu_ms",
          "gpu_mem_sum", "gpu_mem_max", "gpu_util_sum")


def _big(name: str) -> sa.Column:  # type: ignore[type-arg]
    return sa.Column(name, sa.BigInteger(), nullable=False)


def upgrade() -> None:
    with op.batch_alter_table("resource_policies", schema=None) as batch_op:
        batch_op.add_column(sa.Column("idle_rule", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("max_lifetime", sa.Integer(), nullable=True))
    op.create_table(
        "usage_series",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("session_id", sa.String(length=36), nullable=False),
        _big("revision"),
        sa.Column("owner_id", sa.String(length=36), nullable=False),
        sa.Column("node_id", sa.String(length=36), nullable=True),
        _big("gpu"),
        sa.Column("first_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("reading_ms", sa.BigInteger(), nullable=True),
        sa.Column("cpu", sa.BigInteger(), nullable=True),
        _big("mem"),
        sa.Column("gpus", sa.JSON(), nullable=True),
        sa.Column("minute", sa.BigInteger(), nullable=True),
        _big("covered_ms"),
        *(_big(name) for name in _SUMS[:3]),
        _big("mem_max"),
        *(_big(name) for name in _SUMS[3:5]),
        _big("gpu_mem_max"),
        _big("gpu_util_sum"),
        sa.Column("gpu_idle_since", sa.DateTime(timezone=True), nullable=True),
        sa.Column("cpu_idle_since", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["session_id"], ["sessions.id"],
            name=op.f("fk_usage_series_session_id_sessions"), ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_usage_series")),
        sa.UniqueConstraint("session_id", name=op.f("uq_usage_series_session_id")),
    )
    with op.batch_alter_table("usage_series", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_usage_series_owner_id"), ["owner_id"], unique=False)
    op.create_table(
        "usage_minutes",
        sa.Column("series_id", sa.Integer(), nullable=False),
        sa.Column("minute", sa.BigInteger(), nullable=False),
        *(_big(name) for name in _POINT),
        sa.ForeignKeyConstraint(
            ["series_id"], ["usage_series.id"],
            name=op.f("fk_usage_minutes_series_id_usage_series"), ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("series_id", "minute", name=op.f("pk_usage_minutes")),
    )
    op.create_table(
        "usage_history",
        sa.Column("series_id", sa.Integer(), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("start", sa.BigInteger(), nullable=False),
        sa.Column("points", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(
            ["series_id"], ["usage_series.id"],
            name=op.f("fk_usage_history_series_id_usage_series"), ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("series_id", "step", "start", name=op.f("pk_usage_history")),
    )
    op.create_table(
        "usage_daily",
        sa.Column("series_id", sa.Integer(), nullable=False),
        sa.Column("day", sa.Integer(), nullable=False),
        sa.Column("owner_id", sa.String(length=36), nullable=False),
        _big("covered_ms"),
        _big("fgpu_sum"),
        *(_big(name) for name in _SUMS),
        sa.ForeignKeyConstraint(
            ["series_id"], ["usage_series.id"],
            name=op.f("fk_usage_daily_series_id_usage_series"), ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("series_id", "day", name=op.f("pk_usage_daily")),
    )
    with op.batch_alter_table("usage_daily", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_usage_daily_day"), ["day"], unique=False)
        batch_op.create_index("ix_usage_daily_owner_day", ["owner_id", "day"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("usage_daily", schema=None) as batch_op:
        batch_op.drop_index("ix_usage_daily_owner_day")
        batch_op.drop_index(batch_op.f("ix_usage_daily_day"))
    op.drop_table("usage_daily")
    op.drop_table("usage_history")
    op.drop_table("usage_minutes")
    with op.batch_alter_table("usage_series", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_usage_series_owner_id"))
    op.drop_table("usage_series")
    with op.batch_alter_table("resource_policies", schema=None) as batch_op:
        batch_op.drop_column("max_lifetime")
        batch_op.drop_column("idle_rule")
