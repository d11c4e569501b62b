"""Notifications end to end (issue 43, spec identity.md §12): channels through the API, events
enqueued with their status change, the delivery loop sending to a real HTTP receiver and a
real SMTP server (aiosmtpd) on 127.0.0.1, retries, 410, the SSRF guard."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI

from gpuslice.manager import loop_table
from gpuslice.manager.services.notify import guard, send
from gpuslice.manager.settings import ManagerSettings, NotifySettings
from tests.manager.conftest import AgentFactory, Client, UserFactory, create
from tests.manager.helpers import make_project, wait_status
from tests.manager.notify_receivers import Mailbox, http_receiver, smtp_server
from tests.ports import free_port
from tests.waits import Deadline

BATCH = {"type": "batch", "command": ["python", "-c", "1"]}


@pytest.fixture
def mailbox() -> Iterator[Mailbox]:
    with smtp_server() as mailbox:
        yield mailbox


@pytest.fixture
def settings(settings: ManagerSettings, mailbox: Mailbox) -> ManagerSettings:
    """The local receivers allowed (127.0.0.1), the local SMTP server, quick retries."""
    notify = NotifySettings(
        smtp_host="127.0.0.1", smtp_port=mailbox.port, smtp_starttls=False,
        smtp_from="gpuslice <gpu@example.org>", allowed_targets=["127.0.0.1/32"],
        retry_schedule=[0.3, 0.3, 0.3], interval=0.2, started_min_wait=0)
    return settings.model_copy(update={"notify": notify})


def verify(secret: str, headers: dict[str, str], body: bytes) -> bool:
    """The receiver's check, as docs/user-guide.md tells it (Standard Webhooks)."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    return any(hmac.compare_digest(f"v1,{expected}", s)
               for s in headers["webhook-signature"].split())


async def add(client: Client, expect: int = 201, **body: Any) -> Any:
    r = await client.post("/api/v1/notifications/channels", json=body)
    assert r.status_code == expect, r.text
    return r.json()


async def deliveries_once(client: Client, done: Any, timeout: float = 10.0
                          ) -> list[dict[str, Any]]:
    """The caller's deliveries once ``done(them)`` holds (AssertionError if not in time)."""
    deadline = Deadline(timeout)
    while True:
        rows = (await client.get("/api/v1/notifications/deliveries")).json()
        if rows and done(rows):
            return rows
        assert not deadline.passed, rows
        await asyncio.sleep(0.05)


async def finished_batch(client: Client, agent: Any, exit_code: int = 0, **body: Any) -> str:
    [s] = await create(client, **BATCH, **body)
    await wait_status(client, s["id"], {"SCHEDULED"})
    assert (await agent.report(s["id"], "RUNNING")).status_code == 200
    assert (await agent.report(s["id"], "TERMINATED", exit_code=exit_code)).status_code == 200
    return s["id"]


async def test_a_finished_session_sends_one_webhook_and_one_mail_to_its_owner(
    app: FastAPI, admin: Client, make_user: UserFactory, make_agent: AgentFactory,
    mailbox: Mailbox,
) -> None:
    alice = await make_user("alice")
    agent = await make_agent(auto_run=False)
    with http_receiver() as receiver:
        hook = await add(alice, kind="webhook", target=receiver.url, name="ci",
                         events=["finished", "failed"])
        assert hook["secret"].startswith("whsec_") and "/hook" not in hook["target"]
        await add(admin, kind="email", target="alice@example.org", user="alice",
                  events=["finished", "failed"])
        started = time.monotonic()
        session_id = await finished_batch(alice, agent)
        [post] = await receiver.wait(1, timeout=5)
        [(rcpt, mail)] = await mailbox.wait(1, timeout=5)
        took = time.monotonic() - started
    event = json.loads(post.body)
    assert event["type"] == "session.finished" and event["session"]["id"] == session_id
    assert event["session"]["owner"] == "alice" and event["data"]["exit_code"] == 0
    assert post.headers["webhook-id"] == event["id"]
    assert verify(hook["secret"], post.headers, post.body)
    assert not verify("whsec_" + base64.b64encode(b"x" * 24).decode(), post.headers, post.body)
    assert rcpt == ["alice@example.org"] and "finished" in mail["Subject"]
    assert mail["Auto-Submitted"] == "auto-generated" and session_id in mail.get_payload()
    print(f"session end -> webhook and e-mail: {took:.2f} s")
    # Once only: more passes send nothing more.
    await loop_table.run_once(app, "notifications")
    assert len(receiver.posts) == 1 and len(mailbox.messages) == 1
    # The secret is never shown again.
    [listed] = [c for c in (await alice.get("/api/v1/notifications/channels")).json()
                if c["kind"] == "webhook"]
    assert "secret" not in listed and hook["secret"] not in json.dumps(listed)


