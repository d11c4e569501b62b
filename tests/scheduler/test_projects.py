"""Projects' quotas and resource groups in the scheduler core: unit cases and properties over
random orders of creates and ends."""

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuslice.common.resources import GiB, Resources
from gpuslice.manager.scheduler import (
    Node,
    Policy,
    Quota,
    SchedulerConfig,
    Strategy,
    UserState,
    WaitCode,
    check_request,
    schedule,
)

from .factories import apply, node, release, req

FIFO = SchedulerConfig()


def _project(max_gpu: float | None = None, sessions: int = 0, used_gpu: int = 0,
             max_sessions: int | None = None) -> UserState:
    quota = Quota(max_sessions=max_sessions,
                  max_gpu=None if max_gpu is None else int(max_gpu * 1000))
    return UserState(quota, sessions, Resources(used_gpu, 0, 0))


def test_a_project_quota_holds_a_session_with_a_reason_naming_the_project():
    nodes = [node("n1", gpus=8)]
    vision = _project(max_gpu=8, sessions=3, used_gpu=7500)
    result = schedule([req("x", 1, project="vision")], nodes, {}, FIFO, 0.0,
                      projects={"vision": vision})
    assert result.placements == []
    waiting = result.waiting["x"]
    assert waiting.code is WaitCode.QUOTA
    assert waiting.reason == (
        "project vision: 7.5 of 8.0 fGPU in use; this session needs 1.0 fGPU more"
    )


def test_both_the_users_and_the_projects_quota_hold():
    nodes = [node("n1", gpus=8)]
    users = {"alice": UserState(Quota(max_gpu=1000))}
    projects = {"vision": _project(max_gpu=2)}
    queue = [req("a", 1, project="vision"), req("b", 1, project="vision", at=1),
             req("c", 1, user="bob", project="vision", at=2),
             req("d", 1, user="bob", project="vision", at=3)]
    result = schedule(queue, nodes, users, FIFO, 0.0, projects=projects)
    assert sorted(p.request_id for p in result.placements) == ["a", "c"]
    assert result.waiting["b"].reason.startswith("user quota: 1.0 of 1.0 fGPU")
    assert result.waiting["d"].reason.startswith("project vision: 2.0 of 2.0 fGPU")


def test_a_project_quota_wait_does_not_block_the_fifo_queue():
    nodes = [node("n1", gpus=2)]
    projects = {"full": _project(max_sessions=0)}
    queue = [req("x", 1, project="full"), req("y", 1, user="bob", at=1)]
    result = schedule(queue, nodes, {}, FIFO, 0.0, projects=projects)
    assert [p.request_id for p in result.placements] == ["y"]
    assert result.waiting["x"].reason == "project full: 0 of 0 sessions in use"


def test_a_session_runs_only_in_its_resource_groups_and_the_reason_names_them():
    nodes = [node("a100-1", pool="a100"), node("t4-1", pool="t4", model="Mock T4")]
    result = schedule([req("x", 1, pool="t4"), req("y", 1, pool="t4", at=1)], nodes, {},
                      SchedulerConfig(policy=Policy.BACKFILL), 0.0)
    assert [(p.request_id, p.node_id) for p in result.placements] == [("x", "t4-1")]
    assert result.waiting["y"].reason == (
        "needs 1.0 fGPU on one GPU; no GPU has a free slice in resource group 't4'"
        "; capacity on t4-1 GPU 0 is held for it"  # backfill holds for the head at once
    )


def test_a_session_of_several_groups_takes_any_and_waits_naming_all():
    nodes = [node("a100-1", pool="a100"), node("t4-1", pool="t4", model="Mock T4"),
             node("cpu-1", pool="cpu", gpus=0)]
    queue = [req(f"r{i}", 1, pools={"a100", "t4"}, at=i) for i in range(3)]
    result = schedule(queue, nodes, {}, FIFO, 0.0)
    assert sorted(p.node_id for p in result.placements) == ["a100-1", "t4-1"]
    assert result.waiting["r2"].reason.endswith("in resource groups 'a100', 't4'")
    lonely = schedule([req("z", 1, pool="v100")], nodes, {}, FIFO, 0.0)
    assert lonely.waiting["z"].reason == "no schedulable node in resource group 'v100'"


