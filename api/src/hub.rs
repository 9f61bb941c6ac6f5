//! Wake-ups for long-polls and event streams: a committed write to a thread's inbox or events
//! notifies the requests waiting on that thread. On SQLite (one API process per file) that is
//! every write, so waiters sleep until woken; on Postgres they also re-check every second, so a
//! write made by another API replica is seen too (`Store::recheck_every`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use ninetrix_proto::ThreadId;
use ninetrix_proto::deltas::Delta;
use tokio::sync::{Notify, broadcast};

/// Deltas a slow watcher of one thread may fall behind by before it skips some (it sees the gap
/// by their offsets).
const DELTA_BACKLOG: usize = 1024;

/// Per-thread notifications, per-agent ones for the replicas serving an agent's sessions, and
/// per-thread channels of streamed reply text (deltas, never stored).
#[derive(Default)]
pub(crate) struct Hub {
    threads: Mutex<HashMap<ThreadId, Arc<Notify>>>,
    agents: Mutex<HashMap<(String, String), Arc<Notify>>>,
    deltas: Mutex<HashMap<ThreadId, broadcast::Sender<Delta>>>,
}

impl Hub {
    /// The notifier of a thread (created on first use).
    pub(crate) fn subscribe(&self, id: ThreadId) -> Arc<Notify> {
        let mut threads = self.threads.lock().unwrap_or_else(|e| e.into_inner());
        threads.entry(id).or_default().clone()
    }

    /// Wakes everything waiting on the thread.
    pub(crate) fn notify(&self, id: ThreadId) {
        let threads = self.threads.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = threads.get(&id) {
            n.notify_waiters();
        }
    }

    /// The notifier of an agent's sessions (created on first use): woken when a message reaches
    /// one of them or the agent's replica count changes.
    pub(crate) fn subscribe_agent(&self, pool: &str, agent: &str) -> Arc<Notify> {
        let mut agents = self.agents.lock().unwrap_or_else(|e| e.into_inner());
        agents
            .entry((pool.to_string(), agent.to_string()))
            .or_default()
            .clone()
    }

    /// Wakes the replicas waiting for an agent's session work.
    pub(crate) fn notify_agent(&self, pool: &str, agent: &str) {
        let agents = self.agents.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = agents.get(&(pool.to_string(), agent.to_string())) {
            n.notify_waiters();
        }
    }

    /// Forgets a purged thread (waking its waiters so they notice).
    pub(crate) fn remove(&self, id: ThreadId) {
        let mut threads = self.threads.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = threads.remove(&id) {
            n.notify_waiters();
        }
        self.deltas
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
    }

    /// A receiver of the thread's deltas from now on.
    pub(crate) fn watch_deltas(&self, id: ThreadId) -> broadcast::Receiver<Delta> {
        let mut deltas = self.deltas.lock().unwrap_or_else(|e| e.into_inner());
        deltas
            .entry(id)
            .or_insert_with(|| broadcast::channel(DELTA_BACKLOG).0)
            .subscribe()
    }

    /// Hands a delta to the thread's watchers, if it has any (else it is dropped: deltas are not
    /// kept). A channel whose watchers are all gone is forgotten.
    pub(crate) fn publish_delta(&self, delta: Delta) {
        let mut deltas = self.deltas.lock().unwrap_or_else(|e| e.into_inner());
        let id = delta.thread_id;
        if let Some(tx) = deltas.get(&id)
            && tx.send(delta).is_err()
        {
            deltas.remove(&id);
        }
    }
}
