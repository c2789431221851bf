//! From two snapshots of a cluster's index to the events that tell controllers what changed. Pure.
//!
//! | event | fires when |
//! |---|---|
//! | `HealthChanged{up}` | the poller's view of slurmrestd flips: the first poll's outcome, then each Up↔Down transition (never for a repeated failure) |
//! | `ListingChanged{failing}` | the periodic listing of every job answers for the first time, starts failing, or answers after failing (also before the first complete cycle); never for a repeated failure or answer |
//! | `JobChanged` | a job of the index's `jobs` (one of ours, or a claim: a tag the key does not prove, `strategy::Class`) appears (or gets a tag), or a field a controller reads changes: state (flags included), reason and its description, priority, hold, exit, nodes, times that mean something for its state (a pending job's estimated start included), time limit, comment, name, array ids and task list; or its record becomes unreadable, or readable again, or unreadable for another reason (`ClusterState::unreadable`) |
//! | `JobGone` | a job leaves the index's `jobs`: slurmctld purged it (MinJobAge), or its comment stopped being a tag; carries the comment it had |
//! | `NodeChanged` | a node appears, its record changes (state, reason, CPUs, features, ...), or the jobs running on it change (count or deadline) |
//! | `NodeGone` | a node leaves slurmctld's node list (deleted dynamic node) |
//!
//! Untagged jobs never produce job events (they would flood the channel); they reach
//! controllers only through `node_jobs`, hence `NodeChanged`. A claim's events wake the
//! SlurmJob whose tag it copies, which refuses it (`TagNotAdopted`): no more than the
//! listings show of it, since it is read only as someone else's job is.

use std::collections::BTreeMap;

use kube::runtime::reflector::ObjectRef;

use crate::crd::SlurmCluster;
use crate::slurm::types::Job;
use crate::state::index::{ClusterState, Health, Listing, SlurmEvent};

/// The events that lead from `old` to `new`: health first, then the listing, then jobs by id,
/// then nodes by name.
pub fn diff(
    cluster: &ObjectRef<SlurmCluster>,
    old: &ClusterState,
    new: &ClusterState,
) -> Vec<SlurmEvent> {
    let mut events = Vec::new();
    if let Some(up) = health_flip(&old.health, &new.health) {
        events.push(SlurmEvent::HealthChanged {
            cluster: cluster.clone(),
            up,
        });
    }
    // NotYet never follows Listed, but follows Failing when a listing answers before the
    // first complete cycle: that is an answer after failures.
    let listing = new.listing();
    if listing.differs(&old.listing()) {
        events.push(SlurmEvent::ListingChanged {
            cluster: cluster.clone(),
            failing: matches!(listing, Listing::Failing(_)),
        });
    }
    for change in merge(&old.jobs, &new.jobs) {
        match change {
            Change::Added(job) => events.push(job_changed(cluster, job)),
            Change::Both(a, b)
                if job_differs(a, b)
                    || old.unreadable.get(&b.job_id) != new.unreadable.get(&b.job_id) =>
            {
                // Another SlurmJob's tag under the id (slurmctld gave it to a new job, or the
                // comment was edited): the one it was tagged for learns it is gone, as when the
                // tag is edited away, rather than at its next resync.
                let uid = |job: &Job| job.owner.as_ref().map(|tag| tag.uid().to_owned());
                if a.owner.is_some() && uid(a) != uid(b) {
                    events.push(SlurmEvent::JobGone {
                        cluster: cluster.clone(),
                        job_id: a.job_id,
                        owner: a.owner.clone(),
                    });
                }
                events.push(job_changed(cluster, b))
            }
            Change::Both(..) => {}
            Change::Removed(job) => events.push(SlurmEvent::JobGone {
                cluster: cluster.clone(),
                job_id: job.job_id,
                owner: job.owner.clone(),
            }),
        }
    }
    for change in merge(&old.nodes, &new.nodes) {
        let node_changed = |name: &String| SlurmEvent::NodeChanged {
            cluster: cluster.clone(),
            node: name.clone(),
        };
        match change {
            Change::Added(node) => events.push(node_changed(&node.name)),
            Change::Both(a, b) => {
                let jobs_moved = old.node_jobs.get(&b.name) != new.node_jobs.get(&b.name);
                if a != b || jobs_moved {
                    events.push(node_changed(&b.name));
                }
            }
            Change::Removed(node) => events.push(SlurmEvent::NodeGone {
                cluster: cluster.clone(),
                node: node.name.clone(),
            }),
        }
    }
    events
}

