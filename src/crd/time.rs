//! Kubernetes times (`meta/v1.Time`) and the `chrono` times the controllers compute with, both
//! in whole seconds: Slurm reports seconds, and the API server serialises `Time` to the second.

use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// The `chrono` time of a Kubernetes time, to the second (`None` out of `chrono`'s range).
pub fn to_utc(t: &Time) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(t.0.as_second(), 0)
}

/// The Kubernetes time of a `chrono` time, to the second (`None` out of `jiff`'s range).
pub fn from_utc(t: DateTime<Utc>) -> Option<Time> {
    Timestamp::from_second(t.timestamp()).ok().map(Time)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_convert_to_the_second_both_ways() {
        let t = DateTime::from_timestamp(1_700_000_123, 999_000_000).unwrap();
        let k = from_utc(t).unwrap();
        assert_eq!(k.0.as_second(), 1_700_000_123);
        assert_eq!(k.0.subsec_nanosecond(), 0, "sub-second part dropped");
        assert_eq!(to_utc(&k), DateTime::from_timestamp(1_700_000_123, 0));
        assert_eq!(
            from_utc(DateTime::<Utc>::MAX_UTC),
            None,
            "beyond jiff's range"
        );
    }
}
