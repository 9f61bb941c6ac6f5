//! Replays and evals (issue 42): a scratch thread that re-runs recorded turns against a
//! candidate agent (`POST /v1/threads/{id}/replays`), what one turn of a thread recorded
//! (`GET /v1/threads/{id}/turns/{n}/record`: its input, calls with their results, answer, cost and
//! latency — the tool oracle a replay answers from and what its report compares), and eval
//! suites: threads marked into a named suite (by the console or the API) and the last run of each
//! (`/v1/evals/…`).
//!
//! A replay thread lives in its own namespace: it has its source's pool and agent labels but no
//! replica and no session, so no runner of the pool serves it, no message, trigger or `invoke`
//! reaches it, and lists of sessions leave it out. Its history starts as its source's up to the
//! end of the live turn before the first replayed one (shared in the store, as a fork's is), and
//! its inbox holds the replayed turns' inputs. Nothing is ever written to the source thread.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::int;
use super::{ApprovalKind, ApprovalStatus, Usage};
use crate::effects::Effect;
use crate::ids::ThreadId;
use crate::message::Message;
use crate::snapshots::SnapshotRef;
#[cfg(feature = "openapi")]
use utoipa::ToSchema;

/// The longest candidate description a replay or an eval run keeps (characters).
pub const MAX_CANDIDATE_CHARS: usize = 200;

/// `POST /v1/threads/{id}/replays` (admin): make (or find again) the scratch thread that replays
/// turns `from_turn..=to_turn` of thread `id`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ReplayRequest {
    /// The first turn replayed (a turn the thread ended on its current branch, or the first one
    /// after it).
    #[serde(deserialize_with = "int::stored")]
    #[cfg_attr(
        feature = "openapi",
        schema(minimum = 1, maximum = 9223372036854775807_i64)
    )]
    pub from_turn: u64,
    /// The last turn replayed (at least `from_turn`).
    #[serde(deserialize_with = "int::stored")]
    #[cfg_attr(
        feature = "openapi",
        schema(minimum = 1, maximum = 9223372036854775807_i64)
    )]
    pub to_turn: u64,
    /// What makes a retry or a resumed replay find the same thread (1 to 128 characters): the
    /// same key on the same source answers the replay made before (`existing: true`). The CLI
    /// derives it from the source, the range and the candidate's digest.
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 128))]
    pub key: String,
    /// What the turns are replayed against, for people (at most 200 characters), e.g.
    /// `model gpt-5 · agentfile candidate.yaml`.
    #[cfg_attr(feature = "openapi", schema(max_length = 200))]
    pub candidate: String,
}

/// Where a replay thread came from (also on its [`super::ThreadSummary`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ReplayOrigin {
    /// The recorded thread.
    #[cfg_attr(feature = "openapi", schema(value_type = uuid::Uuid))]
    pub source: ThreadId,
    /// The first turn replayed.
    pub from_turn: u64,
    /// The last turn replayed.
    pub to_turn: u64,
    /// What they are replayed against.
    pub candidate: String,
}

/// The answer to a replay request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ReplayCreated {
    /// The replay's thread: claim it with a runner token minted for its pool and agent labels
    /// (no replica, no session).
    #[cfg_attr(feature = "openapi", schema(value_type = uuid::Uuid))]
    pub replay: ThreadId,
    /// What it replays.
    pub origin: ReplayOrigin,
    /// The recorded turns replayed, in order: the turns of the range the source ended on its
    /// current branch (a turn a rewind left is not replayed). The replay's inbox holds their
    /// inputs in this order, one message (one turn) each.
    pub turns: Vec<u64>,
    /// True when the key named a replay made before: nothing new was made (it is resumed).
    pub existing: bool,
    /// The source's turn whose end the replay starts from (0: the beginning). The replay's own
    /// turns are numbered after it; its turn list also shows this one (its row holds the
    /// replay's reference on the snapshot), which its runner did not run.
    pub base_turn: u64,
    /// Messages in its history before its first turn (shared with the source, not copied).
    pub history_len: u64,
    /// The files its runner restores before its first turn (the end of the live turn before
    /// `from_turn`); `None`: that turn has no snapshot, or the replay starts at the beginning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<SnapshotRef>,
}

/// What a person decided about a call, as recorded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct PersonDecision {
    /// An approval or a question.
    pub kind: ApprovalKind,
    /// What they decided (or `expired`, `cancelled`).
    pub status: ApprovalStatus,
    /// Who decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

/// One tool call of a recorded turn, with the result the model got.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct RecordedCall {
    /// The tool, by the model's name.
    pub name: String,
    /// Its arguments.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub args: serde_json::Value,
    /// The result the model got (empty when the turn ended before the call was answered).
    pub result: String,
    /// Whether that result was an error.
    pub is_error: bool,
    /// The call's effect class as this thread's ledger recorded it. `None`: the ledger has no
    /// record of it — it did not run in this thread (an unknown tool, a call a person refused,
    /// a replay's answer from the recording).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<Effect>,
    /// A person's decision about it: an approval of a gated call, an `ask_human` answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub person: Option<PersonDecision>,
}

