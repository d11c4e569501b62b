"""A node that joined but has not reported its capacity yet is not a node that can never hold a
request: the request waits, saying so (issue 41, "Also")."""

from dataclasses import replace

from gpuslice.manager.scheduler import (
    Node,
    Policy,
    Quota,
    SchedulerConfig,
    WaitCode,
    check_request,
    schedule,
)

from .factories import node, req

FIFO = SchedulerConfig(policy=Policy.FIFO)


def _joined(name: str = "lab-01", pool: str = "default") -> Node:
    """A node as registration leaves it: no capacity, no devices, until its first report."""
    return Node(id=name, name=name, cpu=0, mem=0, pool=pool)


def test_a_request_is_not_refused_while_its_groups_node_has_not_reported() -> None:
    for asked in (req("cpu", 0, cpu="0.25", mem="256m"), req("gpu", 1), req("big", 4)):
        assert check_request(asked, [_joined()], Quota(), 1000) is None
    by_memory = replace(req("mem", "0"), gpu_mem=8 * 1024**3)
    assert check_request(by_memory, [_joined()], Quota(), 1000) is None
    # a reported node beside it that is too small does not make it impossible either
    assert check_request(req("x", 1, cpu="16"), [node("a", cpu="8"), _joined()], Quota(),
                         1000) is None
    # what does not depend on the node is still judged: the shape, the quotas
    assert "not a whole number of GPUs" in check_request(req("x", 1.5), [_joined()], Quota(),
                                                         1000)
    assert "your quota allows at most" in check_request(
        req("x", 1), [_joined()], Quota(max_gpu=500), 1000)
    # once it reported, the pool's nodes decide again
    assert "could ever hold" in check_request(req("x", 1, cpu="16"), [node("a", cpu="8")],
                                              Quota(), 1000)


def test_the_waiting_reason_names_the_node_whose_report_is_awaited() -> None:
    result = schedule([req("x", 0, cpu="0.25", mem="256m")], [_joined()], {}, FIFO, now=0)
    waiting = result.waiting["x"]
    assert waiting.code is WaitCode.NO_NODE
    assert waiting.reason == ("no node in resource group 'default' has reported its capacity "
                              "yet: waiting for the first report of node lab-01")
    result = schedule([req("x", 1)], [_joined("b"), _joined("a")], {}, FIFO, now=0)
    assert result.waiting["x"].reason.endswith("of nodes a, b")
    # the same request is placed once the node reported
    result = schedule([req("x", 0, cpu="0.25", mem="256m")], [node("lab-01")], {}, FIFO, now=0)
    assert [p.request_id for p in result.placements] == ["x"]
