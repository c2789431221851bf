//! What a SlurmCluster's status should say, from what the reconcile observed: pure functions.
//!
//! [`desired`] computes the whole status (it is applied whole, with one field manager);
//! [`changed`] says whether it differs from the current one, ignoring only list ordering;
//! [`notice`] says which Events the change deserves (one per change of the `Ready` condition, so
//! a SlurmCluster that stays broken does not flood its Events, and one when the listing of every
//! job starts or stops failing).
//!
//! [`protection`] reads what accounting keeps of a finished job of ours into the
//! `DuplicateProtection` condition: crash-safe submits find a job that left slurmctld only
//! through accounting and its ownership tag, which slurmdbd stores only with
//! `AccountingStoreFlags=job_comment` (and only once the job ended).

use super::config::ConfigError;
use crate::controller::kit::{self, Notice};
use crate::crd::condition::{
    self, AUTHENTICATED, Condition, READY, RECONCILING, STALLED, Status, Time,
};
use crate::crd::{ClusterNodeCounts, SlurmClusterStatus};
use crate::slurm::SlurmError;
use crate::slurm::tag::{Ownership, TagKey};
use crate::slurm::types::{ClusterInfo, Job, NodeCounts};
use crate::state::index::{ClusterState, Listing};

/// Ready=True: slurmrestd answers with valid credentials and the poller is healthy.
pub const CONNECTED: &str = "Connected";
/// Authenticated=True: slurmrestd accepted the credentials.
pub const TOKEN_ACCEPTED: &str = "TokenAccepted";
/// Ready=False: slurmrestd answers but its slurmctld does not.
pub const CONTROLLER_NOT_RESPONDING: &str = "ControllerNotResponding";
/// The endpoint reaches another Slurm cluster than the one SlurmJobs or SlurmNodeSets still use.
pub const CLUSTER_CHANGED: &str = "SlurmClusterChanged";

/// A healthy SlurmCluster's `lastContactTime` is rewritten at most this often, so that reconciles in
/// quick succession (a Secret event, a health event) do not each cause a status write.
pub const LAST_CONTACT_GRANULARITY_SECS: i64 = 30;

/// The condition that says whether a job submitted before a crash is still found once it left
/// slurmctld: only through accounting, and only when accounting keeps job comments.
pub const DUPLICATE_PROTECTION: &str = "DuplicateProtection";

/// The condition of a deleted SlurmCluster that SlurmJobs or SlurmNodeSets still hold (reason
/// `InUseBySlurmJobs` or `InUseBySlurmNodeSets`, the message naming them).
pub const DELETION_BLOCKED: &str = "DeletionBlocked";

/// The condition that says whether the periodic listing of every job answers: the incremental
/// cycles do not show everything (purged jobs, a job a lost submit made), and what waits for a
/// full listing waits on while it fails, though `Ready` stays True.
pub const JOBS_LISTED: &str = "JobsListed";
/// JobsListed=Unknown: the connection was dropped (its configuration refused, its endpoint
/// reaching another Slurm cluster): no poller lists the jobs.
pub const NOT_CONNECTED: &str = "NotConnected";

/// The `JobsListed` condition's status, reason and message.
fn listing_condition(listing: &Listing) -> (Status, &'static str, String) {
    match listing {
        Listing::NotYet => (
            Status::Unknown,
            "NotListedYet",
            "the poller has not listed every job yet".to_owned(),
        ),
        Listing::Listed => (
            Status::True,
            "Listed",
            "the periodic listing of every job's state answers".to_owned(),
        ),
        Listing::Failing(f) => (
            Status::False,
            f.reason,
            format!(
                "the periodic listing of every job's state has failed since {} ({}); the \
                 incremental cycles go on, but a SlurmJob whose submit is in doubt, or that is \
                 older than a leader takeover, waits for a listing (WaitingForSlurmIndex), and \
                 jobs slurmctld purged stay in the index until one answers. A listing that \
                 times out may need a longer spec.listingTimeout",
                f.since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                f.message
            ),
        ),
    }
}

/// What accounting showed of a finished job of ours (see [`protection`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protection {
    /// Its record kept the comment: ownership tags are stored.
    Stored { job_id: u32 },
    /// Its finished record has no comment: `AccountingStoreFlags=job_comment` is not set.
    NoComment { job_id: u32 },
    /// The cluster serves no accounting (slurmdbd).
    NoAccounting,
}

/// The job to ask accounting about: the newest finished job in the index that is provably ours
/// (slurmdbd stores a comment only when the job ends, so a running job shows nothing either way).
pub fn protection_probe(state: &ClusterState, key: &TagKey) -> Option<u32> {
    state
        .jobs
        .values()
        .rev()
        .find(|job| {
            job.state.base.is_finished()
                && job.array_job_id.is_none()
                && job.ownership(key) == Ownership::Proven
        })
        .map(|job| job.job_id)
}

/// What accounting's answer for finished job `job_id` of ours says. `records` is `None` when the
/// cluster has no accounting. `None` (nothing to conclude) until accounting has recorded the end.
pub fn protection(job_id: u32, records: Option<&[Job]>) -> Option<Protection> {
    let Some(records) = records else {
        return Some(Protection::NoAccounting);
    };
    let ended: Vec<&Job> = records
        .iter()
        .filter(|r| r.job_id == job_id && r.state.base.is_finished())
        .collect();
    if ended.is_empty() {
        return None;
    }
    Some(if ended.iter().any(|r| r.comment.is_some()) {
        Protection::Stored { job_id }
    } else {
        Protection::NoComment { job_id }
    })
}

