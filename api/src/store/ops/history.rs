//! Shared-prefix histories (issue 41): where the messages of a thread's history are stored.
//!
//! A thread's history as of a version is its own rows in `messages`, after the prefix it shares
//! with the thread it was forked from: a fork starts with the first `base_len` messages of
//! `base_thread`'s history as of `base_version`, stored once, in that thread's rows. So a history
//! is a list of [`Segment`]s — rows of one thread as of one version, in a range of positions —
//! found by following `base_thread` up ([`segments`]), and every history read (`latest`, one
//! version, a turn's end) reads them in order ([`for_each_row`]).
//!
//! A fork's *effective* base as of a version is shorter than `base_len` after a cut below it (a
//! rewind of the fork to before its fork point): its later own rows start at the cut. The stored
//! rows say where ([`effective_base`]), so the prefix of a thread that was purged while forks
//! lean on it reads from its messages alone (its versions are gone).
//!
//! Forks are made only at a turn's end, where no tool call is open, so a history's open calls
//! (what a tool result may answer) are always in the thread's own rows.

use crate::store::codec::corrupt;
use crate::store::conn::{AssertSqlSafe, Conn, query_as};
use crate::store::{StoreError, StoreResult};

/// The deepest chain of forks a history follows (deeper is corrupt data: a cycle).
const MAX_DEPTH: usize = 10_000;

/// One thread of a history's chain: its rows as of `version` hold positions `base..len`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Link {
    /// The thread.
    pub(crate) thread: String,
    /// The version its rows are read as of.
    pub(crate) version: i64,
    /// Where its own rows start (its effective base; 0 for a thread that is no fork).
    pub(crate) base: i64,
    /// Its history's length as of `version`.
    pub(crate) len: i64,
}

/// Rows of `thread` as of `version` at positions `from..to`; `head`: its latest version, read
/// from the index of live rows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Segment {
    pub(crate) thread: String,
    pub(crate) version: i64,
    pub(crate) from: i64,
    pub(crate) to: i64,
    pub(crate) head: bool,
}

/// The segments of a history, in position order, from its chain (the thread first, then the
/// thread its prefix is in, and so on): each link holds its own rows from its base to the end
/// of what the link below it takes.
pub(crate) fn layout(chain: &[Link]) -> Vec<Segment> {
    let mut end = chain.first().map_or(0, |l| l.len);
    let mut out = Vec::new();
    for (i, link) in chain.iter().enumerate() {
        let to = end.min(link.len);
        if link.base < to {
            out.push(Segment {
                thread: link.thread.clone(),
                version: link.version,
                from: link.base,
                to,
                head: false,
            });
        }
        end = end.min(link.base);
        if end <= 0 || i + 1 == chain.len() {
            break;
        }
    }
    out.reverse();
    out
}

/// Where a fork's own rows start as of a version: `base_len`, or lower after a cut below it — the
/// lowest position of its own live rows below `base_len` (`own_below`), or its length when the
/// cut was the last thing done.
pub(crate) fn effective_base(base_len: i64, own_below: Option<i64>, len: i64) -> i64 {
    base_len.min(own_below.unwrap_or(i64::MAX)).min(len)
}

/// A thread's base: the thread, version and length its history's prefix is.
type Base = (Option<String>, Option<i64>, Option<i64>);

async fn base_of<C: Conn>(c: &mut C, thread: &str) -> StoreResult<Option<(String, i64, i64)>> {
    let row: Option<Base> =
        query_as("SELECT base_thread, base_version, base_len FROM threads WHERE thread_id = $1")
            .bind(thread)
            .fetch_optional(&mut *c)
            .await?;
    Ok(match row {
        Some((Some(t), Some(v), Some(l))) => Some((t, v, l)),
        _ => None,
    })
}

/// The lowest position of `thread`'s own rows live as of `version` below `below`.
async fn own_below<C: Conn>(
    c: &mut C,
    thread: &str,
    version: i64,
    below: i64,
) -> StoreResult<Option<i64>> {
    let (min,): (Option<i64>,) = query_as(
        "SELECT MIN(position) FROM messages WHERE thread_id = $1 AND position < $2 \
         AND version <= $3 AND (superseded_by IS NULL OR superseded_by > $3)",
    )
    .bind(thread)
    .bind(below)
    .bind(version)
    .fetch_one(&mut *c)
    .await?;
    Ok(min)
}

/// The segments of `thread`'s history as of `version` (`len` messages long; `head`: its latest
/// version), following its base up.
pub(crate) async fn segments<C: Conn>(
    c: &mut C,
    thread: &str,
    version: i64,
    len: i64,
    head: bool,
) -> StoreResult<Vec<Segment>> {
    let mut chain = Vec::new();
    let (mut at, mut at_version, mut at_len) = (thread.to_string(), version, len);
    loop {
        if chain.len() > MAX_DEPTH {
            return Err(corrupt(
                "fork chain",
                &format!("{thread} is more than {MAX_DEPTH} forks deep"),
            ));
        }
        let base = base_of(c, &at).await?;
        let Some((base_thread, base_version, base_len)) = base else {
            chain.push(Link {
                thread: at,
                version: at_version,
                base: 0,
                len: at_len,
            });
            break;
        };
        let below = own_below(c, &at, at_version, base_len).await?;
        chain.push(Link {
            thread: at,
            version: at_version,
            base: effective_base(base_len, below, at_len),
            len: at_len,
        });
        (at, at_version, at_len) = (base_thread, base_version, base_len);
    }
    let mut out = layout(&chain);
    if let Some(last) = out.last_mut()
        && last.thread == thread
    {
        last.head = head;
    }
    Ok(out)
}

