"""Database failures a person can act on, each said in one sentence.

The database may be missing, stopped, locked by another program or out of disk space: those
are not bugs, and neither `manager serve` at start nor an API call should answer them with a
traceback or a bare 500. :func:`classify` recognises them in an exception (SQLAlchemy wraps
the driver's error, asyncpg raises its own at connect time, both chain causes) and names the
problem; :func:`describe` adds what to do, for the operator's eyes (start-up, logs). Anything
it does not recognise is a bug and stays one.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Iterator
from dataclasses import dataclass

from sqlalchemy.engine import make_url


@dataclass(frozen=True, slots=True)
class Fault:
    """A recognised database problem: ``kind`` (a stable code), what is wrong, what to do."""

    kind: str  # unreachable, refused, missing, locked, full, readonly, damaged
    problem: str
    remedy: str

    def sentence(self) -> str:
        return f"{self.problem}: {self.remedy}"


def classify(exc: BaseException, url: str) -> Fault | None:
    """The database problem ``exc`` stands for, or ``None`` when it is not one."""
    where = _where(url)
    for link in _chain(exc):
        found = _sqlite(link, where) if url.startswith("sqlite") else _server(link, where)
        if found is not None:
            return found
    return None


def describe(exc: BaseException, url: str) -> str | None:
    fault = classify(exc, url)
    return fault.sentence() if fault is not None else None


def safe_url(url: str) -> str:
    """The URL without its password, for messages and logs."""
    return make_url(url).render_as_string(hide_password=True)


def _where(url: str) -> str:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return f"the SQLite database {parsed.database or ':memory:'}"
    return f"the database {parsed.database or ''} at {parsed.host or 'localhost'}:" \
           f"{parsed.port or 5432}"


def _sqlite(link: BaseException, where: str) -> Fault | None:
    text = str(link).lower()
    if "database is locked" in text or "database table is locked" in text:
        return Fault("locked", f"{where} is locked by another program",
                     "stop whatever else holds it (another gpuslice manager or `gpuslice up` "
                     "on this data directory, a sqlite3 shell), then try again")
    if "disk is full" in text or _errno_of(link) in (errno.ENOSPC, errno.EDQUOT):
        return Fault("full", f"no space left for {where}",
                     "free some space on its filesystem; nothing was half-written")
    if "readonly database" in text or "read-only" in text:
        return Fault("readonly", f"{where} cannot be written (read-only)",
                     "fix the permissions of the file and its directory")
    if "unable to open database file" in text:
        return Fault("missing", f"cannot open {where}",
                     "check that its directory exists and can be written")
    if "file is not a database" in text or "malformed" in text:
        return Fault("damaged", f"{where} is damaged", "restore it from a backup")
    return None


def _server(link: BaseException, where: str) -> Fault | None:
    name = type(link).__name__
    code = _errno_of(link)
    if name == "InvalidPasswordError" or name == "InvalidAuthorizationSpecificationError":
        return Fault("refused", f"{where} refused the login ({link})",
                     "fix the user and password in database.url")
    if name == "InvalidCatalogNameError":
        return Fault("missing", f"{where} does not exist",
                     "create it (`createdb`), or fix the name in database.url")
    if name in ("CannotConnectNowError", "AdminShutdownError", "ConnectionDoesNotExistError",
                "ConnectionFailureError") or code in (errno.ECONNREFUSED, errno.ECONNRESET,
                                                      errno.EHOSTUNREACH, errno.ENETUNREACH):
        return Fault("unreachable", f"{where} does not answer ({_short(link)})",
                     "start PostgreSQL, or fix database.url")
    if isinstance(link, socket.gaierror):
        return Fault("unreachable", f"{where}: unknown host ({link})", "fix database.url")
    if isinstance(link, TimeoutError) or name == "TooManyConnectionsError":
        return Fault("unreachable", f"{where} does not answer in time ({_short(link)})",
                     "check that PostgreSQL runs and accepts connections")
    # asyncpg: a connection cut while it is being opened (e.g. in the TLS negotiation) is
    # the builtin ConnectionError "unexpected connection_lost() call"
    if ("connection is closed" in str(link) or "connection was closed" in str(link)
            or isinstance(link, ConnectionError)):
        return Fault("unreachable", f"{where} closed the connection",
                     "check that PostgreSQL runs; the manager reconnects when it answers")
    return None


def _errno_of(link: BaseException) -> int | None:
    return link.errno if isinstance(link, OSError) and link.errno else None


def _short(link: BaseException) -> str:
    return (str(link).splitlines() or [type(link).__name__])[0][:200] or type(link).__name__


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        link = todo.pop(0)
        if id(link) in seen:
            continue
        seen.add(id(link))
        yield link
        orig = getattr(link, "orig", None)  # SQLAlchemy's wrapper keeps the driver's error
        todo += [e for e in (orig, link.__cause__, link.__context__)
                 if isinstance(e, BaseException)]
