//! The tool-call ledger's rules (docs/design.md §6.5), as pure functions: the key of a call —
//! `sha256(thread, turn_seq, tool, canonical args, occurrence)`, where occurrence counts earlier
//! identical calls in the same turn, never the provider's call ID, which changes when a turn is
//! re-run — and [`decide`], what to do with a call given what the ledger holds for its key:
//! replay, report the outcome unknown, or execute. The engine applies the decision; the driver
//! only performs it.

use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{ToolCallRecord, ToolCallStatus};
use ninetrix_proto::effects::Effect;
use ninetrix_proto::events::ToolMode;
use sha2::{Digest, Sha256};

/// What the runner knows of one ledger key: loaded for the turn being resumed, then kept up to
/// date as its own commits record intents and outcomes (one runner writes a thread at a time).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Intent only, or an outcome.
    pub status: ToolCallStatus,
    /// The recorded result text, once there is an outcome.
    pub result: Option<String>,
    /// The epoch that recorded the intent.
    pub intent_epoch: u64,
    /// When the intent was stored, as the API recorded it (`None` for this runner's own, not
    /// loaded from the API): a call to a remote A2A agent waits `transfer_timeout` from then,
    /// through restarts.
    pub intent_at: Option<chrono::DateTime<chrono::Utc>>,
}

impl Entry {
    /// An intent recorded by the runner at `epoch`.
    pub fn intent(epoch: u64) -> Self {
        Self {
            status: ToolCallStatus::Intent,
            result: None,
            intent_epoch: epoch,
            intent_at: None,
        }
    }

    /// This entry with an outcome.
    pub fn completed(self, ok: bool, result: String) -> Self {
        Self {
            status: if ok {
                ToolCallStatus::Completed
            } else {
                ToolCallStatus::Failed
            },
            result: Some(result),
            ..self
        }
    }
}

impl From<&ToolCallRecord> for Entry {
    fn from(r: &ToolCallRecord) -> Self {
        Self {
            status: r.status,
            result: r.result.clone(),
            intent_epoch: r.intent_epoch,
            intent_at: Some(r.created_at),
        }
    }
}

/// What to do with a tool call, given the ledger's record of its key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The call has an outcome: return it without running the tool again.
    Replay {
        /// The recorded result text.
        content: String,
        /// Whether it was an error.
        is_error: bool,
    },
    /// A `write` started by an earlier runner that died before recording its outcome: it may or
    /// may not have happened, so it is not run again; the model is told to verify.
    OutcomeUnknown,
    /// Run the tool and record its outcome: a fresh intent of this runner, or a `read` or
    /// `idempotent` call an earlier runner left without an outcome (safe to repeat).
    Execute {
        /// An earlier runner had started it.
        again: bool,
    },
}

impl Decision {
    /// How the trace shows it.
    pub fn mode(&self) -> ToolMode {
        match self {
            Decision::Replay { .. } => ToolMode::Replayed,
            Decision::OutcomeUnknown => ToolMode::OutcomeUnknown,
            Decision::Execute { again: false } => ToolMode::Executed,
            Decision::Execute { again: true } => ToolMode::ReExecuted,
        }
    }
}

/// The ledger decision for a call, given what the ledger holds for its key (`None`: nothing), by
/// a runner at `epoch`, for a call of class `effect` (which may differ per call: `file_write` with
/// `overwrite` is idempotent, with `append` a write). A `write` decided `Execute` runs only once
/// its intent is stored (the engine sees to that).
pub fn decide(entry: Option<&Entry>, epoch: u64, effect: Effect) -> Decision {
    let Some(entry) = entry else {
        return Decision::Execute { again: false };
    };
    match entry.status {
        ToolCallStatus::Completed | ToolCallStatus::Failed => Decision::Replay {
            content: entry.result.clone().unwrap_or_default(),
            is_error: entry.status == ToolCallStatus::Failed,
        },
        ToolCallStatus::Intent if entry.intent_epoch == epoch => Decision::Execute { again: false },
        ToolCallStatus::Intent => match effect {
            Effect::Write => Decision::OutcomeUnknown,
            Effect::Read | Effect::Idempotent => Decision::Execute { again: true },
        },
    }
}

