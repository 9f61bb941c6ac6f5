//! Test hooks of the API process, inert unless their variable is set. Kill points for crash
//! tests: `NINETRIX_API_CRASH_AT=<point>` makes the API
//! process abort (as a SIGKILL would leave it: nothing flushed, no transaction committed) when it
//! reaches that point. The points sit before and after the commit of each durable trigger write:
//! `trigger_fire_before_commit` / `trigger_fire_after_commit` (a schedule's fire) and
//! `hook_before_commit` / `hook_after_commit` (a webhook delivery, after its commit and before
//! its answer), and `purge_before_commit` / `purge_after_commit` (a thread's purge: its rows
//! deleted and its tombstone written, before and after the commit), and
//! `replica_thread_before_commit` / `replica_thread_after_commit` (a replica's thread made: the
//! mapping row and the thread, before the commit and after it, before the answer), and
//! `cancel_before_commit` / `cancel_after_commit` (a turn's cancel: its inbox row and what it
//! settles written, before the commit; and after it, before the answer), and
//! `lease_before_commit` / `lease_after_commit` (a model lease granted: its row written, before
//! the commit; after it, before the answer) and `release_before_commit` /
//! `release_after_commit` (a lease's first release: its tokens, spend and back-off written,
//! before the commit; after it, before the answer), and `replay_before_commit` /
//! `replay_after_commit` (a replay made: its thread, first version, base turn, inbox and
//! `replay_started` event written, before the commit; after it, before the answer). Unset —
//! always, outside tests — a point costs one comparison.
//!
//! `NINETRIX_API_CLOCK_SKEW_SECS=<seconds>` moves the scheduler's clock (only the scheduler's)
//! forward, so a test can restart a crashed API "an hour later" without waiting an hour and
//! watch it catch up.

use std::sync::OnceLock;

use chrono::{DateTime, TimeDelta, Utc};

/// The environment variable that names the kill point.
pub const CRASH_AT_ENV: &str = "NINETRIX_API_CRASH_AT";

fn armed() -> Option<&'static str> {
    static AT: OnceLock<Option<String>> = OnceLock::new();
    AT.get_or_init(|| std::env::var(CRASH_AT_ENV).ok().filter(|v| !v.is_empty()))
        .as_deref()
}

/// Aborts the process if `point` is the armed kill point.
pub(crate) fn crash(point: &str) {
    if armed() == Some(point) {
        eprintln!("{CRASH_AT_ENV}={point}: aborting at the kill point");
        std::process::abort();
    }
}

/// The environment variable that moves the scheduler's clock forward, in seconds.
pub const CLOCK_SKEW_ENV: &str = "NINETRIX_API_CLOCK_SKEW_SECS";

/// The scheduler's time: now, plus the test skew if one is set.
pub(crate) fn scheduler_now() -> DateTime<Utc> {
    static SKEW: OnceLock<TimeDelta> = OnceLock::new();
    let skew = SKEW.get_or_init(|| {
        std::env::var(CLOCK_SKEW_ENV)
            .ok()
            .and_then(|v| v.parse::<i64>().ok())
            .and_then(TimeDelta::try_seconds)
            .unwrap_or_default()
    });
    Utc::now() + *skew
}
