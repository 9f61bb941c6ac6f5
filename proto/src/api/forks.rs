//! Going back in a conversation (issue 41): the turns a thread has ended
//! (`GET /v1/threads/{id}/turns`), a fork at one of them (`POST /v1/threads/{id}/fork`), a rewind
//! to one (`POST /v1/threads/{id}/rewind`, carried out by the runner:
//! `GET /v1/runners/threads/{id}/turns/{n}`), the files a turn changed
//! (`GET /v1/threads/{id}/turns/{n}/diff`), and the content-addressed objects that hold a
//! workspace's snapshots (`/v1/runners/threads/{id}/objects/…`).
//!
//! A turn is named by its `turn_seq`, which only grows in a thread: a rewind does not reuse the
//! numbers of the turns it leaves, so a ledger key (which includes the turn) never names two
//! different calls.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::int;
use super::*;
use crate::effects::Effect;
use crate::ids::ThreadId;
use crate::message::Message;
use crate::snapshots::{FileChange, ObjectId, SnapshotRef};
#[cfg(feature = "openapi")]
use utoipa::ToSchema;

/// `POST /v1/threads/{id}/fork`: a new thread whose history is this one's up to the end of turn
/// `at_turn` (shared in the store, not copied), served as a session of the same agent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ForkRequest {
    /// The turn whose end the fork starts from (it must have ended).
    #[serde(deserialize_with = "int::stored")]
    #[cfg_attr(
        feature = "openapi",
        schema(minimum = 1, maximum = 9223372036854775807_i64)
    )]
    pub at_turn: u64,
    /// The fork's session key (a session key's rules; a key the agent already uses is 409
    /// `key_reused`). Absent: `fork-` and the last 8 hex characters of the new thread's ID (the
    /// random part of a UUID v7).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 200))]
    pub session: Option<String>,
}

/// The answer to a fork.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ForkResponse {
    /// The new thread.
    #[cfg_attr(feature = "openapi", schema(value_type = uuid::Uuid))]
    pub thread_id: ThreadId,
    /// Its session key (`ninetrix invoke --session KEY`).
    pub session: String,
    /// Where it came from.
    pub forked_from: ForkOrigin,
    /// Messages in its history (the shared prefix, and the note about effects it does not undo
    /// when there are any).
    pub history_len: u64,
    /// The files its runner restores before its first turn (`None`: the turn has no snapshot, as
    /// for an agent with `execution.snapshots: false`; the fork starts with an empty workspace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<SnapshotRef>,
    /// Effects of the parent after the fork point that the fork does not undo (also in the
    /// fork's history as a system note).
    #[serde(default)]
    pub undone: Vec<UndoneEffect>,
}

/// Where a forked thread came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ForkOrigin {
    /// The thread it was forked from.
    #[cfg_attr(feature = "openapi", schema(value_type = uuid::Uuid))]
    pub parent: ThreadId,
    /// The turn of the parent whose end it starts from.
    pub at_turn: u64,
}

/// `POST /v1/threads/{id}/rewind`: the same thread goes back to the end of turn `to_turn` —
/// its conversation and, when the turn has a snapshot, its workspace. Queued in the inbox as a
/// `rewind` control and carried out by the runner between turns; refused (409 `busy`) while a
/// turn runs or messages wait.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RewindRequest {
    /// The turn to go back to: any turn the thread ended, on its current branch or on one a
    /// rewind left (a rewind of a rewind).
    #[serde(deserialize_with = "int::stored")]
    #[cfg_attr(
        feature = "openapi",
        schema(minimum = 1, maximum = 9223372036854775807_i64)
    )]
    pub to_turn: u64,
    /// A key that makes retries safe (1 to 128 characters), as for a message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 128))]
    pub dedupe_key: Option<String>,
}

/// The answer to a rewind: queued for the runner.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct RewindQueued {
    /// The inbox seq of the `rewind` control.
    pub seq: u64,
    /// True when the dedupe key was seen before and nothing new was queued.
    pub duplicate: bool,
    /// The turns started so far (the next turn after the rewind is the one after this).
    pub from_turn: u64,
    /// The turn it goes back to.
    pub to_turn: u64,
    /// The files the runner restores (`None`: the turn has no snapshot; the workspace is left as
    /// it is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<SnapshotRef>,
}

