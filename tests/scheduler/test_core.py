import gc

from gpuslice.common.resources import GiB, Resources
from gpuslice.manager.scheduler import (
    Policy,
    Quota,
    Running,
    SchedulerConfig,
    Strategy,
    UserState,
    WaitCode,
    check_request,
    queue_order,
    schedule,
)

from .factories import apply, node, queue, release, req

FIFO = SchedulerConfig(policy=Policy.FIFO)
BACKFILL = SchedulerConfig(policy=Policy.BACKFILL, max_wait_before_reserve=600)
GREEDY_BACKFILL = SchedulerConfig(
    policy=Policy.BACKFILL, max_wait_before_reserve=600, reserve_head=False)
DRF = SchedulerConfig(policy=Policy.DRF)


def placed_ids(result):
    return [p.request_id for p in result.placements]


def test_users_scenario_two_fgpu_three_requests_then_free_one():
    """One node, one 8 GiB GPU, fgpu_per_gpu = 2: three 1-fGPU requests -> two placed."""
    nodes = [node("node-1", gpus=1, gpu_mem="8GiB", fgpu_per_gpu=2)]
    requests = queue(3, 1)
    first = schedule(requests, nodes, {}, FIFO, now=10)
    assert placed_ids(first) == ["r000", "r001"]
    for p in first.placements:
        assert p.slices[0].mem == 4 * GiB  # 1 of 2 fGPU gets half of 8 GiB
        assert p.slices[0].sms == 54
    waiting = first.waiting["r002"]
    assert waiting.code is WaitCode.CAPACITY
    assert waiting.position == 1
    assert waiting.reason == "needs 1.0 fGPU on one GPU; no GPU has a free slice"

    apply(nodes, first.placements)
    release(nodes, first.placements[:1])
    second = schedule(requests[2:], nodes, {}, FIFO, now=11)
    assert placed_ids(second) == ["r002"]
    assert second.waiting == {}


def test_inputs_are_not_mutated_and_the_same_input_gives_the_same_output():
    nodes = [node("a", gpus=2), node("b", gpus=2)]
    requests = [req(f"r{i}", g, at=i) for i, g in enumerate([0.5, 1, 0.25, 2, 0.75, 0.5])]
    one = schedule(requests, nodes, {}, BACKFILL, now=0)
    two = schedule(list(reversed(requests)), nodes, {}, BACKFILL, now=0)
    assert one == two
    assert all(d.used == 0 for n in nodes for d in n.devices)


def test_largest_free_slice_is_named_in_the_reason():
    nodes = [node("node-3", gpus=2)]
    nodes[0].devices[0].used = 900
    nodes[0].devices[1].used = 750
    result = schedule([req("x", 0.5)], nodes, {}, FIFO, now=0)
    assert result.waiting["x"].reason == (
        "needs 0.5 fGPU on one GPU; the largest free slice is 0.25 fGPU (node-3 GPU 1)"
    )


def test_fifo_head_blocks_its_pool_but_not_other_pools():
    nodes = [node("a", gpus=1), node("b", gpus=1, pool="other")]
    nodes[0].devices[0].used = 500
    requests = [
        req("big", 1, at=0), req("small", 0.25, at=1), req("small2", 0.25, at=2),
        req("elsewhere", 1, at=3, pool="other"),
    ]
    result = schedule(requests, nodes, {}, FIFO, now=5)
    assert placed_ids(result) == ["elsewhere"]
    assert result.waiting["small"].code is WaitCode.FIFO
    assert result.waiting["small"].reason == "waiting behind 1 earlier session (fifo)"
    assert result.waiting["small2"].reason == "waiting behind 2 earlier sessions (fifo)"
    assert result.waiting["small2"].position == 3


def test_backfill_without_head_reservation_lets_later_requests_that_fit_start():
    nodes = [node("a", gpus=1)]
    nodes[0].devices[0].used = 500
    requests = [req("big", 1, at=0), req("small", 0.25, at=1), req("small2", 0.25, at=2)]
    result = schedule(requests, nodes, {}, GREEDY_BACKFILL, now=5)
    assert placed_ids(result) == ["small", "small2"]
    assert result.waiting["big"].position == 1


