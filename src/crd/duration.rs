//! Kubernetes-style duration strings (`"1s"`, `"500ms"`, `"15m"`, `"1h30m"`).
//!
//! The same syntax as Go's `time.ParseDuration` (and so as CEL's `duration()`, which the CRD rules
//! use for bounds), minus signs and the `µs` spelling: one or more `<number><unit>` terms, where
//! the number may have a fraction and the unit is `ns`, `us`, `ms`, `s`, `m` or `h`.
//!
//! [`Duration`] keeps the text the user wrote, so a spec read and written back is unchanged, and
//! the parsed value, so the operator never parses twice. The schema carries [`PATTERN`], which
//! accepts what [`Duration::from_str`] accepts but for totals past 2^64 ns (~584 years); every
//! duration field also has a CEL bound, which such a total fails (`duration()` cannot even parse
//! it), so an object the API server stored always deserializes.

use std::{fmt, str::FromStr, time};

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer, de};

/// The schema pattern for a duration (ECMAScript and RE2 alike).
pub const PATTERN: &str = r"^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$";

/// Longest accepted duration text; keeps CEL cost estimates small.
pub const MAX_LENGTH: usize = 64;

const NANOS_PER_UNIT: [(&str, u128); 6] = [
    ("ns", 1),
    ("us", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60 * 1_000_000_000),
    ("h", 3_600 * 1_000_000_000),
];

/// Fraction digits beyond this many are ignored (nanosecond precision needs at most 13 for
/// hours); bounding them keeps the arithmetic in range.
const MAX_FRACTION_DIGITS: usize = 18;

/// A non-negative duration written in Go/Kubernetes syntax, such as `"1h30m"`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Duration {
    text: String,
    value: time::Duration,
}

/// Why a duration string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseDurationError {
    /// The text is empty.
    #[error("empty duration")]
    Empty,
    /// The text is longer than [`MAX_LENGTH`].
    #[error("duration longer than {MAX_LENGTH} characters")]
    TooLong,
    /// A term does not start with a digit.
    #[error("expected a number at byte {0} of {1:?}")]
    ExpectedNumber(usize, String),
    /// A term has no unit or an unknown one.
    #[error("missing or unknown unit at byte {0} of {1:?} (expected ns, us, ms, s, m or h)")]
    BadUnit(usize, String),
    /// The total does not fit in 2^64 nanoseconds (about 584 years).
    #[error("duration {0:?} is too large")]
    Overflow(String),
}

impl Duration {
    /// The longest duration that reads back: 2^64 - 1 ns (about 584 years).
    pub const MAX: time::Duration = time::Duration::from_nanos(u64::MAX);

    /// Build from a [`std::time::Duration`]; the text is the canonical form (see
    /// [`format_duration`]), e.g. 90 minutes becomes `"1h30m"`. A value past [`Duration::MAX`]
    /// is held at it, so that whatever the operator writes (sums of Slurm's numbers in a
    /// status) reads back: one status that failed to decode would fail every list of SlurmJobs.
    pub fn from_std(value: time::Duration) -> Self {
        let value = value.min(Self::MAX);
        Self {
            text: format_duration(value),
            value,
        }
    }

    /// Shorthand for [`Duration::from_std`] of whole seconds.
    pub fn from_secs(secs: u64) -> Self {
        Self::from_std(time::Duration::from_secs(secs))
    }

    /// Shorthand for [`Duration::from_std`] of milliseconds.
    pub fn from_millis(millis: u64) -> Self {
        Self::from_std(time::Duration::from_millis(millis))
    }

    /// The parsed value.
    pub fn as_std(&self) -> time::Duration {
        self.value
    }

    /// The text as written (or as formatted by [`Duration::from_std`]).
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl From<Duration> for time::Duration {
    fn from(d: Duration) -> Self {
        d.value
    }
}

impl From<time::Duration> for Duration {
    fn from(value: time::Duration) -> Self {
        Self::from_std(value)
    }
}

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl FromStr for Duration {
    type Err = ParseDurationError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_nanos(s).map(|nanos| Self {
            text: s.to_owned(),
            value: time::Duration::from_nanos(nanos),
        })
    }
}

/// Parse `s` to nanoseconds; see the module docs for the syntax.
fn parse_nanos(s: &str) -> Result<u64, ParseDurationError> {
    if s.is_empty() {
        return Err(ParseDurationError::Empty);
    }
    if s.len() > MAX_LENGTH {
        return Err(ParseDurationError::TooLong);
    }
    let overflow = || ParseDurationError::Overflow(s.to_owned());
    let bytes = s.as_bytes();
    let mut i = 0;
    let mut total: u128 = 0;
    while i < bytes.len() {
        let int_start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        if i == int_start {
            return Err(ParseDurationError::ExpectedNumber(i, s.to_owned()));
        }
        let int_digits = &s[int_start..i];
        let (mut frac, mut scale) = (0u128, 1u128);
        if i < bytes.len() && bytes[i] == b'.' {
            i += 1;
            let frac_start = i;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                if i - frac_start < MAX_FRACTION_DIGITS {
                    frac = frac * 10 + u128::from(bytes[i] - b'0');
                    scale *= 10;
                }
                i += 1;
            }
            if i == frac_start {
                return Err(ParseDurationError::ExpectedNumber(i, s.to_owned()));
            }
        }
        let unit_start = i;
        while i < bytes.len() && bytes[i].is_ascii_alphabetic() {
            i += 1;
        }
        let unit = &s[unit_start..i];
        let Some(&(_, per_unit)) = NANOS_PER_UNIT.iter().find(|(name, _)| *name == unit) else {
            return Err(ParseDurationError::BadUnit(unit_start, s.to_owned()));
        };
        let int: u128 = int_digits.parse().map_err(|_| overflow())?;
        let term = int
            .checked_mul(per_unit)
            .and_then(|t| t.checked_add(frac * per_unit / scale))
            .ok_or_else(overflow)?;
        total = total.checked_add(term).ok_or_else(overflow)?;
    }
    u64::try_from(total).map_err(|_| overflow())
}

