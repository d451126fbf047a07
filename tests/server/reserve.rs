//! The request pool's reserved share (`ServerConfigBuilder::reserve`) over
//! real loopback sockets: ordinary requests never take it, and a reserved
//! route answers while every ordinary thread is held.
#![cfg(feature = "tiny_http")]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use tiny_http::{Request, Response, ResponseBox};
use watertight::ConfigError;
use watertight::server::{RequestContext, Reserve, ServerConfig, ServerHandle, serve_with};

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into()
}

fn start<H>(threads: usize, reserve: Reserve, handler: H) -> (ServerHandle, SocketAddr)
where
    H: Fn(&mut Request, &RequestContext) -> ResponseBox + Send + Sync + 'static,
{
    let config = ServerConfig::builder().reserve(reserve).build().expect("a valid reserve");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    let handle = serve_with(listener, threads, config, handler).expect("start the server");
    let addr = handle.addr().to_ip().expect("a TCP address");
    (handle, addr)
}

fn get(agent: &ureq::Agent, addr: SocketAddr, path: &str) -> (u16, String) {
    let mut resp = agent.get(format!("http://{addr}{path}")).call().expect("an answer");
    let status = resp.status().as_u16();
    (status, resp.body_mut().read_to_string().expect("a text body"))
}

/// Polls `cond` every 2 ms for at most `timeout`.
fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let give_up = Instant::now() + timeout;
    while !cond() {
        if Instant::now() >= give_up {
            return false;
        }
        thread::sleep(Duration::from_millis(2));
    }
    true
}

/// Counts requests in flight and remembers the most seen at once.
#[derive(Default)]
struct Gauge {
    now: AtomicUsize,
    most: AtomicUsize,
}

impl Gauge {
    fn enter(&self) {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
    }

    fn leave(&self) {
        self.now.fetch_sub(1, Ordering::SeqCst);
    }
}

/// 16 clients race ordinary requests (each holds its thread 5 ms) at a pool
/// of 16 threads with 4 reserved, while a prober sends reserved ones: the
/// ordinary requests never hold more than 12 threads, though they always
/// want more, and every probe is classified reserved and answered.
#[test]
fn ordinary_requests_never_take_the_reserved_threads_with_16_clients_racing() {
    const THREADS: usize = 16;
    const RESERVED: usize = 4;
    const CLIENTS: usize = 16;
    const REQUESTS: usize = 25;
    let ordinary = Arc::new(Gauge::default());
    let misclassified = Arc::new(AtomicUsize::new(0));
    let (handle, addr) = start(THREADS, Reserve::new(RESERVED).for_routes(["GET /health"]), {
        let (ordinary, misclassified) = (Arc::clone(&ordinary), Arc::clone(&misclassified));
        move |req: &mut Request, ctx: &RequestContext| {
            let health = req.url() == "/health";
            if health != ctx.reserved() {
                misclassified.fetch_add(1, Ordering::SeqCst);
            }
            if health {
                return Response::from_string("UP").boxed();
            }
            ordinary.enter();
            thread::sleep(Duration::from_millis(5));
            ordinary.leave();
            Response::from_string("done").boxed()
        }
    });
    assert_eq!(handle.reserved_threads(), RESERVED);

    let start = Arc::new(Barrier::new(CLIENTS + 1));
    let racing = Arc::new(AtomicUsize::new(CLIENTS));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (start, racing) = (Arc::clone(&start), Arc::clone(&racing));
            thread::spawn(move || {
                let agent = agent();
                start.wait();
                let answered = (0..REQUESTS).filter(|_| get(&agent, addr, "/work").0 == 200).count();
                racing.fetch_sub(1, Ordering::SeqCst);
                answered
            })
        })
        .collect();
    start.wait();
    // Probe while the ordinary requests race (bounded: at most 2,000 probes).
    let prober = agent();
    let mut probes = Vec::new();
    while racing.load(Ordering::SeqCst) > 0 && probes.len() < 2000 {
        let began = Instant::now();
        assert_eq!(get(&prober, addr, "/health"), (200, "UP".to_owned()));
        probes.push(began.elapsed());
    }
    let answered: usize = clients.into_iter().map(|c| c.join().unwrap()).sum();
    assert_eq!(answered, CLIENTS * REQUESTS, "every ordinary request is answered");
    let most = ordinary.most.load(Ordering::SeqCst);
    probes.sort();
    eprintln!(
        "{} probes while 16 clients raced: p50 {:?}, max {:?}; at most {most} ordinary requests at once",
        probes.len(),
        probes.get(probes.len() / 2),
        probes.last()
    );
    assert!(most <= THREADS - RESERVED, "{most} ordinary requests held threads at once");
    assert_eq!(misclassified.load(Ordering::SeqCst), 0, "ctx.reserved() disagrees with the route");
    assert!(!probes.is_empty());
    assert!(wait_until(Duration::from_secs(5), || handle.busy() == 0 && handle.reserved_busy() == 0));
    assert_eq!(handle.waiting(), 0);
    handle.shutdown();
}

/// A gate the handler waits at (bounded), and the test opens.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    opened: Condvar,
}

impl Gate {
    fn wait(&self, most: Duration) {
        let open = self.open.lock().unwrap();
        let _ = self.opened.wait_timeout_while(open, most, |open| !*open).unwrap();
    }

    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.opened.notify_all();
    }
}

