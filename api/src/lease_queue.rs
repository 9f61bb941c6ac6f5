//! The lease requests of one API process waiting on a limiter, in arrival order. While none of
//! them waits, a newcomer asks the store at once (concurrent grants share SQLite's group
//! commits); once one was answered "wait", newcomers queue behind it and only the head looks at
//! the store: while its answer is "wait" it sleeps until a release or a claim in this process
//! frees the limiter ([`LeaseQueues::freed`]), the moment the reason may be gone by itself (an
//! expiry, the window sliding, a back-off's end), or its own deadline; the others sleep until
//! they become the head (or their deadline passes, when they answer with the head's last
//! reason). Newcomers ask at once again when every request that waited has left. So a pool's
//! waiters cost one transaction per event, not one per waiter per tick, and are served first
//! come, first served. Several API processes on one Postgres
//! database each keep their own queue; the grant itself is race-free in the store.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use ninetrix_proto::api::SlotWait;
use tokio::sync::Notify;

use crate::limit_rules::LimiterKey;

/// Every limiter's queue in this process (a limiter with no waiter has none).
#[derive(Default)]
pub(crate) struct LeaseQueues {
    queues: Mutex<HashMap<LimiterKey, Arc<Queue>>>,
}

/// One limiter's waiters.
#[derive(Default)]
struct Queue {
    state: Mutex<QueueState>,
    /// Woken when the head leaves (the next one becomes the head).
    head_changed: Notify,
    /// Woken when something frees the limiter (the head looks again).
    freed: Notify,
}

#[derive(Default)]
struct QueueState {
    next_ticket: u64,
    waiting: VecDeque<u64>,
    /// Why the head waits, and until when (Unix ms), as its last look found.
    last_wait: Option<(SlotWait, i64)>,
    /// The requests of the queue that were answered "wait": while there is one, newcomers wait
    /// their turn behind it.
    waited: HashSet<u64>,
}

impl LeaseQueues {
    /// Puts a request at the end of the limiter's queue; it leaves when the returned place is
    /// dropped (answered, failed or abandoned by its client).
    pub(crate) fn join(&self, key: LimiterKey) -> Place<'_> {
        let mut queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        let queue = queues.entry(key.clone()).or_default().clone();
        let ticket = {
            let mut state = queue.state.lock().unwrap_or_else(|e| e.into_inner());
            let ticket = state.next_ticket;
            state.next_ticket += 1;
            state.waiting.push_back(ticket);
            ticket
        };
        Place {
            queues: self,
            key,
            queue,
            ticket,
        }
    }

    /// Something freed the limiter (a release, a claim of a newer epoch): its head looks again.
    pub(crate) fn freed(&self, key: &LimiterKey) {
        let queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(queue) = queues.get(key) {
            queue.freed.notify_waiters();
        }
    }

    /// Something may have freed any limiter (a purge deleted a thread's leases): every head
    /// looks again.
    pub(crate) fn freed_all(&self) {
        let queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        for queue in queues.values() {
            queue.freed.notify_waiters();
        }
    }

    /// How many requests wait on the limiter in this process.
    #[cfg(test)]
    fn waiting(&self, key: &LimiterKey) -> usize {
        let queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        queues.get(key).map_or(0, |q| {
            q.state
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .waiting
                .len()
        })
    }
}

/// A request's place in its limiter's queue.
pub(crate) struct Place<'a> {
    queues: &'a LeaseQueues,
    key: LimiterKey,
    queue: Arc<Queue>,
    ticket: u64,
}

