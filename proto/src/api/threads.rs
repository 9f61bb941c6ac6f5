//! Threads and their checkpoints: a thread's status, labels and state, claims, checkpoint
//! writes, listings and the version chain (`/v1/threads`, `/v1/runners/threads/{id}/claim`,
//! `…/checkpoints`).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::int;
use super::*;
use crate::ids::ThreadId;
use crate::message::Message;
#[cfg(feature = "openapi")]
use utoipa::ToSchema;

/// Where a thread sits in its life.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ThreadStatus {
    /// Waiting for work.
    #[default]
    Idle,
    /// In the middle of a turn.
    InTurn,
    /// Waiting on something outside (e.g. an approval).
    Waiting,
    /// Finished for good (a batch job that succeeded).
    Done,
    /// Failed for good.
    Failed,
}

impl ThreadStatus {
    /// The name used in the API and in storage.
    pub fn as_str(self) -> &'static str {
        match self {
            ThreadStatus::Idle => "idle",
            ThreadStatus::InTurn => "in_turn",
            ThreadStatus::Waiting => "waiting",
            ThreadStatus::Done => "done",
            ThreadStatus::Failed => "failed",
        }
    }

    /// Parses the stored name.
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "idle" => ThreadStatus::Idle,
            "in_turn" => ThreadStatus::InTurn,
            "waiting" => ThreadStatus::Waiting,
            "done" => ThreadStatus::Done,
            "failed" => ThreadStatus::Failed,
            _ => return None,
        })
    }
}

/// Tokens and money spent so far in the current run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Usage {
    /// Input tokens.
    #[serde(default, deserialize_with = "int::stored")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
    pub input_tokens: u64,
    /// Output tokens.
    #[serde(default, deserialize_with = "int::stored")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
    pub output_tokens: u64,
    /// US dollars.
    #[serde(default)]
    pub cost_usd: f64,
}

/// The small state written with every checkpoint (docs/design.md §6.1).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CheckpointState {
    /// Turns started so far.
    #[serde(deserialize_with = "int::stored")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
    pub turn_seq: u64,
    /// The history length right after the current turn's input: where a repair cuts back to.
    #[serde(deserialize_with = "int::stored")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
    pub turn_start_history_len: u64,
    /// Where the thread is.
    pub status: ThreadStatus,
    /// The last inbox seq applied to the history.
    #[serde(deserialize_with = "int::stored")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
    pub inbox_cursor: u64,
    /// Spending in the current run (a delegated turn's includes what its own collaborators
    /// spent).
    #[serde(default)]
    pub usage: Usage,
    /// Where the current turn's input came from when another agent handed it over (the turn
    /// replies to that handoff when it ends).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff: Option<HandoffOrigin>,
    /// The runner attempt working on the current turn (written when a turn starts or resumes):
    /// a runner that resumes the turn after a crash reports the interrupted attempt's span and
    /// links its own to it. `None` between turns, and in states written by older runners.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<TurnAttempt>,
    /// How full the model's context is (the last round's input against the window), and how
    /// many compactions the thread has had. `None` before the first model round, and in states
    /// written by older runners.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<crate::context::ContextUse>,
    /// Inbox seqs after `inbox_cursor` already taken, out of order: a steer applied to a turn,
    /// a cancel carried out, an interrupt that started its turn, each while messages queued
    /// ahead of it waited. The cursor moves over them once the messages before them are taken,
    /// so this stays short; the runner takes the next message after the cursor that is not here.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "int::stored_vec"
    )]
    #[cfg_attr(feature = "openapi", schema(schema_with = int::stored_vec_schema))]
    pub inbox_taken: Vec<u64>,
    /// The inbox seq of the message the current (or last) turn answers. `None` in states
    /// written by older runners, whose turns always answered `inbox_cursor`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "int::stored_opt"
    )]
    #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
    pub turn_message: Option<u64>,
    /// The interrupt that ended the last turn: the next turn's input, taken before the
    /// messages queued ahead of it (stored with the interrupted turn's end, so a restarted
    /// runner starts the same turn next).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "int::stored_opt"
    )]
    #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
    pub next_message: Option<u64>,
    /// The snapshot the workspace must hold before the next turn runs, set by the commit of a
    /// rewind (or a fork's first version) and cleared when a turn starts. A runner that boots
    /// and finds its workspace not marked with it (a crash during the restore) restores it
    /// again first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<crate::snapshots::SnapshotRef>,
}

impl CheckpointState {
    /// The state of a thread that starts idle at the end of turn `turn_seq` with `history_len`
    /// messages, its inbox untouched: the first version of a fork or a replay (its next turn is
    /// `turn_seq + 1`; its runner restores `workspace` before it).
    pub fn idle_at(
        turn_seq: u64,
        history_len: u64,
        context: Option<crate::context::ContextUse>,
        workspace: Option<crate::snapshots::SnapshotRef>,
    ) -> Self {
        Self {
            turn_seq,
            turn_start_history_len: history_len,
            status: ThreadStatus::Idle,
            context,
            workspace,
            ..Self::default()
        }
    }

