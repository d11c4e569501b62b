"""Fairness benchmark: the pure scheduler core in a discrete-event simulation of GPU nodes.

Three scenarios, each on simulated nodes (no manager, no database: ``schedule()`` is called at
every event, as the manager's loop is woken by every arrival and every end):

- **starvation**: a steady stream of 0.25-fGPU jobs (the offered load, with the 1-GPU jobs, at
  ``--load`` of capacity) and a 1-GPU job every ``--big-every`` seconds, for ``--hours``
  simulated hours. The 1-GPU jobs' waits, median and p99, under fifo, backfill without
  reservations (``reserve_head`` off, no aging: greedy) and backfill with reservations (the
  head of the queue holds capacity; a job starts on it only if its time limit ends first).
  The target: with reservations, both at most 2x the longest running time.
- **fragmentation**: an arrival/departure trace of mixed slices (0.1 to 1 fGPU); every
  simulated hour, the share of GPUs wholly free for a whole-GPU job under binpack and spread,
  beside the best found offline for the same running slices (first-fit decreasing repacking,
  and its bound, the total rounded up), averaged over the hours.
- **preemption**: a high-class 1-GPU job arrives at a cluster full of low-class 0.25-fGPU
  jobs (some interactive, some not past ``--min-runtime``), with as many waiting; its time
  from request to RUNNING (its container's start taking ``--start-latency``). Victims are
  picked by the manager's own planner (``scheduler.preemption.plan_preemptions`` over
  ``may_preempt``'s candidates) and stop within ``--grace`` seconds (between ``1 -
  --stop-spread`` and all of it: a checkpoint takes what it takes); passes run through
  ``schedule_with_holds``, so the winner's planned slices are held for it until it starts.
  Beside it, the same trials with no holds (plain ``schedule()``, and a winner still waiting
  preempts again), to show what the hold saves.

    python bench/fairness.py [--nodes 4] [--gpus 8] [--hours 24] [--short]

The last line is machine-readable: ``starvation_wait_p50_s=… starvation_wait_p99_s=…
starvation_fifo_wait_p50_s=… starvation_bound_s=… starvation_ok=1 fragmentation_free_binpack=…
fragmentation_free_spread=… fragmentation_free_best=… preempt_to_running_p50_s=…
preempt_to_running_p99_s=… preempt_victims_mean=… preempt_held_taken=0 preempt_ok=1``.
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
import statistics
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from _local import parse_args

from gpuslice.common.resources import GiB, Resources
from gpuslice.manager.scheduler import (
    Device,
    Node,
    Placement,
    Policy,
    Request,
    Running,
    SchedulerConfig,
    Strategy,
    schedule,
)
from gpuslice.manager.scheduler.holds import Hold, schedule_with_holds
from gpuslice.manager.scheduler.preemption import (
    Candidate,
    Winner,
    may_preempt,
    plan_preemptions,
    ranked,
)

SMALL = 250  # milli-fGPU
WHOLE = 1000


@dataclass(order=True, slots=True)
class Job:
    arrives: float
    id: str = field(compare=False)
    gpu: int = field(compare=False)
    runs: float = field(compare=False)  # how long it really runs
    limit: float | None = field(compare=False)  # its time limit (>= runs)
    priority: int = field(default=0, compare=False)


@dataclass(slots=True)
class Started:
    job: Job
    placement: Placement
    at: float
    run: Running  # as the scheduler sees it on the node


class Cluster:
    """Simulated nodes: what runs where, kept as the manager keeps it (used amounts and
    ``Node.running`` with each allocation's end by its time limit)."""

    def __init__(self, nodes: int, gpus: int) -> None:
        self.nodes = {
            f"n{i:03d}": Node(
                f"n{i:03d}", f"node-{i}", 1024_000, 4096 * GiB,
                [Device(d, f"GPU-{i}-{d}", "Sim A100", 80 * GiB, 108) for d in range(gpus)],
                WHOLE,
            )
            for i in range(nodes)
        }
        self.running: dict[str, Started] = {}

    def start(self, job: Job, placement: Placement, now: float) -> Started:
        node = self.nodes[placement.node_id]
        ends = None if job.limit is None else now + job.limit
        run = Running(ends, placement.resources.cpu, placement.resources.mem,
                      tuple((s.index, s.gpu) for s in placement.slices))
        self._shift(node, placement, +1)
        node.running = (*node.running, run)
        started = self.running[job.id] = Started(job, placement, now, run)
        return started

    def end(self, job_id: str) -> None:
        started = self.running.pop(job_id)
        node = self.nodes[started.placement.node_id]
        self._shift(node, started.placement, -1)
        node.running = tuple(r for r in node.running if r is not started.run)

    def gpus(self) -> list[Device]:
        return [d for n in self.nodes.values() for d in n.devices]

    @staticmethod
    def _shift(node: Node, placement: Placement, sign: int) -> None:
        by_index = {d.index: d for d in node.devices}
        for s in placement.slices:
            by_index[s.index].used += sign * s.gpu
        node.cpu_used += sign * placement.resources.cpu
        node.mem_used += sign * placement.resources.mem


def simulate(
    jobs: list[Job], cluster: Cluster, config: SchedulerConfig, until: float,
    on_hour: list[float] | None = None, start_latency: float = 0.0,
) -> dict[str, float]:
    """Run the trace; each job's wait (arrival to start). ``on_hour``: the share of GPUs
    wholly free after each simulated hour is appended to it (and the best one offline, as
    ``(binpack/spread share, best share)`` pairs in ``samples``)."""
    arrivals = sorted(jobs)
    events: list[tuple[float, int, str]] = []  # (time, kind 0 end / 1 arrival, job id)
    by_id = {j.id: j for j in arrivals}
    for j in arrivals:
        heapq.heappush(events, (j.arrives, 1, j.id))
    hour = 3600.0
    pending: dict[str, Job] = {}
    waits: dict[str, float] = {}
    while events and events[0][0] <= until:
        now = events[0][0]
        while on_hour is not None and hour <= now:
            on_hour.append(_wholly_free(cluster))
            hour += 3600.0
        while events and events[0][0] == now:
            _, kind, job_id = heapq.heappop(events)
            if kind == 0:
                cluster.end(job_id)
            else:
                pending[job_id] = by_id[job_id]
        if not pending:
            continue
        queue = [_request(j) for j in pending.values()]
        result = schedule(queue, list(cluster.nodes.values()), {}, config, now)
        for placement in result.placements:
            job = pending.pop(placement.request_id)
            cluster.start(job, placement, now)
            waits[job.id] = now - job.arrives + start_latency
            heapq.heappush(events, (now + start_latency + job.runs, 0, job.id))
    return waits


def _request(job: Job) -> Request:
    return Request(job.id, "user", Resources(job.gpu, 100, GiB), job.arrives, job.priority,
                   time_limit=job.limit)


def _wholly_free(cluster: Cluster) -> float:
    gpus = cluster.gpus()
    return sum(d.used == 0 for d in gpus) / len(gpus)


def best_wholly_free(cluster: Cluster) -> tuple[float, float]:
    """The share of GPUs wholly free if the running slices were repacked: first-fit
    decreasing (a packing found offline), and the bound no packing beats (total, rounded up)."""
    slices = sorted((s.gpu for st in cluster.running.values() for s in st.placement.slices),
                    reverse=True)
    bins: list[int] = []
    for size in slices:
        for i, used in enumerate(bins):
            if used + size <= WHOLE:
                bins[i] += size
                break
        else:
            bins.append(size)
    total = len(cluster.gpus())
    bound = math.ceil(sum(slices) / WHOLE)
    return (total - len(bins)) / total, (total - bound) / total


# ------------------------------------------------------------ starvation


def starvation_trace(args: argparse.Namespace, rng: random.Random) -> tuple[list[Job], float]:
    """Small jobs by a Poisson process and a 1-GPU job every ``big_every`` seconds; the load
    offered by both is ``args.load`` of the cluster's GPUs. Returns the jobs and the longest
    running time."""
    capacity = args.nodes * args.gpus * WHOLE
    horizon = args.hours * 3600.0
    lo, hi = args.min_run, args.max_run
    mean_run = (lo + hi) / 2
    big_load = WHOLE * mean_run / args.big_every
    rate = (args.load * capacity - big_load) / (SMALL * mean_run)  # small arrivals per second
    jobs, t, i = [], 0.0, 0
    while True:
        t += rng.expovariate(rate)
        if t >= horizon:
            break
        runs = rng.uniform(lo, hi)
        jobs.append(Job(t, f"s{i:06d}", SMALL, runs, _limit(runs)))
        i += 1
    for k, at in enumerate(_every(args.big_every / 2, args.big_every, horizon)):
        runs = rng.uniform(lo, hi)
        jobs.append(Job(at, f"big{k:04d}", WHOLE, runs, _limit(runs)))
    return jobs, hi


def _limit(runs: float) -> float:
    """A user's time limit: what the job needs, rounded up to the next 5 minutes."""
    return math.ceil(runs / 300) * 300


def _every(first: float, step: float, until: float) -> Iterator[float]:
    at = first
    while at < until:
        yield at
        at += step


def starvation(args: argparse.Namespace) -> dict[str, tuple[float, float, float]]:
    """Per policy: the 1-GPU jobs' median and p99 wait, and the small jobs' median wait."""
    jobs, _ = starvation_trace(args, random.Random(args.seed))
    configs = {
        "fifo": SchedulerConfig(Policy.FIFO),
        "greedy": SchedulerConfig(Policy.BACKFILL, reserve_head=False,
                                  max_wait_before_reserve=math.inf),
        "backfill": SchedulerConfig(Policy.BACKFILL, reserve_head=True),
    }
    out = {}
    for name, config in configs.items():
        waits = simulate([replace(j) for j in jobs], Cluster(args.nodes, args.gpus), config,
                         until=args.hours * 3600.0 + 4 * args.max_run)
        big = [w for jid, w in waits.items() if jid.startswith("big")]
        big += [math.inf] * (sum(j.id.startswith("big") for j in jobs) - len(big))  # never ran
        small = [w for jid, w in waits.items() if not jid.startswith("big")]
        out[name] = (statistics.median(big), _p99(big), statistics.median(small or [0.0]))
    return out


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]


