//! Trace events: what a runner reports about a thread's life, as one typed enum.
//!
//! The runner builds a [`TraceEvent`], the API stores it as opaque `{type, data}` JSON (the wire
//! shape of [`NewEvent`] and [`Event`], unchanged since the first runner, so old databases still
//! read), and every reader — the runner's own log lines, `ninetrix trace`, `invoke`, `up`'s
//! readiness wait — turns it back into a [`TraceEvent`] and matches it with no catch-all arm. A
//! `type` this build does not know (a newer runner) or data it cannot read comes back as
//! [`Decoded::Unknown`], which readers show as a plain line: never a panic, never silence.
//!
//! Each event's time is the runner's own clock, stored as `data.at` beside the event's fields
//! (batches reach the API late); [`Event::at`] reads it.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::api::{ApprovalKind, ApprovalStatus, Event, HandoffStatus, NewEvent, Usage};
pub use crate::boots::Boot;
use crate::effects::Effect;
use crate::effects::EffectSource;
use crate::ids::{ApprovalId, ThreadId};
use crate::message::Role;

/// Everything a runner reports. The serialised form is `{"type": "<snake_case name>", "data":
/// {...}}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "data", rename_all = "snake_case")]
pub enum TraceEvent {
    /// The runner claimed the thread (a new epoch) and restored it.
    Boot(Boot),
    /// The runner claimed its thread, restored it and serves it: an interrupted turn, if any, is
    /// being resumed (`resuming`), new messages are taken after it.
    Ready(Ready),
    /// Boot cut an inconsistent history back (docs/design.md §6.4).
    Repair(Repair),
    /// Boot kept an interrupted assistant message and will run its remaining calls
    /// (`resume: complete`).
    Resume(Resume),
    /// A turn began with an inbox message (or a batch job's task).
    TurnStarted(TurnStarted),
    /// An interrupted turn is being continued after a restart.
    TurnResumed(TurnResumed),
    /// The model answered.
    LlmCall(LlmCall),
    /// A model call failed in a way worth retrying; the runner waits and tries again.
    LlmRetry(LlmRetry),
    /// A dependency (the checkpoint API or the model) answered again after an outage; the
    /// runner waited it out without exiting.
    Outage(Outage),
    /// A tool call was executed, re-executed, or answered "outcome unknown".
    ToolCall(ToolCall),
    /// A tool call's recorded outcome was replayed from the ledger instead of running it again.
    ToolReplayed(ToolCall),
    /// The model called a tool the agent does not have; it was answered with an error.
    UnknownTool(UnknownTool),
    /// An MCP server's tools were read (at boot, after it came back, or after it said its list
    /// changed): each tool the agent may call with its effect class and where that came from,
    /// and the tools the agentfile names that the server does not offer.
    McpTools(McpTools),
    /// An MCP server could not be reached or broke; its tools answer with an error naming it
    /// until it is back (the runner retries with backoff).
    McpServerDown(McpServerDown),
    /// An MCP server that was down answered again (a connection attempt at a turn boundary or
    /// before a call succeeded); its tools work again.
    McpServerUp(McpServerUp),
    /// A checkpoint version was written.
    Checkpoint(Checkpoint),
    /// The history was compacted: the model sees a summary (or stubs) instead of older turns
    /// (stored with the commit that records the compaction).
    Compacted(Compacted),
    /// A compaction was due but could not make the input smaller (nothing before the turns it
    /// keeps, or the summary could not be written); what happened instead.
    CompactionSkipped(CompactionSkipped),
    /// A turn ended (successfully or not) and its reply is in the history.
    TurnCompleted(TurnCompleted),
    /// A message sent with mode `steer` joined the running turn as a user message (stored with
    /// the commit that stores it in the history, before the model round that reads it).
    Steered(Steered),
    /// The runner took an interrupt or a cancel for the running turn: the model call in flight
    /// is abandoned, running tools get `execution.interrupt_grace` to finish, and the turn ends
    /// with `turn_completed` naming what stopped it.
    TurnStopping(TurnStopping),
    /// A cancel found no turn running (the turn it was sent for had ended first): nothing was
    /// stopped (stored with the commit that moves the inbox past it).
    CancelMissed(CancelMissed),
    /// A `job_start` call's job runs (its container made and started by the pool's job broker).
    JobStarted(JobEvent),
    /// A job this thread started was seen ended (by a job tool, or at a boot).
    JobFinished(JobEvent),
    /// A runner booted and found a job of its thread (running, or ended while it was down), or
    /// resolved a `job_start` a crash had left without an outcome to the job it had made.
    JobReattached(JobEvent),
    /// A budget has no room: the turn spent more than `governance.max_budget_per_run`, or a
    /// budget kept by the API (session, agent's day, pool's day) is spent. The turn was stopped
    /// (or, with `on_budget_exceeded: ask_human`, asks a person to raise it).
    BudgetExceeded(BudgetExceeded),
    /// A model call was answered by a fallback model (`runtime.fallback`) after the models
    /// before it failed.
    ModelFallback(ModelFallback),
    /// A model call waited for a slot of its pool-wide limiter (`runtime.limits`) for more than
    /// a second before it started.
    ModelWaited(ModelWaited),
    /// The turn used `execution.max_turns` model rounds without a final answer; it was stopped.
    MaxTurnsReached(MaxTurnsReached),
    /// A call waits for a person: an approval of a gated call or an `ask_human` question was
    /// stored with the model response that made the call.
    ApprovalRequested(ApprovalRequested),
    /// A person decided a request (stored by the API with the decision, at the thread's epoch).
    ApprovalDecided(ApprovalDecided),
    /// A request was not decided in time: it counts as a rejection; the call did not run.
    ApprovalExpired(ApprovalExpired),
    /// One delivery attempt of a request's notification to `human_approval.notify_url`.
    ApprovalNotified(ApprovalNotified),
    /// A call to a collaborator (`ask_<agent>`) filed its task in the collaborator's session for
    /// it (or, after a restart, found it filed and re-attached); the turn waits for the reply.
    HandoffSent(HandoffSent),
    /// A call to a collaborator has its answer: the reply, the collaborator's failure, or the
    /// end of the wait (`transfer_timeout`).
    HandoffSettled(HandoffSettled),
    /// A call to a collaborator was not made: the chain would be deeper than
    /// `execution.max_delegation_depth`.
    HandoffRefused(HandoffRefused),
    /// This turn's input is a task another agent handed over (the first event of a delegated
    /// turn).
    HandoffReceived(HandoffReceived),
    /// This turn's reply went back to the agent that handed the task over (stored with the step
    /// that ends the turn).
    HandoffReplied(HandoffReplied),
    /// This thread was forked from another at the end of one of its turns (stored by the API
    /// with the fork's first version).
    Forked(Forked),
    /// A thread was forked from this one (stored by the API in the parent's events).
    ForkCreated(ForkCreated),
    /// The thread went back to the end of an earlier turn (stored with the rewind's commit);
    /// the turns after it stay in the store on the branch it left.
    Rewound(Rewound),
    /// A rewind was not done, and nothing changed: its files could not be restored, or the
    /// turn cannot be gone back to.
    RewindFailed(RewindFailed),
    /// The workspace's snapshot at a turn's end (stored with the turn's last commit).
    SnapshotTaken(SnapshotTaken),
    /// A turn's end has no snapshot of the workspace: past `execution.snapshots`' limits, or a
    /// file could not be read. The turn itself ended normally.
    SnapshotSkipped(SnapshotSkipped),
    /// A runner made its workspace equal the snapshot its checkpoint names (a fork's first boot,
    /// or finishing a rewind a crash interrupted).
    WorkspaceRestored(WorkspaceRestored),
    /// This thread is a replay of another's recorded turns (stored by the API with the replay's
    /// first version).
    ReplayStarted(ReplayStarted),
    /// A replay answered a tool call from the recording, ran it live (a differing read, with
    /// live reads on), or did not run it.
    ReplayAnswered(ReplayAnswered),
    /// Something failed (the model for good, or the runner itself).
    Error(ErrorEvent),
}

