#!/usr/bin/env python3
# A loopback account provider that fails: mode "random:P" answers 503 to P% of calls at random;
# mode "capacity:R" accepts at most R calls a second (a token bucket) and answers 503 to the rest.
import sys, json, random, threading, time
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler
port = int(sys.argv[1]); mode = sys.argv[2]
kind, arg = mode.split(':'); arg = float(arg)
lock = threading.Lock(); stats = {'received': 0, 'accepted': 0}
rng = random.Random(7); tokens = [arg]; last = [time.monotonic()]
timeline = []
def admit():
    with lock:
        stats['received'] += 1
        if kind == 'random':
            ok = rng.random() >= arg / 100.0
        else:
            now = time.monotonic(); tokens[0] = min(arg, tokens[0] + (now - last[0]) * arg); last[0] = now
            ok = tokens[0] >= 1.0
            if ok: tokens[0] -= 1.0
        if ok: stats['accepted'] += 1
        timeline.append((time.monotonic(), ok))
        return ok
class H(BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    def log_message(self, *a): pass
    def send(self, code, obj):
        b = json.dumps(obj).encode()
        self.send_response(code); self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(b))); self.end_headers(); self.wfile.write(b)
    def do_GET(self):
        path = self.path.split('?')[0].strip('/').split('/')
        if path == ['_stats']:
            with lock:
                s = dict(stats)
                # per-second buckets
                if timeline:
                    t0 = timeline[0][0]; b = {}
                    for t, ok in timeline:
                        k = int(t - t0); r = b.setdefault(k, [0, 0]); r[0] += 1; r[1] += ok
                    s['per_second'] = [b.get(i, [0, 0]) for i in range(max(b) + 1)]
            return self.send(200, s)
        if not admit():
            return self.send(503, {'error': 'overloaded'})
        time.sleep(0.005)
        if len(path) == 3 and path[0] == 'users' and path[2] == 'access':
            return self.send(200, {'user_id': path[1], 'allowed': True})
        if len(path) == 2 and path[0] == 'users':
            return self.send(200, {'id': path[1], 'name': 'User'})
        self.send(404, {'error': 'not found'})
ThreadingHTTPServer.daemon_threads = True
ThreadingHTTPServer(('127.0.0.1', port), H).serve_forever()