# ------------------------------------------------------------ fragmentation


def fragmentation(args: argparse.Namespace) -> dict[str, tuple[float, float]]:
    """Per strategy: the mean share of GPUs wholly free, hour by hour, and the best offline."""
    rng = random.Random(args.seed + 1)
    capacity = args.nodes * args.gpus * WHOLE
    horizon = args.hours * 3600.0
    sizes = (100, 250, 250, 500, 500, 750, 1000)
    mean = sum(sizes) / len(sizes)
    rate = 0.7 * capacity / (mean * (args.min_run + args.max_run) / 2)
    jobs, t = [], 0.0
    while (t := t + rng.expovariate(rate)) < horizon:
        runs = rng.uniform(args.min_run, args.max_run)
        jobs.append(Job(t, f"j{len(jobs):06d}", rng.choice(sizes), runs, _limit(runs)))
    out = {}
    for strategy in (Strategy.BINPACK, Strategy.SPREAD):
        cluster, shares = Cluster(args.nodes, args.gpus), []
        best: list[float] = []
        hourly = _BestTracker(cluster, shares, best)
        simulate([replace(j) for j in jobs], cluster,
                 SchedulerConfig(Policy.BACKFILL, strategy, reserve_head=False,
                                 max_wait_before_reserve=math.inf),
                 until=horizon, on_hour=hourly)
        out[strategy.value] = (statistics.fmean(shares), statistics.fmean(best))
    return out


