//! What an array's tasks ended as, kept in the status after slurmctld forgets them.
//!
//! slurmctld purges an ended task's record `MinJobAge` after its end while the rest of the array
//! runs on: the index then holds the array's later tasks only. A phase, exit code or count worked
//! out from what slurmctld still lists would forget a task that failed early, and call the array
//! `Completed` at its end (and a dependent `afterok` satisfied). The status keeps each ended
//! task's id under its Slurm state (`status.arrayTasks.ended`), as Slurm writes task ids.

use std::collections::{BTreeMap, BTreeSet};

use crate::crd::slurmjob::{ArrayTask, ArrayTasks};
use crate::slurm::types::Job;

use super::phase;

/// The most characters of one state's ids in the status. An array whose ended tasks alternate
/// states over hundreds of thousands of ids would need more; the lowest ids are kept (every state
/// keeps at least one, so the worst ending is never forgotten) and the counts lose the rest.
pub const MAX_IDS_CHARS: usize = 4096;

/// Task ids as inclusive ranges, sorted, disjoint and not adjacent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskIds(Vec<(u32, u32)>);

impl TaskIds {
    /// Ids as [`Self::to_expression`] writes them (`"0-2,4,7-9"`). What does not parse (a
    /// status edited by hand, say) is left out: the ids are a memory, not an input.
    pub fn parse(expression: &str) -> Self {
        let ranges = expression.split(',').filter_map(|part| {
            let part = part.trim();
            let (a, b) = part.split_once('-').unwrap_or((part, part));
            match (a.trim().parse::<u32>(), b.trim().parse::<u32>()) {
                (Ok(a), Ok(b)) if a <= b => Some((a, b)),
                _ => None,
            }
        });
        Self::from_ranges(ranges)
    }

    /// The ids of `ids`.
    pub fn of(ids: impl IntoIterator<Item = u32>) -> Self {
        Self::from_ranges(ids.into_iter().map(|id| (id, id)))
    }

