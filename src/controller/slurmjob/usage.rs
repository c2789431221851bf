//! What an ended job used, for its status: sacct's numbers from the cluster's accounting
//! (elapsed and CPU time, largest resident memory, allocated and requested TRES) and the two
//! efficiencies seff computes from them. Pure.
//!
//! - CPU efficiency: CPU time over allocated CPUs × elapsed time.
//! - Memory efficiency: largest resident memory over the memory the job had: its allocated
//!   memory, or what it requested where the cluster does not allocate memory (a
//!   `SelectTypeParameters` without `CR_*_Memory` allocates none, and slurmdbd then lists
//!   memory among the requested TRES only).
//!
//! An array sums its tasks' times and TRES; its largest resident memory and memory efficiency
//! are those of the task that used the most, which is what an array's memory request must fit.

use std::collections::BTreeMap;
use std::time::Duration as StdDuration;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::crd::duration::Duration;
use crate::crd::slurmjob::JobUsage;
use crate::slurm::types::{Job, Tres, Usage};

/// How long after a job's end its usage is still asked of accounting (slurmdbd learns of the
/// end a moment after slurmctld, and may be down for a while): then the status goes without.
pub const PATIENCE: chrono::TimeDelta = chrono::TimeDelta::minutes(10);

/// When to ask accounting again for the usage of a job that ended `ago`: soon at first, then
/// seldom, then never ([`PATIENCE`]).
pub fn retry_after(ago: chrono::TimeDelta) -> Option<StdDuration> {
    // An end a little ahead of our clock (Slurm's is another host's) counts as just now.
    let ago = ago.max(chrono::TimeDelta::zero());
    if ago >= PATIENCE {
        None
    } else if ago < chrono::TimeDelta::seconds(30) {
        Some(StdDuration::from_secs(3))
    } else {
        Some(StdDuration::from_secs(30))
    }
}

/// The usage of a job from its accounting `records` (one for a plain job, one per task for an
/// array) and, for an array, each task's by task id. `None` until every record has ended and
/// carries its usage: slurmdbd may not have all of it yet.
pub fn of_records(records: &[Job]) -> Option<(JobUsage, BTreeMap<u32, JobUsage>)> {
    // A requeued run's record never ends (`PENDING+REQUEUED`): only each latest run counts.
    let records = &*super::phase::latest_runs(records);
    if records.is_empty()
        || records
            .iter()
            .any(|r| !r.state.base.is_finished() || r.usage.is_none())
    {
        return None;
    }
    let is_array = records.iter().any(|r| r.array_job_id.is_some());
    if !is_array {
        // Several records of one plain id (reused after a reset) were told apart by their tag
        // already; the last submitted is the run.
        let record = records.iter().max_by_key(|r| r.submit_time)?;
        return Some((of_job(record.usage.as_deref()?, true), BTreeMap::new()));
    }
    let mut tasks = BTreeMap::new();
    let mut total = Usage::default();
    let mut cpu_capacity = 0.0;
    let mut largest: Option<(u64, Option<i32>)> = None;
    for record in records {
        let Some(usage) = record.usage.as_deref() else {
            continue;
        };
        let task = of_job(usage, false);
        // Saturating: slurmdbd's numbers, which a broken record can make huge.
        total.elapsed = total.elapsed.saturating_add(usage.elapsed);
        total.cpu_time = total.cpu_time.saturating_add(usage.cpu_time);
        total.allocated = summed(&total.allocated, &usage.allocated);
        total.requested = summed(&total.requested, &usage.requested);
        cpu_capacity += cpus(usage) as f64 * usage.elapsed.as_secs_f64();
        if let Some(rss) = usage.max_rss_bytes
            && largest.is_none_or(|(max, _)| rss > max)
        {
            largest = Some((rss, task.memory_efficiency_percent));
        }
        if let Some(id) = record.array_task_id {
            tasks.insert(id, task);
        }
    }
    let mut summary = of_job(&total, true);
    summary.cpu_efficiency_percent = percent(total.cpu_time.as_secs_f64(), cpu_capacity);
    summary.max_rss = largest.map(|(rss, _)| memory(rss));
    summary.memory_efficiency_percent = largest.and_then(|(_, eff)| eff);
    Some((summary, tasks))
}

