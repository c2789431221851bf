//! Fuzz harnesses for slurm-operator, shared by the targets in `fuzz_targets/` and by the replay
//! test `tests/fuzz_corpus.rs` (which includes this file), so a committed input runs the same
//! code in both. A harness panics when a property breaks: that panic is the fuzzer's finding.
//!
//! - [`response`]: one header byte (which call, which HTTP status), then a body, decoded and
//!   converted as the facade does in every REST API version it speaks; whatever the bytes, a
//!   value or a `SlurmError`, never a panic.
//! - [`state_mapping`]: bytes read as structured input — Slurm state words and job records — for
//!   the state mappings (`JobState`, `NodeState`) and the SlurmJob phase and status.

use std::collections::{BTreeMap, BTreeSet};

use chrono::DateTime;
use slurm_operator::controller::slurmjob::{phase, status};
use slurm_operator::crd::slurmjob::{MAX_ARRAY_TASKS, Phase, SlurmJobStatus};
use slurm_operator::slurm::ApiVersion;
use slurm_operator::slurm::fuzzing::{self, Decoded, Endpoint};
use slurm_operator::slurm::types::{
    Changes, ExitStatus, Job, JobBaseState, JobState, Node, NodeBaseState, NodeCounts, NodeState,
    Tres, Usage,
};

/// The HTTP statuses a `response` input can carry: an answer, or a failure with an error body.
pub const STATUSES: [u16; 2] = [200, 500];

/// The call and status a `response` input's first byte selects: `index + 11 * status_index`
/// (`hack/fuzz.sh` writes its seeds' header bytes so).
pub fn header(byte: u8) -> (Endpoint, u16) {
    let i = usize::from(byte);
    let n = Endpoint::ALL.len();
    (Endpoint::ALL[i % n], STATUSES[(i / n) % STATUSES.len()])
}

/// Decode a body and check what came out.
pub fn response(data: &[u8]) {
    let Some((&head, body)) = data.split_first() else {
        return;
    };
    let (endpoint, status) = header(head);
    for version in ApiVersion::ALL {
        match fuzzing::decode_as(version, endpoint, status, body) {
            Ok(decoded) => check_decoded(&decoded),
            Err(error) => {
                let _ = (error.to_string(), error.is_transient(), error.slurm_errno());
                assert!(!error.category().is_empty());
            }
        }
    }
}

fn check_decoded(decoded: &Decoded) {
    let _ = format!("{decoded:?}");
    let changed = |changes: &Changes<Job>| match changes {
        Changes::Changed { items, .. } => items.clone(),
        Changes::Unchanged => Vec::new(),
    };
    match decoded {
        Decoded::Jobs(jobs) | Decoded::Accounting(jobs) => check_records(jobs),
        Decoded::JobChanges(changes) => by_job(changed(changes))
            .iter()
            .for_each(|r| check_records(r)),
        Decoded::States(entries) => entries.iter().for_each(|e| check_job_state(&e.state)),
        Decoded::Nodes(Changes::Changed { items, .. }) => items.iter().for_each(check_node),
        Decoded::Node(node) => check_node(node),
        Decoded::Submitted(submitted) => assert_ne!(submitted.job_id, 0),
        _ => {}
    }
}

/// A job list split into each job's records, as the index hands them to the controller: a plain
/// job by its id, an array by its array job id.
fn by_job(jobs: Vec<Job>) -> Vec<Vec<Job>> {
    let mut groups: BTreeMap<u32, Vec<Job>> = BTreeMap::new();
    for job in jobs {
        groups
            .entry(job.array_job_id.unwrap_or(job.job_id))
            .or_default()
            .push(job);
    }
    groups.into_values().collect()
}

fn check_node(node: &Node) {
    check_node_state(&node.state);
}

/// Job states the facade maps: what Slurm sends (`job_state` arrays), parsed again from its own
/// output (`status.slurmState`, array task states), gives the same state.
fn check_job_state(state: &JobState) {
    let _ = (state.to_string(), state.is_final());
    if state.base != JobBaseState::Unknown {
        let again = JobState::from_strings(&state.to_strings());
        assert_eq!(&again, state, "the mapping is not stable");
    }
    assert!(!state.is_final() || state.base.is_finished());
}

fn check_node_state(state: &NodeState) {
    let again = NodeState::from_strings(&state.to_strings());
    assert_eq!(&again, state, "the mapping is not stable");
    let counts = NodeCounts::count([state]);
    let buckets = counts.idle + counts.allocated + counts.mixed + counts.drain + counts.down;
    assert_eq!((counts.total, buckets + counts.other), (1, 1), "{counts:?}");
    let _ = (counts.to_string(), state.to_string());
    assert!(!(state.is_drained() && state.is_draining()));
}

