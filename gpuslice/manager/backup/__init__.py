"""Backups of everything the manager knows, portable between SQLite and PostgreSQL.

`backup()` reads one consistent snapshot of a running database; `restore()` puts a backup into
an empty database, all or nothing, and migrates it to this code's head; `verify()` reads a backup
through without writing. See README.md for the file format and the invariants.
"""

from gpuslice.manager.backup.dump import backup, safe_url
from gpuslice.manager.backup.fileformat import BackupError, Header
from gpuslice.manager.backup.restore import restore, verify

__all__ = ["BackupError", "Header", "backup", "restore", "safe_url", "verify"]