/// Every ordinary thread held, more ordinary requests waiting: the reserved
/// routes (by pattern and by classifier) still answer at once, from the
/// reserved threads, and the waiting ordinary requests are answered once
/// the held ones are.
#[test]
fn a_reserved_route_answers_while_every_ordinary_thread_is_held() {
    const THREADS: usize = 8;
    const RESERVED: usize = 2;
    const HELD: usize = THREADS - RESERVED;
    const WAITING: usize = 3;
    let gate = Arc::new(Gate::default());
    let reserve = Reserve::new(RESERVED)
        .for_routes(["GET /health", "GET /orders/{id}"])
        .for_requests(|req: &Request| req.headers().iter().any(|h| h.field.equiv("X-Probe")));
    let (handle, addr) = start(THREADS, reserve, {
        let gate = Arc::clone(&gate);
        move |req: &mut Request, ctx: &RequestContext| {
            if ctx.reserved() {
                return Response::from_string(format!("reserved {}", req.url())).boxed();
            }
            // Bounded: a test that goes wrong answers after 10 s instead of hanging.
            gate.wait(Duration::from_secs(10));
            Response::from_string("released").boxed()
        }
    });
    let ordinary: Vec<_> = (0..HELD + WAITING)
        .map(|i| {
            thread::spawn(move || {
                let began = Instant::now();
                (get(&agent(), addr, &format!("/checkout/{i}")), began.elapsed())
            })
        })
        .collect();
    let full = wait_until(Duration::from_secs(10), || handle.busy() == HELD && handle.waiting() == WAITING);
    assert!(full, "busy {} waiting {}: the ordinary threads did not fill", handle.busy(), handle.waiting());

    let agent = agent();
    let mut took = Vec::new();
    for i in 0..20 {
        for path in ["/health", "/orders/ord-1"] {
            let began = Instant::now();
            assert_eq!(get(&agent, addr, path), (200, format!("reserved {path}")), "#{i}");
            took.push(began.elapsed());
        }
        let began = Instant::now();
        let mut resp = agent.get(format!("http://{addr}/anything")).header("X-Probe", "1").call().unwrap();
        assert_eq!(resp.body_mut().read_to_string().unwrap(), "reserved /anything");
        took.push(began.elapsed());
    }
    // Still every ordinary thread held, and the same requests waiting: none
    // of them took a reserved thread while those were free between probes.
    // (The last probe's thread counts as busy until `respond` has returned,
    // which may be a moment after its answer was read: poll, bounded.)
    assert_eq!(handle.waiting(), WAITING);
    assert!(wait_until(Duration::from_secs(5), || handle.busy() == HELD), "busy {}", handle.busy());
    assert_eq!(handle.waiting(), WAITING);
    took.sort();
    eprintln!(
        "60 reserved requests while every ordinary thread was held: p50 {:?}, max {:?}",
        took[30], took[59]
    );
    // Real time on a shared machine: the bound is generous, the figure is printed.
    assert!(took[59] < Duration::from_secs(1), "a reserved request took {:?}", took[59]);

    gate.open();
    for client in ordinary {
        let ((status, body), took) = client.join().unwrap();
        assert_eq!((status, body.as_str()), (200, "released"));
        assert!(took < Duration::from_secs(9), "an ordinary request waited for the gate's bound: {took:?}");
    }
    assert!(wait_until(Duration::from_secs(5), || handle.busy() == 0));
    assert_eq!((handle.waiting(), handle.reserved_busy()), (0, 0));
    handle.shutdown();
}

/// A reserve that leaves no ordinary thread is refused before anything
/// starts, with the `ConfigError` inside the `io::Error`; a classifier that
/// panics classifies its request as ordinary and the pool goes on.
#[test]
fn a_reserve_too_large_is_refused_and_a_panicking_classifier_is_ordinary() {
    let config =
        ServerConfig::builder().reserve(Reserve::new(4).for_routes(["GET /health"])).build().unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let handler = |_: &mut Request, _: &RequestContext| Response::from_string("x").boxed();
    let err = serve_with(listener, 4, config, handler).expect_err("4 of 4 threads reserved");
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    let inner = err.get_ref().and_then(|e| e.downcast_ref::<ConfigError>()).expect("a ConfigError inside");
    assert_eq!((inner.field(), inner.value()), ("reserve.threads", "4 of 4 request threads"));

    let panicked = Arc::new(AtomicBool::new(false));
    let reserve = Reserve::new(1).for_requests({
        let panicked = Arc::clone(&panicked);
        move |req: &Request| {
            if req.url() == "/boom" {
                panicked.store(true, Ordering::SeqCst);
                panic!("classifier exploded");
            }
            req.url() == "/health"
        }
    });
    let (handle, addr) = start(2, reserve, |_: &mut Request, ctx: &RequestContext| {
        Response::from_string(if ctx.reserved() { "reserved" } else { "ordinary" }).boxed()
    });
    let agent = agent();
    assert_eq!(get(&agent, addr, "/boom"), (200, "ordinary".to_owned()));
    assert!(panicked.load(Ordering::SeqCst));
    assert_eq!(get(&agent, addr, "/health"), (200, "reserved".to_owned()));
    handle.shutdown();
}