/// `replay_started`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayStarted {
    /// The recorded thread.
    pub source: ThreadId,
    /// The first turn replayed.
    pub from_turn: u64,
    /// The last turn replayed.
    pub to_turn: u64,
    /// How many recorded turns are replayed (its inbox holds their inputs).
    pub turns: u64,
    /// What they are replayed against.
    pub candidate: String,
}

/// `replay_answered`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayAnswered {
    /// The tool, by the model's name.
    pub name: String,
    /// Its arguments (the start of them, secrets masked).
    pub args: String,
    /// How the replay answered it.
    pub verdict: crate::replay::ReplayVerdict,
    /// The candidate's effect class for it.
    pub effect: Effect,
    /// The turn.
    pub turn_seq: u64,
}

/// `forked`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Forked {
    /// The thread it was forked from.
    pub parent: ThreadId,
    /// The parent's turn whose end it starts from.
    pub at_turn: u64,
    /// Messages it starts with.
    pub history_len: u64,
    /// The files its runner restores first, if the turn has a snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<crate::snapshots::SnapshotRef>,
    /// Effects of the parent after `at_turn` that the fork does not undo.
    #[serde(default)]
    pub undone: u64,
}

/// `fork_created`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkCreated {
    /// The fork.
    pub thread_id: ThreadId,
    /// This thread's turn it starts from.
    pub at_turn: u64,
    /// Its session key.
    pub session: String,
}

