//! Commits: one durable step with the events queued before it and those true once it is stored,
//! the requests to people it makes (ID, masked arguments, hash), and the ledger check after it.

use ninetrix_proto::ApprovalId;
use ninetrix_proto::api::{
    ApprovalKind, CommitRequest, CommitResponse, NewApproval, NewEvent, ThreadStatus,
    ToolCallStatus,
};
use ninetrix_proto::events::{self as ev, TraceEvent};
use sha2::{Digest, Sha256};

use crate::checkpoints::{CheckpointError, Checkpoints};
use crate::engine::{ApprovalAsk, CommitPlan};
use crate::snapshots::{SnapshotError, Taken};
use crate::tools;

use super::{Runner, Stop};

impl<C: Checkpoints> Runner<C> {
    /// Commits one durable step, and checks that the ledger recorded each intent as this
    /// runner's: the engine sends only intents for keys it believes new, so any other record
    /// means its view of the ledger is stale — a restart reloads it.
    ///
    /// The trace events queued so far, a `checkpoint` event for the version this commit makes
    /// (versions are chained, so it is the parent's + 1), and `riding` (events true once the commit
    /// is stored) are stored in the same transaction. If the commit fails, they are queued again
    /// (all but the `checkpoint`, which did not happen).
    pub(super) async fn commit(
        &mut self,
        plan: CommitPlan,
        riding: Vec<TraceEvent>,
    ) -> Result<(), Stop> {
        // The turn's end carries the workspace's snapshot, taken now; its event rides along.
        let (turn_end, mut taken, snapshot_event) = match plan.ends_turn {
            Some(turn_seq) => {
                let (end, taken, event) = self.end_of_turn(turn_seq).await?;
                (Some(end), taken, event)
            }
            None => (None, None, None),
        };
        let queued = self.events.take().await;
        let checkpoint = TraceEvent::Checkpoint(ev::Checkpoint {
            version: self.version + 1,
            history_len: plan.truncate_to.unwrap_or(self.history_len) + plan.append.len() as u64,
        });
        let now = chrono::Utc::now();
        let approvals: Vec<NewApproval> = plan.approvals.iter().map(|a| self.request(a)).collect();
        let requested: Vec<TraceEvent> = approvals
            .iter()
            .map(|a| {
                TraceEvent::ApprovalRequested(ev::ApprovalRequested {
                    id: a.id,
                    kind: a.kind,
                    tool: a.tool.clone(),
                    args: match a.kind {
                        ApprovalKind::Question | ApprovalKind::Budget => {
                            crate::engine::preview(&question_of(&a.args), 200)
                        }
                        ApprovalKind::Approval => self.args_preview(&a.args),
                    },
                    timeout_secs: a.timeout_secs,
                })
            })
            .collect();
        let mut riding: Vec<TraceEvent> = requested
            .into_iter()
            .chain(snapshot_event)
            .chain(riding)
            .collect();
        let stored = |riding: &[TraceEvent]| {
            let mut events = queued.clone();
            events.extend(
                std::iter::once(&checkpoint)
                    .chain(riding)
                    .map(|e| e.to_new_event(now)),
            );
            events
        };
        let mut state = plan.state;
        state.attempt = if matches!(state.status, ThreadStatus::InTurn | ThreadStatus::Waiting) {
            self.attempt.clone()
        } else {
            None
        };
        let mut req = CommitRequest {
            turn_end,
            epoch: self.epoch,
            parent_version: self.version,
            truncate_to: plan.truncate_to,
            append: plan.append,
            state,
            intents: plan.intents,
            outcomes: plan.outcomes,
            events: stored(&riding),
            approvals,
            handoff_reply: plan.handoff_reply,
        };
        let mut result = self.store.commit(&req).await;
        if let (Err(CheckpointError::MissingObjects(why)), Some(taken)) = (&result, &mut taken) {
            let why = why.clone();
            result = self
                .commit_again(&mut req, taken, &mut riding, &stored, &why)
                .await;
        }
        let done = match result {
            Ok(done) => {
                if let Some(taken) = &taken
                    && req.turn_end.as_ref().is_some_and(|e| e.snapshot.is_some())
                {
                    self.snapshots.hold(taken);
                }
                self.events.settle(Vec::new()).await;
                for e in std::iter::once(&checkpoint).chain(&riding) {
                    self.events.log_only(e);
                }
                done
            }
            Err(e) => {
                self.events.settle(queued).await;
                for e in riding {
                    self.events.emit(e);
                }
                return Err(e.into());
            }
        };
        self.version = done.version;
        self.history_len = done.history_len;
        if let Some(stale) = done.records.iter().find(|r| {
            r.intent_epoch != self.epoch
                || (r.status != ToolCallStatus::Intent && r.completed_epoch != Some(self.epoch))
        }) {
            return Err(Stop::Failure(format!(
                "the ledger already held call {} ({}, recorded by epoch {}): this runner's view \
                 of the turn is stale",
                stale.key, stale.tool, stale.intent_epoch
            )));
        }
        Ok(())
    }

