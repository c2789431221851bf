//! The plumbing every controller shares, written once: per-object backoff ([`Backoffs`]), the
//! leader-gated reconcile span ([`reconcile_as_leader`]), the finalizer wrapper
//! ([`with_finalizer`]), server-side apply of a status ([`apply_status`]), Events
//! ([`Notice`], [`publish`], [`EventRecorder`]), Slurm events mapped to objects
//! ([`slurm_triggers`]), a cache that passes on only the changes a controller reacts to and
//! finds its objects by uid ([`reflect_changes`], [`UidIndex`]), and the log of the controller
//! loop ([`log_outcome`]).

use std::borrow::Cow;
use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{self, Action};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::finalizer::{self, Event as Finalizer};
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::{Instrument, debug, info_span, warn};

use super::Context;
use crate::crd::{FIELD_MANAGER, FINALIZER};
use crate::error_chain::Chain;
use crate::state::events::Delivery;
use crate::state::index::SlurmEvent;

/// Reconciles one controller runs at once. kube's default is unbounded: when its cache fills,
/// every object's reconcile starts together, and 10 000 SlurmJobs in flight at once held ~37 KB
/// each of future state (the operator binary's peak memory, hack/bench.sh).
pub const MAX_CONCURRENT_RECONCILES: u16 = 16;

/// `kubectl apply`'s copy of the whole object as last applied (client-side apply).
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops from an object what no controller here reads, before the cache keeps it: the
/// `managedFields` (a third of a small object) and [`LAST_APPLIED`] (a second copy of the
/// spec, a SlurmJob's script included). The caches are never written back whole.
pub fn trim_for_cache<K: ResourceExt>(obj: &mut K) {
    obj.managed_fields_mut().clear();
    obj.annotations_mut().remove(LAST_APPLIED);
}

/// A watch's events applied to a controller's cache (`writer`), and its objects passed on as
/// reconcile triggers only when `changed(cached, object)` says the event changed what the
/// controller reacts to. `cached` is the same object (name, namespace and uid) as the cache held
/// it before the event, `None` for an object new to the cache (every object of the first list).
/// Returns, beside the triggers, the cache's objects by uid ([`UidIndex`]), kept in step with it.
/// `applied` sees each event once the cache holds its outcome, whether it passes or not (what
/// it wakes reads the cache as the event left it): [`Applied`].
///
/// kube's `reflect` + `touched_objects` + `predicate_filter` do the same, but the filter keeps a
/// map of its own, with every object's name, namespace and uid copied and a hash: ~220 bytes a
/// SlurmJob, 21 MiB at 100 000 (counted with a counting allocator over 100 000 finished
/// SlurmJobs as `hack/bench.sh`'s operator bench makes them). The cache already holds each
/// object's last state, and is read before the event is applied.
pub fn reflect_changes<K, S, F, A>(
    stream: S,
    mut writer: Writer<K>,
    changed: F,
    applied: A,
) -> (UidIndex<K>, impl Stream<Item = watcher::Result<K>>)
where
    K: Resource + Clone,
    K::DynamicType: Clone + Default + Eq + Hash,
    S: Stream<Item = watcher::Result<watcher::Event<K>>>,
    F: Fn(Option<&K>, &K) -> bool,
    A: Fn(Applied<'_, K>),
{
    let by_uid = UidIndex::default();
    let index = by_uid.clone();
    // A relist's objects reach the cache only when it is done, and a controller reads the cache
    // when it takes a trigger: one passed on before would be reconciled as it was before the
    // watch broke, or found missing and dropped (a SlurmJob created meanwhile, never
    // reconciled). So a relist's triggers wait for its end. Not the first list's: the
    // controller waits for the cache to be ready before it starts, and holding back every
    // object of the first list would hold a second copy of the cache.
    let mut listed = false;
    let mut relisted = Vec::new();
    let changes = stream
        .map_ok(move |event| {
            let relisting = listed && matches!(event, watcher::Event::InitApply(_));
            let done = matches!(event, watcher::Event::InitDone);
            if matches!(event, watcher::Event::Init) {
                relisted.clear();
            }
            let passed = reflect_change(&mut writer, &index, &changed, &applied, event);
            let triggers = match passed {
                Some(object) if relisting => {
                    relisted.push(object);
                    Vec::new()
                }
                passed => passed.into_iter().collect(),
            };
            if done {
                listed = true;
                return std::mem::take(&mut relisted);
            }
            triggers
        })
        .map_ok(|triggers| futures::stream::iter(triggers.into_iter().map(Ok)))
        .try_flatten();
    (by_uid, changes)
}

/// kube's `touched_objects` for a stream already applied to a cache (`.reflect(writer)`, its
/// reader `cache`), with a relist's objects passed on only at its end, as [`reflect_changes`]
/// does: the cache swaps a relist in only then, and a reconcile the trigger starts reads the
/// cache (a namespace relabelled while the watch was down would be judged by its old labels,
/// and not again). The objects the relist no longer holds (deleted while the watch was down)
/// are passed on then too, as the cache held them: a controller that owns or watches them
/// learns of the deletion (an output Pod deleted meanwhile is made again). The first list's
/// objects pass as they come: a controller waits for its caches before it starts.
pub fn touched_after_relist<K, S>(
    stream: S,
    cache: Store<K>,
) -> impl Stream<Item = watcher::Result<K>>
where
    K: Resource + Clone,
    K::DynamicType: Clone + Default + Eq + Hash,
    S: Stream<Item = watcher::Result<watcher::Event<K>>>,
{
    let mut listed = false;
    let mut held = Vec::new();
    let mut before: Vec<Arc<K>> = Vec::new();
    stream
        .map_ok(move |event| match event {
            watcher::Event::Apply(object) | watcher::Event::Delete(object) => vec![object],
            watcher::Event::InitApply(object) if listed => {
                held.push(object);
                Vec::new()
            }
            watcher::Event::InitApply(object) => vec![object],
            watcher::Event::Init => {
                held.clear();
                // The cache as the watch left it (Arcs: no copy of the objects).
                before = if listed { cache.state() } else { Vec::new() };
                Vec::new()
            }
            watcher::Event::InitDone => {
                listed = true;
                let gone = std::mem::take(&mut before)
                    .into_iter()
                    .filter(|old| cache.get(&ObjectRef::from_obj(old.as_ref())).is_none())
                    .map(|old| old.as_ref().clone());
                let mut triggers = std::mem::take(&mut held);
                triggers.extend(gone);
                triggers
            }
        })
        .map_ok(|objects| futures::stream::iter(objects.into_iter().map(Ok)))
        .try_flatten()
}

/// [`touched_after_relist`] as a method of the stream.
pub trait TouchedAfterRelist<K>: Stream<Item = watcher::Result<watcher::Event<K>>> + Sized
where
    K: Resource + Clone,
    K::DynamicType: Clone + Default + Eq + Hash,
{
    fn touched_after_relist(self, cache: Store<K>) -> impl Stream<Item = watcher::Result<K>> {
        touched_after_relist(self, cache)
    }
}

impl<K, S> TouchedAfterRelist<K> for S
where
    K: Resource + Clone,
    K::DynamicType: Clone + Default + Eq + Hash,
    S: Stream<Item = watcher::Result<watcher::Event<K>>>,
{
}

/// What an event did to a [`reflect_changes`] cache.
#[derive(Debug, Clone, Copy)]
pub enum Applied<'a, K> {
    /// An object's event (`object`, as the event brought it): `cached` is the same object
    /// (name, namespace and uid) as the cache held it before (`None`: new to it), `now` what
    /// it holds under its name now (`None`: deleted).
    Object {
        object: &'a K,
        cached: Option<&'a K>,
        now: Option<&'a K>,
    },
    /// A (re)list is in: every object may have changed, one by one unseen.
    Relisted,
}

