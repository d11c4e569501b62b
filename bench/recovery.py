"""Recovery times of a real cluster: a manager replica killed, a node's agent killed.

The cluster of tests/platform/cluster.py (PostgreSQL, two `manager serve` behind HAProxy, two
`agent serve` with mock GPUs, real Docker), with node_timeout 6 s and 1 s heartbeats. Each
figure stands next to its floor, measured in the same run:

- manager failover: kill -9 the replica node a's agent uses, then create a session that can only
  run on node a (node b is full). ``failover_start_s`` (create → RUNNING) beside ``start_s``,
  the same with every replica up; ``agent_failover_s``: kill → a's first heartbeat through the
  other replica (its own timestamp); ``api_gap_s``: kill → the balancer's first answer (both
  watched at once). The replicas take turns being killed (and restarted).
- node lost: kill -9 the agent of the node holding a session → the session is ERROR "node lost"
  (``node_lost_s``), beside ``node_timeout_s``, below which detection cannot go; then the agent
  restarted → its orphaned container removed (``orphans_removed_s``).

    python bench/recovery.py [--runs 3] [--pg postgresql+asyncpg://…] [--short]

Last line: ``agent_failover_s=… api_gap_s=… failover_start_s=… start_s=… failover_ratio=…
node_lost_s=… node_timeout_s=… node_lost_ratio=… orphans_removed_s=…`` (medians).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the harness lives in tests/

from bench._local import parse_args  # noqa: E402
from tests.platform.cluster import NODE_TIMEOUT_S, Cluster, wait_until  # noqa: E402

DEFAULT_PG = "postgresql+asyncpg://gpuslice:gpuslice@127.0.0.1:5432/gpuslice"
SMALL = ["--cpu", "0.05", "--mem", "32m"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--pg", default=DEFAULT_PG, help="a PostgreSQL server (superuser)")
    args = parse_args(parser, {"runs": 1})
    with tempfile.TemporaryDirectory(prefix="gpuslice-recovery-") as tmp:
        cluster = Cluster(Path(tmp), args.pg)
        try:
            figures = _measure(cluster, args.runs)
        finally:
            cluster.close()
    print(" ".join(f"{k}={v:.2f}" for k, v in figures.items()))


def _measure(cluster: Cluster, runs: int) -> dict[str, float]:
    cluster.start()
    a, b = cluster.node("a"), cluster.node("b")
    cluster.start_agent(b, ["m2", "m1"])
    ballast = _create(cluster, "ballast", "24")  # b is nearly full: probes can only run on a
    cluster.start_agent(a, ["m1", "m2"])
    starts = [_probe(cluster, f"warm-{i}") for i in range(runs + 1)][1:]  # the first warms up
    agent, gap, failover = [], [], []
    uses, other = "m1", "m2"
    for run in range(runs):
        wall = datetime.now(UTC)
        at = cluster.kill(cluster.managers[uses])
        with ThreadPoolExecutor(2) as pool:
            answered = pool.submit(_first_answer, cluster)
            beat = pool.submit(_heartbeat_after, cluster.manager_urls[other], cluster.token(), a,
                               wall)
            gap.append(answered.result() - at)
            agent.append((beat.result() - wall).total_seconds())
        failover.append(_probe(cluster, f"failover-{run}", since=at))
        cluster.start_manager(uses, port=int(cluster.manager_urls[uses].rsplit(":", 1)[1]))
        uses, other = other, uses
        print(f"failover {run + 1}: agent {agent[-1]:.2f} s, api {gap[-1]:.2f} s, "
              f"start {failover[-1]:.2f} s", file=sys.stderr)
    lost, orphans = [], []
    for run in range(runs):
        detected, removed = _lose_node(cluster, ballast, {a: ["m1", "m2"], b: ["m2", "m1"]})
        lost.append(detected)
        orphans.append(removed)
        print(f"node lost {run + 1}: {detected:.2f} s; orphan removed {removed:.2f} s",
              file=sys.stderr)
        if run + 1 < runs:  # the next run's session to lose
            ballast = _create(cluster, "ballast", "24")
    med = statistics.median
    return {
        "agent_failover_s": med(agent), "api_gap_s": med(gap),
        "failover_start_s": med(failover), "start_s": med(starts),
        "failover_ratio": med(failover) / med(starts),
        "node_lost_s": med(lost), "node_timeout_s": NODE_TIMEOUT_S,
        "node_lost_ratio": med(lost) / NODE_TIMEOUT_S, "orphans_removed_s": med(orphans),
    }


def _lose_node(cluster: Cluster, session: str, managers: dict[str, list[str]]
               ) -> tuple[float, float]:
    """Kill -9 the agent running ``session``: seconds until the session is ERROR, then
    seconds from the agent's restart until its orphaned container is gone."""
    victim = _node_of(cluster, session)
    at = cluster.kill(cluster.agents[victim])
    wait_until("node lost", lambda: _status(cluster, session) == "ERROR", 60, poll=0.05)
    detected = time.monotonic() - at
    back = time.monotonic()
    cluster.start_agent(victim, managers[victim])
    wait_until("orphan removed", lambda: not cluster.containers(victim), 60, poll=0.05)
    return detected, time.monotonic() - back


def _create(cluster: Cluster, name: str, gpu: str) -> str:
    [made] = json.loads(cluster.ok("session", "create", "--gpu", gpu, *SMALL, "--name", name,
                                   "--json"))
    wait_until(f"{name} runs", lambda: _status(cluster, made["id"]) == "RUNNING", 120, poll=0.05)
    return str(made["id"])


def _probe(cluster: Cluster, name: str, since: float | None = None) -> float:
    """Seconds from ``since`` (else from the create) until a new 2-fGPU session runs."""
    started = time.monotonic()
    session = _create(cluster, name, "2")
    took = time.monotonic() - (since if since is not None else started)
    cluster.ok("session", "destroy", session)
    return took


def _first_answer(cluster: Cluster) -> float:
    def answers() -> bool:
        try:
            return httpx.get(f"{cluster.url}/api/v1/auth/me", timeout=5, headers={
                "Authorization": f"Bearer {cluster.token()}"}).status_code == 200
        except httpx.TransportError:
            return False

    wait_until("the balancer answers", answers, 30, poll=0.02)
    return time.monotonic()


def _heartbeat_after(replica: str, token: str, node: str, wall: datetime) -> datetime:
    """``node``'s first heartbeat after ``wall`` (its timestamp), read from the live
    ``replica`` directly every 20 ms (heartbeats come every second)."""
    def beat() -> datetime | None:
        nodes = httpx.get(f"{replica}/api/v1/nodes", timeout=5,
                          headers={"Authorization": f"Bearer {token}"}).json()
        last = next(n["last_heartbeat_at"] for n in nodes if n["name"] == node)
        when = datetime.fromisoformat(last) if last else None
        return when if when is not None and when > wall else None

    return wait_until(f"{node} heartbeats again", beat, 60, poll=0.02)


def _status(cluster: Cluster, session_id: str) -> str:
    return cluster.statuses([session_id])[session_id]


def _node_of(cluster: Cluster, session_id: str) -> str:
    session = next(s for s in cluster.sessions() if s["id"] == session_id)
    return str(session["placement"]["node_name"])


if __name__ == "__main__":
    main()