/// The `DuplicateProtection` condition's status, reason and message for `protection`.
fn protection_condition(protection: Protection) -> (Status, &'static str, String) {
    match protection {
        Protection::Stored { job_id } => (
            Status::True,
            "AccountingStoresComments",
            format!(
                "accounting (slurmdbd) kept the ownership tag of finished Slurm job {job_id}: a \
                 job submitted just before a crash is found there even after it left slurmctld"
            ),
        ),
        Protection::NoComment { job_id } => (
            Status::False,
            "AccountingHasNoComment",
            format!(
                "accounting's record of finished Slurm job {job_id}, which the operator submitted \
                 with its ownership tag in the comment, has no comment: slurmdbd does not store \
                 job comments, so a job that left slurmctld (MinJobAge) cannot be recognised and \
                 a crash between a submit and its status write may run a SlurmJob twice. Set \
                 AccountingStoreFlags=job_comment in slurm.conf"
            ),
        ),
        Protection::NoAccounting => (
            Status::False,
            "NoAccounting",
            "the cluster serves no accounting (slurmdbd): a job submitted just before a crash is \
             recognised only while slurmctld holds it (MinJobAge), so a SlurmJob may run twice \
             after a longer outage. Run slurmdbd with AccountingStoreFlags=job_comment"
                .to_owned(),
        ),
    }
}

/// Longest condition message we write (the API allows 32768; nobody reads that much).
const MAX_MESSAGE: usize = 1024;

/// Whether slurmrestd accepted the credentials, as far as the reconcile could tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthState {
    Accepted,
    Rejected,
    /// Not checked: the failure happened before the credentials were tried.
    Unknown,
}

/// A successful check of the cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct Connected {
    pub endpoint: String,
    /// How the operator authenticates, for humans (e.g. "tokens minted for Slurm user ...").
    pub credentials: String,
    pub info: ClusterInfo,
    pub partitions: Vec<String>,
    pub nodes: NodeCounts,
    /// What accounting showed of duplicate protection; `None` keeps the condition as it was.
    pub protection: Option<Protection>,
    pub listing: Listing,
}

/// Why the SlurmCluster is not usable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// Stable PascalCase reason (condition reason, Event reason).
    pub reason: &'static str,
    pub message: String,
    pub auth: AuthState,
    /// Only a change (of the spec or its Secrets) can help: `Stalled`, not `Reconciling`.
    pub waits_for_change: bool,
    /// The connection and its poller are gone (not kept retrying): nothing lists the jobs.
    pub disconnected: bool,
}

impl Failure {
    /// A spec or referenced object the operator cannot use.
    pub fn config(error: &ConfigError) -> Self {
        let auth = if error.concerns_credentials() {
            AuthState::Rejected
        } else {
            AuthState::Unknown
        };
        Self {
            reason: error.reason(),
            message: error.to_string(),
            auth,
            waits_for_change: true,
            disconnected: true,
        }
    }

    /// A failed call to slurmrestd. `authenticated`: whether an earlier call of the same check
    /// already proved the credentials good.
    pub fn slurm(error: &SlurmError, authenticated: bool) -> Self {
        let auth = match error.category() {
            "Unauthorized" | "InvalidCredentials" | "PermissionDenied" => AuthState::Rejected,
            _ if authenticated => AuthState::Accepted,
            _ => AuthState::Unknown,
        };
        let reason = error.category();
        Self {
            reason,
            message: what_to_change(reason, crate::error_chain::Chain(error).to_string()),
            auth,
            waits_for_change: false,
            disconnected: false,
        }
    }

    /// Says which credentials slurmrestd refused (`credentials`: [`AuthPlan::describe`]), so
    /// that a rejection points at the Secret and user to fix. Other failures are unchanged.
    ///
    /// [`AuthPlan::describe`]: super::config::AuthPlan::describe
    pub fn naming(mut self, credentials: Option<String>) -> Self {
        let refused = matches!(
            self.reason,
            "Unauthorized" | "InvalidCredentials" | "PermissionDenied"
        );
        if let Some(credentials) = credentials.filter(|_| refused) {
            self.message = format!("{} (the credentials: {credentials})", self.message);
        }
        self
    }

    /// The endpoint answers for another Slurm cluster than the one still in use (`message`:
    /// which, and what to do). Its answer came with the credentials accepted.
    pub fn cluster_changed(message: String) -> Self {
        Self {
            reason: CLUSTER_CHANGED,
            message,
            auth: AuthState::Accepted,
            waits_for_change: false,
            disconnected: true,
        }
    }

    /// The cluster's poller reports slurmrestd down (`reason` is its error category).
    pub fn poller(reason: &'static str, message: &str) -> Self {
        let auth = match reason {
            "Unauthorized" | "InvalidCredentials" | "PermissionDenied" => AuthState::Rejected,
            _ => AuthState::Accepted,
        };
        Self {
            reason,
            message: what_to_change(
                reason,
                format!("slurmrestd answered the check, but polling it fails: {message}"),
            ),
            auth,
            waits_for_change: false,
            disconnected: false,
        }
    }
}

/// `message` with what the admin may change, for the failures a spec field can cure. An answer
/// past the size bound may come from a broken slurmrestd as well as from a large cluster: the
/// operator never raises the bound itself, the message leaves that to the admin.
fn what_to_change(reason: &str, message: String) -> String {
    match reason {
        "ResponseTooLarge" => format!(
            "{message}; if this slurmrestd's real answers are that large (very many jobs or \
             nodes), raise spec.maxResponseSize"
        ),
        _ => message,
    }
}

