//! The assembled history of recently read threads, kept so `latest` does not re-read and re-join
//! every message of a long thread each time.
//!
//! An entry is the JSON of a thread's live messages, joined with commas, as of one version, with
//! where each message ends. It is never trusted blindly: `latest` reads the thread row and uses
//! the entry only for the same incarnation of the thread (`created_at`), extending it with the
//! versions since — each one's cut (`truncate_to`, a repair after a crash) then its messages, in
//! version order ([`Joined::extend`]) — and checking the result's length against the thread's. So
//! writes made through another API replica (Postgres) are seen, a resumed long thread is not
//! re-read whole after its repair, and the cache holds no state of its own that could disagree
//! with the database. Bounded by total bytes; the least recently used entries go first.

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
    /// The live messages as of it.
    pub(crate) history: Arc<Joined>,
}

/// Message bodies (JSON) joined with commas — the inside of a JSON array — and the byte offset
/// where each one ends, so the history can be cut back to any number of messages.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Joined {
    text: String,
    ends: Vec<usize>,
}

impl Joined {
    /// Appends one message's JSON.
    pub(crate) fn push(&mut self, body: &str) {
        if !self.ends.is_empty() {
            self.text.push(',');
        }
        self.text.push_str(body);
        self.ends.push(self.text.len());
    }

    /// Keeps the first `n` messages (all of them if there are fewer).
    pub(crate) fn truncate(&mut self, n: usize) {
        if n < self.ends.len() {
            self.text
                .truncate(if n == 0 { 0 } else { self.ends[n - 1] });
            self.ends.truncate(n);
        }
    }