class _BestTracker(list[float]):
    """Appended to once an hour by ``simulate``: keeps the share and the best one offline."""

    def __init__(self, cluster: Cluster, shares: list[float], best: list[float]) -> None:
        super().__init__()
        self.cluster, self.shares, self.best = cluster, shares, best

    def append(self, share: float) -> None:
        self.shares.append(share)
        self.best.append(best_wholly_free(self.cluster)[0])


# ------------------------------------------------------------ preemption

LOW, HIGH = 0, 10  # the classes' ranks: the cluster's work, and the winner's


@dataclass(slots=True)
class _Trial:
    """One preemption trial as the manager keeps it: what runs (and since when, and whether
    batch), what waits (victims back in the queue keep their place), and the winner's hold."""

    cluster: Cluster
    batch: dict[str, bool]
    pending: dict[str, Job] = field(default_factory=dict)
    stopping: set[str] = field(default_factory=set)  # victims told to stop, not yet gone
    holds: dict[str, Hold] = field(default_factory=dict)
    victims: int = 0
    planned: set[tuple[str, int]] = field(default_factory=set)  # (node, GPU) for the winner
    taken: int = 0  # others placed there while the winner waits (schedule_with_holds: never)


def preemption(args: argparse.Namespace) -> dict[str, tuple[list[float], list[int], int]]:
    """Per mode ("holds": the manager's, "no holds": plain ``schedule()`` and a winner
    preempting again while its victims stop): seconds from a high-class request to its
    RUNNING and victims per winner, one per trial, and how many other jobs started on the
    GPUs planned for a winner while it waited."""
    out = {}
    for mode in ("holds", "no holds"):
        times, victims, taken = [], [], 0
        for trial in range(args.trials):
            # a seed per trial: the same trials in both modes, whatever each drew before
            rng = random.Random((args.seed + 2) * 10_000 + trial)
            seconds, trial_state = _preempt_trial(args, rng, trial, held=mode == "holds")
            times.append(seconds)
            victims.append(trial_state.victims)
            taken += trial_state.taken
        out[mode] = (times, victims, taken)
    return out


