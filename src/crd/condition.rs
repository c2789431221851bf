//! metav1-style status conditions shared by every CRD.
//!
//! Conditions are stored as a list keyed by `type` (`x-kubernetes-list-type: map`), one entry per
//! type. [`upsert`] keeps `lastTransitionTime` while the status stays the same, so the time says
//! when the condition last *changed*, and reports whether anything changed at all, so callers can
//! skip a status write that would change nothing.

pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use schemars::{Schema, SchemaGenerator};
use serde_json::{Value, json};

/// The object is usable: for a SlurmCluster, slurmrestd answered with valid credentials; for a
/// SlurmNodeSet, all desired nodes are ready; for a SlurmJob, its latest spec runs (or ran) in
/// Slurm and nothing went wrong (see `controller::slurmjob::status`).
pub const READY: &str = "Ready";
/// kstatus: the operator is still working towards the spec (present only while `True`).
pub const RECONCILING: &str = "Reconciling";
/// kstatus: the operator cannot make progress until something changes (present only while
/// `True`).
pub const STALLED: &str = "Stalled";
/// SlurmCluster: slurmrestd accepted the configured credentials.
pub const AUTHENTICATED: &str = "Authenticated";

/// The three condition statuses metav1 allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// `"True"`.
    True,
    /// `"False"`.
    False,
    /// `"Unknown"`.
    Unknown,
}

impl Status {
    /// The wire form.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::True => "True",
            Self::False => "False",
            Self::Unknown => "Unknown",
        }
    }
}

impl From<bool> for Status {
    fn from(b: bool) -> Self {
        if b { Self::True } else { Self::False }
    }
}

/// Now, to the second: the API stores times with second precision, and comparing a nanosecond
/// time with what was stored would always see a change.
pub fn now() -> Time {
    use k8s_openapi::jiff::Timestamp;
    Time(Timestamp::from_second(Timestamp::now().as_second()).unwrap_or(Timestamp::UNIX_EPOCH))
}

/// The longest condition message written, in characters. The schema allows 32768 (metav1):
/// a longer one would make the API server refuse the whole status write, again at every retry,
/// and hide the condition that says what is wrong (a message quoting a huge field value).
pub const MAX_MESSAGE: usize = 8192;

/// `message` as a condition stores it: cut to [`MAX_MESSAGE`] characters. What compares a
/// stored message with a fresh one compares this.
pub fn bounded_message(message: &str) -> String {
    crate::slurm::reason::bounded(message, MAX_MESSAGE)
}

/// A condition of `type_` observed at `now` for `observed_generation`.
///
/// `reason` should be a CamelCase word (metav1 requires `^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`);
/// `message` is free text for humans, cut to [`MAX_MESSAGE`] characters.
pub fn new(
    type_: &str,
    status: impl Into<Status>,
    reason: &str,
    message: impl Into<String>,
    observed_generation: Option<i64>,
    now: Time,
) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: status.into().as_str().to_owned(),
        reason: reason.to_owned(),
        message: bounded_message(&message.into()),
        observed_generation,
        last_transition_time: now,
    }
}

/// The condition of the given type, if present.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition of the given type is present with status `"True"`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    find(conditions, type_).is_some_and(|c| c.status == Status::True.as_str())
}

/// Insert `new`, or replace the condition of the same type.
///
/// When the status is unchanged the existing `lastTransitionTime` is kept. Returns `true` when the
/// list changed (ignoring the time of an unchanged status), i.e. when a status write is needed.
pub fn upsert(conditions: &mut Vec<Condition>, mut new: Condition) -> bool {
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        None => {
            conditions.push(new);
            true
        }
        Some(old) => {
            if old.status == new.status {
                new.last_transition_time = old.last_transition_time.clone();
            }
            if *old == new {
                return false;
            }
            *old = new;
            true
        }
    }
}

/// Remove the condition of the given type; returns whether there was one.
pub fn remove(conditions: &mut Vec<Condition>, type_: &str) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_ != type_);
    conditions.len() != before
}

/// metav1's pattern for a condition type (`Ready`, `example.com/Ready`).
pub const TYPE_PATTERN: &str = concat!(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?",
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
);
/// metav1's pattern for a condition reason (`CamelCase`).
pub const REASON_PATTERN: &str = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$";

