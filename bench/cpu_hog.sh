#!/usr/bin/env bash
# Runs a command beside a CPU hog, as a laptop that is also compiling something would run it (issue 34):
#
#     bench/cpu_hog.sh [--cpu N] [--runs N] [-- COMMAND ...]     default: --cpu 4 --runs 1 -- .ci/run
#
# The hog is Debian's stress-ng (`stress-ng --cpu N`, installed through apt where missing), started before the
# command and stopped after it, whatever the command's end. Each run's exit code and wall time are printed; the
# script exits non-zero when any run failed. The hog runs at the command's own priority: it competes, it does not
# yield.
set -euo pipefail
cd "$(dirname "$0")/.."

cpus=4
runs=1
while [ $# -gt 0 ]; do
  case "$1" in
    --cpu) cpus="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --) shift; break ;;
    *) echo "bench/cpu_hog.sh: unknown option $1 (use --cpu N, --runs N, -- COMMAND ...)" >&2; exit 2 ;;
  esac
done
[ $# -gt 0 ] || set -- .ci/run

if ! command -v stress-ng >/dev/null; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq && $sudo apt-get install -y -qq stress-ng
fi

stress-ng --cpu "$cpus" --timeout 0 --quiet &
hog=$!
trap 'kill "$hog" 2>/dev/null; wait "$hog" 2>/dev/null || true' EXIT
sleep 1  # the hog's workers are forked: the command starts beside them, not before them
kill -0 "$hog" || { echo "bench/cpu_hog.sh: stress-ng did not start" >&2; exit 1; }

failed=0
for run in $(seq 1 "$runs"); do
  started=$(date +%s)
  status=0
  "$@" || status=$?
  took=$(( $(date +%s) - started ))
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  echo "cpu_hog: run $run of $runs beside stress-ng --cpu $cpus: exit $status after ${took} s (load $load)"
  [ "$status" -eq 0 ] || failed=1
done
exit "$failed"