def _preempt_trial(
    args: argparse.Namespace, rng: random.Random, trial: int, held: bool,
) -> tuple[float, _Trial]:
    """A 1-GPU job of the high class arrives at a cluster full of 0.25-fGPU low-class jobs
    (a tenth interactive; each started up to 4 minimum runtimes ago), with as many more
    waiting. A pass runs at every event, as the manager's loop is woken by every arrival and
    every report; then ``plan_preemptions`` picks victims among ``may_preempt``'s candidates.
    A victim stops after between ``1 - stop_spread`` and all of the grace (then SIGKILL) and
    goes back to the queue in its place."""
    config = SchedulerConfig(Policy.BACKFILL)
    cluster = Cluster(args.nodes, args.gpus)
    slots = args.nodes * args.gpus * WHOLE // SMALL
    fill = [Job(i - 1e6, f"low{trial}-{i}", SMALL, 1e9, None) for i in range(2 * slots)]
    sim = _Trial(cluster, {j.id: rng.random() >= 0.1 for j in fill})
    first = schedule([_request(j) for j in fill], list(cluster.nodes.values()), {}, config, 0.0)
    by_id = {j.id: j for j in fill}
    for p in first.placements:
        started = cluster.start(by_id.pop(p.request_id), p, 0.0)
        started.at = -rng.uniform(0, 4 * args.min_runtime)  # a quarter not past its minimum
    sim.pending.update(by_id)
    winner = Job(rng.uniform(0, 60), f"high{trial}", WHOLE, 600.0, 600.0,
                 priority=ranked(HIGH, 0))
    sim.pending[winner.id] = winner
    events: list[tuple[float, str]] = [(winner.arrives, "")]
    while events:
        now, gone = heapq.heappop(events)
        if gone:  # its agent reports the container gone: back in the queue, capacity free
            cluster.end(gone)
            sim.stopping.discard(gone)
            sim.pending[gone] = by_id[gone]
        placed = _pass(sim, config, now, held)
        if winner.id in placed:
            return now + args.start_latency - winner.arrives, sim
        for victim in _preempt(sim, winner, config, now, held, args.min_runtime):
            by_id[victim.id] = victim
            stops = args.grace * (1 - args.stop_spread * rng.random())
            heapq.heappush(events, (now + stops, victim.id))
    return math.inf, sim  # no victims could make room