/// `rewound`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rewound {
    /// The turns started before the rewind (the last of the branch left).
    pub from_turn: u64,
    /// The turn whose end the thread went back to.
    pub to_turn: u64,
    /// Messages of the history the rewind left (they stay in the store).
    pub left_messages: u64,
    /// The snapshot the workspace was restored to (`None`: the turn had none; files untouched).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<crate::snapshots::SnapshotRef>,
    /// Files written back.
    #[serde(default)]
    pub files_written: u64,
    /// Files removed (made after the turn).
    #[serde(default)]
    pub files_removed: u64,
    /// Effects of the turns left that the rewind does not undo.
    #[serde(default)]
    pub undone: u64,
}

/// `rewind_failed`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RewindFailed {
    /// The turn it was to go back to.
    pub to_turn: u64,
    /// Why nothing was rewound.
    pub why: String,
}

/// `snapshot_taken`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotTaken {
    /// The turn that ended.
    pub turn_seq: u64,
    /// The snapshot.
    pub snapshot: crate::snapshots::SnapshotRef,
    /// Objects the store did not have (new or changed files, and the nodes above them).
    pub uploaded_objects: u64,
    /// Their bytes.
    pub uploaded_bytes: u64,
    /// Files read because their size or time changed since the last snapshot.
    pub hashed_files: u64,
    /// Symlinks and other entries that are not regular files or directories (not kept).
    #[serde(default)]
    pub skipped_entries: u64,
    /// How long it took.
    pub ms: u64,
}

/// `snapshot_skipped`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotSkipped {
    /// The turn that ended.
    pub turn_seq: u64,
    /// Why (the limit passed and the key that sets it, or the file that could not be read).
    pub why: String,
}

/// `workspace_restored`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkspaceRestored {
    /// The snapshot restored.
    pub snapshot: crate::snapshots::SnapshotRef,
    /// Files written.
    pub files_written: u64,
    /// Files removed.
    pub files_removed: u64,
}

/// `approval_requested`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalRequested {
    /// The request (`ninetrix approve ID`).
    pub id: ApprovalId,
    /// An approval or a question.
    pub kind: ApprovalKind,
    /// The tool called.
    pub tool: String,
    /// A preview of its arguments (secret values masked); for a question, the question.
    pub args: String,
    /// Seconds it stands before it expires.
    pub timeout_secs: u64,
}

/// `approval_decided`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalDecided {
    /// The request.
    pub id: ApprovalId,
    /// An approval or a question.
    pub kind: ApprovalKind,
    /// The tool called.
    pub tool: String,
    /// `approved`, `rejected` or `answered`.
    pub status: ApprovalStatus,
    /// Who decided.
    #[serde(default)]
    pub by: String,
    /// Why, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The start of a question's answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
}

impl ApprovalDecided {
    /// `approved by alice: checked` — the decision, who made it and why.
    pub fn text(&self) -> String {
        let reason = self
            .reason
            .as_deref()
            .map(|r| format!(": {r}"))
            .unwrap_or_default();
        format!("{} by {}{reason}", self.status.as_str(), self.by)
    }
}

/// `approval_expired`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalExpired {
    /// The request.
    pub id: ApprovalId,
    /// An approval or a question.
    pub kind: ApprovalKind,
    /// The tool called.
    pub tool: String,
    /// When it expired.
    pub expired_at: DateTime<Utc>,
}

/// `approval_notified`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalNotified {
    /// The request the notification is about.
    pub id: ApprovalId,
    /// The attempt (from 1).
    pub attempt: u32,
    /// The receiver's HTTP status, if it answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Whether the receiver took it (a 2xx answer).
    pub ok: bool,
    /// Why not, without secrets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// How long the runner waits before the next attempt (none after the last).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_in_ms: Option<u64>,
}

/// `handoff_sent`: a task handed to a collaborator of the pool, or sent to a remote A2A agent
/// (`a2a` set, no session or thread).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandoffSent {
    /// The handoff (`handoff:<ledger key>`; for a remote A2A agent the message's ID,
    /// `ninetrix-<ledger key>`).
    pub delivery_key: String,
    /// The tool called (`ask_<agent>`).
    pub tool: String,
    /// The collaborator.
    pub agent: String,
    /// Its session for this task (empty for a remote A2A agent).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub session: String,
    /// That session's thread (`ninetrix trace --thread ID`); `None` for a remote A2A agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<ThreadId>,
    /// For a remote A2A agent: its card and the task it made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub a2a: Option<A2aTask>,
    /// The start of the task.
    pub task: String,
    /// Handoffs in the chain with this one (1: straight from a turn that was not delegated).
    pub depth: u32,
    /// Whether the task was already filed (a restarted caller re-attached to it).
    #[serde(default)]
    pub reattached: bool,
}

/// `handoff_settled`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HandoffSettled {
    /// The handoff.
    pub delivery_key: String,
    /// The collaborator.
    pub agent: String,
    /// Its session's thread; `None` for a remote A2A agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<ThreadId>,
    /// For a remote A2A agent: its card and the task (in the state it ended in, or was last
    /// seen in when the wait ended).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub a2a: Option<A2aTask>,
    /// `replied`, `failed` or `timed_out`.
    pub status: HandoffStatus,
    /// The start of the reply (or of why it failed).
    #[serde(default)]
    pub reply: String,
    /// What the collaborator spent (US dollars), counted in this turn's spending.
    #[serde(default)]
    pub cost_usd: f64,
    /// How long this runner waited.
    #[serde(default)]
    pub waited_ms: u64,
}

