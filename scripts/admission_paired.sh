#!/usr/bin/env bash
# Paired before/after rounds of benches/admission.rs (goodput under healthy
# bursts): the bench is built at an earlier commit (in a worktree of its own,
# with this bench copied in) and here, then the two run in turn, the order
# alternating from round to round. Prints every round's lines.
#
#   scripts/admission_paired.sh [BEFORE_COMMIT] [ROUNDS] [BURSTS]
set -euo pipefail
cd "$(dirname "$0")/.."
before_rev=${1:-e02b884}
rounds=${2:-3}
bursts=${3:-20}
before=target/before-$before_rev
if [ ! -d "$before" ]; then
    git worktree add --detach "$before" "$before_rev" >/dev/null
fi
cp benches/admission.rs "$before/benches/"
grep -q 'name = "admission"' "$before/Cargo.toml" ||
    printf '\n[[bench]]\nname = "admission"\nharness = false\n' >>"$before/Cargo.toml"
(cd "$before" && cargo bench --bench admission --no-run -q 2>/dev/null)
cargo bench --bench admission --no-run -q 2>/dev/null
run() { # side dir
    echo "== $1"
    (cd "$2" && cargo bench -q --bench admission -- "$bursts" 2>/dev/null)
}
for r in $(seq 1 "$rounds"); do
    echo "# round $r"
    if [ $((r % 2)) = 1 ]; then run before "$before"; run after .; else run after .; run before "$before"; fi
done
