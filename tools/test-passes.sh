#!/usr/bin/env bash
# The two passes of `make test`, overlapped to keep CI's wall time down on a 2-core machine.
#
# The manager's tests on PostgreSQL use no Docker and each makes a database of its own, so they
# run beside the SQLite pass, whose Docker-bound tests spend most of their time waiting on
# containers. Their output is held back and printed after the SQLite pass, so neither report is
# interleaved with the other. The cluster test (containers, two managers, HAProxy) runs last,
# alone. The exit status is non-zero if any part failed; all parts run either way.
set -uo pipefail
cd "$(dirname "$0")/.."

log=$(mktemp -t gpuslice-pg-pass.XXXXXX)
pg=""
cleanup() {
    [ -n "$pg" ] && kill -- "-$pg" 2>/dev/null  # its process group: make and its pytest
    rm -f "$log"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Its own process group (stopped as one below); SIGINT and SIGQUIT as usual: bash ignores them
# in a script's background jobs, and tests that press Ctrl-C on a child process need them.
(trap - INT QUIT; exec setsid make --no-print-directory test-pg-manager) >"$log" 2>&1 &
pg=$!
make --no-print-directory test-sqlite
sqlite_rc=$?
wait "$pg"
pg_rc=$?
pg=""
echo "== the manager's tests on PostgreSQL (ran beside the SQLite pass) =="
cat "$log"
make --no-print-directory test-pg-cluster
cluster_rc=$?
echo "== exit: SQLite pass $sqlite_rc, manager on PostgreSQL $pg_rc, cluster $cluster_rc =="
[ "$sqlite_rc" -eq 0 ] && [ "$pg_rc" -eq 0 ] && [ "$cluster_rc" -eq 0 ]