/// What one reconcile found.
#[derive(Debug, Clone, PartialEq)]
pub enum Observation {
    /// Boxed: it is the larger by far.
    Connected(Box<Connected>),
    Failed(Failure),
}

fn truncate(message: String) -> String {
    kit::cut_to_bytes(message, MAX_MESSAGE)
}

fn count(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

fn node_counts(counts: &NodeCounts) -> ClusterNodeCounts {
    ClusterNodeCounts {
        total: count(counts.total),
        idle: count(counts.idle),
        allocated: count(counts.allocated),
        mixed: count(counts.mixed),
        drain: count(counts.drain),
        down: count(counts.down),
    }
}

/// The status the SlurmCluster should have. Conditions keep their `lastTransitionTime` while their
/// status stays the same ([`condition::upsert`]). On failure, what was observed of Slurm (name,
/// release, counts, partitions) is dropped — the status only claims what is true now — but
/// `lastContactTime` is kept: it says when slurmrestd last answered.
///
/// kstatus: `Stalled=True` while the spec or its Secrets must change first (the controller waits
/// for that), `Reconciling=True` while it retries (unreachable, credentials refused, slurmctld
/// silent); neither once connected.
pub fn desired(
    current: Option<&SlurmClusterStatus>,
    generation: Option<i64>,
    observation: &Observation,
    now: Time,
) -> SlurmClusterStatus {
    let mut conditions = current.map(|s| s.conditions.clone()).unwrap_or_default();
    conditions.retain(|c| {
        [
            READY,
            AUTHENTICATED,
            DUPLICATE_PROTECTION,
            JOBS_LISTED,
            RECONCILING,
            STALLED,
        ]
        .contains(&c.type_.as_str())
    });
    let previous_contact = current.and_then(|s| s.last_contact_time.clone());
    let cond = |type_: &str, status: Status, reason: &str, message: String| {
        condition::new(
            type_,
            status,
            reason,
            truncate(message),
            generation,
            now.clone(),
        )
    };

    match observation {
        Observation::Connected(c) => {
            let (ready, reason, message) = if c.info.controller_responding {
                (
                    Status::True,
                    CONNECTED,
                    format!(
                        "slurmrestd at {} serves cluster {:?} (Slurm {}, API {})",
                        c.endpoint, c.info.cluster_name, c.info.release, c.info.api_version
                    ),
                )
            } else {
                (
                    Status::False,
                    CONTROLLER_NOT_RESPONDING,
                    format!(
                        "slurmrestd at {} answers, but no slurmctld of cluster {:?} (primary or backup) responds to ping",
                        c.endpoint, c.info.cluster_name
                    ),
                )
            };
            condition::remove(&mut conditions, STALLED);
            if ready == Status::False {
                condition::upsert(
                    &mut conditions,
                    cond(RECONCILING, Status::True, reason, message.clone()),
                );
            } else {
                condition::remove(&mut conditions, RECONCILING);
            }
            condition::upsert(&mut conditions, cond(READY, ready, reason, message));
            condition::upsert(
                &mut conditions,
                cond(
                    AUTHENTICATED,
                    Status::True,
                    TOKEN_ACCEPTED,
                    format!("slurmrestd accepted {}", c.credentials),
                ),
            );
            let (status, reason, message) = listing_condition(&c.listing);
            condition::upsert(&mut conditions, cond(JOBS_LISTED, status, reason, message));
            if let Some(protection) = c.protection {
                let (status, reason, message) = protection_condition(protection);
                condition::upsert(
                    &mut conditions,
                    cond(DUPLICATE_PROTECTION, status, reason, message),
                );
            }
            let fresh = previous_contact.clone().filter(|t| {
                let age = now.0.as_second() - t.0.as_second();
                (0..LAST_CONTACT_GRANULARITY_SECS).contains(&age)
            });
            let mut partitions = c.partitions.clone();
            partitions.sort();
            partitions.dedup();
            let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_owned());
            SlurmClusterStatus {
                conditions,
                observed_generation: generation,
                // A slurmrestd that names no cluster says nothing of which one it is.
                cluster_name: non_empty(&c.info.cluster_name)
                    .or_else(|| current.and_then(|c| c.cluster_name.clone())),
                slurm_release: non_empty(&c.info.release),
                api_version: non_empty(&c.info.api_version),
                nodes: Some(node_counts(&c.nodes)),
                partitions,
                last_contact_time: Some(fresh.unwrap_or(now)),
            }
        }
        Observation::Failed(f) => {
            condition::upsert(
                &mut conditions,
                cond(READY, Status::False, f.reason, f.message.clone()),
            );
            let (progress, other) = if f.waits_for_change {
                (STALLED, RECONCILING)
            } else {
                (RECONCILING, STALLED)
            };
            condition::remove(&mut conditions, other);
            condition::upsert(
                &mut conditions,
                cond(progress, Status::True, f.reason, f.message.clone()),
            );
            let auth = match f.auth {
                AuthState::Accepted => cond(
                    AUTHENTICATED,
                    Status::True,
                    TOKEN_ACCEPTED,
                    "slurmrestd accepted the credentials".to_owned(),
                ),
                AuthState::Rejected => {
                    cond(AUTHENTICATED, Status::False, f.reason, f.message.clone())
                }
                AuthState::Unknown => cond(
                    AUTHENTICATED,
                    Status::Unknown,
                    f.reason,
                    format!("the credentials could not be tried: {}", f.message),
                ),
            };
            condition::upsert(&mut conditions, auth);
            if f.disconnected {
                // No poller is left to list anything: what it said last is not true any more.
                condition::upsert(
                    &mut conditions,
                    cond(
                        JOBS_LISTED,
                        Status::Unknown,
                        NOT_CONNECTED,
                        format!("no connection to slurmrestd lists the jobs: {}", f.message),
                    ),
                );
            }
            // The Slurm cluster last reached stays named: a connection may follow the spec to
            // another one only while nothing of ours is left there (`same_cluster`).
            SlurmClusterStatus {
                conditions,
                observed_generation: generation,
                cluster_name: current.and_then(|c| c.cluster_name.clone()),
                last_contact_time: previous_contact,
                ..SlurmClusterStatus::default()
            }
        }
    }
}