const JOB_BASES: &[&str] = &[
    "PENDING",
    "RUNNING",
    "SUSPENDED",
    "COMPLETED",
    "CANCELLED",
    "FAILED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
    "OUT_OF_MEMORY",
];
const NODE_BASES: &[&str] = &[
    "IDLE",
    "ALLOCATED",
    "ALLOC",
    "MIXED",
    "DOWN",
    "ERROR",
    "FUTURE",
    "UNKNOWN",
];
const FLAGS: &[&str] = &[
    "COMPLETING",
    "CONFIGURING",
    "REQUEUED",
    "DRAIN",
    "NOT_RESPONDING",
    "DYNAMIC_NORM",
    "DYNAMIC_FUTURE",
];

fn known(word: &str, bases: &[&str]) -> bool {
    bases.contains(&word.trim().to_ascii_uppercase().as_str())
}

/// Bytes read front to back as structured input; past the end every read gives zeroes.
struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    fn take(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.0.split_at(n.min(self.0.len()));
        self.0 = rest;
        head
    }

    fn byte(&mut self) -> u8 {
        self.take(1).first().copied().unwrap_or(0)
    }

    fn int(&mut self) -> i64 {
        let mut bytes = [0; 8];
        let width = usize::from(self.byte() % 9);
        let take = self.take(width);
        bytes[..take.len()].copy_from_slice(take);
        i64::from_le_bytes(bytes)
    }

    fn maybe<T>(&mut self, read: impl FnOnce(&mut Self) -> T) -> Option<T> {
        (self.byte() & 1 == 1).then(|| read(self))
    }

    /// A known state word in any case and padding, or any short text.
    fn word(&mut self) -> String {
        let kind = usize::from(self.byte());
        let known = [JOB_BASES, NODE_BASES, FLAGS].concat();
        if kind < 2 * known.len() {
            let case = self.byte();
            let word: String = known[kind % known.len()]
                .chars()
                .enumerate()
                .map(|(i, c)| {
                    if case >> (i % 8) & 1 == 1 {
                        c.to_ascii_lowercase()
                    } else {
                        c
                    }
                })
                .collect();
            let pad = [" ", "\t", "\n", "\u{a0}"][usize::from(case % 4)];
            if kind < known.len() {
                word
            } else {
                format!("{pad}{word}{pad}")
            }
        } else {
            let len = usize::from(self.byte() % 32);
            String::from_utf8_lossy(self.take(len)).into_owned()
        }
    }

    fn words(&mut self) -> Vec<String> {
        (0..self.byte() % 6).map(|_| self.word()).collect()
    }

    /// An array task expression as Slurm writes them ("1-3", "1,5,7-8", "0-15:4%2"), with any
    /// numbers, or any short text.
    fn task_expression(&mut self) -> String {
        if self.byte() & 1 == 0 {
            return self.word();
        }
        let parts: Vec<String> = (0..=self.byte() % 3)
            .map(|_| {
                let mut part = self.int().to_string();
                if let Some(end) = self.maybe(Self::int) {
                    part = format!("{part}-{end}");
                }
                if let Some(step) = self.maybe(Self::int) {
                    part = format!("{part}:{step}");
                }
                part
            })
            .collect();
        let mut expression = parts.join(",");
        if let Some(limit) = self.maybe(Self::int) {
            expression = format!("{expression}%{limit}");
        }
        expression
    }

    fn record(&mut self) -> Job {
        let time = |input: &mut Self| {
            input
                .maybe(Self::int)
                .and_then(|s| DateTime::from_timestamp(s, 0))
        };
        Job {
            job_id: self.int() as u32,
            name: self.word(),
            state: JobState::from_strings(&self.words()),
            state_reason: self.maybe(Self::word),
            user_name: None,
            cancelled_by: None,
            partition: None,
            comment: None,
            owner: None,
            seal: None,
            nodes: self.maybe(Self::word),
            node_count: self.maybe(Self::int),
            exit: self.maybe(|input| ExitStatus {
                return_code: input.maybe(|i| i.int() as i32),
                signal: input.maybe(|i| i.int() as i32),
                signal_name: None,
                status: input.words(),
            }),
            submit_time: time(self),
            start_time: time(self),
            end_time: time(self),
            time_limit: None,
            array_job_id: self.maybe(|i| i.int() as u32),
            array_task_id: self.maybe(|i| i.int() as u32),
            array_task_string: self.maybe(Self::task_expression),
            standard_output: None,
            standard_error: None,
            working_directory: None,
            priority: self.maybe(Self::int),
            held: self.byte().is_multiple_of(2),
            account: None,
            qos: None,
            nice: self.maybe(Self::int),
            state_description: self.maybe(Self::word),
            usage: self.maybe(|input| {
                let tres = |input: &mut Self| {
                    (0..input.byte() % 4)
                        .map(|_| Tres {
                            kind: input.word(),
                            name: input.maybe(Self::word),
                            count: input.int() as u64,
                        })
                        .collect()
                };
                Box::new(Usage {
                    elapsed: std::time::Duration::from_secs(input.int() as u64),
                    cpu_time: std::time::Duration::from_micros(input.int() as u64),
                    max_rss_bytes: input.maybe(|i| i.int() as u64),
                    allocated: tres(input),
                    requested: tres(input),
                })
            }),
        }
    }
}