async def test_each_event_goes_to_the_channels_that_chose_it(
    admin: Client, make_user: UserFactory, make_agent: AgentFactory,
) -> None:
    alice = await make_user("alice")
    agent = await make_agent(auto_run=False)
    with http_receiver() as failures, http_receiver() as everything:
        await add(alice, kind="webhook", target=failures.url, events=["failed"])
        await add(alice, kind="webhook", target=everything.url,
                  events=["started", "finished", "failed", "cancelled"])
        await finished_batch(alice, agent, exit_code=0)
        failed = await finished_batch(alice, agent, exit_code=3)
        [post] = await failures.wait(1)
        types = [json.loads(p.body)["type"] for p in await everything.wait(4)]
    assert json.loads(post.body)["session"]["id"] == failed
    assert json.loads(post.body)["data"]["reason"] == "exited with code 3"
    assert sorted(types) == ["session.failed", "session.finished", "session.started",
                             "session.started"]


async def test_a_receiver_that_is_down_gets_it_once_it_is_back(
    make_user: UserFactory, make_agent: AgentFactory,
) -> None:
    alice = await make_user("alice")
    agent = await make_agent(auto_run=False)
    port = free_port()
    hook = await add(alice, kind="webhook", target=f"http://127.0.0.1:{port}/hook",
                     events=["finished"])
    await finished_batch(alice, agent)
    # a connection refused, then another: it is being retried
    [row] = await deliveries_once(alice, lambda rows: rows[0]["attempts"] >= 2)
    assert row["status"] == "pending" and row["attempts"] >= 2, row
    assert row["last_error"] and row["next_attempt_at"]
    with http_receiver(port, script=[500]) as receiver:  # back, first with an error
        first, second = await receiver.wait(2)
    assert first.headers["webhook-id"] == second.headers["webhook-id"]  # stable: dedupe on it
    assert verify(hook["secret"], second.headers, second.body)
    [row] = await deliveries_once(alice, lambda rows: rows[0]["status"] != "pending")
    assert row["status"] == "sent" and row["last_status"] == "HTTP 200"


async def test_retry_after_is_honoured_and_a_404_is_given_up(
    make_user: UserFactory, make_agent: AgentFactory,
) -> None:
    alice = await make_user("alice")
    agent = await make_agent(auto_run=False)
    with http_receiver(script=[(429, {"Retry-After": "1"})]) as slow, \
            http_receiver(script=[404]) as wrong:
        await add(alice, kind="webhook", target=slow.url, events=["finished"])
        await add(alice, kind="webhook", target=wrong.url, events=["finished"])
        await finished_batch(alice, agent)
        first, second = await slow.wait(2)
        await wrong.wait(1)
        rows = await deliveries_once(alice, lambda rows: any(d["status"] == "dead"
                                                             for d in rows))
    assert second.at - first.at >= 1.0
    [dead] = [d for d in rows if d["status"] == "dead"]
    assert dead["last_status"] == "HTTP 404" and dead["attempts"] == 1
    assert len(wrong.posts) == 1


