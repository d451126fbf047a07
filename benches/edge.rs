//! What the guard in front of tiny_http costs: `/checkout` throughput with the
//! guard ([`watertight::server::serve`]) against tiny_http reading from the
//! clients itself ([`watertight::server::serve_unguarded`]).
//!
//! Both servers run the same handler on 16 request threads: drain the small
//! JSON body, ask a healthy fake fraud provider on loopback through a
//! `Dependency` (10 workers, queue 16, 1 s deadline), answer `200`. 16
//! clients, each on one kept-alive connection, split batches of requests.
//!
//! Group `edge` has one id per server. After criterion, a paired comparison:
//! both servers up at once and measured in turn for 8 rounds of 1,000 requests
//! each (after one unrecorded round), so that other work on a small machine
//! weighs on both alike; the per-round ratios guarded / unguarded and their
//! median close the output.
//!
//! `cargo bench --features testing --bench edge`

mod common;

use std::io::{self, Read};
use std::net::TcpListener;
use std::time::Duration;

use criterion::{Criterion, Throughput};
use tiny_http::{Header, Request, Response, ResponseBox};

use common::gang::Gang;
use common::{ORDER_BODY, PAIRED_ROUNDS as ROUNDS, round_order};
use watertight::http::WithDeadline;
use watertight::server::{self, RequestContext, ServerHandle};
use watertight::testing::{FakeProvider, Fault};
use watertight::{Dependency, breaker::BreakerConfig};

const REQUEST_THREADS: usize = 16;
const CONNECTIONS: usize = 16;
const ROUND_REQUESTS: u64 = 1_000;

fn handler(
    fraud: Dependency,
    verify_url: String,
) -> impl Fn(&mut Request, &RequestContext) -> ResponseBox + Send + Sync + 'static {
    let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
    move |request: &mut Request, _: &RequestContext| {
        let _ = io::copy(&mut request.as_reader().take(64 * 1024), &mut io::sink());
        let (agent, url) = (agent.clone(), verify_url.clone());
        let approved = fraud
            .call(move |ctx| {
                agent.post(&url).with_deadline(ctx).send(ORDER_BODY).map(|r| r.status().as_u16())
            })
            .is_ok_and(|status| status == 200);
        let (status, body) =
            if approved { (200, r#"{"status":"approved"}"#) } else { (202, r#"{"status":"manual_review"}"#) };
        Response::from_string(body)
            .with_status_code(status)
            .with_header(Header::from_bytes("Content-Type", "application/json").expect("a valid header"))
            .boxed()
    }
}

struct Server {
    handle: ServerHandle,
    fraud: Dependency,
    url: String,
}

fn start(guarded: bool, provider: &FakeProvider) -> Server {
    let name = if guarded { "fraud-guarded" } else { "fraud-unguarded" };
    let fraud = Dependency::builder(name)
        .workers(10)
        .queue(CONNECTIONS)
        .timeout(Duration::from_secs(1))
        .breaker(BreakerConfig::count_based(100).minimum_calls(100))
        .build()
        .expect("a valid dependency");
    let h = handler(fraud.clone(), format!("{}/verify", provider.url()));
    let handle = if guarded {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind on loopback");
        server::serve(listener, REQUEST_THREADS, h)
    } else {
        let server = tiny_http::Server::http("127.0.0.1:0").expect("bind on loopback");
        server::serve_unguarded(server, REQUEST_THREADS, server::ServerConfig::default(), h)
    }
    .expect("start the server");
    let url = format!("http://{}/checkout", handle.addr().to_ip().expect("a TCP address"));
    Server { handle, fraud, url }
}

fn main() {
    let provider =
        FakeProvider::start("fraud", Fault::Healthy, |_| (200, r#"{"decision":"approve"}"#.to_owned()))
            .expect("bind the fraud provider");
    let servers = [("unguarded", start(false, &provider)), ("guarded", start(true, &provider))];
    let gangs: Vec<Gang> =
        servers.iter().map(|(_, s)| Gang::start(&s.url, CONNECTIONS, Duration::from_secs(5))).collect();

    let mut c = Criterion::default().configure_from_args();
    let mut group = c.benchmark_group("edge");
    group.throughput(Throughput::Elements(1)).sample_size(20);
    group.warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(4));
    for ((id, _), gang) in servers.iter().zip(&gangs) {
        group.bench_function(*id, |b| b.iter_custom(|iters| gang.run(iters).0));
    }
    group.finish();

    // Criterion's --test and --list passes measure nothing; neither does this.
    let args: Vec<String> = std::env::args().collect();
    if !args.iter().any(|a| a == "--bench") || args.iter().any(|a| a == "--test" || a == "--list") {
        finish(servers, gangs);
        return;
    }
    for gang in &gangs {
        gang.run(ROUND_REQUESTS);
    }
    let mut ratios = Vec::new();
    println!(
        "== edge: /checkout, healthy fraud, {CONNECTIONS} kept-alive connections, {ROUND_REQUESTS} requests a round"
    );
    for round in 0..ROUNDS {
        let mut rps = [0.0; 2];
        let mut not_ok = [0; 2];
        for i in round_order(round) {
            let (took, bad) = gangs[i].run(ROUND_REQUESTS);
            rps[i] = ROUND_REQUESTS as f64 / took.as_secs_f64();
            not_ok[i] = bad;
        }
        let ratio = rps[1] / rps[0];
        ratios.push(ratio);
        println!(
            "round {round}: unguarded {:>6.0} req/s, guarded {:>6.0} req/s, ratio {ratio:.3} (not 200: {} / {})",
            rps[0], rps[1], not_ok[0], not_ok[1]
        );
    }
    ratios.sort_by(f64::total_cmp);
    let median = (ratios[ROUNDS / 2 - 1] + ratios[ROUNDS / 2]) / 2.0;
    println!(
        "edge: guarded / unguarded throughput, median of {ROUNDS} rounds: {median:.3} (min {:.3}, max {:.3})",
        ratios[0],
        ratios[ROUNDS - 1]
    );
    finish(servers, gangs);
}

fn finish(servers: [(&str, Server); 2], gangs: Vec<Gang>) {
    for gang in gangs {
        gang.stop();
    }
    for (_, server) in servers {
        server.handle.shutdown();
        server.fraud.shutdown(Duration::from_secs(1));
    }
}
