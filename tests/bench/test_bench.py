"""Every benchmark in ``bench/`` runs in its short mode (``--short``), so that none rots unseen.

Each runs as a user runs it, a process of its own (``python bench/<name>.py --short``) from the
repository root; the test checks its exit status and its last line, ``key=value`` pairs: the
keys are there, figures are numbers, and correctness flags say so. No figure is held to a
target here: the benchmarks measure, under whatever load the machine has; the timeouts only
bound a hang.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import pg_url
from tests.waits import scaled

# Each is a process of its own that mostly waits on the ones it starts: they run in the docker
# lane of tools/test-passes.sh, beside the CPU-bound tests.
pytestmark = pytest.mark.bench

ROOT = Path(__file__).resolve().parents[2]
BROWSERS = ("/usr/bin/chromium-headless-shell", "/usr/bin/chromium")
TIMEOUT_S = 300  # a short run takes seconds to half a minute; this bounds a hang only


def run_bench(name: str, *args: str, timeout: float = TIMEOUT_S) -> dict[str, str]:
    """Run ``bench/<name>.py --short`` (and ``args``); its last line's ``key=value`` pairs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSLICE_")}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, f"bench/{name}.py", "--short", *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=scaled(timeout),
                          check=False)
    output = f"{done.stdout}\n{done.stderr}"[-6000:]
    assert done.returncode == 0, f"bench/{name}.py exited {done.returncode}:\n{output}"
    lines = done.stdout.strip().splitlines()
    assert lines, f"bench/{name}.py printed nothing:\n{output}"
    pairs = [word.split("=", 1) for word in lines[-1].split()]
    assert all(len(pair) == 2 for pair in pairs), f"last line not key=value: {lines[-1]!r}"
    return dict(pairs)


def check(fields: dict[str, str], numbers: str, **exact: str | int) -> None:
    """``numbers`` (space-separated keys) are there and numbers; each of ``exact`` has that
    value."""
    for key in numbers.split():
        assert key in fields, f"no {key} in {fields}"
        try:
            float(fields[key])
        except ValueError:
            pytest.fail(f"{key}={fields[key]} is not a number ({fields})")
    for key, value in exact.items():
        assert fields.get(key) == str(value), f"{key}: {fields.get(key)}, not {value} ({fields})"


def needs_pg() -> str:
    """The PostgreSQL server `GPUSLICE_TEST_PG` names; the test skips without one."""
    server = pg_url()
    if server is None:
        pytest.skip("needs GPUSLICE_TEST_PG (a PostgreSQL server to make a database on)")
    return server


def backend_args(backend: str) -> list[str]:
    return [] if backend == "sqlite" else ["--pg", needs_pg()]


BACKENDS = pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.pg)])


# ------------------------------------------------------------ in this process: the manager's app


def test_scheduler() -> None:
    fields = run_bench("scheduler")
    check(fields, "pass_seconds_median pass_cpu_seconds_median placements_per_second "
          "schedule_cpu_seconds_median preempt_cpu_seconds_median preemptions")
    assert float(fields["placements_per_second"]) > 0, "the pass placed nothing"


@BACKENDS
def test_audit(backend: str) -> None:
    fields = run_bench("audit", *backend_args(backend))
    check(fields, "create_ratio scheduled_ratio create_ms_p50 create_off_ms_p50 "
          "audit_query_ms_p99 rows rows_written")
    assert int(fields["rows_written"]) > 0, "the audited manager wrote no audit row"


def test_fairness() -> None:
    fields = run_bench("fairness")
    check(fields, "starvation_wait_p50_s starvation_wait_p99_s starvation_fifo_wait_p50_s "
          "starvation_bound_s fragmentation_free_binpack fragmentation_free_spread "
          "fragmentation_free_best preempt_to_running_p50_s",
          starvation_ok=1, preempt_ok=1)
    # the offline repacking of the same slices is never worse than what the strategies left
    assert float(fields["fragmentation_free_best"]) >= float(fields["fragmentation_free_binpack"])


@BACKENDS
def test_api(backend: str) -> None:
    fields = run_bench("api", *backend_args(backend))
    check(fields, "create_to_scheduled_ms_p50 list_page_ms_p99 list_status_ms_p99 "
                  "list_owner_ms_p99")


@BACKENDS
def test_bulk(backend: str) -> None:
    fields = run_bench("bulk", *backend_args(backend))
    check(fields, "scheduled_per_s seconds", backend=backend, sessions=200, nodes=20,
          consistent="yes", failed_calls=0)


@BACKENDS
def test_metrics(backend: str) -> None:
    """120 sessions on 12 nodes: created 100 per request (above the default max_count)."""
    fields = run_bench("metrics", *backend_args(backend))
    check(fields, "metrics_render_ms_p50 metrics_render_ms_p99 render_vs_floor "
                  "metrics_render_cpu_ms_p50 store_ms_p99 store_ms_p50 store_cpu_ms_p99 "
                  "store_vs_floor_p99 history_1d_mib history_bytes_per_session_day")


# ------------------------------------------------------------ `gpuslice manager serve`