/// Schema for a `conditions` field: the metav1 Condition list, keyed by `type` so that server-side
/// apply merges entries per type (`+listType=map`, `+listMapKey=type` in Go), with the field
/// validations metav1.Condition carries upstream (k8s-openapi's schema has only the types).
pub(crate) fn schema(generator: &mut SchemaGenerator) -> Schema {
    let mut schema = generator.subschema_for::<Vec<Condition>>();
    schema.insert("x-kubernetes-list-type".into(), "map".into());
    schema.insert("x-kubernetes-list-map-keys".into(), json!(["type"]));
    let validations = [
        ("type", json!({"maxLength": 316, "pattern": TYPE_PATTERN})),
        ("status", json!({"enum": ["True", "False", "Unknown"]})),
        (
            "reason",
            json!({"minLength": 1, "maxLength": 1024, "pattern": REASON_PATTERN}),
        ),
        ("message", json!({"maxLength": 32768})),
        ("observedGeneration", json!({"minimum": 0})),
    ];
    if let Some(props) = schema
        .pointer_mut("/items/properties")
        .and_then(Value::as_object_mut)
    {
        for (name, extra) in validations {
            let prop = props.get_mut(name).and_then(Value::as_object_mut);
            if let (Some(prop), Value::Object(extra)) = (prop, extra) {
                prop.extend(extra);
            }
        }
    }
    schema
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn at(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).unwrap())
    }

    /// A message quoting what a user wrote (a 40 000-character quantity, say) stays writable:
    /// the schema's limit is 32768 characters.
    #[test]
    fn a_message_is_cut_to_what_the_schema_takes() {
        let long = format!("memoryPerNode {:?} is not a quantity", "1".repeat(40_000));
        let message = new(READY, false, "InvalidSpec", long.clone(), Some(1), at(10)).message;
        assert_eq!(message.chars().count(), MAX_MESSAGE);
        let kept = message.strip_suffix('…').unwrap();
        assert!(long.starts_with(kept));
        let short = new(READY, true, "Submitted", "as job 7", Some(1), at(10)).message;
        assert_eq!(short, "as job 7");
    }

    #[test]
    fn upsert_inserts_then_keeps_transition_time_while_status_is_unchanged() {
        let mut conds = Vec::new();
        assert!(upsert(
            &mut conds,
            new(READY, false, "Connecting", "", Some(1), at(10))
        ));
        assert_eq!(conds.len(), 1);

        // Same status, same everything but time: nothing to write.
        assert!(!upsert(
            &mut conds,
            new(READY, false, "Connecting", "", Some(1), at(20))
        ));
        assert_eq!(conds[0].last_transition_time, at(10));

        // Same status, new message: written, time kept.
        assert!(upsert(
            &mut conds,
            new(READY, false, "Unreachable", "timeout", Some(2), at(30))
        ));
        assert_eq!(conds[0].last_transition_time, at(10));
        assert_eq!(conds[0].reason, "Unreachable");
        assert_eq!(conds[0].observed_generation, Some(2));

        // Status flips: time moves.
        assert!(upsert(
            &mut conds,
            new(READY, true, "Connected", "", Some(2), at(40))
        ));
        assert_eq!(conds[0].last_transition_time, at(40));
        assert!(is_true(&conds, READY));
        assert_eq!(conds.len(), 1);
    }

    #[test]
    fn our_condition_types_match_the_metav1_pattern() {
        let matches = |p: &str, t: &str| crate::crd::tests::cel::re2_matches(p, t).unwrap();
        for t in [READY, AUTHENTICATED, "example.com/Ready"] {
            assert!(matches(TYPE_PATTERN, t), "{t}");
        }
        assert!(!matches(TYPE_PATTERN, "not ok"));
        assert!(matches(REASON_PATTERN, "TokenAccepted"));
        assert!(!matches(REASON_PATTERN, "not ok"));
    }

    #[test]
    fn find_and_is_true_by_type() {
        let mut conds = Vec::new();
        upsert(
            &mut conds,
            new(READY, Status::Unknown, "Pending", "", None, at(1)),
        );
        upsert(
            &mut conds,
            new(AUTHENTICATED, true, "TokenAccepted", "", None, at(1)),
        );
        assert!(!is_true(&conds, READY));
        assert!(is_true(&conds, AUTHENTICATED));
        assert!(!is_true(&conds, "Missing"));
        assert_eq!(
            find(&conds, READY).map(|c| c.status.as_str()),
            Some("Unknown")
        );
        assert!(find(&conds, "Missing").is_none());
    }
}
