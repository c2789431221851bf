//! Leader election: with several replicas, only the holder of a Kubernetes Lease writes.
//!
//! Every replica runs the controllers, so their Kubernetes caches stay filled. A reconcile on a
//! replica that does not hold the Lease returns before it touches anything (no status patch, no
//! finalizer, no call to slurmrestd), and the Lease is read again right before what must never
//! happen twice or beside another leader: a SlurmJob's submit, a SlurmNodeSet's drains, resumes,
//! node removals and pod deletes. A stopping replica keeps the Lease until its controllers have
//! finished the reconciles under way. When a replica gains the Lease, every object of every
//! controller is reconciled ([`Leadership::gained`]), so nothing waits for its next change.
//!
//! The Lease itself is kept by `kube-lease-manager` (server-side apply, clock-skew grace), not by
//! code of ours. Its word alone does not let a replica write: a replica starts writing once its
//! own read of the Lease shows it the holder; while it leads, it reads the Lease every quarter
//! grace (each read bounded in time), and stops writing a quarter grace before the Lease it
//! last read expires (by its own clock: a standby's may be that much ahead), so that renewals
//! that fail or hang (the manager only retries them) stop its writes by the time a standby may
//! take over. A Lease deleted (by hand, to end
//! an election that looks stuck) is made again, empty, by whichever replica sees it gone first:
//! the manager makes it only when it starts, and would otherwise leave every replica alive,
//! ready, and never leading.

use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Api;
use kube_lease_manager::{LeaseManagerBuilder, LeaseManagerError};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// Whether this process may write now. Cheap to clone; every clone sees the same state.
#[derive(Clone, Debug)]
pub struct Leadership {
    state: watch::Receiver<bool>,
    /// Keeps the channel open for [`Leadership::always`] (nobody else holds the sender).
    _sender: Option<Arc<watch::Sender<bool>>>,
    /// With an election: the Lease, read again by [`Leadership::confirm`].
    lease: Option<Arc<LeaseCheck>>,
}

#[derive(Debug)]
struct LeaseCheck {
    api: Api<Lease>,
    name: String,
    identity: String,
    /// How long a read may take: the client sets no read timeout, and a read on a dead
    /// connection would otherwise hold a submit (and a graceful stop) for good.
    timeout: Duration,
    /// How long before the Lease's expiry (by this replica's clock) writes stop: the clock
    /// skew tolerated. A standby takes an expired Lease by its own clock, with no margin.
    margin: Duration,
}

