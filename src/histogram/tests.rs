//! The histogram's tests: buckets, quantiles, the recent window, racing writers.

use super::*;
use std::sync::{Arc, Barrier};

#[test]
fn bounds_run_from_100_us_to_30_s_in_steps_of_at_most_19_percent() {
    let bounds: Vec<Duration> = LatencyHistogram::bounds().collect();
    assert_eq!(bounds.len(), BOUNDS);
    assert_eq!(bounds[0], Duration::from_micros(100));
    assert_eq!(bounds[BOUNDS - 1], Duration::from_secs(30));
    for pair in bounds.windows(2) {
        let ratio = pair[1].as_secs_f64() / pair[0].as_secs_f64();
        assert!(ratio > 1.0 && ratio < 1.19, "{pair:?}: {ratio}");
    }
    assert_eq!(bounds[4], Duration::from_micros(200), "every fourth bound doubles");
    assert_eq!(bounds[40], Duration::from_micros(100 << 10));
}

/// A sample lands in the bucket whose bound it does not exceed (a bound is
/// inclusive, as Prometheus' `le`), and past 30 s in `+Inf`.
#[test]
fn the_octave_search_agrees_with_a_binary_search_of_the_bounds() {
    let reference = |ns: u64| BOUND_NS.partition_point(|&bound| bound < ns);
    assert_eq!((bucket_of(0), bucket_of(u64::MAX)), (0, BOUNDS));
    for &bound in &BOUND_NS {
        for ns in bound.saturating_sub(2)..=bound.saturating_add(2) {
            assert_eq!(bucket_of(ns), reference(ns), "{ns} ns");
        }
    }
    // And a spread of values in between, from 1 ns to past 30 s.
    let mut ns = 1u64;
    while ns < 40_000_000_000 {
        assert_eq!(bucket_of(ns), reference(ns), "{ns} ns");
        ns = ns + ns / 997 + 1;
    }
}

#[test]
fn quantiles_are_within_ten_percent() {
    let h = LatencyHistogram::new(Duration::from_secs(60));
    for ms in 1..=1000 {
        h.record(Duration::from_millis(ms));
    }
    let s = h.snapshot();
    assert_eq!(s.count(), 1000);
    assert_eq!(s.sum(), Duration::from_millis(500_500));
    assert_eq!(s.mean(), Some(Duration::from_micros(500_500)));
    for (q, want) in [(0.5, 500.0), (0.9, 900.0), (0.99, 990.0), (0.01, 10.0)] {
        let got = s.quantile(q).unwrap().as_secs_f64() * 1000.0;
        assert!((got - want).abs() / want < 0.10, "q {q}: {got} ms, want about {want} ms");
    }
    assert!(s.quantile(0.0).unwrap() <= Duration::from_millis(1), "the smallest sample's bucket");
    assert!(s.quantile(1.0).unwrap() >= Duration::from_millis(1000));
}

#[test]
fn bad_quantiles_and_empty_histograms_give_none() {
    let h = LatencyHistogram::new(Duration::from_secs(1));
    assert_eq!(h.snapshot().quantile(0.5), None);
    assert_eq!(h.snapshot().mean(), None);
    h.record(Duration::from_millis(5));
    for q in [-0.1, 1.01, f64::NAN, f64::INFINITY] {
        assert_eq!(h.snapshot().quantile(q), None, "q {q}");
    }
    assert!(h.snapshot().quantile(0.5).is_some());
}

#[test]
fn over_30_s_is_counted_in_inf_and_reported_as_30_s() {
    let h = LatencyHistogram::new(Duration::from_secs(1));
    h.record(Duration::from_secs(3600));
    let s = h.snapshot();
    assert_eq!(s.quantile(0.5), Some(Duration::from_secs(30)));
    let cumulative = s.cumulative(4);
    assert_eq!(cumulative.last(), Some(&(None, 1)));
    assert_eq!(cumulative[cumulative.len() - 2], (Some(Duration::from_secs(30)), 0));
}

