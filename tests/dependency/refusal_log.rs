//! Refused calls are logged in aggregate: at most one line a second per
//! dependency and reason, with the count since the last line.

use crate::support::rejection_lines;

use std::time::{Duration, Instant};

use watertight::breaker::State;
use watertight::{CallContext, Dependency, Error, Rejection};

#[test]
fn a_thousand_refusals_in_well_under_a_second_are_a_line_or_two() {
    let lines = rejection_lines();
    let dep = Dependency::builder("refused-in-bulk").build().unwrap();
    dep.breaker().transition_to(State::ForcedOpen);
    let started = Instant::now();
    for _ in 0..1000 {
        let answer = dep.call(|_: &CallContext| Ok::<_, std::io::Error>(()));
        assert!(matches!(answer, Err(Error::Rejected { reason: Rejection::NotPermitted, .. })), "{answer:?}");
    }
    let took = started.elapsed();
    assert_eq!(dep.snapshot().calls.not_permitted, 1000, "every refusal is still counted");
    let ours: Vec<String> = {
        let all = lines.lock().unwrap();
        all.iter().filter(|l| l.starts_with("dependency refused-in-bulk:")).cloned().collect()
    };
    // One line at the first refusal, and one more for each second the loop lasted (none here).
    let seconds = usize::try_from(took.as_secs()).unwrap();
    assert!(!ours.is_empty() && ours.len() <= 1 + seconds, "{took:?}: {ours:?}");
    assert!(took < Duration::from_secs(2), "1,000 refusals take milliseconds: {took:?}");
    assert!(ours[0].contains("call rejected"), "{ours:?}");
}
