"""`gpuslice admin audit`, `… verify` and `gpuslice activity` (issue 43) against a real
manager: filters, JSON, the chain's check, one's own security log; errors are one line."""

from __future__ import annotations

import json

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
