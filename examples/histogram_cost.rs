//! What recording one sample in a `LatencyHistogram` costs, single-threaded and
//! with four threads recording into the same histogram: through `record_at`
//! (any thread, locked adds) and through each thread's own `Recorder`.
//!
//! `cargo run --release --example histogram_cost`
use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use watertight::histogram::LatencyHistogram;

const N: u32 = 5_000_000;

fn per_sample(threads: usize, own: bool) -> Duration {
    let h = LatencyHistogram::new(Duration::from_secs(30));
    let start = Barrier::new(threads);
    let per: Vec<Duration> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let now = Instant::now();
                    let mut mine = h.recorder();
                    start.wait();
                    let began = Instant::now();
                    for i in 0..N {
                        let d = black_box(Duration::from_micros(u64::from(i % 20_000)));
                        if own { mine.record_at(d, now) } else { h.record_at(d, now) }
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
        println!(
            "{threads} thread(s): record_at {:?}/sample, own recorder {:?}/sample",
            per_sample(threads, false),
            per_sample(threads, true)
        );
    }
}
