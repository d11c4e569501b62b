"""Sending audit rows to syslog: RFC 5424 messages over UDP, or TCP with octet counting
(RFC 6587), facility authpriv. One message per row; its JSON is the message (no structured
data, which would need an IANA enterprise number)."""

from __future__ import annotations

import json
import socket
from urllib.parse import urlsplit

from gpuslice.cli.output import CliError

_AUTHPRIV = 10
_SEVERITY = {"success": 6, "failure": 5, "denied": 4}  # info, notice, warning
_SCHEMES = ("udp", "tcp")


class Syslog:
    """A connection to ``udp://HOST:PORT`` or ``tcp://HOST:PORT``."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in _SCHEMES or not parts.hostname or not parts.port:
            raise CliError(f"--syslog {url!r}: give udp://HOST:PORT or tcp://HOST:PORT", 2)
        self.tcp = parts.scheme == "tcp"
        kind = socket.SOCK_STREAM if self.tcp else socket.SOCK_DGRAM
        try:
            self.sock = socket.create_connection((parts.hostname, parts.port), timeout=10) \
                if self.tcp else socket.socket(socket.AF_INET, kind)
            if not self.tcp:
                self.sock.connect((parts.hostname, parts.port))
        except OSError as exc:
            raise CliError(f"cannot reach the syslog receiver {url}: {exc.strerror or exc}") \
                from None
        self.host = socket.gethostname() or "-"

    def send(self, line: str) -> None:
        message = format_message(line, self.host).encode()
        self.sock.sendall(f"{len(message)} ".encode() + message if self.tcp else message)

    def close(self) -> None:
        self.sock.close()


def format_message(line: str, host: str) -> str:
    """``<PRI>1 TIMESTAMP HOST gpuslice - AUDIT - {json}`` for one exported row."""
    row = json.loads(line)
    pri = _AUTHPRIV * 8 + _SEVERITY.get(row.get("outcome"), 6)
    return f"<{pri}>1 {row['at']} {host} gpuslice - AUDIT - {line}"