def test_backfill_holds_capacity_for_the_head_of_the_queue_at_once():
    """Small requests without a time limit never start on what the first waiting one needs:
    a steady stream of them would starve it."""
    nodes = [node("a", gpus=1)]
    nodes[0].devices[0].used = 500
    requests = [req("big", 1, at=0), req("small", 0.25, at=1)]
    result = schedule(requests, nodes, {}, BACKFILL, now=5)
    assert placed_ids(result) == []
    assert "capacity on a GPU 0 is held for it" in result.waiting["big"].reason
    assert "held for sessions ahead of it" in result.waiting["small"].reason


def test_backfill_holds_capacity_for_a_request_waiting_too_long():
    nodes = [node("a", gpus=1)]
    nodes[0].devices[0].used = 500
    requests = [req("big", 1, at=0), req("small", 0.25, at=700)]
    result = schedule(requests, nodes, {}, GREEDY_BACKFILL, now=1000)
    assert placed_ids(result) == []
    assert "capacity on a GPU 0 is held for it" in result.waiting["big"].reason
    assert "held for sessions ahead of it" in result.waiting["small"].reason
    # before the wait runs out, the small one backfills
    assert placed_ids(schedule(requests, nodes, {}, GREEDY_BACKFILL, now=500)) == ["small"]


def _busy_until(n, ends_at, gpu=500, index=0):
    """``n``'s GPU ``index`` runs ``gpu`` milli-fGPU until ``ends_at`` (None: no limit)."""
    n.devices[index].used += gpu
    n.cpu_used += 1000
    n.mem_used += GiB
    n.running = (*n.running, Running(ends_at, 1000, GiB, ((index, gpu),)))


def test_a_short_job_backfills_only_if_it_ends_before_the_reservation_begins():
    nodes = [node("a", gpus=1)]
    _busy_until(nodes[0], ends_at=3600)  # half the GPU is free again in an hour
    requests = [req("big", 1, at=0), req("short", 0.25, at=1, limit=1800),
                req("long", 0.25, at=2, limit=7200), req("open", 0.25, at=3)]
    result = schedule(requests, nodes, {}, BACKFILL, now=100)
    assert placed_ids(result) == ["short"]  # ends at 1,900 s, before 3,600 s
    assert result.waiting["big"].reason.endswith(
        "capacity on a GPU 0 is held for it, expected to be free in 58m20s")
    assert "time limit ends before" in result.waiting["long"].reason
    assert result.waiting["open"].code is WaitCode.CAPACITY


def test_nothing_backfills_onto_a_reservation_whose_start_is_unknown():
    nodes = [node("a", gpus=1)]
    _busy_until(nodes[0], ends_at=None)  # runs with no time limit
    requests = [req("big", 1, at=0), req("short", 0.25, at=1, limit=60)]
    result = schedule(requests, nodes, {}, BACKFILL, now=100)
    assert placed_ids(result) == []
    assert result.waiting["big"].reason.endswith("capacity on a GPU 0 is held for it")


def test_a_job_that_fits_beside_the_reservation_starts_whatever_its_limit():
    nodes = [node("a", gpus=2)]
    _busy_until(nodes[0], ends_at=3600, gpu=600, index=0)
    _busy_until(nodes[0], ends_at=None, gpu=700, index=1)
    requests = [req("big", 1, at=0), req("open", 0.3, at=1)]
    result = schedule(requests, nodes, {}, BACKFILL, now=0)
    # GPU 0 (0.4 free, the freest) is held for "big"; GPU 1 has room for "open" beside it
    assert [(p.request_id, p.slices[0].index) for p in result.placements] == [("open", 1)]


def test_only_a_job_for_its_gpu_model_backfills_onto_a_held_gpu():
    nodes = [node("a", gpus=2)]
    nodes[0].devices[1].model = "Mock T4"
    _busy_until(nodes[0], ends_at=3600, gpu=500, index=0)  # the A100: half free in an hour
    _busy_until(nodes[0], ends_at=None, gpu=1000, index=1)  # the T4: full for good
    requests = [req("big", 1, at=0), req("t4", 0.25, at=1, limit=60, model="T4"),
                req("a100", 0.25, at=2, limit=60, model="A100")]
    result = schedule(requests, nodes, {}, BACKFILL, now=0)
    assert [(p.request_id, p.slices[0].index) for p in result.placements] == [("a100", 0)]