/// Canonical text for a duration: hours, minutes and seconds as needed (`"1h30m"`, `"15m"`,
/// `"1.5s"`); under a second it uses the largest exact unit (`"500ms"`, `"250us"`, `"7ns"`).
pub fn format_duration(d: time::Duration) -> String {
    let secs = d.as_secs();
    let nanos = d.subsec_nanos();
    if secs == 0 {
        return match nanos {
            0 => "0s".to_owned(),
            n if n % 1_000_000 == 0 => format!("{}ms", n / 1_000_000),
            n if n % 1_000 == 0 => format!("{}us", n / 1_000),
            n => format!("{n}ns"),
        };
    }
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if nanos > 0 {
        let frac = format!("{nanos:09}");
        out.push_str(&format!("{s}.{}s", frac.trim_end_matches('0')));
    } else if s > 0 {
        out.push_str(&format!("{s}s"));
    }
    out
}

impl Serialize for Duration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(de::Error::custom)
    }
}

impl JsonSchema for Duration {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Duration".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        // Not `format: duration`: that would mean ISO 8601 ("PT15M").
        json_schema!({
            "type": "string",
            "pattern": PATTERN,
            "maxLength": MAX_LENGTH,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> time::Duration {
        s.parse::<Duration>().unwrap().as_std()
    }

    #[test]
    fn parses_go_style_durations() {
        let cases = [
            ("0s", time::Duration::ZERO),
            ("1s", time::Duration::from_secs(1)),
            ("500ms", time::Duration::from_millis(500)),
            ("15m", time::Duration::from_secs(900)),
            ("1h30m", time::Duration::from_secs(5400)),
            ("1.5s", time::Duration::from_millis(1500)),
            ("1.5h", time::Duration::from_secs(5400)),
            ("2h45m30.5s", time::Duration::from_millis(9_930_500)),
            ("100us", time::Duration::from_micros(100)),
            ("7ns", time::Duration::from_nanos(7)),
            ("1m1m", time::Duration::from_secs(120)),
            ("0.0000000001s", time::Duration::ZERO),
        ];
        for (text, want) in cases {
            assert_eq!(d(text), want, "{text}");
        }
    }

    #[test]
    fn rejects_what_the_pattern_rejects() {
        let matches = |text: &str| crate::crd::tests::cel::re2_matches(PATTERN, text).unwrap();
        let bad = [
            "", "1", "s", "-1s", "+1s", "1.s", ".5s", "1d", "1 s", "1S", "1µs", "1h ", "m1",
        ];
        for text in bad {
            assert!(
                text.parse::<Duration>().is_err(),
                "{text:?} should not parse"
            );
            assert!(!matches(text), "{text:?} should not match the pattern");
        }
        let good = [
            "0s",
            "1s",
            "500ms",
            "1h30m",
            "1.25m",
            "3us",
            "10ns",
            "1h1m1s1ms1us1ns",
        ];
        for text in good {
            assert!(text.parse::<Duration>().is_ok(), "{text:?} should parse");
            assert!(matches(text), "{text:?} should match the pattern");
        }
    }

    #[test]
    fn rejects_overflow_and_long_text() {
        assert!(matches!(
            "9999999999999999999h".parse::<Duration>(),
            Err(ParseDurationError::Overflow(_))
        ));
        assert_eq!(
            "1s".repeat(40).parse::<Duration>(),
            Err(ParseDurationError::TooLong)
        );
    }

    #[test]
    fn formats_canonically_and_round_trips() {
        let cases = [
            (time::Duration::ZERO, "0s"),
            (time::Duration::from_millis(100), "100ms"),
            (time::Duration::from_secs(1), "1s"),
            (time::Duration::from_secs(30), "30s"),
            (time::Duration::from_secs(900), "15m"),
            (time::Duration::from_secs(5400), "1h30m"),
            (time::Duration::from_secs(3600), "1h"),
            (time::Duration::from_millis(1500), "1.5s"),
            (time::Duration::from_micros(250), "250us"),
            (
                time::Duration::from_nanos(3_600_000_000_001),
                "1h0.000000001s",
            ),
        ];
        for (value, text) in cases {
            assert_eq!(format_duration(value), text);
            assert_eq!(d(text), value, "{text} round-trips");
        }
    }

    /// What the operator writes reads back, however large the value it was given (an array's
    /// summed CPU time past 584 years used to be written, then fail every list of SlurmJobs).
    #[test]
    fn every_value_written_reads_back() {
        for value in [
            Duration::MAX,
            Duration::MAX + time::Duration::from_nanos(1),
            time::Duration::from_millis(u64::MAX),
            time::Duration::MAX,
        ] {
            let written = serde_json::to_string(&Duration::from_std(value)).unwrap();
            let read: Duration = serde_json::from_str(&written).unwrap();
            assert_eq!(read.as_std(), value.min(Duration::MAX), "{written}");
        }
    }

    #[test]
    fn serde_keeps_the_users_text() {
        let parsed: Duration = serde_json::from_str("\"90m\"").unwrap();
        assert_eq!(parsed.as_std(), time::Duration::from_secs(5400));
        assert_eq!(serde_json::to_string(&parsed).unwrap(), "\"90m\"");
        assert!(serde_json::from_str::<Duration>("\"soon\"").is_err());
        assert!(serde_json::from_str::<Duration>("5").is_err());
    }
}
