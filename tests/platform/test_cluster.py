"""A cluster of real processes loses a manager, then a node, and is backed up while busy.

PostgreSQL (a database of this test's own), two `manager serve` replicas behind HAProxy
(`deploy/haproxy.cfg`), two `agent serve` nodes with their own names and data directories (their
containers scoped by the `gpuslice.node` label), the CLI and the SDK through the balancer:

1. kill -9 a manager: the node agent that used it fails over to the other, which goes on
   scheduling; a status event stream through the balancer resumes without losing an event;
2. kill -9 a node's agent: its sessions go ERROR "node lost", their capacity is freed, and a
   waiting session starts on the other node; the agent restarted removes its orphaned
   containers, and no session ever has two containers;
3. 50 sessions run and 20 wait: a backup taken meanwhile, restored into a fresh manager (on
   SQLite: the engines differ), holds every session, history entry, user, token (still valid),
   policy and alias.

The recovery times are measured by bench/recovery.py on the same harness, not asserted here.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpuslice.client import Client
from tests.conftest import pg_url
from tests.platform.cluster import NODE_TIMEOUT_S, Cluster, wait_until
from tests.waits import scaled

pytestmark = [pytest.mark.docker, pytest.mark.pg, pytest.mark.slow]
SMALL = ["--cpu", "0.05", "--mem", "32m"]


@pytest.fixture
def cluster(base_image: str, tmp_path: Path) -> Iterator[Cluster]:
    server = pg_url()
    if server is None:
        pytest.skip("needs GPUSLICE_TEST_PG (a PostgreSQL server to make a database on)")
    running = Cluster(tmp_path, server)
    try:
        running.start()
        yield running
    finally:
        running.close()


def test_a_cluster_loses_a_manager_then_a_node_and_is_backed_up_busy(
    cluster: Cluster, tmp_path: Path
) -> None:
    a, b = cluster.node("a"), cluster.node("b")
    cluster.start_agent(b, ["m2", "m1"])  # node b alone at first
    carol = _user(cluster, "carol", max_sessions=2)
    mine = [s["id"] for s in json.loads(_as(cluster, carol, "session", "create", "--count", "3",
                                            "--gpu", "12", *SMALL, "--name", "c", "--json"))]
    wait_until("two of carol's sessions run on b, her third waits (her quota)",
               lambda: sorted(cluster.statuses(mine).values()) == ["PENDING", "RUNNING",
                                                                  "RUNNING"], 120)
    waiting = next(i for i, s in cluster.statuses(mine).items() if s == "PENDING")
    on_b = [i for i in mine if i != waiting]
    cluster.start_agent(a, ["m1", "m2"])

    _a_manager_dies(cluster, a)
    _a_node_dies_and_comes_back(cluster, a, b, on_b, waiting)
    _backup_while_busy(cluster, tmp_path, carol)
    _logs_are_json_lines_without_secrets(cluster, carol)


def _logs_are_json_lines_without_secrets(cluster: Cluster, carol: dict[str, str]) -> None:
    secrets = [cluster.token(), carol["api_token"], cluster.admin_password(),
               *(env["GPUSLICE_AGENT_JOIN_TOKEN"] for env in cluster.agent_env.values())]
    secrets += [json.loads((cluster.tmp / "agents" / node / "credential.json").read_text())[
        "secret"] for node in cluster.agent_env]
    contexts = set()
    for process in [*cluster.managers.values(), *cluster.agents.values()]:
        for line in process.lines:
            record = json.loads(line)  # one JSON object per line, nothing else
            assert {"ts", "level", "logger", "msg"} <= set(record), line
            contexts |= {key for key in ("session_id", "node_id") if key in record}
            leaked = [s for s in secrets if s in line]
            assert not leaked, f"a secret in a log line: {line}"
    assert contexts == {"session_id", "node_id"}


def _a_manager_dies(cluster: Cluster, a: str) -> None:
    seen: list[Any] = []
    streams = [Client(cluster.url, cluster.token()) for _ in range(2)]  # one per replica
    for client in streams:
        threading.Thread(target=_collect, args=(client, seen), daemon=True).start()
    try:
        cluster.kill(cluster.managers["m1"])
        # b is full (24 of 25 fGPU): this one can only run on a, whose agent used m1
        [moved] = json.loads(cluster.ok("session", "create", "--gpu", "2", *SMALL, "--name",
                                        "after-failover", "--json"))
        running = wait_until("a session created after m1 died runs on a", lambda: next((
            s for s in cluster.sessions() if s["id"] == moved["id"]
            and s["status"] == "RUNNING"), None), 90)
        assert running["placement"]["node_name"] == a
        assert "now using " + cluster.manager_urls["m2"] in cluster.agents[a].output
        # both event streams (one was on m1) saw it start: the broken one resumed via m2
        wait_until("both streams saw it run", lambda: sum(
            c.session_id == moved["id"] and c.status.value == "RUNNING" for c in seen) == 2, 30)
    finally:
        for client in streams:
            client.close()


def _a_node_dies_and_comes_back(
    cluster: Cluster, a: str, b: str, on_b: list[str], waiting: str
) -> None:
    orphans = cluster.containers(b)
    assert set(on_b) <= set(orphans)
    cluster.kill(cluster.agents[b])
    wait_until("b's sessions end in ERROR: node lost", lambda: len([
        s for s in cluster.sessions() if s["id"] in on_b and s["status"] == "ERROR"
        and s["status_reason"] == "node lost"]) == 2, NODE_TIMEOUT_S + 20,
        state=lambda: cluster.summary(on_b))
    started = wait_until("the waiting session starts on a", lambda: next((
        s for s in cluster.sessions() if s["id"] == waiting and s["status"] == "RUNNING"), None),
        60)
    assert started["placement"]["node_name"] == a
    assert set(on_b) <= set(cluster.containers(b))  # a dead agent removes nothing

    cluster.start_agent(b, ["m2", "m1"])
    wait_until("the returning agent removes its orphaned containers",
               lambda: not set(on_b) & set(cluster.containers(b)), 60)
    found = [cluster.containers(n) for n in (a, b)]
    for session in cluster.sessions():
        count = sum(len(f.get(session["id"], [])) for f in found)
        assert count <= 1, f"{session['name']} has {count} containers"
        if session["status"] == "RUNNING":
            assert count == 1, session["name"]


def _backup_while_busy(cluster: Cluster, tmp_path: Path, carol: dict[str, str]) -> None:
    ended = [s["id"] for s in cluster.sessions() if s["status"] == "RUNNING"]
    cluster.ok("session", "destroy", *ended)
    wait_until("the cluster is empty", lambda: not any(
        s["status"] not in ("TERMINATED", "ERROR", "CANCELLED") for s in cluster.sessions()),
        60)
    cluster.ok("image", "alias", "base", "gpuslice/base:0.1.0")
    bulk = [s["id"] for s in json.loads(cluster.ok(
        "session", "create", "--count", "70", "--gpu", "1", *SMALL, "--name", "bulk", "--json"))]
    wait_until("50 sessions run and 20 wait", lambda: sorted(
        cluster.statuses(bulk).values()) == ["PENDING"] * 20 + ["RUNNING"] * 50, 600, poll=1,
        state=lambda: cluster.summary(bulk))
    before = _everything(cluster, cluster.url, cluster.token())

    file = tmp_path / "busy.gsbackup"
    done = cluster.cli("admin", "backup", str(file), "--database-url", cluster.database_url,
                       "--data-dir", str(cluster.tmp / "managers"))
    assert done.returncode == 0, done.stderr
    fresh = f"sqlite+aiosqlite:///{tmp_path / 'fresh' / 'gpuslice.db'}"
    done = cluster.cli("admin", "restore", str(file), "--database-url", fresh,
                       "--data-dir", str(tmp_path / "fresh"),
                       "--key", str(cluster.tmp / "managers" / "backup-key"))
    assert done.returncode == 0, done.stderr

    cluster.start_manager("m3", GPUSLICE_DATABASE__URL=fresh,
                          GPUSLICE_DATA_DIR=str(tmp_path / "fresh"),
                          GPUSLICE_NODES__NODE_TIMEOUT="3600")
    m3 = cluster.manager_urls["m3"]
    after = _everything(cluster, m3, cluster.token())
    assert after == before
    who = httpx.get(f"{m3}/api/v1/auth/me", timeout=scaled(10),
                    headers={"Authorization": f"Bearer {carol['api_token']}"})
    assert who.status_code == 200 and who.json()["username"] == "carol"  # her token still works
    cluster.managers.pop("m3").stop()


def _everything(cluster: Cluster, url: str, token: str) -> dict[str, Any]:
    """What the issue names: sessions, their history, users, policies, aliases."""
    headers = {"Authorization": f"Bearer {token}"}

    def get(path: str) -> Any:
        r = httpx.get(f"{url}/api/v1{path}", headers=headers, timeout=scaled(30))
        assert r.status_code == 200, r.text
        return r.json()

    sessions = sorted(cluster.sessions(url, token), key=lambda s: s["id"])
    return {
        "sessions": [(s["id"], s["name"], s["status"], s["status_reason"], s.get("placement"))
                     for s in sessions],
        "history": {s["id"]: get(f"/sessions/{s['id']}")["history"] for s in sessions},
        "users": get("/users"), "policies": get("/policies"), "aliases": get("/images/aliases"),
        # without the use stamp: asking the restored manager is a use (touched once a minute)
        "tokens": [{k: v for k, v in t.items() if k != "last_used_at"}
                   for t in get("/auth/tokens")],
    }


def _user(cluster: Cluster, name: str, max_sessions: int) -> dict[str, str]:
    password = f"{name}-password"
    cluster.ok("admin", "user", "create", name, "--password", password)
    cluster.ok("admin", "policy", "set", name, "--max-sessions", str(max_sessions))
    env = cluster.env | {"GPUSLICE_CLIENT_CONFIG": str(cluster.tmp / f"{name}.json")}
    done = cluster.cli("login", cluster.url, "--username", name, "--password-stdin",
                       stdin=password + "\n", env=env)
    assert done.returncode == 0, done.stderr
    token = json.loads(cluster.cli("token", "create", "ci", "--json", env=env).stdout)["token"]
    return {"config": env["GPUSLICE_CLIENT_CONFIG"], "api_token": token}


def _as(cluster: Cluster, user: dict[str, str], *args: str) -> str:
    env = cluster.env | {"GPUSLICE_CLIENT_CONFIG": user["config"]}
    done = cluster.cli(*args, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _collect(client: Client, seen: list[Any]) -> None:
    try:
        for change in client.events():
            seen.append(change)
    except Exception:  # the client is closed at the end of the phase
        return