/// `GET /v1/threads/{id}/turns/{n}/record` (admin): one turn of a thread as it happened.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct RecordedTurn {
    /// The turn.
    pub turn_seq: u64,
    /// Whether it is on the thread's current branch (false: a rewind left it).
    pub live: bool,
    /// The message that started it (the input a replay sends again).
    pub input: String,
    /// The turn's messages, from its input to its end.
    pub messages: Vec<Message>,
    /// Its tool calls in order, each with its result.
    pub calls: Vec<RecordedCall>,
    /// Its final answer (the last assistant text; empty when it has none).
    pub answer: String,
    /// Whether it ended well.
    pub ok: bool,
    /// What it spent (tokens and US dollars).
    pub usage: Usage,
    /// From taking its input to its final commit, in milliseconds (`None`: not recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<u64>,
    /// The model that answered its last round, when the trace has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// `POST /v1/evals/{suite}/members` (admin; the console's "Add to eval suite"): a thread and a
/// range of its turns marked into a suite (made when it is first named). Marking the same thread
/// and range again changes nothing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct EvalMemberRequest {
    /// The thread.
    #[cfg_attr(feature = "openapi", schema(value_type = uuid::Uuid))]
    pub thread: ThreadId,
    /// The first turn (absent: its first).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "int::stored_opt"
    )]
    #[cfg_attr(
        feature = "openapi",
        schema(minimum = 1, maximum = 9223372036854775807_i64)
    )]
    pub from_turn: Option<u64>,
    /// The last turn (absent: its last, when the eval runs).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "int::stored_opt"
    )]
    #[cfg_attr(
        feature = "openapi",
        schema(minimum = 1, maximum = 9223372036854775807_i64)
    )]
    pub to_turn: Option<u64>,
}

/// One thread marked into a suite.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct EvalMember {
    /// Its ID in the suite (`DELETE /v1/evals/{suite}/members/{id}`).
    pub id: u64,
    /// The thread.
    #[cfg_attr(feature = "openapi", schema(value_type = uuid::Uuid))]
    pub thread: ThreadId,
    /// Its pool, agent and session labels.
    pub labels: super::ThreadLabels,
    /// The first turn (absent: its first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_turn: Option<u64>,
    /// The last turn (absent: its last).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_turn: Option<u64>,
    /// When it was marked.
    pub added_at: DateTime<Utc>,
}

/// How one case of an eval run came out (one replayed thread).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct EvalCaseResult {
    /// The recorded thread.
    #[cfg_attr(feature = "openapi", schema(value_type = uuid::Uuid))]
    pub thread: ThreadId,
    /// Who it is, for people (`agent`, `agent/session`, `agent-2`).
    #[cfg_attr(feature = "openapi", schema(max_length = 300))]
    pub name: String,
    /// The replay's thread.
    #[cfg_attr(feature = "openapi", schema(value_type = uuid::Uuid))]
    pub replay: ThreadId,
    /// Turns replayed.
    #[serde(deserialize_with = "int::stored")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
    pub turns: u64,
    /// Turns whose calls or answer differ from the recording.
    #[serde(deserialize_with = "int::stored")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
    pub divergent_turns: u64,
    /// The checks (`expect:`) that failed, each one line (at most 50 kept).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_items = 50))]
    pub failed_checks: Vec<String>,
    /// What the replay spent, US dollars.
    #[serde(default)]
    pub cost_usd: f64,
    /// Whether the case passed (no failed check and within the run's thresholds).
    pub passed: bool,
}

/// `POST /v1/evals/{suite}/runs` (admin, by `ninetrix eval`): one run of a suite against a
/// candidate. The same key stores nothing new.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct EvalRunRequest {
    /// Makes retries safe (1 to 128 characters).
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 128))]
    pub key: String,
    /// What the suite ran against (at most 200 characters).
    #[cfg_attr(feature = "openapi", schema(max_length = 200))]
    pub candidate: String,
    /// One result per case (at most 1,000).
    #[cfg_attr(feature = "openapi", schema(max_items = 1000))]
    pub cases: Vec<EvalCaseResult>,
    /// Whether the run passed (every case passed).
    pub passed: bool,
}

/// A stored eval run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct EvalRun {
    /// Its ID.
    pub id: u64,
    /// The suite.
    pub suite: String,
    /// What it ran against.
    pub candidate: String,
    /// One result per case.
    pub cases: Vec<EvalCaseResult>,
    /// Whether every case passed.
    pub passed: bool,
    /// When it was stored.
    pub created_at: DateTime<Utc>,
}

/// The answer to an eval run's POST.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct EvalRunStored {
    /// The run.
    pub id: u64,
    /// True when the key was seen before and nothing new was stored.
    pub duplicate: bool,
}

/// `GET /v1/evals/{suite}`: the threads marked into a suite and its last run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct EvalSuite {
    /// Its name.
    pub name: String,
    /// Its members, in the order they were marked.
    pub members: Vec<EvalMember>,
    /// Its last run, if it has run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run: Option<EvalRun>,
}

/// One suite in `GET /v1/evals`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct EvalSuiteSummary {
    /// Its name.
    pub name: String,
    /// How many threads are marked into it.
    pub members: u64,
    /// Its last run: when, and whether it passed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run_at: Option<DateTime<Utc>>,
    /// Whether its last run passed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run_passed: Option<bool>,
}

/// `GET /v1/evals`: every suite, by name.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct EvalSuiteList {
    /// The suites.
    pub suites: Vec<EvalSuiteSummary>,
}
