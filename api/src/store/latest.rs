//! The assembled history of recently read threads, kept so `latest` does not re-read and re-join
//! every message of a long thread each time.
//!
//! An entry is the JSON of a thread's live messages, joined with commas, as of one version. It is
//! never trusted blindly: `latest` reads the thread row and uses the entry only for the same
//! incarnation of the thread (`created_at`), extending it with the messages of the versions since
//! when none of them truncated; otherwise it rebuilds. So writes made through another API replica
//! (Postgres) are seen, and the cache holds no state of its own that could disagree with the
//! database. Bounded by total bytes; the least recently used entries go first.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use ninetrix_proto::ThreadId;

/// The history of one thread as of one version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Cached {
    /// The thread row's `created_at`: which incarnation of the thread (a purged and re-created
    /// thread starts again).
    pub(crate) created_at: i64,
    /// The version it is as of.
    pub(crate) version: i64,
    /// Live messages in it.
    pub(crate) len: i64,
    /// Their JSON, joined with commas.
    pub(crate) history: Arc<String>,
}

struct Entry {
    cached: Cached,
    last_used: u64,
}

/// Assembled histories, bounded by bytes.
pub(crate) struct LatestCache {
    budget: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<ThreadId, Entry>,
    bytes: usize,
    clock: u64,
}

impl LatestCache {
    /// A cache holding at most `budget` bytes of history (0 turns it off).
    pub(crate) fn new(budget: usize) -> Self {
        Self {
            budget,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves at worst a stale entry, which `latest` validates.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The entry of `thread`, if it is of this incarnation.
    pub(crate) fn get(&self, thread: ThreadId, created_at: i64) -> Option<Cached> {
        let mut inner = self.lock();
        inner.clock += 1;
        let now = inner.clock;
        let entry = inner.entries.get_mut(&thread)?;
        if entry.cached.created_at != created_at {
            return None;
        }
        entry.last_used = now;
        Some(entry.cached.clone())
    }

    /// Stores the entry of `thread`, evicting the least recently used ones beyond the budget. A
    /// history larger than the whole budget is not kept.
    pub(crate) fn put(&self, thread: ThreadId, cached: Cached) {
        let size = cached.history.len();
        let mut inner = self.lock();
        if let Some(old) = inner.entries.remove(&thread) {
            inner.bytes -= old.cached.history.len();
        }
        if size > self.budget {
            return;
        }
        while inner.bytes + size > self.budget {
            let Some((&oldest, _)) = inner.entries.iter().min_by_key(|(_, e)| e.last_used) else {
                break;
            };
            if let Some(gone) = inner.entries.remove(&oldest) {
                inner.bytes -= gone.cached.history.len();
            }
        }
        inner.clock += 1;
        let last_used = inner.clock;
        inner.bytes += size;
        inner.entries.insert(thread, Entry { cached, last_used });
    }

    /// Drops the entry of `thread` (it was purged).
    pub(crate) fn forget(&self, thread: ThreadId) {
        let mut inner = self.lock();
        if let Some(old) = inner.entries.remove(&thread) {
            inner.bytes -= old.cached.history.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cached(created_at: i64, version: i64, history: &str) -> Cached {
        Cached {
            created_at,
            version,
            len: 1,
            history: Arc::new(history.to_string()),
        }
    }

    #[test]
    fn an_entry_serves_only_its_own_incarnation_of_the_thread() {
        let cache = LatestCache::new(1000);
        let t = ThreadId::new_v7();
        cache.put(t, cached(5, 3, "abc"));
        assert_eq!(cache.get(t, 5), Some(cached(5, 3, "abc")));
        assert_eq!(cache.get(t, 6), None, "re-created after a purge");
        cache.forget(t);
        assert_eq!(cache.get(t, 5), None);
    }

    #[test]
    fn the_least_recently_used_go_first_and_the_budget_holds() {
        let cache = LatestCache::new(10);
        let [a, b, c] = [ThreadId::new_v7(), ThreadId::new_v7(), ThreadId::new_v7()];
        cache.put(a, cached(1, 1, "aaaa"));
        cache.put(b, cached(1, 1, "bbbb"));
        assert!(cache.get(a, 1).is_some(), "a is now more recent than b");
        cache.put(c, cached(1, 1, "cccc"));
        assert!(cache.get(b, 1).is_none(), "b was the least recently used");
        assert!(cache.get(a, 1).is_some() && cache.get(c, 1).is_some());
        // Replacing an entry counts its new size only.
        cache.put(a, cached(1, 2, "aaaaa"));
        assert_eq!(cache.lock().bytes, 9);
        // Larger than the whole budget: not kept, and nothing else is evicted for it.
        cache.put(b, cached(1, 1, "bbbbbbbbbbbbbbbbbbbbbbbbbbb"));
        assert!(cache.get(b, 1).is_none());
        assert_eq!(cache.lock().bytes, 9);
    }
}