async def test_a_410_disables_the_channel_and_its_owner_is_told(
    make_user: UserFactory, make_agent: AgentFactory,
) -> None:
    alice = await make_user("alice")
    agent = await make_agent(auto_run=False)
    with http_receiver(script=[410]) as gone, http_receiver() as other:
        doomed = await add(alice, kind="webhook", target=gone.url, events=["finished"],
                           name="old")
        await add(alice, kind="webhook", target=other.url, events=["failed"])
        await finished_batch(alice, agent)
        await gone.wait(1)
        [told] = await other.wait(1)
    event = json.loads(told.body)
    assert event["type"] == "notify.channel_disabled"
    assert doomed["id"] in event["data"]["message"] and "410" in event["data"]["message"]
    [listed] = [c for c in (await alice.get("/api/v1/notifications/channels")).json()
                if c["id"] == doomed["id"]]
    assert not listed["enabled"] and "410" in listed["disabled_reason"]
    await finished_batch(alice, agent)  # nothing more for a disabled channel
    r = await alice.patch(f"/api/v1/notifications/channels/{doomed['id']}",
                          json={"enabled": True})
    assert r.json()["enabled"] and r.json()["disabled_reason"] == ""
    assert len(gone.posts) == 1


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:9/hook", "https://127.0.0.1/hook", "http://169.254.169.254/latest",
    "http://[::1]/hook", "https://10.1.2.3/hook", "https://[::ffff:10.0.0.1]/x",
    "https://100.64.0.1/x", "http://localhost:9/hook",
])
async def test_private_targets_are_refused_unless_allowed(
    app: FastAPI, make_user: UserFactory, url: str,
) -> None:
    alice = await make_user("alice")
    app.state.settings.notify.allowed_targets.clear()  # this test's settings, nothing allowed
    r = await alice.post("/api/v1/notifications/channels", json={"kind": "webhook",
                                                                 "target": url})
    assert r.status_code == 422 and r.json()["code"] == "private_target", r.text
    assert "notify.allowed_targets" in r.json()["message"]


async def test_bad_channels_are_refused_with_what_is_allowed(
    admin: Client, make_user: UserFactory,
) -> None:
    alice = await make_user("alice")
    for body, code, field in (
        ({"kind": "webhook", "target": "ftp://example.org/x"}, 422, "target"),
        ({"kind": "webhook", "target": "https://u:p@example.org/x"}, 422, "target"),
        ({"kind": "email", "target": "alice@example.org"}, 403, "kind"),
        ({"kind": "webhook", "target": "https://example.org", "project": "vision"}, 404,
         "project"),
        ({"kind": "webhook", "target": "https://example.org", "user": "admin"}, 403, "user"),
    ):
        r = await alice.post("/api/v1/notifications/channels", json=body)
        assert (r.status_code, r.json().get("field")) == (code, field), r.text
    r = await alice.post("/api/v1/notifications/channels",
                         json={"kind": "webhook", "target": "https://example.org",
                               "events": ["finishd"]})
    assert r.status_code == 422 and "finished" in r.text  # the events it may be
    r = await admin.post("/api/v1/notifications/channels",
                         json={"kind": "email", "target": "not an address", "user": "alice"})
    assert r.status_code == 422 and r.json()["field"] == "target"


