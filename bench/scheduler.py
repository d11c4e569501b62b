"""Scheduler core benchmark: one full pass over a large cluster and a long queue.

1,000 nodes x 8 GPUs and 10,000 mixed requests (0.1-1 fGPU slices and 1/2/4/8 whole-GPU jobs)
from 50 users, on an empty cluster; the oldest requests have waited past
``max_wait_before_reserve``, so backfill also holds capacity. Every policy x strategy is timed;
the headline figures are those of the slowest combination.

A pass is timed as the manager's pass computes it (``--no-preemption``: ``schedule()`` alone,
as before): ``schedule_with_holds`` (16 winners of an earlier pass hold capacity on their
node), then ``plan_preemptions`` with the manager's limit (16 winners) for the requests of the
high class (priority 1: a fifth of them) still waiting for capacity, over the low-class
sessions already running (every fourth node runs one batch session of 0.25 fGPU per GPU:
candidates). Applying the placements to the nodes in between is the manager's database work
and is not timed. Pass, preemption and both together are printed apart.

With projects and resource groups (the default; ``--no-projects``: one pool, no projects, as
before issue 32): the nodes are in two groups (70 % A100, 30 % T4), every request runs in one
of 10 projects (half of them with quotas), and asks for one group (a100 35 %, t4 15 %) or any
(50 %).

    python bench/scheduler.py [--nodes 1000] [--requests 10000] [--repeat 5] [--no-projects]
        [--short] [--time-limits] [--no-preemption]

``--time-limits``: every request has a time limit (10 min to 2 h) and half the cluster already
runs one job per GPU with an end, so backfill's holds work out when they are free and later
requests try the held capacity (the figures are then not comparable with a run without it).

The last line is machine-readable: ``pass_seconds_median=<s> pass_cpu_seconds_median=<s>
placements_per_second=<n> schedule_cpu_seconds_median=<s> preempt_cpu_seconds_median=<s>
preemptions=<n>`` (``pass_*``: both together; CPU: the pass's own thread time, apart from other
load), of the slowest combination by CPU time.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from dataclasses import replace
from typing import Any

from _local import parse_args

from gpuslice.common.resources import GiB, Resources
from gpuslice.manager.scheduler import (
    Device,
    Node,
    PassResult,
    Policy,
    Quota,
    Request,
    Running,
    SchedulerConfig,
    Strategy,
    UserState,
    WaitCode,
    queue_order,
)
from gpuslice.manager.scheduler.holds import Hold, schedule_with_holds
from gpuslice.manager.scheduler.preemption import (
    MAX_PER_PASS,
    Candidate,
    Winner,
    plan_preemptions,
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


def add_candidates(nodes: list[Node]) -> list[Candidate]:
    """Every fourth node runs one low-class batch session of 0.25 fGPU, 1 CPU and 4 GiB per
    GPU (the nodes ``--time-limits`` fills are others): what the high class may preempt."""
    out = []
    for i, node in enumerate(nodes):
        if i % 4 != 1:
            continue
        for device in node.devices:
            device.used += 250
            node.cpu_used += 1000
            node.mem_used += 4 * GiB
            out.append(Candidate(f"run-{i:05d}-{device.index}", node.id, 0,
                                 Resources(250, 1000, 4 * GiB), ((device.index, 250),),
                                 float(i * 8 + device.index)))
    return out


def build_holds(nodes: list[Node], queue: list[Request]) -> dict[str, Hold]:
    """16 high-class requests of one slice whose victims are stopping: each holds its slice on
    a node of its group (one of those without candidates)."""
    holds: dict[str, Hold] = {}
    free = [n for i, n in enumerate(nodes) if i % 4 == 3]
    for req in queue_order(queue):
        if len(holds) == MAX_PER_PASS:
            break
        node = next((n for n in free if n.pool == req.pool), None)
        if req.priority == 1 and req.pools is None and req.resources.gpu <= 1000 and node:
            free.remove(node)
            res = req.resources
            holds[req.id] = Hold(node.id, Resources(0, res.cpu, res.mem), ((0, res.gpu),))
    return holds


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


class World:
    """A pass's inputs: cluster, queue, projects, and (with preemption) the candidates and
    holds."""

    def __init__(self, nodes: list[Node], queue: list[Request], projects: dict[str, UserState],
                 candidates: list[Candidate] | None) -> None:
        self.nodes, self.queue, self.projects = nodes, queue, projects
        self.candidates = candidates
        self.holds = build_holds(nodes, queue) if candidates is not None else {}


def applied(nodes: list[Node], result: PassResult) -> list[Node]:
    """The nodes with the pass's placements taken (the manager's write and reload)."""
    by_node: dict[str, list[Any]] = {}
    for placement in result.placements:
        by_node.setdefault(placement.node_id, []).append(placement)
    out = []
    for node in nodes:
        if node.id in by_node:
            node = replace(node, devices=[replace(d) for d in node.devices])
            for p in by_node[node.id]:
                node.cpu_used += p.resources.cpu
                node.mem_used += p.resources.mem
                for piece in p.slices:
                    node.devices[piece.index].used += piece.gpu
        out.append(node)
    return out


def one_pass(world: World, config: SchedulerConfig) -> tuple[list[float], int, int]:
    """Wall and CPU seconds of the pass and of its preemption planning; placed, preemptions."""
    now = float(len(world.queue))
    start, start_cpu = time.perf_counter(), time.thread_time()
    result = schedule_with_holds(world.queue, world.nodes, build_users(), config, now,
                                 world.holds, world.projects)
    times = [time.perf_counter() - start, time.thread_time() - start_cpu]
    if world.candidates is None:
        return [*times, 0.0, 0.0], len(result.placements), 0
    after = applied(world.nodes, result)  # (not timed: the manager's database work)
    start, start_cpu = time.perf_counter(), time.thread_time()
    # as the manager takes them: the high class's requests still waiting for capacity
    waiting = [r for r in world.queue if r.priority == 1
               and (w := result.waiting.get(r.id)) is not None and w.code is WaitCode.CAPACITY]
    winners = [Winner(r, 1) for r in queue_order(waiting)]
    plans = plan_preemptions(winners, world.candidates, after, config, now, MAX_PER_PASS)
    times += [time.perf_counter() - start, time.thread_time() - start_cpu]
    return times, len(result.placements), len(plans)


def run(policy: Policy, strategy: Strategy, world: World, repeat: int
        ) -> tuple[list[float], int, int]:
    """Median wall and CPU seconds of the pass, of the preemption planning and of both (CPU
    time: what they cost on a machine shared with other work); placed, preemptions."""
    config = SchedulerConfig(policy=policy, strategy=strategy, max_wait_before_reserve=5000)
    samples, placed, preempted = [], 0, 0
    for _ in range(repeat):
        times, placed, preempted = one_pass(world, config)
        samples.append([*times, times[0] + times[2], times[1] + times[3]])
    medians = [statistics.median(column) for column in zip(*samples, strict=True)]
    return medians, placed, preempted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-projects", action="store_true",
                        help="One pool and no projects (the model before issue 32).")
    parser.add_argument("--time-limits", action="store_true",
                        help="requests with time limits, half the nodes running jobs that end")
    parser.add_argument("--no-preemption", action="store_true",
                        help="time schedule() alone: no candidates, holds or planning")
    args = parse_args(parser, {"nodes": 50, "requests": 500, "repeat": 1})
    with_projects = not args.no_projects
    nodes = build_cluster(args.nodes, with_projects, running=args.time_limits)
    candidates = None if args.no_preemption else add_candidates(nodes)
    queue = build_queue(args.requests, projects=with_projects, limits=args.time_limits)
    world = World(nodes, queue, build_projects() if with_projects else {}, candidates)
    print(f"cluster: {args.nodes} nodes x 8 GPUs; queue: {args.requests} requests; "
          f"median of {args.repeat} passes; "
          f"{'projects and groups' if with_projects else 'no projects, one pool'}"
          + ("; with time limits" if args.time_limits else "")
          + ("" if candidates is None else f"; {len(candidates)} preemptible sessions running"))
    headline: tuple[float, list[float], int, int, str] = (-1.0, [], 0, 0, "")
    for policy in (Policy.FIFO, Policy.DRF, Policy.BACKFILL):
        for strategy in (Strategy.SPREAD, Strategy.BINPACK):
            m, placed, preempted = run(policy, strategy, world, args.repeat)
            print(f"  {policy.value:8} {strategy.value:7}  schedule {m[0]:.3f} s (cpu {m[1]:.3f})"
                  f"  preempt {m[2]:.3f} s (cpu {m[3]:.3f})  pass {m[4]:.3f} s (cpu {m[5]:.3f})"
                  f"  placed {placed:5d}  preemptions {preempted:2d}")
            name = f"{policy.value}/{strategy.value}"
            headline = max(headline, (m[5], m, placed, preempted, name))
    _, m, placed, preempted, name = headline
    print(f"slowest (cpu): {name}")
    print(f"pass_seconds_median={m[4]:.3f} pass_cpu_seconds_median={m[5]:.3f} "
          f"placements_per_second={placed / m[4]:.0f} schedule_cpu_seconds_median={m[1]:.3f} "
          f"preempt_cpu_seconds_median={m[3]:.3f} preemptions={preempted}")


if __name__ == "__main__":
    main()
