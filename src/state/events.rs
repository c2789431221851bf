//! Slurm events by poller: one bounded channel (a [`Feed`]) per poller, merged for each
//! subscriber (a controller). A consumer that falls behind one poller's events has missed only
//! that poller's: it is told which SlurmClusters to resync ([`Delivery::Lagged`]), and another
//! cluster's flood never forces a resync of everyone's objects (one shared channel did).
//!
//! A poller may serve several SlurmClusters (the registry shares it between SlurmClusters with
//! the same slurmrestd and credentials): it emits its events under one `label`, and each
//! subscriber fans the cluster-wide ones (health, nodes) out to the feed's current members.

use std::pin::Pin;
use std::sync::{Arc, Mutex, RwLock};

use futures::stream::{SelectAll, Stream, StreamExt};
use kube::runtime::reflector::ObjectRef;
use tokio::sync::{broadcast, mpsc};

use crate::crd::SlurmCluster;
use crate::state::index::SlurmEvent;

/// The SlurmClusters one poller serves, kept current by the registry (its single writer).
pub type Members = Arc<RwLock<Vec<ObjectRef<SlurmCluster>>>>;

/// What a subscriber receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    Event(SlurmEvent),
    /// This subscriber fell behind one poller and missed `missed` of its events: every object of
    /// these SlurmClusters (and only these) needs a reconcile.
    Lagged {
        clusters: Vec<ObjectRef<SlurmCluster>>,
        missed: u64,
    },
}

/// One poller's channel, as the registry holds it.
#[derive(Debug)]
pub struct Feed {
    /// What the poller sends on (and the registry, to announce a SlurmCluster joining it).
    pub sender: broadcast::Sender<SlurmEvent>,
    pub members: Members,
}

/// A feed as a subscriber sees it.
struct Source {
    label: ObjectRef<SlurmCluster>,
    members: Members,
    receiver: broadcast::Receiver<SlurmEvent>,
}

struct Known {
    label: ObjectRef<SlurmCluster>,
    members: Members,
    sender: broadcast::WeakSender<SlurmEvent>,
}

#[derive(Default)]
struct Hub {
    /// Live feeds (a feed is gone when its poller and registration dropped their senders).
    feeds: Vec<Known>,
    subscribers: Vec<mpsc::UnboundedSender<Source>>,
}

/// Where pollers' feeds are created and controllers subscribe. The lock is never held across an
/// `.await`.
pub struct EventHub {
    capacity: usize,
    hub: Mutex<Hub>,
}

impl std::fmt::Debug for EventHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventHub")
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

impl EventHub {
    /// A hub whose feeds each hold up to `capacity` events per subscriber.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            hub: Mutex::default(),
        }
    }

    /// A new feed for a poller that labels its events with `label`, its first member. Every
    /// subscriber, present or future, receives from it until it closes.
    pub fn feed(&self, label: ObjectRef<SlurmCluster>) -> Feed {
        let (sender, _) = broadcast::channel(self.capacity);
        let members: Members = Arc::new(RwLock::new(vec![label.clone()]));
        let mut hub = self.hub.lock().unwrap_or_else(|p| p.into_inner());
        hub.feeds.retain(|k| k.sender.strong_count() > 0);
        // Subscribed before the poller can send anything: nothing is lost.
        hub.subscribers.retain(|s| {
            s.send(Source {
                label: label.clone(),
                members: members.clone(),
                receiver: sender.subscribe(),
            })
            .is_ok()
        });
        hub.feeds.push(Known {
            label,
            members: members.clone(),
            sender: sender.downgrade(),
        });
        Feed { sender, members }
    }

    /// Every feed's events, merged: what one controller consumes.
    pub fn subscribe(&self) -> impl Stream<Item = Delivery> + Send + 'static {
        let (tx, rx) = mpsc::unbounded_channel();
        {
            let mut hub = self.hub.lock().unwrap_or_else(|p| p.into_inner());
            hub.feeds.retain(|known| match known.sender.upgrade() {
                Some(sender) => tx
                    .send(Source {
                        label: known.label.clone(),
                        members: known.members.clone(),
                        receiver: sender.subscribe(),
                    })
                    .is_ok(),
                None => false,
            });
            hub.subscribers.push(tx);
        }
        merged(rx)
    }
}

type Deliveries = Pin<Box<dyn Stream<Item = Delivery> + Send>>;

/// The feeds `added` brings, merged as they come.
fn merged(added: mpsc::UnboundedReceiver<Source>) -> impl Stream<Item = Delivery> + Send + 'static {
    futures::stream::unfold(
        (added, SelectAll::<Deliveries>::new(), false),
        |(mut added, mut all, mut no_more)| async move {
            loop {
                tokio::select! {
                    source = added.recv(), if !no_more => match source {
                        Some(source) => all.push(Box::pin(deliveries(source))),
                        None => no_more = true,
                    },
                    Some(delivery) = all.next(), if !all.is_empty() => {
                        return Some((delivery, (added, all, no_more)));
                    }
                    else => return None,
                }
            }
        },
    )
}

/// One feed's deliveries, until it closes.
fn deliveries(source: Source) -> impl Stream<Item = Delivery> + Send + 'static {
    futures::stream::unfold(source, |mut source| async move {
        let batch = match source.receiver.recv().await {
            Ok(event) => fan_out(&source.label, &members_of(&source.members), event),
            Err(broadcast::error::RecvError::Lagged(missed)) => vec![Delivery::Lagged {
                clusters: members_of(&source.members),
                missed,
            }],
            Err(broadcast::error::RecvError::Closed) => return None,
        };
        Some((futures::stream::iter(batch), source))
    })
    .flatten()
}

fn members_of(members: &Members) -> Vec<ObjectRef<SlurmCluster>> {
    members.read().unwrap_or_else(|p| p.into_inner()).clone()
}

