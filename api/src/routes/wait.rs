//! The long-poll every waiting route shares (a thread's inbox, requests to people and handoffs, an
//! agent's session work): look at the store, and while there is nothing to answer yet, sleep until
//! a write wakes the hub, a moment the caller names (a request's expiry, a handoff's deadline), the
//! end of the wait, or shutdown — at no CPU cost. On Postgres it also looks again every second,
//! since another API replica's writes do not wake this one's hub.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{ErrorCode, MAX_STORED_INT, MAX_WAIT_SECS};
use serde::Deserialize;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::error::ApiError;
use crate::extract::seq_cursor;
use crate::state::App;

/// Query of a runner's long-poll on what one turn waits for (its requests to people, its
/// handoffs).
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct TurnWaitQuery {
    /// The turn whose items to return.
    #[param(maximum = 9223372036854775807_i64)]
    turn_seq: u64,
    /// Wait up to this many seconds, 0 to 3600 (held at most the server's `--max-wait`) while
    /// every item of the turn that is settled was already seen (`settled`) and some are still
    /// pending.
    #[serde(default)]
    #[param(maximum = 3600)]
    wait: u64,
    /// How many of the turn's items the caller already knows settled (0 when left out).
    #[serde(default)]
    #[param(maximum = 9223372036854775807_i64)]
    settled: u64,
}

/// The items of one turn of thread `id` (`fetch(turn)`), answered once more of them are settled
/// than the caller knew, none is pending, or the wait ends. `pending_until` says of an item
/// whether it is still pending and when it stops being so by itself (an expiry, a deadline —
/// nobody posts those, so the poll wakes for the first).
pub(crate) async fn turn_settled<T, F, Fut>(
    app: &App,
    id: ThreadId,
    q: &TurnWaitQuery,
    fetch: F,
    pending_until: impl Fn(&T) -> Option<DateTime<Utc>>,
) -> Result<Vec<T>, ApiError>
where
    F: Fn(u64) -> Fut,
    Fut: Future<Output = Result<Vec<T>, ApiError>>,
{
    let too_large = |what: &str, v: u64| ApiError::BadRequest {
        code: ErrorCode::InvalidQuery,
        message: format!("{what} {v} is larger than {MAX_STORED_INT}"),
    };
    let turn = seq_cursor(q.turn_seq).map_err(|_| too_large("turn_seq", q.turn_seq))?;
    let wait = wait_for(q.wait)?;
    long_poll(app, app.hub.subscribe(id), wait, || async {
        let items = fetch(turn).await?;
        let pending: Vec<DateTime<Utc>> = items.iter().filter_map(&pending_until).collect();
        let settled = (items.len() - pending.len()) as u64;
        if settled > q.settled || pending.is_empty() {
            return Ok(Look::Ready(items));
        }
        let wake = pending
            .iter()
            .min()
            .and_then(|at| (*at - Utc::now()).to_std().ok())
            .map(|left| Instant::now() + left + Duration::from_millis(1));
        Ok(Look::NotYet {
            answer: items,
            wake,
        })
    })
    .await
}

/// What one look at the store found.
pub(crate) enum Look<T> {
    /// Answer with this now.
    Ready(T),
    /// Nothing new: answer with this if the wait ends; look again at `wake` at the latest.
    NotYet {
        /// The answer if the wait ends first.
        answer: T,
        /// A moment to look again without being woken (a request expiring).
        wake: Option<Instant>,
    },
}

/// A long-poll's `wait` query parameter as a duration: 0 to [`MAX_WAIT_SECS`], else 400
/// `invalid_query`.
pub(crate) fn wait_for(wait: u64) -> Result<Duration, ApiError> {
    if wait > MAX_WAIT_SECS {
        return Err(ApiError::BadRequest {
            code: ErrorCode::InvalidQuery,
            message: format!(
                "wait {wait} is more than {MAX_WAIT_SECS} seconds: a long-poll is held at most the server's --max-wait (at most {MAX_WAIT_SECS}); ask again when it answers"
            ),
        });
    }
    Ok(Duration::from_secs(wait))
}

/// Holds a request open up to `wait` (capped by the server's `--max-wait`) until `look` is
/// [`Look::Ready`], looking again whenever `notify` (the thread's or the agent's, from the hub)
/// is woken.
pub(crate) async fn long_poll<T, F, Fut>(
    app: &App,
    notify: Arc<Notify>,
    wait: Duration,
    mut look: F,
) -> Result<T, ApiError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Look<T>, ApiError>>,
{
    let deadline = Instant::now() + wait.min(app.max_wait);
    loop {
        // Subscribed before looking, so a write between the look and the sleep still wakes us.
        let woken = notify.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let (answer, wake) = match look().await? {
            Look::Ready(answer) => return Ok(answer),
            Look::NotYet { answer, wake } => (answer, wake),
        };
        let now = Instant::now();
        if now >= deadline {
            return Ok(answer);
        }
        let mut until = wake.map_or(deadline, |w| w.min(deadline));
        if let Some(every) = app.store.recheck_every() {
            until = until.min(now + every);
        }
        tokio::select! {
            () = woken => {}
            () = tokio::time::sleep_until(until) => {}
            () = app.shutdown.cancelled() => return Ok(answer),
        }
    }
}