/// One event of [`reflect_changes`]: applied to the cache and to its uid index; the object if
/// it passes.
fn reflect_change<K>(
    writer: &mut Writer<K>,
    by_uid: &UidIndex<K>,
    changed: impl Fn(Option<&K>, &K) -> bool,
    applied: impl Fn(Applied<'_, K>),
    event: watcher::Event<K>,
) -> Option<K>
where
    K: Resource + Clone,
    K::DynamicType: Clone + Default + Eq + Hash,
{
    let cache = writer.as_reader();
    let key = match &event {
        watcher::Event::Apply(object)
        | watcher::Event::InitApply(object)
        | watcher::Event::Delete(object) => Some(ObjectRef::from_obj(object)),
        watcher::Event::Init | watcher::Event::InitDone => None,
    };
    // Under the name, whatever its uid: an Apply or Delete replaces it in the cache.
    let before = key.as_ref().and_then(|key| cache.get(key));
    let same = match &event {
        watcher::Event::Apply(object)
        | watcher::Event::InitApply(object)
        | watcher::Event::Delete(object) => before
            .clone()
            .filter(|cached| cached.meta().uid == object.meta().uid),
        watcher::Event::Init | watcher::Event::InitDone => None,
    };
    let passes = match &event {
        watcher::Event::Apply(object)
        | watcher::Event::InitApply(object)
        | watcher::Event::Delete(object) => changed(same.as_deref(), object),
        watcher::Event::Init | watcher::Event::InitDone => false,
    };
    writer.apply_watcher_event(&event);
    match (&event, key) {
        (watcher::Event::Apply(object) | watcher::Event::Delete(object), Some(key)) => {
            let now = cache.get(&key);
            by_uid.replace(before, now.clone());
            applied(Applied::Object {
                object,
                cached: same.as_deref(),
                now: now.as_deref(),
            });
        }
        // A relist's objects reach the cache all at once, when it is done.
        (watcher::Event::InitDone, _) => {
            by_uid.rebuild(cache.state());
            applied(Applied::Relisted);
        }
        _ => {}
    }
    match event {
        watcher::Event::Apply(object)
        | watcher::Event::InitApply(object)
        | watcher::Event::Delete(object)
            if passes =>
        {
            Some(object)
        }
        _ => None,
    }
}

/// A cache's objects by uid ([`reflect_changes`] keeps it in step with the cache): the object a
/// Slurm job's tag names is found without a scan of the cache. `Store::find` over 100 000
/// SlurmJobs took 1.76–1.86 ms a lookup, this 0.45 µs (release build); one runs for every
/// changed job of the operator's, one after another.
///
/// It holds the cache's own `Arc`s, hashed by uid: 1.1 MiB at 100 000 SlurmJobs (counted; a
/// map keyed by a copy of each uid would cost ~70 bytes an object).
pub struct UidIndex<K>(Arc<RwLock<HashSet<ByUid<K>>>>);

impl<K> Clone for UidIndex<K> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

impl<K> Default for UidIndex<K> {
    fn default() -> Self {
        Self(Arc::default())
    }
}

impl<K: Resource> UidIndex<K> {
    /// The cached object with this uid.
    pub fn get(&self, uid: &str) -> Option<Arc<K>> {
        let objects = self.0.read().unwrap_or_else(|p| p.into_inner());
        objects.get(uid).map(|object| Arc::clone(&object.0))
    }

    /// Number of objects indexed.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.read().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// The cache's object under one name went from `before` to `after`.
    fn replace(&self, before: Option<Arc<K>>, after: Option<Arc<K>>) {
        let mut objects = self.0.write().unwrap_or_else(|p| p.into_inner());
        if let Some(gone) = before.and_then(ByUid::new) {
            objects.remove(gone.uid());
        }
        if let Some(now) = after.and_then(ByUid::new) {
            objects.replace(now);
        }
    }

    /// Everything the cache holds, after a relist.
    fn rebuild(&self, all: Vec<Arc<K>>) {
        let objects: HashSet<_> = all.into_iter().filter_map(ByUid::new).collect();
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = objects;
    }
}

/// An object with a uid, hashed and compared by it, and looked up by it (`Borrow<str>`).
struct ByUid<K>(Arc<K>);

impl<K: Resource> ByUid<K> {
    fn new(object: Arc<K>) -> Option<Self> {
        object.meta().uid.is_some().then_some(Self(object))
    }

    fn uid(&self) -> &str {
        self.0.meta().uid.as_deref().unwrap_or_default()
    }
}

impl<K: Resource> std::borrow::Borrow<str> for ByUid<K> {
    fn borrow(&self) -> &str {
        self.uid()
    }
}

impl<K: Resource> Hash for ByUid<K> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.uid().hash(state);
    }
}

impl<K: Resource> PartialEq for ByUid<K> {
    fn eq(&self, other: &Self) -> bool {
        self.uid() == other.uid()
    }
}

impl<K: Resource> Eq for ByUid<K> {}

/// Per-object exponential backoff for failed reconciles: the first failure requeues after
/// [`Backoffs::MIN`], each further one doubles the delay up to [`Backoffs::MAX`]; a success
/// resets it. Keyed by controller and object, so a failing object never slows down another.
///
/// kube's controller has no per-object backoff of its own (`error_policy` returns one fixed
/// `Action`), and a fixed short requeue is a hot loop against an unreachable slurmrestd.
#[derive(Debug, Default)]
pub struct Backoffs {
    failures: Mutex<HashMap<String, Counts>>,
}

/// What one object's backoff counts since its last success.
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    /// Failed reconciles ([`Backoffs::next`]).
    failures: u32,
    /// Reconciles that found their cluster busy ([`Backoffs::next_busy`]): waiting in line is
    /// not failing, and must not lengthen the wait after a real failure.
    busy: u32,
}

impl Backoffs {
    /// Delay after the first failure.
    pub const MIN: Duration = Duration::from_secs(2);
    /// Longest delay between two attempts.
    pub const MAX: Duration = Duration::from_secs(300);

    /// The key for one object of one controller.
    pub fn key(controller: &str, namespace: &str, name: &str) -> String {
        format!("{controller}/{namespace}/{name}")
    }