/// An event the poller sent under `label`, as the feed's `members` each see it: health, listing
/// and node events once per member (each SlurmCluster's objects follow their own); job events once (they
/// are mapped by the owner's uid, whatever the cluster). Events naming another cluster (a
/// member announced by the registry) go as they are.
fn fan_out(
    label: &ObjectRef<SlurmCluster>,
    members: &[ObjectRef<SlurmCluster>],
    event: SlurmEvent,
) -> Vec<Delivery> {
    let for_each_member = |make: &dyn Fn(ObjectRef<SlurmCluster>) -> SlurmEvent| {
        members
            .iter()
            .map(|m| Delivery::Event(make(m.clone())))
            .collect()
    };
    match &event {
        SlurmEvent::HealthChanged { cluster, up } if cluster == label => {
            for_each_member(&|cluster| SlurmEvent::HealthChanged { cluster, up: *up })
        }
        SlurmEvent::ListingChanged { cluster, failing } if cluster == label => {
            for_each_member(&|cluster| SlurmEvent::ListingChanged {
                cluster,
                failing: *failing,
            })
        }
        SlurmEvent::NodeChanged { cluster, node } if cluster == label => {
            for_each_member(&|cluster| SlurmEvent::NodeChanged {
                cluster,
                node: node.clone(),
            })
        }
        SlurmEvent::NodeGone { cluster, node } if cluster == label => {
            for_each_member(&|cluster| SlurmEvent::NodeGone {
                cluster,
                node: node.clone(),
            })
        }
        _ => vec![Delivery::Event(event)],
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn health(name: &str, up: bool) -> SlurmEvent {
        SlurmEvent::HealthChanged {
            cluster: ObjectRef::new(name),
            up,
        }
    }

    async fn next(stream: &mut (impl Stream<Item = Delivery> + Unpin)) -> Delivery {
        tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await
            .expect("a delivery")
            .expect("the stream is open")
    }

    #[tokio::test]
    async fn a_subscriber_gets_feeds_created_before_and_after_it() {
        let hub = EventHub::new(8);
        let a = hub.feed(ObjectRef::new("a"));
        let mut events = Box::pin(hub.subscribe());
        let b = hub.feed(ObjectRef::new("b"));
        a.sender.send(health("a", true)).unwrap();
        assert_eq!(next(&mut events).await, Delivery::Event(health("a", true)));
        b.sender.send(health("b", false)).unwrap();
        assert_eq!(next(&mut events).await, Delivery::Event(health("b", false)));
    }

    #[tokio::test]
    async fn a_lagging_feed_resyncs_only_its_own_clusters() {
        let hub = EventHub::new(4);
        let mut events = Box::pin(hub.subscribe());
        let flood = hub.feed(ObjectRef::new("flood"));
        let quiet = hub.feed(ObjectRef::new("quiet"));
        for _ in 0..20 {
            flood.sender.send(health("flood", true)).unwrap();
        }
        quiet.sender.send(health("quiet", true)).unwrap();
        let mut seen = Vec::new();
        for _ in 0..6 {
            seen.push(next(&mut events).await);
        }
        assert!(
            seen.contains(&Delivery::Lagged {
                clusters: vec![ObjectRef::new("flood")],
                missed: 16
            }),
            "{seen:?}"
        );
        assert!(
            seen.contains(&Delivery::Event(health("quiet", true))),
            "{seen:?}"
        );
        assert!(
            !seen
                .iter()
                .any(|d| matches!(d, Delivery::Lagged { clusters, .. }
                if clusters.contains(&ObjectRef::new("quiet")))),
            "{seen:?}"
        );
    }

    #[tokio::test]
    async fn cluster_wide_events_reach_every_member_job_events_once() {
        let hub = EventHub::new(8);
        let mut events = Box::pin(hub.subscribe());
        let feed = hub.feed(ObjectRef::new("a"));
        feed.members.write().unwrap().push(ObjectRef::new("b"));
        feed.sender.send(health("a", true)).unwrap();
        assert_eq!(next(&mut events).await, Delivery::Event(health("a", true)));
        assert_eq!(next(&mut events).await, Delivery::Event(health("b", true)));
        let listing = |name: &str| SlurmEvent::ListingChanged {
            cluster: ObjectRef::new(name),
            failing: true,
        };
        feed.sender.send(listing("a")).unwrap();
        assert_eq!(next(&mut events).await, Delivery::Event(listing("a")));
        assert_eq!(next(&mut events).await, Delivery::Event(listing("b")));
        let job = SlurmEvent::JobGone {
            cluster: ObjectRef::new("a"),
            job_id: 7,
            owner: None,
        };
        feed.sender.send(job.clone()).unwrap();
        // An announcement for one member goes to that member only.
        feed.sender.send(health("b", true)).unwrap();
        assert_eq!(next(&mut events).await, Delivery::Event(job));
        assert_eq!(next(&mut events).await, Delivery::Event(health("b", true)));
    }

    #[tokio::test]
    async fn a_closed_feed_ends_and_others_go_on() {
        let hub = EventHub::new(8);
        let mut events = Box::pin(hub.subscribe());
        let gone = hub.feed(ObjectRef::new("gone"));
        let kept = hub.feed(ObjectRef::new("kept"));
        drop(gone);
        kept.sender.send(health("kept", true)).unwrap();
        assert_eq!(
            next(&mut events).await,
            Delivery::Event(health("kept", true))
        );
        // A later subscriber is not handed the closed feed.
        assert_eq!(hub.hub.lock().unwrap().feeds.len(), 2);
        let _late = hub.subscribe();
        assert_eq!(hub.hub.lock().unwrap().feeds.len(), 1);
    }
}
