#!/usr/bin/env bash
# What the guard costs on a trivial route: `GET /health` of the release
# checkout binary, guarded against `--no-guard` (tiny_http alone), both up at
# once and measured in alternating rounds with `hey`, 16 connections, kept
# alive and then a new connection per request. Prints each round's requests/s
# and the ratio guarded / tiny_http alone.
#
#   cargo build --release --all-features --example checkout
#   bash scripts/edge_cost.sh [rounds] [requests]   (CHECKOUT_BIN=path: another build)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
requests=${2:-20000}
bin=${CHECKOUT_BIN:-target/release/examples/checkout}
command -v hey >/dev/null || { echo "hey is not installed (apt-get install -y hey)" >&2; exit 1; }
[ -x "$bin" ] || { echo "build $bin first" >&2; exit 1; }

"$bin" --addr 127.0.0.1:18081 >/tmp/edge-guarded.log 2>&1 &
guarded=$!
"$bin" --addr 127.0.0.1:18082 --no-guard >/tmp/edge-alone.log 2>&1 &
alone=$!
trap 'kill $guarded $alone 2>/dev/null || true' EXIT
for port in 18081 18082; do
    for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.1; done
done

rps() { hey -n "$requests" -c 16 "$@" | awk '/Requests\/sec/ {print $2}'; }
for mode in keepalive new; do
    flags=()
    [ "$mode" = new ] && flags=(-disable-keepalive)
    # One unrecorded round each to warm up.
    rps "${flags[@]}" http://127.0.0.1:18081/health >/dev/null
    rps "${flags[@]}" http://127.0.0.1:18082/health >/dev/null
    for r in $(seq "$rounds"); do
        g=$(rps "${flags[@]}" http://127.0.0.1:18081/health)
        a=$(rps "${flags[@]}" http://127.0.0.1:18082/health)
        awk -v m="$mode" -v r="$r" -v g="$g" -v a="$a" \
            'BEGIN { printf "%-9s round %d: guarded %8.0f/s  tiny_http alone %8.0f/s  ratio %.2fx\n", m, r, g, a, g / a }'
    done
done
