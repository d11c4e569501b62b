"""Scheduler core benchmark: one full pass over a large cluster and a long queue.

1,000 nodes x 8 GPUs and 10,000 mixed requests (0.1-1 fGPU slices and 1/2/4/8 whole-GPU jobs)
from 50 users, on an empty cluster; the oldest requests have waited past
``max_wait_before_reserve``, so backfill also holds capacity. Every policy x strategy is timed;
the headline figures are those of the slowest combination.

With projects and resource groups (the default; ``--no-projects``: one pool, no projects, as
before issue 32): the nodes are in two groups (70 % A100, 30 % T4), every request runs in one
of 10 projects (half of them with quotas), and asks for one group (a100 35 %, t4 15 %) or any
(50 %).

    python bench/scheduler.py [--nodes 1000] [--requests 10000] [--repeat 5] [--no-projects]
        [--short] [--time-limits]

``--time-limits``: every request has a time limit (10 min to 2 h) and half the cluster already
runs one job per GPU with an end, so backfill's holds work out when they are free and later
requests try the held capacity (the figures are then not comparable with a run without it).

The last line is machine-readable: ``pass_seconds_median=<s> pass_cpu_seconds_median=<s>
placements_per_second=<n>`` (CPU: the pass's own thread time, apart from other load).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from typing import Any

from _local import parse_args

from gpuslice.common.resources import GiB, Resources
from gpuslice.manager.scheduler import (
    Device,
    Node,
    Policy,
    Quota,
    Request,
    Running,
    SchedulerConfig,
    Strategy,
    UserState,
    schedule,
)

GROUPS = frozenset({"a100", "t4"})


def build_cluster(n_nodes: int, groups: bool = True, running: bool = False) -> list[Node]:
    nodes = []
    for i in range(n_nodes):
        t4 = groups and i % 10 >= 7
        model, memory = ("NVIDIA T4", 16 * GiB) if t4 else ("NVIDIA A100-SXM4-80GB", 80 * GiB)
        nodes.append(Node(
            f"node-{i:04d}", f"node-{i:04d}", cpu=128_000, mem=1024 * GiB,
            devices=[Device(d, f"GPU-{i:04d}-{d}", model, memory, 108) for d in range(8)],
            device_capacity=1000, pool=("t4" if t4 else "a100") if groups else "default",
        ))
    if running:  # every other node: a quarter of each GPU busy, ending within two hours
        rng = random.Random(3)
        for node in nodes[::2]:
            for device in node.devices:
                device.used = 250
            node.running = tuple(
                Running(float(rng.randrange(600, 7200)), 0, 0, ((d.index, 250),))
                for d in node.devices
            )
    return nodes


def build_queue(n_requests: int, seed: int = 7, projects: bool = True,
                limits: bool = False) -> list[Request]:
    rng = random.Random(seed)
    queue = []
    for i in range(n_requests):
        if rng.random() < 0.8:
            gpu = rng.randrange(2, 21) * 50  # 0.1 .. 1.0 fGPU in 0.05 steps
        else:
            gpu = rng.choice((1, 1, 2, 2, 4, 8)) * 1000
        res = Resources(gpu, rng.randrange(1, 9) * 1000, rng.randrange(2, 65) * GiB)
        user = rng.randrange(50)
        extra: dict[str, Any] = {}
        if projects:
            where = rng.random()
            pool, pools = ("a100", None) if where < 0.35 else ("t4", None) if where < 0.5 else (
                "a100,t4", GROUPS)
            extra = {"project": f"proj-{user // 5}", "pool": pool, "pools": pools}
        limit = float(rng.randrange(600, 7200)) if limits else None
        queue.append(
            Request(f"req-{i:05d}", f"user-{user:02d}", res, enqueued_at=float(i),
                    priority=rng.choice((0, 0, 0, 0, 1)), time_limit=limit, **extra)
        )
    return queue


def build_projects() -> dict[str, UserState]:
    # half the projects with quotas, so the project path is exercised too
    return {
        f"proj-{p}": UserState(Quota(max_sessions=3000, max_gpu=2_000_000))
        for p in range(0, 10, 2)
    }


def build_users() -> dict[str, UserState]:
    # a few users with quotas, so the quota path is exercised too
    return {
        f"user-{u:02d}": UserState(Quota(max_sessions=400, max_gpu=300_000))
        for u in range(0, 50, 5)
    }


def run(policy: Policy, strategy: Strategy, nodes: list[Node], queue: list[Request],
        repeat: int, projects: dict[str, UserState]) -> tuple[float, float, int]:
    """Median wall and CPU seconds of a pass (CPU time: what the pass itself costs on a
    machine shared with other work), and how many requests it placed."""
    config = SchedulerConfig(policy=policy, strategy=strategy, max_wait_before_reserve=5000)
    users = build_users()
    times, cpu, placed = [], [], 0
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.thread_time()
        result = schedule(queue, nodes, users, config, now=float(len(queue)), projects=projects)
        times.append(time.perf_counter() - start)
        cpu.append(time.thread_time() - start_cpu)
        placed = len(result.placements)
    return statistics.median(times), statistics.median(cpu), placed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-projects", action="store_true",
                        help="One pool and no projects (the model before issue 32).")
    parser.add_argument("--time-limits", action="store_true",
                        help="requests with time limits, half the nodes running jobs that end")
    args = parse_args(parser, {"nodes": 50, "requests": 500, "repeat": 1})
    with_projects = not args.no_projects
    nodes = build_cluster(args.nodes, with_projects, running=args.time_limits)
    queue = build_queue(args.requests, projects=with_projects, limits=args.time_limits)
    projects = build_projects() if with_projects else {}
    print(f"cluster: {args.nodes} nodes x 8 GPUs; queue: {args.requests} requests; "
          f"median of {args.repeat} passes; "
          f"{'projects and groups' if with_projects else 'no projects, one pool'}"
          + ("; with time limits" if args.time_limits else ""))
    headline = (0.0, 0.0, 0, "")
    for policy in (Policy.FIFO, Policy.DRF, Policy.BACKFILL):
        for strategy in (Strategy.SPREAD, Strategy.BINPACK):
            median, cpu, placed = run(policy, strategy, nodes, queue, args.repeat, projects)
            print(f"  {policy.value:8} {strategy.value:7}  pass {median:.3f} s "
                  f"(cpu {cpu:.3f} s)  placed {placed:5d}  {placed / median:9.0f} placements/s")
            headline = max(headline, (median, cpu, placed, f"{policy.value}/{strategy.value}"))
    median, cpu, placed, name = headline
    print(f"slowest: {name}")
    print(f"pass_seconds_median={median:.3f} pass_cpu_seconds_median={cpu:.3f} "
          f"placements_per_second={placed / median:.0f}")


if __name__ == "__main__":
    main()
