//! The shortest useful program: one ureq call, bounded by the call's deadline,
//! classified, and protected by a `Dependency` (its own workers, breaker and deadline).
//!
//! `cargo run --features testing --example wrap_ureq [URL | FAULT]`: a URL is called as it is; otherwise a
//! fake provider starts on loopback with FAULT (default `hang`; also `healthy`,
//! `error:503`, `refuse`, ...; see `watertight::testing`).
//!
//! std and watertight only (`features = ["testing"]` for the fake provider):
//! the client is the ureq watertight re-exports, `watertight::ureq`.
use std::time::{Duration, Instant};

use watertight::http::WithDeadline;
use watertight::testing::FakeProvider;
use watertight::{Dependency, Error, breaker::BreakerConfig, ureq};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let arg = std::env::args().nth(1).unwrap_or_else(|| "hang".to_owned());
    let local = match arg.parse() {
        Ok(fault) => Some(FakeProvider::start("demo", fault, |_| (200, "approved".into()))?),
        Err(_) => None,
    };
    let url = local.as_ref().map_or(arg, |p| p.url());
    let fraud = Dependency::builder("fraud")
        .workers(2)
        .timeout(Duration::from_millis(300))
        .breaker(BreakerConfig::count_based(4).minimum_calls(4).open_for(Duration::from_secs(30)))
        .build()?;
    let agent = ureq::Agent::new_with_defaults();

    for i in 1..=6 {
        let (agent, url, began) = (agent.clone(), url.clone(), Instant::now());
        let result =
            fraud.call(move |ctx| agent.get(&url).with_deadline(ctx).call()?.body_mut().read_to_string());
        match result {
            Ok(body) => println!("call {i}: {body:?} in {:.0?}", began.elapsed()),
            Err(Error::Failed(cause)) => println!("call {i}: failed: {cause} in {:.0?}", began.elapsed()),
            Err(other) => println!("call {i}: {other} in {:.0?}", began.elapsed()),
        }
    }
    println!("breaker: {}", fraud.breaker().state().as_str());
    Ok(())
}