    /// Record a failure of `key`; returns how long to wait before the next attempt.
    pub fn next(&self, key: &str) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let count = &mut failures.entry(key.to_owned()).or_default().failures;
        let delay = Self::delay(*count);
        *count = count.saturating_add(1);
        delay
    }

    /// First delay of a reconcile whose Slurm cluster had no free request slot
    /// (`ClusterHandle::try_io`): short, since on a healthy cluster a slot frees within
    /// milliseconds.
    pub const BUSY_MIN: Duration = Duration::from_millis(250);
    /// Longest delay while a cluster stays busy: a cluster whose requests hang is looked at
    /// this often, whatever its number of objects, at the cost of no reconcile slot.
    pub const BUSY_MAX: Duration = Duration::from_secs(30);

    /// Record that `key` found its cluster busy; returns how long to wait. Counted apart from
    /// its failures (a success resets both); nominally starts at [`Self::BUSY_MIN`], doubles,
    /// stops at [`Self::BUSY_MAX`], and each wait is spread over its upper half by `key` and
    /// count ([`spread`]): objects that found the cluster busy together must not all come back
    /// together, or the same few win the slots every time (a restart with 100 SlurmJobs to
    /// catch up left some waiting minutes behind synchronized 30 s retries).
    pub fn next_busy(&self, key: &str) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let count = &mut failures.entry(key.to_owned()).or_default().busy;
        let factor = 1u32.checked_shl((*count).min(16)).unwrap_or(u32::MAX);
        let nominal = Self::BUSY_MIN.saturating_mul(factor).min(Self::BUSY_MAX);
        let delay = spread(nominal, key, *count);
        *count = count.saturating_add(1);
        delay
    }

    /// Forget the failures of `key` (after a success, or when the object is gone).
    pub fn reset(&self, key: &str) {
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        failures.remove(key);
    }

    /// Forget the failures of `controller`'s objects that `live` (namespace, name) does not
    /// hold; other controllers' are kept.
    pub fn keep_only(&self, controller: &str, live: impl Fn(&str, &str) -> bool) {
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        failures.retain(|key, _| {
            let Some((namespace, name)) = key
                .strip_prefix(controller)
                .and_then(|rest| rest.strip_prefix('/'))
                .and_then(|rest| rest.split_once('/'))
            else {
                return true;
            };
            live(namespace, name)
        });
    }

    /// Whether failures of `key` are counted.
    #[cfg(test)]
    pub fn counts(&self, key: &str) -> bool {
        let failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        failures.contains_key(key)
    }

    /// How many objects have failures counted.
    pub fn len(&self) -> usize {
        self.failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The delay after `previous` failures: MIN * 2^previous, at most MAX.
    fn delay(previous: u32) -> Duration {
        let factor = 1u32.checked_shl(previous.min(16)).unwrap_or(u32::MAX);
        Self::MIN.saturating_mul(factor).min(Self::MAX)
    }
}

/// `nominal` scaled into `[nominal / 2, nominal]`, the same for the same `key` and `attempt`
/// (deterministic, so tests can bound it) and different across keys.
fn spread(nominal: Duration, key: &str, attempt: u32) -> Duration {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (key, attempt).hash(&mut hasher);
    let permille = 500 + u32::try_from(hasher.finish() % 501).unwrap_or(500);
    nominal * permille / 1000
}

/// One reconcile as every controller runs it: nothing at all on a replica without the leader
/// Lease (gaining it reconciles everything again), else `work` in a tracing span with the
/// object's name and namespace, timed into the reconcile metrics.
pub async fn reconcile_as_leader<K, E>(
    controller: &'static str,
    object: &K,
    ctx: &Context,
    work: impl Future<Output = Result<Action, E>>,
) -> Result<Action, E>
where
    K: Resource,
{
    if !ctx.leadership.is_leader() {
        return Ok(Action::await_change());
    }
    let span = info_span!(
        "reconcile",
        controller,
        name = %object.name_any(),
        namespace = object.namespace().as_deref().unwrap_or_default(),
    );
    let started = Instant::now();
    let result = work.instrument(span).await;
    ctx.metrics.reconciled(controller, started.elapsed());
    result
}

/// [`FinalizerFailure`] for a controller's error enum whose variants `AddFinalizer(kube::Error)`,
/// `RemoveFinalizer(kube::Error)` and `MissingMetadata(&'static str)` say it.
macro_rules! finalizer_failure {
    ($error:ty) => {
        impl $crate::controller::kit::FinalizerFailure for $error {
            fn add_finalizer(error: kube::Error) -> Self {
                Self::AddFinalizer(error)
            }
            fn remove_finalizer(error: kube::Error) -> Self {
                Self::RemoveFinalizer(error)
            }
            fn missing_metadata(what: &'static str) -> Self {
                Self::MissingMetadata(what)
            }
        }
    };
}
pub(crate) use finalizer_failure;

/// A controller error that can say what went wrong around kube's finalizer helper.
pub trait FinalizerFailure: Sized {
    fn add_finalizer(error: kube::Error) -> Self;
    fn remove_finalizer(error: kube::Error) -> Self;
    fn missing_metadata(what: &'static str) -> Self;

    /// The controller's own error, out of the finalizer helper's wrapping.
    fn from_finalizer(error: finalizer::Error<Self>) -> Self
    where
        Self: std::error::Error + 'static,
    {
        match error {
            finalizer::Error::ApplyFailed(e) | finalizer::Error::CleanupFailed(e) => e,
            finalizer::Error::AddFinalizer(e) => Self::add_finalizer(e),
            finalizer::Error::RemoveFinalizer(e) => Self::remove_finalizer(e),
            finalizer::Error::UnnamedObject => Self::missing_metadata("name"),
            finalizer::Error::InvalidFinalizer => Self::missing_metadata("valid finalizer"),
        }
    }
}

/// The finalizer protocol around a controller's two halves: `apply` while the object lives (the
/// finalizer is added first), `cleanup` once it is being deleted (the finalizer is removed after
/// it returns `Ok`). Errors come back as the controller's own.
pub async fn with_finalizer<K, E, A, C>(
    api: &Api<K>,
    object: Arc<K>,
    apply: impl FnOnce(Arc<K>) -> A,
    cleanup: impl FnOnce(Arc<K>) -> C,
) -> Result<Action, E>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + fmt::Debug,
    E: FinalizerFailure + std::error::Error + Send + 'static,
    A: Future<Output = Result<Action, E>>,
    C: Future<Output = Result<Action, E>>,
{
    finalizer::finalizer(api, FINALIZER, object, |event| async move {
        match event {
            Finalizer::Apply(object) => apply(object).await,
            Finalizer::Cleanup(object) => cleanup(object).await,
        }
    })
    .await
    .map_err(E::from_finalizer)
}

/// The first `max` of `names`, joined, and how many more there are (`a, b and 3 more`): what a
/// condition, Event or log line names of a long list.
pub fn name_some(names: &[String], max: usize) -> String {
    match first_of(names, max, ", ") {
        (named, 0) => named,
        (named, more) => format!("{named} and {more} more"),
    }
}

/// [`name_some`] for items that hold commas themselves (`pod: why`): `a; b; and 3 more`.
pub fn list_some(items: &[String], max: usize) -> String {
    match first_of(items, max, "; ") {
        (listed, 0) => listed,
        (listed, more) => format!("{listed}; and {more} more"),
    }
}

/// The first `max` of `items` joined with `separator`, and how many are left out.
fn first_of(items: &[String], max: usize, separator: &str) -> (String, usize) {
    let joined = items
        .iter()
        .take(max)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(separator);
    (joined, items.len().saturating_sub(max))
}

/// When a blocked deletion (a finalizer waiting for Slurm) lets go anyway: `deadline` after
/// the deletion, or after this replica began to act (its start, or its last gain of the leader
/// Lease) when that is later — an operator that was down, or a replica that just took over,
/// first gets the whole deadline to reconnect. `None` (no deadline): never.
pub fn release_at(
    deleted_at: Option<DateTime<Utc>>,
    acting_since: DateTime<Utc>,
    deadline: Option<Duration>,
) -> Option<DateTime<Utc>> {
    let deadline = chrono::TimeDelta::from_std(deadline?).ok()?;
    let from = deleted_at.map_or(acting_since, |at| at.max(acting_since));
    from.checked_add_signed(deadline)
}

/// Whether `object` lives and lacks the operator's finalizer: [`with_finalizer`] would only add it.
pub fn lacks_finalizer<K: Resource>(object: &K) -> bool {
    object.meta().deletion_timestamp.is_none()
        && !object
            .meta()
            .finalizers
            .as_ref()
            .is_some_and(|f| f.iter().any(|f| f == FINALIZER))
}

/// Adds the operator's finalizer with the JSON patch kube's helper sends (a `test` of the list
/// as it was, so that a concurrent writer's finalizer is never lost), and returns the object the
/// API server answered with. kube's helper drops that answer and waits for the watch to bring the
/// object back, one more reconcile and a queue's wait later; a caller that needs more of the
/// object than its cache holds (a SlurmJob's script) has it here without a read.
pub async fn add_finalizer<K>(api: &Api<K>, name: &str, object: &impl Resource) -> kube::Result<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + fmt::Debug,
{
    let ops = match object.meta().finalizers.as_deref() {
        None | Some([]) => serde_json::json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]},
        ]),
        Some(current) => serde_json::json!([
            {"op": "test", "path": "/metadata/finalizers", "value": current},
            {"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER},
        ]),
    };
    let patch = Patch::<()>::Json(serde_json::from_value(ops).map_err(kube::Error::SerdeError)?);
    api.patch(name, &PatchParams::default(), &patch).await
}