    /// Marks inbox message `seq` taken: the cursor moves over every taken seq that follows it
    /// without a gap; a seq past a gap (an urgent message taken before those queued ahead of
    /// it) is kept in `inbox_taken` until the gap is filled.
    pub fn take(&mut self, seq: u64) {
        if seq <= self.inbox_cursor || self.inbox_taken.contains(&seq) {
            return;
        }
        self.inbox_taken.push(seq);
        self.inbox_taken.sort_unstable();
        while self.inbox_taken.first() == Some(&(self.inbox_cursor + 1)) {
            self.inbox_cursor += 1;
            self.inbox_taken.remove(0);
        }
    }

    /// Gives inbox message `seq` back, as if it had never been taken (a steer whose turn ended
    /// before anything of it was stored: it is then the next turn's message).
    pub fn untake(&mut self, seq: u64) {
        if let Some(i) = self.inbox_taken.iter().position(|&s| s == seq) {
            self.inbox_taken.remove(i);
        } else if seq <= self.inbox_cursor && seq > 0 {
            let after: Vec<u64> = (seq + 1..=self.inbox_cursor).collect();
            self.inbox_cursor = seq - 1;
            self.inbox_taken.splice(0..0, after);
        }
    }

    /// Whether inbox message `seq` has been taken.
    pub fn taken(&self, seq: u64) -> bool {
        seq <= self.inbox_cursor || self.inbox_taken.contains(&seq)
    }

    /// The inbox seq the current (or last) turn answers.
    pub fn turn_input(&self) -> u64 {
        self.turn_message.unwrap_or(self.inbox_cursor)
    }
}

/// One runner's attempt at a turn: the epoch that worked on it and when it took the turn up.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TurnAttempt {
    /// The epoch of the runner that started or resumed the turn.
    #[serde(deserialize_with = "int::stored")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
    pub epoch: u64,
    /// When it started or resumed the turn (the runner's clock).
    pub started_at: DateTime<Utc>,
    /// The boot count (the API's count of claims) of the runner that *started* the turn, kept by
    /// every attempt that resumes it: how many restarts the turn has been through is the current
    /// boot count minus this. 0 in states written by older runners (nothing is counted then).
    #[serde(default, deserialize_with = "int::stored")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
    pub turn_boot: u64,
}

/// Identity of the agent replica behind a thread, for listing and filtering.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ThreadLabels {
    /// The pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// The agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The replica number (from 1).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "int::u32_opt"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<u64>, maximum = 4294967295_i64))]
    pub replica: Option<u32>,
    /// The session key, for a session's thread (`POST /v1/sessions` sets it when it creates the
    /// thread; it never changes after). A claim that names one must name the thread's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(
            min_length = 1,
            max_length = 200,
            pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F\\u061C\\u200E\\u200F\\u2028-\\u202E\\u2066-\\u2069]+$"
        )
    )]
    pub session: Option<String>,
}

/// `POST /v1/runners/threads/{id}/claim`: the thread's labels, all optional, and what the
/// claiming runner's agent does with a message sent while it is busy. Labels are fixed when the
/// thread is created; a claim only restates them (409 `labels_fixed` for any other value,
/// `session_mismatch` for another session), it never changes them. The policy is the agent's
/// as this runner knows it: each claim replaces it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ClaimRequest {
    /// The pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// The agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The replica number (from 1).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "int::u32_opt"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<u64>, maximum = 4294967295_i64))]
    pub replica: Option<u32>,
    /// The session key, for a session's thread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(
            min_length = 1,
            max_length = 200,
            pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F\\u061C\\u200E\\u200F\\u2028-\\u202E\\u2066-\\u2069]+$"
        )
    )]
    pub session: Option<String>,
    /// The agent's `execution.on_message_while_busy`: the mode of a message sent without one.
    /// Absent: unchanged (`queue` for a thread never claimed with one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_message_while_busy: Option<MessageMode>,
}

impl ClaimRequest {
    /// A claim restating `labels`, stating no policy.
    pub fn of(labels: ThreadLabels) -> Self {
        let ThreadLabels {
            pool,
            agent,
            replica,
            session,
        } = labels;
        Self {
            pool,
            agent,
            replica,
            session,
            on_message_while_busy: None,
        }
    }

    /// The labels it restates.
    pub fn labels(&self) -> ThreadLabels {
        ThreadLabels {
            pool: self.pool.clone(),
            agent: self.agent.clone(),
            replica: self.replica,
            session: self.session.clone(),
        }
    }
}

/// The answer to a claim: the runner's epoch for every later write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ClaimResponse {
    /// The new epoch (previous + 1).
    pub epoch: u64,
    /// How many times the thread has been claimed, this one included.
    pub boot_count: u64,
}

