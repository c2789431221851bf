//! What this process did that the SlurmJob controller's cache may not show yet: the Slurm jobs
//! it submitted, by tag ([`Submissions`]), the job ids its status writes named
//! ([`StatusWrites`]), and the SlurmJobs it gave the finalizer ([`TakenOn`]; the patch itself:
//! `cached_writes::FinalizerWrites`).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use crate::controller::cached_writes::{CachedWrites, FinalizerWrites};
use crate::controller::kit::Backoffs;
use crate::crd::slurmjob::{Phase, SlurmJobStatus};
use crate::slurm::tag::OwnerTag;

/// Jobs this process submitted, by tag: covers the time between a submit and the next index
/// sync, when neither the status (not written yet) nor the index knows the job.
///
/// Ordered by uid, then generation: a deleted SlurmJob's tags are one range. A scan of every
/// tag per deletion made deleting 100 000 SlurmJobs quadratic, under the lock every submit takes.
///
/// A submit that got no answer saying whether slurmctld made the job (a timeout, a connection
/// lost mid-request, an answer that cannot be read) is recorded as [`Submitted::InDoubt`]: until
/// the index has listed the cluster's jobs past it, neither the index nor this map can show that
/// job, and a second submit would make a second one.
#[derive(Debug, Default)]
pub struct Submissions {
    by_tag: Mutex<BTreeMap<OwnerTag, Submitted>>,
}

/// What this process knows of its last submit of a tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Submitted {
    /// Slurm answered with this job id.
    Job(u32),
    /// No answer that says whether a job was made.
    InDoubt(Doubt),
    /// The submit made no job, at `at`: Slurm refused it over a limit of its accounting or QoS
    /// policy (`SubmitLimited`), or it failed before any could be made (credentials refused:
    /// `SubmitFailed`). The checks before that submit covered every earlier one, so while this
    /// process still acts as it did then (`Context::acting_since`: no other leader submitted
    /// since), a retry needs no accounting search for them.
    NoJob {
        acting_since: DateTime<Utc>,
        at: Instant,
    },
}

/// How long after a submit that made no job a reconcile does not try again: the first delay
/// of the SlurmJob's backoff, which the retries follow. The finalizer's own change triggers a
/// reconcile right after a new SlurmJob's first submit, and would otherwise send a second one.
pub const NO_JOB_SETTLE: Duration = Backoffs::MIN;

/// A submit whose outcome is unknown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Doubt {
    /// When the submit failed: a job it made is in any listing that began some time after.
    pub since: DateTime<Utc>,
    /// Why (the error's category and text), for the condition that says what the job waits for.
    pub error: String,
}

impl Submissions {
    /// The job id this process's submit of `tag` returned.
    pub fn get(&self, tag: &OwnerTag) -> Option<u32> {
        let map = self.by_tag.lock().unwrap_or_else(|p| p.into_inner());
        match map.get(tag) {
            Some(Submitted::Job(id)) => Some(*id),
            _ => None,
        }
    }

    pub fn record(&self, tag: &OwnerTag, job_id: u32) {
        self.insert(tag, Submitted::Job(job_id));
    }

    /// What the last submit of `tag` left. A [`Submitted::NoJob`] is read for its own tag only
    /// (the wait before its retry): older generations' are forgotten, so a SlurmJob edited again
    /// and again while every submit fails keeps one entry, not one per edit.
    fn insert(&self, tag: &OwnerTag, submitted: Submitted) {
        let mut map = self.by_tag.lock().unwrap_or_else(|p| p.into_inner());
        let older: Vec<OwnerTag> = map
            .range(OwnerTag::new(tag.uid(), i64::MIN)..tag.clone())
            .filter(|(_, submitted)| matches!(submitted, Submitted::NoJob { .. }))
            .map(|(tag, _)| tag.clone())
            .collect();
        for older in older {
            map.remove(&older);
        }
        map.insert(tag.clone(), submitted);
    }

    /// The submit of `tag` failed without saying whether a job was made.
    pub fn record_doubt(&self, tag: &OwnerTag, doubt: Doubt) {
        self.insert(tag, Submitted::InDoubt(doubt));
    }

    /// The submit of `tag` made no job (refused over a limit, or failed before any could be
    /// made) at `at`, made while acting since `acting_since`.
    pub fn record_no_job(&self, tag: &OwnerTag, acting_since: DateTime<Utc>, at: Instant) {
        self.insert(tag, Submitted::NoJob { acting_since, at });
    }

