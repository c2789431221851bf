//! A connection's request slots for reconciles, and the reconciles waiting for one.
//!
//! A reconcile that finds every slot taken requeues rather than wait in one of its controller's
//! reconcile slots (`Backoffs::next_busy`: 250 ms doubling up to 30 s). The backoff alone would
//! leave a reconcile deferred a few times idle for seconds after the slots had freed, with
//! slurmrestd idle too. So a deferred reconcile also leaves a waker here, and a slot given back
//! with nobody queued for it wakes the longest-waiting one (one woken holds its turn a while:
//! [`RequestSlots::turns`]). The backoff stays as the bound when
//! nothing frees (a slurmrestd whose requests hang). Against the local slurmrestd deferrals were
//! rare (`bench burst`, 2 000 SlurmJobs: 3 reconciles in one of seven bursts, none in the
//! rest); this is for one slower than the 100 ms a reconcile queues for a slot (`IO_WAIT`).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// Called once, from whatever task frees a slot: must not block (send on a channel).
type OnFree = Box<dyn FnOnce() + Send>;

/// How long a woken key holds its turn ([`RequestSlots::turns`]): then the slot goes to the
/// next in line (a timer, if nothing else wakes one first). A wake whose reconcile never runs
/// (its object left the cache) would otherwise hold it until the waiters' busy bound (30 s).
pub const TURN_LEASE: Duration = Duration::from_secs(5);

/// The request slots of one connection, shared by the SlurmClusters on it.
pub struct RequestSlots {
    free: Arc<Semaphore>,
    waiting: Mutex<Waiting>,
    /// Whether woken keys are remembered until they take a slot or settle ([`Self::turns`]).
    turns: bool,
}

/// Wakers in the order their keys first asked; one per key.
#[derive(Default)]
struct Waiting {
    order: VecDeque<String>,
    wakers: HashMap<String, OnFree>,
    /// Keys woken for a free slot that have neither taken one nor settled, and when
    /// ([`RequestSlots::turns`]).
    woken: HashMap<String, Instant>,
    /// Keys whose turn lapsed before they came for it, and when it lapsed: one that comes late
    /// is served in turn ([`RequestSlots::try_take_in_turn`]) as if on time. Forgotten when
    /// the key takes a slot or settles, or [`LATE_KEPT`] after its turn lapsed.
    lapsed: HashMap<String, Instant>,
    /// A timer will look again when the oldest turn lapses.
    timer: bool,
}

/// How long a key whose turn lapsed is remembered as late ([`Waiting::lapsed`]).
const LATE_KEPT: Duration = Duration::from_secs(60);