def test_the_reservation_counts_what_the_same_pass_started():
    nodes = [node("a", gpus=1, fgpu_per_gpu=4)]
    requests = [req("first", 2, at=0, limit=600), req("big", 4, at=1),
                req("short", 1, at=2, limit=500), req("late", 1, at=3, limit=700)]
    result = schedule(requests, nodes, {}, BACKFILL, now=0)
    # "big" waits for "first" (ends at 600): "short" ends before, "late" would delay it
    assert placed_ids(result) == ["first", "short"]
    assert "expected to be free in 10m00s" in result.waiting["big"].reason


def test_backfill_hold_leaves_other_devices_usable():
    nodes = [node("a", gpus=2)]
    nodes[0].devices[0].used = 500
    nodes[0].devices[1].used = 800
    requests = [req("big", 1, at=0), req("small", 0.2, at=700)]
    result = schedule(requests, nodes, {}, BACKFILL, now=1000)
    assert placed_ids(result) == ["small"]
    assert result.placements[0].slices[0].index == 1  # GPU 0, the freest, is held for "big"


def test_priority_goes_first_under_every_policy():
    for config in (FIFO, BACKFILL, DRF):
        nodes = [node("a", gpus=1)]
        requests = [req("low", 1, at=0), req("high", 1, at=5, priority=10)]
        result = schedule(requests, nodes, {}, config, now=10)
        assert placed_ids(result) == ["high"], config.policy


def test_queue_order_is_priority_then_time_then_id_whatever_the_input_order():
    requests = [
        req("b", at=1.0), req("a", at=1.0), req("c", at=0.5), req("urgent", at=9.0, priority=5),
        req("low", at=0.0, priority=-1), req("d", at=1.0, priority=5),
    ]
    expected = ["d", "urgent", "c", "a", "b", "low"]
    for shift in range(len(requests)):
        rotated = requests[shift:] + requests[:shift]
        assert [r.id for r in queue_order(rotated)] == expected
        assert [r.id for r in queue_order(rotated[::-1])] == expected


def test_placement_walks_past_nodes_with_free_gpus_but_no_free_memory():
    """The freest (spread) or fullest (binpack) device is on a node without the memory asked;
    the next one in the strategy's order that has it is taken, for slices and whole GPUs."""
    def nodes():
        full = [node(f"n{i}", gpus=2, mem="16g") for i in range(3)]
        for n in full[:2]:
            n.mem_used = n.mem - 1 * GiB  # GPUs entirely free, 1 GiB of memory left
        full[2].devices[0].used = 500
        return full

    for strategy in Strategy:
        config = SchedulerConfig(strategy=strategy)
        small = schedule([req("r", 0.5, mem="2g")], nodes(), {}, config, now=9)
        assert [(p.node_id, p.slices[0].index) for p in small.placements] == [
            ("n2", 0 if strategy is Strategy.BINPACK else 1)
        ]
        whole = schedule([req("w", 1, mem="2g"), req("ww", 2, mem="2g")], nodes(), {}, config,
                         now=9)
        assert [(p.node_id, [s.index for s in p.slices]) for p in whole.placements] == [
            ("n2", [1])
        ]
        assert whole.waiting["ww"].reason == (
            "needs 2 whole GPUs on one node and, on the same node, 1.0 CPU and 2 GiB of memory; "
            "the most free is 1 GiB of memory (n0)"
        )