/// An effect that happened after the point a fork or a rewind goes back to, and that going back
/// does not undo: anything that reached outside the workspace (a `write` or `idempotent` call —
/// `bash`, an MCP tool, a job, a handoff) — the workspace's own files are restored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct UndoneEffect {
    /// The turn it ran in.
    pub turn_seq: u64,
    /// The tool.
    pub tool: String,
    /// Its effect class.
    pub effect: Effect,
    /// Where it stands: `completed`, `failed`, or `intent` (its outcome is unknown).
    pub status: ToolCallStatus,
    /// The start of its arguments (at most 120 characters).
    pub args: String,
}

/// One ended turn, as `GET /v1/threads/{id}/turns` lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct TurnSummary {
    /// The turn.
    pub turn_seq: u64,
    /// The thread that ran it: this one, or (for a fork's shared turns) an ancestor.
    #[cfg_attr(feature = "openapi", schema(value_type = uuid::Uuid))]
    pub thread_id: ThreadId,
    /// The version that ended it (in `thread_id`).
    pub version: u64,
    /// Messages in the history at its end.
    pub history_len: u64,
    /// Whether its end is part of the current history (false: a rewind left it on a branch).
    pub live: bool,
    /// The snapshot of the workspace at its end, while kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<SnapshotRef>,
    /// Whether its snapshot was dropped (`execution.snapshots.keep_turns`).
    #[serde(default)]
    pub snapshot_dropped: bool,
    /// Why it has no snapshot although its agent takes them (past `execution.snapshots`'
    /// limits, a file that could not be read): its files cannot be restored, so a fork or a
    /// rewind to it is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_skipped: Option<String>,
    /// When it ended.
    pub ended_at: DateTime<Utc>,
}

/// `GET /v1/threads/{id}/turns`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct TurnList {
    /// Every ended turn, oldest first (a fork's shared turns included).
    pub turns: Vec<TurnSummary>,
    /// Where the thread came from, for a fork.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<ForkOrigin>,
    /// The threads forked from this one.
    #[serde(default)]
    pub forks: Vec<ForkChild>,
}

/// A thread forked from another.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ForkChild {
    /// The fork.
    #[cfg_attr(feature = "openapi", schema(value_type = uuid::Uuid))]
    pub thread_id: ThreadId,
    /// The parent's turn it starts from.
    pub at_turn: u64,
    /// Its session key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
}

/// `GET /v1/runners/threads/{id}/turns/{n}`: what a rewind to turn `n` goes back to.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct TurnPoint {
    /// The turn.
    pub turn_seq: u64,
    /// The history at its end.
    pub history: Vec<Message>,
    /// The state at its end.
    pub state: CheckpointState,
    /// The snapshot of the workspace at its end (`None`: none was taken).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<SnapshotRef>,
    /// Whether its snapshot was dropped (a rewind then refuses: fail-closed).
    #[serde(default)]
    pub snapshot_dropped: bool,
    /// Why it has no snapshot although its agent takes them (a rewind then refuses:
    /// fail-closed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_skipped: Option<String>,
    /// Effects of this thread's later turns that going back does not undo.
    #[serde(default)]
    pub undone: Vec<UndoneEffect>,
}

/// `GET /v1/threads/{id}/turns/{n}/diff`: the files turn `n` changed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct TurnDiff {
    /// The turn.
    pub turn_seq: u64,
    /// The turn compared against: the one before it on the same history that has a snapshot
    /// (`None`: none; every file counts as added).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub against: Option<u64>,
    /// The turn's snapshot.
    pub snapshot: SnapshotRef,
    /// The files that differ, in path order (at most 10,000).
    pub changes: Vec<FileChange>,
    /// Whether `changes` was cut at 10,000.
    #[serde(default)]
    pub truncated: bool,
}