    /// How many messages.
    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }

    /// The joined JSON.
    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// Bytes held.
    fn size(&self) -> usize {
        self.text.len() + self.ends.len() * std::mem::size_of::<usize>()
    }

    /// This history with the versions after it applied, in version order: for each version its
    /// cut (`cuts`: version, `truncate_to`) and then its messages (`rows`: version, position,
    /// body, in any order). Every message must land at the position it was stored at, and a cut
    /// may not reach past the end: anything else means the rows do not describe this history
    /// (the caller rebuilds from the database).
    pub(crate) fn extend(
        &self,
        cuts: &[(i64, i64)],
        mut rows: Vec<(i64, i64, String)>,
    ) -> Result<Joined, String> {
        rows.sort_by_key(|r| (r.0, r.1));
        let mut cuts: Vec<(i64, i64)> = cuts.to_vec();
        cuts.sort_unstable();
        let mut out = self.clone();
        out.text
            .reserve(rows.iter().map(|r| r.2.len() + 1).sum::<usize>());
        let mut cuts = cuts.into_iter().peekable();
        let mut rows = rows.into_iter().peekable();
        loop {
            let next_cut = cuts.peek().map(|c| c.0);
            let next_row = rows.peek().map(|r| r.0);
            let version = match (next_cut, next_row) {
                (None, None) => return Ok(out),
                (Some(c), Some(r)) => c.min(r),
                (Some(v), None) | (None, Some(v)) => v,
            };
            if let Some((_, to)) = cuts.next_if(|c| c.0 == version) {
                let to =
                    usize::try_from(to).map_err(|_| format!("version {version} cuts to {to}"))?;
                if to > out.len() {
                    return Err(format!(
                        "version {version} cuts to {to} messages of {}",
                        out.len()
                    ));
                }
                out.truncate(to);
            }
            while let Some((_, position, body)) = rows.next_if(|r| r.0 == version) {
                if usize::try_from(position).ok() != Some(out.len()) {
                    return Err(format!(
                        "version {version} has a message at position {position}, after {}",
                        out.len()
                    ));
                }
                out.push(&body);
            }
        }
    }
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
        let size = cached.history.size();
        let mut inner = self.lock();
        if let Some(old) = inner.entries.remove(&thread) {
            inner.bytes -= old.cached.history.size();
        }
        if size > self.budget {
            return;
        }
        while inner.bytes + size > self.budget {
            let Some((&oldest, _)) = inner.entries.iter().min_by_key(|(_, e)| e.last_used) else {
                break;
            };
            if let Some(gone) = inner.entries.remove(&oldest) {
                inner.bytes -= gone.cached.history.size();
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
            inner.bytes -= old.cached.history.size();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cached(created_at: i64, version: i64, history: &str) -> Cached {
        let mut joined = Joined::default();
        joined.push(history);
        Cached {
            created_at,
            version,
            history: Arc::new(joined),
        }
    }

    fn joined(bodies: &[&str]) -> Joined {
        let mut j = Joined::default();
        for b in bodies {
            j.push(b);
        }
        j
    }

    fn row(version: i64, position: i64, body: &str) -> (i64, i64, String) {
        (version, position, body.to_string())
    }

    #[test]
    fn joined_messages_are_a_json_array_inside_and_cut_back_to_any_length() {
        let mut j = joined(&["{\"a\":1}", "2", "\"three\""]);
        assert_eq!(j.text(), "{\"a\":1},2,\"three\"");
        assert_eq!(j.len(), 3);
        j.truncate(5);
        assert_eq!(j.len(), 3, "cutting past the end keeps everything");
        j.truncate(1);
        assert_eq!((j.text(), j.len()), ("{\"a\":1}", 1));
        j.push("4");
        assert_eq!(j.text(), "{\"a\":1},4");
        j.truncate(0);
        assert_eq!((j.text(), j.len()), ("", 0));
        j.push("5");
        assert_eq!(j.text(), "5");
    }

    #[test]
    fn versions_apply_in_order_each_cut_before_its_messages() {
        let base = joined(&["u1", "a1", "u2", "call"]);
        // v5: the tool result; v6: a repair cuts back to the turn's input (2 messages + the
        // input = 3) and the resumed turn appends a new answer; v7 appends one more.
        let cuts = [(6, 3)];
        let rows = vec![row(7, 4, "more"), row(5, 4, "result"), row(6, 3, "answer")];
        let out = base.extend(&cuts, rows).unwrap();
        assert_eq!(out.text(), "u1,a1,u2,answer,more");
        assert_eq!(out, joined(&["u1", "a1", "u2", "answer", "more"]));
        assert_eq!(base.len(), 4, "the cached entry itself is unchanged");
        // A cut with no messages of its own, and a cut to nothing.
        assert_eq!(
            base.extend(&[(5, 2)], vec![]).unwrap(),
            joined(&["u1", "a1"])
        );
        assert_eq!(
            base.extend(&[(5, 0)], vec![row(5, 0, "x")]).unwrap(),
            joined(&["x"])
        );
    }

    #[test]
    fn rows_that_do_not_describe_the_history_are_refused() {
        let base = joined(&["u1", "a1"]);
        assert!(base.extend(&[], vec![row(3, 3, "gap")]).is_err(), "a gap");
        assert!(
            base.extend(&[], vec![row(3, 1, "overlap")]).is_err(),
            "no cut before it"
        );
        assert!(
            base.extend(&[(3, 5)], vec![]).is_err(),
            "a cut past the end"
        );
        assert!(base.extend(&[(3, -1)], vec![]).is_err());
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
        // An entry of one message holds its bytes and one offset.
        let size = |n: usize| n + std::mem::size_of::<usize>();
        let cache = LatestCache::new(size(4) * 2 + size(4) / 2);
        let [a, b, c] = [ThreadId::new_v7(), ThreadId::new_v7(), ThreadId::new_v7()];
        cache.put(a, cached(1, 1, "aaaa"));
        cache.put(b, cached(1, 1, "bbbb"));
        assert!(cache.get(a, 1).is_some(), "a is now more recent than b");
        cache.put(c, cached(1, 1, "cccc"));
        assert!(cache.get(b, 1).is_none(), "b was the least recently used");
        assert!(cache.get(a, 1).is_some() && cache.get(c, 1).is_some());
        // Replacing an entry counts its new size only.
        cache.put(a, cached(1, 2, "aaaaa"));
        assert_eq!(cache.lock().bytes, size(4) + size(5));
        // Larger than the whole budget: not kept, and nothing else is evicted for it.
        cache.put(b, cached(1, 1, "bbbbbbbbbbbbbbbbbbbbbbbbbbb"));
        assert!(cache.get(b, 1).is_none());
        assert_eq!(cache.lock().bytes, size(4) + size(5));
    }
}