/// The assembled state of a thread at its latest checkpoint.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ThreadState {
    /// The thread.
    #[cfg_attr(feature = "openapi", schema(value_type = uuid::Uuid))]
    pub thread_id: ThreadId,
    /// The latest version.
    pub version: u64,
    /// The thread's current epoch.
    pub epoch: u64,
    /// The small state of the latest version.
    pub state: CheckpointState,
    /// The full history.
    pub history: Vec<Message>,
}

/// `POST /v1/runners/threads/{id}/checkpoints`: append one version.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CheckpointRequest {
    /// The writer's epoch (from its claim). Past the stored range it can only be stale (409 `fenced`).
    #[serde(deserialize_with = "int::any")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
    pub epoch: u64,
    /// The version this one follows (0 for the first).
    #[serde(deserialize_with = "int::stored")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
    pub parent_version: u64,
    /// Cut the history to this many messages before appending (history repair).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "int::stored_opt"
    )]
    #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
    pub truncate_to: Option<u64>,
    /// Messages to append (at most 1,000).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_items = 1000))]
    pub append: Vec<Message>,
    /// The small state after this version.
    pub state: CheckpointState,
}

/// The answer to a checkpoint write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct CheckpointCreated {
    /// The new version.
    pub version: u64,
    /// The history length after it.
    pub history_len: u64,
}

/// A thread in listings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ThreadSummary {
    /// The thread.
    #[cfg_attr(feature = "openapi", schema(value_type = uuid::Uuid))]
    pub thread_id: ThreadId,
    /// Who it belongs to.
    #[serde(flatten)]
    pub labels: ThreadLabels,
    /// Where it stands (of its latest checkpoint).
    pub status: ThreadStatus,
    /// The current epoch.
    pub epoch: u64,
    /// Claims so far.
    pub boot_count: u64,
    /// The latest version (0: none yet).
    pub version: u64,
    /// Messages in the history.
    pub history_len: u64,
    /// The last inbox seq.
    pub inbox_seq: u64,
    /// The last event seq.
    pub event_seq: u64,
    /// When the thread was created.
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
    /// How full the model's context was at the latest version (its `state.context`): the last
    /// round's input tokens, the window, the compactions so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<crate::context::ContextUse>,
    /// US dollars its model calls cost, ever: the sum of what its runners reported when they
    /// released their model leases (0 when none did: an agent without limits or budgets, or an
    /// older runner).
    #[serde(default)]
    pub spent_usd: f64,
    /// Where it was forked from, for a fork (`POST /v1/threads/{id}/fork`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<ForkOrigin>,
    /// What it replays, for a replay's scratch thread (`POST /v1/threads/{id}/replays`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_of: Option<super::ReplayOrigin>,
}

/// One version in a thread's chain.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct VersionSummary {
    /// The version.
    pub version: u64,
    /// The one it follows.
    pub parent_version: u64,
    /// The epoch that wrote it.
    pub epoch: u64,
    /// The truncation it made, if any.
    pub truncate_to: Option<u64>,
    /// Messages it appended.
    pub appended: u64,
    /// The history length after it.
    pub history_len: u64,
    /// The small state after it.
    pub state: CheckpointState,
    /// When it was written.
    pub created_at: DateTime<Utc>,
}

/// One version with the history as of that version.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct VersionDetail {
    /// The version's summary.
    #[serde(flatten)]
    pub summary: VersionSummary,
    /// The history as of this version.
    pub history: Vec<Message>,
}

#[cfg(test)]
mod inbox_tests {
    use super::CheckpointState;

    #[test]
    fn taking_out_of_order_keeps_the_gap_until_it_is_filled() {
        let mut s = CheckpointState {
            inbox_cursor: 4,
            ..Default::default()
        };
        s.take(7);
        assert_eq!((s.inbox_cursor, s.inbox_taken.clone()), (4, vec![7]));
        assert!(s.taken(7) && !s.taken(5) && !s.taken(6) && s.taken(4));
        s.take(6);
        assert_eq!((s.inbox_cursor, s.inbox_taken.clone()), (4, vec![6, 7]));
        s.take(5);
        assert_eq!(
            (s.inbox_cursor, s.inbox_taken.clone()),
            (7, vec![]),
            "the cursor moves over every taken seq once the gap is filled"
        );
        s.take(7);
        s.take(3);
        assert_eq!(
            (s.inbox_cursor, s.inbox_taken.len()),
            (7, 0),
            "taking twice is a no-op"
        );
        s.take(8);
        assert_eq!(
            (s.inbox_cursor, s.inbox_taken.len()),
            (8, 0),
            "in order: the cursor"
        );
    }

    #[test]
    fn a_turn_answers_its_message_or_the_cursor_of_an_older_runner() {
        let mut s = CheckpointState {
            inbox_cursor: 4,
            ..Default::default()
        };
        assert_eq!(s.turn_input(), 4);
        s.turn_message = Some(9);
        assert_eq!(s.turn_input(), 9);
    }
}