impl Place<'_> {
    /// Whether this request is the first of its queue (the one that looks at the store).
    pub(crate) fn is_head(&self) -> bool {
        let state = self.queue.state.lock().unwrap_or_else(|e| e.into_inner());
        state.waiting.front() == Some(&self.ticket)
    }

    /// A wake-up for when the head leaves. Enable it before looking at [`Place::is_head`], so a
    /// change in between is not missed.
    pub(crate) fn head_changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.queue.head_changed.notified()
    }

    /// A wake-up for when the limiter is freed. Enable it before looking at the store.
    pub(crate) fn freed(&self) -> tokio::sync::futures::Notified<'_> {
        self.queue.freed.notified()
    }

    /// Records that this request's look found no room, and why (what the others answer if
    /// their wait ends first): newcomers wait their turn behind it until it leaves.
    pub(crate) fn note_wait(&self, wait: &SlotWait, until: i64) {
        let mut state = self.queue.state.lock().unwrap_or_else(|e| e.into_inner());
        state.last_wait = Some((wait.clone(), until));
        state.waited.insert(self.ticket);
    }

    /// Whether a request of the queue waits for room: a newcomer then waits its turn instead
    /// of asking.
    pub(crate) fn blocked(&self) -> bool {
        let state = self.queue.state.lock().unwrap_or_else(|e| e.into_inner());
        state.waited.iter().any(|t| *t != self.ticket)
    }

    /// Why the head waits, as its last look found (none before its first).
    pub(crate) fn last_wait(&self) -> Option<(SlotWait, i64)> {
        let state = self.queue.state.lock().unwrap_or_else(|e| e.into_inner());
        state.last_wait.clone()
    }
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        // The registry's lock first, as `join` takes them: a queue left empty is forgotten, and
        // no request joins it meanwhile.
        let mut queues = self.queues.queues.lock().unwrap_or_else(|e| e.into_inner());
        let (was_head, empty) = {
            let mut state = self.queue.state.lock().unwrap_or_else(|e| e.into_inner());
            let was_head = state.waiting.front() == Some(&self.ticket);
            state.waiting.retain(|t| *t != self.ticket);
            state.waited.remove(&self.ticket);
            (was_head, state.waiting.is_empty())
        };
        if empty {
            queues.remove(&self.key);
        } else if was_head {
            self.queue.head_changed.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(limiter: &str) -> LimiterKey {
        LimiterKey {
            pool: "p".into(),
            limiter: limiter.into(),
        }
    }

    #[test]
    fn requests_are_served_in_arrival_order_and_leave_when_dropped() {
        let queues = LeaseQueues::default();
        let first = queues.join(key("a"));
        let second = queues.join(key("a"));
        let third = queues.join(key("a"));
        let elsewhere = queues.join(key("b"));
        assert!(first.is_head() && !second.is_head() && !third.is_head());
        assert!(elsewhere.is_head(), "another limiter has its own queue");
        // One that gives up in the middle leaves no gap.
        drop(second);
        assert!(!third.is_head());
        drop(first);
        assert!(third.is_head());
        assert_eq!(queues.waiting(&key("a")), 1);
        drop(third);
        assert_eq!(queues.waiting(&key("a")), 0);
        assert_eq!(
            queues.queues.lock().unwrap().len(),
            1,
            "an empty queue is forgotten"
        );
    }

    #[tokio::test]
    async fn the_next_request_is_woken_when_the_head_leaves() {
        let queues = LeaseQueues::default();
        let head = queues.join(key("a"));
        let next = queues.join(key("a"));
        let woken = next.head_changed();
        tokio::pin!(woken);
        woken.as_mut().enable();
        head.note_wait(
            &SlotWait::InFlight {
                in_flight: 1,
                max_in_flight: 1,
            },
            42,
        );
        assert_eq!(next.last_wait().map(|(_, until)| until), Some(42));
        assert!(
            next.blocked(),
            "a request that waits makes newcomers wait their turn"
        );
        let newcomer = queues.join(key("a"));
        assert!(newcomer.blocked());
        drop(head);
        tokio::time::timeout(std::time::Duration::from_secs(5), woken)
            .await
            .expect("woken");
        assert!(next.is_head());
        assert!(
            !newcomer.blocked(),
            "once the one that waited left, newcomers ask at once"
        );
    }

    #[tokio::test]
    async fn a_release_wakes_the_head_of_its_limiter_only() {
        let queues = LeaseQueues::default();
        let a = queues.join(key("a"));
        let b = queues.join(key("b"));
        let (woken_a, woken_b) = (a.freed(), b.freed());
        tokio::pin!(woken_a);
        tokio::pin!(woken_b);
        woken_a.as_mut().enable();
        woken_b.as_mut().enable();
        queues.freed(&key("a"));
        tokio::time::timeout(std::time::Duration::from_secs(5), woken_a)
            .await
            .expect("a woken");
        assert!(
            futures_util::FutureExt::now_or_never(woken_b.as_mut()).is_none(),
            "b not woken"
        );
        queues.freed_all();
        tokio::time::timeout(std::time::Duration::from_secs(5), woken_b)
            .await
            .expect("b woken by a purge");
    }
}