/// A task of a remote A2A agent, as the handoff events name it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct A2aTask {
    /// The URL of the agent's card.
    pub card: String,
    /// The task's ID, once the agent answered with one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// Its A2A state (`TASK_STATE_COMPLETED`, …), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
}

/// `handoff_refused`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandoffRefused {
    /// The tool called.
    pub tool: String,
    /// The collaborator it would have asked.
    pub agent: String,
    /// The chain it would have made.
    pub chain: Vec<String>,
    /// The limit (`execution.max_delegation_depth`).
    pub max_depth: u32,
}

/// `handoff_received`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandoffReceived {
    /// The handoff.
    pub delivery_key: String,
    /// The agent that asked.
    pub from_agent: String,
    /// Its thread (waiting for the reply).
    pub from_thread: ThreadId,
    /// The agents from the first caller to the one that asked.
    pub chain: Vec<String>,
}

/// `handoff_replied`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HandoffReplied {
    /// The handoff.
    pub delivery_key: String,
    /// The agent that asked.
    pub to_agent: String,
    /// Its thread.
    pub to_thread: ThreadId,
    /// Whether the turn did the task.
    pub ok: bool,
    /// What the turn spent (US dollars), its own collaborators included.
    pub cost_usd: f64,
}

/// `ready`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ready {
    /// The runner's epoch.
    pub epoch: u64,
    /// The thread had an interrupted turn that the runner is resuming now.
    #[serde(default)]
    pub resuming: bool,
}

/// One message a repair dropped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DroppedMessage {
    /// Its index in the history before the repair.
    pub index: u64,
    /// Who wrote it.
    pub role: Role,
    /// The tool call IDs it carried (calls or results).
    #[serde(default)]
    pub call_ids: Vec<String>,
    /// Why it was dropped, in words.
    #[serde(default)]
    pub reason: String,
}

/// `repair`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Repair {
    /// The history was cut to this many messages before the repaired tail was appended.
    pub truncate_to: u64,
    /// What was dropped.
    pub dropped: Vec<DroppedMessage>,
    /// The agent's `execution.resume` mode (`truncate` or `complete`).
    pub mode: String,
}

/// `resume`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resume {
    /// Provider call IDs of the interrupted assistant message that still need a result.
    pub pending_calls: Vec<String>,
}

/// `turn_started`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnStarted {
    /// The turn's number in the thread (from 1).
    pub turn_seq: u64,
    /// The inbox seq of the message it answers (0: a batch job's task).
    pub seq: u64,
    /// The start of the message, for display.
    #[serde(default)]
    pub input: String,
}

/// `turn_resumed`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnResumed {
    /// The interrupted turn's number.
    pub turn_seq: u64,
    /// The inbox seq it answers.
    pub seq: u64,
}

/// `llm_call`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LlmCall {
    /// The model that answered.
    pub model: String,
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// US dollars (0 for models without a known price).
    #[serde(default)]
    pub cost_usd: f64,
    /// Time of the successful attempt, first byte to last.
    pub latency_ms: u64,
    /// The provider's stop reason (`end_turn`, `tool_use`, `stop`, `tool_calls`, …).
    pub stop_reason: String,
    /// Tool calls in the answer.
    #[serde(default)]
    pub tool_calls: u64,
}

/// `llm_retry`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LlmRetry {
    /// The attempt that failed (from 1).
    pub attempt: u32,
    /// Attempts allowed per call; `None`: the runner retries until the model answers (an outage
    /// never burns the container's restart budget).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// What failed (status, cut stream, connection error), without secrets.
    pub reason: String,
    /// How long the runner waits before the next attempt.
    pub retry_in_ms: u64,
}

impl LlmRetry {
    /// `attempt 2 of 6`, or `attempt 2` when the runner retries until the model answers.
    pub fn attempt_text(&self) -> String {
        match self.max_attempts {
            Some(max) => format!("attempt {} of {max}", self.attempt),
            None => format!("attempt {}", self.attempt),
        }
    }
}

impl Outage {
    /// `checkpoint API was unreachable for 73.0 s (12 failed attempts; last: connection refused)`.
    pub fn text(&self) -> String {
        format!(
            "{} was unreachable for {:.1} s ({} failed attempt{}; last: {})",
            self.dependency.as_str(),
            self.duration_ms as f64 / 1000.0,
            self.attempts,
            if self.attempts == 1 { "" } else { "s" },
            self.reason
        )
    }
}

/// What the runner depends on at run time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dependency {
    /// The checkpoint API.
    Api,
    /// The model provider (`runtime.base_url` or the provider's default).
    Model,
}

