//! The list of `GET /jobs/state/`, decoded straight into the facade's [`JobStateEntry`]: the
//! generated clients use [`JobStates`] in place of their `JobStateRespMsg`
//! (`tools/gen-client`: a progenitor replacement type; the wire format is the same in every
//! version). Beside `generated`, which depends on it, below the dialects.
//!
//! The poller lists every job of the cluster this way, and at 100 000 jobs the generated form
//! (an id string and a list of state strings per job, ~160 bytes with their allocations) was the
//! largest part of a poll's peak memory, beside the body and the facade's entries it was
//! converted into (issue 19). Here each job is read with borrowed strings and kept only as its
//! 48-byte entry.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use serde::{Deserialize, Serialize};

use crate::slurm::types::{JobState, JobStateEntry};

/// `/jobs/state/`'s `jobs`, as facade entries. A job whose id this version cannot read is left
/// out, as the conversion from the generated form did; a field of the wrong type fails the
/// decoding, as the generated form's did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobStates(pub Vec<JobStateEntry>);

impl<'de> Deserialize<'de> for JobStates {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Jobs;
        impl<'de> Visitor<'de> for Jobs {
            type Value = JobStates;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of job states")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<JobStates, A::Error> {
                // Not `size_hint`: it is the sender's word, and the element budget bounds the
                // count already (`crate::slurm::elements`).
                let mut entries = Vec::new();
                while let Some(item) = seq.next_element::<Item<'de>>()? {
                    entries.extend(item.entry());
                }
                entries.shrink_to_fit();
                Ok(JobStates(entries))
            }
        }
        deserializer.deserialize_seq(Jobs)
    }
}

/// One job of the list, its strings borrowed from the body. Unknown fields are skipped, and a
/// repeated one is refused, as by the generated type.
#[derive(Deserialize)]
struct Item<'a> {
    #[serde(borrow, default)]
    job_id: Option<Borrowed<'a>>,
    #[serde(borrow, default)]
    state: Option<Vec<Borrowed<'a>>>,
}

impl Item<'_> {
    /// `None` when its id cannot be read.
    fn entry(self) -> Option<JobStateEntry> {
        let states: &[Borrowed<'_>] = self.state.as_deref().unwrap_or_default();
        job_state_entry(&self.job_id?.0, states)
    }
}

/// A string, borrowed from the body when it holds no escapes.
struct Borrowed<'a>(Cow<'a, str>);

impl AsRef<str> for Borrowed<'_> {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Borrowed<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Text<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for Text<'a> {
            type Value = Borrowed<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Borrowed<'a>, E> {
                Ok(Borrowed(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Borrowed<'a>, E> {
                Ok(Borrowed(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Borrowed<'a>, E> {
                Ok(Borrowed(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(Text(PhantomData))
    }
}

/// One `/jobs/state/` entry. Array tasks come as `"<job_id>_<task_id>"` (24.11: `"14_2"`), a
/// pending array's meta record once per task still to run (`"18_0"`, `"18_1"`, ...): each entry
/// is returned under the job id of the record it belongs to.
fn job_state_entry<S: AsRef<str>>(id: &str, states: &[S]) -> Option<JobStateEntry> {
    let id = id.trim();
    let (record, task) = match id.split_once('_') {
        // A task part this version cannot read still names the record.
        Some((record, task)) => (record, task.parse().ok()),
        None => (id, None),
    };
    Some(JobStateEntry {
        job_id: record.parse().ok()?,
        array_task_id: task,
        state: JobState::from_strings(states),
    })
}

/// As slurmrestd writes it (the generated types derive `Serialize`, so the replacement does).
impl Serialize for JobStates {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.0.len()))?;
        for entry in &self.0 {
            seq.serialize_element(&Wire(entry))?;
        }
        seq.end()
    }
}

struct Wire<'a>(&'a JobStateEntry);

impl Serialize for Wire<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let entry = self.0;
        let job_id = match entry.array_task_id {
            Some(task) => format!("{}_{task}", entry.job_id),
            None => entry.job_id.to_string(),
        };
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("job_id", &job_id)?;
        map.serialize_entry("state", &entry.state.to_strings())?;
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slurm::types::JobBaseState;

    fn decode(json: &str) -> Result<Vec<JobStateEntry>, serde_json::Error> {
        serde_json::from_str::<JobStates>(json).map(|states| states.0)
    }

    #[test]
    fn each_job_becomes_its_entry_with_array_tasks_under_their_record() {
        let entries = decode(
            r#"[{"job_id":"257","state":["CANCELLED"]},
                {"job_id":"258_1","state":["PENDING","REQUEUED"],"other":{"a":[1]}},
                {"state":["RUNNING"],"job_id":"259"}]"#,
        )
        .unwrap();
        assert_eq!(
            entries,
            vec![
                JobStateEntry {
                    job_id: 257,
                    array_task_id: None,
                    state: JobState::from_strings(&["CANCELLED"]),
                },
                JobStateEntry {
                    job_id: 258,
                    array_task_id: Some(1),
                    state: JobState::from_strings(&["PENDING", "REQUEUED"]),
                },
                JobStateEntry {
                    job_id: 259,
                    array_task_id: None,
                    state: JobState::from_strings(&["RUNNING"]),
                },
            ]
        );
        assert!(entries[1].state.has_flag("REQUEUED"));
    }

    #[test]
    fn escaped_strings_decode_like_plain_ones() {
        let entries = decode(r#"[{"job_id":"\u0032\u0035","state":["PEND\u0049NG"]}]"#).unwrap();
        assert_eq!(entries[0].job_id, 25);
        assert_eq!(entries[0].state.base, JobBaseState::Pending);
    }

    #[test]
    fn a_job_without_a_readable_id_is_left_out_and_a_wrong_type_fails() {
        let entries = decode(
            r#"[{"job_id":"x","state":["PENDING"]},{"state":["PENDING"]},
                {"job_id":null,"state":null},{"job_id":"7","state":null}]"#,
        )
        .unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].job_id, 7);
        assert_eq!(entries[0].state.base, JobBaseState::Unknown);

        for bad in [
            r#"[{"job_id":7,"state":["PENDING"]}]"#,
            r#"[{"job_id":"7","state":"PENDING"}]"#,
            r#"[{"job_id":"7","state":[1]}]"#,
            r#"[{"job_id":"7","job_id":"8","state":["PENDING"]}]"#,
            r#"{"job_id":"7"}"#,
            r#"[7]"#,
        ] {
            assert!(decode(bad).is_err(), "{bad} decoded");
        }
    }

    #[test]
    fn what_it_writes_decodes_back_to_the_same_entries() {
        let entries = decode(
            r#"[{"job_id":"3","state":["COMPLETED"]},{"job_id":"4_2","state":["PENDING","REQUEUED"]}]"#,
        )
        .unwrap();
        let written = serde_json::to_string(&JobStates(entries.clone())).unwrap();
        assert_eq!(decode(&written).unwrap(), entries);
    }
}
