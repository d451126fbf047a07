//! Durations as human strings (`"3s"`, `"250ms"`, `"1m 30s"`), read and
//! written with `humantime`, for `#[serde(with = "crate::duration")]` on every
//! configuration type.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Visitor};
use serde::{Deserializer, Serializer};

/// What a duration must look like, in every error about one.
const EXPECTED: &str = "a duration such as \"3s\", \"250ms\" or \"1m 30s\"";

/// Writes `d` as `humantime` formats it: `"3s"`, `"250ms"`, `"1s 500ms"`.
pub(crate) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&humantime::format_duration(*d))
}

/// Reads a duration from a string; a number (of seconds or anything else) is
/// refused, because a bare `3` in a file means nothing certain.
pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    d.deserialize_str(DurationVisitor)
}

struct DurationVisitor;

impl Visitor<'_> for DurationVisitor {
    type Value = Duration;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(EXPECTED)
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Duration, E> {
        parse(text).map_err(E::custom)
    }
}

/// Parses one duration; the error says what was wrong and what is expected.
pub(crate) fn parse(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim())
        .map_err(|e| format!("invalid duration {text:?} ({e}): expected {EXPECTED}"))
}

/// The same for an optional duration: absent (or `null` in JSON) is `None`.
pub(crate) mod option {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.collect_str(&humantime::format_duration(*d)),
            None => s.serialize_none(),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        d.deserialize_option(OptionVisitor)
    }

    struct OptionVisitor;

    impl<'de> Visitor<'de> for OptionVisitor {
        type Value = Option<Duration>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "{EXPECTED}, or nothing")
        }

        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            super::deserialize(d).map(Some)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_forms_parse_and_print_back() {
        for (text, d) in [
            ("3s", Duration::from_secs(3)),
            ("250ms", Duration::from_millis(250)),
            ("1m 30s", Duration::from_secs(90)),
            ("0s", Duration::ZERO),
            (" 15s ", Duration::from_secs(15)),
        ] {
            assert_eq!(parse(text), Ok(d), "{text:?}");
            assert_eq!(parse(&humantime::format_duration(d).to_string()), Ok(d));
        }
        assert_eq!(humantime::format_duration(Duration::from_millis(250)).to_string(), "250ms");
    }

    #[test]
    fn bad_forms_say_what_is_expected() {
        for text in ["3", "three seconds", "-1s", "", "3 parsecs"] {
            let err = parse(text).unwrap_err();
            assert!(err.contains("expected a duration such as \"3s\""), "{text:?}: {err}");
        }
    }
}
