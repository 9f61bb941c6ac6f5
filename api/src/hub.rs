//! Wake-ups for long-polls and event streams: a committed write to a thread's inbox or events
//! notifies the requests waiting on that thread. On SQLite (one API process per file) that is
//! every write, so waiters sleep until woken; on Postgres they also re-check every second, so a
//! write made by another API replica is seen too (`Store::recheck_every`). The replicas waiting
//! for an agent's session work wait each on its own notifier, so a message to one session wakes
//! the replica that owns it, not all of them. Every thread's notification also wakes the A2A push
//! dispatcher (one permit kept, so a wake while it works is not lost).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use ninetrix_proto::ThreadId;
use ninetrix_proto::deltas::Delta;
use tokio::sync::{Notify, broadcast};

/// Deltas a slow watcher of one thread may fall behind by before it skips some (it sees the gap
/// by their offsets).
const DELTA_BACKLOG: usize = 1024;

/// The notifiers of one agent's replicas waiting for session work, by replica number.
type ReplicaNotifiers = HashMap<u32, Arc<Notify>>;

/// Per-thread notifications, per-replica ones for the replicas serving an agent's sessions, and
/// per-thread channels of streamed reply text (deltas, never stored).
#[derive(Default)]
pub(crate) struct Hub {
    threads: Mutex<HashMap<ThreadId, Arc<Notify>>>,
    agents: Mutex<HashMap<(String, String), ReplicaNotifiers>>,
    deltas: Mutex<HashMap<ThreadId, broadcast::Sender<Delta>>>,
    pushes: Notify,
}

impl Hub {
    /// The notifier of a thread (created on first use).
    pub(crate) fn subscribe(&self, id: ThreadId) -> Arc<Notify> {
        let mut threads = self.threads.lock().unwrap_or_else(|e| e.into_inner());
        threads.entry(id).or_default().clone()
    }

    /// Wakes everything waiting on the thread, and the A2A push dispatcher.
    pub(crate) fn notify(&self, id: ThreadId) {
        let threads = self.threads.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = threads.get(&id) {
            n.notify_waiters();
        }
        self.pushes.notify_one();
    }

    /// What wakes the A2A push dispatcher: any thread's notification.
    pub(crate) fn pushes(&self) -> &Notify {
        &self.pushes
    }

    /// The notifier of replica `replica` of an agent, waiting for its sessions' work (created on
    /// first use): woken when a message reaches one of the sessions it owns, or any of the
    /// agent's (see [`Hub::notify_agent`]).
    pub(crate) fn subscribe_replica(&self, pool: &str, agent: &str, replica: u32) -> Arc<Notify> {
        let mut agents = self.agents.lock().unwrap_or_else(|e| e.into_inner());
        agents
            .entry((pool.to_string(), agent.to_string()))
            .or_default()
            .entry(replica)
            .or_default()
            .clone()
    }

    /// Wakes every replica waiting for an agent's session work: its replica count changed, or
    /// work arrived whose owner the caller does not know.
    pub(crate) fn notify_agent(&self, pool: &str, agent: &str) {
        let agents = self.agents.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(replicas) = agents.get(&(pool.to_string(), agent.to_string())) {
            for n in replicas.values() {
                n.notify_waiters();
            }
        }
    }

    /// Wakes the replica of an agent that owns a session with new work (`replica`, as stored
    /// with the session), or every replica when the owner is not known.
    pub(crate) fn notify_session(&self, pool: &str, agent: &str, replica: Option<u32>) {
        let Some(replica) = replica else {
            return self.notify_agent(pool, agent);
        };
        let agents = self.agents.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = agents
            .get(&(pool.to_string(), agent.to_string()))
            .and_then(|replicas| replicas.get(&replica))
        {
            n.notify_waiters();
        }
    }

    /// Wakes everything a committed write names: each thread's waiters and each session's
    /// replica.
    pub(crate) fn wake(&self, wake: &crate::store::Wake) {
        for &thread in &wake.threads {
            self.notify(thread);
        }
        for s in &wake.sessions {
            self.notify_session(&s.pool, &s.agent, s.replica);
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
