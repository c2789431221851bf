//! A connection's request slots for reconciles, and the reconciles waiting for one.
//!
//! A reconcile that finds every slot taken requeues rather than wait in one of its controller's
//! reconcile slots (`Backoffs::next_busy`: 250 ms doubling up to 30 s). The backoff alone would
//! leave a reconcile deferred a few times idle for seconds after the slots had freed, with
//! slurmrestd idle too. So a deferred reconcile also leaves a waker here, and a slot given back
//! with nobody queued for it wakes the longest-waiting one. The backoff stays as the bound when
//! nothing frees (a slurmrestd whose requests hang). Against the local slurmrestd deferrals were
//! rare (`bench burst`, 2 000 SlurmJobs: 3 reconciles in one of seven bursts, none in the
//! rest); this is for one slower than the 100 ms a reconcile queues for a slot (`IO_WAIT`).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Called once, from whatever task frees a slot: must not block (send on a channel).
type OnFree = Box<dyn FnOnce() + Send>;

/// The request slots of one connection, shared by the SlurmClusters on it.
pub struct RequestSlots {
    free: Arc<Semaphore>,
    waiting: Mutex<Waiting>,
}

/// Wakers in the order their keys first asked; one per key.
#[derive(Default)]
struct Waiting {
    order: VecDeque<String>,
    wakers: HashMap<String, OnFree>,
}

impl std::fmt::Debug for RequestSlots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestSlots")
            .field("free", &self.free.available_permits())
            .field("waiting", &self.waiting())
            .finish()
    }
}

impl RequestSlots {
    pub fn new(slots: usize) -> Arc<Self> {
        Arc::new(Self {
            free: Arc::new(Semaphore::new(slots)),
            waiting: Mutex::default(),
        })
    }

    /// A slot, if one is free now.
    pub fn try_take(self: &Arc<Self>) -> Option<RequestSlot> {
        let permit = Arc::clone(&self.free).try_acquire_owned().ok()?;
        Some(self.slot(permit))
    }

    /// A slot, queueing at most `wait` for one (first come, first served).
    pub async fn take_within(self: &Arc<Self>, wait: Duration) -> Option<RequestSlot> {
        let permit = tokio::time::timeout(wait, Arc::clone(&self.free).acquire_owned())
            .await
            .ok()?
            .ok()?;
        Some(self.slot(permit))
    }

    /// Call `wake` once a slot is given back that nobody queues for, the longest-waiting key
    /// first (one free now wakes the first in line at once). One waker per `key`: a later one
    /// replaces the earlier, keeping its place in line.
    pub fn wake_when_free(&self, key: String, wake: impl FnOnce() + Send + 'static) {
        {
            let mut waiting = self.lock();
            let Waiting { order, wakers } = &mut *waiting;
            if wakers.insert(key.clone(), Box::new(wake)).is_none() {
                order.push_back(key);
            }
        }
        // A slot may have come free since the caller found none.
        self.wake_free();
    }

    /// The reconcile of `key` ended without waiting here: its waker, if one is left (it got a
    /// slot another way, or its object is being deleted), is dropped; and a slot free now goes
    /// to the longest-waiting other. A reconcile woken for a slot that returns without taking
    /// it (it found nothing to search, or failed first) so passes it on, and a waker whose
    /// object is gone cannot spend a wake that nobody would see.
    pub fn settle(&self, key: &str) {
        {
            let mut waiting = self.lock();
            let Waiting { order, wakers } = &mut *waiting;
            if wakers.remove(key).is_some() {
                order.retain(|queued| queued != key);
            }
        }
        self.wake_free();
    }

    /// Wakers left, for tests and logs.
    pub fn waiting(&self) -> usize {
        self.lock().wakers.len()
    }

    fn slot(self: &Arc<Self>, permit: OwnedSemaphorePermit) -> RequestSlot {
        RequestSlot {
            permit: Some(permit),
            slots: Arc::clone(self),
        }
    }

