"""The audit log's tables (``services/audit``): rows are appended, sealed once, never changed."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from gpuslice.manager.db.base import Base, UTCDateTime

# SQLite numbers rows itself only for an INTEGER PRIMARY KEY; PostgreSQL gets a bigint sequence.
_SEQ = BigInteger().with_variant(Integer(), "sqlite")

#: The columns a seal writes (once, on a row that has none); every other column never changes.
SEAL_COLUMNS = ("seal_pos", "prev_hash", "hash", "key_id", "sealed_at")


class AuditRow(Base):
    """One thing that happened: who did what to what, with which outcome, from where."""

    __tablename__ = "audit_log"
    __table_args__ = (
        Index("ix_audit_log_actor_id_at", "actor_id", "at"),
        Index("ix_audit_log_actor_name_at", "actor_name", "at"),  # failed logins: a name
        Index("ix_audit_log_action_at", "action", "at"),
        Index("ix_audit_log_target", "target_type", "target_id"),
        # seq never goes back, not even once a purge emptied the table (SQLite would reuse)
        {"sqlite_autoincrement": True},
    )

    seq: Mapped[int] = mapped_column(_SEQ, primary_key=True, autoincrement=True)
    id: Mapped[str] = mapped_column(String(36), unique=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)
    actor_type: Mapped[str] = mapped_column(String(16))  # user | node | system | anonymous
    actor_id: Mapped[str | None] = mapped_column(String(64))
    actor_name: Mapped[str | None] = mapped_column(String(128))
    via: Mapped[str | None] = mapped_column(String(16))  # login_token | api_token | node | ...
    token_id: Mapped[str | None] = mapped_column(String(36))  # no foreign key: tokens go
    action: Mapped[str] = mapped_column(String(64))
    outcome: Mapped[str] = mapped_column(String(16))  # success | failure | denied
    reason: Mapped[str | None] = mapped_column(String(64))
    target_type: Mapped[str | None] = mapped_column(String(32))
    target_id: Mapped[str | None] = mapped_column(String(128))
    source_ip: Mapped[str | None] = mapped_column(String(64))
    user_agent: Mapped[str | None] = mapped_column(String(256))
    request_id: Mapped[str | None] = mapped_column(String(64), index=True)
    details: Mapped[str | None] = mapped_column(Text)  # canonical JSON; never secrets
    seal_pos: Mapped[int | None] = mapped_column(BigInteger, unique=True)
    prev_hash: Mapped[str | None] = mapped_column(String(64))
    hash: Mapped[str | None] = mapped_column(String(64))
    key_id: Mapped[str | None] = mapped_column(String(16))
    sealed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class AuditStateRow(Base):
    """The chain's head (one row, id 1, made by the first seal) and the purge's guard."""

    __tablename__ = "audit_state"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    head_pos: Mapped[int] = mapped_column(BigInteger, default=0)
    head_hash: Mapped[str] = mapped_column(String(64))
    # Set to 1 by the retention purge inside its own transaction: the only DELETE allowed.
    purging: Mapped[int] = mapped_column(Integer, default=0)