impl Dependency {
    /// The name people read.
    pub fn as_str(self) -> &'static str {
        match self {
            Dependency::Api => "checkpoint API",
            Dependency::Model => "model",
        }
    }
}

/// `outage`: a dependency could not be reached for a while and now answers again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outage {
    /// Which one.
    pub dependency: Dependency,
    /// The last failure, without secrets (e.g. `connection refused at http://…/v1`).
    pub reason: String,
    /// Failed attempts during the outage.
    pub attempts: u32,
    /// From the first failure to the first success, in milliseconds.
    pub duration_ms: u64,
}

/// How a tool call was answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ToolMode {
    /// Run for the first time.
    #[serde(rename = "executed")]
    Executed,
    /// Its recorded outcome was returned; it did not run again.
    #[serde(rename = "replayed")]
    Replayed,
    /// A `write` call whose earlier run may or may not have happened: not run again, answered
    /// with an error telling the model to verify.
    #[serde(rename = "outcome_unknown")]
    OutcomeUnknown,
    /// A `read` or `idempotent` call started by a runner that crashed: run again.
    #[serde(rename = "re-executed")]
    ReExecuted,
    /// A write's verifier, run (as a read) because the write's outcome is unknown; its answer
    /// goes to the model with the unknown-outcome notice.
    #[serde(rename = "verification")]
    Verification,
}

impl ToolMode {
    /// The name shown in traces and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolMode::Executed => "executed",
            ToolMode::Replayed => "replayed",
            ToolMode::OutcomeUnknown => "outcome_unknown",
            ToolMode::ReExecuted => "re-executed",
            ToolMode::Verification => "verification",
        }
    }
}

/// `tool_call` and `tool_replayed`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The tool.
    pub name: String,
    /// A preview of its arguments with secret values masked.
    pub args: String,
    /// The call's effect class.
    pub effect: Effect,
    /// How it was answered.
    pub mode: ToolMode,
    /// Time spent on it, ledger round trips included.
    pub duration_ms: u64,
    /// Whether the result is a success.
    pub ok: bool,
    /// The ledger key.
    #[serde(default)]
    pub key: String,
    /// The start of the result.
    #[serde(default)]
    pub result: String,
}

/// `mcp_tools`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpTools {
    /// The server (its `mcp_servers` name).
    pub server: String,
    /// The tools the agent may call.
    pub tools: Vec<McpToolClass>,
    /// Tools the agentfile names (`mcp://server/tool`, `allow:`) that the server does not offer.
    #[serde(default)]
    pub missing: Vec<String>,
}

impl McpTools {
    /// The tools as people read them: `time__now (read, annotations), …`.
    pub fn tool_list(&self) -> String {
        self.tools
            .iter()
            .map(|t| format!("{} ({}, {})", t.name, t.effect.as_str(), t.source.as_str()))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// One MCP tool in `mcp_tools`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpToolClass {
    /// The name the model sees (`server__tool`).
    pub name: String,
    /// Its effect class.
    pub effect: Effect,
    /// Where the class came from.
    pub source: EffectSource,
}

/// `mcp_server_down`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpServerDown {
    /// The server.
    pub server: String,
    /// Why, without secrets (e.g. `connection refused at http://…/mcp`).
    pub reason: String,
}

/// `mcp_server_up`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpServerUp {
    /// The server.
    pub server: String,
    /// How long it was down, in milliseconds (since it was first marked down).
    pub down_ms: u64,
}

/// `unknown_tool`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnknownTool {
    /// The name the model used.
    pub name: String,
    /// The provider's call ID.
    pub call_id: String,
    /// The tools the agent has.
    pub available: Vec<String>,
}

/// `checkpoint`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The version written.
    pub version: u64,
    /// The history length after it.
    pub history_len: u64,
}

/// `compacted`: what [`crate::context::Compaction`] the commit it rides on stores, without the
/// summary (which is in the history: `ninetrix trace --summaries`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Compacted {
    /// How.
    pub strategy: crate::context::Strategy,
    /// Why.
    pub reason: crate::context::CompactionReason,
    /// The history positions it covers (`from..to`).
    pub from: u64,
    /// See `from`.
    pub to: u64,
    /// The first and last stored turn it covers.
    pub turns: [u64; 2],
    /// The estimated input of the next round before it, in tokens.
    pub tokens_before: u64,
    /// The estimated input of the next round after it, in tokens.
    pub tokens_after: u64,
    /// Tool results replaced by a stub.
    #[serde(default)]
    pub cleared: u64,
    /// The model that wrote the summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// What writing the summary cost (US dollars; counted in the turn's spending).
    #[serde(default)]
    pub cost_usd: f64,
    /// The summary's length in characters.
    #[serde(default)]
    pub summary_chars: u64,
}

/// `compaction_skipped`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactionSkipped {
    /// Why it was due.
    pub reason: crate::context::CompactionReason,
    /// Why nothing (or only stubs) came of it, for people.
    pub why: String,
}