/// Why the Lease could not be read.
#[derive(Debug, thiserror::Error)]
enum ReadError {
    #[error(transparent)]
    Api(#[from] kube::Error),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

/// The Lease `name`, read within `timeout`.
async fn read_lease(api: &Api<Lease>, name: &str, timeout: Duration) -> Result<Lease, ReadError> {
    match tokio::time::timeout(timeout, api.get(name)).await {
        Ok(read) => Ok(read?),
        Err(_) => Err(ReadError::Timeout(timeout)),
    }
}

/// Whether `error` says the Lease does not exist.
fn gone(error: &ReadError) -> bool {
    matches!(error, ReadError::Api(kube::Error::Api(status)) if status.code == 404)
}

/// Makes the Lease `name` again, empty, if it is gone (deleted by hand, say, to end a stuck
/// election): the Lease manager makes it only when it starts, and without it no replica can
/// lead, while each stays alive and ready. One made meanwhile by another replica is left.
async fn ensure_lease(check: &LeaseCheck) {
    match read_lease(&check.api, &check.name, check.timeout).await {
        Err(error) if gone(&error) => {}
        // There, or not known: nothing to make.
        _ => return,
    }
    let lease = Lease {
        metadata: kube::api::ObjectMeta {
            name: Some(check.name.clone()),
            ..Default::default()
        },
        spec: None,
    };
    let made = tokio::time::timeout(
        check.timeout,
        check.api.create(&kube::api::PostParams::default(), &lease),
    )
    .await;
    match made {
        Ok(Ok(_)) => warn!(lease = %check.name, "the Lease was gone; made it again"),
        Ok(Err(kube::Error::Api(status))) if status.code == 409 => {}
        Ok(Err(error)) => {
            warn!(lease = %check.name, %error, "the Lease is gone and cannot be made again")
        }
        Err(_) => {
            warn!(lease = %check.name, "the Lease is gone, and making it again got no answer")
        }
    }
}

/// Whether `lease` names `identity` as its holder and will not expire within `margin` of `now`.
fn holds(lease: &Lease, identity: &str, now: Timestamp, margin: Duration) -> bool {
    writable_until(lease, identity, margin).is_some_and(|until| until > now)
}

/// Until when `identity` may write by `lease`: its expiry less `margin`, if it holds it.
fn writable_until(lease: &Lease, identity: &str, margin: Duration) -> Option<Timestamp> {
    let margin = SignedDuration::try_from(margin).ok()?;
    expiry_for(lease, identity)?.checked_sub(margin).ok()
}

/// When `lease` expires, if it names `identity` as its holder: its renewal plus its duration.
fn expiry_for(lease: &Lease, identity: &str) -> Option<Timestamp> {
    let spec = lease.spec.as_ref()?;
    let (Some(renewed), Some(seconds)) = (&spec.renew_time, spec.lease_duration_seconds) else {
        return None;
    };
    if spec.holder_identity.as_deref() != Some(identity) {
        return None;
    }
    renewed
        .0
        .checked_add(SignedDuration::from_secs(i64::from(seconds)))
        .ok()
}

/// Whether this replica may write: the Lease manager says it leads, and the Lease it last read
/// itself is still its own at `now` (`expires`: its expiry less the skew margin). The manager's word alone is not enough: it
/// keeps saying "leading" while its renewals fail (it only logs and retries) or hang (a request
/// on a dead connection has no timeout), while a standby takes the Lease once it has expired.
/// The margin is a quarter of the grace: the manager renews a grace before the expiry, and the
/// reads must see that renewal before the margin begins, or writes would pause at every
/// renewal.
fn may_write(leading: bool, expires: Option<Timestamp>, now: Timestamp) -> bool {
    leading && expires.is_some_and(|expires| now < expires)
}

/// How long until [`may_write`] turns false by the clock alone (zero when it is already).
fn writable_for(expires: Option<Timestamp>, now: Timestamp) -> Duration {
    expires
        .and_then(|until| Duration::try_from(until.duration_since(now)).ok())
        .unwrap_or(Duration::ZERO)
}

impl Leadership {
    /// No election: this process is the only writer (one replica).
    pub fn always() -> Self {
        let (sender, state) = watch::channel(true);
        Self {
            state,
            _sender: Some(Arc::new(sender)),
            lease: None,
        }
    }

    /// Follows `state`, which its sender flips (the Lease manager, or a test).
    pub fn follow(state: watch::Receiver<bool>) -> Self {
        Self {
            state,
            _sender: None,
            lease: None,
        }
    }

    /// An election's state for tests: `state` as the renewal loop's word, the Lease `name` read
    /// through `api` for [`Leadership::confirm`], held when it names `identity`.
    #[cfg(test)]
    pub fn with_lease(
        state: watch::Receiver<bool>,
        api: Api<Lease>,
        name: &str,
        identity: &str,
    ) -> Self {
        let mut leadership = Self::follow(state);
        leadership.lease = Some(Arc::new(LeaseCheck {
            api,
            name: name.to_owned(),
            identity: identity.to_owned(),
            timeout: Duration::from_secs(5),
            margin: Duration::ZERO,
        }));
        leadership
    }

    /// Whether this process holds the Lease by a fresh read of it, for the one write that must
    /// never happen twice (a submit). [`Leadership::is_leader`] is what the renewal loop last
    /// saw: a replica paused (SIGSTOP, a frozen VM) past the Lease's expiry still believes it
    /// leads until that loop runs again, while another replica has taken over. Without an
    /// election this is `is_leader()`. A failed read counts as not leading.
    pub async fn confirm(&self) -> bool {
        if !self.is_leader() {
            return false;
        }
        let Some(check) = &self.lease else {
            return true;
        };
        match read_lease(&check.api, &check.name, check.timeout).await {
            Ok(lease) => {
                let held = holds(&lease, &check.identity, Timestamp::now(), check.margin);
                if !held {
                    warn!(
                        lease = %check.name,
                        holder = ?lease.spec.as_ref().and_then(|s| s.holder_identity.as_deref()),
                        "the Lease is no longer ours (seen right before a write); not writing"
                    );
                }
                held
            }
            Err(error) => {
                warn!(lease = %check.name, %error, "cannot read the Lease; not writing");
                false
            }
        }
    }

    /// Whether writes follow an election (another replica may have led before this one), not
    /// [`Leadership::always`].
    pub fn elected(&self) -> bool {
        self._sender.is_none()
    }

    /// Whether this process holds the Lease right now. A closed channel (the election task
    /// ended) counts as not leading: when in doubt, do not write.
    pub fn is_leader(&self) -> bool {
        self.state.has_changed().is_ok() && *self.state.borrow()
    }

    /// Yields once each time this process becomes the leader (not for the state it starts with:
    /// the controllers' first list reconciles everything anyway).
    pub fn gained(&self) -> impl Stream<Item = ()> + Send + 'static {
        self.turns(true)
    }

    /// Yields once each time this process stops leading (not for the state it starts with).
    pub fn lost(&self) -> impl Stream<Item = ()> + Send + 'static {
        self.turns(false)
    }

