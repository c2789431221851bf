//! Which SlurmJobs wait for which others through `dependsOn`, so that a change of a dependee
//! (created, submitted, ended, re-run, moved to another cluster) reconciles its dependents at
//! once instead of at their next look. A dependency wait then looks again only every
//! [`DEPENDENCY_RECHECK`] as a safety net, not every few seconds: thousands of SlurmJobs of a
//! pipeline waiting on their predecessors took a reconcile slot each every 3 s, and a link of a
//! chain started up to 3 s after the one before it was submitted.
//!
//! Woken by: a dependee's watch event that changes what the wait judges it by
//! ([`changes_dependents`]), a poller event of a dependee's job (a live dependee is judged with
//! the index too), and a relist of the cache.
//!
//! A SlurmJob is registered before its step reads its dependees (a change meanwhile wakes it:
//! no lost wake-up), and removed once its wait is over or it is gone. Only waiting SlurmJobs
//! are held, by name within their namespace: `dependsOn` names SlurmJobs of its own namespace.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use kube::Resource;
use kube::runtime::reflector::ObjectRef;

use super::plan::{DEPENDENCY_NEVER_SATISFIED, WAITING_FOR_DEPENDENCIES};
use super::status::READY;
use crate::controller::kit::Applied;
use crate::crd::condition;
use crate::crd::slurmjob::{CachedSlurmJob, Phase, SlurmJobStatus};

/// How often a SlurmJob waiting for its dependencies looks again without being woken: what
/// neither a dependee's cached object nor its jobs' poller events show (none is known) would
/// wait this long.
pub const DEPENDENCY_RECHECK: Duration = Duration::from_secs(30);

/// How many waits [`Dependents::cycle`] looks at, at most: a cycle farther away is not named
/// (its SlurmJobs say they wait for dependees not submitted yet). A bound on the work done
/// under the registry's lock, however many dependees each SlurmJob names.
pub const MAX_CYCLE_SEARCH: usize = 1024;

/// The waiting SlurmJobs, per namespace: by dependee, and each one's dependees (to remove it).
#[derive(Debug, Default)]
pub struct Dependents {
    namespaces: Mutex<HashMap<String, Waits>>,
}

#[derive(Debug, Default)]
struct Waits {
    /// Dependee name → the names of the SlurmJobs that wait for it.
    by_dependee: HashMap<String, BTreeSet<String>>,
    /// Dependent name → the dependees it is held under.
    by_dependent: HashMap<String, Vec<String>>,
}

impl Waits {
    fn remove(&mut self, dependent: &str) {
        for dependee in self.by_dependent.remove(dependent).unwrap_or_default() {
            if let Some(waiting) = self.by_dependee.get_mut(&dependee) {
                waiting.remove(dependent);
                if waiting.is_empty() {
                    self.by_dependee.remove(&dependee);
                }
            }
        }
    }
}

impl Dependents {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Waits>> {
        // Every update leaves the maps whole: a panic elsewhere spoils nothing.
        self.namespaces
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// `dependent` (of `namespace`) waits for the SlurmJobs `dependees`: replaces what it waited
    /// for before; none removes it.
    pub fn wait_for<'a>(
        &self,
        namespace: &str,
        dependent: &str,
        dependees: impl IntoIterator<Item = &'a str>,
    ) {
        let dependees: BTreeSet<&str> = dependees.into_iter().collect();
        let mut namespaces = self.lock();
        if dependees.is_empty() {
            if let Some(waits) = namespaces.get_mut(namespace) {
                waits.remove(dependent);
                if waits.by_dependent.is_empty() {
                    namespaces.remove(namespace);
                }
            }
            return;
        }
        let waits = namespaces.entry(namespace.to_owned()).or_default();
        waits.remove(dependent);
        for dependee in &dependees {
            waits
                .by_dependee
                .entry((*dependee).to_owned())
                .or_default()
                .insert(dependent.to_owned());
        }
        waits.by_dependent.insert(
            dependent.to_owned(),
            dependees.into_iter().map(str::to_owned).collect(),
        );
    }

