"""Memory of `gpuslice up` (manager + local agent in one process): idle, then with 10,000
sessions in its database.

`gpuslice up` runs in a subprocess (SQLite, one mock GPU); once the agent has joined and 15 s
(--settle) have passed, its resident memory is read (/proc). Then 10,000 ended sessions (with
their status history) are written into its database, as after months of use, every page of the
session listing is read once through the API and the node list too, and the memory is read
again after 15 more seconds of heartbeats and scheduling passes.

    python bench/memory.py [--sessions 10000] [--settle 15] [--short]

Last line: ``idle_rss_mb=<MB> loaded_rss_mb=<MB> sessions=<n>``.
"""

from __future__ import annotations

import argparse
import signal
import sqlite3
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._local import forget_node, parse_args  # noqa: E402
from bench.agents import _rss_mb  # noqa: E402
from bench.start_latency import start_platform  # noqa: E402
from bench.throughput import _free_port  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--settle", type=float, default=15.0,
                        help="seconds before each reading (heartbeats, scheduling passes)")
    # 1 s: a heartbeat and a scheduling pass or so; 250 sessions: the listing's pages
    args = parse_args(parser, {"sessions": 250, "settle": 1.0})
    node = f"bench-{uuid.uuid4().hex[:6]}"
    with tempfile.TemporaryDirectory() as tmp:
        proc, client = start_platform(Path(tmp), _free_port(), node)
        try:
            time.sleep(args.settle)
            idle = _rss_mb(proc.pid)
            _fill(Path(tmp) / "gpuslice.db", args.sessions)
            listed = len(client.list_all_sessions())
            client.get_json("/nodes")
            time.sleep(args.settle)
            loaded = _rss_mb(proc.pid)
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(60)
            forget_node(node)
    print(f"gpuslice up: {idle:.0f} MB idle, {loaded:.0f} MB with {listed} sessions listed")
    print(f"idle_rss_mb={idle:.0f} loaded_rss_mb={loaded:.0f} sessions={listed}")


def _fill(database: Path, count: int) -> None:
    """Ended sessions of the admin, each with its two status changes."""
    base = datetime.now(UTC) - timedelta(days=30)
    with sqlite3.connect(database, timeout=30) as db:
        owner = db.execute("SELECT id FROM users LIMIT 1").fetchone()[0]
        rows, history = [], []
        for i in range(count):
            sid = str(uuid.uuid4())
            at = (base + timedelta(seconds=i)).strftime("%Y-%m-%d %H:%M:%S.%f")  # as SQLAlchemy
            rows.append((sid, f"old-{i}", owner, "gpuslice/base:0.1.0", "batch",
                         '["python3", "train.py"]', f'{{"SEED": "{i}"}}', 0, "default", 500,
                         1000, 2**30, "TERMINATED", "exited with code 0", "SUCCESS", 0, 0, at,
                         at))
            history += [(sid, owner, None, "PENDING", "created", at),
                        (sid, owner, "RUNNING", "TERMINATED", "exited with code 0", at)]
        db.executemany(
            "INSERT INTO sessions (id, name, owner_id, image, type, command, env, priority, "
            "pool, gpu, cpu, mem, status, status_reason, result, exit_code, preemptions, "
            "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
            "?, ?)", rows)
        db.executemany(
            "INSERT INTO status_history (session_id, owner_id, from_status, to_status, reason, "
            "at) VALUES (?, ?, ?, ?, ?, ?)", history)


if __name__ == "__main__":
    main()