async def test_dns_rebinding_is_refused_at_send(
    app: FastAPI, make_user: UserFactory, make_agent: AgentFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    alice = await make_user("alice")
    agent = await make_agent(auto_run=False)
    answers = {"hooks.example.org": "93.184.216.34"}  # public when the channel is made

    async def lookup(host: str, port: int) -> list[tuple[Any, ...]]:
        return [(0, 0, 0, "", (answers[host], port))]

    monkeypatch.setattr(guard, "lookup", lookup)
    app.state.settings.notify.allowed_targets.clear()  # this test's settings, nothing allowed
    await add(alice, kind="webhook", target="https://hooks.example.org/x", events=["finished"])
    answers["hooks.example.org"] = "127.0.0.1"  # and loopback when it is sent
    await finished_batch(alice, agent)
    rows = await deliveries_once(alice, lambda rows: rows[0]["status"] != "pending")
    assert rows[0]["status"] == "dead" and rows[0]["attempts"] == 1
    assert "resolves to 127.0.0.1" in rows[0]["last_error"]


async def test_a_redirect_is_not_followed(
    make_user: UserFactory, make_agent: AgentFactory,
) -> None:
    alice = await make_user("alice")
    agent = await make_agent(auto_run=False)
    with http_receiver() as elsewhere, \
            http_receiver(script=[(302, {"Location": "http://127.0.0.1:1/x"})]) as receiver:
        receiver.script[0] = (302, {"Location": elsewhere.url})
        await add(alice, kind="webhook", target=receiver.url, events=["finished"])
        await finished_batch(alice, agent)
        await receiver.wait(1)
        [row] = await deliveries_once(alice, lambda rows: rows[0]["status"] != "pending")
    assert row["status"] == "dead" and row["last_status"] == "HTTP 302"
    assert "redirects are not followed" in row["last_error"]
    assert elsewhere.posts == []


async def test_nobody_sees_or_uses_another_users_channels(
    admin: Client, make_user: UserFactory,
) -> None:
    alice, bob = await make_user("alice"), await make_user("bob")
    with http_receiver() as receiver:
        mine = await add(alice, kind="webhook", target=receiver.url)
        for client in (bob, admin):
            assert mine["id"] not in (await client.get("/api/v1/notifications/channels")).text
            for method, path in (("PATCH", ""), ("DELETE", ""), ("POST", "/test")):
                r = await client.request(method, f"/api/v1/notifications/channels/"
                                         f"{mine['id']}{path}", json={})
                assert r.status_code == 404 and r.json()["code"] == "not_found", r.text
        r = await bob.get("/api/v1/notifications/deliveries",
                          params={"channel": mine["id"]})
        assert r.json() == []
        assert receiver.posts == []
        r = await alice.post(f"/api/v1/notifications/channels/{mine['id']}/test")
        assert r.json() == {"ok": True, "status": "HTTP 200", "error": ""}
        assert json.loads(receiver.posts[0].body)["type"] == "notify.test"


async def test_project_channels_are_admins_and_carry_the_projects_sessions(
    app: FastAPI, admin: Client, make_user: UserFactory, make_agent: AgentFactory,
) -> None:
    alice, bob = await make_user("alice"), await make_user("bob")
    agent = await make_agent(auto_run=False)
    await make_project(admin, "vision", "alice")
    body = {"kind": "webhook", "target": "https://example.org/x", "project": "vision"}
    missing = await bob.post("/api/v1/notifications/channels", json={**body,
                                                                      "project": "nope"})
    other = await bob.post("/api/v1/notifications/channels", json=body)
    assert other.status_code == missing.status_code == 404  # a non-member: as if none
    assert other.json()["message"].replace("vision", "nope") == missing.json()["message"]
    member = await alice.post("/api/v1/notifications/channels", json=body)
    assert member.status_code == 403 and "admins" in member.json()["message"]
    with http_receiver() as receiver:
        await add(admin, kind="slack", target=receiver.url, project="vision",
                  events=["finished"])
        await finished_batch(alice, agent, project="vision")
        await finished_batch(alice, agent)  # not the project's: not sent
        [post] = await receiver.wait(1)
        await loop_table.run_once(app, "notifications")
    text = json.loads(post.body)["text"]
    assert "finished" in text and "project vision" in text
    assert len(receiver.posts) == 1


async def test_the_cli_adds_tests_lists_and_removes(
    base_url: str, make_user: UserFactory, tmp_path: Any,
) -> None:
    alice = await make_user("alice")
    token = alice.headers["Authorization"].split()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSLICE_")} | {
        "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / ".config"),
        "GPUSLICE_URL": base_url, "GPUSLICE_TOKEN": token,
        "PYTHONPATH": str(Path(__file__).resolve().parents[2])}

    async def cli(*args: str) -> tuple[int, str, str]:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gpuslice.cli.main", "notify", *args, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(process.communicate(), 60)
        return process.returncode or 0, out.decode(), err.decode()

    with http_receiver() as receiver:
        rc, out, err = await cli("add", "--webhook", receiver.url, "--events",
                                 "finished,failed", "--name", "ci")
        assert rc == 0, err
        assert "signing secret (shown once): whsec_" in out
        channel_id = out.split()[3]
        rc, out, err = await cli("test", channel_id)
        assert (rc, out.strip()) == (0, "delivered: HTTP 200"), err
        rc, out, _ = await cli("list", "--json")
        [listed] = json.loads(out)
        assert listed["events"] == ["session.finished", "session.failed"]
        assert "whsec_" not in out
        rc, out, err = await cli("add", "--webhook", "http://10.0.0.1/x")
        assert rc == 2 and "notify.allowed_targets" in err, (out, err)
        rc, out, err = await cli("remove", channel_id)
        assert rc == 0 and (await cli("list", "--json"))[1].strip() == "[]"
        rc, _, err = await cli("test", channel_id)
        assert rc == 1 and "no notification channel" in err