def test_a_projects_quota_on_a_gpu_model_holds_there_and_not_elsewhere():
    nodes = [node("a", gpus=4), node("t", gpus=4, model="Mock T4")]
    vision = UserState(Quota(gpu_models=(("a100", 2000),)), 1, Resources(1000, 0, 0),
                       {"a100": 1000})
    queue = [req("x", 1, project="vision", model="a100"),
             req("y", 1, project="vision", model="a100", at=1),
             req("z", 1, project="vision", model="t4", at=2)]
    result = schedule(queue, nodes, {}, FIFO, 0.0, projects={"vision": vision})
    assert sorted(p.request_id for p in result.placements) == ["x", "z"]
    assert result.waiting["y"].code is WaitCode.QUOTA
    assert result.waiting["y"].reason == (
        "project vision: 2.0 of 2.0 fGPU of a100 GPUs in use; this session needs 1.0 fGPU "
        "of a100 GPUs more")


def test_a_request_beyond_its_projects_whole_quota_is_refused_at_once():
    nodes = [node("n1", gpus=4)]
    message = check_request(req("x", 2, project="vision"), nodes, Quota(), 1000,
                            project_quota=Quota(max_gpu=1000))
    assert message == (
        "asks for 2.0 fGPU but project vision's quota allows at most 1.0 fGPU in total"
    )
    assert check_request(req("x", 1, project="vision"), nodes, Quota(), 1000,
                         project_quota=Quota(max_gpu=1000)) is None


# ---------------------------------------------------------------- properties

GROUPS = ("a100", "t4", "cpu")
USERS = ("alice", "bob", "carol")
PROJECTS = ("vision", "nlp")
SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def cluster(draw) -> list[Node]:
    nodes = []
    for i in range(draw(st.integers(1, 5))):
        group = draw(st.sampled_from(GROUPS))
        gpus = 0 if group == "cpu" else draw(st.integers(1, 4))
        nodes.append(node(f"n{i}", gpus=gpus, pool=group, cpu=str(draw(st.integers(2, 16))),
                          model="Mock T4" if group == "t4" else "Mock A100",
                          mem=f"{draw(st.integers(4, 64))}g",
                          fgpu_per_gpu=draw(st.sampled_from((1, 2)))))
    return nodes


def quotas(max_sessions: int, models: bool = False) -> st.SearchStrategy[Quota]:
    by_model = st.just(()) if not models else st.lists(
        st.tuples(st.sampled_from(("a100", "t4")), st.integers(0, 8).map(lambda x: x * 250)),
        max_size=2, unique_by=lambda t: t[0]).map(tuple)
    return st.builds(
        Quota, max_sessions=st.none() | st.integers(0, max_sessions),
        max_gpu=st.none() | st.integers(0, 12).map(lambda x: x * 250),
        max_cpu=st.none() | st.integers(0, 16).map(lambda x: x * 1000),
        max_mem=st.none() | st.integers(0, 32).map(lambda x: x * GiB),
        gpu_models=by_model,
    )


@st.composite
def operations(draw) -> list[tuple[str, ...]]:
    """A random order of creates (user, project, group or any) and ends of running ones."""
    ops = []
    for _ in range(draw(st.integers(1, 40))):
        if draw(st.integers(0, 3)) == 0:
            ops.append(("end", str(draw(st.integers(0, 1000)))))
        else:
            ops.append(("create", draw(st.sampled_from(USERS)), draw(st.sampled_from(PROJECTS)),
                        draw(st.sampled_from((*GROUPS, "any"))),
                        str(draw(st.sampled_from((0, 250, 500, 1000, 2000))))))
    return ops


@SETTINGS
@given(cluster(), operations(), st.fixed_dictionaries({u: quotas(4) for u in USERS}),
       st.fixed_dictionaries({p: quotas(6, models=True) for p in PROJECTS}),
       st.fixed_dictionaries({p: st.sets(st.sampled_from(GROUPS), min_size=1)
                              for p in PROJECTS}),
       st.sampled_from(list(Policy)), st.sampled_from(list(Strategy)))