fn normalized(status: &SlurmClusterStatus) -> SlurmClusterStatus {
    let mut status = status.clone();
    status.conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
    status.partitions.sort();
    status
}

/// Whether `desired` differs from `current` in anything but list ordering.
pub fn changed(current: Option<&SlurmClusterStatus>, desired: &SlurmClusterStatus) -> bool {
    current.map(normalized) != Some(normalized(desired))
}

/// The Events the change from `current` to `desired` deserves, in this order:
/// - one per change of the `Ready` condition (a Warning when it turns False, Normal when True),
///   so a SlurmCluster that stays broken does not flood its Events;
/// - `JobsNotListed` (Warning) when the listing of every job starts failing, and `JobsListed`
///   when it no longer fails (not at the first listing: nothing was wrong).
pub fn notice(current: Option<&SlurmClusterStatus>, desired: &SlurmClusterStatus) -> Vec<Notice> {
    let mut notices = Vec::new();
    if let Some(new) = find(Some(desired), READY) {
        let old = find(current, READY);
        let same = old.is_some_and(|o| o.status == new.status && o.reason == new.reason);
        if !same && new.status == Status::True.as_str() {
            notices.push(Notice::normal(new.reason.clone(), new.message.clone()));
        } else if !same && new.status == Status::False.as_str() {
            notices.push(Notice::warning(new.reason.clone(), new.message.clone()));
        }
    }
    if let Some(new) = find(Some(desired), JOBS_LISTED) {
        let was_false =
            find(current, JOBS_LISTED).is_some_and(|o| o.status == Status::False.as_str());
        if new.status == Status::False.as_str() && !was_false {
            notices.push(Notice::warning("JobsNotListed", new.message.clone()));
        } else if new.status != Status::False.as_str() && was_false {
            notices.push(Notice::normal(
                "JobsListed",
                "the periodic listing of every job's state answers again",
            ));
        }
    }
    notices
}

fn find<'a>(status: Option<&'a SlurmClusterStatus>, type_: &str) -> Option<&'a Condition> {
    status.and_then(|s| condition::find(&s.conditions, type_))
}