/// `turn_completed`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TurnCompleted {
    /// The turn.
    pub turn_seq: u64,
    /// The inbox seq it answered.
    pub seq: u64,
    /// Whether it succeeded.
    pub ok: bool,
    /// The reply (the last assistant text).
    pub reply: String,
    /// What the turn spent.
    #[serde(default)]
    pub usage: Usage,
    /// From taking the input (or resuming) to sending the turn's final commit, which this event
    /// rides on, in this runner's life.
    #[serde(default)]
    pub duration_ms: f64,
    /// What ended the turn early, for a turn interrupted by a message or cancelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_by: Option<StoppedBy>,
}

/// What ended a turn before its model's final answer, by someone's request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StoppedBy {
    /// A message sent with mode `interrupt` (it starts the next turn).
    Interrupted {
        /// The interrupting message's inbox seq.
        seq: u64,
    },
    /// A cancel (`ninetrix cancel`, the API's cancel route, the console's Cancel button, or
    /// the cancel of the handoff this turn worked on).
    Cancelled {
        /// The cancel's inbox seq.
        seq: u64,
        /// Who cancelled.
        by: String,
    },
}

impl StoppedBy {
    /// The turn's end as a word: `interrupted` or `cancelled`.
    pub fn word(&self) -> &'static str {
        match self {
            StoppedBy::Interrupted { .. } => "interrupted",
            StoppedBy::Cancelled { .. } => "cancelled",
        }
    }

    /// The inbox seq of the message or cancel that stopped the turn.
    pub fn seq(&self) -> u64 {
        match self {
            StoppedBy::Interrupted { seq } | StoppedBy::Cancelled { seq, .. } => *seq,
        }
    }
}

/// `steered`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Steered {
    /// The turn it joined.
    pub turn_seq: u64,
    /// The message's inbox seq.
    pub seq: u64,
    /// The start of its text.
    pub input: String,
}

/// `turn_stopping`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnStopping {
    /// The turn being stopped.
    pub turn_seq: u64,
    /// What stops it.
    pub by: StoppedBy,
    /// The tool calls still running, given `execution.interrupt_grace` to finish.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub running: Vec<String>,
}

/// `cancel_missed`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelMissed {
    /// The cancel's inbox seq.
    pub seq: u64,
    /// Who cancelled.
    pub by: String,
    /// The last turn, which had ended before the cancel was taken.
    pub last_turn: u64,
}

/// `job_started`, `job_finished` and `job_reattached`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobEvent {
    /// The job's ID (from the ledger key of the call that started it).
    pub job: String,
    /// Its name.
    pub name: String,
    /// Its command (at most 200 bytes).
    pub command: String,
    /// `created`, `running` or `exited`.
    pub state: String,
    /// Its exit code, once it exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    /// Whether its timeout ended it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub timed_out: bool,
}

/// `budget_exceeded`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BudgetExceeded {
    /// The budget: `governance.max_budget_per_run`, or the API's allowance for `scope`.
    pub budget_usd: f64,
    /// What the turn (or the scope) had spent.
    pub spent_usd: f64,
    /// The budget kept by the API that is spent; `None`: the run's own
    /// (`max_budget_per_run`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<crate::api::BudgetScope>,
}

/// `model_fallback`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelFallback {
    /// The model that failed, as `provider/model` (the primary, or an earlier fallback).
    pub from: String,
    /// The model that answered, as `provider/model`.
    pub to: String,
    /// Why `from` was left: its last failure, without secrets.
    pub reason: String,
}

/// `model_waited`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelWaited {
    /// The provider.
    pub provider: String,
    /// How long the call waited for its slot.
    pub waited_ms: u64,
    /// The last reason it waited.
    pub wait: crate::api::SlotWait,
}

/// `max_turns_reached`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MaxTurnsReached {
    /// `execution.max_turns`.
    pub max_turns: u32,
}

/// Where an error happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorStage {
    /// The model refused or could not be reached for good; the turn ended.
    Llm,
    /// The runner itself failed (it exits and Docker restarts it).
    Runner,
}

impl ErrorStage {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorStage::Llm => "llm",
            ErrorStage::Runner => "runner",
        }
    }
}

/// `error`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorEvent {
    /// Where.
    pub stage: ErrorStage,
    /// What happened, for people.
    pub message: String,
}

