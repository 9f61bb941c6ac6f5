//! The driver's side of workspace snapshots: the snapshot taken for the commit that ends a
//! turn, a rewind's turn point fetched and its files staged (then applied once the rewind is
//! committed), and the restore at boot of a workspace its checkpoint names but its marker does
//! not (a fork's first boot, a restore a crash interrupted). The work itself is in
//! [`crate::snapshots`].

use ninetrix_proto::api::TurnEnd;
use ninetrix_proto::events::{self as ev, TraceEvent};
use ninetrix_proto::snapshots::SnapshotRef;

use crate::checkpoints::Checkpoints;
use crate::engine::{Input, RewindTo};
use crate::snapshots::scan::Limits;
use crate::snapshots::{SnapshotError, Taken, faults};

use super::{Runner, Stop};

/// The top-level names a thread's snapshots leave out: a replica keeps its sessions'
/// workspaces under `sessions/`, which are theirs, not its own thread's — left out whether or
/// not this runner serves sessions now (one that did before may have left them there).
pub(super) fn excluded(config: &crate::config::Config) -> Vec<String> {
    if config.session.is_none() {
        vec![crate::config::SESSIONS_DIR.to_string()]
    } else {
        Vec::new()
    }
}

/// The `snapshot_taken` event of `taken`.
pub(super) fn taken_event(turn_seq: u64, taken: &Taken) -> TraceEvent {
    TraceEvent::SnapshotTaken(ev::SnapshotTaken {
        turn_seq,
        snapshot: taken.snapshot().clone(),
        uploaded_objects: taken.uploaded_objects,
        uploaded_bytes: taken.uploaded_bytes,
        hashed_files: taken.hashed_files,
        skipped_entries: taken.skipped_entries,
        ms: taken.started.elapsed().as_millis() as u64,
    })
}

/// Why a turn's end has no snapshot, as the API keeps it (at most [`MAX_SKIPPED`] characters).
pub(super) fn skipped_why(why: impl std::fmt::Display) -> String {
    let why = why.to_string();
    match why.char_indices().nth(MAX_SKIPPED - 1) {
        Some((at, _)) => format!("{}…", &why[..at]),
        None => why,
    }
}

/// The longest reason a turn's end carries (`turn_end.snapshot_skipped`'s limit).
const MAX_SKIPPED: usize = 1_000;

/// The `snapshot_skipped` event.
pub(super) fn skipped_event(turn_seq: u64, why: String) -> TraceEvent {
    TraceEvent::SnapshotSkipped(ev::SnapshotSkipped { turn_seq, why })
}

fn stop_of(e: SnapshotError) -> Stop {
    match e {
        SnapshotError::Store(e) => e.into(),
        other => Stop::Failure(other.to_string()),
    }
}

impl<C: Checkpoints> Runner<C> {
    /// The end of turn `turn_seq` for its last commit, with the snapshot taken and its event
    /// (`snapshot_taken`, or `snapshot_skipped` saying why there is none). An agent without
    /// snapshots, a batch job and a replay send the turn's end alone.
    pub(super) async fn end_of_turn(
        &mut self,
        turn_seq: u64,
    ) -> Result<(TurnEnd, Option<Taken>, Option<TraceEvent>), Stop> {
        let exec = &self.config.spec.execution;
        // A replay takes none: nothing in its scratch workspace changes but through live reads,
        // which read.
        let replaying = self.config.replay.is_some();
        let Some(limits) = exec.snapshots.filter(|_| exec.durability && !replaying) else {
            let end = TurnEnd {
                turn_seq,
                snapshot: None,
                snapshot_skipped: None,
                keep_turns: None,
            };
            return Ok((end, None, None));
        };
        let keep_turns = Some(limits.keep_turns);
        let limits = Limits {
            max_files: limits.max_files,
            max_bytes: limits.max_bytes,
        };
        match self.snapshots.take(&self.store, limits).await {
            Ok(taken) => {
                let end = TurnEnd {
                    turn_seq,
                    snapshot: Some(taken.snapshot().clone()),
                    snapshot_skipped: None,
                    keep_turns,
                };
                let event = taken_event(turn_seq, &taken);
                Ok((end, Some(taken), Some(event)))
            }
            Err(e) if e.stops() => Err(stop_of(e)),
            Err(e) => {
                let why = skipped_why(e);
                let end = TurnEnd {
                    turn_seq,
                    snapshot: None,
                    snapshot_skipped: Some(why.clone()),
                    keep_turns,
                };
                Ok((end, None, Some(skipped_event(turn_seq, why))))
            }
        }
    }

