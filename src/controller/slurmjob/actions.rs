//! The two side effects of a SlurmJob on Slurm, shared by the controller and the local runner.

use crate::slurm::types::{Job, SubmitRequest};
use crate::slurm::{SlurmClient, SlurmError};

/// How a submit ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Submission {
    /// A job carrying this generation's tag already existed (an earlier attempt whose answer
    /// or status write was lost): it is adopted, not submitted again.
    Adopted { job_id: u32 },
    /// Submitted now.
    Submitted { job_id: u32, warnings: Vec<String> },
}

impl Submission {
    pub fn job_id(&self) -> u32 {
        match self {
            Self::Adopted { job_id } | Self::Submitted { job_id, .. } => *job_id,
        }
    }
}

/// The job, among `jobs`, that carries exactly `tag` in its comment (the lowest id when an
/// outside actor duplicated it: the first one is the one we submitted).
pub fn find_tagged<'a>(jobs: impl IntoIterator<Item = &'a Job>, tag: &str) -> Option<u32> {
    jobs.into_iter()
        .filter(|job| job.comment.as_deref() == Some(tag))
        .map(|job| job.array_job_id.unwrap_or(job.job_id))
        .min()
}

/// Submit `request` unless `existing` (the caller's authoritative lookup of the request's tag)
/// found its job already. Never retried: a lost answer is resolved by the next lookup.
pub async fn submit_once(
    client: &SlurmClient,
    existing: Option<u32>,
    request: &SubmitRequest,
) -> Result<Submission, SlurmError> {
    if let Some(job_id) = existing {
        return Ok(Submission::Adopted { job_id });
    }
    let submitted = client.submit_job(request).await?;
    Ok(Submission::Submitted {
        job_id: submitted.job_id,
        warnings: submitted.warnings,
    })
}

/// How a cancel ended; all three mean "nothing of this job runs any more or will".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancellation {
    Cancelled,
    AlreadyFinished,
    /// slurmctld does not know the job (it ended long ago, or never existed).
    Gone,
}

/// Cancel `job_id`, treating "already finished" and "unknown" as done. Errors are only those
/// that leave the job's fate unknown (unreachable, unauthorized, ...): the caller must retry.
pub async fn cancel(client: &SlurmClient, job_id: u32) -> Result<Cancellation, SlurmError> {
    match client.cancel_job(job_id).await {
        Ok(()) => Ok(Cancellation::Cancelled),
        Err(SlurmError::AlreadyFinished { .. }) => Ok(Cancellation::AlreadyFinished),
        Err(SlurmError::NotFound { .. }) => Ok(Cancellation::Gone),
        Err(other) => Err(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slurm::types::JobState;

    fn job(id: u32, comment: Option<&str>, array_job_id: Option<u32>) -> Job {
        Job {
            job_id: id,
            state: JobState::from_strings(&["PENDING"]),
            comment: comment.map(str::to_owned),
            array_job_id,
            ..Job::bare()
        }
    }

    #[test]
    fn tagged_job_is_found_by_exact_tag_and_arrays_by_their_array_id() {
        let jobs = [
            job(3, Some("slurm.rs/uid=a,generation=1"), None),
            job(4, Some("slurm.rs/uid=a,generation=2"), None),
            job(5, Some("slurm.rs/uid=a,generation=10"), None),
            job(9, Some("slurm.rs/uid=b,generation=1"), Some(8)),
            job(8, Some("slurm.rs/uid=b,generation=1"), Some(8)),
        ];
        assert_eq!(find_tagged(&jobs, "slurm.rs/uid=a,generation=1"), Some(3));
        assert_eq!(find_tagged(&jobs, "slurm.rs/uid=a,generation=2"), Some(4));
        assert_eq!(find_tagged(&jobs, "slurm.rs/uid=b,generation=1"), Some(8));
        assert_eq!(find_tagged(&jobs, "slurm.rs/uid=c,generation=1"), None);
        assert_eq!(find_tagged(&[], "x"), None);
    }
}

/// What the cluster's accounting (slurmdbd) knows of a job slurmctld no longer holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Accounting {
    /// Its records (an array: one per task).
    Records(Vec<Job>),
    /// Accounting answers, but has no record of this job carrying our tag.
    NoRecord,
    /// This slurmrestd serves no accounting.
    Unavailable,
}

/// The accounting records of `job_id` that carry `tag` (slurmctld reuses ids after a reset, so
/// the tag tells ours apart). Records without any comment (a cluster that does not store them,
/// `AccountingStoreFlags=job_comment`) are taken when none carries a comment at all.
pub async fn accounting_records(
    client: &SlurmClient,
    job_id: u32,
    tag: &str,
) -> Result<Accounting, SlurmError> {
    let Some(records) = client.accounting_job(job_id).await? else {
        return Ok(Accounting::Unavailable);
    };
    let ours = |job: &Job| match job.comment.as_deref() {
        Some(comment) => comment == tag,
        None => records.iter().all(|r| r.comment.is_none()),
    };
    let ours: Vec<Job> = records.iter().filter(|job| ours(job)).cloned().collect();
    Ok(if ours.is_empty() {
        Accounting::NoRecord
    } else {
        Accounting::Records(ours)
    })
}

/// The job carrying `tag` in accounting, found by its name: what the index cannot show once
/// slurmctld dropped the job (`MinJobAge`). `None` also when the cluster has no accounting.
pub async fn find_in_accounting(
    client: &SlurmClient,
    name: &str,
    tag: &str,
) -> Result<Option<u32>, SlurmError> {
    Ok(client
        .accounting_jobs_named(name)
        .await?
        .and_then(|records| find_tagged(&records, tag)))
}
