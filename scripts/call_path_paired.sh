#!/usr/bin/env bash
# Paired before/after rounds of benches/call_path.rs: the bench is built at an
# earlier commit (in a worktree of its own, with this bench copied in) and
# here, then the two run in turn, the order alternating from round to round.
# Prints each round's medians and the median of the per-round ratios
# (after / before; below 1.00 is faster).
#
#   scripts/call_path_paired.sh [BEFORE_COMMIT] [ROUNDS] [FILTER]
#
# FILTER (a criterion filter, e.g. `dependency/back_to_back`) runs only the ids it matches.
# PIN=<cpu> runs both sides on that one CPU (`taskset`): the caller and the worker then take
# turns on one core, which takes the wake-up's core out of the figure and leaves the cost of
# the path itself.
set -euo pipefail
cd "$(dirname "$0")/.."
before_rev=${1:-6e22f88}
rounds=${2:-5}
filter=${3:-}
before=target/before-$before_rev
if [ ! -d "$before" ]; then
    git worktree add --detach "$before" "$before_rev" >/dev/null
fi
cp benches/call_path.rs "$before/benches/"
grep -q 'name = "call_path"' "$before/Cargo.toml" ||
    printf '\n[[bench]]\nname = "call_path"\nharness = false\n' >>"$before/Cargo.toml"
(cd "$before" && cargo bench --bench call_path --no-run -q 2>/dev/null)
cargo bench --bench call_path --no-run -q 2>/dev/null
out=target/call-path-paired
rm -rf "$out" && mkdir -p "$out"
run() { # side dir round
    rm -rf "$2/target/criterion"
    local pin=()
    [ -n "${PIN:-}" ] && pin=(taskset -c "$PIN")
    (cd "$2" && "${pin[@]}" cargo bench -q --bench call_path -- --noplot $filter >/dev/null 2>&1)
    python3 - "$2/target/criterion" "$out/$1-$3.json" <<'PY'
import json, pathlib, sys
root, dest = pathlib.Path(sys.argv[1]), sys.argv[2]
rows = {}
for est in root.glob("*/*/new/estimates.json"):
    rows[f"{est.parts[-4]}/{est.parts[-3]}"] = json.load(open(est))["median"]["point_estimate"]
json.dump(rows, open(dest, "w"))
PY
}
for r in $(seq 1 "$rounds"); do
    if [ $((r % 2)) = 1 ]; then run before "$before" "$r"; run after . "$r"; else run after . "$r"; run before "$before" "$r"; fi
    echo "round $r done"
done
python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
ids = sorted(json.load(open(f"{out}/after-1.json")))
print(f"{'id':28} {'before ns':>10} {'after ns':>10}  per-round after/before   median")
for i in ids:
    b = [json.load(open(f"{out}/before-{r}.json")).get(i) for r in range(1, rounds + 1)]
    a = [json.load(open(f"{out}/after-{r}.json")).get(i) for r in range(1, rounds + 1)]
    ratios = [x / y for x, y in zip(a, b) if x and y]
    print(f"{i:28} {statistics.median(b):10.1f} {statistics.median(a):10.1f}  "
          + " ".join(f"{q:.3f}" for q in ratios) + f"   {statistics.median(ratios):.3f}")
PY
