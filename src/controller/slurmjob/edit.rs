//! Edits of a SlurmJob whose Slurm job has not ended: which Slurm applies to the job in place
//! (`scontrol update job`: time limit, partition, account, QoS, nice, hold) and what to send.
//! Pure; `act` reads the job's record and performs the update as the job's own Slurm user.
//!
//! Whether an edit may be applied in place is decided on the whole spec: its hash without the
//! in-place fields ([`spec_hash`]) must equal the one recorded when the job was submitted
//! (`status.submittedSpecHash`). A changed script, size or anything else runs again once the job
//! has ended, as before; a job submitted before the hash existed (an older operator) is never
//! changed in place.

use std::fmt::Write as _;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::crd::slurmjob::SlurmJobSpec;
use crate::slurm::types::{Job, JobBaseState, JobUpdate};

/// The spec fields Slurm changes on a submitted job, as they are named in messages.
pub const IN_PLACE: &str = "timeLimit, partition, account, qos, nice and suspend";

/// A hash of `spec` without the fields a submitted job changes in place: two specs that differ
/// only in those have the same. Stable across operator versions for the same spec (sorted keys,
/// SHA-256), hex, 16 characters.
pub fn spec_hash(spec: &SlurmJobSpec) -> String {
    let mut rest = spec.clone();
    rest.time_limit = None;
    rest.partition = None;
    rest.account = None;
    rest.qos = None;
    rest.nice = None;
    rest.suspend = None;
    let value = serde_json::to_value(&rest).unwrap_or(Value::Null);
    let mut text = String::new();
    canonical(&value, &mut text);
    let digest = Sha256::digest(text.as_bytes());
    digest.iter().take(8).fold(String::new(), |mut out, byte| {
        let _ = write!(out, "{byte:02x}");
        out
    })
}

/// `value` as JSON with every object's keys sorted, whatever order the map keeps them in.
fn canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                canonical(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// Why a job without `status.submittedSpecHash` is never changed in place.
pub const NO_HASH: &str = "the job was submitted by an operator version that did not record \
                           which fields it may change in place (or adopted without reading its \
                           spec)";

/// What an edit of a job that has not ended does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EditPlan {
    /// It changes what only a new run can change (or the job predates the hash): the job runs
    /// on as submitted. `why` completes "generation N was not applied: ...".
    Ignore { why: String },
    /// Send `update` as the job's own user; `not_applied` names the in-place fields that are
    /// not sent, and why (a started job keeps its partition, for one).
    Update {
        update: JobUpdate,
        not_applied: Vec<(&'static str, &'static str)>,
    },
}

/// Whether a job in partitions `current` (as slurmctld lists them) has the partitions `asked`
/// (a comma-separated list lets Slurm pick): the same set, in slurmctld's order or not; a
/// started job lists only the one it runs in, which must be one asked.
fn same_partitions(asked: &str, current: &str, pending: bool) -> bool {
    let asked: std::collections::BTreeSet<&str> = asked.split(',').collect();
    let listed: std::collections::BTreeSet<&str> = current.split(',').collect();
    asked == listed || (!pending && asked.contains(current))
}

/// Why a field of a started job is not changed.
const STARTED: &str = "the job has started: it changes only while the job waits";

