#!/usr/bin/env bash
# `make test`'s passes, in two lanes that run side by side to keep CI's wall time down on a
# 2-core machine:
#
#   docker lane  the tests marked `docker` (the agent against the Docker Engine, images, the
#                whole platform) and `bench` (every benchmark's short run, on SQLite and on
#                PostgreSQL), in GPUSLICE_TEST_DOCKER_WORKERS processes (default 2), a test
#                file each at a time (`--dist loadfile`: a module's shared `gpuslice up` stays
#                in one process; the two files that start JupyterLab and a browser share one,
#                tests/conftest.py SAME_PROCESS, so they never run side by side); they spend
#                most of their time waiting on containers, on the processes they start and on
#                the platform's own timers.
#                Then the cluster (two managers on PostgreSQL behind HAProxy, two agents, and
#                the recovery benchmark on it).
#   db lane      everything else on SQLite, then the manager's tests on PostgreSQL, in
#                GPUSLICE_TEST_WORKERS processes (default 2): CPU-bound, no Docker, one
#                database per test.
#
# No test stops or restarts the machine's dockerd (those use an engine of their own), so the
# lanes cannot break each other's containers. The db lane's output is held back and printed
# after the docker lane's, so neither report is interleaved with the other. The exit status
# is non-zero if any part failed; all parts run either way. Extra pytest options:
# PYTEST_ADDOPTS.
set -uo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-.venv/bin/python}
PG_URL=${PG_URL:-postgresql+asyncpg://gpuslice:gpuslice@127.0.0.1:5432/gpuslice}
WORKERS=${GPUSLICE_TEST_WORKERS:-2}
DOCKER_WORKERS=${GPUSLICE_TEST_DOCKER_WORKERS:-2}
for count in "$WORKERS" "$DOCKER_WORKERS"; do
    case "$count" in
      ''|*[!0-9]*|0) echo "GPUSLICE_TEST_WORKERS and GPUSLICE_TEST_DOCKER_WORKERS must be" \
                         "whole numbers of 1 or more" >&2; exit 2 ;;
    esac
done
# Each test's wall and CPU time, for tools/test-times.py (tests/timings.py); each lane's own in
# its `real/user/sys` line (the CPU of every process it reaped, Docker's engine not included).
export GPUSLICE_TEST_TIMES=${GPUSLICE_TEST_TIMES:-tests/artifacts/times}
TIMEFORMAT='   %R s wall, %U s user, %S s system'
CLUSTER=(tests/platform/test_cluster.py tests/bench/test_bench.py::test_recovery)
pytest=("$PY" -m pytest -q -p no:cacheprovider)

log=$(mktemp -t gpuslice-db-lane.XXXXXX)
docker_log=$(mktemp -t gpuslice-docker-lane.XXXXXX)
db=""
cleanup() {
    [ -n "$db" ] && kill -- "-$db" 2>/dev/null  # its process group: the lane and its pytests
    rm -f "$log" "$docker_log"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

db_lane() {
    local sqlite_rc pg_rc
    echo "== db lane, SQLite: everything not marked docker or bench ($WORKERS processes) =="
    time GPUSLICE_TEST_LANE=sqlite "${pytest[@]}" -n "$WORKERS" -m "not docker and not bench" --durations=15 tests \
        --ignore "${CLUSTER[0]}"
    sqlite_rc=$?
    echo "== db lane, PostgreSQL: the manager's tests ($WORKERS processes) =="
    time GPUSLICE_TEST_LANE=pg GPUSLICE_TEST_PG=$PG_URL "${pytest[@]}" -n "$WORKERS" \
        --durations=15 tests/manager
    pg_rc=$?
    echo "== db lane: SQLite $sqlite_rc, PostgreSQL $pg_rc =="
    [ "$sqlite_rc" -eq 0 ] && [ "$pg_rc" -eq 0 ]
}

if [ "${1:-}" = "--db-lane" ]; then  # the background lane, as run below
    trap - EXIT
    rm -f "$log" "$docker_log"
    db_lane
    exit
fi

rm -rf "$GPUSLICE_TEST_TIMES"
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8}' /proc/stat; }
read -r busy_start all_start < <(busy)
started=$SECONDS

# Its own process group (stopped as one above); SIGINT and SIGQUIT as usual: bash ignores them
# in a script's background jobs, and tests that press Ctrl-C on a child process need them.
(trap - INT QUIT; exec setsid bash "$0" --db-lane) >"$log" 2>&1 &
db=$!

# The docker lane's report goes to the terminal as it runs and to $docker_log, so that the
# failures of every lane can be listed again in the run's last lines (a CI log is often read
# from its tail).
{
    echo "== docker lane: the tests marked docker or bench ($DOCKER_WORKERS processes, a file each) =="
    time GPUSLICE_TEST_LANE=docker GPUSLICE_TEST_PG=$PG_URL "${pytest[@]}" -n "$DOCKER_WORKERS" --dist loadfile \
        -m "docker or bench" --durations=25 tests --ignore "${CLUSTER[0]}" --deselect "${CLUSTER[1]}"
    echo "docker_rc=$?" >&3
    echo "== docker lane, cluster: two managers on PostgreSQL, two agents =="
    time GPUSLICE_TEST_LANE=cluster GPUSLICE_TEST_PG=$PG_URL "${pytest[@]}" "${CLUSTER[@]}"
    echo "cluster_rc=$?" >&3
} 3>"$docker_log.rc" 2>&1 | tee "$docker_log"
docker_rc=$(sed -n 's/^docker_rc=//p' "$docker_log.rc")
cluster_rc=$(sed -n 's/^cluster_rc=//p' "$docker_log.rc")
rm -f "$docker_log.rc"
wait "$db"
db_rc=$?
db=""
cat "$log"
read -r busy_end all_end < <(busy)
echo "== $((SECONDS - started)) s in all; the machine's CPUs were busy" \
     "$(( 100 * (busy_end - busy_start) / (all_end - all_start + 1) ))% of the time =="
failures=$(grep -h -E '^(FAILED|ERROR) ' "$docker_log" "$log")
if [ -n "$failures" ]; then
    echo "== what failed, every lane =="
    echo "$failures"
fi
echo "== exit: docker lane $docker_rc, cluster $cluster_rc, db lane $db_rc =="
[ "$docker_rc" -eq 0 ] && [ "$cluster_rc" -eq 0 ] && [ "$db_rc" -eq 0 ]
