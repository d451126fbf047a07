//! What recording one sample in a `LatencyHistogram` costs, single-threaded and
//! with four threads recording into the same histogram through `record_at`
//! (two relaxed atomic adds on shared counts).
//!
//! `cargo run --release --example histogram_cost`
use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use watertight::histogram::LatencyHistogram;

const N: u32 = 5_000_000;

fn per_sample(threads: usize) -> Duration {
    let h = LatencyHistogram::new(Duration::from_secs(30));
    let start = Barrier::new(threads);
    let per: Vec<Duration> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let now = Instant::now();
                    start.wait();
                    let began = Instant::now();
                    for i in 0..N {
                        let d = black_box(Duration::from_micros(u64::from(i % 20_000)));
                        h.record_at(d, now);
                    }
                    began.elapsed() / N
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    assert_eq!(h.snapshot().count(), threads as u64 * u64::from(N));
    per.iter().sum::<Duration>() / threads as u32
}

fn main() {
    for threads in [1, 4] {
        println!("{threads} thread(s): record_at {:?}/sample", per_sample(threads));
    }
}