def test_a_pass_makes_no_reference_cycles_and_leaves_the_collector_as_it_was():
    """``schedule`` pauses CPython's cyclic garbage collector while it runs: that costs nothing
    only if the pass leaves nothing for the collector to find (its working state included)."""
    nodes = [node(f"n{i}", gpus=4, cpu="8", mem="32g") for i in range(3)]
    requests = [
        *queue(12, 0.5, mem="2g"), req("whole", 2, at=20.0), req("huge", 4, at=0.5),
        req("memory", gpu_mem="2g", at=21.0), req("cpu-only", 0, at=22.0),
        req("capped", 1, user="bob", at=23.0),
    ]
    users = {"bob": UserState(Quota(max_gpu=500))}
    configs = [SchedulerConfig(policy, strategy, max_wait_before_reserve=1)
               for policy in Policy for strategy in Strategy]
    gc.collect()
    for config in configs:
        gc.disable()
        try:
            result = schedule(requests, nodes, users, config, now=100)
            assert not gc.isenabled()  # left off: it was off
            unreachable = gc.collect()
        finally:
            gc.enable()
        assert result.placements and result.waiting
        assert unreachable == 0, config
        schedule(requests, nodes, users, config, now=100)
        assert gc.isenabled()  # on again after the pass


def test_quota_keeps_a_request_pending_with_its_reason_and_does_not_block_others():
    nodes = [node("a", gpus=4)]
    users = {"alice": UserState(Quota(max_gpu=2000), sessions=2, used=Resources(2000, 0, 0))}
    requests = [req("a1", 1, user="alice", at=0), req("b1", 1, user="bob", at=1)]
    result = schedule(requests, nodes, users, FIFO, now=2)
    assert placed_ids(result) == ["b1"]
    waiting = result.waiting["a1"]
    assert waiting.code is WaitCode.QUOTA
    assert waiting.reason.startswith("user quota: 2.0 of 2.0 fGPU in use")


def test_session_count_quota_counts_placements_made_in_the_same_pass():
    nodes = [node("a", gpus=4)]
    users = {"alice": UserState(Quota(max_sessions=2))}
    result = schedule(queue(3, 0.5), nodes, users, BACKFILL, now=10)
    assert placed_ids(result) == ["r000", "r001"]
    assert result.waiting["r002"].reason == "user quota: 2 of 2 sessions in use"


def test_drf_shares_between_users_by_dominant_resource():
    nodes = [node("a", gpus=4)]
    requests = [req(f"a{i}", 1, user="alice", at=i) for i in range(4)]
    requests += [req(f"b{i}", 1, user="bob", at=10 + i) for i in range(4)]
    result = schedule(requests, nodes, {}, DRF, now=20)
    assert sorted(placed_ids(result)) == ["a0", "a1", "b0", "b1"]


def test_drf_counts_usage_from_earlier_passes():
    nodes = [node("a", gpus=4)]
    users = {"alice": UserState(sessions=2, used=Resources(2000, 2000, 2 * GiB))}
    nodes[0].devices[0].used = nodes[0].devices[1].used = 1000
    requests = [req("a2", 1, user="alice", at=0)] + [req(f"b{i}", 1, user="bob", at=1 + i)
                                                     for i in range(2)]
    assert placed_ids(schedule(requests, nodes, users, DRF, now=5)) == ["b0", "b1"]


def test_gpu_model_only_matching_devices_qualify():
    nodes = [node("t4", gpus=2, model="Tesla T4"), node("a100", gpus=1, model="NVIDIA A100-80GB")]
    result = schedule([req("x", 1, model="a100"), req("y", 1, model="a100", at=1)], nodes, {},
                      BACKFILL, now=2)
    assert [(p.request_id, p.node_id) for p in result.placements] == [("x", "a100")]
    none = schedule([req("z", 1, model="H100")], nodes, {}, FIFO, now=0)
    assert none.waiting["z"].code is WaitCode.NO_NODE
    assert "matching model 'H100'" in none.waiting["z"].reason


def test_whole_gpu_request_takes_entirely_free_devices_on_one_node():
    nodes = [node("a", gpus=2), node("b", gpus=4)]
    nodes[1].devices[0].used = 100
    result = schedule([req("x", 3)], nodes, {}, FIFO, now=0)
    (p,) = result.placements
    assert p.node_id == "b" and [s.index for s in p.slices] == [1, 2, 3]
    assert all(s.gpu == 1000 and s.mem == 8 * GiB for s in p.slices)
    blocked = schedule([req("y", 4)], nodes, {}, FIFO, now=0)
    assert blocked.waiting["y"].reason == (
        "needs 4 whole GPUs on one node; the most entirely free GPUs on one node is 3 (b)"
    )


