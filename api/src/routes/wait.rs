//! The long-poll every waiting route shares (a thread's inbox and requests to people, an agent's
//! session work): look at the store, and while there is nothing to answer yet, sleep until a
//! write wakes the hub, a moment the caller names (a request's expiry), the end of the wait, or shutdown — at
//! no CPU cost. On Postgres it also looks again every second, since another API replica's writes
//! do not wake this one's hub.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::error::ApiError;
use crate::state::App;

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
