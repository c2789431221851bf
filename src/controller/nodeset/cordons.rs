//! Which Kubernetes nodes are cordoned (`spec.unschedulable`: `kubectl cordon`, and
//! `kubectl drain` before it evicts), from one watch of every Node for the whole process (every
//! SlurmNodeSet controller shares it). Only the names of the cordoned ones are kept.
//!
//! Until the first list is in (or while the watch is refused: a chart without the `nodes`
//! rule), no pod's host is known ([`Host::Unknown`]): the planner then drains nothing for a
//! cordon and resumes no drain of ours made for one.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::{PoisonError, RwLock};

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::plan::Host;

/// Nodes a page of the list holds: a Node's status (its images above all) makes it large.
const LIST_PAGE: u32 = 100;

/// The cordoned Kubernetes nodes, by name.
#[derive(Debug)]
pub struct Cordons {
    seen: RwLock<Seen>,
    /// Bumped whenever what [`Self::host`] answers may have changed.
    changed: watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct Seen {
    /// A list completed: the set below is every cordoned node.
    complete: bool,
    cordoned: BTreeSet<String>,
    /// A (re)list in progress: what it found so far.
    listing: Option<BTreeSet<String>>,
}

impl Default for Cordons {
    fn default() -> Self {
        Self {
            seen: RwLock::default(),
            changed: watch::Sender::new(0),
        }
    }
}

fn is_cordoned(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|spec| spec.unschedulable)
        .unwrap_or(false)
}

impl Cordons {
    /// The host of a pod scheduled to Kubernetes node `node` (`None`: not scheduled).
    pub fn host(&self, node: Option<&str>) -> Host {
        let seen = self.seen.read().unwrap_or_else(PoisonError::into_inner);
        match node.filter(|name| !name.is_empty()) {
            Some(name) if seen.complete && seen.cordoned.contains(name) => {
                Host::Cordoned(name.to_owned())
            }
            Some(_) if seen.complete => Host::Open,
            _ => Host::Unknown,
        }
    }

    /// One event of the Node watch. Returns whether the answers of [`Self::host`] changed
    /// (and tells [`Self::changes`] so).
    pub fn apply(&self, event: &watcher::Event<Node>) -> bool {
        let mut seen = self.seen.write().unwrap_or_else(PoisonError::into_inner);
        let changed = match event {
            watcher::Event::Init => {
                seen.listing = Some(BTreeSet::new());
                false
            }
            watcher::Event::InitApply(node) => {
                if is_cordoned(node) {
                    seen.listing
                        .get_or_insert_with(BTreeSet::new)
                        .insert(node.name_any());
                }
                false
            }
            watcher::Event::InitDone => {
                let listed = seen.listing.take().unwrap_or_default();
                let changed = !seen.complete || listed != seen.cordoned;
                seen.cordoned = listed;
                seen.complete = true;
                changed
            }
            watcher::Event::Apply(node) if is_cordoned(node) => {
                seen.cordoned.insert(node.name_any())
            }
            watcher::Event::Apply(node) | watcher::Event::Delete(node) => {
                seen.cordoned.remove(&node.name_any())
            }
        };
        // The complete flag gates every answer: events before the first list change nothing.
        let changed = changed && seen.complete;
        drop(seen);
        if changed {
            self.changed.send_modify(|n| *n = n.wrapping_add(1));
        }
        changed
    }