    /// A turn's end whose snapshot lost an object before its commit (`why`): what is missing
    /// is uploaded and the commit sent again, once; then it is sent without the snapshot, with
    /// a `snapshot_skipped` saying why instead of its `snapshot_taken`.
    async fn commit_again(
        &mut self,
        req: &mut CommitRequest,
        taken: &mut Taken,
        riding: &mut [TraceEvent],
        stored: &impl Fn(&[TraceEvent]) -> Vec<NewEvent>,
        why: &str,
    ) -> Result<CommitResponse, CheckpointError> {
        let turn_seq = req
            .turn_end
            .as_ref()
            .map_or(req.state.turn_seq, |t| t.turn_seq);
        tracing::warn!(
            "the store lost objects of turn {turn_seq}'s snapshot ({why}): uploading them again"
        );
        self.snapshots.forget();
        let again = match self.snapshots.upload(&self.store, taken).await {
            Ok(()) => {
                replace_snapshot_event(riding, super::snapshots::taken_event(turn_seq, taken));
                req.events = stored(riding);
                self.store.commit(req).await
            }
            Err(SnapshotError::Store(
                e @ (CheckpointError::Fenced(_)
                | CheckpointError::Purged(_)
                | CheckpointError::Unreachable(_)),
            )) => Err(e),
            Err(e) => Err(CheckpointError::MissingObjects(e.to_string())),
        };
        let Err(CheckpointError::MissingObjects(why)) = again else {
            return again;
        };
        let why = super::snapshots::skipped_why(format_args!(
            "the store lost objects of the snapshot twice while the turn ended ({why})"
        ));
        let skipped = super::snapshots::skipped_event(turn_seq, why.clone());
        replace_snapshot_event(riding, skipped);
        if let Some(end) = &mut req.turn_end {
            end.snapshot = None;
            end.snapshot_skipped = Some(why);
        }
        req.events = stored(riding);
        self.store.commit(req).await
    }

    /// The stored form of a request to a person: a new ID, the arguments masked for people, and
    /// the hash of the arguments as the model gave them.
    pub(super) fn request(&self, ask: &ApprovalAsk) -> NewApproval {
        let secrets: Vec<&str> = self.config.secrets.values().map(|s| s.expose()).collect();
        let digest = Sha256::digest(crate::ledger::canonical_json(&ask.args).as_bytes());
        NewApproval {
            id: ApprovalId::new_v7(),
            key: ask.key.clone(),
            call_id: ask.call_id.clone(),
            turn_seq: ask.turn_seq,
            kind: ask.kind,
            tool: ask.tool.clone(),
            args: tools::masked_args(&ask.args, &secrets),
            args_hash: digest.iter().map(|b| format!("{b:02x}")).collect(),
            timeout_secs: ask.timeout_secs,
            raise: ask.raise.clone(),
        }
    }

    /// The event with what only the driver knows filled in: a finished turn's duration, and a
    /// replay answer's arguments previewed with the agent's secrets masked (the engine gives
    /// them whole, as JSON).
    pub(super) fn stamped(&self, mut e: TraceEvent) -> TraceEvent {
        match &mut e {
            TraceEvent::TurnCompleted(done) => {
                done.duration_ms = self.turn_started.elapsed().as_secs_f64() * 1000.0;
            }
            TraceEvent::ReplayAnswered(answered) => {
                let args = serde_json::from_str(&answered.args)
                    .unwrap_or_else(|_| serde_json::Value::String(answered.args.clone()));
                answered.args = self.args_preview(&args);
            }
            _ => {}
        }
        e
    }

    /// The replay kill point a commit reaches once it is stored (`None`: none, or not a replay):
    /// `replay_after_turn` for one that ends a turn, `replay_mid_turn` for one before the end
    /// that stores an answer taken from the recording.
    pub(super) fn replay_kill_point(&self, plan: &CommitPlan) -> Option<&'static str> {
        self.config.replay.as_ref()?;
        if plan.ends_turn.is_some() {
            return Some(crate::recording::REPLAY_AFTER_TURN);
        }
        plan.append
            .iter()
            .flat_map(|m| m.tool_result_ids())
            .any(|id| self.engine.answered_from_recording(id))
            .then_some(crate::recording::REPLAY_MID_TURN)
    }
}

/// Puts `event` where the snapshot's event rides.
fn replace_snapshot_event(riding: &mut [TraceEvent], event: TraceEvent) {
    if let Some(e) = riding.iter_mut().find(|e| {
        matches!(
            e,
            TraceEvent::SnapshotTaken(_) | TraceEvent::SnapshotSkipped(_)
        )
    }) {
        *e = event;
    }
}

/// The question of an `ask_human` call, or of a request to raise a budget.
fn question_of(args: &serde_json::Value) -> String {
    args.get("question")
        .and_then(serde_json::Value::as_str)
        .map_or_else(|| args.to_string(), str::to_string)
}
