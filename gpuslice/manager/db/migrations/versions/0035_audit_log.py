"""audit_log and audit_state (issue 43): one row per change, refusal, login and platform
decision, sealed into a keyed hash chain. Triggers make the table append-only on SQLite and
PostgreSQL alike: an UPDATE may only seal a row not sealed yet, a DELETE only happens while
``audit_state.purging`` is 1 (the retention purge's own transaction).

Revision ID: 0035
Revises: 0034
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0035"
down_revision: str | None = "0034"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_FIXED = ("seq", "id", "at", "actor_type", "actor_id", "actor_name", "via", "token_id",
          "action", "outcome", "reason", "target_type", "target_id", "source_ip", "user_agent",
          "request_id", "details")
_NO_UPDATE = "audit_log rows are append-only (only an unsealed row may be sealed)"
_NO_DELETE = "audit_log rows are deleted only by the retention purge"


def upgrade() -> None:
    seq = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    op.create_table(
        "audit_log",
        sa.Column("seq", seq, primary_key=True, autoincrement=True),
        sa.Column("id", sa.String(36), nullable=False, unique=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor_type", sa.String(16), nullable=False),
        sa.Column("actor_id", sa.String(64)),
        sa.Column("actor_name", sa.String(128)),
        sa.Column("via", sa.String(16)),
        sa.Column("token_id", sa.String(36)),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("reason", sa.String(64)),
        sa.Column("target_type", sa.String(32)),
        sa.Column("target_id", sa.String(128)),
        sa.Column("source_ip", sa.String(64)),
        sa.Column("user_agent", sa.String(256)),
        sa.Column("request_id", sa.String(64)),
        sa.Column("details", sa.Text()),
        sa.Column("seal_pos", sa.BigInteger(), unique=True),
        sa.Column("prev_hash", sa.String(64)),
        sa.Column("hash", sa.String(64)),
        sa.Column("key_id", sa.String(16)),
        sa.Column("sealed_at", sa.DateTime(timezone=True)),
        sqlite_autoincrement=True,  # seq never goes back, not even after a purge
    )
    op.create_index("ix_audit_log_at", "audit_log", ["at"])
    op.create_index("ix_audit_log_actor_id_at", "audit_log", ["actor_id", "at"])
    op.create_index("ix_audit_log_actor_name_at", "audit_log", ["actor_name", "at"])
    op.create_index("ix_audit_log_action_at", "audit_log", ["action", "at"])
    op.create_index("ix_audit_log_target", "audit_log", ["target_type", "target_id"])
    op.create_index("ix_audit_log_request_id", "audit_log", ["request_id"])
    op.create_table(
        "audit_state",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("head_pos", sa.BigInteger(), nullable=False),
        sa.Column("head_hash", sa.String(64), nullable=False),
        sa.Column("purging", sa.Integer(), nullable=False),
    )
    if op.get_bind().dialect.name == "postgresql":
        _postgres_triggers()
    else:
        _sqlite_triggers()


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS audit_log_append_only ON audit_log")
        op.execute("DROP FUNCTION IF EXISTS audit_log_append_only()")
    else:
        op.execute("DROP TRIGGER IF EXISTS audit_log_no_update")
        op.execute("DROP TRIGGER IF EXISTS audit_log_no_delete")
    op.drop_table("audit_state")
    for name in ("request_id", "target", "action_at", "actor_name_at", "actor_id_at", "at"):
        op.drop_index(f"ix_audit_log_{name}", table_name="audit_log")
    op.drop_table("audit_log")


def _sqlite_triggers() -> None:
    changed = " OR ".join(f"NEW.{c} IS NOT OLD.{c}" for c in _FIXED)
    op.execute(f"""
        CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log
        WHEN OLD.seal_pos IS NOT NULL OR {changed}
        BEGIN SELECT RAISE(ABORT, '{_NO_UPDATE}'); END""")
    op.execute(f"""
        CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
        WHEN coalesce((SELECT purging FROM audit_state WHERE id = 1), 0) != 1
        BEGIN SELECT RAISE(ABORT, '{_NO_DELETE}'); END""")


def _postgres_triggers() -> None:
    changed = " OR ".join(f"NEW.{c} IS DISTINCT FROM OLD.{c}" for c in _FIXED)
    op.execute(f"""
        CREATE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP = 'DELETE' THEN
                IF coalesce((SELECT purging FROM audit_state WHERE id = 1), 0) != 1 THEN
                    RAISE EXCEPTION '{_NO_DELETE}';
                END IF;
                RETURN OLD;
            END IF;
            IF OLD.seal_pos IS NOT NULL OR {changed} THEN
                RAISE EXCEPTION '{_NO_UPDATE}';
            END IF;
            RETURN NEW;
        END $$""")
    op.execute("""
        CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE ON audit_log
        FOR EACH ROW EXECUTE FUNCTION audit_log_append_only()""")
