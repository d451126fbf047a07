//! Priority admission at 2x overload: who is served when not everyone can be.
//!
//! One dependency of 8 workers and a queue of 8, 2 places reserved for critical
//! calls; each call holds its worker for 10 ms, so the dependency serves at most
//! 800 calls a second. 32 caller threads offer 1,600 a second between them, open
//! loop (each calls every 20 ms, on a schedule, whatever became of its last call),
//! 20 % critical, 50 % normal and 30 % sheddable.
//!
//! Goals, every run: critical calls served at 99 % or more; sheddable calls refused
//! before any normal one (the first refusal of a normal call comes after the first
//! of a sheddable one, and in every second with a normal refusal sheddable calls
//! were served at a lower share than normal ones); goodput at least 0.9x the
//! capacity.
//!
//! `cargo bench --bench priority` (about 25 s: 3 runs of 6 s).

#[path = "common/report.rs"]
#[allow(dead_code)]
mod report;

use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use watertight::dependency::Priority;
use watertight::{CallContext, Dependency, Error, Rejection};

const WORKERS: usize = 8;
const SERVICE: Duration = Duration::from_millis(10);
const CALLERS: usize = 32;
const PERIOD: Duration = Duration::from_millis(20);
const RUN: Duration = Duration::from_secs(6);

/// The priority of a caller's `n`th call: 20 % critical, 50 % normal, 30 % sheddable.
fn priority_of(caller: usize, n: usize) -> Priority {
    match (caller * 7 + n * 3) % 10 {
        0 | 1 => Priority::Critical,
        2..=6 => Priority::Normal,
        _ => Priority::Sheddable,
    }
}

/// One call's record: its second, its priority, whether it was served, and
/// whether it was refused for its priority.
type Record = (u64, Priority, bool, bool);

fn run() -> bool {
    let dep = Dependency::builder("overloaded")
        .workers(WORKERS)
        .queue(8)
        .reserved_for_critical(2)
        .timeout(Duration::from_millis(200))
        .build()
        .expect("valid");
    let records: Mutex<Vec<Record>> = Mutex::new(Vec::new());
    let first_refusal: Mutex<[Option<Duration>; 3]> = Mutex::new([None; 3]);
    let start = Instant::now();
    thread::scope(|s| {
        for c in 0..CALLERS {
            let (dep, records, first_refusal) = (dep.clone(), &records, &first_refusal);
            s.spawn(move || {
                let offset = PERIOD * c as u32 / CALLERS as u32;
                let mut mine = Vec::new();
                for n in 0.. {
                    let at = start + offset + PERIOD * n as u32;
                    if at >= start + RUN {
                        break;
                    }
                    if let Some(wait) = at.checked_duration_since(Instant::now()) {
                        thread::sleep(wait);
                    }
                    let p = priority_of(c, n);
                    let answer = dep.with().priority(p).call(|_: &CallContext| {
                        thread::sleep(SERVICE);
                        Ok::<_, std::io::Error>(())
                    });
                    let second = at.duration_since(start).as_secs();
                    let shed = matches!(answer, Err(Error::Rejected { reason: Rejection::Shed, .. }));
                    if answer.is_err() {
                        let mut first = first_refusal.lock().unwrap();
                        first[p as usize].get_or_insert(at.duration_since(start));
                    }
                    mine.push((second, p, answer.is_ok(), shed));
                }
                records.lock().unwrap().extend(mine);
            });
        }
    });
    let records = records.into_inner().unwrap();
    let first = first_refusal.into_inner().unwrap();
    let share = |p: Priority, rs: &[&Record]| {
        let of: Vec<_> = rs.iter().filter(|r| r.1 == p).collect();
        of.iter().filter(|r| r.2).count() as f64 / of.len().max(1) as f64
    };
    let all: Vec<&Record> = records.iter().collect();
    let served = records.iter().filter(|r| r.2).count();
    let goodput = served as f64 / RUN.as_secs_f64() / (WORKERS as f64 / SERVICE.as_secs_f64());
    let critical = share(Priority::Critical, &all);
    let (normal, sheddable) = (share(Priority::Normal, &all), share(Priority::Sheddable, &all));
    // Every second in which a normal call was refused: sheddable served at a lower share.
    let mut seconds_ok = true;
    for second in 0..RUN.as_secs() {
        let rs: Vec<&Record> = records.iter().filter(|r| r.0 == second).collect();
        let normal_refused = rs.iter().any(|r| r.1 == Priority::Normal && !r.2);
        if normal_refused && share(Priority::Sheddable, &rs) >= share(Priority::Normal, &rs) {
            seconds_ok = false;
        }
    }
    let ms =
        |d: Option<Duration>| d.map_or("never".to_owned(), |d| format!("{:.0} ms", d.as_secs_f64() * 1e3));
    let order_ok = match (first[Priority::Sheddable as usize], first[Priority::Normal as usize]) {
        (Some(s), Some(n)) => s <= n,
        (_, None) => true,
        (None, Some(_)) => false,
    };
    let met = critical >= 0.99 && order_ok && seconds_ok && goodput >= 0.9;
    println!(
        "offered {} calls in {RUN:?}; served: critical {:.1} %, normal {:.1} %, sheddable {:.1} %; \
         first refusal: sheddable {}, normal {}, critical {}; per-second order held: {seconds_ok}; \
         goodput {:.0}/s = {goodput:.2}x capacity; shed {}: {}",
        records.len(),
        critical * 100.0,
        normal * 100.0,
        sheddable * 100.0,
        ms(first[Priority::Sheddable as usize]),
        ms(first[Priority::Normal as usize]),
        ms(first[Priority::Critical as usize]),
        served as f64 / RUN.as_secs_f64(),
        records.iter().filter(|r| r.3).count(),
        report::verdict(met)
    );
    met
}

fn main() {
    println!("== priority: 2x overload, 20 % critical / 50 % normal / 30 % sheddable, 3 runs");
    let mut all = true;
    for i in 1..=3 {
        print!("run {i}: ");
        all &= run();
    }
    println!("goals: {}", report::verdict(all));
}