    /// Yields once each time what [`Self::host`] answers changed (not for the state it starts
    /// with).
    pub fn changes(&self) -> impl Stream<Item = ()> + Send + 'static {
        let mut changed = self.changed.subscribe();
        changed.mark_unchanged();
        futures::stream::unfold(changed, |mut changed| async move {
            changed.changed().await.ok()?;
            changed.borrow_and_update();
            Some(((), changed))
        })
    }

    /// Follow every Node of the cluster until `shutdown` (the watch retries with backoff, and
    /// a refusal is logged each time).
    pub fn follow(
        self: std::sync::Arc<Self>,
        client: kube::Client,
        shutdown: CancellationToken,
    ) -> impl Future<Output = ()> + Send + 'static {
        let nodes: Api<Node> = Api::all(client);
        watcher(nodes, watcher::Config::default().page_size(LIST_PAGE))
            .default_backoff()
            .take_until(shutdown.cancelled_owned())
            .for_each(move |event| {
                match event {
                    Ok(event) => {
                        self.apply(&event);
                    }
                    Err(error) => warn!(
                        %error,
                        "cannot watch Kubernetes nodes: cordons are not followed (SlurmNodeSet pods on cordoned nodes are not drained in Slurm); the operator's ClusterRole needs list and watch on nodes"
                    ),
                }
                std::future::ready(())
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NodeSpec;

    fn node(name: &str, unschedulable: Option<bool>) -> Node {
        Node {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                unschedulable,
                ..NodeSpec::default()
            }),
            status: None,
        }
    }

    /// Nothing is known until a list completes; then cordons and uncordons are followed, a
    /// relist replaces the set once it is done (not before), and only real changes are told.
    #[tokio::test]
    async fn cordons_are_known_once_listed_and_followed_after() {
        let cordons = Cordons::default();
        let mut changes = Box::pin(cordons.changes());
        fn told(changes: &mut (impl Stream<Item = ()> + Unpin)) -> bool {
            futures::FutureExt::now_or_never(changes.next()).is_some()
        }
        let host = |name: &str| cordons.host(Some(name));
        assert_eq!(host("k1"), Host::Unknown, "before any list");
        assert!(!cordons.apply(&watcher::Event::Apply(node("k1", Some(true)))));
        assert_eq!(
            host("k1"),
            Host::Unknown,
            "an event before the list is not a list"
        );

        for event in [
            watcher::Event::Init,
            watcher::Event::InitApply(node("k1", Some(true))),
            watcher::Event::InitApply(node("k2", None)),
            watcher::Event::InitApply(node("k3", Some(false))),
        ] {
            assert!(!cordons.apply(&event));
        }
        assert_eq!(host("k1"), Host::Unknown, "the list is not done");
        assert!(!told(&mut changes));
        assert!(cordons.apply(&watcher::Event::InitDone));
        assert!(told(&mut changes), "the first list is told");
        assert_eq!(
            [host("k1"), host("k2"), host("k3"), host("k9")],
            [
                Host::Cordoned("k1".into()),
                Host::Open,
                Host::Open,
                Host::Open
            ]
        );
        assert_eq!(cordons.host(None), Host::Unknown, "not scheduled");
        assert_eq!(cordons.host(Some("")), Host::Unknown, "not scheduled");

        assert!(cordons.apply(&watcher::Event::Apply(node("k2", Some(true)))));
        assert!(told(&mut changes));
        assert!(!cordons.apply(&watcher::Event::Apply(node("k2", Some(true)))));
        assert!(
            !told(&mut changes),
            "a status update of a cordoned node is no change"
        );
        assert!(cordons.apply(&watcher::Event::Apply(node("k1", Some(false)))));
        assert_eq!(host("k1"), Host::Open, "uncordoned");
        assert!(cordons.apply(&watcher::Event::Delete(node("k2", Some(true)))));
        assert_eq!(host("k2"), Host::Open, "gone");
        assert!(told(&mut changes));

        // A relist: the old answers hold until it is done.
        assert!(!cordons.apply(&watcher::Event::Init));
        assert!(!cordons.apply(&watcher::Event::InitApply(node("k3", Some(true)))));
        assert_eq!(host("k3"), Host::Open, "still the old answer mid-relist");
        assert!(cordons.apply(&watcher::Event::InitDone));
        assert_eq!(host("k3"), Host::Cordoned("k3".into()));
        assert!(!cordons.apply(&watcher::Event::Init));
        assert!(!cordons.apply(&watcher::Event::InitApply(node("k3", Some(true)))));
        assert!(
            !cordons.apply(&watcher::Event::InitDone),
            "a relist that finds the same is no change"
        );
    }
}
