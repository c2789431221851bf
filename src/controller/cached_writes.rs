//! Writes of this process that the controllers' caches may not show yet. A reconcile that runs
//! before the watch brings a write back works from the object as it was, and would write again:
//! a second status write, or a second finalizer patch the API server refuses.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::Resource;

/// When a reconcile that found the cache behind this process's own write looks again, at the
/// latest: the write's watch event, which comes within milliseconds, triggers it sooner where
/// the controller is triggered by it (a SlurmNodeSet is not, for a finalizer).
pub const CACHE_LAG_RETRY: Duration = Duration::from_secs(1);

/// Writes of this process, by the object's uid, until the cache shows them or
/// [`Self::LAG_LIMIT`] passes. What is recorded of a write (`T`) is what tells whether a
/// cached object shows it.
#[derive(Debug)]
pub struct CachedWrites<T> {
    by_uid: Mutex<HashMap<String, (T, Instant)>>,
}

impl<T> Default for CachedWrites<T> {
    fn default() -> Self {
        Self {
            by_uid: Mutex::default(),
        }
    }
}

impl<T> CachedWrites<T> {
    /// How long the cache may lag a write before the write is taken as lost (overwritten, or
    /// never delivered) and the reconcile goes on from what the cache holds.
    pub const LAG_LIMIT: Duration = Duration::from_secs(30);

    /// Object `uid` was written at `at`; `written` tells the write apart.
    pub fn record(&self, uid: &str, written: T, at: Instant) {
        let mut map = self.by_uid.lock().unwrap_or_else(|p| p.into_inner());
        map.insert(uid.to_owned(), (written, at));
    }

    /// Whether the cache lags the recorded write of `uid` at `now`: `unseen` says the cached
    /// object does not show it, and the write is younger than [`Self::LAG_LIMIT`]. Forgets the
    /// write otherwise.
    pub fn lags(&self, uid: &str, now: Instant, unseen: impl FnOnce(&T) -> bool) -> bool {
        let mut map = self.by_uid.lock().unwrap_or_else(|p| p.into_inner());
        let Some((written, at)) = map.get(uid) else {
            return false;
        };
        if unseen(written) && now.saturating_duration_since(*at) < Self::LAG_LIMIT {
            return true;
        }
        map.remove(uid);
        false
    }

    /// Forget `uid` (the cache shows the write, or the object is gone).
    pub fn forget_uid(&self, uid: &str) {
        let mut map = self.by_uid.lock().unwrap_or_else(|p| p.into_inner());
        map.remove(uid);
    }

    /// Keep only the writes of the uids `live` holds (a relist: the others are gone).
    pub fn keep_only(&self, live: impl Fn(&str) -> bool) {
        let mut map = self.by_uid.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|uid, _| live(uid));
    }

    /// Forget the writes older than [`Self::LAG_LIMIT`] at `now`: [`Self::lags`] no longer
    /// waits for them, whether or not the object is still there.
    pub fn forget_expired(&self, now: Instant) {
        let mut map = self.by_uid.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|_, (_, at)| now.saturating_duration_since(*at) < Self::LAG_LIMIT);
    }

    pub fn len(&self) -> usize {
        self.by_uid.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The objects this process gave the finalizer (`kit::add_finalizer`), with the resourceVersion
/// it patched. A reconcile of that very version lacks the finalizer only because the watch has
/// not brought the patch back yet (a SlurmJob woken for a slot, a SlurmNodeSet woken by the pod
/// it just made, can run first): patching again would be refused (the patch tests the
/// finalizers it read), cost a write, and back the object off as a failure. Uids are unique
/// across kinds, so every controller shares one.
pub type FinalizerWrites = CachedWrites<String>;

impl CachedWrites<String> {
    /// Whether the cached object of `uid`, at `version` and without the finalizer, is the one
    /// this process patched (at `now`): the cache lags.
    pub fn cache_lags(&self, uid: &str, version: &str, now: Instant) -> bool {
        self.lags(uid, now, |patched| patched == version)
    }

    /// [`Self::cache_lags`] for a cached `object` that lacks the finalizer.
    pub fn lags_behind<K: Resource>(&self, object: &K, now: Instant) -> bool {
        let meta = object.meta();
        match (meta.uid.as_deref(), meta.resource_version.as_deref()) {
            (Some(uid), Some(version)) => self.cache_lags(uid, version, now),
            _ => false,
        }
    }

    /// This process gave `before` (the object as the patch read it) the finalizer at `at`.
    pub fn patched<K: Resource>(&self, before: &K, at: Instant) {
        let meta = before.meta();
        if let (Some(uid), Some(version)) = (meta.uid.as_deref(), meta.resource_version.as_ref()) {
            self.record(uid, version.clone(), at);
        }
    }

    /// The cache shows `object` with the finalizer (or it is gone): nothing to wait for.
    pub fn shown<K: Resource>(&self, object: &K) {
        if let Some(uid) = object.meta().uid.as_deref() {
            self.forget_uid(uid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A finalizer patch holds back a reconcile of the version it patched, not of another one,
    /// nor after the lag limit; the cache showing it forgets it.
    #[test]
    fn a_finalizer_patch_holds_back_only_the_version_it_patched() {
        let writes = FinalizerWrites::default();
        let at = Instant::now();
        writes.record("u", "41".to_owned(), at);
        assert!(writes.cache_lags("u", "41", at + Duration::from_millis(5)));
        assert!(!writes.cache_lags("v", "41", at));
        assert!(
            !writes.cache_lags("u", "41", at + FinalizerWrites::LAG_LIMIT),
            "lost: patched again"
        );
        assert!(!writes.cache_lags("u", "41", at), "forgotten");
        writes.record("u", "41".to_owned(), at);
        assert!(!writes.cache_lags("u", "43", at), "another version");
        assert!(!writes.cache_lags("u", "41", at), "forgotten");
        writes.record("u", "41".to_owned(), at);
        writes.forget_uid("u");
        assert!(!writes.cache_lags("u", "41", at));
    }
}