    /// Whether this process's last submit of `tag` made no job while it acted
    /// since `acting_since` (the same start or gain of the Lease as now).
    pub fn no_job_since(&self, tag: &OwnerTag, acting_since: DateTime<Utc>) -> bool {
        self.no_job_at(tag, acting_since).is_some()
    }

    /// How long to wait before trying `tag` again, if this process's last submit of it made no
    /// job less than [`NO_JOB_SETTLE`] before `now`.
    pub fn no_job_retry_in(
        &self,
        tag: &OwnerTag,
        acting_since: DateTime<Utc>,
        now: Instant,
    ) -> Option<Duration> {
        let at = self.no_job_at(tag, acting_since)?;
        (at + NO_JOB_SETTLE)
            .checked_duration_since(now)
            .filter(|left| !left.is_zero())
    }

    fn no_job_at(&self, tag: &OwnerTag, acting_since: DateTime<Utc>) -> Option<Instant> {
        let map = self.by_tag.lock().unwrap_or_else(|p| p.into_inner());
        match map.get(tag) {
            Some(Submitted::NoJob {
                acting_since: since,
                at,
            }) if *since == acting_since => Some(*at),
            _ => None,
        }
    }

    /// The submit of `tag` in doubt made the job that was adopted since.
    pub fn clear_doubt(&self, tag: &OwnerTag) {
        let mut map = self.by_tag.lock().unwrap_or_else(|p| p.into_inner());
        if matches!(map.get(tag), Some(Submitted::InDoubt(_))) {
            map.remove(tag);
        }
    }

    /// The doubt about this process's last submit of `tag`, if its outcome is unknown.
    pub fn doubt(&self, tag: &OwnerTag) -> Option<Doubt> {
        let map = self.by_tag.lock().unwrap_or_else(|p| p.into_inner());
        match map.get(tag) {
            Some(Submitted::InDoubt(doubt)) => Some(doubt.clone()),
            _ => None,
        }
    }

    /// The latest moment a submit for SlurmJob `uid` (any generation) failed without saying
    /// whether it made a job.
    pub fn doubt_since(&self, uid: &str) -> Option<DateTime<Utc>> {
        let map = self.by_tag.lock().unwrap_or_else(|p| p.into_inner());
        map.range(Self::tags_of(uid))
            .filter_map(|(_, submitted)| match submitted {
                Submitted::InDoubt(doubt) => Some(doubt.since),
                Submitted::Job(_) | Submitted::NoJob { .. } => None,
            })
            .max()
    }

    /// Every job id this process's submits for SlurmJob `uid` returned, of generation `from` on,
    /// lowest generation first.
    pub fn jobs_of(&self, uid: &str, from: i64) -> Vec<u32> {
        let map = self.by_tag.lock().unwrap_or_else(|p| p.into_inner());
        map.range(OwnerTag::new(uid, from)..=OwnerTag::new(uid, i64::MAX))
            .filter_map(|(_, submitted)| match submitted {
                Submitted::Job(id) => Some(*id),
                Submitted::InDoubt(_) | Submitted::NoJob { .. } => None,
            })
            .collect()
    }

    /// What this process's submits for SlurmJob `uid` left for generations `from` to `to`
    /// (inclusive), lowest generation first.
    pub fn between(&self, uid: &str, from: i64, to: i64) -> Vec<(i64, Submitted)> {
        if from > to {
            return Vec::new();
        }
        let map = self.by_tag.lock().unwrap_or_else(|p| p.into_inner());
        map.range(OwnerTag::new(uid, from)..=OwnerTag::new(uid, to))
            .map(|(tag, submitted)| (tag.generation(), submitted.clone()))
            .collect()
    }

    fn tags_of(uid: &str) -> std::ops::RangeInclusive<OwnerTag> {
        OwnerTag::new(uid, i64::MIN)..=OwnerTag::new(uid, i64::MAX)
    }

