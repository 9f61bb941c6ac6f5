//! Deterministic kill points for crash tests: `NINETRIX_API_CRASH_AT=<point>` makes the API
//! process abort (as a SIGKILL would leave it: nothing flushed, no transaction committed) when it
//! reaches that point. The points sit before and after the commit of each durable trigger write:
//! `trigger_fire_before_commit` / `trigger_fire_after_commit` (a schedule's fire) and
//! `hook_before_commit` / `hook_after_commit` (a webhook delivery, after its commit and before
//! its answer). Unset — always, outside tests — a point costs one comparison.

use std::sync::OnceLock;

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
