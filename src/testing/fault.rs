//! [`Fault`]: how a [`FakeProvider`](super::FakeProvider) answers, and its text form.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use super::HANG_CAP;
use crate::error::ConfigError;

/// How a provider answers a request. See the [module docs](super) for each mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Answers with the responder's status and body.
    Healthy,
    /// Answers like `Healthy`, after this long.
    Slow(Duration),
    /// Never answers.
    Hang,
    /// Answers with this status code.
    Error(u16),
    /// Refuses connections.
    Refuse,
    /// Resets the connection.
    Reset,
    /// Answers with bytes that are not HTTP.
    Garbage,
    /// Answers like `Healthy`, one byte per this period.
    Trickle(Duration),
    /// Closes the connection without an answer.
    Close,
    /// Answers a head and part of the body, then resets the connection.
    Cut,
    /// Answers like `Healthy`, serving at most `capacity` requests at once, each
    /// for `service`; the others wait their turn. Latency grows with the load, as
    /// in a real brownout: 16 requests at once on a capacity of 4 at 125 ms take
    /// about 500 ms, 4 at once about 125 ms.
    Saturated {
        /// Requests served at once; at least 1.
        capacity: usize,
        /// How long serving one takes.
        service: Duration,
    },
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Healthy => f.write_str("healthy"),
            Fault::Slow(d) => write!(f, "slow:{}", d.as_millis()),
            Fault::Hang => f.write_str("hang"),
            Fault::Error(code) => write!(f, "error:{code}"),
            Fault::Refuse => f.write_str("refuse"),
            Fault::Reset => f.write_str("reset"),
            Fault::Garbage => f.write_str("garbage"),
            Fault::Trickle(d) => write!(f, "trickle:{}", d.as_millis()),
            Fault::Close => f.write_str("close"),
            Fault::Cut => f.write_str("cut"),
            Fault::Saturated { capacity, service } => {
                write!(f, "saturated:{capacity}:{}", service.as_millis())
            }
        }
    }
}

impl FromStr for Fault {
    type Err = ConfigError;

    /// Parses the forms `Display` writes; case and surrounding blanks do not
    /// matter. A text that names no fault is a [`ConfigError`] of the field
    /// `fault` that lists the forms.
    fn from_str(input: &str) -> Result<Fault, ConfigError> {
        let text = input.trim().to_ascii_lowercase();
        let (kind, arg) = match text.split_once(':') {
            Some((kind, arg)) => (kind, Some(arg.trim())),
            None => (text.as_str(), None),
        };
        // Capped at the hang cap: a longer fault means the same, and an absurd one
        // must not overflow an `Instant` later.
        let millis = || arg?.parse().ok().map(|ms| Duration::from_millis(ms).min(HANG_CAP));
        let fault = match (kind, arg) {
            ("healthy", None) => Some(Fault::Healthy),
            ("slow", Some(_)) => millis().map(Fault::Slow),
            ("hang", None) => Some(Fault::Hang),
            ("error", Some(code)) => code.parse().ok().filter(|c| (100..=599).contains(c)).map(Fault::Error),
            ("refuse", None) => Some(Fault::Refuse),
            ("reset", None) => Some(Fault::Reset),
            ("garbage", None) => Some(Fault::Garbage),
            ("trickle", Some(_)) => millis().map(Fault::Trickle),
            ("close", None) => Some(Fault::Close),
            ("cut", None) => Some(Fault::Cut),
            ("saturated", Some(arg)) => saturated(arg),
            _ => None,
        };
        let forms = "healthy, slow:<ms>, hang, error:<status 100-599>, refuse, reset, garbage, trickle:<ms>, \
                     close, cut or saturated:<capacity 1-65536>:<ms>";
        fault.ok_or_else(|| ConfigError::new("fault", forms, format_args!("{input:?}")))
    }
}

/// `<capacity>:<ms>`, a capacity of 1 to 65536 and a service time capped like
/// every other duration.
fn saturated(arg: &str) -> Option<Fault> {
    let (capacity, ms) = arg.split_once(':')?;
    let capacity: usize = capacity.trim().parse().ok().filter(|c| (1..=65_536).contains(c))?;
    let ms: u64 = ms.trim().parse().ok()?;
    Some(Fault::Saturated { capacity, service: Duration::from_millis(ms).min(HANG_CAP) })
}