    /// A status of SlurmJob `uid` now names the run of `generation` (`submittedGeneration`):
    /// what the submits of earlier generations left is read no more (the submit step reads
    /// from the first generation no status names a run of, `plan::to_cancel` from the one it
    /// names), so it is forgotten. Without this a SlurmJob re-run again and again kept one
    /// entry per run for as long as it existed. A doubt is kept: deleting the SlurmJob asks
    /// whether a listing has passed it ([`Self::doubt_since`]), and doubts are rare.
    pub fn forget_before(&self, uid: &str, generation: i64) {
        let mut map = self.by_tag.lock().unwrap_or_else(|p| p.into_inner());
        let older: Vec<OwnerTag> = map
            .range(OwnerTag::new(uid, i64::MIN)..OwnerTag::new(uid, generation))
            .filter(|(_, submitted)| !matches!(submitted, Submitted::InDoubt(_)))
            .map(|(tag, _)| tag.clone())
            .collect();
        for older in older {
            map.remove(&older);
        }
    }

    /// Forget the tags of `uid` (the SlurmJob is gone).
    pub fn forget_uid(&self, uid: &str) {
        let mut map = self.by_tag.lock().unwrap_or_else(|p| p.into_inner());
        let tags: Vec<OwnerTag> = map
            .range(Self::tags_of(uid))
            .map(|(tag, _)| tag.clone())
            .collect();
        for tag in tags {
            map.remove(&tag);
        }
    }

