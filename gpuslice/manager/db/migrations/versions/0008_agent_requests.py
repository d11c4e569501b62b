"""agent_requests: one table for every request to an agent (replaces log, exec, commit requests)

Requests are short-lived (a waiter deletes its own within seconds to minutes), so the open ones
are not carried over: a waiter that was waiting across the upgrade has gone with its manager.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.schema import SchemaItem

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_OLD = ("log_requests", "exec_requests", "commit_requests")


def upgrade() -> None:
    op.create_table(
        "agent_requests",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("node_id", sa.String(length=36), nullable=False),
        sa.Column("session_id", sa.String(length=36), nullable=True),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("answered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("answer", sa.JSON(), nullable=True),
        *_keys("agent_requests"),
    )
    with op.batch_alter_table("agent_requests", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_agent_requests_node_id"), ["node_id"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_agent_requests_session_id"), ["session_id"], unique=False
        )
    for name in _OLD:
        with op.batch_alter_table(name, schema=None) as batch_op:
            batch_op.drop_index(batch_op.f(f"ix_{name}_node_id"))
        op.drop_table(name)


def downgrade() -> None:
    _old_table(
        "log_requests",
        sa.Column("tail", sa.Integer(), nullable=False),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("content", sa.Text(), nullable=True),
        sa.Column("truncated", sa.Boolean(), nullable=False),
    )
    _old_table(
        "exec_requests",
        sa.Column("command", sa.JSON(), nullable=False),
        sa.Column("timeout", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("stdout", sa.Text(), nullable=True),
        sa.Column("stderr", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
    )
    _old_table(
        "commit_requests",
        sa.Column("reference", sa.String(length=255), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("image_id", sa.String(length=128), nullable=True),
        sa.Column("size", sa.BigInteger(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
    )
    with op.batch_alter_table("agent_requests", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_agent_requests_session_id"))
        batch_op.drop_index(batch_op.f("ix_agent_requests_node_id"))
    op.drop_table("agent_requests")


def _keys(table: str) -> list[SchemaItem]:
    return [
        sa.ForeignKeyConstraint(
            ["node_id"], ["nodes.id"], name=op.f(f"fk_{table}_node_id_nodes"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["session_id"], ["sessions.id"], name=op.f(f"fk_{table}_session_id_sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f(f"pk_{table}")),
    ]


def _old_table(name: str, *columns: sa.Column) -> None:  # type: ignore[type-arg]
    """One of the three tables 0008 replaced, as 0001/0004/0006 made it."""
    op.create_table(
        name,
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("session_id", sa.String(length=36), nullable=False),
        sa.Column("node_id", sa.String(length=36), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        *columns,
        *_keys(name),
    )
    with op.batch_alter_table(name, schema=None) as batch_op:
        batch_op.create_index(batch_op.f(f"ix_{name}_node_id"), ["node_id"], unique=False)
