"""A session's name resolves among the caller's own sessions, an admin's too (F3 of the
2026-12 security review): an admin's `gpuslice session destroy dev` acted on whichever user
made a `dev` last. Another user's session takes `OWNER/NAME` or its id, and the CLI says whose
it is."""

from __future__ import annotations

import json

import pytest

from gpuslice.client import ApiError, Client

from .conftest import IMAGE, Manager


def _bob(manager: Manager) -> Client:
    with manager.client() as admin:
        admin.create_user("bob", "bob-password-1")
    bob = Client(manager.url)
    bob.login("bob", "bob-password-1")
    return bob


def test_an_admins_name_is_their_own_session_and_another_users_takes_owner_slash_name(
        manager: Manager) -> None:
    with manager.client() as admin:
        [mine] = admin.create_sessions(image=IMAGE, cpu="0.25", mem="64m", name="dev")
    with _bob(manager) as bob:
        [his] = bob.create_sessions(image=IMAGE, cpu="0.25", mem="64m", name="dev")  # newer
        shown = manager.cli("session", "show", "dev", "--json")
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["id"] == mine.id and shown.stderr == ""
        assert bob.get_session("dev").id == his.id
        assert bob.get_session("bob/dev").id == his.id  # a user may name themselves

    shown = manager.cli("session", "show", "bob/dev", "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["id"] == his.id
    assert f"note: session dev ({his.id}) is bob's, not yours" in shown.stderr
    by_id = manager.cli("session", "show", his.id, "--json")
    assert "is bob's, not yours" in by_id.stderr

    gone = manager.cli("session", "destroy", "dev")
    assert gone.returncode == 0, gone.stderr
    with manager.client() as admin:
        assert admin.get_session(mine.id).status.value == "CANCELLED"
        assert admin.get_session(his.id).status.value == "PENDING"


def test_a_user_never_reaches_another_users_session_by_name(manager: Manager) -> None:
    with _bob(manager) as bob:
        for ref in ("idle", "admin/idle"):  # the admin's sessions
            with pytest.raises(ApiError) as refused:
                bob.get_session(ref)
            assert refused.value.status == 404, ref
    unknown = manager.cli("session", "show", "nope")
    assert unknown.returncode != 0 and len(unknown.stderr.strip().splitlines()) == 1
    assert ("no session 'nope': give its id, or the name of one of your sessions (another "
            "user's session: OWNER/NAME or its id)") in unknown.stderr