/// The plan for an edit to `spec` (whole, with the account, partition and QoS its access
/// grants) of the job whose current record in slurmctld is `record`, submitted with
/// `submitted_hash`. A field the spec leaves out keeps the job's value; one that already has
/// the asked value is not sent (an update after a lost status write sends nothing twice).
pub fn plan(submitted_hash: Option<&str>, spec: &SlurmJobSpec, record: &Job) -> EditPlan {
    let Some(submitted_hash) = submitted_hash else {
        return EditPlan::Ignore {
            why: NO_HASH.into(),
        };
    };
    if spec_hash(spec) != submitted_hash {
        return EditPlan::Ignore {
            why: format!(
                "it changes fields other than {IN_PLACE}, which a submitted job cannot change"
            ),
        };
    }
    let pending = record.state.base == JobBaseState::Pending;
    let mut update = JobUpdate::default();
    let mut not_applied = Vec::new();
    if let Some(limit) = spec.time_limit.as_ref() {
        let minutes = limit.as_std().as_secs().div_ceil(60).max(1);
        let current = record.time_limit.map(|t| t.as_secs() / 60);
        if current != Some(minutes) {
            update.time_limit = Some(std::time::Duration::from_secs(minutes * 60));
        }
    }
    for (field, asked, current, slot) in [
        (
            "partition",
            &spec.partition,
            &record.partition,
            &mut update.partition,
        ),
        (
            "account",
            &spec.account,
            &record.account,
            &mut update.account,
        ),
        ("qos", &spec.qos, &record.qos, &mut update.qos),
    ] {
        let Some(asked) = asked else { continue };
        if current.as_ref() == Some(asked)
            || (field == "partition"
                && current
                    .as_deref()
                    .is_some_and(|c| same_partitions(asked, c, pending)))
        {
            continue;
        }
        if pending {
            *slot = Some(asked.clone());
        } else {
            not_applied.push((field, STARTED));
        }
    }
    if let Some(nice) = spec.nice.and_then(|n| u32::try_from(n).ok())
        && record.nice != Some(i64::from(nice))
    {
        update.nice = Some(nice);
    }
    // `suspend: true` holds, `false` releases (slurmctld refuses a user the release of an
    // administrator's hold); left out, it releases only the job's own user's hold, never one an
    // administrator put there.
    let hold = spec.suspend == Some(true);
    let users_hold = record.state_reason.as_deref() == Some("JobHeldUser");
    if hold != record.held && (spec.suspend.is_some() || users_hold) {
        if pending {
            update.hold = Some(hold);
        } else if hold {
            not_applied.push((
                "suspend",
                "the job has started: Slurm lets only its administrators suspend a running \
                 job, so it runs on",
            ));
        }
    }
    EditPlan::Update {
        update,
        not_applied,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::slurm::types::JobState;

    fn spec(extra: Value) -> SlurmJobSpec {
        let mut base = json!({
            "clusterName": "local",
            "script": "#!/bin/bash\nsleep 60\n",
            "timeLimit": "10m",
            "partition": "debug",
            "environment": {"B": "2", "A": "1"},
            "extraOptions": {"mail_type": ["END"], "begin_time": 5},
        });
        if let (Some(base), Some(extra)) = (base.as_object_mut(), extra.as_object()) {
            for (key, value) in extra {
                base.insert(key.clone(), value.clone());
            }
        }
        serde_json::from_value(base).unwrap()
    }

    fn record(state: &str) -> Job {
        Job {
            job_id: 7,
            state: JobState::from_strings(&[state]),
            time_limit: Some(Duration::from_secs(600)),
            partition: Some("debug".into()),
            account: Some("team-a".into()),
            qos: Some("normal".into()),
            nice: Some(0),
            ..Job::bare()
        }
    }

    #[test]
    fn the_hash_ignores_exactly_the_in_place_fields() {
        let base = spec_hash(&spec(json!({})));
        assert_eq!(base.len(), 16);
        for same in [
            json!({"timeLimit": "5m"}),
            json!({"partition": "other"}),
            json!({"account": "team-b", "qos": "low"}),
            json!({"nice": 100, "suspend": true}),
        ] {
            assert_eq!(spec_hash(&spec(same.clone())), base, "{same}");
        }
        for different in [
            json!({"script": "#!/bin/bash\nsleep 61\n"}),
            json!({"ntasks": 2}),
            json!({"environment": {"A": "1"}}),
            json!({"extraOptions": {"mail_type": ["BEGIN"]}}),
            json!({"name": "renamed"}),
            json!({"array": "0-3"}),
        ] {
            assert_ne!(spec_hash(&spec(different.clone())), base, "{different}");
        }
    }

    #[test]
    fn the_hash_does_not_depend_on_key_order() {
        let mut a = String::new();
        let mut b = String::new();
        canonical(
            &json!({"b": {"y": 1, "x": [2, {"q": 1, "p": 0}]}, "a": "s"}),
            &mut a,
        );
        canonical(
            &json!({"a": "s", "b": {"x": [2, {"p": 0, "q": 1}], "y": 1}}),
            &mut b,
        );
        assert_eq!(a, b);
        assert_eq!(a, r#"{"a":"s","b":{"x":[2,{"p":0,"q":1}],"y":1}}"#);
    }

    #[test]
    fn what_an_edit_sends() {
        let hash = spec_hash(&spec(json!({})));
        let update = |s: &SlurmJobSpec, r: &Job| match plan(Some(&hash), s, r) {
            EditPlan::Update {
                update,
                not_applied,
            } => (update, not_applied),
            other => panic!("{other:?}"),
        };
        // Unchanged (or already applied): nothing is sent.
        let (u, skipped) = update(&spec(json!({})), &record("PENDING"));
        assert!(u.is_empty() && skipped.is_empty(), "{u:?} {skipped:?}");
        // A shorter limit, rounded up to whole minutes as at submit.
        let (u, _) = update(&spec(json!({"timeLimit": "4m30s"})), &record("PENDING"));
        assert_eq!(
            u,
            JobUpdate {
                time_limit: Some(Duration::from_secs(300)),
                ..JobUpdate::default()
            }
        );
        // Waiting: partition, account, QoS, nice and the hold all go.
        let edited = spec(json!({
            "partition": "big", "account": "team-b", "qos": "low", "nice": 10, "suspend": true,
        }));
        let (u, skipped) = update(&edited, &record("PENDING"));
        assert_eq!(
            u.fields(),
            ["partition", "account", "qos", "nice", "suspend"]
        );
        assert_eq!(u.hold, Some(true));
        assert!(skipped.is_empty());
        // Started: only the limit and nice; the rest is named, with why.
        let mut running = record("RUNNING");
        running.time_limit = Some(Duration::from_secs(1200));
        let (u, skipped) = update(&edited, &running);
        assert_eq!(u.fields(), ["timeLimit", "nice"]);
        let names: Vec<&str> = skipped.iter().map(|(field, _)| *field).collect();
        assert_eq!(names, ["partition", "account", "qos", "suspend"]);
        assert!(skipped[3].1.contains("administrators"), "{skipped:?}");
        // Held by its user, and suspend back to false (or left out): released.
        let mut held = record("PENDING");
        held.held = true;
        held.state_reason = Some("JobHeldUser".into());
        for released in [json!({"suspend": false}), json!({})] {
            let (u, _) = update(&spec(released), &held);
            assert_eq!(u.hold, Some(false));
        }
        // An administrator's hold: released only when suspend says false (slurmctld decides
        // whether the job's user may), never by an edit that does not mention it.
        held.state_reason = Some("JobHeldAdmin".into());
        let (u, _) = update(&spec(json!({"suspend": false})), &held);
        assert_eq!(u.hold, Some(false));
        let (u, skipped) = update(&spec(json!({"timeLimit": "5m"})), &held);
        assert_eq!(u.hold, None);
        assert_eq!(u.fields(), ["timeLimit"]);
        assert!(skipped.is_empty());
        // A partition list (Slurm picks one): slurmctld lists it in its own order while the
        // job waits, and only the partition it runs in once started; neither is an edit.
        let listed = spec(json!({"partition": "long,debug"}));
        let mut waiting = record("PENDING");
        waiting.partition = Some("debug,long".into());
        let (u, skipped) = update(&listed, &waiting);
        assert!(u.is_empty() && skipped.is_empty(), "{u:?} {skipped:?}");
        let (u, skipped) = update(&listed, &record("RUNNING"));
        assert!(u.is_empty() && skipped.is_empty(), "{u:?} {skipped:?}");
        let (u, _) = update(&spec(json!({"partition": "long,big"})), &waiting);
        assert_eq!(u.fields(), ["partition"]);
        let (_, skipped) = update(&spec(json!({"partition": "long,big"})), &record("RUNNING"));
        assert_eq!(
            skipped.iter().map(|(f, _)| *f).collect::<Vec<_>>(),
            ["partition"]
        );
        // A field left out keeps Slurm's value.
        let mut bare = spec(json!({}));
        bare.time_limit = None;
        bare.partition = None;
        let (u, _) = update(&bare, &record("PENDING"));
        assert!(u.is_empty(), "{u:?}");
    }

    #[test]
    fn other_edits_and_old_jobs_are_not_applied_in_place() {
        let hash = spec_hash(&spec(json!({})));
        let script = spec(json!({"script": "#!/bin/bash\ntrue\n"}));
        match plan(Some(&hash), &script, &record("PENDING")) {
            EditPlan::Ignore { why } => assert!(why.contains(IN_PLACE), "{why}"),
            other => panic!("{other:?}"),
        }
        match plan(None, &spec(json!({"timeLimit": "5m"})), &record("PENDING")) {
            EditPlan::Ignore { why } => assert!(why.contains("operator version"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
}