/// `Some(up)` when the health's up-ness is new: leaving Unknown, or Up↔Down.
fn health_flip(old: &Health, new: &Health) -> Option<bool> {
    let up = |h: &Health| match h {
        Health::Unknown => None,
        Health::Up { .. } => Some(true),
        Health::Down { .. } => Some(false),
    };
    match (up(old), up(new)) {
        (before, Some(now)) if before != Some(now) => Some(now),
        _ => None,
    }
}

fn job_changed(cluster: &ObjectRef<SlurmCluster>, job: &Job) -> SlurmEvent {
    SlurmEvent::JobChanged {
        cluster: cluster.clone(),
        job_id: job.job_id,
        owner: job.owner.clone(),
    }
}

/// Whether a controller would see a difference. A pending job's expected start is shown (a
/// SlurmJob's `status.pending`): its record is refreshed only now and then
/// (`Tuning::pending_refresh_every`), so Slurm's revisions reach controllers at that pace. A
/// running job's expected end is noise until it has ended.
pub fn job_differs(a: &Job, b: &Job) -> bool {
    let ended = |j: &Job| j.state.base.is_finished();
    let start = |j: &Job| j.start_time;
    let end = |j: &Job| j.end_time.filter(|_| ended(j));
    a.state != b.state
        || a.state_reason != b.state_reason
        || a.exit != b.exit
        || a.nodes != b.nodes
        || a.node_count != b.node_count
        || a.comment != b.comment
        || a.name != b.name
        || a.time_limit != b.time_limit
        || a.submit_time != b.submit_time
        || start(a) != start(b)
        || end(a) != end(b)
        || a.array_job_id != b.array_job_id
        || a.array_task_id != b.array_task_id
        || a.array_task_string != b.array_task_string
        || a.priority != b.priority
        || a.held != b.held
        || a.state_description != b.state_description
}