/// What the commit that ends a turn tells the API about it (`CommitRequest.turn_end`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TurnEnd {
    /// The turn that ends (the state's `turn_seq`).
    #[serde(deserialize_with = "int::stored")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
    pub turn_seq: u64,
    /// The workspace's snapshot at its end: its root and every object below must be stored
    /// (409 `missing_objects` otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<SnapshotRef>,
    /// Why there is no snapshot although the agent takes them (a limit passed, a file that
    /// could not be read; at most 1,000 characters): a fork or a rewind to this turn is then
    /// refused, since its files cannot be restored. Absent with no snapshot: the agent takes
    /// none (`execution.snapshots: false`), and going back leaves the files as they are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(max_length = 1000))]
    pub snapshot_skipped: Option<String>,
    /// Keep the snapshots of this many turns (this one included) and drop older ones
    /// (`execution.snapshots.keep_turns`). Absent: keep all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 1000000))]
    pub keep_turns: Option<u32>,
}

/// `POST /v1/runners/threads/{id}/objects/missing`: which of these objects the store lacks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct MissingObjectsRequest {
    /// Object IDs (at most 10,000).
    #[cfg_attr(feature = "openapi", schema(max_items = 10000))]
    pub ids: Vec<ObjectId>,
}

/// The answer: the IDs asked about that are not stored, in the order asked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct MissingObjectsResponse {
    /// Not stored.
    pub missing: Vec<ObjectId>,
}

/// The builtin tools that only change files inside the workspace (`file_write` refuses paths
/// that leave it): a snapshot restore undoes them, so going back does not list them.
pub const WORKSPACE_ONLY_TOOLS: &[&str] = &["file_write"];

/// The most effects a note lists by name; the rest are counted.
pub const MAX_UNDONE_LISTED: usize = 50;

/// Whether a ledger record is an effect going back does not undo: anything but a `read`, and
/// not a workspace-only tool when the workspace's files are restored.
pub fn not_undone(record: &ToolCallRecord, files_restored: bool) -> bool {
    record.effect != Effect::Read
        && !(files_restored && WORKSPACE_ONLY_TOOLS.contains(&record.tool.as_str()))
}

/// The effects of `records` (a thread's ledger, oldest first) after turn `after` that going back
/// to its end does not undo (`files_restored`: the workspace is restored too) — what a fork's
/// note, a turn point and `ninetrix rewind`'s question list.
pub fn undone_after(
    records: &[ToolCallRecord],
    after: u64,
    files_restored: bool,
) -> Vec<UndoneEffect> {
    records
        .iter()
        .filter(|r| r.turn_seq > after && not_undone(r, files_restored))
        .map(UndoneEffect::of)
        .collect()
}

impl UndoneEffect {
    /// The record as a fork or a rewind reports it (arguments cut to 120 characters).
    pub fn of(record: &ToolCallRecord) -> UndoneEffect {
        let args = record.args.to_string();
        let args = match args.char_indices().nth(120) {
            Some((at, _)) => format!("{}…", &args[..at]),
            None => args,
        };
        UndoneEffect {
            turn_seq: record.turn_seq,
            tool: record.tool.clone(),
            effect: record.effect,
            status: record.status,
            args,
        }
    }
}

/// How a conversation went back, for [`undone_note`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GoneBack {
    /// A fork of `parent` at the end of turn `at_turn`.
    Fork {
        /// The thread forked from.
        parent: ThreadId,
        /// Its turn.
        at_turn: u64,
    },
    /// A rewind of this thread to the end of turn `to_turn`.
    Rewind {
        /// The turn gone back to.
        to_turn: u64,
    },
}

