"""The one error of backups and restores."""


class BackupError(Exception):
    """A backup or a restore that cannot be done; the message says why and what to do."""