    /// `dependent` waits for nothing (any more).
    pub fn done(&self, namespace: &str, dependent: &str) {
        self.wait_for(namespace, dependent, []);
    }

    /// The SlurmJobs of `namespace` that wait for `dependee`.
    pub fn of(&self, namespace: &str, dependee: &str) -> Vec<String> {
        self.lock()
            .get(namespace)
            .and_then(|waits| waits.by_dependee.get(dependee))
            .map(|waiting| waiting.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// A cycle of waiting SlurmJobs through `dependent` and one of `dependees` (its dependees
    /// without a job id): that dependee and the SlurmJobs it waits for, each the next, back to
    /// `dependent` (left out); the shortest found first. Empty if there is none within
    /// [`MAX_CYCLE_SEARCH`] waits looked at. Only SlurmJobs waiting to be submitted are held
    /// here, so a chain of them is a cycle none of them leaves. One search, back from
    /// `dependent` through those that wait for it, whatever the number of dependees.
    pub fn cycle(&self, namespace: &str, dependent: &str, dependees: &[&str]) -> Vec<String> {
        let namespaces = self.lock();
        let Some(waits) = namespaces.get(namespace) else {
            return Vec::new();
        };
        // Breadth first, each SlurmJob once; `waits_for[w]`: the one w waits for on the way.
        let mut waits_for: HashMap<&str, &str> = HashMap::new();
        let mut queue = VecDeque::from([dependent]);
        let mut looked_at = 0;
        while let Some(at) = queue.pop_front() {
            for waiting in waits.by_dependee.get(at).into_iter().flatten() {
                looked_at += 1;
                if looked_at > MAX_CYCLE_SEARCH {
                    return Vec::new();
                }
                let waiting = waiting.as_str();
                if waiting == dependent || waits_for.contains_key(waiting) {
                    continue;
                }
                waits_for.insert(waiting, at);
                if dependees.contains(&waiting) {
                    let mut chain = vec![waiting.to_owned()];
                    let mut step = at;
                    while step != dependent {
                        chain.push(step.to_owned());
                        match waits_for.get(step) {
                            Some(next) => step = next,
                            None => break,
                        }
                    }
                    return chain;
                }
                queue.push_back(waiting);
            }
        }
        Vec::new()
    }

    /// Keeps only the waiting SlurmJobs for which `keep(namespace, name)` holds.
    pub fn retain(&self, keep: impl Fn(&str, &str) -> bool) {
        let mut namespaces = self.lock();
        for (namespace, waits) in namespaces.iter_mut() {
            let gone: Vec<String> = waits
                .by_dependent
                .keys()
                .filter(|name| !keep(namespace, name))
                .cloned()
                .collect();
            for name in gone {
                waits.remove(&name);
            }
        }
        namespaces.retain(|_, waits| !waits.by_dependent.is_empty());
    }

    /// Every waiting SlurmJob.
    fn all(&self) -> Vec<ObjectRef<CachedSlurmJob>> {
        self.lock()
            .iter()
            .flat_map(|(namespace, waits)| {
                waits
                    .by_dependent
                    .keys()
                    .map(|name| ObjectRef::new(name).within(namespace))
            })
            .collect()
    }

    /// What a watch event of the SlurmJob cache wakes, once the cache holds it: the dependents
    /// of a SlurmJob whose change they judge it by ([`changes_dependents`]); all of them after a
    /// relist (what changed during a watch gap is not seen one by one). A SlurmJob gone from
    /// the cache waits for nothing any more.
    pub fn woken_by(&self, applied: Applied<'_, CachedSlurmJob>) -> Vec<ObjectRef<CachedSlurmJob>> {
        let (object, cached, now) = match applied {
            Applied::Relisted => return self.all(),
            Applied::Object {
                object,
                cached,
                now,
            } => (object, cached, now),
        };
        let meta = object.meta();
        let (Some(namespace), Some(name)) = (meta.namespace.as_deref(), meta.name.as_deref())
        else {
            return Vec::new();
        };
        if now.is_none() {
            self.done(namespace, name);
        }
        if !changes_dependents(cached, now) {
            return Vec::new();
        }
        self.of(namespace, name)
            .into_iter()
            .map(|dependent| ObjectRef::new(&dependent).within(namespace))
            .collect()
    }

    /// How many SlurmJobs wait.
    pub fn len(&self) -> usize {
        self.lock().values().map(|w| w.by_dependent.len()).sum()
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Whether `status` says the job waits for SlurmJobs `dependsOn` names before its submit (a
/// submitted job Slurm deems never to start has the reason too, and waits for nothing here).
pub fn is_dependency_wait(status: &SlurmJobStatus) -> bool {
    !super::status::never_starts(status)
        && is_dependency_reason(
            condition::find(&status.conditions, READY).map_or("", |ready| ready.reason.as_str()),
        )
}

/// Whether a wait's reason is one for SlurmJobs `dependsOn` names.
pub fn is_dependency_reason(reason: &str) -> bool {
    [WAITING_FOR_DEPENDENCIES, DEPENDENCY_NEVER_SATISFIED].contains(&reason)
}

/// Whether a SlurmJob's watch event changed what its dependents judge it by
/// (`lifecycle::resolve_dependencies` through `dependee`): whether it exists, its cluster, its
/// job id and phase, and whether its status is the current generation's. `before`: the
/// same SlurmJob as the cache held it (`None`: new), `after`: as it holds it now (`None`: gone).
pub fn changes_dependents(before: Option<&CachedSlurmJob>, after: Option<&CachedSlurmJob>) -> bool {
    fn judged(job: &CachedSlurmJob) -> (&str, Option<i64>, Option<Phase>, bool) {
        (
            job.cluster_name(),
            job.job_id(),
            job.phase(),
            job.status_current(),
        )
    }
    match (before, after) {
        (Some(before), Some(after)) => judged(before) != judged(after),
        // Created: those waiting for it as missing. Deleted: they wait as for a missing one,
        // and judge so at their next look.
        (None, Some(_)) => true,
        (_, None) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cycle_of_waiting_slurmjobs_is_found_and_named_shortest_first() {
        let deps = Dependents::default();
        // train → prep → fetch → train, and prep → train too; eval waits for train only.
        deps.wait_for("team-a", "train", ["prep"]);
        deps.wait_for("team-a", "prep", ["fetch", "train"]);
        deps.wait_for("team-a", "fetch", ["train"]);
        deps.wait_for("team-a", "eval", ["train"]);
        assert_eq!(deps.cycle("team-a", "train", &["prep"]), ["prep"]);
        assert_eq!(deps.cycle("team-a", "fetch", &["train"]), ["train", "prep"]);
        // Of two dependees on cycles, the one on the shorter: learn waits for b (b → c →
        // learn) and for z (z → learn); c, looked at first, is not the way to z.
        deps.wait_for("team-a", "learn", ["b", "z"]);
        deps.wait_for("team-a", "b", ["c"]);
        deps.wait_for("team-a", "c", ["learn"]);
        deps.wait_for("team-a", "z", ["learn"]);
        assert_eq!(deps.cycle("team-a", "learn", &["b", "z"]), ["z"]);
        assert_eq!(deps.cycle("team-a", "learn", &["b"]), ["b", "c"]);
        // eval waits for the cycle, but nothing waits for eval: no cycle through it.
        assert!(deps.cycle("team-a", "eval", &["train"]).is_empty());
        // Only the dependees named: prep waits for train, but train is not asked about.
        assert!(
            deps.cycle("team-a", "train", &["fetch-not-a-dependee"])
                .is_empty()
        );
        // Names are per namespace.
        assert!(deps.cycle("team-b", "train", &["prep"]).is_empty());
        // Waits rearranged: prep → train → fetch → prep, the long way round.
        deps.wait_for("team-a", "prep", ["train"]);
        deps.wait_for("team-a", "train", ["fetch"]);
        deps.wait_for("team-a", "fetch", ["prep"]);
        assert_eq!(deps.cycle("team-a", "prep", &["train"]), ["train", "fetch"]);
        // A dependee not waiting (submitted, or never looked at) closes no cycle.
        deps.done("team-a", "fetch");
        assert!(deps.cycle("team-a", "prep", &["train"]).is_empty());

        // A ring of `members` SlurmJobs, each waiting for the next: found back from link-0
        // after `members - 1` waits looked at.
        let ring = |members: usize| {
            let ring = Dependents::default();
            let name = |i: usize| format!("link-{}", i % members);
            for i in 0..members {
                ring.wait_for("ns", &name(i), [name(i + 1).as_str()]);
            }
            ring.cycle("ns", "link-0", &["link-1"])
        };
        // Exactly as many waits as the search looks at: named, all of it.
        let chain = ring(MAX_CYCLE_SEARCH + 1);
        assert_eq!(chain.len(), MAX_CYCLE_SEARCH);
        assert_eq!(chain.first().map(String::as_str), Some("link-1"));
        assert_eq!(chain.last(), Some(&format!("link-{MAX_CYCLE_SEARCH}")));
        // One more: not named.
        assert!(ring(MAX_CYCLE_SEARCH + 2).is_empty());
    }

    #[test]
    fn a_dependent_is_found_under_each_dependee_until_its_wait_ends() {
        let deps = Dependents::default();
        deps.wait_for("team-a", "train", ["prep", "fetch"]);
        deps.wait_for("team-a", "eval", ["train"]);
        deps.wait_for("team-b", "train", ["prep"]);
        assert_eq!(deps.of("team-a", "prep"), ["train"]);
        assert_eq!(deps.of("team-a", "fetch"), ["train"]);
        assert_eq!(deps.of("team-a", "train"), ["eval"]);
        // Names are per namespace: team-b's prep wakes only team-b's train.
        assert_eq!(deps.of("team-b", "prep"), ["train"]);
        assert!(deps.of("team-b", "fetch").is_empty());
        assert_eq!(deps.len(), 3);

        // An edit of dependsOn replaces what it waits for.
        deps.wait_for("team-a", "train", ["prep"]);
        assert!(deps.of("team-a", "fetch").is_empty());
        assert_eq!(deps.of("team-a", "prep"), ["train"]);

        deps.done("team-a", "train");
        assert!(deps.of("team-a", "prep").is_empty());
        assert_eq!(deps.of("team-a", "train"), ["eval"]);
        deps.done("team-a", "eval");
        deps.done("team-b", "train");
        // Nothing is kept for what no longer waits (a namespace's entry included).
        assert!(deps.is_empty());
        assert!(deps.lock().is_empty());
        // Removing one that never waited is nothing.
        deps.done("team-c", "x");
        assert!(deps.lock().is_empty());
    }

    #[test]
    fn retain_drops_what_is_no_longer_there() {
        let deps = Dependents::default();
        deps.wait_for("a", "x", ["p"]);
        deps.wait_for("a", "y", ["p"]);
        deps.wait_for("b", "x", ["q"]);
        deps.retain(|ns, name| (ns, name) != ("a", "x") && ns != "b");
        assert_eq!(deps.of("a", "p"), ["y"]);
        assert!(deps.of("b", "q").is_empty());
        assert_eq!(deps.lock().len(), 1, "namespace b's entry is gone");
    }

    #[test]
    fn two_dependents_of_one_dependee_are_both_woken() {
        let deps = Dependents::default();
        deps.wait_for("ns", "b", ["a"]);
        deps.wait_for("ns", "c", ["a", "a"]);
        assert_eq!(deps.of("ns", "a"), ["b", "c"]);
        deps.done("ns", "b");
        assert_eq!(deps.of("ns", "a"), ["c"]);
    }
}
