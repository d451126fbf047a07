#!/usr/bin/env bash
# Checks with a real Prometheus server (Debian's `prometheus` package) that the
# checkout example's latency histograms work with histogram_quantile.
#
#   scripts/prometheus_check.sh            # needs `prometheus`, `curl` and `python3` on PATH
#
# Builds and starts the checkout example on a free loopback port, sets its fraud
# provider to `slow:200` (every answer after 200 ms), and drives checkouts through
# it (4 clients, 20 s, at most 400 requests) while a throwaway Prometheus
# (127.0.0.1 only, data in a temporary directory) scrapes /metrics every second.
# Then it asks Prometheus:
# - that it scraped the server (`up`), and that fraud's call histogram reached it
#   whole: 21 `le` buckets (doublings from 100 us to 26.2 s, 30 s, +Inf), the +Inf
#   bucket equal to `_count`, and `_count` at least the checkouts fraud answered;
# - for Q in 0.5 and 0.99 and each histogram in HISTOGRAMS,
#     histogram_quantile(Q, sum by (le, dependency) (rate(watertight_<h>_seconds_bucket[30s])))
#   for fraud: a finite number of seconds, p50 <= p99, and a plausible value: the
#   call's and the run's p50 between 0.1 s and 1 s (a 200 ms provider; Prometheus
#   interpolates inside doubling buckets), the queue wait's p50 under 0.1 s (4
#   clients, 6 workers: nothing queues).
# Everything it starts is stopped on exit (Prometheus and the server, then any
# client left), its temporary directory removed; every wait and request is bounded.
# Exit status: 0 all checks passed, 1 a check failed, 2 a tool is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

HISTOGRAMS=${HISTOGRAMS:-"call queue_wait run"}
for tool in prometheus curl python3; do
  command -v "$tool" >/dev/null || { echo "$tool not installed (Debian: apt-get install -y $tool)" >&2; exit 2; }
done

work=$(mktemp -d)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  # Bounded: whatever has not stopped 10 s after SIGTERM is killed.
  for _ in $(seq 100); do
    local left=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && left=1; done
    [ "$left" = 0 ] && break
    sleep 0.1
  done
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cargo build --quiet --features testing,serde --example checkout
"${CARGO_TARGET_DIR:-target}/debug/examples/checkout" --addr 127.0.0.1:0 \
  >"$work/checkout.out" 2>"$work/checkout.err" &
pids+=($!)
for _ in $(seq 100); do grep -q '^listening on' "$work/checkout.out" 2>/dev/null && break; sleep 0.1; done
base=$(sed -n 's/^listening on //p' "$work/checkout.out" | head -1)
[ -n "$base" ] || { echo "checkout did not start" >&2; cat "$work/checkout.err" >&2; exit 1; }
case "$base" in http://127.0.0.1:*) ;; *) echo "checkout is not on loopback: $base" >&2; exit 1 ;; esac
target=${base#http://}
echo "checkout on $base"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$work/prometheus.yml" <<YML
global: { scrape_interval: 1s, evaluation_interval: 1s }
scrape_configs:
  - job_name: checkout
    static_configs: [ { targets: ["$target"] } ]
YML
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/data" \
  --web.listen-address="127.0.0.1:$port" >"$work/prometheus.log" 2>&1 &
pids+=($!)
prom="http://127.0.0.1:$port"
for _ in $(seq 100); do curl -fs -m 2 "$prom/-/ready" >/dev/null 2>&1 && break; sleep 0.2; done
curl -fs -m 2 "$prom/-/ready" >/dev/null || { echo "prometheus did not start" >&2; tail "$work/prometheus.log" >&2; exit 1; }
echo "prometheus $(prometheus --version 2>&1 | head -1 | awk '{print $3}') on $prom"

# One checkout; its status (000 when curl gave up) goes to the client's file.
checkout() {
  curl -s -m 10 -o /dev/null -w '%{http_code}\n' -H 'X-User-Id: alice' \
    -d '{"customer_id":"c1","amount":42}' "$base/checkout" >>"$1" || true
}
curl -fs -m 5 -d 'slow:200' "$base/_faults/fraud" >/dev/null
# 20 s of load, 4 clients, bounded: at most 4 x 100 requests of at most 10 s each.
end=$((SECONDS + 20))
clients=()
for c in 1 2 3 4; do
  ( for _ in $(seq 100); do [ $SECONDS -lt $end ] || break; checkout "$work/codes.$c"; done ) &
  pids+=($!)
  clients+=($!)
done
wait "${clients[@]}" || true
sleep 3 # two more scrapes after the load
answered=$(cat "$work"/codes.* | grep -c '^20[12]$' || true)
echo "checkouts: $(cat "$work"/codes.* | sort | uniq -c | awk '{printf "%s%s x %s", sep, $1, $2; sep=", "}')"

# The value of a query's first sample, or `none` when it has none.
query() {
  curl -fsG -m 10 "$prom/api/v1/query" --data-urlencode "query=$1" \
    | python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "none")'
}
# Whether python3 finds the expression (over the float v) true.
holds() { python3 -c "import sys; v=float('$1'); sys.exit(0 if ($2) else 1)"; }

fail=0
up=$(query 'up{job="checkout"}')
echo "up{job=\"checkout\"} = $up"
[ "$up" = "1" ] || { echo "FAIL: prometheus could not scrape /metrics" >&2; exit 1; }

buckets=$(query 'count(watertight_call_seconds_bucket{dependency="fraud"})')
inf=$(query 'watertight_call_seconds_bucket{dependency="fraud",le="+Inf"}')
count=$(query 'watertight_call_seconds_count{dependency="fraud"}')
echo "fraud call histogram: $buckets buckets, +Inf bucket $inf, _count $count, checkouts answered $answered"
[ "$buckets" = "21" ] || { echo "  FAIL: 21 le buckets expected"; fail=1; }
[ "$inf" = "$count" ] || { echo "  FAIL: the +Inf bucket must equal _count"; fail=1; }
[ "$answered" -gt 0 ] || { echo "  FAIL: no checkout was answered by fraud"; fail=1; }
[ "$count" != none ] && holds "$count" "v >= $answered" || { echo "  FAIL: fewer fraud calls than answered checkouts"; fail=1; }

for h in $HISTOGRAMS; do
  p50=none
  for q in 0.5 0.99; do
    expr="histogram_quantile($q, sum by (le, dependency) (rate(watertight_${h}_seconds_bucket{dependency=\"fraud\"}[30s])))"
    value=$(query "$expr")
    echo "$expr = $value"
    case "$value" in
      none) echo "  FAIL: no series watertight_${h}_seconds_bucket (is the exporter wired?)"; fail=1; continue ;;
      NaN | +Inf | -Inf) echo "  FAIL: not a finite quantile"; fail=1; continue ;;
    esac
    case "$h:$q" in
      call:0.5 | run:0.5)
        holds "$value" '0.1 <= v <= 1.0' || { echo "  FAIL: p50 of a 200 ms provider should be 0.1 s to 1 s"; fail=1; } ;;
      queue_wait:0.5)
        holds "$value" '0 <= v < 0.1' || { echo "  FAIL: p50 of the queue wait should be under 0.1 s"; fail=1; } ;;
    esac
    if [ "$q" = 0.5 ]; then
      p50=$value
    elif [ "$p50" != none ]; then
      holds "$value" "v >= $p50" || { echo "  FAIL: p99 below p50"; fail=1; }
    fi
  done
done
[ "$fail" = 0 ] && echo "PASS" || echo "FAIL"
exit $fail