#[test]
fn cumulative_buckets_are_exact_at_every_kept_bound() {
    let h = LatencyHistogram::new(Duration::from_secs(1));
    for us in [50, 100, 150, 250, 1_000, 90_000, 40_000_000] {
        h.record(Duration::from_micros(us));
    }
    let coarse = h.snapshot().cumulative(4);
    assert_eq!(coarse.len(), 19 + 1 + 1, "19 doublings, 30 s, +Inf");
    let at = |d: Duration| coarse.iter().find(|(b, _)| *b == Some(d)).map(|(_, n)| *n);
    assert_eq!(at(Duration::from_micros(100)), Some(2));
    assert_eq!(at(Duration::from_micros(200)), Some(3));
    assert_eq!(at(Duration::from_micros(400)), Some(4));
    assert_eq!(at(Duration::from_micros(1_600)), Some(5));
    assert_eq!(at(Duration::from_secs(30)), Some(6));
    assert_eq!(coarse.last(), Some(&(None, 7)));
    let fine = h.snapshot().cumulative(1);
    assert_eq!(fine.len(), BOUNDS + 1);
    assert!(fine.windows(2).all(|w| w[0].1 <= w[1].1), "cumulative never decreases");
}

#[test]
fn the_recent_window_forgets_what_is_two_windows_old() {
    let t0 = Instant::now();
    let w = Duration::from_secs(10);
    let h = LatencyHistogram::starting_at(w, t0);
    let at = |s: u64| t0 + Duration::from_secs(s);
    h.record_at(Duration::from_millis(1), at(1));
    h.record_at(Duration::from_millis(1), at(9));
    assert_eq!(h.recent_at(at(9)).count(), 2);
    // Epoch 1: epoch 0 is the last complete one, still recent.
    h.record_at(Duration::from_millis(500), at(12));
    assert_eq!(h.recent_at(at(12)).count(), 3);
    // Epoch 2 (nothing written yet): epoch 1 is recent, epoch 0 is not.
    let r = h.recent_at(at(25));
    assert_eq!(r.count(), 1);
    assert!(r.quantile(0.5).unwrap() > Duration::from_millis(400));
    // Epoch 2 written: the same.
    h.record_at(Duration::from_millis(20), at(26));
    assert_eq!(h.recent_at(at(26)).count(), 2);
    // Epoch 3: only epoch 2 is left; epoch 0's mark was overwritten on the way.
    h.record_at(Duration::from_millis(30), at(31));
    assert_eq!(h.recent_at(at(31)).count(), 2);
    // A reader whose clock is behind the last writer's reads as of that epoch.
    assert_eq!(h.recent_at(at(29)).count(), 2);
    // Long silence: nothing is recent, everything is still in the total.
    assert_eq!(h.recent_at(at(100)).count(), 0);
    assert_eq!(h.snapshot().count(), 5);
    // Writing after a silence starts clean, whichever slots the marks take
    // (epoch 3 -> 5 marks 4 and 5; then 5 -> 9, and so on).
    for (s, epoch) in [(55, 5), (95, 9), (130, 13), (165, 16)] {
        h.record_at(Duration::from_millis(7), at(s));
        assert_eq!(h.recent_at(at(s)).count(), 1, "epoch {epoch}");
    }
    assert_eq!(h.snapshot().count(), 9);
}

/// Four threads walk 500 epochs of 1 ms together, as threads that read the
/// clock just before recording do; inside an epoch they race each other and
/// its rotation.
#[test]
fn writers_racing_through_rotations_lose_no_sample() {
    const THREADS: u64 = 4;
    const EPOCHS: u64 = 500;
    const PER_EPOCH: u64 = 100; // a thread's samples in each 1 ms epoch, 10 µs apart
    let t0 = Instant::now();
    let h = Arc::new(LatencyHistogram::starting_at(Duration::from_millis(1), t0));
    let step = Arc::new(Barrier::new(THREADS as usize));
    let workers: Vec<_> = (0..THREADS)
        .map(|_| {
            let (h, step) = (Arc::clone(&h), Arc::clone(&step));
            std::thread::spawn(move || {
                for e in 0..EPOCHS {
                    step.wait();
                    for i in 0..PER_EPOCH {
                        let (d, at) =
                            (Duration::from_micros(200), t0 + Duration::from_micros(e * 1_000 + i * 10));
                        h.record_at(d, at);
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let total = h.snapshot();
    assert_eq!(total.count(), THREADS * EPOCHS * PER_EPOCH);
    assert_eq!(total.sum(), Duration::from_micros(200 * THREADS * EPOCHS * PER_EPOCH));
    // The last epoch and the one before: 200 samples a thread, less those
    // recorded while the epoch before was being marked (counted before it).
    let last = t0 + Duration::from_micros(EPOCHS * 1_000 - 1);
    let recent = h.recent_at(last).count();
    let window = 2 * PER_EPOCH * THREADS;
    assert!(recent <= window && recent >= window / 2, "recent {recent} of {window}");
    assert!(h.recent_at(last + Duration::from_millis(1)).count() <= recent, "a later reader sees less");
}
