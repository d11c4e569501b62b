"""What the backup tests share: a backup file made from lines, signed as the platform would."""

from __future__ import annotations

import gzip
import hashlib
import hmac
import json

from gpuslice.manager.backup.keys import BackupKey


def signed(lines: list[str], key: BackupKey) -> bytes:
    """``lines`` (the last the end marker) as a backup file with its MAC made again under
    ``key``: as if the platform had written them."""
    *body, end = lines
    mac = hmac.new(key.secret, "".join(body).encode(), hashlib.sha256).hexdigest()
    trailer = json.dumps(json.loads(end) | {"mac": mac}) + "\n"
    return gzip.compress(("".join(body) + trailer).encode())