def _pass(sim: _Trial, config: SchedulerConfig, now: float, held: bool) -> set[str]:
    """One scheduling pass over what waits; the ids it placed. A hold whose victims are all
    gone and whose winner still does not fit is dropped, as the manager drops it."""
    queue = [_request(j) for j in sim.pending.values()]
    nodes = list(sim.cluster.nodes.values())
    result = (schedule_with_holds(queue, nodes, {}, config, now, sim.holds) if held
              else schedule(queue, nodes, {}, config, now))
    winner_placed = any(p.request_id.startswith("high") for p in result.placements)
    for p in result.placements:
        hold = sim.holds.get(p.request_id)
        if not winner_placed and any((p.node_id, s.index) in sim.planned for s in p.slices):
            sim.taken += 1
        if hold is not None:
            assert p.node_id == hold.node_id, "a winner starts on its held node only"
            del sim.holds[p.request_id]
        sim.cluster.start(sim.pending.pop(p.request_id), p, now)
    if not sim.stopping:
        sim.holds.clear()
    return {p.request_id for p in result.placements}


def _preempt(
    sim: _Trial, winner: Job, config: SchedulerConfig, now: float, held: bool,
    min_runtime: float,
) -> list[Job]:
    """The manager's ``preempt`` step for the winner if it waits with no hold: victims by
    ``plan_preemptions``; with holds, the winner then holds its planned slices."""
    if winner.id not in sim.pending or winner.id in sim.holds:
        return []
    candidates = [
        Candidate(st.job.id, st.placement.node_id, LOW, st.placement.resources,
                  tuple((s.index, s.gpu) for s in st.placement.slices), st.at)
        for st in sim.cluster.running.values()
        if st.job.id not in sim.stopping
        and may_preempt(sim.batch[st.job.id], LOW, HIGH, False, now - st.at, min_runtime)
    ]
    nodes = list(sim.cluster.nodes.values())
    plans = plan_preemptions([Winner(_request(winner), HIGH)], candidates, nodes, config, now)
    if not plans:
        return []
    plan = plans[0]
    if held:
        res = plan.placement.resources  # held as the manager holds it: cpu, memory, slices
        sim.holds[winner.id] = Hold(plan.node_id, Resources(0, res.cpu, res.mem),
                                    tuple((s.index, s.gpu) for s in plan.placement.slices))
    for vid in plan.victims:
        started = sim.cluster.running[vid]
        assert sim.batch[vid] and now - started.at >= min_runtime, f"{vid} is not a candidate"
    sim.planned.update((plan.node_id, s.index) for s in plan.placement.slices)
    sim.stopping.update(plan.victims)
    sim.victims += len(plan.victims)
    return [sim.cluster.running[v].job for v in plan.victims]


