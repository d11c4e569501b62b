"""The backup file: gzip'd JSON Lines, portable between SQLite and PostgreSQL.

Line 1 is the `Header` (format, the schema revision, every table with its columns' portable
kinds and row count, the file areas with their entry counts, the manager's settings); then each
table's rows in header order, one JSON array per row in column order; then each area's entries
(format 2, see `members.py`: an entry line, for a file its content as base64 chunk lines and a
line with its SHA-256); last the `Trailer` (total rows, entries, bytes and, from format 3, the
HMAC-SHA256 of every line before it under the backup key: see `keys.py`). A file that is
truncated, cut at a line, damaged, of another format or not matching its MAC is refused before
anything is written to a database or a directory.

Values are stored by *kind*, the same on every engine: ``int``, ``float``, ``decimal`` (a string,
exact), ``bool``, ``text``, ``datetime`` (ISO 8601 in UTC), ``date``, ``time``, ``bytes``
(base64), ``uuid`` (a string) and ``json`` (the column's JSON text as the database holds it, so
SQL NULL and JSON ``null`` stay apart).
"""

from __future__ import annotations

import base64
import datetime as dt
import gzip
import hmac
import json
import zlib
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import IO, Any, Literal
from uuid import UUID

from pydantic import BaseModel, Field, ValidationError
from sqlalchemy import types as sqltypes
from sqlalchemy.types import TypeEngine

from gpuslice.manager.backup.errors import BackupError as BackupError
from gpuslice.manager.backup.errors import KeyUnavailable
from gpuslice.manager.backup.keys import BackupKey
from gpuslice.manager.backup.keys import load as load_key

FORMAT = "gpuslice-backup"
FORMAT_VERSION = 3
READABLE = (1, 2, 3)  # format 1: the database alone (no file areas); 3: signed
SIGNED = 3  # the first format with a MAC
MAX_LINE = 64 * 1024**2  # a longer line is damage, never read into memory whole

Kind = Literal["int", "float", "decimal", "bool", "text", "datetime", "date", "time", "bytes",
               "uuid", "json"]


class ColumnInfo(BaseModel):
    name: str
    kind: Kind


class TableInfo(BaseModel):
    name: str
    columns: list[ColumnInfo]
    rows: int = Field(ge=0)


class AreaInfo(BaseModel):
    """A directory tree the platform keeps beside its database, and what the backup holds of it."""

    name: Literal["data", "storage", "models"]
    source: str = Field(description="Where it was on the backed-up machine.")
    entries: int = Field(default=0, ge=0, description="Files, directories and links held.")
    bytes: int = Field(default=0, ge=0, description="The files' size when the backup began.")
    top: list[str] = Field(default_factory=list, description="Its top-level names.")
    external: str | None = Field(
        default=None, description="Set when the area lives elsewhere (an S3 model store): "
        "named, not copied.")


class Header(BaseModel):
    format: Literal["gpuslice-backup"]
    format_version: int
    created_at: dt.datetime
    gpuslice_version: str
    revision: str = Field(description="The Alembic revision the database was at.")
    source: str = Field(description="The engine it was taken from: sqlite or postgresql.")
    tables: list[TableInfo]
    settings: dict[str, Any] = Field(
        default_factory=dict, description="The manager's settings, secrets masked."
    )
    areas: list[AreaInfo] = Field(default_factory=list)
    key_id: str | None = Field(
        default=None, description="The id of the backup key its MAC is under (format 3).")

    @property
    def total_rows(self) -> int:
        return sum(t.rows for t in self.tables)

    @property
    def total_entries(self) -> int:
        return sum(a.entries for a in self.areas)


class Trailer(BaseModel):
    end: Literal["gpuslice-backup"]
    rows: int
    entries: int = 0
    bytes: int = 0
    mac: str | None = None  # HMAC-SHA256 of every line before this one (format 3)


def kind_of(column_type: TypeEngine[Any], where: str) -> Kind:
    """The portable kind of a column type (reflected from either engine)."""
    checks: list[tuple[type[TypeEngine[Any]], Kind]] = [
        (sqltypes.JSON, "json"), (sqltypes.Boolean, "bool"), (sqltypes.DateTime, "datetime"),
        (sqltypes.Date, "date"), (sqltypes.Time, "time"), (sqltypes.Integer, "int"),
        (sqltypes.Float, "float"), (sqltypes.Numeric, "decimal"),
        (sqltypes.LargeBinary, "bytes"), (sqltypes.Uuid, "uuid"), (sqltypes.String, "text"),
    ]
    for cls, kind in checks:  # Float before Numeric, Enum (a String) as text
        if isinstance(column_type, cls):
            return kind
    raise BackupError(f"{where} has type {column_type!r}, which backups do not know how to copy")


def encode(kind: Kind, value: Any) -> Any:
    """A database value as JSON (None stays None)."""
    if value is None:
        return None
    if kind == "datetime":
        return _utc(value).isoformat()
    if kind in ("date", "time"):
        return value.isoformat()
    if kind == "decimal":
        return str(value)
    if kind == "bytes":
        return base64.b64encode(value).decode()
    if kind in ("uuid", "json"):
        return str(value)
    return value


