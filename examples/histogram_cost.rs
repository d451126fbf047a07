//! What recording one sample in a `LatencyHistogram` costs, single-threaded and
//! with four threads recording into the same histogram.
//!
//! `cargo run --release --example histogram_cost`
use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use watertight::histogram::LatencyHistogram;

const N: u32 = 5_000_000;

fn per_call(threads: usize, with_clock: bool) -> Duration {
    let h = Arc::new(LatencyHistogram::new(Duration::from_secs(30)));
    let start = Arc::new(Barrier::new(threads + 1));
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let (h, start) = (Arc::clone(&h), Arc::clone(&start));
            std::thread::spawn(move || {
                let now = Instant::now();
                start.wait();
                let began = Instant::now();
                for i in 0..N {
                    let d = Duration::from_micros(u64::from(i % 20_000));
                    if with_clock { h.record(black_box(d)) } else { h.record_at(black_box(d), now) }
                }
                began.elapsed() / N
            })
        })
        .collect();
    start.wait();
    let per: Vec<Duration> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    per.iter().sum::<Duration>() / threads as u32
}

fn main() {
    for threads in [1, 4] {
        println!(
            "{threads} thread(s): record_at {:?}/sample, record (reads the clock) {:?}/sample",
            per_call(threads, false),
            per_call(threads, true)
        );
    }
}
