#!/usr/bin/env bash
# The README's test command, run after run, with a second build beside it, for the
# suite's stability record in tests/README.md.
#
#   bash scripts/suite_loop.sh [RUNS]      # default 20
#   LOAD=spin bash scripts/suite_loop.sh 10  # two busy loops (`yes`) beside it instead of the build
#
# Each run's output is kept in target/suite-loop/run-<n>.log; one line per run goes to
# target/suite-loop/summary.log (verdict, seconds, load average). The second build is a
# release build of every target into its own target directory, cleaned and rebuilt in a
# loop, so that the load average stays at 2 or more on a 2-core machine.
set -u
cd "$(dirname "$0")/.."
runs=${1:-20}
out=target/suite-loop
mkdir -p "$out"
summary=$out/summary.log
echo "commit $(git rev-parse --short HEAD), started $(date -u +%H:%M:%S)" > "$summary"
stop=$out/stop
rm -f "$stop"
if [ "${LOAD:-build}" = spin ]; then
    echo "load: two busy loops" >>"$summary"
    yes >/dev/null &
    spin1=$!
    yes >/dev/null &
    spin2=$!
    trap 'kill $spin1 $spin2 2>/dev/null' EXIT INT TERM
else
    (
        while [ ! -f "$stop" ]; do
            CARGO_TARGET_DIR=target/suite-loop-load nice -n 5 cargo build --release --all-features --all-targets >/dev/null 2>&1
            CARGO_TARGET_DIR=target/suite-loop-load cargo clean -p watertight --release >/dev/null 2>&1
        done
    ) &
    load=$!
    trap 'touch "$stop"; kill $load 2>/dev/null' EXIT INT TERM
fi
failed=0
for i in $(seq 1 "$runs"); do
    start=$(date +%s)
    if cargo test --all-features >"$out/run-$i.log" 2>&1; then verdict=pass; else verdict=FAIL; failed=$((failed + 1)); fi
    echo "run $i: $verdict in $(($(date +%s) - start)) s, load average $(cut -d' ' -f1-3 /proc/loadavg)" >>"$summary"
done
echo "$((runs - failed)) of $runs passed, done $(date -u +%H:%M:%S)" >>"$summary"
cat "$summary"
[ "$failed" -eq 0 ]
