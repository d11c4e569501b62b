"""`gpuslice admin audit`, `… verify` and `gpuslice activity` (issue 43) against a real
manager: filters, JSON, the chain's check, one's own security log; errors are one line."""

from __future__ import annotations

import json
import socket
import stat
from pathlib import Path

import pytest

from tests.waits import scaled

from .conftest import Manager


def test_an_admin_reads_the_log_with_filters(manager: Manager) -> None:
    out = manager.cli("admin", "audit", "--action", "session.create", "--json")
    assert out.returncode == 0, out.stderr
    [made] = json.loads(out.stdout)  # the fixture's one request for three sessions
    assert (made["actor_name"], made["outcome"]) == ("admin", "success")
    out = manager.cli("admin", "audit", "--action", "auth.*", "--user", "admin",
                      "--since", "1h", "--json")
    actions = {e["action"] for e in json.loads(out.stdout)}
    assert actions == {"auth.login", "auth.token.create"}, out.stdout
    out = manager.cli("admin", "audit", "--outcome", "denied", "--json")
    assert json.loads(out.stdout) == []
    table = manager.cli("admin", "audit", "--limit", "5")
    assert table.returncode == 0 and "session.create" in table.stdout, table.stderr


def test_the_chain_is_checked_from_the_cli(manager: Manager) -> None:
    out = manager.cli("admin", "audit", "verify")
    assert out.returncode == 0 and out.stdout.startswith("intact: "), out.stdout + out.stderr
    out = manager.cli("admin", "audit", "verify", "--json")
    assert json.loads(out.stdout)["intact"] is True


def test_a_user_reads_their_own_security_log(manager: Manager) -> None:
    out = manager.cli("activity", "--json")
    assert out.returncode == 0, out.stderr
    assert {e["action"] for e in json.loads(out.stdout)} == {"auth.login", "auth.token.create"}


def test_bad_filters_are_one_line(manager: Manager) -> None:
    for args, says in ((("--since", "yesterday"), "--since"),
                       (("--outcome", "maybe"), "outcome")):
        bad = manager.cli("admin", "audit", *args)
        assert bad.returncode != 0 and "Traceback" not in bad.stderr
        assert bad.stderr.startswith("error: ") and says in bad.stderr, bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1, bad.stderr


def test_the_log_is_exported_as_json_lines(manager: Manager, tmp_path: Path) -> None:
    file = tmp_path / "audit.jsonl"
    out = manager.cli("admin", "audit", "export", str(file))
    assert out.returncode == 0, out.stderr
    assert stat.S_IMODE(file.stat().st_mode) == 0o600
    rows = [json.loads(line) for line in file.read_text().splitlines()]
    assert {"auth.login", "auth.token.create", "session.create"} <= {r["action"] for r in rows}
    assert all(r["request_id"] and "hash" in r for r in rows)
    listed = manager.cli("admin", "audit", "--action", "audit.export", "--json")
    assert len(json.loads(listed.stdout)) == 1  # the export is itself audited


@pytest.mark.parametrize("scheme", ["udp", "tcp"])
def test_the_log_is_sent_to_syslog(manager: Manager, scheme: str) -> None:
    received = _receiver(scheme)
    out = manager.cli("admin", "audit", "export", "--syslog", f"{scheme}://127.0.0.1:"
                      f"{received.port}", "--since", "1h")
    assert out.returncode == 0, out.stderr
    messages = received.messages(int(out.stdout.split()[1]))
    assert messages, out.stdout
    for message in messages:
        head, _, body = message.partition(" - AUDIT - ")
        start, at, _host, app = head.split(" ")  # <PRI>VERSION: authpriv, info to warning
        assert app == "gpuslice" and start in ("<86>1", "<85>1", "<84>1"), head
        row = json.loads(body)
        assert row["at"] == at and row["action"]


class _Received:
    def __init__(self, sock: socket.socket, tcp: bool) -> None:
        self.sock, self.tcp = sock, tcp
        self.port = sock.getsockname()[1]

    def messages(self, count: int) -> list[str]:
        """``count`` messages (TCP: octet-counted frames on one connection)."""
        self.sock.settimeout(scaled(10))
        if not self.tcp:
            return [self.sock.recv(65536).decode() for _ in range(count)]
        conn, _ = self.sock.accept()
        data, found = b"", []
        with conn:
            while len(found) < count:
                size, sep, rest = data.partition(b" ")
                if sep and size.isdigit() and len(rest) >= int(size):
                    found.append(rest[:int(size)].decode())
                    data = rest[int(size):]
                    continue
                chunk = conn.recv(65536)
                assert chunk, f"the connection ended after {len(found)} messages"
                data += chunk
        return found


def _receiver(scheme: str) -> _Received:
    tcp = scheme == "tcp"
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM if tcp else socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    if tcp:
        sock.listen(1)
    return _Received(sock, tcp)