/// Hands `column` (`body` or `message_id`) of every row of `segments` to `f`, in position order;
/// returns how many rows there were.
pub(crate) async fn for_each_row<C: Conn>(
    c: &mut C,
    segments: &[Segment],
    column: Column,
    mut f: impl FnMut(Option<String>) + Send,
) -> StoreResult<i64> {
    let mut n = 0i64;
    for s in segments {
        let col = column.name();
        let mut rows = 0i64;
        if s.head {
            query_as(AssertSqlSafe(format!(
                "SELECT {col} FROM messages WHERE thread_id = $1 AND superseded_by IS NULL \
                 AND position >= $2 AND position < $3 ORDER BY position"
            )))
            .bind(s.thread.as_str())
            .bind(s.from)
            .bind(s.to)
            .fetch_each(&mut *c, |(v,): (Option<String>,)| {
                rows += 1;
                f(v)
            })
            .await?;
        } else {
            query_as(AssertSqlSafe(format!(
                "SELECT {col} FROM messages WHERE thread_id = $1 AND version <= $2 \
                 AND (superseded_by IS NULL OR superseded_by > $2) AND position >= $3 AND position < $4 ORDER BY position"
            )))
            .bind(s.thread.as_str())
            .bind(s.version)
            .bind(s.from)
            .bind(s.to)
            .fetch_each(&mut *c, |(v,): (Option<String>,)| {
                rows += 1;
                f(v)
            })
            .await?;
        }
        if rows != s.to - s.from {
            return Err(StoreError::Corrupt(
                format!(
                    "history: thread {} has {rows} messages at positions {}..{} as of version {}",
                    s.thread, s.from, s.to, s.version
                )
                .into(),
            ));
        }
        n += rows;
    }
    Ok(n)
}

/// A column of `messages` a history read returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Column {
    /// The message's JSON.
    Body,
    /// Its ID.
    MessageId,
}

impl Column {
    fn name(self) -> &'static str {
        match self {
            Column::Body => "body",
            Column::MessageId => "message_id",
        }
    }
}

/// The bodies of a history's messages, in order.
pub(crate) async fn bodies<C: Conn>(c: &mut C, segments: &[Segment]) -> StoreResult<Vec<String>> {
    let mut out = Vec::new();
    for_each_row(c, segments, Column::Body, |b| {
        out.push(b.unwrap_or_default())
    })
    .await?;
    Ok(out)
}

/// The IDs of a history's messages, in order (`None` for a row stored without one).
pub(crate) async fn message_ids<C: Conn>(
    c: &mut C,
    segments: &[Segment],
) -> StoreResult<Vec<Option<String>>> {
    let mut out = Vec::new();
    for_each_row(c, segments, Column::MessageId, |id| out.push(id)).await?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(thread: &str, version: i64, base: i64, len: i64) -> Link {
        Link {
            thread: thread.into(),
            version,
            base,
            len,
        }
    }

    fn seg(thread: &str, version: i64, from: i64, to: i64) -> Segment {
        Segment {
            thread: thread.into(),
            version,
            from,
            to,
            head: false,
        }
    }

    #[test]
    fn a_thread_that_is_no_fork_is_one_segment() {
        assert_eq!(layout(&[link("a", 7, 0, 12)]), [seg("a", 7, 0, 12)]);
        assert_eq!(layout(&[link("a", 1, 0, 0)]), []);
    }

    #[test]
    fn a_fork_of_a_fork_reads_each_prefix_up_to_where_the_next_starts() {
        // c forked b at 9 messages (b's version 4), b forked a at 5 (a's version 3).
        let chain = [link("c", 2, 9, 11), link("b", 4, 5, 9), link("a", 3, 0, 5)];
        assert_eq!(
            layout(&chain),
            [seg("a", 3, 0, 5), seg("b", 4, 5, 9), seg("c", 2, 9, 11)]
        );
        // A rewind of c to 3 messages, below both fork points: only a's first 3, then c's own.
        let chain = [link("c", 5, 3, 6), link("b", 4, 5, 9), link("a", 3, 0, 5)];
        assert_eq!(layout(&chain), [seg("a", 3, 0, 3), seg("c", 5, 3, 6)]);
        // A cut to nothing.
        let chain = [link("c", 5, 0, 0), link("b", 4, 5, 9), link("a", 3, 0, 5)];
        assert_eq!(layout(&chain), []);
    }

    #[test]
    fn a_cut_below_the_base_lowers_where_own_rows_start() {
        assert_eq!(effective_base(5, None, 8), 5, "no cut");
        assert_eq!(effective_base(5, Some(3), 8), 3, "cut to 3, then appended");
        assert_eq!(effective_base(5, None, 2), 2, "cut to 2, nothing since");
        assert_eq!(effective_base(5, Some(1), 1), 1);
    }
}