def decoder(kind: Kind, timezone: bool) -> Callable[[Any], Any]:
    """From the JSON value back to what the target column takes (naive UTC without time zone)."""
    if kind == "datetime":
        def to_datetime(value: str) -> dt.datetime:
            when = _utc(dt.datetime.fromisoformat(value))
            return when if timezone else when.replace(tzinfo=None)
        return to_datetime
    parsers: dict[str, Callable[[Any], Any]] = {
        "date": dt.date.fromisoformat, "time": dt.time.fromisoformat, "decimal": Decimal,
        "bytes": base64.b64decode, "uuid": UUID,
    }
    return parsers.get(kind, _same)


class Writer:
    """Writes a backup to a file under a temporary name, renamed into place when complete;
    every line but the end marker goes into the MAC under ``key``, which the end marker holds."""

    def __init__(self, path: Path, key: BackupKey) -> None:
        self.path = path
        self.partial = path.with_name(f".{path.name}.partial")
        self._out: gzip.GzipFile | None = None
        self._mac = key.mac()
        self.rows = 0
        self.entries = 0
        self.bytes = 0

    def __enter__(self) -> Writer:
        self.partial.unlink(missing_ok=True)
        raw = self.partial.open("xb")
        self.partial.chmod(0o600)  # it holds password hashes, environments and logs
        self._out = gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6)
        self._raw = raw
        return self

    def header(self, header: Header) -> None:
        self._line(header.model_dump_json())

    def row(self, values: list[Any]) -> None:
        self._line(json.dumps(values, ensure_ascii=False, separators=(",", ":")))
        self.rows += 1

    def entry(self, entry: BaseModel) -> None:
        """An entry of a file area (`members.Entry`); a file's chunks and end follow it."""
        self._line(entry.model_dump_json(exclude_none=True))
        self.entries += 1

    def chunk(self, data: bytes) -> None:
        self._line(json.dumps(base64.b64encode(data).decode()))
        self.bytes += len(data)

    def entry_end(self, end: BaseModel) -> None:
        self._line(end.model_dump_json())

    def finish(self) -> None:
        trailer = Trailer(end=FORMAT, rows=self.rows, entries=self.entries, bytes=self.bytes,
                          mac=self._mac.hexdigest())
        assert self._out is not None
        self._out.write(trailer.model_dump_json().encode() + b"\n")  # the MAC covers the rest
        self._out.close()
        self._raw.flush()
        _fsync(self._raw)
        self._raw.close()
        self._out = None
        self.partial.replace(self.path)

    def __exit__(self, *exc: object) -> None:
        if self._out is not None:  # not finished: leave nothing behind
            self._out.close()
            self._raw.close()
            self.partial.unlink(missing_ok=True)

    def _line(self, text: str) -> None:
        assert self._out is not None
        data = text.encode() + b"\n"
        self._mac.update(data)
        self._out.write(data)