# ------------------------------------------------------------ main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per node")
    parser.add_argument("--hours", type=float, default=24.0, help="simulated hours")
    parser.add_argument("--load", type=float, default=0.9, help="offered load (starvation)")
    parser.add_argument("--min-run", type=float, default=600.0, help="shortest job, seconds")
    parser.add_argument("--max-run", type=float, default=3600.0, help="longest job, seconds")
    parser.add_argument("--big-every", type=float, default=1800.0,
                        help="seconds between 1-GPU jobs (starvation)")
    parser.add_argument("--grace", type=float, default=10.0, help="victims' grace, seconds")
    parser.add_argument("--start-latency", type=float, default=0.5,
                        help="a container's start after its placement, seconds (preemption)")
    parser.add_argument("--trials", type=int, default=21, help="preemption trials")
    parser.add_argument("--min-runtime", type=float, default=300.0,
                        help="the low class's minimum runtime before preemption, seconds")
    parser.add_argument("--stop-spread", type=float, default=0.5,
                        help="a victim stops after (1 - this) to 1 x the grace (0: all of it)")
    parser.add_argument("--seed", type=int, default=11)
    args = parse_args(parser, {"nodes": 2, "gpus": 4, "hours": 3, "trials": 3})

    print(f"cluster: {args.nodes} nodes x {args.gpus} GPUs; {args.hours:g} simulated hours; "
          f"jobs run {args.min_run:g}-{args.max_run:g} s")
    starved = starvation(args)
    bound = 2 * args.max_run
    print(f"starvation (load {args.load:.0%}; a 1-GPU job every {args.big_every:g} s), "
          "waits in seconds:")
    print(f"  {'':24}{'fifo':>12}{'greedy':>12}{'backfill':>12}")
    for i, label in enumerate(("1-GPU median", "1-GPU p99", "0.25-fGPU median")):
        row = "".join(f"{starved[p][i]:12.0f}" for p in ("fifo", "greedy", "backfill"))
        print(f"  {label:24}{row}")
    p50, p99 = starved["backfill"][0], starved["backfill"][1]
    ok = int(p50 <= bound and p99 <= bound)
    print(f"  target: backfill with reservations <= 2 x longest run ({bound:g} s): "
          f"{'met' if ok else 'NOT met'}")

    frag = fragmentation(args)
    (packed, best), (spread, best_spread) = frag["binpack"], frag["spread"]
    print("fragmentation (mixed 0.1-1 fGPU slices, load 70%), GPUs wholly free, hourly mean:")
    print(f"  {'binpack':>10}{'spread':>10}{'best offline':>14}")
    print(f"  {packed:10.1%}{spread:10.1%}{best:14.1%}")
    print(f"  gap: binpack {best - packed:+.1%} from the best repacking of its own slices, "
          f"spread {best_spread - spread:+.1%} of its own")

    pre = preemption(args)
    times, victims, taken = pre["holds"]
    pre50, pre99 = statistics.median(times), _p99(times)
    pre_ok = int(pre50 <= args.grace + 1 and taken == 0)
    print(f"preemption (grace {args.grace:g} s, victims stop after {1 - args.stop_spread:g}-1 x "
          f"it; {args.trials} trials; victims by plan_preemptions), request to RUNNING:")
    print(f"  {'':24}{'median s':>10}{'p99 s':>10}{'victims':>10}{'taken':>12}")
    for mode, (t, v, k) in pre.items():
        print(f"  {mode:24}{statistics.median(t):10.1f}{_p99(t):10.1f}"
              f"{statistics.fmean(v):10.1f}{k:12d}")
    print("  (victims: per winner; taken: other jobs started on a winner's planned GPUs "
          "while it waited)")
    print(f"  target: holds, median <= grace + 1 s ({args.grace + 1:g} s), nothing taken: "
          f"{'met' if pre_ok else 'NOT met'}")
    fifo50 = starved["fifo"][0]
    print(f"starvation_wait_p50_s={p50:.0f} starvation_wait_p99_s={p99:.0f} "
          f"starvation_fifo_wait_p50_s={fifo50:.0f} "
          f"starvation_greedy_wait_p99_s={starved['greedy'][1]:.0f} "
          f"starvation_bound_s={bound:.0f} starvation_ok={ok} "
          f"fragmentation_free_binpack={packed:.3f} fragmentation_free_spread={spread:.3f} "
          f"fragmentation_free_best={best:.3f} preempt_to_running_p50_s={pre50:.1f} "
          f"preempt_to_running_p99_s={pre99:.1f} "
          f"preempt_victims_mean={statistics.fmean(victims):.1f} preempt_held_taken={taken} "
          f"preempt_ok={pre_ok}")


if __name__ == "__main__":
    main()