impl TraceEvent {
    /// The wire `type`.
    pub fn kind(&self) -> &'static str {
        match self {
            TraceEvent::Boot(_) => "boot",
            TraceEvent::Ready(_) => "ready",
            TraceEvent::Repair(_) => "repair",
            TraceEvent::Resume(_) => "resume",
            TraceEvent::TurnStarted(_) => "turn_started",
            TraceEvent::TurnResumed(_) => "turn_resumed",
            TraceEvent::LlmCall(_) => "llm_call",
            TraceEvent::LlmRetry(_) => "llm_retry",
            TraceEvent::Outage(_) => "outage",
            TraceEvent::ToolCall(_) => "tool_call",
            TraceEvent::ToolReplayed(_) => "tool_replayed",
            TraceEvent::UnknownTool(_) => "unknown_tool",
            TraceEvent::McpTools(_) => "mcp_tools",
            TraceEvent::McpServerDown(_) => "mcp_server_down",
            TraceEvent::McpServerUp(_) => "mcp_server_up",
            TraceEvent::Checkpoint(_) => "checkpoint",
            TraceEvent::Compacted(_) => "compacted",
            TraceEvent::CompactionSkipped(_) => "compaction_skipped",
            TraceEvent::TurnCompleted(_) => "turn_completed",
            TraceEvent::Steered(_) => "steered",
            TraceEvent::TurnStopping(_) => "turn_stopping",
            TraceEvent::CancelMissed(_) => "cancel_missed",
            TraceEvent::JobStarted(_) => "job_started",
            TraceEvent::JobFinished(_) => "job_finished",
            TraceEvent::JobReattached(_) => "job_reattached",
            TraceEvent::BudgetExceeded(_) => "budget_exceeded",
            TraceEvent::ModelFallback(_) => "model_fallback",
            TraceEvent::ModelWaited(_) => "model_waited",
            TraceEvent::MaxTurnsReached(_) => "max_turns_reached",
            TraceEvent::ApprovalRequested(_) => "approval_requested",
            TraceEvent::ApprovalDecided(_) => "approval_decided",
            TraceEvent::ApprovalExpired(_) => "approval_expired",
            TraceEvent::ApprovalNotified(_) => "approval_notified",
            TraceEvent::HandoffSent(_) => "handoff_sent",
            TraceEvent::HandoffSettled(_) => "handoff_settled",
            TraceEvent::HandoffRefused(_) => "handoff_refused",
            TraceEvent::HandoffReceived(_) => "handoff_received",
            TraceEvent::HandoffReplied(_) => "handoff_replied",
            TraceEvent::Forked(_) => "forked",
            TraceEvent::ForkCreated(_) => "fork_created",
            TraceEvent::Rewound(_) => "rewound",
            TraceEvent::RewindFailed(_) => "rewind_failed",
            TraceEvent::SnapshotTaken(_) => "snapshot_taken",
            TraceEvent::SnapshotSkipped(_) => "snapshot_skipped",
            TraceEvent::WorkspaceRestored(_) => "workspace_restored",
            TraceEvent::ReplayStarted(_) => "replay_started",
            TraceEvent::ReplayAnswered(_) => "replay_answered",
            TraceEvent::Error(_) => "error",
        }
    }

    /// The wire form, stamped with the time it happened (`data.at`). Type and data both come
    /// from the serialised form, so the stored `type` is serde's, whatever [`TraceEvent::kind`]
    /// says (a test keeps the two equal).
    pub fn to_new_event(&self, at: DateTime<Utc>) -> NewEvent {
        let mut value = serde_json::to_value(self).unwrap_or_default();
        let kind = value["type"].as_str().unwrap_or(self.kind()).to_string();
        let mut data = value
            .get_mut("data")
            .map(serde_json::Value::take)
            .unwrap_or_default();
        if let serde_json::Value::Object(map) = &mut data {
            map.insert(
                "at".into(),
                at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
                    .into(),
            );
        }
        NewEvent { kind, data }
    }

    /// Reads a stored `{type, data}` pair.
    pub fn decode(kind: &str, data: &serde_json::Value) -> Decoded {
        let pair = serde_json::json!({"type": kind, "data": data});
        match serde_json::from_value(pair) {
            Ok(event) => Decoded::Known(event),
            Err(e) => Decoded::Unknown {
                kind: kind.to_string(),
                why: e.to_string(),
            },
        }
    }
}

/// A stored event read back.
#[derive(Clone, Debug, PartialEq)]
pub enum Decoded {
    /// An event this build knows.
    Known(TraceEvent),
    /// A `type` this build does not know (a newer runner), or data it cannot read.
    Unknown {
        /// The stored `type`.
        kind: String,
        /// Why it could not be read, for `--json`-less displays that want to say so.
        why: String,
    },
}

impl Event {
    /// The event, typed.
    pub fn decode(&self) -> Decoded {
        TraceEvent::decode(&self.kind, &self.data)
    }