/// Server-side apply of an object's whole status with the operator's one field manager, on
/// the object `meta` names.
///
/// Addressed by name only: a custom resource's status write takes nothing of the body's
/// metadata (the API server's status strategy copies the stored object over it before any
/// check), so a uid there would guard nothing, and a resourceVersion would turn every write
/// after the cache's view into a conflict.
pub async fn apply_status<K>(
    api: &Api<K>,
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    status: &impl Serialize,
) -> kube::Result<()>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + fmt::Debug,
{
    let name = meta.name.as_deref().unwrap_or_default();
    let patch = Patch::Apply(serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    }));
    api.patch_status(name, &PatchParams::apply(FIELD_MANAGER).force(), &patch)
        .await?;
    debug!(kind = %K::kind(&()), name, "status applied");
    Ok(())
}

/// An Event worth publishing on an object: a stable PascalCase reason and a note for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub reason: Cow<'static, str>,
    pub note: String,
    pub warning: bool,
    /// The Event's `action` when it is not the caller's (see [`Notice::about_run`]).
    pub action: Option<String>,
}

impl Notice {
    pub fn normal(reason: impl Into<Cow<'static, str>>, note: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
            note: note.into(),
            warning: false,
            action: None,
        }
    }

    pub fn warning(reason: impl Into<Cow<'static, str>>, note: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
            note: note.into(),
            warning: true,
            action: None,
        }
    }

    /// This notice is about one run (Slurm job `job_id`): its Event's action names the run.
    ///
    /// Events with the same object, action and reason are one series (events.k8s.io; kube's
    /// Recorder patches the first Event's count and keeps its note), so without this the
    /// `Submitted` and `Finished` of a re-run would only count up the first run's Events, which
    /// still name the first job.
    pub fn about_run(mut self, job_id: i64) -> Self {
        self.action = Some(format!("Run{job_id}"));
        self
    }

    /// This notice's note is its news (a refusal whose message changed, its reason the same):
    /// its Event's action (`action`, the caller's) carries a digest of the note, so that a new
    /// note is a new Event instead of a count on the first one, which keeps the first note
    /// (see [`Notice::about_run`]), and the same note again still counts up its own.
    pub fn by_note(mut self, action: &str) -> Self {
        use std::hash::Hasher;
        let mut digest = std::hash::DefaultHasher::new();
        digest.write(self.note.as_bytes());
        self.action = Some(format!("{action}-{:08x}", digest.finish() as u32));
        self
    }
}

/// How many Events about one namespace's objects the operator puts on objects outside it (a
/// SlurmCluster, in the platform admin's namespace): a tenant must not be able to fill another
/// namespace with Events (each deletion of a held job with `slurm.rs/skip-cancel` would be
/// one). At most `per_window` in any `window` (a sliding one) per namespace; the object's own
/// namespace still gets all of them, and the log every one.
pub struct NamespaceBudget {
    per_window: usize,
    window: Duration,
    /// By namespace: when it spent what it spent within the window, oldest first.
    spent: Mutex<HashMap<String, VecDeque<Instant>>>,
}

/// What [`NamespaceBudget::spend`] allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spend {
    Tell,
    /// Tell, and say that no more are told for `.0`.
    TellLast(Duration),
    Quiet,
}

impl NamespaceBudget {
    /// The operator's: 10 per namespace in any 10 minutes.
    pub const PER_WINDOW: usize = 10;
    pub const WINDOW: Duration = Duration::from_secs(600);

    pub fn new(per_window: usize, window: Duration) -> Self {
        Self {
            per_window: per_window.max(1),
            window,
            spent: Mutex::default(),
        }
    }

    /// Spend one of `namespace`'s at `now`.
    pub fn spend(&self, namespace: &str, now: Instant) -> Spend {
        let within = |at: &Instant| now.saturating_duration_since(*at) < self.window;
        let mut spent = self.spent.lock().unwrap_or_else(PoisonError::into_inner);
        // Only namespaces that spent within the window are kept: as many as told lately.
        if spent.len() >= 64 {
            spent.retain(|_, times| times.back().is_some_and(within));
        }
        let times = spent.entry(namespace.to_owned()).or_default();
        while times.front().is_some_and(|at| !within(at)) {
            times.pop_front();
        }
        if times.len() >= self.per_window {
            return Spend::Quiet;
        }
        times.push_back(now);
        match times.front() {
            Some(oldest) if times.len() == self.per_window => Spend::TellLast(
                self.window
                    .saturating_sub(now.saturating_duration_since(*oldest))
                    .max(Duration::from_secs(1)),
            ),
            _ => Spend::Tell,
        }
    }
}

impl Default for NamespaceBudget {
    fn default() -> Self {
        Self::new(Self::PER_WINDOW, Self::WINDOW)
    }
}

/// Whether `store`'s watch has had its first list (now, without waiting).
pub fn listed<K>(store: &Store<K>) -> bool
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    use futures::FutureExt;
    store
        .wait_until_ready()
        .now_or_never()
        .is_some_and(|ready| ready.is_ok())
}