def test_cli_start() -> None:
    fields = run_bench("cli_start")
    check(fields, "help_median_s list_median_s python_floor_s help_ratio list_ratio")


def test_login_flood() -> None:
    fields = run_bench("login_flood")
    check(fields, "health_p99_idle_ms health_p99_flood_ms ratio flood_requests flood_429",
          right_password_after_window="ok")
    assert int(fields["flood_requests"]) > 0, "no login was sent"


def test_ldap_login() -> None:
    if not Path("/usr/sbin/slapd").is_file():
        pytest.skip("needs slapd (tools/host-setup.sh --idp installs it)")
    fields = run_bench("ldap_login")
    check(fields, "ldap_p50_ms ldap_p99_ms local_p50_ms local_p99_ms ratio_p50", logins=10,
          all_ok="yes")


def test_storage() -> None:
    fields = run_bench("storage")
    check(fields, "upload_mib_s download_mib_s copy_mib_s upload_ratio download_ratio "
                  "peak_growth_mib")


@pytest.mark.pg
def test_agents() -> None:
    fields = run_bench("agents", "--pg", needs_pg())
    check(fields, "heartbeat_ms_p50 heartbeat_ms_p99 manager_cpu_cores manager_rss_mb join_s "
                  "seconds", lost_nodes=0, failed_calls=0, agents=20)


def test_console() -> None:
    if importlib.util.find_spec("playwright") is None:
        pytest.skip("needs playwright (the [test] extras)")
    if not any(os.path.exists(b) for b in BROWSERS):
        pytest.skip("no Chromium (tools/host-setup.sh --browser installs it)")
    fields = run_bench("console")
    check(fields, "first_paint_ms all_rows_ms floor_first_paint_ms ratio js_gz_kb",
          list_sessions=150)


def test_sso_login() -> None:
    if importlib.util.find_spec("playwright") is None:
        pytest.skip("needs playwright (the [test] extras)")
    if not any(os.path.exists(b) for b in BROWSERS):
        pytest.skip("no Chromium (tools/host-setup.sh --browser installs it)")
    if not (ROOT / "tests/idp/node_modules/oidc-provider").is_dir():
        pytest.skip("the test OpenID provider is not installed (tools/host-setup.sh --idp)")
    fields = run_bench("sso_login")
    check(fields, "round_trip_p50_ms round_trip_p99_ms callback_p50_ms callback_p99_ms",
          browser_runs=2, callbacks=5, ok=1)


# ------------------------------------------------------------ `gpuslice up`, real Docker


@pytest.mark.docker
def test_memory(base_image: str) -> None:
    fields = run_bench("memory")
    check(fields, "idle_rss_mb loaded_rss_mb", sessions=250)


@pytest.mark.docker
def test_start_latency(base_image: str) -> None:
    fields = run_bench("start_latency", "--image", base_image)
    check(fields, "platform_ms_p50 plain_ms_p50 ratio restart_ms_p50 restart_over_plain_ms "
                  "fenced_ms_p50 ratio_fenced")


@pytest.mark.docker
def test_throughput(base_image: str) -> None:
    fields = run_bench("throughput", "--image", base_image)
    check(fields, "platform_per_s floor_per_s ratio floor_before_per_s floor_after_per_s "
                  "bridge_per_s bridge_ratio", lost=0, left=0, left_after_stop=0)


@pytest.mark.docker
def test_proxy(base_image: str) -> None:
    fields = run_bench("proxy", "--image", base_image)
    check(fields, "small_p50_ms small_p50_direct_ms latency_ratio small_p50_floor_ms "
                  "floor_ratio small_p99_ms small_p99_direct_ms download_mib_s "
                  "download_mib_s_direct throughput_ratio rss_growth_mib")


@pytest.mark.docker
def test_port_forward(base_image: str) -> None:
    fields = run_bench("port_forward", "--image", base_image)
    check(fields, "download_mib_s download_mib_s_direct upload_mib_s upload_mib_s_direct "
                  "throughput_ratio download_mib_s_floor upload_mib_s_floor floor_ratio",
          intact=1)


@pytest.mark.docker
@pytest.mark.pg
def test_recovery(base_image: str) -> None:
    """The cluster of tests/platform/cluster.py: PostgreSQL, two managers behind HAProxy."""
    server = needs_pg()
    if shutil.which("haproxy") is None and not Path("/usr/sbin/haproxy").is_file():
        pytest.skip("needs haproxy (tools/host-setup.sh --postgres installs it)")
    fields = run_bench("recovery", "--pg", server)
    check(fields, "agent_failover_s api_gap_s failover_start_s start_s failover_ratio "
                  "node_lost_s node_timeout_s node_lost_ratio orphans_removed_s")


def test_every_benchmark_has_a_test() -> None:
    """A benchmark added to bench/ gets its short run here too."""
    tested = {name.removeprefix("test_") for name in globals() if name.startswith("test_")}
    benches = {p.stem for p in (ROOT / "bench").glob("*.py") if not p.stem.startswith("_")}
    assert benches <= tested, f"no test runs {sorted(benches - tested)}"