    /// When it happened: the runner's clock (`data.at`) if it sent one, else when the API
    /// stored it.
    pub fn at(&self) -> DateTime<Utc> {
        self.data
            .get("at")
            .and_then(serde_json::Value::as_str)
            .and_then(|t| t.parse().ok())
            .unwrap_or(self.created_at)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn stored(kind: &str, data: serde_json::Value) -> Event {
        Event {
            seq: 1,
            kind: kind.into(),
            data,
            epoch: 1,
            created_at: "2026-01-01T00:00:05Z".parse().unwrap(),
        }
    }

    #[test]
    fn events_written_by_the_first_runners_still_read() {
        // Shapes exactly as runners before the typed enum stored them (note `at` inside data and
        // `re-executed` with a hyphen).
        let cases = [
            (
                "boot",
                json!({"epoch": 2, "boot_count": 2, "restart_count": 1, "repaired": true, "version": 9, "at": "2026-01-01T00:00:01.000Z"}),
            ),
            ("ready", json!({"epoch": 2})),
            ("ready", json!({"epoch": 3, "resuming": true})),
            (
                "llm_retry",
                json!({"attempt": 1, "max_attempts": 6, "reason": "HTTP 529", "retry_in_ms": 500}),
            ),
            (
                "outage",
                json!({"dependency": "api", "reason": "connection refused", "attempts": 12, "duration_ms": 73000}),
            ),
            (
                "repair",
                json!({"truncate_to": 3, "mode": "truncate", "dropped": [{"index": 3, "role": "assistant", "call_ids": ["toolu_1"], "reason": "part of the interrupted turn"}]}),
            ),
            ("resume", json!({"pending_calls": ["b", "c"]})),
            (
                "turn_started",
                json!({"turn_seq": 1, "seq": 4, "input": "hi"}),
            ),
            ("turn_resumed", json!({"turn_seq": 1, "seq": 4})),
            (
                "llm_call",
                json!({"model": "m", "input_tokens": 1, "output_tokens": 2, "cost_usd": 0.0, "latency_ms": 3, "stop_reason": "end_turn", "tool_calls": 0}),
            ),
            (
                "tool_call",
                json!({"name": "file_write", "args": "{}", "effect": "write", "mode": "re-executed", "duration_ms": 1, "ok": true, "key": "k", "result": "ok"}),
            ),
            (
                "tool_replayed",
                json!({"name": "file_write", "args": "{}", "effect": "write", "mode": "replayed", "duration_ms": 1, "ok": true, "key": "k", "result": "ok"}),
            ),
            ("checkpoint", json!({"version": 1, "history_len": 2})),
            (
                "turn_completed",
                json!({"turn_seq": 1, "seq": 4, "ok": true, "reply": "Done.", "usage": {"input_tokens": 1, "output_tokens": 2, "cost_usd": 0.0}, "duration_ms": 12.5}),
            ),
            (
                "budget_exceeded",
                json!({"budget_usd": 0.01, "spent_usd": 0.02}),
            ),
            ("max_turns_reached", json!({"max_turns": 3})),
            (
                "mcp_server_down",
                json!({"server": "time", "reason": "cannot connect to http://mcp-time:8931/mcp"}),
            ),
            ("mcp_server_up", json!({"server": "time", "down_ms": 12300})),
            ("error", json!({"stage": "llm", "message": "401"})),
        ];
        let at = "2026-01-01T00:00:00Z".parse().unwrap();
        for (kind, data) in cases {
            match stored(kind, data).decode() {
                Decoded::Known(e) => {
                    assert_eq!(e.kind(), kind);
                    assert_eq!(e.to_new_event(at).kind, kind, "kind() agrees with serde");
                }
                Decoded::Unknown { why, .. } => panic!("{kind} did not read: {why}"),
            }
        }
        let retry = TraceEvent::LlmRetry(LlmRetry {
            attempt: 1,
            max_attempts: None,
            reason: "HTTP 529".into(),
            retry_in_ms: 500,
        });
        assert_eq!(retry.to_new_event(at).kind, retry.kind());
    }

    #[test]
    fn an_event_round_trips_with_its_time_beside_its_fields() {
        let event = TraceEvent::UnknownTool(UnknownTool {
            name: "delete_everything".into(),
            call_id: "toolu_9".into(),
            available: vec!["file_read".into()],
        });
        let at: DateTime<Utc> = "2026-01-01T00:00:01.250Z".parse().unwrap();
        let wire = event.to_new_event(at);
        assert_eq!(wire.kind, "unknown_tool");
        assert_eq!(wire.data["at"], "2026-01-01T00:00:01.250Z");
        let back = stored(&wire.kind, wire.data);
        assert_eq!(back.decode(), Decoded::Known(event));
        assert_eq!(back.at(), at);
    }

    #[test]
    fn an_unknown_or_unreadable_event_is_reported_not_refused() {
        match stored("approval_requested", json!({"id": 1})).decode() {
            Decoded::Unknown { kind, .. } => assert_eq!(kind, "approval_requested"),
            other => panic!("{other:?}"),
        }
        match stored("boot", json!({"epoch": "two"})).decode() {
            Decoded::Unknown { kind, why } => {
                assert_eq!(kind, "boot");
                assert!(!why.is_empty());
            }
            other => panic!("{other:?}"),
        }
        // Without `data.at`, the API's own time is used.
        let e = stored("ready", json!({"epoch": 1}));
        assert_eq!(e.at(), e.created_at);
    }
}