/// One record's usage; `tres` with the TRES lists (a task's leave them to the array's).
pub fn of_job(usage: &Usage, tres: bool) -> JobUsage {
    let elapsed = usage.elapsed;
    let memory_mib = Tres::count_of(&usage.allocated, "mem", None)
        .or_else(|| Tres::count_of(&usage.requested, "mem", None));
    let list = |list: &[Tres]| (tres && !list.is_empty()).then(|| Tres::list(list));
    JobUsage {
        elapsed: Some(Duration::from_secs(elapsed.as_secs())),
        cpu_time: Some(Duration::from_millis(
            u64::try_from(usage.cpu_time.as_millis()).unwrap_or(u64::MAX),
        )),
        max_rss: usage.max_rss_bytes.map(memory),
        allocated_tres: list(&usage.allocated),
        requested_tres: list(&usage.requested),
        cpu_efficiency_percent: percent(
            usage.cpu_time.as_secs_f64(),
            cpus(usage) as f64 * elapsed.as_secs_f64(),
        ),
        memory_efficiency_percent: usage
            .max_rss_bytes
            .zip(memory_mib)
            .and_then(|(rss, mib)| percent(rss as f64, mib as f64 * 1024.0 * 1024.0)),
    }
}

fn cpus(usage: &Usage) -> u64 {
    Tres::count_of(&usage.allocated, "cpu", None).unwrap_or_default()
}

/// `part` of `whole` in whole percent, rounded; `None` without a whole to compare with.
fn percent(part: f64, whole: f64) -> Option<i32> {
    if whole <= 0.0 || !part.is_finite() || !whole.is_finite() {
        return None;
    }
    let value = (part / whole * 100.0).round();
    // Bounded: a count Slurm got wrong must not overflow the field.
    Some(value.clamp(0.0, f64::from(i32::MAX)) as i32)
}

/// Bytes as a quantity in whole KiB, rounded up, as Kubernetes shows a node's memory.
fn memory(bytes: u64) -> Quantity {
    Quantity(format!("{}Ki", bytes.div_ceil(1024)))
}