    /// Wake the longest-waiting one, if a slot is free: at most one per call, so wakes follow
    /// the slots given back, not the length of the line. A slot released to a queued
    /// [`Self::take_within`] never shows as free, so it wakes nobody.
    fn wake_free(&self) {
        if self.free.available_permits() == 0 {
            return;
        }
        let wake = {
            let mut waiting = self.lock();
            let Waiting { order, wakers } = &mut *waiting;
            std::iter::from_fn(|| order.pop_front()).find_map(|key| wakers.remove(&key))
        };
        // Outside the lock: a waker may be anything that does not block.
        if let Some(wake) = wake {
            wake();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Waiting> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One request slot, held while calling slurmrestd; given back when dropped, waking a waiter
/// if nobody queued for it.
#[derive(Debug)]
pub struct RequestSlot {
    permit: Option<OwnedSemaphorePermit>,
    slots: Arc<RequestSlots>,
}

impl Drop for RequestSlot {
    fn drop(&mut self) {
        drop(self.permit.take());
        self.slots.wake_free();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A waker that records its name in `woken`.
    fn recorder(
        woken: &Arc<Mutex<Vec<&'static str>>>,
        name: &'static str,
    ) -> impl FnOnce() + Send + use<> {
        let woken = Arc::clone(woken);
        move || woken.lock().unwrap().push(name)
    }

    #[test]
    fn each_slot_given_back_wakes_the_longest_waiting_one() {
        let slots = RequestSlots::new(2);
        let taken: Vec<_> = std::iter::from_fn(|| slots.try_take()).collect();
        assert_eq!(taken.len(), 2);
        let woken = Arc::default();
        slots.wake_when_free("a".into(), recorder(&woken, "a"));
        slots.wake_when_free("b".into(), recorder(&woken, "b"));
        slots.wake_when_free("c".into(), recorder(&woken, "c"));
        assert!(woken.lock().unwrap().is_empty(), "no slot is free yet");
        let mut taken = taken.into_iter();
        drop(taken.next());
        assert_eq!(*woken.lock().unwrap(), ["a"]);
        drop(taken.next());
        assert_eq!(*woken.lock().unwrap(), ["a", "b"]);
        assert_eq!(slots.waiting(), 1);
    }

    #[test]
    fn a_key_waits_once_in_its_first_place_with_its_latest_waker() {
        let slots = RequestSlots::new(1);
        let held = slots.try_take();
        let woken = Arc::default();
        slots.wake_when_free("a".into(), recorder(&woken, "a (first)"));
        slots.wake_when_free("b".into(), recorder(&woken, "b"));
        slots.wake_when_free("a".into(), recorder(&woken, "a (again)"));
        assert_eq!(slots.waiting(), 2);
        drop(held);
        assert_eq!(*woken.lock().unwrap(), ["a (again)"]);
        let again = slots.try_take();
        drop(again);
        assert_eq!(*woken.lock().unwrap(), ["a (again)", "b"]);
        assert_eq!(slots.waiting(), 0);
    }

    #[test]
    fn a_slot_free_when_asked_wakes_at_once() {
        let slots = RequestSlots::new(1);
        let woken = Arc::default();
        slots.wake_when_free("a".into(), recorder(&woken, "a"));
        assert_eq!(*woken.lock().unwrap(), ["a"]);
        assert_eq!(slots.waiting(), 0);
    }

    /// A reconcile that ended without waiting leaves no waker behind (its object may be gone:
    /// a wake sent to it would reach nobody), and a slot free then goes to the next in line.
    #[test]
    fn a_settled_key_leaves_the_line_and_passes_a_free_slot_on() {
        let slots = RequestSlots::new(1);
        let held = slots.try_take();
        let woken = Arc::default();
        slots.wake_when_free("a".into(), recorder(&woken, "a"));
        slots.wake_when_free("b".into(), recorder(&woken, "b"));
        slots.wake_when_free("c".into(), recorder(&woken, "c"));
        // Held: settling wakes nobody, but "a" is out of the line.
        slots.settle("a");
        assert!(woken.lock().unwrap().is_empty(), "{woken:?}");
        assert_eq!(slots.waiting(), 2);
        drop(held);
        assert_eq!(*woken.lock().unwrap(), ["b"]);
        // "b" was woken but returned without taking the slot: "c" gets it.
        slots.settle("b");
        assert_eq!(*woken.lock().unwrap(), ["b", "c"]);
        assert_eq!(slots.waiting(), 0);
        // Asking again after settling queues anew.
        let held = slots.try_take();
        slots.wake_when_free("a".into(), recorder(&woken, "a"));
        drop(held);
        assert_eq!(*woken.lock().unwrap(), ["b", "c", "a"]);
    }

    /// A slot handed to a reconcile queued in `take_within` is not free: waking someone for it
    /// would only add one more to the queue.
    #[tokio::test]
    async fn a_slot_passed_to_a_queued_taker_wakes_nobody() {
        let slots = RequestSlots::new(1);
        let held = slots.try_take().unwrap();
        let woken = Arc::default();
        slots.wake_when_free("a".into(), recorder(&woken, "a"));
        let queued = slots.take_within(Duration::from_secs(30));
        tokio::pin!(queued);
        // Polled once, it stands in the semaphore's queue.
        assert!(futures::poll!(&mut queued).is_pending());
        drop(held);
        let second = queued.await.expect("the queued taker got the slot");
        assert!(woken.lock().unwrap().is_empty(), "{woken:?}");
        drop(second);
        assert_eq!(*woken.lock().unwrap(), ["a"]);
    }
}
