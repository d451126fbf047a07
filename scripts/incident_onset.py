#!/usr/bin/env python3
"""The two incidents of the field reports, run against the checkout binary with
real load, watching the onset: what `/circuits` shows every 25 ms, and how
`GET /orders` fares while it happens.

    cargo build --release --all-features --example checkout
    python3 scripts/incident_onset.py fraud      # seed 001: fraud hangs after a healthy period
    python3 scripts/incident_onset.py account    # seed 000: account hangs, users not cached

`fraud` needs `hey` (Debian's package of that name). Loopback only; every load
is bounded in time. Prints the figures benches/README.md quotes.
"""

import csv
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARY = os.environ.get("CHECKOUT_BIN", os.path.join(ROOT, "target", "release", "examples", "checkout"))


def start():
    proc = subprocess.Popen(
        [BINARY, "--addr", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    first = proc.stdout.readline().strip()
    assert first.startswith("listening on http://"), first
    # Keep draining stdout so the server never blocks on a full pipe.
    threading.Thread(target=lambda: proc.stdout.read(), daemon=True).start()
    return proc, first[len("listening on "):]


def request(method, url, body=None, headers=None, timeout=15):
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    began = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            text = resp.read().decode()
            status = resp.status
    except urllib.error.HTTPError as e:
        text = e.read().decode()
        status = e.code
    took = time.monotonic() - began
    try:
        return status, json.loads(text), took
    except ValueError:
        return status, text, took


def circuits(base):
    return request("GET", base + "/circuits")[1]


def dep(snapshot, name):
    return next(d for d in snapshot["dependencies"] if d["name"] == name)


def checkout(base, user, amount=42):
    body = json.dumps({"customer_id": "c1", "amount": amount}).encode()
    return request("POST", base + "/checkout", body, {"X-User-Id": user, "Content-Type": "application/json"})


def p99(values):
    values = sorted(values)
    return values[max(0, int(len(values) * 0.99) - 1)] if values else float("nan")


def fraud():
    """Seed 001: 32 clients at 128 checkouts/s; fraud hangs at t = 10 s."""
    proc, base = start()
    try:
        status, order, _ = checkout(base, "alice")
        assert status == 201, order
        orders_url = f"{base}/orders/{order['order_id']}"
        hang_at = 10.0
        length = 22
        began = time.monotonic()
        load = subprocess.Popen(
            ["hey", "-z", f"{length}s", "-c", "32", "-q", "4", "-m", "POST", "-T", "application/json",
             "-H", "X-User-Id: alice", "-d", '{"customer_id":"c1","amount":42}', "-o", "csv", base + "/checkout"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        orders = subprocess.Popen(
            ["hey", "-z", f"{length}s", "-c", "4", "-q", "25", "-o", "csv", orders_url],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        samples = []
        hung = False
        while time.monotonic() - began < length + 1:
            t = time.monotonic() - began
            if not hung and t >= hang_at:
                request("POST", base + "/_faults/fraud", b"hang")
                hung = True
            snap = circuits(base)
            f = dep(snap, "fraud")
            samples.append((t, f["state"], snap["request_pool"]["busy"], snap["request_pool"]["threads"],
                            f["pool"]["busy"], f["calls"]))
            time.sleep(0.025)
        checkouts = list(csv.DictReader(load.communicate()[0].splitlines()))
        reads = list(csv.DictReader(orders.communicate()[0].splitlines()))
    finally:
        proc.terminate()
        proc.wait()

    def window(rows, lo, hi):
        return [r for r in rows if lo <= float(r["offset"]) < hi]

    healthy = window(reads, 2.0, hang_at)
    onset = window(reads, hang_at, hang_at + 10)
    h99 = p99([float(r["response-time"]) for r in healthy])
    o99 = p99([float(r["response-time"]) for r in onset])
    errors = sum(1 for r in onset if r["status-code"] != "200")
    threads = samples[0][3]
    during = [s for s in samples if s[0] >= hang_at]
    max_busy = max(s[2] for s in during)
    opened = next((s[0] - hang_at for s in during if s[1] == "open"), None)
    print(f"request threads {threads}; checkouts sent {len(checkouts)} "
          f"({len(window(checkouts, 2.0, hang_at)) / (hang_at - 2):.0f}/s healthy)")
    print(f"GET /orders healthy p99 {h99 * 1000:.2f} ms ({len(healthy)} reads); "
          f"first 10 s of the hang p99 {o99 * 1000:.2f} ms ({len(onset)} reads, {errors} not 200): "
          f"{o99 / h99:.2f}x")
    print(f"request pool busy: at most {max_busy} of {threads} during the hang "
          f"(the /circuits poll counts itself)")
    print(f"fraud OPEN {opened:.3f} s into the hang" if opened is not None else "fraud never OPEN")
    by_status = {}
    for r in window(checkouts, hang_at, hang_at + 10):
        by_status[r["status-code"]] = by_status.get(r["status-code"], 0) + 1
    print(f"checkouts in the first 10 s of the hang by status: {dict(sorted(by_status.items()))}")
    last = during[-1][5]
    print(f"fraud calls at the end: {json.dumps(last, sort_keys=True)}")


def account():
    """Seed 000: account hangs; three waves of 12 concurrent users not cached."""
    proc, base = start()
    try:
        status, body, _ = checkout(base, "alice")
        assert status == 201, body
        request("POST", base + "/_faults/account", b"hang")
        for wave in range(1, 4):
            results = [None] * 12

            def one(i, wave=wave):
                results[i] = checkout(base, f"wave{wave}-user{i}")

            threads = [threading.Thread(target=one, args=(i,)) for i in range(12)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            codes = {}
            for status, body, _ in results:
                key = f"{status} {body.get('code', body.get('status')) if isinstance(body, dict) else body}"
                codes[key] = codes.get(key, 0) + 1
            slowest = max(r[2] for r in results)
            state = dep(circuits(base), "account-access")["state"]
            print(f"wave {wave}: {codes}, slowest {slowest * 1000:.1f} ms; account-access {state} after it")
        status, body, took = checkout(base, "alice")
        print(f"cached user alice: {status} in {took * 1000:.1f} ms")
        calls = dep(circuits(base), "account-access")["calls"]
        print(f"account-access calls: {json.dumps(calls, sort_keys=True)}")
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    which = sys.argv[1] if len(sys.argv) > 1 else ""
    if which == "fraud":
        fraud()
    elif which == "account":
        account()
    else:
        sys.exit(__doc__)