/// The JSON of `value` with object keys sorted (serde_json's map is ordered by key), so equal
/// arguments give equal text whatever order the model wrote them in.
pub fn canonical_json(value: &serde_json::Value) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// The ledger key of a call.
pub fn key(
    thread: ThreadId,
    turn_seq: u64,
    tool: &str,
    args: &serde_json::Value,
    occurrence: usize,
) -> String {
    let mut h = Sha256::new();
    for part in [
        thread.to_string(),
        turn_seq.to_string(),
        tool.to_string(),
        canonical_json(args),
        occurrence.to_string(),
    ] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(status: ToolCallStatus, intent_epoch: u64) -> Entry {
        Entry {
            status,
            result: (status != ToolCallStatus::Intent).then(|| "recorded".to_string()),
            intent_epoch,
            intent_at: None,
        }
    }

    /// Every status × (this runner's intent, an earlier runner's) × effect class, and no entry.
    #[test]
    fn the_ledger_decision_table() {
        use Decision::*;
        use Effect::*;
        use ToolCallStatus::*;
        let replay_ok = Replay {
            content: "recorded".into(),
            is_error: false,
        };
        let replay_err = Replay {
            content: "recorded".into(),
            is_error: true,
        };
        let fresh = Execute { again: false };
        let again = Execute { again: true };
        let table = [
            // status, intent epoch (this runner is at 2), effect → decision
            (Completed, 2, Read, replay_ok.clone()),
            (Completed, 2, Idempotent, replay_ok.clone()),
            (Completed, 2, Write, replay_ok.clone()),
            (Completed, 1, Read, replay_ok.clone()),
            (Completed, 1, Idempotent, replay_ok.clone()),
            (Completed, 1, Write, replay_ok.clone()),
            (Failed, 2, Read, replay_err.clone()),
            (Failed, 2, Idempotent, replay_err.clone()),
            (Failed, 2, Write, replay_err.clone()),
            (Failed, 1, Read, replay_err.clone()),
            (Failed, 1, Idempotent, replay_err.clone()),
            (Failed, 1, Write, replay_err.clone()),
            (Intent, 2, Read, fresh.clone()),
            (Intent, 2, Idempotent, fresh.clone()),
            (Intent, 2, Write, fresh.clone()),
            (Intent, 1, Read, again.clone()),
            (Intent, 1, Idempotent, again.clone()),
            (Intent, 1, Write, OutcomeUnknown),
        ];
        for (status, intent_epoch, effect, want) in table {
            let got = decide(Some(&entry(status, intent_epoch)), 2, effect);
            assert_eq!(got, want, "{status:?} by epoch {intent_epoch}, {effect:?}");
        }
        for effect in [Read, Idempotent, Write] {
            assert_eq!(
                decide(None, 2, effect),
                fresh,
                "a key the ledger lacks runs"
            );
        }
        assert_eq!(OutcomeUnknown.mode(), ToolMode::OutcomeUnknown);
        assert_eq!(again.mode(), ToolMode::ReExecuted);
        assert_eq!(fresh.mode(), ToolMode::Executed);
        assert_eq!(replay_ok.mode(), ToolMode::Replayed);
    }

    #[test]
    fn keys_ignore_argument_order_and_differ_by_occurrence() {
        let t = ThreadId::new_v7();
        let a = key(t, 1, "file_write", &json!({"path": "a", "content": "x"}), 0);
        let b = key(
            t,
            1,
            "file_write",
            &serde_json::from_str(r#"{"content":"x","path":"a"}"#).unwrap(),
            0,
        );
        assert_eq!(a, b);
        assert_eq!(a.len(), 64);
        assert_ne!(
            a,
            key(t, 1, "file_write", &json!({"path": "a", "content": "x"}), 1)
        );
        assert_ne!(
            a,
            key(t, 2, "file_write", &json!({"path": "a", "content": "x"}), 0)
        );
        assert_ne!(
            a,
            key(
                ThreadId::new_v7(),
                1,
                "file_write",
                &json!({"path": "a", "content": "x"}),
                0
            )
        );
    }
}