/// Whether `s` is a PascalCase word (what condition and Event reasons must be).
#[cfg(test)]
pub(crate) fn is_pascal_case(s: &str) -> bool {
    s.chars().next().is_some_and(|c| c.is_ascii_uppercase())
        && s.chars().all(|c| c.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::jiff::Timestamp;

    use super::*;
    use crate::slurm::auth::AuthError;
    use crate::state::index::ListingFailure;

    fn at(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).unwrap())
    }

    fn info(responding: bool) -> ClusterInfo {
        ClusterInfo {
            cluster_name: "local".into(),
            release: "24.11.5".into(),
            data_parser: "data_parser/v0.0.42".into(),
            api_version: "v0.0.42".into(),
            controller_responding: responding,
            jobs_submitted: Some(3),
            controller_time: None,
        }
    }

    fn connected() -> Observation {
        Observation::Connected(Box::new(Connected {
            endpoint: "http://127.0.0.1:6820/".into(),
            credentials: "tokens minted for Slurm user \"slurm\"".into(),
            info: info(true),
            partitions: vec!["gpu".into(), "debug".into(), "debug".into()],
            nodes: NodeCounts {
                total: 6,
                idle: 1,
                allocated: 1,
                mixed: 1,
                drain: 1,
                down: 1,
                other: 1,
            },
            protection: None,
            listing: Listing::Listed,
        }))
    }

    /// A record of job `id` in `state`, as accounting or the index reports it.
    fn record(id: u32, state: &str, comment: Option<String>) -> Job {
        let mut job = Job {
            job_id: id,
            state: crate::slurm::types::JobState::from_strings(&[state]),
            user_name: Some("alice".into()),
            ..Job::bare()
        };
        job.set_comment(comment);
        job
    }

    #[test]
    fn duplicate_protection_is_read_from_a_finished_job_of_ours_in_accounting() {
        use crate::slurm::tag::OwnerTag;
        let key = TagKey::new(&[3; 32]).unwrap();
        let ours = |id, state| {
            record(
                id,
                state,
                Some(key.comment(&OwnerTag::new("u", 1), "alice")),
            )
        };
        // The probe: the newest finished job that is provably ours.
        let state = ClusterState {
            jobs: std::sync::Arc::new(
                [
                    (1, ours(1, "COMPLETED")),
                    (2, ours(2, "FAILED")),
                    (3, ours(3, "RUNNING")),
                    // Forged (another key), finished, newest: never the probe.
                    (
                        4,
                        record(
                            4,
                            "COMPLETED",
                            Some(
                                TagKey::new(&[4; 32])
                                    .unwrap()
                                    .comment(&OwnerTag::new("u", 1), "alice"),
                            ),
                        ),
                    ),
                ]
                .into_iter()
                .collect(),
            ),
            ..Default::default()
        };
        assert_eq!(protection_probe(&state, &key), Some(2));
        assert_eq!(protection_probe(&ClusterState::default(), &key), None);

        // What accounting says (slurmdbd's records as the facade converts them): the comment
        // kept; none (no AccountingStoreFlags=job_comment); the job still running there (the
        // comment is stored only at the end: nothing to conclude); no accounting at all.
        let tag = key.comment(&OwnerTag::new("u", 1), "alice");
        assert_eq!(
            protection(2, Some(&[record(2, "FAILED", Some(tag.clone()))])),
            Some(Protection::Stored { job_id: 2 })
        );
        assert_eq!(
            protection(2, Some(&[record(2, "FAILED", None)])),
            Some(Protection::NoComment { job_id: 2 })
        );
        assert_eq!(protection(2, Some(&[record(2, "RUNNING", None)])), None);
        assert_eq!(protection(2, Some(&[])), None);
        assert_eq!(protection(2, None), Some(Protection::NoAccounting));

        // Into the status: the condition says what to set, and stays through a failed check
        // and a check with nothing to conclude.
        let with = |p| match connected() {
            Observation::Connected(c) => Observation::Connected(Box::new(Connected {
                protection: p,
                ..*c
            })),
            other => other,
        };
        let lost = desired(
            None,
            Some(1),
            &with(Some(Protection::NoComment { job_id: 2 })),
            at(10),
        );
        let c = cond(&lost, DUPLICATE_PROTECTION).clone();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "AccountingHasNoComment")
        );
        assert!(
            c.message.contains("AccountingStoreFlags=job_comment"),
            "{}",
            c.message
        );
        assert!(c.message.contains("job 2"), "{}", c.message);
        let kept = desired(Some(&lost), Some(1), &with(None), at(20));
        assert_eq!(cond(&kept, DUPLICATE_PROTECTION), &c);
        let failed = desired(
            Some(&lost),
            Some(1),
            &failed("Unreachable", AuthState::Unknown),
            at(30),
        );
        assert_eq!(cond(&failed, DUPLICATE_PROTECTION), &c);
        let fixed = desired(
            Some(&lost),
            Some(1),
            &with(Some(Protection::Stored { job_id: 5 })),
            at(40),
        );
        let c = cond(&fixed, DUPLICATE_PROTECTION);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("True", "AccountingStoresComments")
        );
        let none = desired(None, Some(1), &with(Some(Protection::NoAccounting)), at(50));
        assert_eq!(cond(&none, DUPLICATE_PROTECTION).reason, "NoAccounting");
    }

    fn failed(reason: &'static str, auth: AuthState) -> Observation {
        Observation::Failed(Failure {
            reason,
            message: "it broke".into(),
            auth,
            waits_for_change: false,
            disconnected: false,
        })
    }

    fn cond<'a>(status: &'a SlurmClusterStatus, type_: &str) -> &'a Condition {
        condition::find(&status.conditions, type_).unwrap()
    }

    #[test]
    fn a_connected_cluster_reports_identity_counts_and_partitions() {
        let s = desired(None, Some(4), &connected(), at(100));
        let ready = cond(&s, READY);
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("True", "Connected")
        );
        assert!(ready.message.contains("\"local\""), "{}", ready.message);
        assert_eq!(ready.observed_generation, Some(4));
        let auth = cond(&s, AUTHENTICATED);
        assert_eq!(
            (auth.status.as_str(), auth.reason.as_str()),
            ("True", "TokenAccepted")
        );
        assert!(auth.message.contains("minted"));
        assert_eq!(s.cluster_name.as_deref(), Some("local"));
        assert_eq!(s.slurm_release.as_deref(), Some("24.11.5"));
        assert_eq!(s.api_version.as_deref(), Some("v0.0.42"));
        assert_eq!(s.partitions, ["debug", "gpu"]);
        assert_eq!(
            s.nodes,
            Some(ClusterNodeCounts {
                total: 6,
                idle: 1,
                allocated: 1,
                mixed: 1,
                drain: 1,
                down: 1,
            })
        );
        assert_eq!(s.observed_generation, Some(4));
        assert_eq!(s.last_contact_time, Some(at(100)));
    }

    /// kstatus: nothing in progress once connected; `Reconciling` while the controller retries;
    /// `Stalled` while only a change of the spec or its Secrets helps. Back to neither.
    #[test]
    fn kstatus_conditions_follow_what_the_controller_does_next() {
        let types = |s: &SlurmClusterStatus| {
            let mut t: Vec<String> = s.conditions.iter().map(|c| c.type_.clone()).collect();
            t.sort();
            t
        };
        let ok = desired(None, Some(1), &connected(), at(100));
        assert_eq!(types(&ok), [AUTHENTICATED, JOBS_LISTED, READY]);
        let retrying = desired(
            Some(&ok),
            Some(1),
            &failed("Unreachable", AuthState::Unknown),
            at(110),
        );
        assert_eq!(
            types(&retrying),
            [AUTHENTICATED, JOBS_LISTED, READY, RECONCILING]
        );
        assert_eq!(cond(&retrying, RECONCILING).reason, "Unreachable");
        // Still retrying later: the same condition, its time kept (no write per reconcile).
        let still = desired(
            Some(&retrying),
            Some(1),
            &failed("Unreachable", AuthState::Unknown),
            at(200),
        );
        assert_eq!(cond(&still, RECONCILING).last_transition_time, at(110));
        let invalid = Failure::config(&ConfigError::SecretNotFound {
            name: "creds".into(),
            what: "credentials",
        });
        assert_eq!(invalid.reason, "SecretNotFound");
        let stalled = desired(
            Some(&still),
            Some(2),
            &Observation::Failed(invalid),
            at(210),
        );
        assert_eq!(
            types(&stalled),
            [AUTHENTICATED, JOBS_LISTED, READY, STALLED]
        );
        assert_eq!(cond(&stalled, STALLED).observed_generation, Some(2));
        // A refused configuration dropped the connection: no poller lists the jobs any more,
        // and the condition says so (a passing failure leaves the poller's word standing).
        assert_eq!(cond(&retrying, JOBS_LISTED).status, "True");
        let listed = cond(&stalled, JOBS_LISTED);
        assert_eq!(
            (listed.status.as_str(), listed.reason.as_str()),
            ("Unknown", NOT_CONNECTED)
        );
        assert_eq!(listed.observed_generation, Some(2));
        let back = desired(Some(&stalled), Some(3), &connected(), at(300));
        assert_eq!(types(&back), [AUTHENTICATED, JOBS_LISTED, READY]);
        assert_eq!(back.observed_generation, Some(3));
    }

    /// A failing listing of every job is said on the SlurmCluster (it was only in the log and a
    /// metric), and `Ready` stays True: the incremental cycles go on.
    #[test]
    fn a_failing_listing_of_every_job_is_said_and_ready_stays() {
        let with = |listing: Listing| {
            let Observation::Connected(c) = connected() else {
                unreachable!()
            };
            Observation::Connected(Box::new(Connected { listing, ..*c }))
        };
        let since = chrono::DateTime::from_timestamp(1_000, 0).unwrap();
        let failing = Listing::Failing(ListingFailure {
            reason: "Timeout",
            message: "slurmrestd did not answer within 5m".into(),
            since,
        });
        let first = desired(None, Some(1), &with(Listing::NotYet), at(900));
        let listed = cond(&first, JOBS_LISTED);
        assert_eq!(
            (listed.status.as_str(), listed.reason.as_str()),
            ("Unknown", "NotListedYet")
        );
        let failed = desired(Some(&first), Some(1), &with(failing.clone()), at(1_100));
        let listed = cond(&failed, JOBS_LISTED);
        assert_eq!(
            (listed.status.as_str(), listed.reason.as_str()),
            ("False", "Timeout")
        );
        for part in [
            "since 1970-01-01T00:16:40Z",
            "slurmrestd did not answer within 5m",
            "WaitingForSlurmIndex",
            "spec.listingTimeout",
        ] {
            assert!(listed.message.contains(part), "{part}: {}", listed.message);
        }
        assert_eq!(cond(&failed, READY).status, "True");
        // The same failure at the next check: no status write (within lastContactTime's 30 s).
        let still = desired(Some(&failed), Some(1), &with(failing.clone()), at(1_110));
        assert!(!changed(Some(&failed), &still));
        let back = desired(Some(&failed), Some(1), &with(Listing::Listed), at(1_200));
        let listed = cond(&back, JOBS_LISTED);
        assert_eq!(
            (listed.status.as_str(), listed.reason.as_str()),
            ("True", "Listed")
        );
        assert!(changed(Some(&failed), &back));
        // A failure kept as it was: no status write.
        let again = desired(Some(&back), Some(1), &with(Listing::Listed), at(1_210));
        assert!(!changed(Some(&back), &again));

        // Events: one when it starts failing, one when it answers again; none for the first
        // listing, nor for a failure or an answer repeated.
        let reasons = |from: &SlurmClusterStatus, to: &SlurmClusterStatus| {
            notice(Some(from), to)
                .into_iter()
                .map(|n| (n.reason.into_owned(), n.warning))
                .collect::<Vec<_>>()
        };
        let listed_first = desired(Some(&first), Some(1), &with(Listing::Listed), at(1_000));
        assert_eq!(reasons(&first, &listed_first), []);
        assert_eq!(
            reasons(&first, &failed),
            [("JobsNotListed".to_owned(), true)]
        );
        assert_eq!(
            reasons(&listed_first, &failed),
            [("JobsNotListed".to_owned(), true)]
        );
        let warned = notice(Some(&first), &failed);
        assert_eq!(warned[0].note, cond(&failed, JOBS_LISTED).message);
        assert_eq!(reasons(&failed, &still), []);
        let other = Listing::Failing(ListingFailure {
            reason: "Unreachable",
            message: "connection refused".into(),
            since,
        });
        let otherwise = desired(Some(&failed), Some(1), &with(other), at(1_150));
        assert_eq!(reasons(&failed, &otherwise), [], "still failing");
        assert_eq!(
            reasons(&otherwise, &back),
            [("JobsListed".to_owned(), false)]
        );
        assert_eq!(reasons(&back, &again), []);
        // A listing that answers before the first complete cycle (NotListedYet): answered
        // again all the same, and no second Event once it is complete.
        let answered = desired(Some(&failed), Some(1), &with(Listing::NotYet), at(1_300));
        assert_eq!(cond(&answered, JOBS_LISTED).status, "Unknown");
        assert_eq!(
            reasons(&failed, &answered),
            [("JobsListed".to_owned(), false)]
        );
        let complete = desired(Some(&answered), Some(1), &with(Listing::Listed), at(1_310));
        assert_eq!(reasons(&answered, &complete), []);
    }

    #[test]
    fn a_silent_slurmctld_is_not_ready_but_authenticated() {
        let Observation::Connected(mut c) = connected() else {
            unreachable!()
        };
        c.info = info(false);
        let s = desired(None, Some(1), &Observation::Connected(c), at(1));
        assert_eq!(cond(&s, READY).reason, CONTROLLER_NOT_RESPONDING);
        assert_eq!(cond(&s, READY).status, "False");
        assert_eq!(cond(&s, AUTHENTICATED).status, "True");
    }

    #[test]
    fn every_slurm_error_category_becomes_a_reason() {
        let unreachable = || SlurmError::Unreachable {
            endpoint: "http://h".into(),
            detail: "connection refused".into(),
            source: None,
        };
        let cases: Vec<(SlurmError, bool, &str, &str)> = vec![
            (unreachable(), false, "Unreachable", "Unknown"),
            (unreachable(), true, "Unreachable", "True"),
            (
                SlurmError::Tls {
                    endpoint: "https://h".into(),
                    detail: "unknown issuer".into(),
                },
                false,
                "TLSError",
                "Unknown",
            ),
            (
                SlurmError::Timeout {
                    operation: "diag",
                    timeout: Duration::from_secs(30),
                },
                false,
                "Timeout",
                "Unknown",
            ),
            (
                SlurmError::Unauthorized {
                    status: 401,
                    detail: "bad signature".into(),
                },
                false,
                "Unauthorized",
                "False",
            ),
            (
                SlurmError::Credentials(AuthError::EmptyKey),
                false,
                "InvalidCredentials",
                "False",
            ),
            (
                SlurmError::PermissionDenied {
                    operation: "diag",
                    message: "Access denied".into(),
                },
                true,
                "PermissionDenied",
                "False",
            ),
            (
                SlurmError::UnsupportedVersion {
                    endpoint: "http://h".into(),
                    detail: "v0.0.40 only".into(),
                },
                false,
                "UnsupportedVersion",
                "Unknown",
            ),
            (
                SlurmError::UnexpectedStatus {
                    operation: "diag",
                    status: 502,
                    body: "bad gateway".into(),
                },
                false,
                "UnexpectedStatus",
                "Unknown",
            ),
            (
                SlurmError::Decode {
                    operation: "diag",
                    detail: "eof".into(),
                },
                true,
                "DecodeError",
                "True",
            ),
            (
                SlurmError::InvalidCa {
                    detail: "no certificate".into(),
                },
                false,
                "InvalidCA",
                "Unknown",
            ),
            (
                SlurmError::ResponseTooLarge {
                    operation: "diag",
                    limit: 1 << 20,
                },
                false,
                "ResponseTooLarge",
                "Unknown",
            ),
        ];
        for (error, authenticated, reason, auth) in cases {
            let failure = Failure::slurm(&error, authenticated);
            assert!(is_pascal_case(failure.reason), "{}", failure.reason);
            let s = desired(None, Some(2), &Observation::Failed(failure), at(5));
            let ready = cond(&s, READY);
            assert_eq!(ready.status, "False", "{error}");
            assert_eq!(ready.reason, reason, "{error}");
            assert!(
                ready.message.contains(&error.to_string()),
                "{}",
                ready.message
            );
            assert_eq!(cond(&s, AUTHENTICATED).status, auth, "{error}");
            assert!(is_pascal_case(&cond(&s, AUTHENTICATED).reason));
            // Only the size bound is a spec field the admin may raise; no other message names it.
            assert_eq!(
                ready.message.contains("raise spec.maxResponseSize"),
                reason == "ResponseTooLarge",
                "{}",
                ready.message
            );
        }
    }

    #[test]
    fn config_errors_say_whether_they_are_about_credentials() {
        let cases = [
            (
                ConfigError::SecretNotFound {
                    name: "jwt".into(),
                    what: "JWT signing key",
                },
                "SecretNotFound",
                "False",
            ),
            (
                ConfigError::SecretNotFound {
                    name: "ca".into(),
                    what: "CA bundle",
                },
                "SecretNotFound",
                "Unknown",
            ),
            (
                ConfigError::TokenNotUtf8 {
                    name: "t".into(),
                    key: "token".into(),
                },
                "TokenNotUTF8",
                "False",
            ),
            (
                ConfigError::InvalidEndpoint {
                    endpoint: "x".into(),
                    detail: "no scheme".into(),
                },
                "InvalidEndpoint",
                "Unknown",
            ),
            (
                ConfigError::PollIntervalOutOfRange {
                    interval: Duration::from_millis(1),
                },
                "PollIntervalOutOfRange",
                "Unknown",
            ),
        ];
        for (error, reason, auth) in cases {
            let s = desired(
                None,
                Some(1),
                &Observation::Failed(Failure::config(&error)),
                at(1),
            );
            assert_eq!(cond(&s, READY).reason, reason);
            assert_eq!(cond(&s, READY).message, error.to_string());
            assert_eq!(cond(&s, AUTHENTICATED).status, auth, "{error}");
        }
    }

    #[test]
    fn poller_failures_keep_the_pollers_reason() {
        let f = Failure::poller("Timeout", "jobs: no answer within 30s");
        assert_eq!(f.reason, "Timeout");
        assert_eq!(f.auth, AuthState::Accepted);
        assert!(f.message.contains("jobs: no answer"));
        assert_eq!(
            Failure::poller("Unauthorized", "x").auth,
            AuthState::Rejected
        );
        assert!(!f.message.contains("maxResponseSize"), "{}", f.message);
        let large = Failure::poller(
            "ResponseTooLarge",
            "slurmrestd's answer to get_nodes is larger than the 33554432-byte limit",
        );
        assert!(
            large.message.contains("get_nodes")
                && large.message.ends_with("raise spec.maxResponseSize"),
            "{}",
            large.message
        );
    }

    #[test]
    fn refused_credentials_are_named_other_failures_are_not() {
        let who = || {
            Some("tokens minted for Slurm user \"slurm\" with the key in Secret \"jwt\"".to_owned())
        };
        let refused = Failure::poller("Unauthorized", "HTTP 401").naming(who());
        assert!(
            refused.message.ends_with(
                "(the credentials: tokens minted for Slurm user \"slurm\" with the key in Secret \"jwt\")"
            ),
            "{}",
            refused.message
        );
        let s = desired(None, Some(1), &Observation::Failed(refused.clone()), at(1));
        assert_eq!(cond(&s, AUTHENTICATED).message, refused.message);
        for reason in ["Timeout", "Unreachable", "SecretNotFound"] {
            let other = Failure::poller(reason, "x");
            assert_eq!(other.clone().naming(who()), other, "{reason}");
        }
        // No usable spec, nothing to name.
        let plain = Failure::poller("Unauthorized", "x");
        assert_eq!(plain.clone().naming(None), plain);
    }

    #[test]
    fn a_failure_drops_observations_but_keeps_the_last_contact_and_cluster() {
        let ok = desired(None, Some(1), &connected(), at(100));
        let down = desired(
            Some(&ok),
            Some(1),
            &failed("Unreachable", AuthState::Unknown),
            at(200),
        );
        assert_eq!(down.cluster_name.as_deref(), Some("local"));
        assert_eq!(down.slurm_release, None);
        assert_eq!(down.nodes, None);
        assert!(down.partitions.is_empty());
        assert_eq!(down.last_contact_time, Some(at(100)));
        // Ready flipped: its time moves. Authenticated went True -> Unknown: its time moves too.
        assert_eq!(cond(&down, READY).last_transition_time, at(200));
        assert_eq!(cond(&down, AUTHENTICATED).status, "Unknown");
    }

    #[test]
    fn transition_times_are_stable_while_the_status_stays() {
        let first = desired(
            None,
            Some(1),
            &failed("Unreachable", AuthState::Unknown),
            at(10),
        );
        let second = desired(
            Some(&first),
            Some(1),
            &failed("Timeout", AuthState::Unknown),
            at(20),
        );
        assert_eq!(cond(&second, READY).reason, "Timeout");
        assert_eq!(cond(&second, READY).last_transition_time, at(10));
        let same = desired(
            Some(&second),
            Some(1),
            &failed("Timeout", AuthState::Unknown),
            at(30),
        );
        assert!(!changed(Some(&second), &same), "nothing to write");
        let up = desired(Some(&same), Some(1), &connected(), at(40));
        assert_eq!(cond(&up, READY).last_transition_time, at(40));
    }

    #[test]
    fn last_contact_is_refreshed_at_most_every_granule() {
        let first = desired(None, Some(1), &connected(), at(1000));
        let soon = desired(Some(&first), Some(1), &connected(), at(1010));
        assert_eq!(soon.last_contact_time, Some(at(1000)));
        assert!(!changed(Some(&first), &soon));
        let later = desired(
            Some(&first),
            Some(1),
            &connected(),
            at(1000 + LAST_CONTACT_GRANULARITY_SECS),
        );
        assert_eq!(
            later.last_contact_time,
            Some(at(1000 + LAST_CONTACT_GRANULARITY_SECS))
        );
        assert!(changed(Some(&first), &later));
    }

    #[test]
    fn changed_ignores_ordering_only() {
        let s = desired(None, Some(1), &connected(), at(1));
        let mut shuffled = s.clone();
        shuffled.conditions.reverse();
        shuffled.partitions.reverse();
        assert!(!changed(Some(&s), &shuffled));
        assert!(changed(None, &s));
        let mut other = s.clone();
        other.observed_generation = Some(2);
        assert!(changed(Some(&s), &other));
        let mut foreign = s.clone();
        foreign
            .conditions
            .push(condition::new("Other", true, "Because", "", None, at(1)));
        assert!(
            changed(Some(&foreign), &s),
            "unknown conditions are dropped"
        );
    }

    #[test]
    fn events_are_published_on_ready_transitions() {
        let down = desired(
            None,
            Some(1),
            &failed("SecretNotFound", AuthState::Rejected),
            at(1),
        );
        let only = |notices: Vec<Notice>| {
            assert_eq!(notices.len(), 1, "{notices:?}");
            notices.into_iter().next().unwrap()
        };
        let n = only(notice(None, &down));
        assert!(n.warning);
        assert_eq!(n.reason, "SecretNotFound");
        assert_eq!(n.note, "it broke");
        assert_eq!(notice(Some(&down), &down), []);
        let other = desired(
            Some(&down),
            Some(1),
            &failed("Unreachable", AuthState::Unknown),
            at(2),
        );
        assert_eq!(only(notice(Some(&down), &other)).reason, "Unreachable");
        let up = desired(Some(&other), Some(1), &connected(), at(3));
        let n = only(notice(Some(&other), &up));
        assert!(!n.warning);
        assert_eq!(n.reason, "Connected");
        assert_eq!(notice(Some(&up), &up), []);
    }

    #[test]
    fn long_messages_are_cut_on_a_char_boundary() {
        let message = "é".repeat(MAX_MESSAGE);
        let cut = truncate(message);
        assert!(cut.len() <= MAX_MESSAGE, "{}", cut.len());
        assert!(cut.ends_with('…'));
    }
}