    /// Keep only the tags of the uids `live` holds (a relist: the others are gone).
    pub fn keep_only(&self, live: impl Fn(&str) -> bool) {
        let mut map = self.by_tag.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|tag, _| live(tag.uid()));
    }

    pub fn len(&self) -> usize {
        self.by_tag.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The SlurmJobs this process gave the finalizer, by uid, with the moment it began to act then
/// (`Context::acting_since`). Every process adds the finalizer before any submit, so no earlier
/// process (or leader) submitted for them: they wait out no takeover, also in a later
/// reconcile (the first one's submit may have waited for the SlurmCluster to connect). Only
/// within [`TakenOn::WINDOW`] of a start or gain, the only time a takeover is waited out: the
/// set holds the SlurmJobs of those minutes, not every one.
#[derive(Debug, Default)]
pub struct TakenOn {
    by_uid: Mutex<HashMap<String, DateTime<Utc>>>,
}

impl TakenOn {
    /// How long after a start or gain the SlurmJobs given the finalizer are remembered.
    pub const WINDOW: chrono::TimeDelta = chrono::TimeDelta::minutes(5);

    /// This process gave SlurmJob `uid` the finalizer at `now`, acting since `acting_since`.
    pub fn record(&self, uid: &str, acting_since: DateTime<Utc>, now: DateTime<Utc>) {
        if now < acting_since + Self::WINDOW {
            let mut map = self.by_uid.lock().unwrap_or_else(|p| p.into_inner());
            map.insert(uid.to_owned(), acting_since);
        }
    }

    /// Whether this process gave SlurmJob `uid` the finalizer since it acts (`acting_since`):
    /// not before a gain of the Lease it lost since, when another leader may have submitted.
    pub fn since(&self, uid: &str, acting_since: DateTime<Utc>) -> bool {
        let map = self.by_uid.lock().unwrap_or_else(|p| p.into_inner());
        map.get(uid) == Some(&acting_since)
    }

    /// Forget `uid` (the SlurmJob is gone).
    pub fn forget_uid(&self, uid: &str) {
        let mut map = self.by_uid.lock().unwrap_or_else(|p| p.into_inner());
        map.remove(uid);
    }

    /// Keep only the uids `live` holds (a relist: the others are gone).
    pub fn keep_only(&self, live: impl Fn(&str) -> bool) {
        let mut map = self.by_uid.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|uid, _| live(uid));
    }

    pub fn len(&self) -> usize {
        self.by_uid.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What each SlurmJob was last told of a failure that retries (per topic: its submit, its
/// output Pod): a retry that fails the same way tells nothing again. Each retry was a Warning,
/// an Event write, for as long as the failure lasted (thousands of SlurmJobs in a namespace
/// over its quota, or a long slurmrestd outage, wrote Events without end). Forgotten when the
/// topic succeeds or the SlurmJob is gone.
#[derive(Debug, Default)]
pub struct Told(Mutex<HashMap<(String, &'static str), String>>);

impl Told {
    /// Whether failure `what` of `topic` is news for SlurmJob `uid`; remembered if so.
    pub fn news(&self, uid: &str, topic: &'static str, what: &str) -> bool {
        let mut told = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let key = (uid.to_owned(), topic);
        if told.get(&key).is_some_and(|last| last == what) {
            return false;
        }
        told.insert(key, what.to_owned());
        true
    }

    /// `topic` of SlurmJob `uid` succeeded: its next failure is news again.
    pub fn succeeded(&self, uid: &str, topic: &'static str) {
        let mut told = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if !told.is_empty() {
            told.remove(&(uid.to_owned(), topic));
        }
    }

    pub fn forget_uid(&self, uid: &str) {
        let mut told = self.0.lock().unwrap_or_else(|e| e.into_inner());
        told.retain(|(of, _), _| of != uid);
    }

    pub fn keep_only(&self, live: impl Fn(&str) -> bool) {
        let mut told = self.0.lock().unwrap_or_else(|e| e.into_inner());
        told.retain(|(uid, _), _| live(uid));
    }

    pub fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Everything this process remembers per SlurmJob, by uid. Forgotten when the SlurmJob is gone
/// from the cache, whoever let it go: the operator's own cleanup forgets it too, but a SlurmJob
/// whose finalizer someone else removed, or that another leader cleaned up while this process
/// followed, has no cleanup here, and its entries would stay for the life of the process.
#[derive(Debug, Clone, Default)]
pub struct Remembered {
    pub submissions: Arc<Submissions>,
    pub status_writes: Arc<StatusWrites>,
    pub taken_on: Arc<TakenOn>,
    pub told: Arc<Told>,
    /// Shared with the other controllers (uids are unique across kinds).
    pub finalizer_writes: Arc<FinalizerWrites>,
    /// The failures counted for each SlurmJob's retries, by namespace and name (shared with
    /// the other controllers, each under its own keys; the caller forgets a SlurmJob's by its
    /// key): one deleted right after a failed reconcile, before any success reset it, would
    /// keep its count for the life of the process, and pass it on to the next SlurmJob of
    /// that name.
    pub backoff: Arc<Backoffs>,
}

impl Remembered {
    /// Forget SlurmJob `uid`: it is gone.
    pub fn forget_uid(&self, uid: &str) {
        self.submissions.forget_uid(uid);
        self.status_writes.forget_uid(uid);
        self.taken_on.forget_uid(uid);
        self.told.forget_uid(uid);
        self.finalizer_writes.forget_uid(uid);
    }

    /// After a relist (a SlurmJob deleted while the watch was away has no Delete event): keep
    /// only the SlurmJobs `live` holds. The finalizer patches, of every kind, only while the
    /// cache may still lag them (at `now`).
    pub fn keep_only(&self, live: impl Fn(&str) -> bool, now: Instant) {
        self.submissions.keep_only(&live);
        self.status_writes.keep_only(&live);
        self.taken_on.keep_only(&live);
        self.told.keep_only(&live);
        self.finalizer_writes.forget_expired(now);
    }

    /// How many entries all of it holds.
    pub fn len(&self) -> usize {
        self.submissions.len()
            + self.status_writes.len()
            + self.taken_on.len()
            + self.told.len()
            + self.finalizer_writes.len()
            + self.backoff.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What a status says of its submits and its job: the job id, the generation Slurm refused,
/// the generation the status answers for, and the phase. A reconcile working from an older one
/// would submit again: after a refusal; or after an edit of a running job, applied in place or
/// set aside (`SpecApplied`), once the job has ended: from the status before the edit, the edit
/// looks like one of a finished job, which runs it again. From an older phase (or before Slurm
/// deemed a dependency never satisfied) it would write the transition again and announce it a
/// second time (`Started`, `Finished`, `DependencyNeverSatisfied`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Outcome {
    pub job_id: Option<i64>,
    pub rejected_generation: Option<i64>,
    pub observed_generation: Option<i64>,
    pub phase: Phase,
    pub never_satisfied: bool,
}

impl Outcome {
    pub fn of(status: &SlurmJobStatus) -> Self {
        Self {
            job_id: status.job_id,
            rejected_generation: status.rejected_generation,
            observed_generation: status.observed_generation,
            phase: status.phase,
            never_satisfied: super::status::never_starts(status),
        }
    }
}

/// Status writes of this process that changed a SlurmJob's [`Outcome`] (a new job id, a refused
/// submit, a generation answered). A reconcile that runs before the watch brings the write back
/// (the submit's own reconcile adds the finalizer, and the finalizer's change triggers the next
/// one at once) would otherwise work from the status as it was before the submit: write it
/// again (a second status write per SlurmJob, the job announced as adopted), or, after a
/// refused submit, submit again.
pub type StatusWrites = CachedWrites<Outcome>;

impl CachedWrites<Outcome> {
    /// Whether the cached status of `uid`, saying `cached`, is older than this process's last
    /// write of it (at `now`).
    pub fn cache_lags(&self, uid: &str, cached: Outcome, now: Instant) -> bool {
        self.lags(uid, now, |written| *written != cached)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A refusal over a limit holds a retry back for what is left of [`NO_JOB_SETTLE`], and
    /// spares the retry's accounting search, only for the same tag and the same start or gain
    /// of the Lease; a later submit of the tag replaces it.
    #[test]
    fn a_refusal_over_a_limit_holds_back_only_its_own_tag_and_leadership() {
        let submissions = Submissions::default();
        let tag = OwnerTag::new("u", 1);
        let acting = DateTime::from_timestamp(100, 0).unwrap();
        let regained = DateTime::from_timestamp(200, 0).unwrap();
        let at = Instant::now();
        submissions.record_no_job(&tag, acting, at);
        let half = Duration::from_millis(500);
        assert_eq!(
            submissions.no_job_retry_in(&tag, acting, at + half),
            Some(NO_JOB_SETTLE - half)
        );
        assert_eq!(
            submissions.no_job_retry_in(&tag, acting, at + NO_JOB_SETTLE),
            None
        );
        assert!(submissions.no_job_since(&tag, acting));
        assert_eq!(submissions.no_job_retry_in(&tag, regained, at), None);
        assert!(!submissions.no_job_since(&tag, regained));
        assert!(!submissions.no_job_since(&OwnerTag::new("u", 2), acting));
        assert_eq!(submissions.get(&tag), None);
        assert!(submissions.jobs_of("u", 1).is_empty());
        assert_eq!(submissions.doubt_since("u"), None);
        submissions.record(&tag, 7);
        assert!(!submissions.no_job_since(&tag, acting));
        assert_eq!(submissions.no_job_retry_in(&tag, acting, at), None);
    }

    /// A tenant who edits a SlurmJob over and over while each submit makes no job (a queue
    /// limit of its Slurm user) leaves one entry, not one per edit; the jobs and doubts of
    /// earlier generations, and other SlurmJobs' entries, stay.
    #[test]
    fn submits_without_a_job_leave_one_entry_per_slurmjob() {
        let submissions = Submissions::default();
        let acting = DateTime::from_timestamp(100, 0).unwrap();
        let doubt = Doubt {
            since: acting,
            error: "Timeout".into(),
        };
        submissions.record(&OwnerTag::new("a", 1), 10);
        submissions.record_doubt(&OwnerTag::new("a", 2), doubt.clone());
        submissions.record_no_job(&OwnerTag::new("ab", 1), acting, Instant::now());
        for generation in 3..10_000 {
            submissions.record_no_job(&OwnerTag::new("a", generation), acting, Instant::now());
        }
        assert_eq!(submissions.len(), 4);
        assert!(submissions.no_job_since(&OwnerTag::new("a", 9_999), acting));
        assert!(submissions.no_job_since(&OwnerTag::new("ab", 1), acting));
        assert_eq!(
            submissions.between("a", i64::MIN, 9_998),
            vec![(1, Submitted::Job(10)), (2, Submitted::InDoubt(doubt))]
        );
        // A job for the next edit leaves no NoJob of the SlurmJob behind.
        submissions.record(&OwnerTag::new("a", 10_000), 11);
        assert_eq!(submissions.len(), 4);
        assert!(!submissions.no_job_since(&OwnerTag::new("a", 9_999), acting));
    }

    /// A SlurmJob re-run again and again keeps the entries of its latest run on, and its
    /// doubts: once a status names a run, the earlier runs' jobs and refusals are forgotten,
    /// and no other SlurmJob's.
    #[test]
    fn a_status_naming_a_run_forgets_the_earlier_runs_submits() {
        let submissions = Submissions::default();
        let acting = DateTime::from_timestamp(100, 0).unwrap();
        let doubt = Doubt {
            since: acting,
            error: "Timeout".into(),
        };
        submissions.record_doubt(&OwnerTag::new("a", 1), doubt.clone());
        submissions.record(&OwnerTag::new("ab", 1), 5);
        for generation in 2..1_000 {
            submissions.record(&OwnerTag::new("a", generation), generation as u32 + 10);
            submissions.forget_before("a", generation);
        }
        assert_eq!(submissions.len(), 3, "the last run, the doubt, ab's");
        assert_eq!(submissions.jobs_of("a", i64::MIN), vec![1_009]);
        assert_eq!(
            submissions.between("a", i64::MIN, 1),
            vec![(1, Submitted::InDoubt(doubt))]
        );
        assert_eq!(submissions.jobs_of("ab", i64::MIN), vec![5]);
        // A refusal of the next edit stays until a status names a run past it.
        submissions.record_no_job(&OwnerTag::new("a", 1_000), acting, Instant::now());
        submissions.forget_before("a", 999);
        assert!(submissions.no_job_since(&OwnerTag::new("a", 1_000), acting));
        assert_eq!(submissions.get(&OwnerTag::new("a", 999)), Some(1_009));
    }

    /// What an edited SlurmJob's earlier generations left here: by generation, of that uid only.
    #[test]
    fn the_submits_of_a_range_of_generations_are_one_lookup() {
        let submissions = Submissions::default();
        let doubt = Doubt {
            since: DateTime::from_timestamp(100, 0).unwrap(),
            error: "Timeout".into(),
        };
        submissions.record(&OwnerTag::new("a", 1), 10);
        submissions.record_doubt(&OwnerTag::new("a", 3), doubt.clone());
        submissions.record(&OwnerTag::new("a", 5), 11);
        submissions.record(&OwnerTag::new("ab", 2), 12);
        assert_eq!(
            submissions.between("a", 1, 4),
            vec![(1, Submitted::Job(10)), (3, Submitted::InDoubt(doubt))]
        );
        assert_eq!(submissions.between("a", 4, 4), vec![]);
        assert_eq!(submissions.between("a", 5, 1), vec![]);
        assert_eq!(
            submissions.between("a", i64::MIN, i64::MAX).len(),
            3,
            "not ab's"
        );
    }

    #[test]
    fn submissions_are_remembered_by_tag_and_forgotten_by_uid_and_no_others() {
        let submissions = Submissions::default();
        assert_eq!(submissions.get(&OwnerTag::new("a", 1)), None);
        // "a" is a prefix of "ab": a range by uid must not reach into it.
        for (uid, generation, job_id) in [("a", 1, 10), ("a", 2, 11), ("ab", 1, 12), ("b", -1, 13)]
        {
            submissions.record(&OwnerTag::new(uid, generation), job_id);
        }
        submissions.record(&OwnerTag::new("a", i64::MAX), 14);
        submissions.forget_uid("a");
        assert_eq!(submissions.len(), 2);
        assert_eq!(submissions.get(&OwnerTag::new("a", 1)), None);
        assert_eq!(submissions.get(&OwnerTag::new("a", i64::MAX)), None);
        assert_eq!(submissions.get(&OwnerTag::new("ab", 1)), Some(12));
        assert_eq!(submissions.get(&OwnerTag::new("b", -1)), Some(13));
        submissions.forget_uid("b");
        assert_eq!(submissions.get(&OwnerTag::new("ab", 1)), Some(12));
        assert_eq!(submissions.len(), 1);
    }

    #[test]
    fn a_submit_in_doubt_is_no_job_id_until_a_submit_answers() {
        let submissions = Submissions::default();
        let at = |s| DateTime::from_timestamp(s, 0).unwrap();
        let doubt = |s| Doubt {
            since: at(s),
            error: "Timeout".into(),
        };
        submissions.record_doubt(&OwnerTag::new("a", 1), doubt(100));
        submissions.record_doubt(&OwnerTag::new("a", 2), doubt(200));
        submissions.record_doubt(&OwnerTag::new("ab", 1), doubt(300));
        assert_eq!(submissions.get(&OwnerTag::new("a", 1)), None);
        assert_eq!(submissions.doubt(&OwnerTag::new("a", 1)), Some(doubt(100)));
        // The latest of the uid's, and none of "ab"'s.
        assert_eq!(submissions.doubt_since("a"), Some(at(200)));
        submissions.record(&OwnerTag::new("a", 2), 7);
        assert_eq!(submissions.get(&OwnerTag::new("a", 2)), Some(7));
        assert_eq!(submissions.doubt(&OwnerTag::new("a", 2)), None);
        assert_eq!(submissions.doubt_since("a"), Some(at(100)));
        submissions.clear_doubt(&OwnerTag::new("a", 2));
        assert_eq!(
            submissions.get(&OwnerTag::new("a", 2)),
            Some(7),
            "a job id stays"
        );
        submissions.clear_doubt(&OwnerTag::new("a", 1));
        assert_eq!(submissions.doubt_since("a"), None);
        submissions.forget_uid("a");
        assert_eq!(submissions.get(&OwnerTag::new("a", 2)), None);
        assert_eq!(submissions.doubt_since("ab"), Some(at(300)));
    }

    /// A SlurmJob this process gave the finalizer is remembered for as long as it acts since
    /// then (not across a loss and gain of the Lease), and only in the first minutes of acting.
    #[test]
    fn slurmjobs_taken_on_are_remembered_while_the_same_acting_lasts() {
        let taken = TakenOn::default();
        let at = |s: i64| DateTime::<Utc>::from_timestamp(s, 0).unwrap();
        taken.record("a", at(100), at(130));
        assert!(taken.since("a", at(100)));
        assert!(!taken.since("a", at(200)), "a later gain of the Lease");
        assert!(!taken.since("b", at(100)), "another SlurmJob");
        taken.forget_uid("a");
        assert!(!taken.since("a", at(100)), "forgotten with the SlurmJob");
        let late = at(100) + TakenOn::WINDOW;
        taken.record("c", at(100), late);
        assert!(!taken.since("c", at(100)), "past the window: not kept");
    }

    #[test]
    fn a_write_the_cache_has_not_shown_lags_until_it_shows_or_is_taken_as_lost() {
        let writes = StatusWrites::default();
        let t0 = Instant::now();
        let job = |id: i64| Outcome {
            job_id: Some(id),
            ..Outcome::default()
        };
        let none = Outcome::default();
        assert!(!writes.cache_lags("a", none, t0), "nothing written");
        writes.record("a", job(7), t0);
        assert!(
            writes.cache_lags("a", none, t0),
            "the cache still without the id"
        );
        assert!(
            writes.cache_lags("a", job(6), t0 + Duration::from_secs(1)),
            "an earlier run's id"
        );
        assert!(!writes.cache_lags("b", none, t0), "another SlurmJob");
        assert!(!writes.cache_lags("a", job(7), t0), "shown");
        assert!(writes.is_empty(), "forgotten once shown");
        assert!(
            !writes.cache_lags("a", none, t0),
            "a later reset is not ours to hide"
        );

        writes.record("a", job(8), t0);
        let late = t0 + StatusWrites::LAG_LIMIT;
        assert!(!writes.cache_lags("a", none, late), "taken as lost");
        assert!(writes.is_empty());

        writes.record("a", job(9), t0);
        writes.forget_uid("a");
        assert!(!writes.cache_lags("a", none, t0));

        // A refused submit: no job id, the refused generation.
        let refused = Outcome {
            rejected_generation: Some(1),
            ..Outcome::default()
        };
        writes.record("a", refused, t0);
        assert!(
            writes.cache_lags("a", none, t0),
            "the cache not showing the refusal yet"
        );
        assert!(!writes.cache_lags("a", refused, t0), "shown");
        assert!(writes.is_empty());

        // An edit of a running job answered (applied in place, or set aside): the same job id,
        // a later generation observed.
        let observed = |generation: i64| Outcome {
            job_id: Some(7),
            observed_generation: Some(generation),
            ..Outcome::default()
        };
        writes.record("a", observed(2), t0);
        assert!(
            writes.cache_lags("a", observed(1), t0),
            "the cache still at the generation before the edit"
        );
        assert!(!writes.cache_lags("a", observed(2), t0), "shown");

        // A transition of the same run (it started): a reconcile from the phase before would
        // write and announce it again.
        let phase = |phase: Phase| Outcome {
            phase,
            ..observed(2)
        };
        writes.record("a", phase(Phase::Running), t0);
        assert!(
            writes.cache_lags("a", phase(Phase::Pending), t0),
            "the cache still before the start"
        );
        assert!(!writes.cache_lags("a", phase(Phase::Running), t0), "shown");
    }
}
