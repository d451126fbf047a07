#!/usr/bin/env python3
# Closed-loop checkout clients: CLIENTS threads for SECS seconds, each POST /checkout with a new
# X-User-Id (so every access check misses the cache), PAUSE seconds apart; prints the statuses.
# usage: checkout_load.py PORT CLIENTS SECS [PAUSE]
import sys, threading, time, http.client, json, collections, itertools
port = int(sys.argv[1]); clients = int(sys.argv[2]); secs = float(sys.argv[3]); pace = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
codes = collections.Counter(); lock = threading.Lock(); ids = itertools.count()
end = time.time() + secs
def run():
    while time.time() < end:
        n = next(ids)
        try:
            c = http.client.HTTPConnection('127.0.0.1', port, timeout=10)
            c.request('POST', '/checkout', body=json.dumps({'customer_id': 'c-1', 'amount': 42}),
                      headers={'X-User-Id': f'u{n}', 'Content-Type': 'application/json', 'Connection': 'close'})
            r = c.getresponse(); body = r.read(); k = r.status
            if k >= 500:
                try: k = f"{k}:{json.loads(body).get('reason', json.loads(body).get('error', ''))}"
                except Exception: pass
            c.close()
        except Exception as e:
            k = type(e).__name__
        with lock: codes[k] += 1
        if pace: time.sleep(pace)
ts = [threading.Thread(target=run) for _ in range(clients)]
[t.start() for t in ts]; [t.join() for t in ts]
print(json.dumps(dict(codes)))
