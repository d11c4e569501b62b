#!/usr/bin/env bash
# Runs a command with every core kept busy, as a shared machine is: two busy processes per core
# (HOG_PER_CORE to change it) at normal priority, from before the command starts until it ends.
# The command's exit status is this script's. `make test-loaded` runs the suite under it.
#   tools/cpu-hog.sh COMMAND [ARGS...]
set -uo pipefail

if [ "$#" -eq 0 ]; then
  echo "usage: $0 COMMAND [ARGS...]" >&2
  exit 2
fi
per_core=${HOG_PER_CORE:-2}
case "$per_core" in
  ''|*[!0-9]*) echo "HOG_PER_CORE must be a whole number, got '$per_core'" >&2; exit 2 ;;
esac
count=$(( $(nproc) * per_core ))

hogs=()
stop_hogs() {
  [ "${#hogs[@]}" -gt 0 ] && kill "${hogs[@]}" 2>/dev/null
  wait "${hogs[@]}" 2>/dev/null
  hogs=()
}
trap stop_hogs EXIT
trap 'exit 130' INT TERM

for _ in $(seq "$count"); do
  # a shell loop that never sleeps: one core's worth of demand each
  sh -c 'while :; do :; done' &
  hogs+=("$!")
done
echo "cpu-hog: $count busy processes ($per_core per core on $(nproc)) beside: $*" >&2

"$@"
status=$?
stop_hogs
echo "cpu-hog: $* exited $status" >&2
exit "$status"
