"""The one error of backups and restores."""


class BackupError(Exception):
    """A backup or a restore that cannot be done; the message says why and what to do."""


class KeyUnavailable(BackupError):
    """The key a signed backup was made with is not at hand (no key file, or another
    platform's key): the backup's MAC cannot be checked, which ``trust_unsigned`` may accept
    when that key is lost. A MAC that does not match the right key is never accepted."""