enum Change<'a, V> {
    Added(&'a V),
    Both(&'a V, &'a V),
    Removed(&'a V),
}

/// Walk two sorted maps together.
fn merge<'a, K: Ord, V>(old: &'a BTreeMap<K, V>, new: &'a BTreeMap<K, V>) -> Vec<Change<'a, V>> {
    let mut out = Vec::new();
    let mut a = old.iter().peekable();
    let mut b = new.iter().peekable();
    loop {
        match (a.peek(), b.peek()) {
            (None, None) => break,
            (Some((_, va)), None) => {
                out.push(Change::Removed(*va));
                a.next();
            }
            (None, Some((_, vb))) => {
                out.push(Change::Added(*vb));
                b.next();
            }
            (Some((ka, va)), Some((kb, vb))) => match ka.cmp(kb) {
                std::cmp::Ordering::Less => {
                    out.push(Change::Removed(*va));
                    a.next();
                }
                std::cmp::Ordering::Greater => {
                    out.push(Change::Added(*vb));
                    b.next();
                }
                std::cmp::Ordering::Equal => {
                    out.push(Change::Both(*va, *vb));
                    a.next();
                    b.next();
                }
            },
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use chrono::{DateTime, Utc};
    use pretty_assertions::assert_eq;

    use super::*;
    use crate::slurm::tag::OwnerTag;
    use crate::slurm::types::{ExitStatus, JobState, Node, NodeState};
    use crate::state::index::{ListingFailure, NodeJobs};

    const TAG: &str = "slurm.rs/uid=u1,generation=1";

    /// What, records before, records after, the events expected.
    type Row<T> = (&'static str, Vec<T>, Vec<T>, Vec<SlurmEvent>);

    fn cluster() -> ObjectRef<SlurmCluster> {
        ObjectRef::new("c1")
    }

    fn t(epoch: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(epoch, 0).unwrap()
    }

    fn job(id: u32, state: &str) -> Job {
        Job {
            job_id: id,
            name: "j".into(),
            state: JobState::from_strings(&state.split('+').collect::<Vec<_>>()),
            user_name: Some("slurm".into()),
            partition: Some("debug".into()),
            node_count: Some(1),
            submit_time: Some(t(100)),
            start_time: Some(t(200)),
            end_time: Some(t(300)),
            time_limit: Some(Duration::from_secs(60)),
            working_directory: Some("/tmp".into()),
            ..Job::bare().with_comment(TAG)
        }
    }

    fn node(name: &str, state: &[&str]) -> Node {
        Node {
            name: name.into(),
            state: NodeState::from_strings(state),
            reason: None,
            reason_set_by_user: None,
            cpus: Some(1),
            alloc_cpus: Some(0),
            real_memory: Some(1000),
            features: vec![],
            partitions: vec!["debug".into()],
            address: Some("127.0.0.1".into()),
            hostname: Some("localhost".into()),
            port: Some(17001),
            slurmd_version: Some("24.11.5".into()),
            owner: None,
        }
    }

    fn up() -> Health {
        Health::Up { since: t(1) }
    }

    fn down(reason: &'static str) -> Health {
        Health::Down {
            since: t(2),
            reason,
            message: "m".into(),
        }
    }

    fn state(jobs: Vec<Job>, nodes: Vec<Node>, health: Health) -> ClusterState {
        ClusterState {
            jobs: Arc::new(jobs.into_iter().map(|j| (j.job_id, j)).collect()),
            nodes: Arc::new(nodes.into_iter().map(|n| (n.name.clone(), n)).collect()),
            health,
            ..ClusterState::default()
        }
    }

    fn changed(id: u32) -> SlurmEvent {
        SlurmEvent::JobChanged {
            cluster: cluster(),
            job_id: id,
            owner: OwnerTag::parse(TAG),
        }
    }

    fn gone(id: u32) -> SlurmEvent {
        SlurmEvent::JobGone {
            cluster: cluster(),
            job_id: id,
            owner: OwnerTag::parse(TAG),
        }
    }

    fn node_changed(name: &str) -> SlurmEvent {
        SlurmEvent::NodeChanged {
            cluster: cluster(),
            node: name.into(),
        }
    }

    fn with(job: Job, edit: impl FnOnce(&mut Job)) -> Job {
        let mut job = job;
        edit(&mut job);
        job
    }

    #[test]
    fn job_events() {
        let pending = with(job(1, "PENDING"), |j| {
            j.start_time = Some(t(500));
            j.end_time = Some(t(900));
        });
        let running = with(job(1, "RUNNING"), |j| {
            j.nodes = Some("n1".into());
            j.end_time = Some(t(260));
        });
        let done = with(job(1, "COMPLETED"), |j| {
            j.nodes = Some("n1".into());
            j.exit = Some(ExitStatus {
                return_code: Some(0),
                status: vec!["SUCCESS".into()],
                ..ExitStatus::default()
            });
        });
        let table: Vec<Row<Job>> = vec![
            ("nothing", vec![], vec![], vec![]),
            ("appears", vec![], vec![pending.clone()], vec![changed(1)]),
            (
                "unchanged",
                vec![pending.clone()],
                vec![pending.clone()],
                vec![],
            ),
            (
                "pending: Slurm moved the expected start (shown in the status)",
                vec![pending.clone()],
                vec![with(pending.clone(), |j| {
                    j.start_time = Some(t(800));
                    j.end_time = Some(t(1_200));
                })],
                vec![changed(1)],
            ),
            (
                "pending: only the expected end moved",
                vec![pending.clone()],
                vec![with(pending.clone(), |j| j.end_time = Some(t(1_300)))],
                vec![],
            ),
            (
                "pending: priority, hold and the reason's words",
                vec![pending.clone()],
                vec![with(pending.clone(), |j| {
                    j.priority = Some(0);
                    j.held = true;
                    j.state_description = Some("held by user".into());
                })],
                vec![changed(1)],
            ),
            (
                "running: the expected end is noise",
                vec![running.clone()],
                vec![with(running.clone(), |j| j.end_time = Some(t(999)))],
                vec![],
            ),
            (
                "starts",
                vec![pending.clone()],
                vec![running.clone()],
                vec![changed(1)],
            ),
            (
                "ends",
                vec![running.clone()],
                vec![done.clone()],
                vec![changed(1)],
            ),
            (
                "completing flag clears",
                vec![with(done.clone(), |j| {
                    j.state = JobState::from_strings(&["COMPLETED", "COMPLETING"])
                })],
                vec![done.clone()],
                vec![changed(1)],
            ),
            (
                "reason",
                vec![pending.clone()],
                vec![with(pending.clone(), |j| {
                    j.state_reason = Some("Resources".into())
                })],
                vec![changed(1)],
            ),
            (
                "exit code",
                vec![done.clone()],
                vec![with(done.clone(), |j| {
                    j.exit = Some(ExitStatus {
                        return_code: Some(3),
                        ..ExitStatus::default()
                    })
                })],
                vec![changed(1)],
            ),
            (
                "signal",
                vec![done.clone()],
                vec![with(done.clone(), |j| {
                    j.exit = Some(ExitStatus {
                        signal: Some(15),
                        ..ExitStatus::default()
                    })
                })],
                vec![changed(1)],
            ),
            (
                "time limit",
                vec![running.clone()],
                vec![with(running.clone(), |j| j.time_limit = None)],
                vec![changed(1)],
            ),
            (
                "array tasks leave the meta record",
                vec![with(pending.clone(), |j| {
                    j.array_task_string = Some("0-3".into())
                })],
                vec![with(pending.clone(), |j| {
                    j.array_task_string = Some("1-3".into())
                })],
                vec![changed(1)],
            ),
            ("vanishes", vec![done.clone()], vec![], vec![gone(1)]),
            (
                "several, by id",
                vec![job(3, "RUNNING"), job(1, "PENDING")],
                vec![job(2, "PENDING"), job(3, "COMPLETED")],
                vec![gone(1), changed(2), changed(3)],
            ),
        ];
        for (what, before, after, want) in table {
            let got = diff(
                &cluster(),
                &state(before, vec![], up()),
                &state(after, vec![], up()),
            );
            assert_eq!(got, want, "{what}");
        }
    }

    #[test]
    fn a_record_that_becomes_unreadable_or_readable_again_is_a_change() {
        let unread = |reason: &'static str| crate::state::index::Unreadable {
            reason,
            message: "m".into(),
            since: t(3),
        };
        let with_unreadable = |ids: &[(u32, &'static str)]| ClusterState {
            unreadable: Arc::new(ids.iter().map(|(id, r)| (*id, unread(r))).collect()),
            ..state(vec![job(1, "RUNNING"), job(2, "RUNNING")], vec![], up())
        };
        type Unread<'a> = &'a [(u32, &'static str)];
        let table: [(&str, Unread, Unread, Vec<SlurmEvent>); 5] = [
            ("none", &[], &[], vec![]),
            (
                "1 becomes unreadable",
                &[],
                &[(1, "ResponseTooLarge")],
                vec![changed(1)],
            ),
            (
                "still, as before",
                &[(1, "ResponseTooLarge")],
                &[(1, "ResponseTooLarge")],
                vec![],
            ),
            (
                "for another reason",
                &[(1, "ResponseTooLarge")],
                &[(1, "DecodeError")],
                vec![changed(1)],
            ),
            ("read again", &[(1, "DecodeError")], &[], vec![changed(1)]),
        ];
        for (what, before, after, want) in table {
            let got = diff(
                &cluster(),
                &with_unreadable(before),
                &with_unreadable(after),
            );
            assert_eq!(got, want, "{what}");
        }
        // Someone else's (not in the index's jobs): no event.
        let got = diff(
            &cluster(),
            &with_unreadable(&[]),
            &with_unreadable(&[(7, "DecodeError")]),
        );
        assert!(got.is_empty(), "{got:?}");
    }

    #[test]
    fn events_carry_the_comment_they_had() {
        let foreign = with(job(4, "PENDING"), |j| {
            j.set_comment(Some("someone's".into()))
        });
        // The index only holds ours; a comment edited away from our tag is a departure.
        let got = diff(
            &cluster(),
            &state(vec![job(4, "PENDING")], vec![], up()),
            &state(vec![], vec![], up()),
        );
        assert_eq!(got, vec![gone(4)]);
        // A comment edit on a job we hold (e.g. to another generation's tag) is a change.
        let retagged = with(job(4, "PENDING"), |j| {
            j.set_comment(Some("slurm.rs/uid=u1,generation=2".into()))
        });
        let got = diff(
            &cluster(),
            &state(vec![job(4, "PENDING")], vec![], up()),
            &state(vec![retagged], vec![], up()),
        );
        assert_eq!(
            got,
            vec![SlurmEvent::JobChanged {
                cluster: cluster(),
                job_id: 4,
                owner: OwnerTag::parse("slurm.rs/uid=u1,generation=2")
            }]
        );
        assert!(job_differs(&job(4, "PENDING"), &foreign));
        // Another SlurmJob's tag under the id (a new job given it): both are told.
        let theirs = with(job(4, "PENDING"), |j| {
            j.set_comment(Some("slurm.rs/uid=u2,generation=1".into()))
        });
        let got = diff(
            &cluster(),
            &state(vec![job(4, "PENDING")], vec![], up()),
            &state(vec![theirs], vec![], up()),
        );
        assert_eq!(
            got,
            vec![
                gone(4),
                SlurmEvent::JobChanged {
                    cluster: cluster(),
                    job_id: 4,
                    owner: OwnerTag::parse("slurm.rs/uid=u2,generation=1")
                }
            ]
        );
    }

    #[test]
    fn node_events() {
        let idle = node("n1", &["IDLE"]);
        let table: Vec<Row<Node>> = vec![
            (
                "appears",
                vec![],
                vec![idle.clone()],
                vec![node_changed("n1")],
            ),
            ("unchanged", vec![idle.clone()], vec![idle.clone()], vec![]),
            (
                "drain",
                vec![idle.clone()],
                vec![with_node(&idle, |n| {
                    n.state = NodeState::from_strings(&["IDLE", "DRAIN"]);
                    n.reason = Some("maintenance".into());
                })],
                vec![node_changed("n1")],
            ),
            (
                "allocated",
                vec![idle.clone()],
                vec![with_node(&idle, |n| {
                    n.state = NodeState::from_strings(&["ALLOCATED"]);
                    n.alloc_cpus = Some(1);
                })],
                vec![node_changed("n1")],
            ),
            (
                "not responding",
                vec![idle.clone()],
                vec![with_node(&idle, |n| {
                    n.state = NodeState::from_strings(&["IDLE", "NOT_RESPONDING"])
                })],
                vec![node_changed("n1")],
            ),
            (
                "reason text only",
                vec![idle.clone()],
                vec![with_node(&idle, |n| n.reason = Some("x".into()))],
                vec![node_changed("n1")],
            ),
            (
                "deleted",
                vec![idle.clone(), node("n2", &["IDLE"])],
                vec![node("n2", &["IDLE"])],
                vec![SlurmEvent::NodeGone {
                    cluster: cluster(),
                    node: "n1".into(),
                }],
            ),
        ];
        for (what, before, after, want) in table {
            let got = diff(
                &cluster(),
                &state(vec![], before, up()),
                &state(vec![], after, up()),
            );
            assert_eq!(got, want, "{what}");
        }
    }

    fn with_node(node: &Node, edit: impl FnOnce(&mut Node)) -> Node {
        let mut node = node.clone();
        edit(&mut node);
        node
    }

    #[test]
    fn jobs_starting_or_ending_on_a_node_change_it() {
        let base = state(
            vec![],
            vec![node("n1", &["MIXED"]), node("n2", &["IDLE"])],
            up(),
        );
        let running = |count, deadline| {
            let mut s = base.clone();
            s.node_jobs = Arc::new(
                [(
                    "n1".to_owned(),
                    NodeJobs {
                        running: count,
                        deadline,
                    },
                )]
                .into(),
            );
            s
        };
        let one = running(1, Some(t(100)));
        assert_eq!(diff(&cluster(), &base, &one), vec![node_changed("n1")]);
        assert_eq!(diff(&cluster(), &one, &one.clone()), vec![]);
        assert_eq!(
            diff(&cluster(), &one, &running(2, Some(t(100)))),
            vec![node_changed("n1")]
        );
        assert_eq!(
            diff(&cluster(), &one, &running(1, None)),
            vec![node_changed("n1")],
            "deadline"
        );
        assert_eq!(diff(&cluster(), &one, &base), vec![node_changed("n1")]);
        // A summary for a node slurmctld does not list is no event.
        let mut ghost = base.clone();
        ghost.node_jobs = Arc::new([("n9".to_owned(), NodeJobs::default())].into());
        assert_eq!(diff(&cluster(), &base, &ghost), vec![]);
    }

    #[test]
    fn health_events_fire_on_flips_only() {
        let flip = |a: Health, b: Health| {
            diff(
                &cluster(),
                &state(vec![], vec![], a),
                &state(vec![], vec![], b),
            )
        };
        let health = |up| {
            vec![SlurmEvent::HealthChanged {
                cluster: cluster(),
                up,
            }]
        };
        assert_eq!(flip(Health::Unknown, up()), health(true), "first poll ok");
        assert_eq!(
            flip(Health::Unknown, down("Unreachable")),
            health(false),
            "first poll failed"
        );
        assert_eq!(flip(up(), down("Unreachable")), health(false));
        assert_eq!(
            flip(down("Unreachable"), down("Timeout")),
            vec![],
            "still down"
        );
        assert_eq!(flip(down("Unreachable"), up()), health(true));
        assert_eq!(flip(up(), Health::Up { since: t(9) }), vec![]);
        assert_eq!(flip(Health::Unknown, Health::Unknown), vec![]);
    }

    /// What the SlurmCluster's `JobsListed` condition says changes: the first answer, a first
    /// failure, an answer after failures. A failure or an answer repeated is no event.
    #[test]
    fn listing_events_fire_on_flips_only() {
        let listed = |at: Option<i64>, failure: Option<(&'static str, i64)>| ClusterState {
            fully_listed_at: at.map(t),
            listing_failure: failure.map(|(reason, since)| ListingFailure {
                reason,
                message: "m".into(),
                since: t(since),
            }),
            ..state(vec![], vec![], up())
        };
        let flip = |a: &ClusterState, b: &ClusterState| diff(&cluster(), a, b);
        let event = |failing| {
            vec![SlurmEvent::ListingChanged {
                cluster: cluster(),
                failing,
            }]
        };
        let none = listed(None, None);
        assert_eq!(flip(&none, &none), vec![]);
        assert_eq!(
            flip(&none, &listed(Some(5), None)),
            event(false),
            "first answer"
        );
        assert_eq!(
            flip(&none, &listed(None, Some(("Timeout", 5)))),
            event(true),
            "first listing failed"
        );
        assert_eq!(
            flip(&listed(Some(5), None), &listed(Some(9), None)),
            vec![],
            "answered again"
        );
        assert_eq!(
            flip(
                &listed(Some(5), None),
                &listed(Some(5), Some(("Timeout", 7)))
            ),
            event(true)
        );
        assert_eq!(
            flip(
                &listed(Some(5), Some(("Timeout", 7))),
                &listed(Some(5), Some(("Unreachable", 7)))
            ),
            vec![],
            "still failing"
        );
        assert_eq!(
            flip(
                &listed(Some(5), Some(("Timeout", 7))),
                &listed(Some(9), None)
            ),
            event(false)
        );
        // Before the first complete cycle: a listing that answers after failing.
        assert_eq!(
            flip(&listed(None, Some(("Timeout", 7))), &none),
            event(false),
            "answered, not complete yet"
        );
    }

    #[test]
    fn health_comes_first_then_jobs_then_nodes() {
        let got = diff(
            &cluster(),
            &state(vec![], vec![], down("Timeout")),
            &state(vec![job(1, "PENDING")], vec![node("n1", &["IDLE"])], up()),
        );
        assert_eq!(
            got,
            vec![
                SlurmEvent::HealthChanged {
                    cluster: cluster(),
                    up: true
                },
                changed(1),
                node_changed("n1"),
            ]
        );
    }
}