    fn turns(&self, to: bool) -> impl Stream<Item = ()> + Send + 'static {
        let mut state = self.state.clone();
        state.mark_unchanged();
        futures::stream::unfold(state, move |mut state| async move {
            loop {
                state.changed().await.ok()?;
                if *state.borrow_and_update() == to {
                    return Some(((), state));
                }
            }
        })
    }
}

/// How to take part in the election.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    /// Name of the Lease.
    pub name: String,
    /// Namespace of the Lease (the operator's own).
    pub namespace: String,
    /// This replica's identity (the pod name).
    pub identity: String,
    /// How long a Lease lasts without renewal.
    pub duration: Duration,
    /// How long before expiry it is renewed; a quarter of it is the clock skew tolerated
    /// between replicas.
    pub grace: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "leader election needs a Lease namespace (--leader-election-namespace or POD_NAMESPACE)"
    )]
    NoNamespace,
    #[error("lease duration {duration:?} must be longer than its grace period {grace:?}")]
    Durations { duration: Duration, grace: Duration },
    #[error("cannot use Lease {namespace}/{name}")]
    Lease {
        namespace: String,
        name: String,
        #[source]
        source: LeaseManagerError,
    },
}

impl Error {
    pub fn category(&self) -> &'static str {
        match self {
            Self::NoNamespace => "LeaseNamespaceMissing",
            Self::Durations { .. } => "LeaseDurationInvalid",
            Self::Lease { .. } => "LeaseFailed",
        }
    }
}

/// The field manager of this replica's Lease writes: unique per identity.
fn lease_field_manager(identity: &str) -> String {
    format!("{}-lease-{identity}", crate::crd::FIELD_MANAGER)
}

