"""The hash chain: sealing rows in commit order, and checking the chain.

Rows are written unsealed (``seal_pos`` NULL). :func:`seal` takes the unsealed rows that are
committed, in ``seq`` order, and gives each the next position, the previous row's hash and its
own: ``HMAC-SHA256(key, prev_hash || 0x1f || canonical JSON of the row without its seal)``. A
row that commits after a later ``seq`` was sealed just gets a later position. One sealer at a
time: a PostgreSQL advisory lock held by the sealing transaction (SQLite has one writer).
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import func, select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common import key_files
from gpuslice.manager.db.audit_models import SEAL_COLUMNS, AuditRow, AuditStateRow
from gpuslice.manager.db.base import utcnow

KEY_FILE = "audit-chain.key"
GENESIS = hashlib.sha256(b"gpuslice audit log").hexdigest()
BATCH = 500
_LOCK = 0x6175646974  # "audit": the advisory lock of the sealer on PostgreSQL
_ID_LABEL = b"gpuslice audit key id"


@dataclass(frozen=True, slots=True)
class ChainKey:
    secret: bytes

    @property
    def id(self) -> str:
        return hmac.new(self.secret, _ID_LABEL, hashlib.sha256).hexdigest()[:16]


class ChainKeyError(Exception):
    """The chain's key cannot be read (the message says what to do)."""


def load_key(data_dir: Path, *, create: bool = False) -> ChainKey:
    """``<data_dir>/audit-chain.key`` (64 hex digits, mode 0600), made when ``create``."""
    path = data_dir / KEY_FILE
    if create:
        key_files.create(path)
    try:
        secret = key_files.read(path)
    except FileNotFoundError:
        raise ChainKeyError(f"there is no audit chain key at {path}: copy the file "
                            "audit-chain.key of this platform's data directory there") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ChainKeyError(f"{path} is a symbolic link: put the key file itself "
                                "there") from None
        raise ChainKeyError(f"cannot read the audit chain key {path}: "
                            f"{exc.strerror}") from None
    if secret is None:
        raise ChainKeyError(f"{path} is not an audit chain key (it holds 64 hexadecimal digits)")
    return ChainKey(secret)


def digest(key: ChainKey, prev_hash: str, row: AuditRow) -> str:
    body = prev_hash.encode() + b"\x1f" + canonical(row).encode()
    return hmac.new(key.secret, body, hashlib.sha256).hexdigest()


def canonical(row: AuditRow) -> str:
    """The row without its seal, as sorted compact JSON (times as RFC 3339 µs ``Z``)."""
    values: dict[str, Any] = {}
    for column in AuditRow.__table__.columns:
        if column.name in SEAL_COLUMNS:
            continue
        value = getattr(row, column.name)
        values[column.name] = _time(value) if isinstance(value, datetime) else value
    return json.dumps(values, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


async def seal(db: AsyncSession, key: ChainKey, batch: int = BATCH) -> int:
    """Seal up to ``batch`` committed rows in ``seq`` order; how many (committed)."""
    pending = await db.scalar(select(AuditRow.seq).where(AuditRow.seal_pos.is_(None)).limit(1))
    await db.rollback()
    if pending is None:  # the usual pass: nothing to seal, no lock taken
        return 0
    state = await _lock_head(db)
    rows = (await db.scalars(select(AuditRow).where(AuditRow.seal_pos.is_(None))
                             .order_by(AuditRow.seq).limit(batch))).all()
    now = utcnow()
    pos, head = state.head_pos, state.head_hash
    for row in rows:
        pos += 1
        row.seal_pos, row.prev_hash, row.key_id, row.sealed_at = pos, head, key.id, now
        row.hash = head = digest(key, head, row)
    state.head_pos, state.head_hash = pos, head
    await db.commit()
    return len(rows)


async def _lock_head(db: AsyncSession) -> AuditStateRow:
    """The chain's head, locked for this transaction: one sealer at a time, on PostgreSQL
    (an advisory lock, then the row's) and on SQLite (the write lock, taken before any row
    is read, so a second sealer reads what the first sealed)."""
    dialect = db.bind.dialect.name
    if dialect == "postgresql":
        await db.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _LOCK})
    made = (pg_insert if dialect == "postgresql" else sqlite_insert)(AuditStateRow).values(
        id=1, head_pos=0, head_hash=GENESIS, purging=0).on_conflict_do_nothing()
    await db.execute(made)
    await db.execute(update(AuditStateRow).where(AuditStateRow.id == 1)
                     .values(purging=AuditStateRow.purging))
    state = await db.get(AuditStateRow, 1, populate_existing=True)
    assert state is not None  # made just above
    return state


@dataclass(frozen=True, slots=True)
class Verdict:
    sealed_through: int
    unsealed: int
    head_pos: int
    head_hash: str
    intact: bool
    first_break: int | None
    problem: str | None


async def verify(db: AsyncSession, key: ChainKey) -> Verdict:
    """Walk the sealed rows in ``seal_pos`` order: the first that was changed, deleted or
    inserted (or rows cut off after the recorded head) breaks the chain."""
    state = await db.get(AuditStateRow, 1)
    head_pos, head_hash = (state.head_pos, state.head_hash) if state else (0, GENESIS)
    unsealed = await db.scalar(select(func.count()).select_from(AuditRow)
                               .where(AuditRow.seal_pos.is_(None))) or 0
    expect_pos, expect_prev = await _start(db)
    last = expect_pos - 1
    result = await db.stream_scalars(select(AuditRow).where(AuditRow.seal_pos.is_not(None))
                                     .order_by(AuditRow.seal_pos))
    async for row in result:
        assert row.seal_pos is not None
        problem = _check(key, row, expect_pos, expect_prev)
        if problem is not None:
            return Verdict(last, unsealed, head_pos, head_hash, False, expect_pos, problem)
        last, expect_pos, expect_prev = row.seal_pos, row.seal_pos + 1, row.hash or ""
    if last != head_pos or (last and expect_prev != head_hash):
        return Verdict(last, unsealed, head_pos, head_hash, False, last + 1,
                       f"the chain ends at position {last} but its head is {head_pos}: "
                       "the rows after it were deleted")
    return Verdict(last, unsealed, head_pos, head_hash, True, None, None)


async def _start(db: AsyncSession) -> tuple[int, str]:
    """Where the chain in the table begins: after the newest purge's checkpoint (a sealed
    ``audit.purge`` row names the last position it deleted and that row's hash), else at 1."""
    details = await db.scalar(
        select(AuditRow.details).where(AuditRow.action == "audit.purge",
                                       AuditRow.seal_pos.is_not(None))
        .order_by(AuditRow.seal_pos.desc()).limit(1))
    if details is None:
        return 1, GENESIS
    checkpoint = json.loads(details)
    return int(checkpoint["through_pos"]) + 1, str(checkpoint["through_hash"])


def _check(key: ChainKey, row: AuditRow, pos: int, prev: str) -> str | None:
    if row.seal_pos != pos:
        return (f"position {pos} is missing (the next row is at {row.seal_pos}): "
                f"{row.seal_pos - pos if row.seal_pos else 0} row(s) deleted")
    if row.prev_hash != prev:
        return f"the row at position {pos} (id {row.id}) does not follow the one before it"
    if row.key_id != key.id:
        return f"the row at position {pos} (id {row.id}) was sealed with another key"
    if not hmac.compare_digest(row.hash or "", digest(key, prev, row)):
        return (f"the row at position {pos} (id {row.id}) does not match its hash: it was "
                "changed, or inserted by someone without the key")
    return None


def _time(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