    /// What a rewind to `to_turn` goes back to, with its files staged; `Err` in the input:
    /// why it cannot be done (the turn is unknown, its snapshot was dropped, staging failed).
    pub(super) async fn fetch_turn_point(&mut self, to_turn: u64) -> Result<Input, Stop> {
        self.staged = None;
        let point = match self.store.turn_point(to_turn).await {
            Ok(point) => point,
            Err(e) => {
                let e = SnapshotError::Store(e);
                if e.stops() {
                    return Err(stop_of(e));
                }
                return Ok(Input::Rewind(Err(format!(
                    "turn {to_turn} cannot be gone back to: {e}"
                ))));
            }
        };
        if point.snapshot_dropped {
            return Ok(Input::Rewind(Err(format!(
                "the snapshot of turn {to_turn}'s files was dropped (execution.snapshots.\
                 keep_turns keeps only the latest turns' files): they cannot be restored, so \
                 nothing was rewound"
            ))));
        }
        if let Some(why) = &point.snapshot_skipped {
            return Ok(Input::Rewind(Err(format!(
                "turn {to_turn} has no snapshot of its files ({why}): they cannot be restored, \
                 so nothing was rewound"
            ))));
        }
        let (mut files_written, mut files_removed) = (0, 0);
        if let Some(snapshot) = &point.snapshot {
            match self.snapshots.stage(&self.store, snapshot).await {
                Ok(staged) => {
                    files_written = staged.plan.written();
                    files_removed = staged.plan.removed();
                    self.staged = Some(staged);
                }
                Err(e) if e.stops() => return Err(stop_of(e)),
                Err(e) => {
                    self.snapshots.discard_staging();
                    return Ok(Input::Rewind(Err(format!(
                        "the files of turn {to_turn} could not be staged: {e}"
                    ))));
                }
            }
        }
        faults::reached(faults::REWIND_BEFORE_COMMIT, self.snapshots.root()).await;
        Ok(Input::Rewind(Ok(RewindTo {
            point,
            files_written,
            files_removed,
        })))
    }

    /// Applies the files staged for the rewind just committed (staged again if this runner
    /// has none). A failure stops the runner: the next one restores the snapshot at boot.
    pub(super) async fn restore_workspace(&mut self, snapshot: SnapshotRef) -> Result<(), Stop> {
        faults::reached(faults::REWIND_AFTER_COMMIT, self.snapshots.root()).await;
        let staged = match self.staged.take() {
            Some(staged) if staged.snapshot == snapshot => staged,
            _ => self
                .snapshots
                .stage(&self.store, &snapshot)
                .await
                .map_err(|e| restore_failed(&snapshot, e))?,
        };
        self.snapshots
            .apply(staged)
            .await
            .map_err(|e| restore_failed(&snapshot, e))
    }

    /// Before serving: makes the workspace hold the snapshot the checkpoint names, when its
    /// marker says otherwise (`workspace_restored`).
    pub(super) async fn restore_at_boot(&mut self) -> Result<(), Stop> {
        let Some(snapshot) = self.engine.state().workspace.clone() else {
            return Ok(());
        };
        if self.snapshots.marked(&snapshot.root) {
            return Ok(());
        }
        tracing::info!(
            "the workspace is not marked with snapshot {}: restoring it before serving",
            snapshot.root.short()
        );
        let staged = self
            .snapshots
            .stage(&self.store, &snapshot)
            .await
            .map_err(|e| restore_failed(&snapshot, e))?;
        let (files_written, files_removed) = (staged.plan.written(), staged.plan.removed());
        self.snapshots
            .apply(staged)
            .await
            .map_err(|e| restore_failed(&snapshot, e))?;
        self.events
            .emit(TraceEvent::WorkspaceRestored(ev::WorkspaceRestored {
                snapshot,
                files_written,
                files_removed,
            }));
        Ok(())
    }
}

/// A restore that cannot be done: fenced and purged stop as always; anything else is a
/// failure naming the snapshot and why (the restarted runner tries again; nothing runs on a
/// half-restored workspace).
fn restore_failed(snapshot: &SnapshotRef, e: SnapshotError) -> Stop {
    match stop_of(e) {
        Stop::Failure(why) => Stop::Failure(format!(
            "cannot restore the workspace to snapshot {} ({} files): {why}",
            snapshot.root, snapshot.files
        )),
        stop => stop,
    }
}