/// kube's Event [`Recorder`], started afresh after every [`EventRecorder::RENEW_AFTER`] Events.
///
/// The Recorder keeps each Event it published for 6 minutes, so that a repeat counts in the first
/// one's series instead of creating another, and scans all it keeps on every publish. Counted
/// with a counting allocator (SlurmJob Events as this operator words them): ~2.7 KiB an Event,
/// 26 MiB after 10 000 Events within 6 minutes, at 0.14 ms a publish by then. A burst of 100 000
/// SlurmJobs, one `Submitted` each, would hold ~270 MiB for those minutes. client-go bounds the
/// same cache (an LRU of 4 096 Events); kube's has no bound. A fresh Recorder forgets what the
/// last one kept: a repeat right after it is a new Event instead of a count on the old one.
#[derive(Clone)]
pub struct EventRecorder {
    client: kube::Client,
    reporter: Reporter,
    renew_after: u32,
    /// The Recorder, and how many Events it was given.
    current: Arc<Mutex<(Recorder, u32)>>,
}

impl EventRecorder {
    /// More than a quiet operator publishes in 6 minutes (the Recorder's own horizon), and at
    /// most ~3 MiB kept.
    pub const RENEW_AFTER: u32 = 1024;

    pub fn new(client: kube::Client, reporter: Reporter) -> Self {
        Self::renewed_after(client, reporter, Self::RENEW_AFTER)
    }

    fn renewed_after(client: kube::Client, reporter: Reporter, renew_after: u32) -> Self {
        let recorder = Recorder::new(client.clone(), reporter.clone());
        Self {
            client,
            reporter,
            renew_after,
            current: Arc::new(Mutex::new((recorder, 0))),
        }
    }

    pub async fn publish(&self, event: &Event, regarding: &ObjectReference) -> kube::Result<()> {
        let recorder = {
            let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
            if current.1 >= self.renew_after {
                *current = (Recorder::new(self.client.clone(), self.reporter.clone()), 0);
            }
            current.1 += 1;
            current.0.clone()
        };
        recorder.publish(event, regarding).await
    }
}

/// Publish `notice` as an Event on `object` (`action` says what the controller was doing). A
/// failure to publish is logged, never fatal: Events are best effort.
pub async fn publish<K>(recorder: &EventRecorder, object: &K, action: &str, notice: Notice)
where
    K: Resource<DynamicType = ()>,
{
    let event = Event {
        type_: if notice.warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: notice.reason.into_owned(),
        note: Some(within_note_limit(notice.note)),
        action: notice.action.unwrap_or_else(|| action.into()),
        secondary: None,
    };
    if let Err(error) = recorder.publish(&event, &object.object_ref(&())).await {
        warn!(error = %Chain(&error), reason = event.reason, "cannot publish an Event");
    }
}

/// The API server refuses an Event whose note is longer than 1024 bytes (events.k8s.io's
/// `NoteLengthLimit`), and the Event would be lost: a longer note (Slurm's message, an error
/// chain) is cut on a character boundary, '…' marking the cut.
pub const EVENT_NOTE_MAX_BYTES: usize = 1024;

fn within_note_limit(note: String) -> String {
    cut_to_bytes(note, EVENT_NOTE_MAX_BYTES)
}

/// `text` in at most `max` bytes, cut on a character boundary, '…' marking a cut where `max`
/// leaves room for it (for limits the API server counts in bytes).
pub fn cut_to_bytes(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let marker = if max >= '…'.len_utf8() { "…" } else { "" };
    let mut end = max - marker.len();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str(marker);
    text
}

/// Whether a Kubernetes API request's failure may pass by itself (the API server restarting,
/// overloaded or out of reach), so asking again later is worth it, as opposed to an answer that
/// stays: forbidden, not found, invalid, an object that does not decode.
pub fn may_pass(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => status.code >= 500 || status.code == 429,
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => true,
        _ => false,
    }
}

/// [`may_pass`], for a watch's error.
pub fn watch_may_pass(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::WatchError(status) => status.code >= 500 || status.code == 429,
        watcher::Error::InitialListFailed(error)
        | watcher::Error::WatchStartFailed(error)
        | watcher::Error::WatchFailed(error) => may_pass(error),
        watcher::Error::NoResourceVersion => false,
    }
}

/// An API for `namespace`, or for all namespaces.
pub fn scoped_api<K>(client: kube::Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>,
    K: Clone + DeserializeOwned + fmt::Debug,
{
    match namespace {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    }
}

/// A watch of the Pods labelled `label` (of `namespace`, else of all), in pages of `page`, as
/// the view `P` decodes them: [`PodMeta`](crate::crd::pod_meta::PodMeta) as kube's `owns` makes one (metadata only),
/// [`PodMetaPhase`](crate::crd::pod_meta::PodMetaPhase) with the phase; either without
/// `managedFields`: anyone who may create Pods in a namespace can label one like the operator's
/// and nest them too deep to read, which would fail every page it is on, for every team.
pub fn pod_watch<P>(
    client: kube::Client,
    namespace: Option<&str>,
    label: &str,
    page: u32,
) -> impl Stream<Item = watcher::Result<watcher::Event<P>>> + Send + 'static
where
    P: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + fmt::Debug
        + Send
        + 'static,
{
    // `P` is one of the Pod views (their `Api<..>` is what the RBAC check counts).
    let pods = scoped_api::<P>(client, namespace);
    watcher(
        pods,
        watcher::Config::default().labels(label).page_size(page),
    )
}

/// The pollers' Slurm events as reconcile triggers of one kind: `targets` maps an event to the
/// objects it concerns. A subscriber that fell behind one poller has missed its events only: it
/// reconciles every object of that poller's SlurmClusters, which is what `targets` makes of a
/// regained health (`HealthChanged { up: true }`) for each of them. Other clusters' objects are
/// not touched.
pub fn slurm_triggers<K>(
    kind: &'static str,
    events: impl Stream<Item = Delivery> + Send + 'static,
    store: Store<K>,
    targets: impl Fn(&SlurmEvent, &Store<K>) -> Vec<ObjectRef<K>> + Send + 'static,
) -> impl Stream<Item = ObjectRef<K>> + Send + 'static
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    events
        .map(move |delivery| match delivery {
            Delivery::Event(event) => targets(&event, &store),
            Delivery::Lagged { clusters, missed } => {
                warn!(
                    missed,
                    kind,
                    clusters = ?clusters.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
                    "fell behind a poller's events; reconciling every object of its SlurmClusters"
                );
                clusters
                    .into_iter()
                    .flat_map(|cluster| {
                        targets(&SlurmEvent::HealthChanged { cluster, up: true }, &store)
                    })
                    .collect()
            }
        })
        .flat_map(futures::stream::iter)
}

