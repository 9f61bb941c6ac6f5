//! The scheduler: a task of every API process that fires the schedules that are due. Each tick
//! first asks (a read) whether any schedule is due, and only then runs the firing transaction
//! (`Store::fire_due`), so an idle API writes nothing. Several API processes on one Postgres
//! database all tick; the row locks of that transaction make each scheduled time fire once.
//! What fired wakes the target agents' replicas and the sessions' long-polls.

use std::time::Duration;

use crate::faults::{crash, scheduler_now};
use crate::state::App;

/// How often the scheduler looks for due schedules by default.
pub const DEFAULT_TICK: Duration = Duration::from_secs(1);

/// Ticks every `every` until the server shuts down, each tick just after a multiple of `every`
/// on the clock, so a schedule's fire (its instants are whole seconds) is stored milliseconds
/// after its time rather than up to a tick later.
pub(crate) async fn run(app: App, every: Duration) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(until_next(scheduler_now(), every)) => {}
            () = app.shutdown.cancelled() => return,
        }
        tick(&app).await;
    }
}

/// How long from `now` to just past the next multiple of `every` since the Unix epoch.
fn until_next(now: chrono::DateTime<chrono::Utc>, every: Duration) -> Duration {
    const PAST: Duration = Duration::from_millis(2);
    let period = every.as_millis().max(1);
    let into = u128::try_from(now.timestamp_millis()).unwrap_or(0) % period;
    Duration::from_millis(u64::try_from(period - into).unwrap_or(1000)) + PAST
}

/// One tick: fires what is due now.
async fn tick(app: &App) {
    let now = scheduler_now();
    match app.store.triggers_due(now).await {
        Ok(true) => {}
        Ok(false) => return,
        Err(e) => {
            tracing::warn!(error = %e, "the scheduler cannot read the triggers; trying again next tick");
            return;
        }
    }
    match app.store.fire_due(now, crash).await {
        Ok(fired) => {
            if !fired.is_empty() {
                crash("trigger_fire_after_commit");
            }
            for f in fired {
                tracing::info!(pool = %f.pool, trigger = %f.trigger, thread_id = %f.thread_id, seq = f.seq,
                    scheduled_at = ?f.scheduled_at, "trigger fired");
                app.hub.notify(f.thread_id);
                app.hub.notify_agent(&f.pool, &f.agent);
                app.hub.wake(&f.wake);
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "a scheduler tick failed; its fires are retried next tick")
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone as _;

    use super::*;

    #[test]
    fn a_tick_waits_for_just_past_the_next_whole_period() {
        let at = |ms| chrono::Utc.timestamp_millis_opt(ms).unwrap();
        let second = Duration::from_secs(1);
        assert_eq!(until_next(at(10_000), second), Duration::from_millis(1002));
        assert_eq!(until_next(at(10_250), second), Duration::from_millis(752));
        assert_eq!(until_next(at(10_999), second), Duration::from_millis(3));
        assert_eq!(
            until_next(at(10_100), Duration::from_millis(500)),
            Duration::from_millis(402)
        );
    }
}