impl Waiting {
    /// Turns held past [`TURN_LEASE`] lapse: their keys are remembered as late.
    fn expire(&mut self) {
        let now = Instant::now();
        let lapsed: Vec<String> = self
            .woken
            .iter()
            .filter(|(_, at)| at.elapsed() >= TURN_LEASE)
            .map(|(key, _)| key.clone())
            .collect();
        for key in lapsed {
            self.woken.remove(&key);
            self.lapsed.insert(key, now);
        }
        self.lapsed.retain(|_, at| at.elapsed() < LATE_KEPT);
    }
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
        Self::make(slots, false)
    }

    /// Slots whose every taker reports how its turn ended: [`Self::try_take_for`] when it takes
    /// one, [`Self::settle`] when its reconcile ends without waiting. A woken key then holds
    /// the turn it was woken for until it does either, or for [`TURN_LEASE`]: a free slot wakes
    /// nobody else meanwhile (a key not in the line may still take it with
    /// [`Self::try_take_for`], not with [`Self::try_take_in_turn`]), so a slot freed by a
    /// taker that was woken wakes the next one once, not again when that taker settles, nor
    /// when any other reconcile ends.
    pub fn turns(slots: usize) -> Arc<Self> {
        Self::make(slots, true)
    }

    fn make(slots: usize, turns: bool) -> Arc<Self> {
        Arc::new(Self {
            free: Arc::new(Semaphore::new(slots)),
            waiting: Mutex::default(),
            turns,
        })
    }

    /// A slot for `key`, if one is free now: its turn is taken (its waker, if one is left,
    /// is dropped: it was served another way).
    pub fn try_take_for(self: &Arc<Self>, key: &str) -> Option<RequestSlot> {
        let slot = self.try_take()?;
        self.leave(key);
        Some(slot)
    }

    /// A slot for `key`, if one is free now that no other woken key holds a turn for: unlike
    /// [`Self::try_take_for`], one not in the line does not pass those it would overtake (a
    /// fair line, for the accounting searches of every namespace on a connection). A key whose
    /// own turn lapsed before it came (a reconcile queue longer than [`TURN_LEASE`]) takes a
    /// free slot as if on time: else, while every woken reconcile comes late, each turn would
    /// pass on unused and the slot stay free.
    pub fn try_take_in_turn(self: &Arc<Self>, key: &str) -> Option<RequestSlot> {
        let mut waiting = self.lock();
        waiting.expire();
        let late = waiting.lapsed.contains_key(key);
        let others = waiting.woken.len() - usize::from(waiting.woken.contains_key(key));
        if !late && self.free.available_permits() <= others {
            return None;
        }
        let permit = Arc::clone(&self.free).try_acquire_owned().ok()?;
        if waiting.wakers.remove(key).is_some() {
            waiting.order.retain(|queued| queued != key);
        }
        waiting.woken.remove(key);
        waiting.lapsed.remove(key);
        drop(waiting);
        Some(self.slot(permit))
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

    /// Call `wake` once a slot is given back that nobody queues for and no woken key holds a
    /// turn for ([`Self::turns`]), the longest-waiting key first (one free now wakes the first
    /// in line at once). One waker per `key`: a later one replaces the earlier, keeping its
    /// place in line.
    pub fn wake_when_free(self: &Arc<Self>, key: String, wake: impl FnOnce() + Send + 'static) {
        {
            let mut waiting = self.lock();
            // Woken, it found the slot taken again: its turn is spent, it waits anew.
            waiting.woken.remove(&key);
            if waiting.wakers.insert(key.clone(), Box::new(wake)).is_none() {
                waiting.order.push_back(key);
            }
        }
        // A slot may have come free since the caller found none.
        self.wake_free();
    }

    /// The reconcile of `key` ended without waiting here and without a slot: its waker, if
    /// one is left (its object is being deleted, say), is dropped, so that no wake goes to a
    /// reconcile that would never run; and if it had been woken for a free slot and left it
    /// (it found nothing to search, or failed first), the slot goes to the next in line. So
    /// does a slot promised to keys that held their turn past [`TURN_LEASE`].
    pub fn settle(self: &Arc<Self>, key: &str) {
        self.leave(key);
        self.wake_free();
    }

    /// `key` leaves the line, and gives up a turn it was woken for.
    fn leave(&self, key: &str) {
        let mut waiting = self.lock();
        if waiting.wakers.remove(key).is_some() {
            waiting.order.retain(|queued| queued != key);
        }
        waiting.woken.remove(key);
        waiting.lapsed.remove(key);
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

    /// Wake the longest-waiting one, if a slot is free that no woken key holds a turn for: at
    /// most one per call, so wakes follow the slots given back, not the length of the line. A
    /// slot released to a queued [`Self::take_within`] never shows as free, so it wakes nobody.
    fn wake_free(self: &Arc<Self>) {
        if self.free.available_permits() == 0 {
            return;
        }
        let wake = {
            let mut waiting = self.lock();
            // Read under the lock that every wake takes: two that free one slot at once see
            // each other's turn.
            waiting.expire();
            let Waiting {
                order,
                wakers,
                woken,
                timer,
                ..
            } = &mut *waiting;
            if self.free.available_permits() <= woken.len() {
                self.look_again(woken, wakers.is_empty(), timer);
                return;
            }
            let next = std::iter::from_fn(|| order.pop_front())
                .find_map(|key| wakers.remove(&key).map(|wake| (key, wake)));
            next.map(|(key, wake)| {
                if self.turns {
                    woken.insert(key, Instant::now());
                    self.look_again(woken, wakers.is_empty(), timer);
                }
                wake
            })
        };
        // Outside the lock: a waker may be anything that does not block.
        if let Some(wake) = wake {
            wake();
        }
    }

    /// Turns are held and others wait: when the oldest turn lapses, the slot goes to the next in
    /// line if nothing passed it on before (a timer; one at a time). Only within a runtime:
    /// tests of the line without one pass it on by hand.
    fn look_again(
        self: &Arc<Self>,
        woken: &HashMap<String, Instant>,
        nobody_waits: bool,
        timer: &mut bool,
    ) {
        if *timer || nobody_waits {
            return;
        }
        let Some(lapses) = woken.values().min().map(|at| *at + TURN_LEASE) else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        *timer = true;
        let slots = Arc::downgrade(self);
        runtime.spawn(async move {
            tokio::time::sleep_until(lapses).await;
            if let Some(slots) = slots.upgrade() {
                slots.lock().timer = false;
                slots.wake_free();
            }
        });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Waiting> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One request slot, held while calling slurmrestd; given back when dropped, waking a waiter
/// if nobody queued for it and no woken key holds a turn for it.
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

/// The slots an accounting search by job name takes on a connection: its namespace's (one
/// namespace's searches queue behind one another) and one of the connection's search slots,
/// fewer than its request slots (every namespace's searches together leave requests a slot).
#[derive(Debug, Clone, Copy)]
pub struct SearchSlots<'a> {
    pub namespace: &'a Arc<RequestSlots>,
    pub connection: &'a Arc<RequestSlots>,
}

/// Both slots of a search, given back when dropped.
#[derive(Debug)]
pub struct SearchSlot {
    _namespace: RequestSlot,
    _connection: RequestSlot,
}

impl SearchSlots<'_> {
    /// Both slots for `key`, if both are free now; else the slots to wait on
    /// ([`RequestSlots::wake_when_free`]). In turn ([`RequestSlots::try_take_in_turn`]): a
    /// search woken in one line does not take a slot promised to another woken in the other.
    /// The connection's first: one taken and then given back, for want of the namespace's,
    /// wakes the next in the connection's line, another namespace's search that may run.
    pub fn try_take_for(&self, key: &str) -> Result<SearchSlot, Arc<RequestSlots>> {
        let connection = self
            .connection
            .try_take_in_turn(key)
            .ok_or_else(|| Arc::clone(self.connection))?;
        let namespace = self
            .namespace
            .try_take_in_turn(key)
            .ok_or_else(|| Arc::clone(self.namespace))?;
        Ok(SearchSlot {
            _namespace: namespace,
            _connection: connection,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A search takes its namespace's slot and one of the connection's: with the connection's
    /// taken by other namespaces it waits on those, however free its namespace's is, and is
    /// woken when one ends; with its namespace's taken it waits on that, and the connection's
    /// slot it took meanwhile goes back to the next in that line.
    #[test]
    fn a_search_needs_its_namespaces_slot_and_one_of_the_connections() {
        let woken = Arc::new(Mutex::new(Vec::new()));
        let connection = RequestSlots::turns(2);
        let (a, b, c) = (
            RequestSlots::turns(1),
            RequestSlots::turns(1),
            RequestSlots::turns(1),
        );
        let of = |namespace| SearchSlots {
            namespace,
            connection: &connection,
        };
        let first = of(&a).try_take_for("a/1").unwrap();
        let second = of(&b).try_take_for("b/1").unwrap();
        let waits_on = of(&c).try_take_for("c/1").unwrap_err();
        assert!(Arc::ptr_eq(&waits_on, &connection), "the connection's line");
        assert_eq!(
            c.try_take().map(drop),
            Some(()),
            "its namespace's was not taken"
        );
        connection.wake_when_free("c/1".into(), recorder(&woken, "c/1"));
        drop(second);
        assert_eq!(*woken.lock().unwrap(), vec!["c/1"]);
        let third = of(&c).try_take_for("c/1").unwrap();

        // A search woken in its namespace's line does not take the connection's slot that a
        // search woken in the connection's line was promised.
        let one = RequestSlots::turns(1);
        let d = RequestSlots::turns(1);
        let of_one = |namespace| SearchSlots {
            namespace,
            connection: &one,
        };
        let d1 = of_one(&d).try_take_for("d/1").unwrap();
        let busy = of_one(&b).try_take_for("b/3").unwrap_err();
        assert!(Arc::ptr_eq(&busy, &one));
        one.wake_when_free("b/3".into(), recorder(&woken, "b/3"));
        let busy = of_one(&d).try_take_for("d/2").unwrap_err();
        assert!(
            Arc::ptr_eq(&busy, &one),
            "the connection's slot is taken first"
        );
        d.wake_when_free("d/2".into(), recorder(&woken, "d/2"));
        drop(d1);
        // Its namespace's slot goes back first.
        assert_eq!(
            *woken.lock().unwrap(),
            vec!["c/1", "d/2", "b/3"],
            "both woken"
        );
        assert!(
            of_one(&d).try_take_for("d/2").is_err(),
            "d/2 does not overtake b/3"
        );
        let b3 = of_one(&b).try_take_for("b/3").unwrap();
        drop(b3);

        // Namespace a searches already: its second search waits on a's line, and gives back
        // the connection's slot it took (here: the only one free).
        drop(third);
        let waits_on = of(&a).try_take_for("a/2").unwrap_err();
        assert!(Arc::ptr_eq(&waits_on, &a), "its namespace's line");
        assert!(
            of(&b).try_take_for("b/2").is_ok(),
            "the connection's slot went back"
        );
        drop(first);
    }

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
    /// a wake sent to it would reach nobody); one woken for a free slot that left it passes it
    /// to the next in line.
    #[test]
    fn a_settled_key_leaves_the_line_and_passes_its_unused_turn_on() {
        let slots = RequestSlots::turns(1);
        let held = slots.try_take_for("searcher");
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
        // The searcher's reconcile ends: it was not woken, it passes nothing on ("b" has it).
        slots.settle("searcher");
        // Nor does any other reconcile of the namespace, nor one that comes to wait now.
        slots.settle("unrelated");
        slots.wake_when_free("late".into(), recorder(&woken, "late"));
        assert_eq!(*woken.lock().unwrap(), ["b"]);
        slots.settle("late");
        // "b" was woken but returned without taking the slot: "c" gets it.
        slots.settle("b");
        assert_eq!(*woken.lock().unwrap(), ["b", "c"]);
        assert_eq!(slots.waiting(), 0);
        // "c" takes it and searches: when it is done the slot wakes the next, once.
        let searching = slots.try_take_for("c").unwrap();
        slots.wake_when_free("a".into(), recorder(&woken, "a"));
        slots.wake_when_free("d".into(), recorder(&woken, "d"));
        drop(searching);
        slots.settle("c");
        assert_eq!(*woken.lock().unwrap(), ["b", "c", "a"]);
        // "a" finds the slot taken meanwhile: it waits anew, behind "d", and passes nothing.
        let taken = slots.try_take_for("e").unwrap();
        slots.wake_when_free("a".into(), recorder(&woken, "a"));
        slots.settle("a");
        assert_eq!(*woken.lock().unwrap(), ["b", "c", "a"]);
        drop(taken);
        assert_eq!(*woken.lock().unwrap(), ["b", "c", "a", "d"]);
    }

    /// A woken key that finds the slot taken again waits anew: its turn is spent, so when it
    /// then leaves (its SlurmJob deleted) it passes nothing on; the one woken next does.
    #[test]
    fn a_turn_found_taken_is_spent() {
        let slots = RequestSlots::turns(1);
        let held = slots.try_take_for("held");
        let woken = Arc::default();
        for key in ["a", "d", "f"] {
            slots.wake_when_free(key.into(), recorder(&woken, key));
        }
        drop(held);
        assert_eq!(*woken.lock().unwrap(), ["a"]);
        // "e" takes the slot before "a" runs: "a" is told to wait, behind "d" and "f".
        let taken = slots.try_take_for("e").unwrap();
        slots.wake_when_free("a".into(), recorder(&woken, "a"));
        drop(taken);
        assert_eq!(*woken.lock().unwrap(), ["a", "d"]);
        // "a" is deleted: "d" holds the turn, "f" stays in line.
        slots.settle("a");
        assert_eq!(*woken.lock().unwrap(), ["a", "d"]);
        assert_eq!(slots.waiting(), 1);
        slots.settle("d");
        assert_eq!(*woken.lock().unwrap(), ["a", "d", "f"]);
    }

    /// A wake whose reconcile never runs (its object left the cache) holds the turn only for
    /// its lease: then the free slot goes to the next in line, with nothing else happening.
    #[tokio::test(start_paused = true)]
    async fn a_turn_never_taken_lapses() {
        let slots = RequestSlots::turns(1);
        let held = slots.try_take_for("held");
        let woken = Arc::default();
        slots.wake_when_free("lost".into(), recorder(&woken, "lost"));
        slots.wake_when_free("next".into(), recorder(&woken, "next"));
        drop(held);
        assert_eq!(*woken.lock().unwrap(), ["lost"]);
        slots.settle("unrelated");
        tokio::time::advance(TURN_LEASE / 2).await;
        assert_eq!(*woken.lock().unwrap(), ["lost"], "within its lease");
        // Nothing else happens: the lease's end alone passes the slot on.
        tokio::time::advance(TURN_LEASE / 2).await;
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(*woken.lock().unwrap(), ["lost", "next"]);
    }

    /// A key woken for a slot whose reconcile comes after its turn lapsed (and the turn passed
    /// on) still takes the slot in turn, as if on time: a queue of reconciles longer than the
    /// lease does not leave the slot free while every turn passes on unused. One that never
    /// had a turn does not.
    #[tokio::test(start_paused = true)]
    async fn a_key_late_for_its_turn_is_served_in_turn() {
        let slots = RequestSlots::turns(1);
        let held = slots.try_take_for("held");
        let woken = Arc::default();
        slots.wake_when_free("late".into(), recorder(&woken, "late"));
        slots.wake_when_free("next".into(), recorder(&woken, "next"));
        drop(held);
        tokio::time::advance(TURN_LEASE).await;
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(
            *woken.lock().unwrap(),
            ["late", "next"],
            "the turn passed on"
        );
        assert!(slots.try_take_in_turn("other").is_none(), "no turn: none");
        let taken = slots.try_take_in_turn("late");
        assert!(taken.is_some(), "late for its turn, served");
        drop(taken);
        // Served, it is late no more: the slot is next's turn.
        assert!(slots.try_take_in_turn("late").is_none(), "late no more");
        assert!(slots.try_take_in_turn("next").is_some(), "next's turn");
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