async def test_the_request_goes_to_the_address_that_was_checked(
    make_user: UserFactory, make_agent: AgentFactory, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # receiver.test exists in no DNS: only the checked answer can take the request there.
    alice = await make_user("alice")
    agent = await make_agent(auto_run=False)

    async def lookup(host: str, port: int) -> list[tuple[Any, ...]]:
        assert host == "receiver.test"
        return [(0, 0, 0, "", ("127.0.0.1", port))]

    monkeypatch.setattr(guard, "lookup", lookup)
    with http_receiver() as receiver:
        await add(alice, kind="webhook", target=f"http://receiver.test:{receiver.port}/hook",
                  events=["finished"])
        await finished_batch(alice, agent)
        [post] = await receiver.wait(1)
    assert post.headers["host"] == f"receiver.test:{receiver.port}" and post.path == "/hook"


def _event(name: str) -> dict[str, Any]:
    return {"type": "session.finished", "id": "d1", "time": "2026-12-07T20:00:00Z",
            "session": {"id": "s1", "name": name, "owner": "alice", "project": None,
                        "status": "TERMINATED", "reason": "exited with code 0"},
            "data": {"runtime_s": 7980, "exit_code": 0}}


async def test_user_text_pings_nobody_on_slack_and_stays_out_of_mail_headers(
    settings: ManagerSettings, mailbox: Mailbox,
) -> None:
    # Session names are checked on creation; these reach send() as a name that got past
    # that would: the channels must not depend on it.
    with http_receiver() as receiver:
        outcome = await send.send("slack", receiver.url, None, "d1",
                                  _event("<!channel> & co"), settings.notify)
        [post] = await receiver.wait(1)
    assert outcome.ok and outcome.status == "HTTP 200"
    text = json.loads(post.body)["text"]
    assert "*&lt;!channel&gt; &amp; co* finished after 2 h 13 min" in text
    assert "<!channel>" not in text
    outcome = await send.send("email", "alice@example.org", None, "d2",
                              _event("x\r\nBcc: y@example.org"), settings.notify)
    assert outcome.ok and outcome.status.startswith("250 "), outcome
    [(rcpt, mail)] = await mailbox.wait(1)
    assert rcpt == ["alice@example.org"] and mail["Bcc"] is None
    assert mail["Subject"] == "[gpuslice] x  Bcc: y@example.org finished after 2 h 13 min"
