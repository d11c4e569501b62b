"""Single sign-on (issue 42): sign-ins in flight at the OpenID provider, the provider's sessions
behind console sign-ins (refresh tokens encrypted), CLI device sign-ins, back-channel logout
token ids seen, CLI loopback codes; api_tokens say which provider session made them.

Revision ID: 0040
Revises: 0038
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0040"
down_revision: str | None = "0038"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "sso_logins",
        sa.Column("state_hash", sa.String(64), primary_key=True),
        sa.Column("binder_hash", sa.String(64), nullable=False),
        sa.Column("secrets_enc", sa.Text(), nullable=False),
        sa.Column("next_path", sa.String(4096), nullable=False),
        sa.Column("purpose", sa.String(16), nullable=False),
        sa.Column("client_ip", sa.String(64), nullable=True),
        sa.Column("created_at", _TZ, nullable=False),
        sa.Column("expires_at", _TZ, nullable=False),
    )
    op.create_index("ix_sso_logins_expires_at", "sso_logins", ["expires_at"])
    op.create_index("ix_sso_logins_client_ip", "sso_logins", ["client_ip"])
    op.create_table(
        "sso_sessions",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("user_id", sa.String(36), sa.ForeignKey("users.id", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("provider", sa.String(16), nullable=False),
        sa.Column("subject", sa.String(255), nullable=False),
        sa.Column("idp_sid", sa.String(255), nullable=True),
        sa.Column("refresh_token_enc", sa.Text(), nullable=True),
        sa.Column("id_token_enc", sa.Text(), nullable=True),
        sa.Column("created_at", _TZ, nullable=False),
        sa.Column("last_refresh_at", _TZ, nullable=False),
        sa.Column("claimed_until", _TZ, nullable=True),
        sa.Column("ended_at", _TZ, nullable=True),
        sa.Column("ended_reason", sa.String(64), nullable=True),
    )
    for column in ("user_id", "subject", "idp_sid", "last_refresh_at"):
        op.create_index(f"ix_sso_sessions_{column}", "sso_sessions", [column])
    op.create_table(
        "device_logins",
        sa.Column("device_code_hash", sa.String(64), primary_key=True),
        sa.Column("user_code", sa.String(16), nullable=False, unique=True),
        sa.Column("client_host", sa.String(255), nullable=False),
        sa.Column("client_os_user", sa.String(255), nullable=False),
        sa.Column("client_ip", sa.String(64), nullable=True),
        sa.Column("created_at", _TZ, nullable=False),
        sa.Column("expires_at", _TZ, nullable=False),
        sa.Column("interval", sa.Integer(), nullable=False),
        sa.Column("last_poll_at", _TZ, nullable=True),
        sa.Column("approved_by", sa.String(36),
                  sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=True),
        sa.Column("approved_at", _TZ, nullable=True),
        sa.Column("approved_ip", sa.String(64), nullable=True),
        sa.Column("sso_session_id", sa.String(36), nullable=True),
        sa.Column("denied_at", _TZ, nullable=True),
    )
    op.create_index("ix_device_logins_expires_at", "device_logins", ["expires_at"])
    op.create_table(
        "cli_logins",
        sa.Column("code_hash", sa.String(64), primary_key=True),
        sa.Column("user_id", sa.String(36), sa.ForeignKey("users.id", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("code_challenge", sa.String(128), nullable=False),
        sa.Column("client_host", sa.String(255), nullable=False),
        sa.Column("sso_session_id", sa.String(36), nullable=True),
        sa.Column("expires_at", _TZ, nullable=False),
    )
    op.create_index("ix_cli_logins_expires_at", "cli_logins", ["expires_at"])
    op.create_table(
        "sso_logouts_seen",
        sa.Column("jti_hash", sa.String(64), primary_key=True),
        sa.Column("expires_at", _TZ, nullable=False),
    )
    op.create_index("ix_sso_logouts_seen_expires_at", "sso_logouts_seen", ["expires_at"])
    op.add_column("api_tokens", sa.Column("sso_session_id", sa.String(36), nullable=True))
    op.create_index("ix_api_tokens_sso_session_id", "api_tokens", ["sso_session_id"])


def downgrade() -> None:
    op.drop_index("ix_api_tokens_sso_session_id", table_name="api_tokens")
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.drop_column("sso_session_id")
    op.drop_index("ix_cli_logins_expires_at", table_name="cli_logins")
    op.drop_table("cli_logins")
    op.drop_index("ix_sso_logouts_seen_expires_at", table_name="sso_logouts_seen")
    op.drop_table("sso_logouts_seen")
    op.drop_index("ix_device_logins_expires_at", table_name="device_logins")
    op.drop_table("device_logins")
    for column in ("user_id", "subject", "idp_sid", "last_refresh_at"):
        op.drop_index(f"ix_sso_sessions_{column}", table_name="sso_sessions")
    op.drop_table("sso_sessions")
    op.drop_index("ix_sso_logins_client_ip", table_name="sso_logins")
    op.drop_index("ix_sso_logins_expires_at", table_name="sso_logins")
    op.drop_table("sso_logins")