/// The system note the model reads after a fork or a rewind, naming the effects that happened
/// after the point gone back to and that going back did not undo (`None` when there are none:
/// nothing needs saying). `files_restored`: whether the workspace was restored too.
pub fn undone_note(how: GoneBack, files_restored: bool, undone: &[UndoneEffect]) -> Option<String> {
    if undone.is_empty() {
        return None;
    }
    let (what, after) = match how {
        GoneBack::Fork { parent, at_turn } => (
            format!(
                "This conversation is a fork of thread {parent} at the end of its turn {at_turn}."
            ),
            format!("After turn {at_turn}, the original conversation went on"),
        ),
        GoneBack::Rewind { to_turn } => (
            format!("This conversation was rewound to the end of turn {to_turn}."),
            format!("The turns after turn {to_turn} that were left behind"),
        ),
    };
    let files = if files_restored {
        " The workspace's files are as they were then."
    } else {
        ""
    };
    let mut lines = vec![format!(
        "{what}{files} {after} and made these changes outside the workspace, which were NOT \
         undone and still hold:"
    )];
    for u in undone.iter().take(MAX_UNDONE_LISTED) {
        let status = match u.status {
            ToolCallStatus::Completed => "done",
            ToolCallStatus::Failed => "failed",
            ToolCallStatus::Intent => "started; outcome unknown",
        };
        lines.push(format!(
            "- turn {}: {} {} ({status})",
            u.turn_seq, u.tool, u.args
        ));
    }
    if undone.len() > MAX_UNDONE_LISTED {
        lines.push(format!("- and {} more", undone.len() - MAX_UNDONE_LISTED));
    }
    Some(lines.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(tool: &str, effect: Effect, status: ToolCallStatus) -> ToolCallRecord {
        ToolCallRecord {
            key: "k".into(),
            turn_seq: 4,
            tool: tool.into(),
            args: serde_json::json!({"path": "x"}),
            effect,
            status,
            result: None,
            intent_epoch: 1,
            completed_epoch: None,
            created_at: chrono::DateTime::UNIX_EPOCH,
            completed_at: None,
        }
    }

    #[test]
    fn reads_and_restored_workspace_writes_are_not_listed() {
        let read = record("file_read", Effect::Read, ToolCallStatus::Completed);
        let file = record("file_write", Effect::Idempotent, ToolCallStatus::Completed);
        let shell = record("shell", Effect::Write, ToolCallStatus::Intent);
        assert!(!not_undone(&read, true));
        assert!(!not_undone(&file, true));
        assert!(not_undone(&file, false));
        assert!(not_undone(&shell, true));
    }

    #[test]
    fn going_back_lists_later_effects_outside_the_workspace() {
        let rec = |turn_seq, tool: &str, effect| ToolCallRecord {
            turn_seq,
            ..record(tool, effect, ToolCallStatus::Completed)
        };
        let records = [
            rec(2, "shell", Effect::Write),
            rec(3, "file_read", Effect::Read),
            rec(3, "file_write", Effect::Idempotent),
            rec(4, "shell", Effect::Write),
        ];
        let tools = |u: Vec<UndoneEffect>| {
            u.into_iter()
                .map(|u| (u.turn_seq, u.tool))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            tools(undone_after(&records, 2, true)),
            [(4, "shell".to_string())]
        );
        assert_eq!(
            tools(undone_after(&records, 2, false)),
            [(3, "file_write".to_string()), (4, "shell".to_string())]
        );
    }

    #[test]
    fn the_note_names_each_effect_and_says_nothing_when_there_is_none() {
        let how = GoneBack::Rewind { to_turn: 3 };
        assert_eq!(undone_note(how, true, &[]), None);
        let shell = UndoneEffect::of(&record("shell", Effect::Write, ToolCallStatus::Intent));
        let note = undone_note(how, true, &[shell]).unwrap();
        assert!(note.contains("rewound to the end of turn 3"), "{note}");
        assert!(note.contains("files are as they were"), "{note}");
        assert!(
            note.contains("- turn 4: shell {\"path\":\"x\"} (started; outcome unknown)"),
            "{note}"
        );
        let many: Vec<_> = (0..60)
            .map(|_| UndoneEffect::of(&record("shell", Effect::Write, ToolCallStatus::Completed)))
            .collect();
        let note = undone_note(how, false, &many).unwrap();
        assert!(note.ends_with("- and 10 more"), "{note}");
        assert!(!note.contains("as they were"));
    }
}
