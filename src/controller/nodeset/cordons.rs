//! Which Kubernetes nodes are cordoned (`spec.unschedulable`: `kubectl cordon`, and
//! `kubectl drain` before it evicts), from one watch of every Node for the whole process (every
//! SlurmNodeSet controller shares it). Each node's name is kept, and whether it is cordoned.
//!
//! A pod's host is known while the watch serves. Until the first list is in, and for a node the
//! list does not hold (deleted: its pods are about to go), it is [`Host::Unknown`]: the planner
//! then drains nothing for a cordon and resumes no drain of ours made for one. After a failed
//! request, until a new watch has listed the nodes again (a chart without the `nodes` rule,
//! rights taken away later, an API server away), a node last seen cordoned still counts as
//! cordoned (a drain kept a little longer, never a job ended) and any other is unknown.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{PoisonError, RwLock};
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::watcher;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::plan::Host;

/// Nodes a page of the list holds: a Node's status (its images above all) makes it large.
const LIST_PAGE: u32 = 100;

/// The waits between failed requests of the watch: kube's own backoff starts again at every
/// list attempt, so a refused list would be asked again every second.
fn retry_delays() -> impl Iterator<Item = Duration> {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_secs(1))
        .with_max_delay(Duration::from_secs(300))
        .with_jitter()
        .without_max_times()
        .build()
}

/// The Kubernetes nodes, by name, and whether each is cordoned.
#[derive(Debug)]
pub struct Cordons {
    seen: RwLock<Seen>,
    /// Bumped whenever what [`Self::host`] answers may have changed.
    changed: watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct Seen {
    /// A list completed: `nodes` holds every node.
    complete: bool,
    /// The last request failed, and no event came since: the answers may be stale.
    failing: bool,
    /// Every node, and whether it is cordoned.
    nodes: BTreeMap<String, bool>,
    /// A (re)list in progress: what it found so far.
    listing: Option<BTreeMap<String, bool>>,
}

impl Seen {
    fn serves(&self) -> bool {
        self.complete && !self.failing
    }
}

/// How long a watch must have served (since its list was done) for a failure of it to be
/// retried after the shortest wait again: a list that works followed by a watch that fails at
/// once (a role with `list` but not `watch`, a proxy that breaks watches) is retried ever more
/// slowly, not every second.
const SERVED_LONG_ENOUGH: Duration = Duration::from_secs(60);

/// Whether a watch whose list was done at `listed_at` has served [`SERVED_LONG_ENOUGH`].
fn served_long_enough(listed_at: Option<std::time::Instant>) -> bool {
    listed_at.is_some_and(|at| at.elapsed() >= SERVED_LONG_ENOUGH)
}

/// Whether `error` is a watch's resourceVersion expiring (410 Gone) after it served long
/// enough: kube lists again at once, no failure. Sooner, it is one (waited out): a version that
/// expires before every watch starts would otherwise loop on lists with no wait.
fn expired_after_serving(error: &watcher::Error, listed_at: Option<std::time::Instant>) -> bool {
    matches!(error, watcher::Error::WatchError(status) if status.code == 410)
        && served_long_enough(listed_at)
}

/// Whether an event shows the watch serving again after a failure: a list done, or a change
/// of a watch (an `Init` or a listed page alone is not). Such an event ends `failing`.
fn serves_again(event: &watcher::Event<Node>) -> bool {
    matches!(
        event,
        watcher::Event::InitDone | watcher::Event::Apply(_) | watcher::Event::Delete(_)
    )
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
        let known = node
            .filter(|name| !name.is_empty() && seen.complete)
            .and_then(|name| Some((name, *seen.nodes.get(name)?)));
        match known {
            // Last seen cordoned, also while the watch fails: its drains stay.
            Some((name, true)) => Host::Cordoned(name.to_owned()),
            Some((_, false)) if !seen.failing => Host::Open,
            _ => Host::Unknown,
        }
    }

    /// One event of the Node watch. Returns whether the answers of [`Self::host`] changed
    /// (and tells [`Self::changes`] so).
    pub fn apply(&self, event: &watcher::Event<Node>) -> bool {
        let mut seen = self.seen.write().unwrap_or_else(PoisonError::into_inner);
        let served = seen.serves();
        if serves_again(event) {
            seen.failing = false;
        }
        let changed = match event {
            watcher::Event::Init => {
                seen.listing = Some(BTreeMap::new());
                false
            }
            // After a failure, the answers stay as `failed` left them until the list is done.
            watcher::Event::InitApply(node) => {
                seen.listing
                    .get_or_insert_with(BTreeMap::new)
                    .insert(node.name_any(), is_cordoned(node));
                false
            }
            watcher::Event::InitDone => {
                let listed = seen.listing.take().unwrap_or_default();
                let changed = listed != seen.nodes;
                seen.nodes = listed;
                seen.complete = true;
                changed
            }
            watcher::Event::Apply(node) => {
                let cordoned = is_cordoned(node);
                seen.nodes.insert(node.name_any(), cordoned) != Some(cordoned)
            }
            watcher::Event::Delete(node) => seen.nodes.remove(&node.name_any()).is_some(),
        };
        // Answers change when they become known again, and while known, when the nodes do.
        let changed = seen.serves() && (changed || !served);
        drop(seen);
        if changed {
            self.changed.send_modify(|n| *n = n.wrapping_add(1));
        }
        changed
    }