/// `a` and `b` added up by TRES, in `a`'s order, then `b`'s new ones.
fn summed(a: &[Tres], b: &[Tres]) -> Vec<Tres> {
    let mut out = a.to_vec();
    for tres in b {
        match out
            .iter_mut()
            .find(|t| t.kind == tres.kind && t.name == tres.name)
        {
            Some(t) => t.count = t.count.saturating_add(tres.count),
            None => out.push(tres.clone()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slurm::types::JobState;

    fn tres(kind: &str, count: u64) -> Tres {
        Tres {
            kind: kind.into(),
            name: None,
            count,
        }
    }

    /// The numbers of two real jobs of the local Slurm (24.11, `seff` on them printed the same):
    /// one holding a 60 MB string for 4 s, one spinning a CPU for 3 s, each asking for 500 MiB.
    fn usage(cpu_micros: u64, elapsed: u64, rss: u64) -> Usage {
        Usage {
            elapsed: StdDuration::from_secs(elapsed),
            cpu_time: StdDuration::from_micros(cpu_micros),
            max_rss_bytes: Some(rss),
            allocated: vec![tres("cpu", 1), tres("node", 1), tres("billing", 1)],
            requested: vec![tres("cpu", 1), tres("mem", 500), tres("node", 1)],
        }
    }

    fn ended(id: u32, task: Option<u32>, usage: Usage) -> Job {
        Job {
            job_id: id,
            state: JobState::from_strings(&["COMPLETED"]),
            array_job_id: task.map(|_| 16),
            array_task_id: task,
            usage: Some(Box::new(usage)),
            ..Job::bare()
        }
    }

    #[test]
    fn seffs_numbers_for_a_plain_job() {
        let memory_hog = of_job(&usage(540_203, 5, 65_081_344), true);
        assert_eq!(memory_hog.cpu_efficiency_percent, Some(11)); // seff: 10.80%
        assert_eq!(memory_hog.memory_efficiency_percent, Some(12)); // seff: 12.41%
        assert_eq!(memory_hog.max_rss, Some(Quantity("63556Ki".into())));
        assert_eq!(
            memory_hog.elapsed.as_ref().map(Duration::as_str),
            Some("5s")
        );
        assert_eq!(
            memory_hog.cpu_time.as_ref().map(Duration::as_str),
            Some("540ms")
        );
        assert_eq!(
            memory_hog.allocated_tres.as_deref(),
            Some("cpu=1,node=1,billing=1")
        );
        assert_eq!(
            memory_hog.requested_tres.as_deref(),
            Some("cpu=1,mem=500M,node=1")
        );
        let spinner = of_job(&usage(2_895_505, 4, 3_219_456), true);
        assert_eq!(spinner.cpu_efficiency_percent, Some(72)); // seff: 72.39%
        assert_eq!(spinner.memory_efficiency_percent, Some(1)); // seff: 0.61%
        assert_eq!(
            spinner.cpu_time.as_ref().map(Duration::as_str),
            Some("2.895s")
        );
    }

    #[test]
    fn allocated_memory_wins_and_missing_numbers_stay_missing() {
        let mut u = usage(1_000_000, 10, 512 * 1024 * 1024);
        u.allocated.push(tres("mem", 2048));
        assert_eq!(of_job(&u, true).memory_efficiency_percent, Some(25));
        // No gather plugin: no RSS, no memory efficiency; a job that never ran: no CPU one.
        let none = Usage {
            max_rss_bytes: None,
            elapsed: StdDuration::ZERO,
            ..usage(0, 0, 0)
        };
        let shown = of_job(&none, false);
        assert_eq!(shown.max_rss, None);
        assert_eq!(shown.memory_efficiency_percent, None);
        assert_eq!(shown.cpu_efficiency_percent, None);
        assert_eq!(shown.allocated_tres, None, "a task's leaves the lists out");
    }

    #[test]
    fn an_array_sums_its_tasks_and_keeps_each() {
        let records = [
            ended(17, Some(0), usage(1_000_000, 2, 10 * 1024 * 1024)),
            ended(18, Some(1), usage(1_000_000, 2, 200 * 1024 * 1024)),
            ended(16, Some(2), usage(2_000_000, 4, 50 * 1024 * 1024)),
        ];
        let (summary, tasks) = of_records(&records).unwrap();
        assert_eq!(summary.elapsed.as_ref().map(Duration::as_str), Some("8s"));
        assert_eq!(summary.cpu_time.as_ref().map(Duration::as_str), Some("4s"));
        assert_eq!(summary.cpu_efficiency_percent, Some(50));
        // The largest task's memory: 200 MiB of 500.
        assert_eq!(summary.max_rss, Some(Quantity("204800Ki".into())));
        assert_eq!(summary.memory_efficiency_percent, Some(40));
        assert_eq!(
            summary.allocated_tres.as_deref(),
            Some("cpu=3,node=3,billing=3")
        );
        assert_eq!(tasks.keys().copied().collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!(tasks[&2].cpu_efficiency_percent, Some(50));
        assert_eq!(tasks[&0].memory_efficiency_percent, Some(2));
    }

    /// A requeued job's earlier run never ends in accounting (`PENDING+REQUEUED`, no usage):
    /// the latest run of each job and task is what it used.
    #[test]
    fn a_requeued_runs_usage_is_its_latest_runs() {
        let at = |job: Job, submitted: i64| Job {
            submit_time: chrono::DateTime::from_timestamp(submitted, 0),
            ..job
        };
        let mut requeued = ended(17, None, usage(1, 1, 1));
        requeued.state = JobState::from_strings(&["PENDING", "REQUEUED"]);
        requeued.usage = None;
        let done = ended(17, None, usage(2_000_000, 2, 1024));
        let (summary, _) =
            of_records(&[at(requeued.clone(), 1_000), at(done.clone(), 1_500)]).unwrap();
        assert_eq!(summary.elapsed.as_ref().map(Duration::as_str), Some("2s"));
        // An array task's too, and the task counts once.
        let task = |job: Job| Job {
            array_job_id: Some(16),
            array_task_id: Some(0),
            ..job
        };
        let (summary, tasks) = of_records(&[
            at(task(requeued), 1_000),
            at(task(done.clone()), 1_500),
            at(ended(18, Some(1), usage(2_000_000, 2, 1024)), 1_000),
        ])
        .unwrap();
        assert_eq!(summary.elapsed.as_ref().map(Duration::as_str), Some("4s"));
        assert_eq!(tasks.keys().copied().collect::<Vec<_>>(), [0, 1]);
        // The latest still running: nothing yet.
        let mut running = done;
        running.state = JobState::from_strings(&["RUNNING"]);
        running.usage = None;
        let mut earlier = ended(17, None, usage(1, 1, 1));
        earlier.state = JobState::from_strings(&["NODE_FAIL"]);
        assert_eq!(of_records(&[at(earlier, 1_000), at(running, 1_500)]), None);
    }

    #[test]
    fn nothing_until_every_record_ended_with_its_usage() {
        let mut running = ended(17, Some(0), usage(1, 1, 1));
        running.state = JobState::from_strings(&["RUNNING"]);
        let done = ended(18, Some(1), usage(1, 1, 1));
        assert_eq!(of_records(&[running, done.clone()]), None);
        let mut bare = done.clone();
        bare.usage = None;
        assert_eq!(of_records(&[bare]), None);
        assert_eq!(of_records(&[]), None);
        assert!(of_records(&[done]).is_some());
    }

    #[test]
    fn usage_is_asked_for_a_while_after_the_end() {
        let secs = chrono::TimeDelta::seconds;
        assert_eq!(retry_after(secs(1)), Some(StdDuration::from_secs(3)));
        assert_eq!(retry_after(secs(120)), Some(StdDuration::from_secs(30)));
        assert_eq!(retry_after(PATIENCE), None);
        assert_eq!(retry_after(secs(-5)), Some(StdDuration::from_secs(3)));
    }
}
