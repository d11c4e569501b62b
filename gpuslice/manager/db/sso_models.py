"""Single sign-on's tables (``services/sso``): sign-ins in flight at the provider, the
provider's sessions behind gpuslice's tokens, CLI device sign-ins, logout tokens seen.

Secrets are never stored as they are: states, binder cookies, device codes and logout-token ids
as SHA-256 digests, the nonce, PKCE verifier and the provider's tokens encrypted (Fernet, the
key in ``<data_dir>/auth-secrets.key``).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from gpuslice.manager.db.base import Base, UTCDateTime, new_id, utcnow

ID = String(36)


class SsoLoginRow(Base):
    """A sign-in sent to the provider and not back yet: single use, deleted by its callback."""

    __tablename__ = "sso_logins"

    state_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    binder_hash: Mapped[str] = mapped_column(String(64))
    secrets_enc: Mapped[str] = mapped_column(Text)  # {"nonce", "verifier"}, encrypted
    next_path: Mapped[str] = mapped_column(String(4096))
    purpose: Mapped[str] = mapped_column(String(16))  # browser
    client_ip: Mapped[str | None] = mapped_column(String(64), index=True)  # the start's
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)


class SsoSessionRow(Base):
    """The provider's session behind one console sign-in: its refresh token (re-checked every
    ``auth.oidc.recheck_interval``) and its ``sid`` (back-channel logout). The gpuslice tokens
    made from it carry its id (``api_tokens.sso_session_id``) and end with it."""

    __tablename__ = "sso_sessions"

    id: Mapped[str] = mapped_column(ID, primary_key=True, default=new_id)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    provider: Mapped[str] = mapped_column(String(16))
    subject: Mapped[str] = mapped_column(String(255), index=True)
    idp_sid: Mapped[str | None] = mapped_column(String(255), index=True)
    refresh_token_enc: Mapped[str | None] = mapped_column(Text)
    id_token_enc: Mapped[str | None] = mapped_column(Text)  # the logout's id_token_hint
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_refresh_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
    claimed_until: Mapped[datetime | None] = mapped_column(UTCDateTime)  # one re-check at once
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    ended_reason: Mapped[str | None] = mapped_column(String(64))


class DeviceLoginRow(Base):
    """``gpuslice login --sso --device``: a code a signed-in user approves on ``/device``;
    the CLI's next poll gets a token and the row is deleted."""

    __tablename__ = "device_logins"

    device_code_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_code: Mapped[str] = mapped_column(String(16), unique=True)
    client_host: Mapped[str] = mapped_column(String(255))
    client_os_user: Mapped[str] = mapped_column(String(255))
    client_ip: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)
    interval: Mapped[int] = mapped_column(Integer)
    last_poll_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    approved_by: Mapped[str | None] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"))
    approved_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    approved_ip: Mapped[str | None] = mapped_column(String(64))
    sso_session_id: Mapped[str | None] = mapped_column(String(36))
    denied_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class CliLoginRow(Base):
    """``gpuslice login --sso`` through a browser: a code the CLI's loopback listener got,
    exchanged once, within a minute, with the PKCE verifier only the CLI holds."""

    __tablename__ = "cli_logins"

    code_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    code_challenge: Mapped[str] = mapped_column(String(128))
    client_host: Mapped[str] = mapped_column(String(255))
    sso_session_id: Mapped[str | None] = mapped_column(String(36))
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)


class SsoLogoutSeenRow(Base):
    """A back-channel logout token's ``jti``, kept until its replay window closes."""

    __tablename__ = "sso_logouts_seen"

    jti_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)