/// State words through both state mappings, then job records through the SlurmJob phase and
/// status.
pub fn state_mapping(data: &[u8]) {
    let mut input = Input(data);
    let words = input.words();
    job_state_from(&words);
    node_state_from(&words);
    let records: Vec<Job> = (0..input.byte() % 8).map(|_| input.record()).collect();
    check_records(&records);
}

fn job_state_from(words: &[String]) {
    let state = JobState::from_strings(words);
    check_job_state(&state);
    if !words.iter().any(|w| known(w, JOB_BASES)) {
        assert_eq!(state.base, JobBaseState::Unknown, "{words:?}");
    }
    // Nothing non-empty is dropped: each word is the base or a flag.
    for word in words {
        let upper = word.trim().to_ascii_uppercase();
        if !upper.is_empty() {
            assert!(
                state.base.as_str() == upper || state.has_flag(&upper),
                "{upper:?} lost from {words:?}"
            );
        }
    }
}

fn node_state_from(words: &[String]) {
    let state = NodeState::from_strings(words);
    check_node_state(&state);
    if let NodeBaseState::Other(name) = &state.base {
        assert!(!name.is_empty() && !known(name, NODE_BASES), "{name:?}");
    } else if !words.iter().any(|w| known(w, NODE_BASES)) {
        assert_eq!(state.base, NodeBaseState::Unknown, "{words:?}");
    }
    for word in words {
        let upper = word.trim().to_ascii_uppercase();
        // ALLOC is Slurm's short name for ALLOCATED.
        let alias = upper == "ALLOC" && state.base == NodeBaseState::Allocated;
        if !upper.is_empty() {
            assert!(
                alias || state.base.to_string() == upper || state.has_flag(&upper),
                "{upper:?} lost from {words:?}"
            );
        }
    }
}

/// The records of one job (a plain job's, or an array's tasks and meta record) through the
/// phase and the status the SlurmJob controller computes from them.
fn check_records(records: &[Job]) {
    records.iter().for_each(|r| check_job_state(&r.state));
    let phase = phase::of_records(records);
    assert_eq!(phase.is_none(), records.is_empty());
    if let Some(phase) = phase {
        let started = |r: &Job| {
            matches!(
                r.state.base,
                JobBaseState::Running | JobBaseState::Suspended
            )
        };
        assert_eq!(phase == Phase::Running, records.iter().any(started));
        assert_eq!(
            phase.is_terminal(),
            records.iter().all(|r| r.state.base.is_finished()),
            "terminal exactly when every record has ended"
        );
    }

    let before = SlurmJobStatus::default();
    let after = status::observe(&before, records);
    if records.is_empty() {
        assert_eq!(after, before, "no records leave the status alone");
        return;
    }
    if !after.phase.is_terminal() {
        assert_eq!(after.end_time, None, "no end time before the end");
    }
    match &after.array_tasks {
        Some(tasks) => {
            assert_eq!(Some(after.phase), phase);
            assert!(tasks.tasks.len() <= MAX_ARRAY_TASKS);
            assert!(tasks.counts.values().all(|n| *n >= 0), "{:?}", tasks.counts);
            let states: BTreeSet<&str> = records.iter().map(|r| r.state.base.as_str()).collect();
            assert!(tasks.counts.keys().all(|k| states.contains(k.as_str())));
        }
        None => {
            // A plain job's status shows one of its records, and that record's phase.
            assert!(
                records
                    .iter()
                    .any(|r| r.state.to_strings() == after.slurm_state),
                "{:?}",
                after.slurm_state
            );
            let shown = JobState::from_strings(&after.slurm_state);
            assert_eq!(phase::of_state(&shown), after.phase);
            if !after.phase.is_terminal() {
                // (An array's shows the worst code of its ended tasks while others run.)
                assert_eq!(after.exit_code, None, "no exit code before the end");
            }
        }
    }
}