/// What the controller loop logs of each finished reconcile (`Controller::run(..).for_each`).
/// A reconcile's own failures were logged by its error policy.
pub fn log_outcome<K, E>(
    kind: &'static str,
    result: Result<(ObjectRef<K>, Action), controller::Error<E, watcher::Error>>,
) -> futures::future::Ready<()>
where
    K: Resource<DynamicType = ()>,
    E: std::error::Error + 'static,
{
    match result {
        Ok((object, action)) => debug!(kind, %object, ?action, "reconciled"),
        Err(controller::Error::ReconcilerFailed(..)) => {}
        Err(controller::Error::ObjectNotFound(object)) => {
            debug!(kind, %object, "trigger for an object that no longer exists");
        }
        Err(error) => warn!(kind, error = %Chain(&error), "controller"),
    }
    futures::future::ready(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A refusal whose message changed is a new Event (kube's Recorder would count it on the
    /// first one, whose note it keeps); the same message again is the same series.
    #[test]
    fn a_notice_by_note_is_its_own_series() {
        let refused = |note: &str| Notice::warning("NoAccess", note).by_note("Reconcile");
        let first = refused("account a is not granted");
        assert_eq!(first.action, refused("account a is not granted").action);
        assert_ne!(first.action, refused("account b is not granted").action);
        let action = first.action.unwrap_or_default();
        assert!(
            action.starts_with("Reconcile-") && action.len() <= 128,
            "{action}"
        );
    }

    /// An API server that is restarting, overloaded or out of reach is asked again (at the
    /// operator's start, by `logs -f`); a refusal or an object that does not decode is final:
    /// asking again would get the same answer.
    #[test]
    fn only_a_failure_that_may_pass_is_asked_again() {
        let api = |code| {
            kube::Error::Api(Box::new(
                kube::core::Status::failure("x", "y").with_code(code),
            ))
        };
        for code in [500, 503, 504, 429] {
            assert!(may_pass(&api(code)), "{code}");
        }
        for code in [400, 401, 403, 404, 409, 422] {
            assert!(!may_pass(&api(code)), "{code}");
        }
        let reset = || std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        assert!(may_pass(&kube::Error::Service(Box::new(reset()))));
        assert!(may_pass(&kube::Error::ReadEvents(reset())));
        let undecodable = serde_json::from_str::<u8>("x").unwrap_err();
        assert!(!may_pass(&kube::Error::SerdeError(undecodable)));

        let status = |code| Box::new(kube::core::Status::failure("x", "y").with_code(code));
        assert!(watch_may_pass(&watcher::Error::WatchError(status(500))));
        assert!(!watch_may_pass(&watcher::Error::WatchError(status(403))));
        assert!(watch_may_pass(&watcher::Error::InitialListFailed(api(503))));
        assert!(watch_may_pass(&watcher::Error::WatchStartFailed(api(429))));
        assert!(!watch_may_pass(&watcher::Error::WatchFailed(api(404))));
        assert!(!watch_may_pass(&watcher::Error::NoResourceVersion));
    }

    /// Each namespace spends its own budget, in any window of its length (a sliding one): the
    /// last one allowed says for how long the rest are quiet; namespaces that spent nothing
    /// within the window are forgotten.
    #[test]
    fn a_namespace_budget_tells_so_many_per_window() {
        let budget = NamespaceBudget::new(3, Duration::from_secs(600));
        let start = Instant::now();
        let at = |secs| start + Duration::from_secs(secs);
        assert_eq!(budget.spend("team-a", at(0)), Spend::Tell);
        assert_eq!(budget.spend("team-a", at(1)), Spend::Tell);
        assert_eq!(budget.spend("team-b", at(1)), Spend::Tell);
        assert_eq!(
            budget.spend("team-a", at(100)),
            Spend::TellLast(Duration::from_secs(500))
        );
        assert_eq!(budget.spend("team-a", at(101)), Spend::Quiet);
        assert_eq!(budget.spend("team-a", at(599)), Spend::Quiet);
        assert_eq!(budget.spend("team-b", at(599)), Spend::Tell);
        // The first has left the window: one more, and it is the last again (the second
        // leaves at 601).
        assert_eq!(
            budget.spend("team-a", at(600)),
            Spend::TellLast(Duration::from_secs(1))
        );
        assert_eq!(budget.spend("team-a", at(600)), Spend::Quiet);
        // Never more than 3 in any 600 s.
        let told = (600..1_800)
            .filter(|&s| budget.spend("team-c", at(s)) != Spend::Quiet)
            .collect::<Vec<_>>();
        assert!(
            told.windows(4).all(|four| four[3] - four[0] >= 600),
            "{told:?}"
        );
        assert_eq!(told, [600, 601, 602, 1200, 1201, 1202]);

        for n in 0..200 {
            budget.spend(&format!("ns-{n}"), at(2_000));
        }
        budget.spend("late", at(3_000));
        let kept = budget.spent.lock().unwrap().len();
        assert!(kept <= 64, "{kept} namespaces kept");
    }

    /// A repeat within one Recorder counts in the first Event's series (a PATCH); after
    /// `renew_after` Events a fresh Recorder creates it again (a POST), having forgotten the rest.
    #[tokio::test]
    async fn events_count_in_a_series_until_the_recorder_is_renewed() {
        use http::{Request, Response};
        use kube::client::Body;
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let reporter = Reporter {
            controller: crate::crd::FIELD_MANAGER.into(),
            instance: None,
        };
        let recorder =
            EventRecorder::renewed_after(kube::Client::new(service, "default"), reporter, 2);
        let server = tokio::spawn(async move {
            let mut methods = Vec::new();
            while let Some((request, send)) = handle.next_request().await {
                methods.push(request.method().to_string());
                // The Event as sent, as the API server answers a create or a merge patch.
                let body = request.into_body().collect_bytes().await.unwrap();
                send.send_response(
                    Response::builder()
                        .status(201)
                        .body(Body::from(body.to_vec()))
                        .unwrap(),
                );
            }
            methods
        });
        let regarding = ObjectReference {
            api_version: Some("slurm.rs/v1alpha1".into()),
            kind: Some("SlurmJob".into()),
            name: Some("a".into()),
            namespace: Some("team".into()),
            uid: Some("u".into()),
            ..Default::default()
        };
        let event = Event {
            type_: EventType::Normal,
            reason: "Submitted".into(),
            note: Some("Submitted as Slurm job 7".into()),
            action: "Reconcile".into(),
            secondary: None,
        };
        for _ in 0..5 {
            recorder.publish(&event, &regarding).await.unwrap();
        }
        drop(recorder);
        assert_eq!(
            server.await.unwrap(),
            ["POST", "PATCH", "POST", "PATCH", "POST"],
            "a series per Recorder, two Events each"
        );
    }

    /// The cache applies every event; an object passes when `changed` says so against the same
    /// object as cached before the event, and as new when its uid differs (deleted and created
    /// again under the name while the watch was away).
    #[test]
    fn the_cache_applies_every_event_and_passes_only_the_changes() {
        use k8s_openapi::api::core::v1::ConfigMap;
        let map = |uid: &str, value: &str, note: &str| {
            let mut map = ConfigMap::default();
            map.metadata.name = Some("m".into());
            map.metadata.namespace = Some("ns".into());
            map.metadata.uid = Some(uid.into());
            map.data = Some([("key".into(), value.into())].into());
            map.metadata.labels = Some([("note".into(), note.into())].into());
            map
        };
        let key = |m: &ConfigMap| m.data.as_ref().map(|d| d["key"].clone());
        let events = [
            watcher::Event::InitApply(map("u1", "a", "first")),
            watcher::Event::InitDone,
            watcher::Event::Apply(map("u1", "a", "a label only")),
            watcher::Event::Apply(map("u1", "b", "")),
            watcher::Event::Apply(map("u2", "b", "created again")),
            watcher::Event::Delete(map("u2", "b", "created again")),
            watcher::Event::Apply(map("u3", "b", "after the delete")),
        ];
        let (store, writer) = kube::runtime::reflector::store();
        let seen = Mutex::new(Vec::new());
        let applied = Mutex::new(Vec::new());
        let reader = store.clone();
        let (by_uid, passed) = reflect_changes(
            futures::stream::iter(events.map(Ok)),
            writer,
            |cached, new| {
                seen.lock().unwrap().push(cached.is_some());
                cached.map(key) != Some(key(new))
            },
            |event| {
                let note = |m: Option<&ConfigMap>| m.map(|m| m.labels()["note"].clone());
                let what = match event {
                    Applied::Object {
                        object,
                        cached,
                        now,
                    } => {
                        // The cache holds the event's outcome already.
                        let held = reader.get(&ObjectRef::from_obj(object));
                        assert_eq!(held.as_deref(), now);
                        (note(cached), note(now))
                    }
                    Applied::Relisted => (
                        Some("relisted".into()),
                        Some(reader.state().len().to_string()),
                    ),
                };
                applied.lock().unwrap().push(what);
            },
        );
        let passed: Vec<ConfigMap> =
            futures::executor::block_on(passed.map(Result::unwrap).collect());
        let notes: Vec<_> = passed.iter().map(|m| m.labels()["note"].as_str()).collect();
        assert_eq!(
            notes,
            ["first", "", "created again", "after the delete"],
            "unchanged data filtered, a new uid passed"
        );
        assert_eq!(
            *seen.lock().unwrap(),
            [false, true, true, false, true, false],
            "compared with the cached object of the same uid, none after the delete"
        );
        let some = |note: &str| Some(note.to_owned());
        assert_eq!(
            *applied.lock().unwrap(),
            [
                (some("relisted"), some("1")),
                (some("first"), some("a label only")),
                (some("a label only"), some("")),
                (None, some("created again")),
                (some("created again"), None),
                (None, some("after the delete")),
            ],
            "every event once applied, a relist once done; the object before it as for `changed`"
        );
        assert_eq!(store.state().len(), 1);
        assert_eq!(store.state()[0].labels()["note"], "after the delete");
        assert_eq!(by_uid.len(), 1);
        assert_eq!(
            by_uid.get("u3").unwrap().labels()["note"],
            "after the delete"
        );
    }

    /// The uid index holds exactly the cache's objects, the very `Arc`s the cache holds, after
    /// every event of every sequence of 5 over two names, each with two uids (deleted and
    /// created again), relists included: 14^5 sequences.
    #[test]
    fn the_uid_index_holds_what_the_cache_holds_after_any_events() {
        use k8s_openapi::api::core::v1::ConfigMap;
        type Event = watcher::Event<ConfigMap>;
        let map = |name: &str, uid: &str, seq: usize| {
            let mut map = ConfigMap::default();
            map.metadata.name = Some(name.into());
            map.metadata.namespace = Some("ns".into());
            map.metadata.uid = Some(uid.into());
            map.metadata.resource_version = Some(seq.to_string());
            map
        };
        // A uid belongs to one name, as on the API server.
        let objects = [("a", "a1"), ("a", "a2"), ("b", "b1"), ("b", "b2")];
        let alphabet = 3 * objects.len() + 2;
        let event = |letter: usize, seq: usize| -> Event {
            let (name, uid) = objects[letter % objects.len()];
            match letter / objects.len() {
                0 => Event::Apply(map(name, uid, seq)),
                1 => Event::Delete(map(name, uid, seq)),
                2 => Event::InitApply(map(name, uid, seq)),
                _ if letter == 3 * objects.len() => Event::Init,
                _ => Event::InitDone,
            }
        };
        let length = 5;
        let mut checked = 0;
        for sequence in 0..alphabet.pow(length) {
            let (store, mut writer) = kube::runtime::reflector::store::<ConfigMap>();
            let by_uid = UidIndex::default();
            let mut letters = sequence;
            for seq in 0..length as usize {
                let (letter, rest) = (letters % alphabet, letters / alphabet);
                letters = rest;
                reflect_change(
                    &mut writer,
                    &by_uid,
                    |_, _| true,
                    |_| {},
                    event(letter, seq),
                );
                let cached = store.state();
                assert_eq!(
                    by_uid.len(),
                    cached.len(),
                    "sequence {sequence}, event {seq}"
                );
                for object in &cached {
                    let indexed = by_uid.get(object.uid().as_deref().unwrap());
                    assert!(
                        indexed.is_some_and(|indexed| Arc::ptr_eq(&indexed, object)),
                        "sequence {sequence}, event {seq}: {:?}",
                        object.metadata
                    );
                }
                checked += 1;
            }
        }
        assert_eq!(checked, alphabet.pow(length) * length as usize);
    }

    /// Each trigger's `key` data, and what the cache holds under its name as the trigger is
    /// taken (as a controller reads the cache then).
    fn taken_with_cache(
        triggers: impl Stream<Item = watcher::Result<k8s_openapi::api::core::v1::ConfigMap>>,
        store: &kube::runtime::reflector::Store<k8s_openapi::api::core::v1::ConfigMap>,
    ) -> Vec<(String, Option<String>)> {
        futures::executor::block_on(
            triggers
                .map(Result::unwrap)
                .map(|object| {
                    let held = store
                        .get(&ObjectRef::from_obj(&object))
                        .map(|held| held.data.as_ref().unwrap()["key"].clone());
                    (object.data.unwrap()["key"].clone(), held)
                })
                .collect(),
        )
    }

    /// A relist's triggers are passed on only once the cache holds the relist (its end): one
    /// passed on before would be reconciled from the cache as it was before, or not at all (a
    /// new object is not there yet). The first list's pass as they come.
    #[test]
    fn a_relists_triggers_wait_for_the_cache_to_hold_it() {
        use k8s_openapi::api::core::v1::ConfigMap;
        let map = |uid: &str, name: &str, data: &str| {
            let mut map = ConfigMap::default();
            map.metadata.name = Some(name.into());
            map.metadata.namespace = Some("ns".into());
            map.metadata.uid = Some(uid.into());
            map.data = Some([("key".to_owned(), data.to_owned())].into());
            map
        };
        let events = [
            watcher::Event::Init,
            watcher::Event::InitApply(map("u1", "a", "first")),
            watcher::Event::InitDone,
            // The watch broke; the relist brings a changed `a` and a `b` created meanwhile.
            watcher::Event::Init,
            watcher::Event::InitApply(map("u1", "a", "changed")),
            watcher::Event::InitApply(map("u2", "b", "new")),
            watcher::Event::InitDone,
            watcher::Event::Apply(map("u2", "b", "after")),
        ];
        let (store, writer) = kube::runtime::reflector::store();
        let (_, passed) = reflect_changes(
            futures::stream::iter(events.map(Ok)),
            writer,
            |cached: Option<&ConfigMap>, new| cached.map(|c| &c.data) != Some(&new.data),
            |_| {},
        );
        // What the cache holds for each trigger as the controller takes it.
        let taken = taken_with_cache(passed, &store);
        let some = |s: &str| Some(s.to_owned());
        assert_eq!(
            taken,
            [
                ("first".to_owned(), None), // the first list: the controller waits for it
                ("changed".to_owned(), some("changed")),
                ("new".to_owned(), some("new")),
                ("after".to_owned(), some("after")),
            ]
        );
    }

    /// A watch applied to a cache by kube's reflector passes a relist's objects on once the
    /// cache holds them (its end), the first list's as they come.
    #[test]
    fn touched_objects_of_a_relist_come_once_the_cache_holds_them() {
        use k8s_openapi::api::core::v1::ConfigMap;
        use kube::runtime::WatchStreamExt;
        let map = |name: &str, data: &str| {
            let mut map = ConfigMap::default();
            map.metadata.name = Some(name.into());
            map.metadata.namespace = Some("ns".into());
            map.data = Some([("key".to_owned(), data.to_owned())].into());
            map
        };
        let events = [
            watcher::Event::Init,
            watcher::Event::InitApply(map("a", "first")),
            watcher::Event::InitDone,
            watcher::Event::Init,
            watcher::Event::InitApply(map("a", "changed")),
            // The relist broke off and began again: what it held is dropped.
            watcher::Event::Init,
            watcher::Event::InitApply(map("a", "again")),
            watcher::Event::InitApply(map("b", "new")),
            watcher::Event::InitDone,
            watcher::Event::Apply(map("b", "after")),
            // Relisted without `a` (deleted while the watch was down): `a` passes, as it was.
            watcher::Event::Init,
            watcher::Event::InitApply(map("b", "after")),
            watcher::Event::InitDone,
        ];
        let (store, writer) = kube::runtime::reflector::store();
        let touched = futures::stream::iter(events.map(Ok))
            .reflect(writer)
            .touched_after_relist(store.clone());
        let taken = taken_with_cache(touched, &store);
        let some = |s: &str| Some(s.to_owned());
        assert_eq!(
            taken,
            [
                ("first".to_owned(), None),
                ("again".to_owned(), some("again")),
                ("new".to_owned(), some("new")),
                ("after".to_owned(), some("after")),
                // The last relist: `b` at its end, then `a`, gone from the cache.
                ("after".to_owned(), some("after")),
                ("again".to_owned(), None),
            ]
        );
    }

    #[test]
    fn an_event_note_stays_within_the_api_servers_limit() {
        let short = "Submitted as Slurm job 7".to_owned();
        assert_eq!(within_note_limit(short.clone()), short);
        let exact = "x".repeat(EVENT_NOTE_MAX_BYTES);
        assert_eq!(within_note_limit(exact.clone()), exact);
        // Two-byte characters: the cut falls between two of them, never inside one.
        for long in ["é".repeat(2000), format!("x{}", "é".repeat(2000))] {
            let cut = within_note_limit(long.clone());
            assert!(cut.len() <= EVENT_NOTE_MAX_BYTES, "{}", cut.len());
            assert!(cut.len() >= EVENT_NOTE_MAX_BYTES - 4, "{}", cut.len());
            let kept = cut.strip_suffix('…').unwrap();
            assert!(long.starts_with(kept));
        }
        // No room for the marker: a shorter prefix, never more than asked.
        assert_eq!(cut_to_bytes("héllo".to_owned(), 2), "h");
        assert_eq!(cut_to_bytes("héllo".to_owned(), 0), "");
        assert_eq!(cut_to_bytes("héllo".to_owned(), 5), "h…");
    }

    #[test]
    fn backoff_doubles_up_to_the_cap_and_resets() {
        let backoffs = Backoffs::default();
        let key = Backoffs::key("cluster", "ns", "a");
        let delays: Vec<_> = (0..10).map(|_| backoffs.next(&key)).collect();
        assert_eq!(delays[0], Backoffs::MIN);
        assert_eq!(delays[1], Backoffs::MIN * 2);
        assert_eq!(delays[2], Backoffs::MIN * 4);
        assert!(delays.windows(2).all(|w| w[0] <= w[1]), "{delays:?}");
        assert_eq!(*delays.last().unwrap(), Backoffs::MAX);
        // Another object is not affected.
        assert_eq!(
            backoffs.next(&Backoffs::key("cluster", "ns", "b")),
            Backoffs::MIN
        );
        backoffs.reset(&key);
        assert_eq!(backoffs.next(&key), Backoffs::MIN);
    }

    #[test]
    fn busy_retries_start_short_and_stay_bounded() {
        let backoffs = Backoffs::default();
        let key = Backoffs::key("slurmjob", "ns", "a");
        let delays: Vec<_> = (0..12).map(|_| backoffs.next_busy(&key)).collect();
        let within = |d: Duration, nominal: Duration| d >= nominal / 2 && d <= nominal;
        assert!(within(delays[0], Backoffs::BUSY_MIN), "{delays:?}");
        assert!(within(delays[1], Backoffs::BUSY_MIN * 2), "{delays:?}");
        assert!(within(delays[2], Backoffs::BUSY_MIN * 4), "{delays:?}");
        assert!(
            within(*delays.last().unwrap(), Backoffs::BUSY_MAX),
            "{delays:?}"
        );
        assert!(
            delays.iter().all(|d| *d <= Backoffs::BUSY_MAX),
            "{delays:?}"
        );
        backoffs.reset(&key);
        assert_eq!(
            backoffs.next_busy(&key),
            delays[0],
            "the same key and attempt, the same wait"
        );
    }

    /// Busy retries (waiting for a request slot at a restart's burst) do not lengthen the wait
    /// after a real failure, nor failures the busy waits.
    #[test]
    fn busy_retries_and_failures_are_counted_apart() {
        let backoffs = Backoffs::default();
        let key = Backoffs::key("slurmjob", "ns", "a");
        for _ in 0..8 {
            backoffs.next_busy(&key);
        }
        assert_eq!(backoffs.next(&key), Backoffs::MIN);
        assert_eq!(backoffs.next(&key), Backoffs::MIN * 2);
        let fresh = Backoffs::default();
        assert_eq!(backoffs.next_busy(&key), {
            for _ in 0..8 {
                fresh.next_busy(&key);
            }
            fresh.next_busy(&key)
        });
        backoffs.reset(&key);
        assert_eq!(backoffs.next(&key), Backoffs::MIN);
    }

    #[test]
    fn objects_busy_together_do_not_come_back_together() {
        let backoffs = Backoffs::default();
        // 100 SlurmJobs at their sixth busy retry (nominally the 30 s cap, 8 s here).
        let waits: std::collections::BTreeSet<Duration> = (0..100)
            .map(|i| {
                let key = Backoffs::key("slurmjob", "ns", &format!("job-{i}"));
                (0..6).map(|_| backoffs.next_busy(&key)).last().unwrap()
            })
            .collect();
        let (first, last) = (*waits.first().unwrap(), *waits.last().unwrap());
        assert!(waits.len() > 50, "{} distinct waits of 100", waits.len());
        assert!(
            last - first >= Backoffs::BUSY_MIN * 32 / 4,
            "{first:?}..{last:?}"
        );
    }

    #[test]
    fn backoff_never_overflows() {
        assert_eq!(Backoffs::delay(u32::MAX), Backoffs::MAX);
    }
}
