#!/usr/bin/env bash
# The checkout's account dependency against a failing provider, throttled or behind its breaker
# alone: what the provider received and accepted, second by second, and what the dependency
# counted. Loopback only; each run is bounded by SECS.
#
#   cargo build --release --features testing,serde --example checkout
#   scripts/throttle_compare.sh CONFIG MODE [SECS] [CLIENTS]
#
# MODE: random:P (each call 503 with probability P %) or capacity:R (at most R accepted a second,
# 503 beyond). CONFIG: a checkout config; for the throttled runs, examples/checkout/watertight.toml
# with [dependencies.account-access.throttle] (k, window) added and its breaker `enabled = false`.
set -euo pipefail
cd "$(dirname "$0")/.."
cfg=$1 mode=$2 secs=${3:-40} clients=${4:-8}
python3 scripts/flaky_account.py 19090 "$mode" & provider=$!
target/release/examples/checkout --addr 127.0.0.1:18080 --config "$cfg" \
    --account-url http://127.0.0.1:19090 >/dev/null 2>&1 & checkout=$!
trap 'kill $checkout $provider 2>/dev/null' EXIT
sleep 1.5
python3 scripts/checkout_load.py 18080 "$clients" "$secs" 0.02
curl -s localhost:18080/circuits | python3 -c '
import json, sys
for d in json.load(sys.stdin)["dependencies"]:
    if d["name"] == "account-access":
        print("account-access calls", json.dumps({k: v for k, v in d["calls"].items() if v}))'
curl -s localhost:18080/circuits/events | python3 -c '
import json, sys
for d in json.load(sys.stdin)["dependencies"]:
    if d["name"] == "account-access":
        for e in d["events"]:
            if e.get("kind") == "transition":
                print("transition", e["from"], "->", e["to"], "at", e["at_ms"])'
curl -s localhost:19090/_stats | python3 -c '
import json, sys
s = json.load(sys.stdin)
print("provider received", s["received"], "accepted", s["accepted"],
      "ratio %.2f" % (s["received"] / max(1, s["accepted"])))
print("per second [received, accepted]:", s.get("per_second"))'
