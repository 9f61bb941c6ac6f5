//! The kill points of a rewind and a restore (`NINETRIX_RUNNER_CRASH_AT`, as for background
//! jobs), and the driver's way to reach any kill point — a replay's are named in
//! `crate::recording`: the runner aborts there once per workspace (a marker under `.ninetrix/` keeps the
//! restarted runner from dying at it again). In the driver harness a point can instead be held
//! for one workspace: the driver waits there forever and the test aborts its task.

use std::path::Path;

/// A rewind's files are staged; its commit is not made.
pub const REWIND_BEFORE_COMMIT: &str = "rewind_before_commit";
/// A rewind is committed; none of its files are applied.
pub const REWIND_AFTER_COMMIT: &str = "rewind_after_commit";
/// Half of a restore's files are applied.
pub const RESTORE_MIDWAY: &str = "restore_midway";

/// Dies at `point` if it is the armed one (once per `workspace`); in tests, waits forever if
/// it is held for `workspace`.
pub async fn reached(point: &'static str, workspace: &Path) {
    #[cfg(test)]
    if held::take(workspace, point) {
        std::future::pending::<()>().await;
    }
    crate::jobs::faults::crash(point, workspace);
}

/// Points held for a workspace (tests only).
#[cfg(test)]
pub mod held {
    use std::path::{Path, PathBuf};
    use std::sync::Mutex;

    static HELD: Mutex<Vec<(PathBuf, &'static str)>> = Mutex::new(Vec::new());
    static REACHED: Mutex<Vec<(PathBuf, &'static str)>> = Mutex::new(Vec::new());

    /// The next driver on `workspace` to reach `point` waits there forever.
    pub fn hold(workspace: &Path, point: &'static str) {
        HELD.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((workspace.to_path_buf(), point));
    }

    /// Whether a driver on `workspace` is waiting at `point`.
    pub fn reached(workspace: &Path, point: &'static str) -> bool {
        REACHED
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .any(|(w, p)| w == workspace && *p == point)
    }

    pub(super) fn take(workspace: &Path, point: &'static str) -> bool {
        let mut held = HELD
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match held.iter().position(|(w, p)| w == workspace && *p == point) {
            Some(i) => {
                held.remove(i);
                REACHED
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push((workspace.to_path_buf(), point));
                true
            }
            None => false,
        }
    }
}