    /// A request of the watch failed: until it serves again, a node last seen cordoned counts
    /// as cordoned and any other is unknown.
    pub fn failed(&self) {
        let mut seen = self.seen.write().unwrap_or_else(PoisonError::into_inner);
        seen.failing = true;
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

    /// Follow every Node of the cluster until `shutdown`. After a failed request the watch is
    /// made anew (so it lists the nodes again, and serving again always ends in a complete list)
    /// after a wait that grows to 5-10 minutes while they keep failing ([`retry_delays`]; the
    /// waits start again from the shortest once a watch has served for [`SERVED_LONG_ENOUGH`]).
    /// A watch whose resourceVersion expired (410 Gone) after it served that long lists again by
    /// itself: no failure.
    pub fn follow(
        self: std::sync::Arc<Self>,
        client: kube::Client,
        shutdown: CancellationToken,
    ) -> impl Future<Output = ()> + Send + 'static {
        let nodes: Api<Node> = Api::all(client);
        async move {
            let mut delays = retry_delays();
            loop {
                let mut listed_at = None;
                let error = {
                    let events = watcher(
                        nodes.clone(),
                        watcher::Config::default().page_size(LIST_PAGE),
                    )
                    .take_until(shutdown.clone().cancelled_owned());
                    let mut events = std::pin::pin!(events);
                    loop {
                        match events.next().await {
                            None => return,
                            Some(Ok(event)) => {
                                if matches!(event, watcher::Event::InitDone) {
                                    listed_at = Some(std::time::Instant::now());
                                }
                                self.apply(&event);
                            }
                            Some(Err(error)) if expired_after_serving(&error, listed_at) => {
                                debug!(%error, "the Node watch's resourceVersion expired: listing again");
                            }
                            Some(Err(error)) => break error,
                        }
                    }
                };
                self.failed();
                if served_long_enough(listed_at) {
                    delays = retry_delays();
                }
                let delay = delays.next().unwrap_or(Duration::from_secs(300));
                let refused = matches!(
                    &error,
                    watcher::Error::InitialListFailed(kube::Error::Api(status))
                        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
                        if status.code == 403
                );
                warn!(
                    %error,
                    refused,
                    retry_in = ?delay,
                    "cannot follow the Kubernetes nodes' cordons: until it works again, no new cordon is drained in Slurm and no uncordon resumed{}",
                    if refused { " (refused: the operator's ClusterRole needs list and watch on nodes)" } else { "" }
                );
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = shutdown.cancelled() => return,
                }
            }
        }
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

    fn told(changes: &mut (impl Stream<Item = ()> + Unpin)) -> bool {
        futures::FutureExt::now_or_never(changes.next()).is_some()
    }

    /// Nothing is known until a list completes; then cordons and uncordons are followed, a
    /// relist replaces the nodes once it is done (not before), and only real changes are told.
    /// A node the list does not hold (never seen, deleted) is not known.
    #[tokio::test]
    async fn cordons_are_known_once_listed_and_followed_after() {
        let cordons = Cordons::default();
        let mut changes = Box::pin(cordons.changes());
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
                Host::Unknown
            ],
            "k9 is no node of the list"
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
        assert_eq!(
            host("k2"),
            Host::Unknown,
            "deleted while cordoned: not taken as uncordoned"
        );
        assert!(told(&mut changes));