/// Join the election for `config`. Returns the state to gate writes on and the task that keeps
/// (or keeps trying to take) the Lease until `shutdown` (the operator cancels it once its
/// controllers have stopped), when it releases the Lease (a standby takes it once the expiry
/// it last read has passed, without forcing it).
pub async fn elect(
    client: kube::Client,
    config: &LeaseConfig,
    shutdown: CancellationToken,
) -> Result<(Leadership, JoinHandle<()>), Error> {
    let secs = |d: Duration| d.as_secs().max(1);
    if secs(config.duration) <= secs(config.grace) {
        return Err(Error::Durations {
            duration: config.duration,
            grace: config.grace,
        });
    }
    if config.namespace.is_empty() {
        return Err(Error::NoNamespace);
    }
    let manager = LeaseManagerBuilder::new(client.clone(), &config.name)
        .with_namespace(&config.namespace)
        .with_identity(&config.identity)
        .with_duration(secs(config.duration))
        .with_grace(secs(config.grace))
        // Each replica its own field manager (not the operator's shared one): server-side
        // apply's conflict on another manager's `holderIdentity` is what stops two replicas from
        // both taking a free Lease at the same moment.
        .with_field_manager(lease_field_manager(&config.identity))
        .build()
        .await
        .map_err(|source| Error::Lease {
            namespace: config.namespace.clone(),
            name: config.name.clone(),
            source,
        })?;
    let (state, task) = manager.watch().await;
    // The controllers follow a channel of ours, not the manager's: the manager releases the
    // Lease only once every receiver of its channel is gone, and the controllers' Context
    // outlives this task at shutdown.
    let duration = Duration::from_secs(secs(config.duration));
    // Writes stop a quarter grace before the expiry (the clock skew tolerated between
    // replicas). Reads every quarter grace, each done within it, see a renewal (made a grace
    // before the expiry) half a grace after it at the latest: a quarter grace before writes
    // would stop, left for the renewal's own latency. The read before a write (`confirm`) may
    // take half a grace, as before.
    let grace = Duration::from_secs(secs(config.grace));
    let every = (grace / 4).max(Duration::from_millis(250));
    let check = Arc::new(LeaseCheck {
        api: Api::namespaced(client, &config.namespace),
        name: config.name.clone(),
        identity: config.identity.clone(),
        timeout: (grace / 2).max(Duration::from_millis(500)),
        margin: grace / 4,
    });
    let mut leading = *state.borrow();
    // Not from the manager's word: its "leading" comes after its own writes and reads of the
    // Lease, each retried, so the renewal may be well before now. Writes start once a read of
    // the Lease (at once, below) shows its renewal time.
    let mut expires = None;
    let mut writing = may_write(leading, expires, Timestamp::now());
    let (gate, followed) = watch::channel(writing);
    let mut leadership = Leadership::follow(followed);
    leadership.lease = Some(Arc::clone(&check));
    let lease = format!("{}/{}", config.namespace, config.name);
    let identity = config.identity.clone();
    let keeper = tokio::spawn(async move {
        let mut state = state;
        // While leading, the Lease is read this often (the first tick is at once).
        let mut checks = tokio::time::interval(every);
        checks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // While not, that it exists is checked this often: a standby makes it again when it
        // is gone, with or without a leader to do so.
        let mut presence = tokio::time::interval(duration);
        presence.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let stale_in = writable_for(expires, Timestamp::now());
            tokio::select! {
                changed = state.changed() => {
                    if changed.is_err() {
                        warn!(%lease, "leader election stopped; this replica no longer writes");
                        break;
                    }
                    leading = *state.borrow_and_update();
                    expires = None;
                    if leading {
                        checks.reset_immediately();
                    }
                }
                _ = checks.tick(), if leading => {
                    // While writing, no longer than the Lease last read lasts: the clock's arm
                    // below cannot fire during the read.
                    let limit = if writing {
                        every.min(stale_in.max(Duration::from_millis(50)))
                    } else {
                        every
                    };
                    match read_lease(&check.api, &check.name, limit).await {
                        // Not ours any more (another holder, or released): `None` stops writes.
                        Ok(read) => {
                            expires = writable_until(&read, &check.identity, check.margin);
                        }
                        // Deleted: no longer ours either. Made again for the manager to take.
                        Err(error) if gone(&error) => {
                            expires = None;
                            ensure_lease(&check).await;
                        }
                        // Kept: the clock runs it out unless a later read sees it renewed.
                        Err(error) => warn!(
                            %lease, %error,
                            "cannot read the Lease; writes stop when the one last read expires"
                        ),
                    }
                }
                _ = presence.tick(), if !leading => ensure_lease(&check).await,
                () = tokio::time::sleep(stale_in), if writing => {}
                () = shutdown.cancelled() => break,
            }
            let now_writing = may_write(leading, expires, Timestamp::now());
            if now_writing != writing {
                writing = now_writing;
                gate.send_replace(writing);
                if writing {
                    info!(%lease, %identity, "became the leader");
                } else if leading {
                    warn!(
                        %lease, %identity,
                        "the Lease is not seen renewed (its renewals fail or hang); writes stop"
                    );
                } else {
                    warn!(%lease, %identity, "lost the Lease; writes stop");
                }
            }
        }
        // Writes stop before the Lease is released; dropping the manager's only receiver makes
        // it release the Lease and end. Dropping `gate` closes the controllers' channel.
        gate.send_replace(false);
        drop(gate);
        drop(state);
        match task.await {
            Ok(Ok(_manager)) => info!(%lease, "released the Lease"),
            Ok(Err(error)) => warn!(%lease, %error, "could not release the Lease"),
            Err(join) => warn!(%lease, error = %join, "the Lease task failed"),
        }
    });
    Ok((leadership, keeper))
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;

    use super::*;

    #[test]
    fn a_lease_is_held_by_its_holder_until_it_expires() {
        use k8s_openapi::api::coordination::v1::LeaseSpec;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
        let renewed = Timestamp::from_second(1_000).unwrap();
        let lease =
            |holder: Option<&str>, renewed: Option<Timestamp>, seconds: Option<i32>| Lease {
                spec: Some(LeaseSpec {
                    holder_identity: holder.map(str::to_owned),
                    renew_time: renewed.map(MicroTime),
                    lease_duration_seconds: seconds,
                    ..Default::default()
                }),
                ..Default::default()
            };
        let at = |s: i64| Timestamp::from_second(s).unwrap();
        let ours = lease(Some("a"), Some(renewed), Some(15));
        let none = Duration::ZERO;
        assert!(holds(&ours, "a", at(1_014), none));
        assert!(
            !holds(&ours, "a", at(1_015), none),
            "expired at renew + duration"
        );
        // A standby whose clock is ahead takes it at its own 1 015: writes stop before.
        let skew = Duration::from_secs(2);
        assert!(holds(&ours, "a", at(1_012), skew));
        assert!(
            !holds(&ours, "a", at(1_013), skew),
            "within the skew margin"
        );
        assert!(!holds(&ours, "b", at(1_001), none), "another holder");
        assert!(!holds(
            &lease(None, Some(renewed), Some(15)),
            "a",
            at(1_001),
            none
        ));
        assert!(!holds(
            &lease(Some("a"), None, Some(15)),
            "a",
            at(1_001),
            none
        ));
        assert!(!holds(
            &lease(Some("a"), Some(renewed), None),
            "a",
            at(1_001),
            none
        ));
        assert!(!holds(&Lease::default(), "a", at(1_001), none), "released");
    }

    /// Writes stop when the Lease last read expires, whatever the manager says: its renewals
    /// may fail or hang while it goes on saying "leading".
    #[test]
    fn writes_stop_when_the_lease_last_read_expires() {
        let at = |s: i64| Timestamp::from_second(s).unwrap();
        let expires = Some(at(1_015));
        assert!(may_write(true, expires, at(1_000)));
        assert!(may_write(true, expires, at(1_014)));
        assert!(!may_write(true, expires, at(1_015)), "expired");
        assert!(
            !may_write(false, expires, at(1_000)),
            "the manager says lost"
        );
        assert!(!may_write(true, None, at(1_000)), "not ours when last read");
        assert_eq!(writable_for(expires, at(1_004)), Duration::from_secs(11));
        assert_eq!(writable_for(expires, at(1_020)), Duration::ZERO);
        assert_eq!(writable_for(None, at(1_000)), Duration::ZERO);
    }

    /// The keeper's reads: what a Lease says about its holder's expiry.
    #[test]
    fn a_leases_expiry_is_its_holders_only() {
        use k8s_openapi::api::coordination::v1::LeaseSpec;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
        let lease = |holder: &str| Lease {
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                renew_time: Some(MicroTime(Timestamp::from_second(1_000).unwrap())),
                lease_duration_seconds: Some(15),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            expiry_for(&lease("a"), "a"),
            Some(Timestamp::from_second(1_015).unwrap())
        );
        assert_eq!(expiry_for(&lease("b"), "a"), None);
        assert_eq!(expiry_for(&Lease::default(), "a"), None);
        assert_eq!(
            writable_until(&lease("a"), "a", Duration::from_millis(2_500)),
            Some(Timestamp::from_second(1_012).unwrap() + SignedDuration::from_millis(500))
        );
        assert_eq!(writable_until(&lease("b"), "a", Duration::ZERO), None);
    }

    /// A Lease read that gets no answer ends within its timeout, as a failed read: a submit
    /// waiting on it is not held for good.
    #[tokio::test]
    async fn a_lease_read_without_an_answer_fails_in_time() {
        let (service, _handle) = tower_test::mock::pair::<
            http::Request<kube::client::Body>,
            http::Response<kube::client::Body>,
        >();
        let client = kube::Client::new(service, "default");
        let (_sender, state) = watch::channel(true);
        let leadership = Leadership::with_lease(state, Api::namespaced(client, "ops"), "l", "me");
        let started = std::time::Instant::now();
        // `with_lease` reads within 5 s; the mock never answers.
        assert!(!leadership.confirm().await);
        assert!(started.elapsed() < Duration::from_secs(30));
    }

    #[tokio::test]
    async fn without_an_election_confirm_is_the_local_state() {
        assert!(Leadership::always().confirm().await);
        let (sender, state) = watch::channel(false);
        let leadership = Leadership::follow(state);
        assert!(!leadership.confirm().await);
        sender.send_replace(true);
        assert!(leadership.confirm().await);
    }

    #[test]
    fn always_leads() {
        let leadership = Leadership::always();
        assert!(leadership.is_leader());
        assert!(leadership.clone().is_leader());
    }

    /// Only an election has predecessors whose submits a new leader waits out.
    #[test]
    fn only_an_election_is_elected() {
        assert!(!Leadership::always().elected());
        assert!(!Leadership::always().clone().elected());
        let (_sender, state) = watch::channel(true);
        assert!(Leadership::follow(state).elected());
    }

    #[tokio::test]
    async fn follows_the_lease_and_a_closed_channel_means_no() {
        let (sender, state) = watch::channel(false);
        let leadership = Leadership::follow(state);
        assert!(!leadership.is_leader());
        sender.send_replace(true);
        assert!(leadership.is_leader());
        sender.send_replace(false);
        assert!(!leadership.is_leader());
        sender.send_replace(true);
        drop(sender);
        assert!(
            !leadership.is_leader(),
            "without an election running, nobody may assume it leads"
        );
    }

    #[tokio::test]
    async fn gained_fires_on_each_rise_only() {
        let (sender, state) = watch::channel(true);
        let leadership = Leadership::follow(state);
        let mut gained = Box::pin(leadership.gained());
        // The initial state is not a gain.
        let nothing = tokio::time::timeout(Duration::from_millis(50), gained.next()).await;
        assert!(nothing.is_err(), "the starting state fired a gain");
        sender.send_replace(false);
        sender.send_replace(true);
        let first = tokio::time::timeout(Duration::from_secs(1), gained.next()).await;
        assert_eq!(first.ok().flatten(), Some(()));
        sender.send_replace(false);
        let nothing = tokio::time::timeout(Duration::from_millis(50), gained.next()).await;
        assert!(nothing.is_err(), "losing the Lease fired a gain");
        sender.send_replace(true);
        let second = tokio::time::timeout(Duration::from_secs(1), gained.next()).await;
        assert_eq!(second.ok().flatten(), Some(()));
        drop(sender);
        let end = tokio::time::timeout(Duration::from_secs(1), gained.next()).await;
        assert_eq!(
            end.ok().flatten(),
            None,
            "the stream ends with the election"
        );
    }

    #[tokio::test]
    async fn lost_fires_on_each_fall_only() {
        let (sender, state) = watch::channel(false);
        let leadership = Leadership::follow(state);
        let mut lost = Box::pin(leadership.lost());
        let quiet = Duration::from_millis(50);
        assert!(
            tokio::time::timeout(quiet, lost.next()).await.is_err(),
            "the starting state fired a loss"
        );
        sender.send_replace(true);
        assert!(
            tokio::time::timeout(quiet, lost.next()).await.is_err(),
            "a gain fired a loss"
        );
        sender.send_replace(false);
        let first = tokio::time::timeout(Duration::from_secs(1), lost.next()).await;
        assert_eq!(first.ok().flatten(), Some(()));
        drop(sender);
        let end = tokio::time::timeout(Duration::from_secs(1), lost.next()).await;
        assert_eq!(
            end.ok().flatten(),
            None,
            "the stream ends with the election"
        );
    }

    #[tokio::test]
    async fn bad_durations_are_refused_before_any_api_call() {
        let (service, _handle) = tower_test::mock::pair::<
            http::Request<kube::client::Body>,
            http::Response<kube::client::Body>,
        >();
        let client = kube::Client::new(service, "default");
        let config = LeaseConfig {
            name: "l".into(),
            namespace: "ns".into(),
            identity: "me".into(),
            duration: Duration::from_secs(5),
            grace: Duration::from_secs(5),
        };
        let error = elect(client.clone(), &config, CancellationToken::new())
            .await
            .err()
            .map(|e| e.category());
        assert_eq!(error, Some("LeaseDurationInvalid"));
        let config = LeaseConfig {
            namespace: String::new(),
            duration: Duration::from_secs(15),
            ..config
        };
        let error = elect(client, &config, CancellationToken::new())
            .await
            .err()
            .map(|e| e.category());
        assert_eq!(error, Some("LeaseNamespaceMissing"));
    }
}