def test_binpack_fills_used_devices_and_spread_the_least_used():
    def nodes():
        return [node("a", gpus=2), node("b", gpus=2)]

    requests = queue(4, 0.25)
    packed = schedule(requests, nodes(), {}, SchedulerConfig(strategy=Strategy.BINPACK), now=9)
    spread = schedule(requests, nodes(), {}, SchedulerConfig(strategy=Strategy.SPREAD), now=9)
    assert {(p.node_id, p.slices[0].index) for p in packed.placements} == {("a", 0)}
    assert {(p.node_id, p.slices[0].index) for p in spread.placements} == {
        ("a", 0), ("b", 0), ("a", 1), ("b", 1)
    }


def test_cpu_and_memory_of_the_node_bound_placements():
    nodes = [node("a", gpus=4, cpu="4", mem="8g")]
    result = schedule(queue(3, 0.5, cpu="2", mem="2g"), nodes, {}, BACKFILL, now=9)
    assert placed_ids(result) == ["r000", "r001"]
    assert result.waiting["r002"].reason == (
        "needs 0.5 fGPU on one GPU and, on the same node, 2.0 CPU and 2 GiB of memory; "
        "the most free is 0.0 CPU (a); capacity on a GPU 1 is held for it"
    )


def test_cpu_only_sessions_use_no_gpu():
    nodes = [node("a", gpus=1, cpu="2")]
    result = schedule([req("c", 0, cpu="2"), req("d", 0, cpu="1", at=1)], nodes, {}, BACKFILL,
                      now=5)
    assert placed_ids(result) == ["c"]
    assert result.placements[0].slices == ()
    assert "the most free is 0.0 CPU (a)" in result.waiting["d"].reason


def test_per_node_fgpu_per_gpu_override():
    nodes = [node("halves", gpus=1, fgpu_per_gpu=2), node("wholes", gpus=2, fgpu_per_gpu=1)]
    # 2 fGPU is one whole device on "halves" and two whole devices on "wholes"
    result = schedule([req("x", 2)], nodes, {}, FIFO, now=0)
    assert result.placements[0].node_id == "halves"
    assert len(result.placements[0].slices) == 1
    result = schedule([req("x", 2), req("y", 2, at=1)], nodes, {}, FIFO, now=0)
    assert [len(p.slices) for p in result.placements] == [1, 2]


def test_check_request_refuses_what_can_never_fit():
    nodes = [node("a", gpus=2, cpu="8", mem="32g")]
    assert check_request(req("ok", 2), nodes, Quota(), 1000) is None
    assert "not a whole number of GPUs" in check_request(req("x", 1.5), nodes, Quota(), 1000)
    assert "could ever hold" in check_request(req("x", 3), nodes, Quota(), 1000)
    assert "could ever hold" in check_request(req("x", 1, cpu="16"), nodes, Quota(), 1000)
    assert "could ever hold" in check_request(req("x", 1, model="H100"), nodes, Quota(), 1000)
    assert check_request(req("x", 1), nodes, Quota(max_gpu=500), 1000) == (
        "asks for 1.0 fGPU but your quota allows at most 0.5 fGPU in total"
    )
    assert "allows no sessions" in check_request(req("x", 1), nodes, Quota(max_sessions=0), 1000)
    # with no node registered yet, only the shape is judged (against the default ratio)
    assert check_request(req("x", 4), [], Quota(), 2000) is None
    assert "1 GPU = 2.0 fGPU" in check_request(req("x", 3), [], Quota(), 2000)


def test_no_node_in_pool_is_a_specific_reason():
    result = schedule([req("x", 1, pool="gpu-big")], [node("a")], {}, FIFO, now=0)
    assert result.waiting["x"].code is WaitCode.NO_NODE
    assert result.waiting["x"].reason == "no schedulable node in resource group 'gpu-big'"
