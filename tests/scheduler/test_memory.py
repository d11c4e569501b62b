"""Requests by GPU memory (`--gpu-mem`): the smallest slice in the fGPU step that holds it."""

import pytest

from gpuslice.common.resources import GiB, MiB, gpu_for_memory
from gpuslice.manager.scheduler import (
    Policy,
    Quota,
    SchedulerConfig,
    UserState,
    WaitCode,
    check_request,
    schedule,
)

from .factories import apply, node, req

FIFO = SchedulerConfig(policy=Policy.FIFO)


@pytest.mark.parametrize(("memory", "device", "cap", "step", "expected"), [
    (2 * GiB, 8 * GiB, 2000, 10, 500),  # the case: 0.5 fGPU of 2 per 8 GiB GPU
    (1500 * MiB, 8 * GiB, 2000, 10, 370),  # 0.37 fGPU: 3031 MiB ≥ 1500 MiB, 0.36 is 2949 MiB
    (1500 * MiB, 8 * GiB, 2000, 250, 500),  # a coarser step rounds up to 0.5
    (8 * GiB, 8 * GiB, 2000, 10, 2000),  # the whole device
    (7 * GiB, 8 * GiB, 1000, 300, 900),  # 0.9: a multiple of the step
    (8 * GiB - 1, 8 * GiB, 1000, 300, 1000),  # no multiple below the device holds it
    (8 * GiB + 1, 8 * GiB, 2000, 10, None),  # more than the device has
    (1, 8 * GiB, 1000, 10, 10),  # the smallest slice is one step
])
def test_gpu_for_memory_is_the_least_slice_that_holds_it(memory, device, cap, step, expected):
    assert gpu_for_memory(memory, device, cap, step) == expected


def test_two_gib_on_an_8_gib_gpu_with_2_fgpu_per_gpu_gets_half_an_fgpu():
    nodes = [node("n1", gpu_mem="8GiB", fgpu_per_gpu=2)]
    result = schedule([req("r1", gpu_mem="2048m")], nodes, {}, FIFO, now=0)
    [placed] = result.placements
    assert placed.resources.gpu == 500
    assert (placed.slices[0].gpu, placed.slices[0].mem) == (500, 2 * GiB)


def test_the_slice_depends_on_the_device_chosen():
    """The same request is 0.5 fGPU of an 8 GiB GPU and 0.25 of a 16 GiB one (2 per GPU)."""
    nodes = [node("small", gpu_mem="8GiB", fgpu_per_gpu=2),
             node("big", gpu_mem="16GiB", fgpu_per_gpu=2, model="Mock A100 16G")]
    result = schedule([req("r1", gpu_mem="2g", model="16G")], nodes, {}, FIFO, now=0)
    assert [(p.node_id, p.resources.gpu) for p in result.placements] == [("big", 250)]


def test_memory_requests_fill_a_device_and_then_wait_with_the_reason():
    nodes = [node("n1", gpu_mem="8GiB", fgpu_per_gpu=2)]
    queue = [req(f"r{i}", gpu_mem="3g", at=float(i)) for i in range(3)]
    result = schedule(queue, nodes, {}, FIFO, now=0)
    assert [p.resources.gpu for p in result.placements] == [750, 750]  # 3 GiB each
    waiting = result.waiting["r2"]
    assert waiting.code is WaitCode.CAPACITY
    assert waiting.reason == (
        "needs 3 GiB of GPU memory (0.75 fGPU) on one GPU; the largest free slice is 0.5 fGPU "
        "(n1 GPU 0)"
    )
    apply(nodes, result.placements)
    assert nodes[0].devices[0].used == 1500


def test_the_quota_counts_the_slice_a_memory_request_takes():
    nodes = [node("n1", gpu_mem="8GiB", fgpu_per_gpu=2)]
    users = {"alice": UserState(Quota(max_gpu=400))}
    result = schedule([req("r1", gpu_mem="2g")], nodes, users, FIFO, now=0)
    assert not result.placements
    assert result.waiting["r1"].code is WaitCode.QUOTA
    assert "this session needs 0.5 fGPU more" in result.waiting["r1"].reason


def test_a_request_no_gpu_can_hold_is_refused_with_the_largest_possible():
    nodes = [node("n1", gpu_mem="8GiB", fgpu_per_gpu=2)]
    message = check_request(req("x", gpu_mem="12g"), nodes, Quota(), 2000)
    assert message == (
        "needs 12 GiB of GPU memory on one GPU, more than any GPU in resource group 'default' "
        "has: the most possible is 8 GiB (a whole Mock A100)"
    )
    assert check_request(req("x", gpu_mem="8g"), nodes, Quota(), 2000) is None
    assert check_request(req("x", gpu_mem="12g"), [], Quota(), 2000) is None  # nodes may join
    over = check_request(req("x", gpu_mem="2g"), nodes, Quota(max_gpu=250), 2000)
    assert over == "asks for 0.5 fGPU but your quota allows at most 0.25 fGPU in total"
