//! Goodput under healthy bursts: how many calls a small pool serves, and
//! refuses, when callers come together. A healthy 30 ms job behind 8
//! workers, a queue of 2 and `max_wait` 100 ms, callers with an 800 ms
//! deadline released together by a barrier, burst after burst.
//!
//! Not a criterion bench: the figure is a rate over a scenario, not the
//! cost of one operation. `scripts/admission_paired.sh` runs it at an
//! earlier commit and here, in alternating rounds.
//!
//!     cargo bench --bench admission [-- BURSTS]
//!
//! Prints one line per burst size: offered and served per second,
//! refusals, and the p50 and p99 of the answered calls.

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use watertight::{CallContext, Dependency, Error};

const LATENCY: Duration = Duration::from_millis(30);

fn provider(_: &CallContext) -> Result<(), std::io::Error> {
    thread::sleep(LATENCY);
    Ok(())
}

fn main() {
    let bursts: usize =
        std::env::args().skip(1).find(|a| !a.starts_with('-')).and_then(|a| a.parse().ok()).unwrap_or(20);
    println!("callers,bursts,offered_per_s,served_per_s,refused,refused_pct,p50_ms,p99_ms");
    for callers in [16, 24, 32, 40] {
        let dep = Dependency::builder("flights")
            .workers(8)
            .queue(2)
            .max_wait(Duration::from_millis(100))
            .timeout(Duration::from_millis(800))
            .build()
            .expect("a valid dependency");
        for _ in 0..16 {
            dep.call(provider).expect("a healthy call");
        }
        let (mut answered, mut refused) = (Vec::new(), 0usize);
        let began = Instant::now();
        for _ in 0..bursts {
            let barrier = Arc::new(Barrier::new(callers));
            let handles: Vec<_> = (0..callers)
                .map(|_| {
                    let (dep, barrier) = (dep.clone(), barrier.clone());
                    thread::spawn(move || {
                        barrier.wait();
                        let start = Instant::now();
                        let r = dep.with().deadline(start + Duration::from_millis(800)).call(provider);
                        (start.elapsed(), r)
                    })
                })
                .collect();
            for h in handles {
                match h.join().expect("a caller") {
                    (took, Ok(())) => answered.push(took),
                    (_, Err(Error::Rejected { .. })) => refused += 1,
                    (took, Err(e)) => panic!("a healthy call failed after {took:?}: {e:?}"),
                }
            }
        }
        let secs = began.elapsed().as_secs_f64();
        answered.sort_unstable();
        let q = |p: f64| {
            answered.get(((answered.len() as f64 * p) as usize).min(answered.len().saturating_sub(1)))
        };
        let ms = |d: Option<&Duration>| d.map_or(0.0, |d| d.as_secs_f64() * 1e3);
        let offered = callers * bursts;
        println!(
            "{callers},{bursts},{:.0},{:.0},{refused},{:.1},{:.1},{:.1}",
            offered as f64 / secs,
            answered.len() as f64 / secs,
            100.0 * refused as f64 / offered as f64,
            ms(q(0.5)),
            ms(q(0.99)),
        );
    }
}
