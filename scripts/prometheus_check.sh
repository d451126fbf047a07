#!/usr/bin/env bash
# Checks with a real Prometheus server (Debian's `prometheus` package) that the
# checkout example's latency histograms work with histogram_quantile.
#
#   scripts/prometheus_check.sh            # needs `prometheus` and `curl` on PATH
#
# Starts the checkout example on a free loopback port, drives checkouts through
# healthy and then slow fraud, lets a throwaway Prometheus (127.0.0.1 only, data in
# a temporary directory) scrape /metrics every second, then asks it for
#   histogram_quantile(Q, sum by (le, dependency) (rate(watertight_<h>_seconds_bucket[30s])))
# for Q in 0.5 and 0.99 and each histogram in HISTOGRAMS, and checks that fraud's
# answer is a finite number of seconds in a plausible range (slow:200 -> p50 between
# 0.1 s and 1 s). Everything it starts is stopped on exit; every wait is bounded.
set -euo pipefail
cd "$(dirname "$0")/.."

HISTOGRAMS=${HISTOGRAMS:-"call queue_wait run"}
command -v prometheus >/dev/null || { echo "prometheus not installed: apt-get install -y prometheus" >&2; exit 2; }
command -v curl >/dev/null || { echo "curl not installed" >&2; exit 2; }

work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

cargo build --quiet --features testing,serde --example checkout
target/debug/examples/checkout --addr 127.0.0.1:0 >"$work/checkout.out" 2>"$work/checkout.err" &
pids+=($!)
for _ in $(seq 100); do grep -q '^listening on' "$work/checkout.out" 2>/dev/null && break; sleep 0.1; done
base=$(sed -n 's/^listening on //p' "$work/checkout.out" | head -1)
[ -n "$base" ] || { echo "checkout did not start" >&2; cat "$work/checkout.err" >&2; exit 1; }
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
for _ in $(seq 100); do curl -fs "$prom/-/ready" >/dev/null 2>&1 && break; sleep 0.2; done
curl -fs "$prom/-/ready" >/dev/null || { echo "prometheus did not start" >&2; tail "$work/prometheus.log" >&2; exit 1; }
echo "prometheus $(prometheus --version 2>&1 | head -1 | awk '{print $3}') on $prom"

checkout() { curl -s -o /dev/null -H 'X-User-Id: alice' -d '{"customer_id":"c1","amount":42}' "$base/checkout"; }
curl -fs -d 'slow:200' "$base/_faults/fraud" >/dev/null
# 20 s of load, 4 clients, bounded: at most 4 x 100 requests.
end=$((SECONDS + 20))
for c in 1 2 3 4; do ( for _ in $(seq 100); do [ $SECONDS -lt $end ] || break; checkout; done ) & pids+=($!); done
wait "${pids[@]:2}" 2>/dev/null || true
sleep 3 # two more scrapes after the load

query() { curl -fsG "$prom/api/v1/query" --data-urlencode "query=$1"; }
up=$(query 'up{job="checkout"}' | python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "none")')
echo "up{job=checkout} = $up"
[ "$up" = "1" ] || { echo "FAIL: prometheus could not scrape /metrics" >&2; exit 1; }

fail=0
for h in $HISTOGRAMS; do
  for q in 0.5 0.99; do
    expr="histogram_quantile($q, sum by (le, dependency) (rate(watertight_${h}_seconds_bucket{dependency=\"fraud\"}[30s])))"
    value=$(query "$expr" | python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "none")')
    echo "$expr = $value"
    case "$h:$q:$value" in
      *:none) echo "  FAIL: no series watertight_${h}_seconds_bucket (is the exporter wired?)"; fail=1 ;;
      *:NaN|*:+Inf) echo "  FAIL: not a finite quantile"; fail=1 ;;
      call:0.5:*|run:0.5:*)
        python3 -c "import sys; v=float('$value'); sys.exit(0 if 0.1 <= v <= 1.0 else 1)" \
          || { echo "  FAIL: p50 of a 200 ms provider should be 0.1 s to 1 s"; fail=1; } ;;
    esac
  done
done
exit $fail