def test_no_quota_and_no_group_is_ever_exceeded(
    nodes, ops, user_quotas, project_quotas, allowed, policy, strategy
):
    config = SchedulerConfig(policy=policy, strategy=strategy, max_wait_before_reserve=5.0)
    queue, running = [], {}  # running: request id -> (request, placement)
    for step, op in enumerate(ops):
        if op[0] == "end" and running:
            rid = sorted(running)[int(op[1]) % len(running)]
            release(nodes, [running.pop(rid)[1]])
        elif op[0] == "create":
            _, user, project, group, gpu = op
            pools = allowed[project] if group == "any" else {group}
            queue.append(req(f"r{step:03d}", f"{int(gpu) / 1000}", user=user, at=float(step),
                             project=project, cpu="1", mem="1g", pools=pools))
        users = _usage(running.values(), lambda r: r.user, user_quotas, nodes)
        projects = _usage(running.values(), lambda r: r.project, project_quotas, nodes)
        result = schedule(queue, nodes, users, config, float(step), projects=projects)
        apply(nodes, result.placements)
        placed = {p.request_id: p for p in result.placements}
        by_node = {n.id: n for n in nodes}
        for r in queue:
            if r.id in placed:
                assert by_node[placed[r.id].node_id].pool in r.pools
                running[r.id] = (r, placed[r.id])
        queue = [r for r in queue if r.id not in placed]
        _check(nodes, running.values(), user_quotas, project_quotas)
        for name, q in project_quotas.items():
            for part, limit in q.gpu_models:
                held = [p.resources.gpu for r, p in running.values() if r.project == name
                        and part in (_model_of(nodes, p) or "").casefold()]
                assert sum(held) <= limit


def _model_of(nodes, p) -> str | None:
    n = next(n for n in nodes if n.id == p.node_id)
    return next((d.model for d in n.devices if p.slices and d.index == p.slices[0].index), None)


def _usage(running, key, quotas, nodes) -> dict[str, UserState]:
    states = {k: UserState(q) for k, q in quotas.items()}
    for r, p in running:
        state = states[key(r)]
        state.sessions += 1
        state.used = state.used + p.resources
        model = _model_of(nodes, p)
        for part, _ in state.quota.gpu_models:
            if model is not None and part in model.casefold():
                state.used_models[part] = state.used_models.get(part, 0) + p.resources.gpu
    return states


def _check(nodes, running, user_quotas, project_quotas) -> None:
    for n in nodes:
        assert 0 <= n.cpu_used <= n.cpu and 0 <= n.mem_used <= n.mem
        assert all(0 <= d.used <= n.device_capacity for d in n.devices)
    for key, quotas in ((lambda r: r.user, user_quotas), (lambda r: r.project, project_quotas)):
        for name, q in quotas.items():
            mine = [p.resources for r, p in running if key(r) == name]
            assert q.max_sessions is None or len(mine) <= q.max_sessions
            assert q.max_gpu is None or sum(m.gpu for m in mine) <= q.max_gpu
            assert q.max_cpu is None or sum(m.cpu for m in mine) <= q.max_cpu
            assert q.max_mem is None or sum(m.mem for m in mine) <= q.max_mem


def test_the_property_can_fail_when_a_project_quota_is_ignored():
    """The check above catches a pass that ignores the project: one without ``projects``."""
    nodes = [node("n1", gpus=4)]
    queue = [req(f"r{i}", 1, project="vision", at=i) for i in range(3)]
    result = schedule(queue, nodes, {}, FIFO, 0.0)  # no projects given: unlimited
    running = [(r, p) for r, p in zip(queue, result.placements, strict=True)]
    quotas = {"vision": Quota(max_gpu=1000)}
    try:
        _check(nodes, running, {}, quotas)
    except AssertionError:
        return
    raise AssertionError("the check let a project's quota be exceeded")


def test_random_orders_keep_group_capacity_exact():
    """Ending everything gives back the exact starting capacity, groups or not."""
    rng = random.Random(3)
    nodes = [node(f"n{i}", gpus=2, pool=rng.choice(GROUPS[:2])) for i in range(4)]
    queue = [req(f"r{i}", rng.choice(("0.25", "0.5", "1")), pools=set(GROUPS[:2]), at=i)
             for i in range(12)]
    result = schedule(queue, nodes, {}, FIFO, 0.0)
    apply(nodes, result.placements)
    release(nodes, result.placements)
    assert all(d.used == 0 for n in nodes for d in n.devices)
    assert all(n.cpu_used == 0 and n.mem_used == 0 for n in nodes)
