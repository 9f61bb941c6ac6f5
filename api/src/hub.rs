//! Wake-ups for long-polls and event streams: a committed write to a thread's inbox or events
//! notifies the requests waiting on that thread. On SQLite (one API process per file) that is
//! every write, so waiters sleep until woken; on Postgres they also re-check every second, so a
//! write made by another API replica is seen too (`Store::recheck_every`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use ninetrix_proto::ThreadId;
use tokio::sync::Notify;

/// Per-thread notifications, and per-agent ones for the replicas serving an agent's sessions.
#[derive(Default)]
pub(crate) struct Hub {
    threads: Mutex<HashMap<ThreadId, Arc<Notify>>>,
    agents: Mutex<HashMap<(String, String), Arc<Notify>>>,
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
    }
}