    fn from_ranges(ranges: impl IntoIterator<Item = (u32, u32)>) -> Self {
        let mut ranges: Vec<(u32, u32)> = ranges.into_iter().collect();
        ranges.sort_unstable();
        let mut merged: Vec<(u32, u32)> = Vec::with_capacity(ranges.len());
        for (a, b) in ranges {
            match merged.last_mut() {
                Some((_, end)) if a <= end.saturating_add(1) => *end = (*end).max(b),
                _ => merged.push((a, b)),
            }
        }
        Self(merged)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many ids, saturating at `i32::MAX` (a status count).
    pub fn count(&self) -> i32 {
        let n: u64 = self
            .0
            .iter()
            .map(|(a, b)| u64::from(b - a) + 1)
            .sum::<u64>();
        i32::try_from(n).unwrap_or(i32::MAX)
    }

    pub fn contains(&self, id: u32) -> bool {
        let at = self.0.partition_point(|(_, end)| *end < id);
        self.0.get(at).is_some_and(|(start, _)| *start <= id)
    }

    /// These ids without `ids`.
    pub fn without(&self, ids: &BTreeSet<u32>) -> Self {
        // In u64: a range may end at u32::MAX, and the id after it is not a u32.
        let id32 = |id: u64| u32::try_from(id).unwrap_or(u32::MAX);
        let mut out = Vec::with_capacity(self.0.len());
        for &(start, end) in &self.0 {
            let mut from = u64::from(start);
            for &id in ids.range(start..=end) {
                let id = u64::from(id);
                if id > from {
                    out.push((id32(from), id32(id - 1)));
                }
                from = id + 1;
            }
            if from <= u64::from(end) {
                out.push((id32(from), end));
            }
        }
        Self(out)
    }

    /// These ids and `other`'s.
    pub fn union(&self, other: &Self) -> Self {
        Self::from_ranges(self.0.iter().chain(&other.0).copied())
    }

    /// Slurm's way of writing task ids, cut at a range boundary to at most `max` characters
    /// (always the first range).
    pub fn to_expression(&self, max: usize) -> String {
        let mut out = String::new();
        for &(a, b) in &self.0 {
            let part = if a == b {
                a.to_string()
            } else {
                format!("{a}-{b}")
            };
            if !out.is_empty() {
                if out.len() + 1 + part.len() > max {
                    break;
                }
                out.push(',');
            }
            out.push_str(&part);
        }
        out
    }
}

/// The ended tasks by Slurm state, as the status holds them.
pub type Ended = BTreeMap<String, TaskIds>;

/// `ended` as it was written (`status.arrayTasks.ended`).
pub fn read(written: &BTreeMap<String, String>) -> Ended {
    written
        .iter()
        .map(|(state, ids)| (state.clone(), TaskIds::parse(ids)))
        .filter(|(_, ids)| !ids.is_empty())
        .collect()
}

/// `ended` to write, each state's ids bounded by [`MAX_IDS_CHARS`].
pub fn write(ended: &Ended) -> BTreeMap<String, String> {
    ended
        .iter()
        .filter(|(_, ids)| !ids.is_empty())
        .map(|(state, ids)| (state.clone(), ids.to_expression(MAX_IDS_CHARS)))
        .collect()
}

/// The ended tasks once slurmctld lists `listed` (every task id it holds a record of) and, of
/// those, `ended_now` (state → ids): a task slurmctld lists is what its record says (a requeued
/// task waits again); one it no longer lists keeps what it ended as.
pub fn merge(before: &Ended, listed: &BTreeSet<u32>, ended_now: &Ended) -> Ended {
    let mut next: Ended = before
        .iter()
        .map(|(state, ids)| (state.clone(), ids.without(listed)))
        .filter(|(_, ids)| !ids.is_empty())
        .collect();
    for (state, ids) in ended_now {
        let merged = next
            .get(state)
            .map_or_else(|| ids.clone(), |k| k.union(ids));
        if !merged.is_empty() {
            next.insert(state.clone(), merged);
        }
    }
    next
}

/// The tasks of `ended` not in `listed`: ended, and forgotten by slurmctld since.
pub fn forgotten(ended: &Ended, listed: &BTreeSet<u32>) -> Ended {
    ended
        .iter()
        .map(|(state, ids)| (state.clone(), ids.without(listed)))
        .filter(|(_, ids)| !ids.is_empty())
        .collect()
}

/// Slurm's word for a task that ended well.
pub const COMPLETED: &str = "COMPLETED";

/// What an array's status remembers of its tasks once slurmctld lists `records`.
#[derive(Debug, Default)]
pub struct Memory {
    /// Every task that ended, by state (the status's `ended`).
    pub ended: Ended,
    /// Of those, the ones slurmctld no longer lists.
    pub forgotten: Ended,
    /// The task list's entries of forgotten tasks (with their exit codes and usage).
    pub forgotten_tasks: Vec<ArrayTask>,
}

impl Memory {
    /// `before`: the status's array tasks, of this very array (`None`: nothing to remember).
    pub fn of(before: Option<&ArrayTasks>, records: &[Job]) -> Self {
        let listed: BTreeSet<u32> = records.iter().filter_map(|r| r.array_task_id).collect();
        let mut ended_ids: BTreeMap<String, Vec<u32>> = BTreeMap::new();
        for record in records
            .iter()
            .filter(|r| phase::of_state(&r.state).is_terminal())
        {
            if let Some(task_id) = record.array_task_id {
                ended_ids
                    .entry(record.state.base.as_str().to_owned())
                    .or_default()
                    .push(task_id);
            }
        }
        let ended_now: Ended = ended_ids
            .into_iter()
            .map(|(state, ids)| (state, TaskIds::of(ids)))
            .collect();
        let ended = merge(
            &before.map(|b| read(&b.ended)).unwrap_or_default(),
            &listed,
            &ended_now,
        );
        let forgotten = forgotten(&ended, &listed);
        let forgotten_tasks = before
            .map(|b| {
                b.tasks
                    .iter()
                    .filter(|t| {
                        u32::try_from(t.task_id)
                            .is_ok_and(|id| forgotten.values().any(|ids| ids.contains(id)))
                    })
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        Self {
            ended,
            forgotten,
            forgotten_tasks,
        }
    }

    /// The exit codes of forgotten tasks: those the task list kept (after the unfinished
    /// tasks, failures before completions), and a 0 for forgotten completions.
    pub fn exit_codes(&self) -> impl Iterator<Item = i32> + '_ {
        self.forgotten_tasks
            .iter()
            .filter_map(|t| t.exit_code)
            .chain(self.forgotten.contains_key(COMPLETED).then_some(0))
    }

    /// Whether forgotten failures outnumber those the task list kept: then the status's earlier
    /// exit code stands in for them (not otherwise: it may come from a task run again since).
    pub fn failures_unlisted(&self) -> bool {
        let kept = self
            .forgotten_tasks
            .iter()
            .filter(|t| t.state != COMPLETED)
            .count();
        let forgotten: i64 = self
            .forgotten
            .iter()
            .filter(|(state, _)| *state != COMPLETED)
            .map(|(_, ids)| i64::from(ids.count()))
            .sum();
        forgotten > i64::try_from(kept).unwrap_or(i64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_ids_read_and_write_as_slurm_writes_them() {
        let table: &[(&str, &str, i32)] = &[
            ("", "", 0),
            ("3", "3", 1),
            ("0-2,4,7-9", "0-2,4,7-9", 7),
            ("4,0-2,3", "0-4", 5),
            ("0-2,1-5", "0-5", 6),
            (" 1 , 2 ", "1-2", 2),
            ("x,5-3,7", "7", 1),
            ("0-4294967295", "0-4294967295", i32::MAX),
        ];
        for (written, want, count) in table {
            let ids = TaskIds::parse(written);
            assert_eq!(ids.to_expression(usize::MAX), *want, "{written:?}");
            assert_eq!(ids.count(), *count, "{written:?}");
        }
    }

    #[test]
    fn task_ids_subtract_and_add() {
        let ids = TaskIds::parse("0-9,20");
        let listed: BTreeSet<u32> = [0, 5, 9, 20, 30].into();
        let rest = ids.without(&listed);
        assert_eq!(rest.to_expression(usize::MAX), "1-4,6-8");
        assert!(rest.contains(6) && !rest.contains(5) && !rest.contains(20));
        assert_eq!(
            rest.union(&TaskIds::of([5, 21])).to_expression(usize::MAX),
            "1-8,21"
        );
        let top = TaskIds::parse("4294967290-4294967295");
        let gone: BTreeSet<u32> = [u32::MAX, 4_294_967_290].into();
        assert_eq!(
            top.without(&gone).to_expression(usize::MAX),
            "4294967291-4294967294"
        );
    }

    #[test]
    fn a_long_expression_keeps_its_lowest_ids() {
        let every_other = TaskIds::of((0..10_000).map(|i| i * 2));
        let written = every_other.to_expression(MAX_IDS_CHARS);
        assert!(written.len() <= MAX_IDS_CHARS, "{}", written.len());
        assert!(written.starts_with("0,2,4,"));
        assert!(!written.ends_with(','));
        assert_eq!(TaskIds::parse("123456").to_expression(3), "123456");
    }

    /// A task slurmctld forgot keeps its ending; one it lists again (requeued) loses it; one that
    /// ended since is added under its state.
    #[test]
    fn endings_outlive_slurmctld_listing_them() {
        let before = read(&BTreeMap::from([
            ("FAILED".to_owned(), "3".to_owned()),
            ("COMPLETED".to_owned(), "0-2,4".to_owned()),
            ("TIMEOUT".to_owned(), "5".to_owned()),
            ("BOGUS".to_owned(), "x".to_owned()),
        ]));
        assert_eq!(before.len(), 3, "unreadable ids are left out");
        let listed: BTreeSet<u32> = [4, 5, 6, 7].into();
        let now = Ended::from([("COMPLETED".to_owned(), TaskIds::of([4, 6]))]);
        let next = merge(&before, &listed, &now);
        assert_eq!(
            write(&next),
            BTreeMap::from([
                ("FAILED".to_owned(), "3".to_owned()),
                ("COMPLETED".to_owned(), "0-2,4,6".to_owned()),
            ]),
            "5 is listed again (requeued) and not ended: its TIMEOUT goes"
        );
        assert_eq!(
            write(&forgotten(&next, &listed)),
            BTreeMap::from([
                ("FAILED".to_owned(), "3".to_owned()),
                ("COMPLETED".to_owned(), "0-2".to_owned()),
            ])
        );
        let all: BTreeSet<u32> = (0..8).collect();
        assert!(forgotten(&next, &all).is_empty());
    }
}