class Reader:
    """Reads a backup: `header`, then `rows(table)` for each table in order, then the areas'
    lines, then `finish`.

    A signed backup (format 3) is read through once, when the reader is made, to check its MAC
    under ``key`` (a `BackupKey`, or the path of one, read only when needed): nothing of it is
    used before that. The reading proper checks the MAC again at `finish`, so a file changed
    between the two readings is refused too. An unsigned backup (formats 1 and 2, made before
    backups were signed) is refused unless ``trust_unsigned``; so is a signed one whose key is
    not at hand (lost with its machine), which is then read without a MAC. A MAC that does not
    match its own key is refused always.
    """

    def __init__(self, path: Path, key: BackupKey | Path, *,
                 trust_unsigned: bool = False) -> None:
        self.path = path
        try:
            self._raw: IO[bytes] = path.open("rb")
        except OSError as exc:
            raise BackupError(f"cannot read {path}: {exc.strerror or exc}") from None
        try:
            self._start(None)
            self.header = self._read_header()
            self.key: BackupKey | None = None
            if self.header.format_version < SIGNED:
                if not trust_unsigned:
                    raise self._unsigned()
            else:
                try:
                    self.key = key if isinstance(key, BackupKey) else load_key(key)
                    self._authenticate(self.key)
                except KeyUnavailable:
                    if not trust_unsigned:  # the key is lost: the admin's word, as unsigned
                        raise
                    self.key = None
                self._start(self.key)
                self.header = self._read_header()
        except BaseException:
            self._raw.close()
            raise

    def close(self) -> None:
        self._file.close()
        self._raw.close()

    def rows(self, table: TableInfo) -> Iterator[list[Any]]:
        width = len(table.columns)
        for _ in range(table.rows):
            values = self._json(f"a row of table {table.name}")
            if not isinstance(values, list) or len(values) != width:
                raise self._damaged(f"a row of table {table.name} does not have {width} values")
            yield values

    def line(self, what: str) -> Any:
        """The next line as JSON (an area's entry, chunk or end: see `members.py`)."""
        return self._json(what)

    def finish(self) -> None:
        trailer = self._trailer(self._next("the end marker", covered=False))
        if trailer.rows != self.header.total_rows:
            raise self._damaged(f"it ends after {trailer.rows} rows, not "
                                f"{self.header.total_rows}")
        if trailer.entries != self.header.total_entries:
            raise self._damaged(f"it ends after {trailer.entries} file entries, not "
                                f"{self.header.total_entries}")
        if self._mac is not None and not hmac.compare_digest(self._mac.hexdigest(),
                                                             trailer.mac or ""):
            raise BackupError(f"{self.path} changed while it was read (its MAC no longer "
                              "matches): nothing was restored; keep the backup where no one "
                              "else can write, and restore it again")

    def damaged(self, detail: str) -> BackupError:
        return self._damaged(detail)

    def _start(self, key: BackupKey | None) -> None:
        """Read from the file's beginning, the MAC (under ``key``) from zero."""
        self._raw.seek(0)
        self._file = gzip.GzipFile(fileobj=self._raw, mode="rb")
        self._mac = key.mac() if key is not None else None
        self._line_no = 0
        self.bytes_read = 0  # of file content, for progress

    def _authenticate(self, key: BackupKey) -> None:
        if self.header.key_id != key.id:
            raise KeyUnavailable(
                f"{self.path} was signed with another backup key (id {self.header.key_id}) "
                f"than {key.source} (id {key.id}): give the key of the platform that made it "
                "with --key FILE; if that key is lost, --trust-unsigned restores without "
                "checking the backup's MAC (only for a backup kept where no one else could "
                "write)")
        self._start(key)
        self._next("its header")
        while not (line := self._next("the end marker", covered=False)).startswith(b'{"end"'):
            assert self._mac is not None
            self._mac.update(line)
        trailer = self._trailer(line)
        try:
            more = self._file.read(1)
        except (OSError, EOFError, zlib.error):
            more = b"?"
        if more:
            raise self._damaged("there is more after its end marker")
        assert self._mac is not None
        if not hmac.compare_digest(self._mac.hexdigest(), trailer.mac or ""):
            raise BackupError(
                f"{self.path} has been changed since it was written (its MAC does not match "
                f"the backup key {key.source}): it is refused and nothing was written; "
                "restore another copy")

    def _trailer(self, line: bytes) -> Trailer:
        try:
            return Trailer.model_validate_json(line)
        except ValidationError:
            raise self._damaged("more rows or entries than the header announces") from None

    def _unsigned(self) -> BackupError:
        return BackupError(
            f"{self.path} is a backup of format {self.header.format_version}, made before "
            "backups were signed: nothing shows it is unchanged since. If it was kept where no "
            "one else could write, restore it with --trust-unsigned (then take a new backup: "
            "it will be signed)")

    def _read_header(self) -> Header:
        first = self._next("its header")
        try:
            data = json.loads(first)
        except ValueError:
            raise BackupError(f"{self.path} is not a gpuslice backup") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise BackupError(f"{self.path} is not a gpuslice backup")
        if data.get("format_version") not in READABLE:
            raise BackupError(
                f"{self.path} is a backup of format {data.get('format_version')}; this gpuslice "
                f"reads formats {', '.join(map(str, READABLE))}: restore it with the version "
                "that wrote it"
            )
        try:
            return Header.model_validate(data)
        except ValidationError as exc:
            raise self._damaged(f"its header is invalid ({exc.errors()[0]['msg']})") from None

    def _next(self, what: str, *, covered: bool = True) -> bytes:
        """The next line; ``covered``: one the MAC covers (all but the end marker)."""
        try:
            line = self._file.readline(MAX_LINE)
        except (OSError, EOFError, zlib.error) as exc:
            if isinstance(exc, gzip.BadGzipFile) and self._line_no == 0:
                raise BackupError(f"{self.path} is not a gpuslice backup (not gzip)") from None
            raise self._damaged(f"unreadable after line {self._line_no} ({exc})") from None
        if len(line) >= MAX_LINE and not line.endswith(b"\n"):
            raise self._damaged(f"line {self._line_no + 1} is longer than {MAX_LINE} bytes")
        if not line.endswith(b"\n"):
            raise self._damaged(f"it ends before {what} (line {self._line_no + 1}): the file "
                                "is incomplete")
        self._line_no += 1
        if covered and self._mac is not None:
            self._mac.update(line)
        return line

    def _json(self, what: str) -> Any:
        line = self._next(what)
        try:
            return json.loads(line)
        except ValueError:  # UnicodeDecodeError included
            raise self._damaged(f"line {self._line_no} is not JSON") from None

    def _damaged(self, detail: str) -> BackupError:
        return BackupError(f"{self.path} is damaged: {detail}")


def _utc(value: dt.datetime) -> dt.datetime:
    # naive values are UTC: that is how the manager stores them on SQLite
    return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)


def _same(value: Any) -> Any:
    return value


def _fsync(raw: IO[bytes]) -> None:
    import os

    os.fsync(raw.fileno())