        // A relist: the old answers hold until it is done.
        assert!(!cordons.apply(&watcher::Event::Init));
        for name in ["k1", "k2"] {
            assert!(!cordons.apply(&watcher::Event::InitApply(node(name, None))));
        }
        assert!(!cordons.apply(&watcher::Event::InitApply(node("k3", Some(true)))));
        assert_eq!(host("k3"), Host::Open, "still the old answer mid-relist");
        assert!(cordons.apply(&watcher::Event::InitDone));
        assert_eq!(
            [host("k1"), host("k2"), host("k3")],
            [Host::Open, Host::Open, Host::Cordoned("k3".into())]
        );
        assert!(!cordons.apply(&watcher::Event::Init));
        for event in [
            watcher::Event::InitApply(node("k1", None)),
            watcher::Event::InitApply(node("k2", None)),
            watcher::Event::InitApply(node("k3", Some(true))),
        ] {
            assert!(!cordons.apply(&event));
        }
        assert!(
            !cordons.apply(&watcher::Event::InitDone),
            "a relist that finds the same is no change"
        );
    }

    /// After a failed request a node last seen cordoned still counts as cordoned, any other is
    /// unknown (rights taken away: the answers would be frozen), until the watch serves again:
    /// a complete relist or an event of a watch, which is told even when it changes nothing
    /// else; a relist's pages alone do not count.
    #[tokio::test]
    async fn a_failing_watch_keeps_only_its_cordons_until_it_serves_again() {
        let cordons = Cordons::default();
        let listed = || {
            [
                watcher::Event::Init,
                watcher::Event::InitApply(node("k1", Some(true))),
                watcher::Event::InitApply(node("k2", None)),
                watcher::Event::InitDone,
            ]
        };
        for event in listed() {
            cordons.apply(&event);
        }
        let mut changes = Box::pin(cordons.changes());
        cordons.failed();
        assert_eq!(cordons.host(Some("k1")), Host::Cordoned("k1".into()));
        assert_eq!(cordons.host(Some("k2")), Host::Unknown);
        assert!(
            !told(&mut changes),
            "a failure holds actions back: nothing to reconcile"
        );
        let [init, k1, k2, done] = listed();
        for event in [init, k1, k2] {
            assert!(!cordons.apply(&event));
        }
        assert_eq!(
            cordons.host(Some("k2")),
            Host::Unknown,
            "mid-relist, still failing"
        );
        assert!(!told(&mut changes));
        assert!(
            cordons.apply(&done),
            "known again, told though the relist found what was there before"
        );
        assert!(told(&mut changes));
        assert_eq!(cordons.host(Some("k2")), Host::Open);

        cordons.failed();
        assert!(
            cordons.apply(&watcher::Event::Apply(node("k2", None))),
            "an unchanged node's event of a watch: known again, told"
        );
        assert_eq!(cordons.host(Some("k2")), Host::Open);
        assert_eq!(cordons.host(Some("k1")), Host::Cordoned("k1".into()));
    }

    /// What ends a failure: a list done or a watch's change, not the start of a list nor one of
    /// its pages.
    #[test]
    fn only_a_done_list_or_a_change_shows_the_watch_serving() {
        assert!(!serves_again(&watcher::Event::Init));
        assert!(!serves_again(&watcher::Event::InitApply(node("k1", None))));
        assert!(serves_again(&watcher::Event::InitDone));
        assert!(serves_again(&watcher::Event::Apply(node("k1", None))));
        assert!(serves_again(&watcher::Event::Delete(node("k1", None))));
    }

    /// A 410 after a watch served a while is routine (kube lists again); sooner, or any other
    /// error, is a failure.
    #[test]
    fn only_a_410_after_serving_a_while_is_routine() {
        use std::time::Instant;
        let gone = || {
            watcher::Error::WatchError(Box::new(
                kube::core::Status::failure("too old resource version", "Expired").with_code(410),
            ))
        };
        let long_ago = Instant::now().checked_sub(SERVED_LONG_ENOUGH + Duration::from_secs(1));
        let long_ago = long_ago.expect("the clock has run for a minute");
        assert!(expired_after_serving(&gone(), Some(long_ago)));
        assert!(
            !expired_after_serving(&gone(), Some(Instant::now())),
            "just listed"
        );
        assert!(!expired_after_serving(&gone(), None), "never listed");
        let forbidden = watcher::Error::WatchError(Box::new(
            kube::core::Status::failure("forbidden", "Forbidden").with_code(403),
        ));
        assert!(!expired_after_serving(&forbidden, Some(long_ago)));
        assert!(!expired_after_serving(
            &watcher::Error::NoResourceVersion,
            Some(long_ago)
        ));
    }

    /// The waits between failed requests grow to 5 minutes (and up to as much again of jitter)
    /// and stay there.
    #[test]
    fn failed_requests_are_retried_ever_more_slowly() {
        let delays: Vec<Duration> = retry_delays().take(12).collect();
        assert!(delays[0] >= Duration::from_secs(1), "{delays:?}");
        assert!(delays[0] < Duration::from_secs(3), "{delays:?}");
        assert!(delays[11] >= Duration::from_secs(300), "{delays:?}");
        assert!(
            delays.iter().all(|d| *d <= Duration::from_secs(600)),
            "{delays:?}"
        );
    }
}
