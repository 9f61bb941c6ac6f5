//! OpenTelemetry spans of a thread's turns (issue 18), following the GenAI semantic conventions:
//! `invoke_agent {agent}` per turn attempt, `chat {model}` per model call, `execute_tool {tool}`
//! per tool call, `await_approval {tool}` and `await_handoff {agent}` per wait, with `ninetrix.*`
//! attributes for what no convention covers (epochs, restarts, repair, replay, fencing).
//!
//! [`Spans`] is pure: it observes the thread's trace events ([`Observed`], each with its time) and
//! returns the spans they finish ([`SpanRecord`]); no clock, no I/O, no randomness. Its IDs are
//! deterministic, so every attempt at one turn — across crashes and epochs — shares one trace:
//! the trace is SHA-256(`ninetrix:trace:<thread>:<turn_seq>`), an attempt's span
//! SHA-256(`ninetrix:turn:<thread>:<turn_seq>:<epoch>`). A runner killed mid-turn never ends its
//! attempt; the runner that resumes the turn reports it (it knows the attempt's epoch and start
//! from the checkpoint's [`TurnAttempt`]) and links its own attempt to it.
//!
//! [`Exporter`] hands the records to an OTLP exporter from a background task through a bounded
//! queue: observing never waits, and when the collector is down or slow, spans are dropped (and
//! counted), never turns.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{ApprovalKind, ApprovalStatus, TurnAttempt};
use ninetrix_proto::events::{ToolMode, TraceEvent};
use ninetrix_telemetry::{SamplerSetting, Settings, TelemetryError};
use sha2::{Digest, Sha256};
use tokio::sync::{mpsc, oneshot};

/// A span's kind (the two the runner makes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// In-process work: a turn, a tool call, a wait.
    Internal,
    /// A call to another service: the model.
    Client,
}

/// An attribute value.
#[derive(Clone, Debug, PartialEq)]
pub enum Attr {
    /// A string.
    Str(String),
    /// An integer.
    Int(i64),
    /// A boolean.
    Bool(bool),
    /// A floating-point number.
    F64(f64),
    /// An array of strings.
    Strs(Vec<String>),
}

impl From<&str> for Attr {
    fn from(v: &str) -> Attr {
        Attr::Str(v.to_string())
    }
}
impl From<String> for Attr {
    fn from(v: String) -> Attr {
        Attr::Str(v)
    }
}
impl From<u64> for Attr {
    fn from(v: u64) -> Attr {
        Attr::Int(i64::try_from(v).unwrap_or(i64::MAX))
    }
}
impl From<u32> for Attr {
    fn from(v: u32) -> Attr {
        Attr::Int(i64::from(v))
    }
}
impl From<bool> for Attr {
    fn from(v: bool) -> Attr {
        Attr::Bool(v)
    }
}
impl From<f64> for Attr {
    fn from(v: f64) -> Attr {
        Attr::F64(v)
    }
}

/// A span's status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Status {
    /// Not set (a successful step).
    Unset,
    /// A turn that completed successfully.
    Ok,
    /// Failed, with a description (never a message's contents).
    Error(String),
}

/// A link to another span.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkRecord {
    /// Its trace.
    pub trace_id: [u8; 16],
    /// Its span.
    pub span_id: [u8; 8],
    /// The link's attributes.
    pub attributes: Vec<(&'static str, Attr)>,
}

/// A finished span.
#[derive(Clone, Debug, PartialEq)]
pub struct SpanRecord {
    /// Its name.
    pub name: String,
    /// Its kind.
    pub kind: Kind,
    /// Its trace.
    pub trace_id: [u8; 16],
    /// Its ID.
    pub span_id: [u8; 8],
    /// Its parent, if any.
    pub parent: Option<[u8; 8]>,
    /// Start.
    pub start: DateTime<Utc>,
    /// End.
    pub end: DateTime<Utc>,
    /// Attributes, in the order they were set.
    pub attributes: Vec<(&'static str, Attr)>,
    /// Links.
    pub links: Vec<LinkRecord>,
    /// Status.
    pub status: Status,
}

impl SpanRecord {
    /// An attribute by key.
    pub fn attr(&self, key: &str) -> Option<&Attr> {
        self.attributes
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v)
    }
}

/// The trace of every attempt at turn `turn_seq` of `thread`.
pub fn trace_id(thread: ThreadId, turn_seq: u64) -> [u8; 16] {
    let d = Sha256::digest(format!("ninetrix:trace:{thread}:{turn_seq}").as_bytes());
    let mut id = [0; 16];
    id.copy_from_slice(&d[..16]);
    id
}

/// The span of the attempt at turn `turn_seq` of `thread` made by the runner of `epoch`.
pub fn attempt_span_id(thread: ThreadId, turn_seq: u64, epoch: u64) -> [u8; 8] {
    span_id(&format!("ninetrix:turn:{thread}:{turn_seq}:{epoch}"))
}

fn span_id(seed: &str) -> [u8; 8] {
    let d = Sha256::digest(seed.as_bytes());
    let mut id = [0; 8];
    id.copy_from_slice(&d[..8]);
    id
}

/// Who runs the thread: the labels every turn span carries.
#[derive(Clone, Debug, PartialEq)]
pub struct ThreadInfo {
    /// The thread.
    pub thread: ThreadId,
    /// The agent.
    pub agent: String,
    /// The session key, for a session's thread.
    pub session: Option<String>,
    /// The pool.
    pub pool: Option<String>,
    /// The replica serving it.
    pub replica: Option<u32>,
    /// `gen_ai.provider.name` (`anthropic`, `openai`, the compatible service's name, …).
    pub provider: String,
    /// `gen_ai.request.model`.
    pub model: String,
}

/// What the span state machine observes.
#[derive(Clone, Debug, PartialEq)]
pub enum Observed<'a> {
    /// A trace event of the thread.
    Event(&'a TraceEvent),
    /// Restoring found a turn in progress, taken up last by this attempt (from the checkpoint):
    /// when the turn resumes, the attempt is reported as interrupted.
    Interrupted(TurnAttempt),
    /// A request to a person was settled (decided or expired), as the API tells it.
    ApprovalSettled {
        /// The request.
        id: String,
        /// Approval or question.
        kind: ApprovalKind,
        /// The tool called.
        tool: String,
        /// How it was settled.
        status: ApprovalStatus,
        /// When it was requested (the API's clock), for a request this runner did not make.
        requested_at: DateTime<Utc>,
    },
    /// The API refused a write: another runner claimed the thread, the turn stops here.
    Fenced,
}

/// The attempt at a turn this runner works on.
#[derive(Clone, Debug)]
struct Attempt {
    turn_seq: u64,
    trace_id: [u8; 16],
    span_id: [u8; 8],
    start: DateTime<Utc>,
    resumed: bool,
    links: Vec<LinkRecord>,
    /// Child spans made so far (their IDs derive from the count).
    children: u64,
    dropped_ids: Vec<String>,
    approval_wait_ms: u64,
    handoff_wait_ms: u64,
    llm_retries: u64,
    commits: u64,
    budget_exceeded: bool,
    max_turns_reached: bool,
    handed_over_by: Option<(String, String)>,
}

/// The span state machine of one thread in one runner's life. Pure: see the module docs.
#[derive(Clone, Debug)]
pub struct Spans {
    info: ThreadInfo,
    epoch: u64,
    boot_count: u64,
    restart_count: u64,
    interrupted: Option<TurnAttempt>,
    /// Call IDs dropped by the boot's repair, for the next attempt.
    repair: Option<Vec<String>>,
    /// Retries of the model call under way.
    retries: u64,
    approvals: HashMap<String, DateTime<Utc>>,
    /// Requests whose wait was reported (the driver sees a settled request again while others
    /// of the response are pending).
    settled: HashSet<String>,
    turn: Option<Attempt>,
}

impl Spans {
    /// The machine of `info`'s thread, served by the runner of `epoch`.
    pub fn new(info: ThreadInfo, epoch: u64) -> Spans {
        Spans {
            info,
            epoch,
            boot_count: 0,
            restart_count: 0,
            interrupted: None,
            repair: None,
            retries: 0,
            approvals: HashMap::new(),
            settled: HashSet::new(),
            turn: None,
        }
    }

    /// Takes what happened at `at`; returns the spans it finished.
    pub fn observe(&mut self, at: DateTime<Utc>, what: Observed<'_>) -> Vec<SpanRecord> {
        match what {
            Observed::Event(e) => self.event(at, e),
            Observed::Interrupted(attempt) => {
                self.interrupted = Some(attempt);
                Vec::new()
            }
            Observed::ApprovalSettled {
                id,
                kind,
                tool,
                status,
                requested_at,
            } => {
                if !self.settled.insert(id.clone()) {
                    return Vec::new();
                }
                let start = self.approvals.remove(&id).unwrap_or(requested_at).min(at);
                let wait_ms = (at - start).num_milliseconds().max(0) as u64;
                let Some(turn) = &mut self.turn else {
                    return Vec::new();
                };
                turn.approval_wait_ms += wait_ms;
                let mut record = child(
                    turn,
                    format!("await_approval {tool}"),
                    Kind::Internal,
                    start,
                    at,
                );
                record.span_id = span_id(&format!("ninetrix:approval:{id}"));
                record.attributes.extend([
                    ("ninetrix.approval.id", Attr::from(id)),
                    ("ninetrix.approval.kind", kind.as_str().into()),
                    ("ninetrix.approval.status", status.as_str().into()),
                    ("ninetrix.approval.wait_ms", wait_ms.into()),
                    ("gen_ai.tool.name", tool.into()),
                ]);
                if matches!(status, ApprovalStatus::Rejected | ApprovalStatus::Expired) {
                    record.status = Status::Error(format!("request {}", status.as_str()));
                }
                vec![record]
            }
            Observed::Fenced => match self.turn.take() {
                Some(turn) => {
                    let status = Status::Error(
                        "fenced: another runner claimed the thread; it goes on with the turn"
                            .into(),
                    );
                    vec![self.attempt_record(turn, at, status, true)]
                }
                None => Vec::new(),
            },
        }
    }

    fn event(&mut self, at: DateTime<Utc>, e: &TraceEvent) -> Vec<SpanRecord> {
        match e {
            TraceEvent::Boot(b) => {
                self.boot_count = b.boot_count;
                self.restart_count = b.restart_count;
                Vec::new()
            }
            TraceEvent::Repair(r) => {
                let ids = r
                    .dropped
                    .iter()
                    .flat_map(|d| d.call_ids.iter().cloned())
                    .collect();
                self.repair = Some(ids);
                Vec::new()
            }
            TraceEvent::TurnStarted(t) => {
                let out = self.supersede(at);
                self.open(at, t.turn_seq, false, Vec::new());
                out
            }
            TraceEvent::TurnResumed(t) => {
                let mut out = self.supersede(at);
                let mut links = Vec::new();
                if let Some(prev) = self.interrupted.take()
                    && prev.epoch != self.epoch
                {
                    let record = self.interrupted_record(t.turn_seq, &prev, at);
                    links.push(LinkRecord {
                        trace_id: record.trace_id,
                        span_id: record.span_id,
                        attributes: vec![("ninetrix.link", "resumed_from".into())],
                    });
                    out.push(record);
                }
                self.open(at, t.turn_seq, true, links);
                out
            }
            TraceEvent::HandoffReceived(h) => {
                if let Some(turn) = &mut self.turn {
                    turn.handed_over_by = Some((h.from_agent.clone(), h.from_thread.to_string()));
                }
                Vec::new()
            }
            TraceEvent::LlmRetry(_) => {
                self.retries += 1;
                Vec::new()
            }
            TraceEvent::LlmCall(c) => {
                let retries = std::mem::take(&mut self.retries);
                let Some(turn) = &mut self.turn else {
                    return Vec::new();
                };
                turn.llm_retries += retries;
                let start = at - chrono::Duration::milliseconds(c.latency_ms as i64);
                let mut record = child(
                    turn,
                    format!("chat {}", self.info.model),
                    Kind::Client,
                    start,
                    at,
                );
                record.attributes.extend([
                    ("gen_ai.operation.name", Attr::from("chat")),
                    ("gen_ai.provider.name", self.info.provider.as_str().into()),
                    ("gen_ai.request.model", self.info.model.as_str().into()),
                    ("gen_ai.response.model", c.model.as_str().into()),
                    (
                        "gen_ai.response.finish_reasons",
                        Attr::Strs(vec![c.stop_reason.clone()]),
                    ),
                    ("gen_ai.usage.input_tokens", c.input_tokens.into()),
                    ("gen_ai.usage.output_tokens", c.output_tokens.into()),
                    (
                        "gen_ai.conversation.id",
                        self.info.thread.to_string().into(),
                    ),
                    ("ninetrix.usage.cost_usd", c.cost_usd.into()),
                    ("ninetrix.llm.tool_calls", c.tool_calls.into()),
                    ("ninetrix.llm.retries", retries.into()),
                ]);
                vec![record]
            }
            TraceEvent::ToolCall(t) | TraceEvent::ToolReplayed(t) => {
                let Some(turn) = &mut self.turn else {
                    return Vec::new();
                };
                let start = at - chrono::Duration::milliseconds(t.duration_ms as i64);
                let mut record = child(
                    turn,
                    format!("execute_tool {}", t.name),
                    Kind::Internal,
                    start,
                    at,
                );
                record.attributes.extend([
                    ("gen_ai.operation.name", Attr::from("execute_tool")),
                    ("gen_ai.tool.name", t.name.as_str().into()),
                    ("ninetrix.tool.mode", t.mode.as_str().into()),
                    ("ninetrix.tool.effect", t.effect.as_str().into()),
                    ("ninetrix.ledger.key", t.key.as_str().into()),
                ]);
                if t.mode == ToolMode::OutcomeUnknown {
                    record
                        .attributes
                        .push(("error.type", "outcome_unknown".into()));
                    record.status = Status::Error(
                        "outcome unknown: an earlier run of this write may or may not have happened"
                            .into(),
                    );
                } else if !t.ok {
                    record.attributes.push(("error.type", "tool_error".into()));
                    record.status = Status::Error("the tool answered with an error".into());
                }
                vec![record]
            }
            TraceEvent::UnknownTool(u) => {
                let Some(turn) = &mut self.turn else {
                    return Vec::new();
                };
                let mut record = child(
                    turn,
                    format!("execute_tool {}", u.name),
                    Kind::Internal,
                    at,
                    at,
                );
                record.attributes.extend([
                    ("gen_ai.operation.name", Attr::from("execute_tool")),
                    ("gen_ai.tool.name", u.name.as_str().into()),
                    ("gen_ai.tool.call.id", u.call_id.as_str().into()),
                    ("error.type", "unknown_tool".into()),
                ]);
                record.status = Status::Error("the agent has no tool of that name".into());
                vec![record]
            }
            TraceEvent::ApprovalRequested(a) => {
                self.approvals.insert(a.id.to_string(), at);
                Vec::new()
            }
            TraceEvent::HandoffSettled(h) => {
                let Some(turn) = &mut self.turn else {
                    return Vec::new();
                };
                turn.handoff_wait_ms += h.waited_ms;
                let start = at - chrono::Duration::milliseconds(h.waited_ms as i64);
                let mut record = child(
                    turn,
                    format!("await_handoff {}", h.agent),
                    Kind::Internal,
                    start,
                    at,
                );
                record.attributes.extend([
                    ("gen_ai.agent.name", Attr::from(h.agent.as_str())),
                    ("ninetrix.handoff.status", h.status.as_str().into()),
                    ("ninetrix.handoff.thread_id", h.thread_id.to_string().into()),
                    ("ninetrix.handoff.wait_ms", h.waited_ms.into()),
                    ("ninetrix.usage.cost_usd", h.cost_usd.into()),
                ]);
                if h.status != ninetrix_proto::api::HandoffStatus::Replied {
                    record.status = Status::Error(format!("handoff {}", h.status.as_str()));
                }
                vec![record]
            }
            TraceEvent::Checkpoint(_) => {
                if let Some(turn) = &mut self.turn {
                    turn.commits += 1;
                }
                Vec::new()
            }
            TraceEvent::BudgetExceeded(_) => {
                if let Some(turn) = &mut self.turn {
                    turn.budget_exceeded = true;
                }
                Vec::new()
            }
            TraceEvent::MaxTurnsReached(_) => {
                if let Some(turn) = &mut self.turn {
                    turn.max_turns_reached = true;
                }
                Vec::new()
            }
            TraceEvent::TurnCompleted(done) => {
                let Some(turn) = self.turn.take() else {
                    return Vec::new();
                };
                let error_type = if done.ok {
                    None
                } else if turn.budget_exceeded {
                    Some("budget_exceeded")
                } else if turn.max_turns_reached {
                    Some("max_turns_reached")
                } else {
                    Some("turn_failed")
                };
                let status = match error_type {
                    None => Status::Ok,
                    Some(t) => Status::Error(format!("the turn failed ({t})")),
                };
                let mut record = self.attempt_record(turn, at, status, false);
                record.attributes.extend([
                    ("gen_ai.usage.input_tokens", done.usage.input_tokens.into()),
                    (
                        "gen_ai.usage.output_tokens",
                        done.usage.output_tokens.into(),
                    ),
                    ("ninetrix.usage.cost_usd", done.usage.cost_usd.into()),
                ]);
                if let Some(t) = error_type {
                    record.attributes.push(("error.type", t.into()));
                }
                vec![record]
            }
            // Nothing of a turn's shape: logged and stored, not spans.
            TraceEvent::Ready(_)
            | TraceEvent::Resume(_)
            | TraceEvent::Outage(_)
            | TraceEvent::McpTools(_)
            | TraceEvent::McpServerDown(_)
            | TraceEvent::McpServerUp(_)
            | TraceEvent::ApprovalDecided(_)
            | TraceEvent::ApprovalExpired(_)
            | TraceEvent::ApprovalNotified(_)
            | TraceEvent::HandoffSent(_)
            | TraceEvent::HandoffRefused(_)
            | TraceEvent::HandoffReplied(_)
            | TraceEvent::Error(_) => Vec::new(),
        }
    }

    /// A turn started while another was open (never expected): the open one ends here.
    fn supersede(&mut self, at: DateTime<Utc>) -> Vec<SpanRecord> {
        match self.turn.take() {
            Some(turn) => vec![self.attempt_record(
                turn,
                at,
                Status::Error("superseded: another turn started before this one ended".into()),
                false,
            )],
            None => Vec::new(),
        }
    }

    fn open(&mut self, at: DateTime<Utc>, turn_seq: u64, resumed: bool, links: Vec<LinkRecord>) {
        self.turn = Some(Attempt {
            turn_seq,
            trace_id: trace_id(self.info.thread, turn_seq),
            span_id: attempt_span_id(self.info.thread, turn_seq, self.epoch),
            start: at,
            resumed,
            links,
            children: 0,
            dropped_ids: self.repair.take().unwrap_or_default(),
            approval_wait_ms: 0,
            handoff_wait_ms: 0,
            llm_retries: 0,
            commits: 0,
            budget_exceeded: false,
            max_turns_reached: false,
            handed_over_by: None,
        });
    }

    /// The `invoke_agent` span of an attempt, with what every one carries.
    fn base(&self, turn_seq: u64, epoch: u64, start: DateTime<Utc>) -> SpanRecord {
        let info = &self.info;
        let mut attributes = vec![
            ("gen_ai.operation.name", Attr::from("invoke_agent")),
            ("gen_ai.agent.name", info.agent.as_str().into()),
            ("gen_ai.provider.name", info.provider.as_str().into()),
            ("gen_ai.request.model", info.model.as_str().into()),
            ("gen_ai.conversation.id", info.thread.to_string().into()),
            ("ninetrix.thread_id", info.thread.to_string().into()),
            ("ninetrix.turn_seq", turn_seq.into()),
            ("ninetrix.epoch", epoch.into()),
        ];
        if let Some(session) = &info.session {
            attributes.push(("ninetrix.session", session.as_str().into()));
        }
        if let Some(pool) = &info.pool {
            attributes.push(("ninetrix.pool", pool.as_str().into()));
        }
        if let Some(replica) = info.replica {
            attributes.push(("ninetrix.replica", replica.into()));
        }
        SpanRecord {
            name: format!("invoke_agent {}", info.agent),
            kind: Kind::Internal,
            trace_id: trace_id(info.thread, turn_seq),
            span_id: attempt_span_id(info.thread, turn_seq, epoch),
            parent: None,
            start,
            end: start,
            attributes,
            links: Vec::new(),
            status: Status::Unset,
        }
    }

    fn attempt_record(
        &self,
        turn: Attempt,
        end: DateTime<Utc>,
        status: Status,
        fenced: bool,
    ) -> SpanRecord {
        let mut record = self.base(turn.turn_seq, self.epoch, turn.start);
        record.end = end.max(turn.start);
        record.status = status;
        record.links = turn.links;
        record.attributes.extend([
            ("ninetrix.boot_count", Attr::from(self.boot_count)),
            ("ninetrix.restart_count", self.restart_count.into()),
            ("ninetrix.resumed", turn.resumed.into()),
            ("ninetrix.fenced", fenced.into()),
            ("ninetrix.commits", turn.commits.into()),
            ("ninetrix.llm.retries", turn.llm_retries.into()),
        ]);
        if !turn.dropped_ids.is_empty() {
            record
                .attributes
                .push(("ninetrix.repair.dropped_ids", Attr::Strs(turn.dropped_ids)));
        }
        if turn.approval_wait_ms > 0 {
            record
                .attributes
                .push(("ninetrix.approval.wait_ms", turn.approval_wait_ms.into()));
        }
        if turn.handoff_wait_ms > 0 {
            record
                .attributes
                .push(("ninetrix.handoff.wait_ms", turn.handoff_wait_ms.into()));
        }
        if let Some((agent, thread)) = turn.handed_over_by {
            record.attributes.extend([
                ("ninetrix.handoff.from_agent", Attr::from(agent)),
                ("ninetrix.handoff.from_thread", thread.into()),
            ]);
        }
        record
    }

    /// The span of an attempt a runner began and never ended (it was killed or stopped), ended
    /// now by the runner that resumes the turn.
    fn interrupted_record(
        &self,
        turn_seq: u64,
        prev: &TurnAttempt,
        now: DateTime<Utc>,
    ) -> SpanRecord {
        let mut record = self.base(turn_seq, prev.epoch, prev.started_at.min(now));
        record.end = now;
        record.status =
            Status::Error("interrupted: the runner stopped before the turn ended".into());
        record
            .attributes
            .push(("ninetrix.interrupted", true.into()));
        record
    }
}

/// A child span of the attempt, its ID derived from the attempt's and a count.
fn child(
    turn: &mut Attempt,
    name: String,
    kind: Kind,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
) -> SpanRecord {
    turn.children += 1;
    let mut parent_hex = String::with_capacity(16);
    for b in turn.span_id {
        parent_hex.push_str(&format!("{b:02x}"));
    }
    SpanRecord {
        name,
        kind,
        trace_id: turn.trace_id,
        span_id: span_id(&format!("ninetrix:span:{parent_hex}:{}", turn.children)),
        parent: Some(turn.span_id),
        start: start.max(turn.start).min(end),
        end,
        attributes: Vec::new(),
        links: Vec::new(),
        status: Status::Unset,
    }
}

// ---------------------------------------------------------------------------------------------
// Export.

/// The most spans waiting for the exporter; beyond it new spans are dropped (and counted).
pub const MAX_QUEUED: usize = 2048;
/// The most spans per export request.
const BATCH: usize = 512;
/// How long spans wait for more before they are sent.
const LINGER: Duration = Duration::from_millis(500);

enum Msg {
    Spans(Vec<SpanRecord>),
    Flush(oneshot::Sender<()>),
    /// No new spans for a while: send what waits.
    Linger,
}

/// Sends span records to an OTLP exporter from a background task. Cloning shares the task.
#[derive(Clone)]
pub struct Exporter {
    tx: mpsc::Sender<Msg>,
    dropped: std::sync::Arc<std::sync::atomic::AtomicU64>,
    sampler: SamplerSetting,
}

/// An OTLP/HTTP protobuf exporter, configured and not started yet: [`Otlp::from_settings`] needs
/// no runtime, so a bad setting is found before the runner starts; [`Otlp::start`] needs one.
#[derive(Debug)]
pub struct Otlp {
    exporter: opentelemetry_otlp::SpanExporter,
    resource: opentelemetry_sdk::Resource,
    sampler: SamplerSetting,
}

impl Otlp {
    /// The exporter `settings` describe (the `OTEL_*` variables as
    /// `ninetrix_telemetry::Settings::resolve` reads them), `resource` added to the resource
    /// (`service.name` is the settings').
    pub fn from_settings(
        settings: &Settings,
        resource: Vec<opentelemetry::KeyValue>,
    ) -> Result<Otlp, TelemetryError> {
        let resource = opentelemetry_sdk::Resource::builder_empty()
            .with_detector(Box::new(
                opentelemetry_sdk::resource::TelemetryResourceDetector,
            ))
            .with_attributes(
                settings
                    .resource
                    .iter()
                    .map(|(k, v)| opentelemetry::KeyValue::new(k.clone(), v.clone())),
            )
            .with_attributes(resource)
            .with_service_name(settings.service_name.clone())
            .build();
        Ok(Otlp {
            exporter: ninetrix_telemetry::span_exporter(settings)?,
            resource,
            sampler: settings.sampler,
        })
    }

    /// Starts exporting (inside a Tokio runtime).
    pub fn start(self) -> Exporter {
        Exporter::start_sampled(self.exporter, self.resource, self.sampler)
    }
}

/// The W3C `traceparent` of a turn attempt's span (`00-<trace>-<span>-<01 sampled | 00>`): sent
/// with the runner's commits of that attempt, so the API's spans of them are its children.
pub fn traceparent(thread: ThreadId, turn_seq: u64, epoch: u64, sampler: SamplerSetting) -> String {
    let trace = trace_id(thread, turn_seq);
    let span = attempt_span_id(thread, turn_seq, epoch);
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let flags = if sampled(sampler, trace) { "01" } else { "00" };
    format!("00-{}-{}-{flags}", hex(&trace), hex(&span))
}

/// Whether `sampler` keeps the trace `trace_id` (every span of a turn's trace is a root or a
/// child of one made here, so the trace ID decides for all of them alike).
pub fn sampled(sampler: SamplerSetting, trace_id: [u8; 16]) -> bool {
    let ratio = match sampler {
        SamplerSetting::AlwaysOn | SamplerSetting::ParentBasedAlwaysOn => return true,
        SamplerSetting::AlwaysOff | SamplerSetting::ParentBasedAlwaysOff => return false,
        SamplerSetting::TraceIdRatio(r) | SamplerSetting::ParentBasedTraceIdRatio(r) => r,
    };
    // As the SDK's TraceIdRatioBased: the trace ID's low 63 bits against the ratio.
    let mut low = [0; 8];
    low.copy_from_slice(&trace_id[8..]);
    let bound = (ratio.clamp(0.0, 1.0) * (1u64 << 63) as f64) as u64;
    (u64::from_be_bytes(low) >> 1) < bound
}

impl std::fmt::Debug for Exporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Exporter")
    }
}

impl Exporter {
    /// Starts the task that hands spans to `exporter`, describing them with `resource` (on the
    /// current tokio runtime: the OTLP HTTP exporter needs it).
    pub fn start<E>(exporter: E, resource: opentelemetry_sdk::Resource) -> Exporter
    where
        E: opentelemetry_sdk::trace::SpanExporter + 'static,
    {
        Exporter::start_sampled(exporter, resource, SamplerSetting::AlwaysOn)
    }

    /// [`Exporter::start`], keeping only the traces `sampler` keeps.
    pub fn start_sampled<E>(
        mut exporter: E,
        resource: opentelemetry_sdk::Resource,
        sampler: SamplerSetting,
    ) -> Exporter
    where
        E: opentelemetry_sdk::trace::SpanExporter + 'static,
    {
        exporter.set_resource(&resource);
        let (tx, rx) = mpsc::channel(MAX_QUEUED / 8);
        let dropped = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        tokio::spawn(export_loop(exporter, rx, dropped.clone()));
        Exporter {
            tx,
            dropped,
            sampler,
        }
    }

    /// The sampler the exported traces go through.
    pub fn sampler(&self) -> SamplerSetting {
        self.sampler
    }

    /// Queues finished spans; never waits. When the queue is full (the collector is slow or
    /// down), they are dropped.
    pub fn export(&self, mut spans: Vec<SpanRecord>) {
        spans.retain(|s| sampled(self.sampler, s.trace_id));
        if spans.is_empty() {
            return;
        }
        let n = spans.len() as u64;
        if self.tx.try_send(Msg::Spans(spans)).is_err() {
            self.dropped
                .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Sends what is queued, waiting at most `bound`.
    pub async fn flush(&self, bound: Duration) {
        let (done, wait) = oneshot::channel();
        let sent = tokio::time::timeout(bound, self.tx.send(Msg::Flush(done))).await;
        if matches!(sent, Ok(Ok(()))) {
            let _ = tokio::time::timeout(bound, wait).await;
        }
    }

    /// Spans dropped so far because the queue was full or the collector refused them.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(std::sync::atomic::Ordering::Relaxed)
    }
}

async fn export_loop<E: opentelemetry_sdk::trace::SpanExporter>(
    exporter: E,
    mut rx: mpsc::Receiver<Msg>,
    dropped: std::sync::Arc<std::sync::atomic::AtomicU64>,
) {
    let scope = opentelemetry::InstrumentationScope::builder("ninetrix-runner")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build();
    let mut batch: Vec<SpanRecord> = Vec::new();
    let mut waiting: Vec<oneshot::Sender<()>> = Vec::new();
    let mut warned = false;
    loop {
        // Spans wait [`LINGER`] for more (or a full batch, or a flush) before they are sent.
        let msg = if batch.is_empty() {
            rx.recv().await
        } else {
            match tokio::time::timeout(LINGER, rx.recv()).await {
                Ok(m) => m,
                Err(_) => Some(Msg::Linger),
            }
        };
        let closed = msg.is_none();
        match msg {
            Some(Msg::Linger) | None => {}
            Some(Msg::Spans(spans)) => {
                batch.extend(spans);
                if batch.len() > MAX_QUEUED {
                    let over = batch.len() - MAX_QUEUED;
                    batch.drain(..over);
                    dropped.fetch_add(over as u64, std::sync::atomic::Ordering::Relaxed);
                }
                if batch.len() < BATCH {
                    continue;
                }
            }
            Some(Msg::Flush(done)) => waiting.push(done),
        }
        while !batch.is_empty() {
            let n = batch.len().min(BATCH);
            let data: Vec<_> = batch.drain(..n).map(|r| span_data(r, &scope)).collect();
            if let Err(e) = exporter.export(data).await {
                dropped.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
                if !warned {
                    tracing::warn!(
                        "OpenTelemetry: {n} span(s) could not be exported ({e}); spans are dropped while the collector does not take them"
                    );
                    warned = true;
                }
            } else {
                warned = false;
            }
        }
        for w in waiting.drain(..) {
            let _ = w.send(());
        }
        if closed {
            return;
        }
    }
}

fn span_data(
    r: SpanRecord,
    scope: &opentelemetry::InstrumentationScope,
) -> opentelemetry_sdk::trace::SpanData {
    use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
    let context = |trace: [u8; 16], span: [u8; 8], remote| {
        SpanContext::new(
            TraceId::from_bytes(trace),
            SpanId::from_bytes(span),
            TraceFlags::SAMPLED,
            remote,
            TraceState::default(),
        )
    };
    let mut links = opentelemetry_sdk::trace::SpanLinks::default();
    links.links = r
        .links
        .into_iter()
        .map(|l| {
            opentelemetry::trace::Link::new(
                context(l.trace_id, l.span_id, true),
                key_values(l.attributes),
                0,
            )
        })
        .collect();
    opentelemetry_sdk::trace::SpanData {
        span_context: context(r.trace_id, r.span_id, false),
        parent_span_id: r.parent.map_or(SpanId::INVALID, SpanId::from_bytes),
        parent_span_is_remote: false,
        span_kind: match r.kind {
            Kind::Internal => opentelemetry::trace::SpanKind::Internal,
            Kind::Client => opentelemetry::trace::SpanKind::Client,
        },
        name: r.name.into(),
        start_time: r.start.into(),
        end_time: r.end.into(),
        attributes: key_values(r.attributes),
        dropped_attributes_count: 0,
        events: opentelemetry_sdk::trace::SpanEvents::default(),
        links,
        status: match r.status {
            Status::Unset => opentelemetry::trace::Status::Unset,
            Status::Ok => opentelemetry::trace::Status::Ok,
            Status::Error(d) => opentelemetry::trace::Status::error(d),
        },
        instrumentation_scope: scope.clone(),
    }
}

fn key_values(attributes: Vec<(&'static str, Attr)>) -> Vec<opentelemetry::KeyValue> {
    use opentelemetry::{KeyValue, StringValue, Value};
    attributes
        .into_iter()
        .map(|(k, v)| {
            let v = match v {
                Attr::Str(s) => Value::from(s),
                Attr::Int(i) => Value::from(i),
                Attr::Bool(b) => Value::from(b),
                Attr::F64(f) => Value::from(f),
                Attr::Strs(items) => Value::Array(
                    items
                        .into_iter()
                        .map(StringValue::from)
                        .collect::<Vec<_>>()
                        .into(),
                ),
            };
            KeyValue::new(k, v)
        })
        .collect()
}

/// A thread's spans as a runner reports them: the state machine and where its spans go.
#[derive(Clone, Debug)]
pub struct ThreadSpans {
    spans: std::sync::Arc<std::sync::Mutex<Spans>>,
    exporter: Exporter,
}

impl ThreadSpans {
    /// The spans of `info`'s thread, served by the runner of `epoch`, sent to `exporter`.
    pub fn new(info: ThreadInfo, epoch: u64, exporter: Exporter) -> ThreadSpans {
        ThreadSpans {
            spans: std::sync::Arc::new(std::sync::Mutex::new(Spans::new(info, epoch))),
            exporter,
        }
    }

    /// Observes what happened now; queues the spans it finishes. Never waits.
    pub fn observe(&self, what: Observed<'_>) {
        self.observe_at(Utc::now(), what);
    }

    /// Observes what happened at `at`.
    pub fn observe_at(&self, at: DateTime<Utc>, what: Observed<'_>) {
        let records = self
            .spans
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .observe(at, what);
        self.exporter.export(records);
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone as _;
    use ninetrix_proto::api::{HandoffStatus, Usage};
    use ninetrix_proto::effects::Effect;
    use ninetrix_proto::events as ev;
    use ninetrix_proto::message::Role;

    use super::*;

    fn t(ms: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_800_000_000, 0).unwrap() + chrono::Duration::milliseconds(ms)
    }

    fn thread() -> ThreadId {
        "0190a000-0000-7000-8000-000000000001".parse().unwrap()
    }

    fn machine(epoch: u64) -> Spans {
        Spans::new(
            ThreadInfo {
                thread: thread(),
                agent: "helper".into(),
                session: Some("k1".into()),
                pool: Some("p".into()),
                replica: Some(2),
                provider: "anthropic".into(),
                model: "claude-x".into(),
            },
            epoch,
        )
    }

    fn feed(spans: &mut Spans, at: i64, e: TraceEvent) -> Vec<SpanRecord> {
        spans.observe(t(at), Observed::Event(&e))
    }

    fn boot(epoch: u64, boot_count: u64) -> TraceEvent {
        TraceEvent::Boot(ev::Boot {
            epoch,
            boot_count,
            restart_count: boot_count - 1,
            repaired: false,
            version: 0,
            host: None,
        })
    }

    fn started(turn_seq: u64) -> TraceEvent {
        TraceEvent::TurnStarted(ev::TurnStarted {
            turn_seq,
            seq: turn_seq,
            input: "secret input".into(),
        })
    }

    fn llm(stop: &str, latency_ms: u64) -> TraceEvent {
        TraceEvent::LlmCall(ev::LlmCall {
            model: "claude-x-2026".into(),
            input_tokens: 100,
            output_tokens: 20,
            cost_usd: 0.5,
            latency_ms,
            stop_reason: stop.into(),
            tool_calls: u64::from(stop == "tool_use"),
        })
    }

    fn tool(mode: ToolMode, ok: bool) -> ev::ToolCall {
        ev::ToolCall {
            name: "file_write".into(),
            args: "{\"content\": \"secret\"}".into(),
            effect: Effect::Write,
            mode,
            duration_ms: 30,
            ok,
            key: "k-1".into(),
            result: "secret result".into(),
        }
    }

    fn completed(turn_seq: u64, ok: bool) -> TraceEvent {
        TraceEvent::TurnCompleted(ev::TurnCompleted {
            turn_seq,
            seq: turn_seq,
            ok,
            reply: "secret reply".into(),
            usage: Usage {
                input_tokens: 200,
                output_tokens: 40,
                cost_usd: 1.0,
            },
            duration_ms: 1.0,
        })
    }

    fn str_attr<'a>(r: &'a SpanRecord, key: &str) -> Option<&'a str> {
        match r.attr(key) {
            Some(Attr::Str(s)) => Some(s),
            _ => None,
        }
    }

    fn int_attr(r: &SpanRecord, key: &str) -> Option<i64> {
        match r.attr(key) {
            Some(Attr::Int(i)) => Some(*i),
            _ => None,
        }
    }

    fn bool_attr(r: &SpanRecord, key: &str) -> Option<bool> {
        match r.attr(key) {
            Some(Attr::Bool(b)) => Some(*b),
            _ => None,
        }
    }

    /// No attribute carries a message's, an argument's or a result's text.
    fn no_contents(records: &[SpanRecord]) {
        for r in records {
            for (k, v) in &r.attributes {
                assert!(
                    !format!("{v:?}").contains("secret"),
                    "{} {k}: {v:?}",
                    r.name
                );
            }
        }
    }

    #[test]
    fn a_turn_with_two_model_rounds_and_a_tool_call() {
        let mut s = machine(3);
        assert!(feed(&mut s, 0, boot(3, 3)).is_empty());
        assert!(feed(&mut s, 10, started(4)).is_empty());
        let chat1 = feed(&mut s, 1010, llm("tool_use", 900));
        assert!(
            feed(
                &mut s,
                1020,
                TraceEvent::Checkpoint(ev::Checkpoint {
                    version: 9,
                    history_len: 3
                })
            )
            .is_empty()
        );
        let call = feed(
            &mut s,
            1100,
            TraceEvent::ToolCall(tool(ToolMode::Executed, true)),
        );
        let chat2 = feed(&mut s, 2100, llm("end_turn", 500));
        let turn = feed(&mut s, 2200, completed(4, true));
        let all: Vec<SpanRecord> = [&chat1, &call, &chat2, &turn]
            .into_iter()
            .flatten()
            .cloned()
            .collect();
        assert_eq!(all.len(), 4);
        no_contents(&all);

        let agent = &turn[0];
        assert_eq!(agent.name, "invoke_agent helper");
        assert_eq!(agent.kind, Kind::Internal);
        assert_eq!(agent.trace_id, trace_id(thread(), 4));
        assert_eq!(agent.span_id, attempt_span_id(thread(), 4, 3));
        assert_eq!(agent.parent, None);
        assert_eq!((agent.start, agent.end), (t(10), t(2200)));
        assert_eq!(agent.status, Status::Ok);
        assert_eq!(
            str_attr(agent, "gen_ai.operation.name"),
            Some("invoke_agent")
        );
        assert_eq!(str_attr(agent, "gen_ai.agent.name"), Some("helper"));
        assert_eq!(
            str_attr(agent, "ninetrix.thread_id"),
            Some(thread().to_string().as_str())
        );
        assert_eq!(str_attr(agent, "ninetrix.session"), Some("k1"));
        assert_eq!(str_attr(agent, "ninetrix.pool"), Some("p"));
        assert_eq!(int_attr(agent, "ninetrix.replica"), Some(2));
        assert_eq!(int_attr(agent, "ninetrix.epoch"), Some(3));
        assert_eq!(int_attr(agent, "ninetrix.boot_count"), Some(3));
        assert_eq!(int_attr(agent, "ninetrix.turn_seq"), Some(4));
        assert_eq!(int_attr(agent, "ninetrix.commits"), Some(1));
        assert_eq!(bool_attr(agent, "ninetrix.resumed"), Some(false));
        assert_eq!(bool_attr(agent, "ninetrix.fenced"), Some(false));
        assert_eq!(agent.attr("ninetrix.usage.cost_usd"), Some(&Attr::F64(1.0)));
        assert_eq!(int_attr(agent, "gen_ai.usage.input_tokens"), Some(200));
        assert!(agent.links.is_empty());

        let c = &chat1[0];
        assert_eq!(c.name, "chat claude-x");
        assert_eq!(c.kind, Kind::Client);
        assert_eq!(c.trace_id, agent.trace_id);
        assert_eq!(c.parent, Some(agent.span_id));
        assert_eq!((c.start, c.end), (t(110), t(1010)));
        assert_eq!(str_attr(c, "gen_ai.operation.name"), Some("chat"));
        assert_eq!(str_attr(c, "gen_ai.provider.name"), Some("anthropic"));
        assert_eq!(str_attr(c, "gen_ai.request.model"), Some("claude-x"));
        assert_eq!(str_attr(c, "gen_ai.response.model"), Some("claude-x-2026"));
        assert_eq!(
            c.attr("gen_ai.response.finish_reasons"),
            Some(&Attr::Strs(vec!["tool_use".into()]))
        );
        assert_eq!(int_attr(c, "gen_ai.usage.input_tokens"), Some(100));
        assert_eq!(int_attr(c, "gen_ai.usage.output_tokens"), Some(20));
        assert_ne!(chat1[0].span_id, chat2[0].span_id);

        let x = &call[0];
        assert_eq!(x.name, "execute_tool file_write");
        assert_eq!(x.parent, Some(agent.span_id));
        assert_eq!((x.start, x.end), (t(1070), t(1100)));
        assert_eq!(str_attr(x, "gen_ai.tool.name"), Some("file_write"));
        assert_eq!(str_attr(x, "ninetrix.tool.mode"), Some("executed"));
        assert_eq!(str_attr(x, "ninetrix.tool.effect"), Some("write"));
        assert_eq!(str_attr(x, "ninetrix.ledger.key"), Some("k-1"));
        assert_eq!(x.status, Status::Unset);
    }

    #[test]
    fn replayed_and_outcome_unknown_calls_say_so() {
        let mut s = machine(2);
        feed(&mut s, 0, started(1));
        let replayed = feed(
            &mut s,
            40,
            TraceEvent::ToolReplayed(tool(ToolMode::Replayed, true)),
        );
        assert_eq!(
            str_attr(&replayed[0], "ninetrix.tool.mode"),
            Some("replayed")
        );
        assert_eq!(replayed[0].status, Status::Unset);
        let unknown = feed(
            &mut s,
            80,
            TraceEvent::ToolCall(tool(ToolMode::OutcomeUnknown, false)),
        );
        assert_eq!(
            str_attr(&unknown[0], "ninetrix.tool.mode"),
            Some("outcome_unknown")
        );
        assert_eq!(str_attr(&unknown[0], "error.type"), Some("outcome_unknown"));
        assert!(matches!(&unknown[0].status, Status::Error(d) if d.starts_with("outcome unknown")));
        let failed = feed(
            &mut s,
            90,
            TraceEvent::ToolCall(tool(ToolMode::ReExecuted, false)),
        );
        assert_eq!(
            str_attr(&failed[0], "ninetrix.tool.mode"),
            Some("re-executed")
        );
        assert_eq!(str_attr(&failed[0], "error.type"), Some("tool_error"));
        // Three children, three IDs.
        let ids: HashSet<[u8; 8]> = [&replayed[0], &unknown[0], &failed[0]]
            .iter()
            .map(|r| r.span_id)
            .collect();
        assert_eq!(ids.len(), 3);
    }

    #[test]
    fn a_resumed_turn_reports_the_interrupted_attempt_and_links_to_it() {
        // Epoch 1 began turn 2 at t(-5000) and died; epoch 2 repairs and resumes it.
        let mut s = machine(2);
        feed(&mut s, 0, boot(2, 2));
        let none = s.observe(
            t(1),
            Observed::Interrupted(TurnAttempt {
                epoch: 1,
                started_at: t(-5000),
                turn_boot: 0,
            }),
        );
        assert!(none.is_empty());
        feed(
            &mut s,
            2,
            TraceEvent::Repair(ev::Repair {
                truncate_to: 3,
                dropped: vec![ev::DroppedMessage {
                    index: 3,
                    role: Role::Assistant,
                    call_ids: vec!["toolu_1".into(), "toolu_2".into()],
                    reason: "interrupted".into(),
                }],
                mode: "truncate".into(),
            }),
        );
        let resumed = feed(
            &mut s,
            10,
            TraceEvent::TurnResumed(ev::TurnResumed {
                turn_seq: 2,
                seq: 2,
            }),
        );
        assert_eq!(
            resumed.len(),
            1,
            "the interrupted attempt is reported at once"
        );
        let old = &resumed[0];
        assert_eq!(old.name, "invoke_agent helper");
        assert_eq!(old.trace_id, trace_id(thread(), 2));
        assert_eq!(old.span_id, attempt_span_id(thread(), 2, 1));
        assert_eq!((old.start, old.end), (t(-5000), t(10)));
        assert_eq!(
            old.status,
            Status::Error("interrupted: the runner stopped before the turn ended".into())
        );
        assert_eq!(bool_attr(old, "ninetrix.interrupted"), Some(true));
        assert_eq!(int_attr(old, "ninetrix.epoch"), Some(1));

        let chat = feed(&mut s, 500, llm("end_turn", 100));
        let done = feed(&mut s, 600, completed(2, true));
        let new = &done[0];
        assert_eq!(new.trace_id, old.trace_id, "one trace for every attempt");
        assert_eq!(new.span_id, attempt_span_id(thread(), 2, 2));
        assert_eq!(chat[0].parent, Some(new.span_id));
        assert_eq!(bool_attr(new, "ninetrix.resumed"), Some(true));
        assert_eq!(int_attr(new, "ninetrix.restart_count"), Some(1));
        assert_eq!(
            new.attr("ninetrix.repair.dropped_ids"),
            Some(&Attr::Strs(vec!["toolu_1".into(), "toolu_2".into()]))
        );
        assert_eq!(new.links.len(), 1);
        assert_eq!(new.links[0].trace_id, old.trace_id);
        assert_eq!(new.links[0].span_id, old.span_id);
        assert_eq!(
            new.links[0].attributes,
            vec![("ninetrix.link", Attr::from("resumed_from"))]
        );
        assert_eq!(new.attr("ninetrix.interrupted"), None);
    }

    #[test]
    fn a_fenced_runner_ends_its_attempt_as_fenced() {
        let mut s = machine(5);
        feed(&mut s, 0, started(7));
        let fenced = s.observe(t(300), Observed::Fenced);
        assert_eq!(fenced.len(), 1);
        assert_eq!(bool_attr(&fenced[0], "ninetrix.fenced"), Some(true));
        assert!(matches!(&fenced[0].status, Status::Error(d) if d.starts_with("fenced")));
        assert_eq!(fenced[0].end, t(300));
        // Nothing is open any more.
        assert!(s.observe(t(400), Observed::Fenced).is_empty());
        assert!(feed(&mut s, 500, completed(7, true)).is_empty());
    }

    #[test]
    fn approval_and_handoff_waits_are_spans_and_totals() {
        let mut s = machine(1);
        feed(&mut s, 0, started(1));
        let id = ninetrix_proto::ApprovalId::new_v7();
        feed(
            &mut s,
            1000,
            TraceEvent::ApprovalRequested(ev::ApprovalRequested {
                id,
                kind: ApprovalKind::Approval,
                tool: "shell".into(),
                args: "secret args".into(),
                timeout_secs: 60,
            }),
        );
        let settled = |s: &mut Spans, at| {
            s.observe(
                t(at),
                Observed::ApprovalSettled {
                    id: id.to_string(),
                    kind: ApprovalKind::Approval,
                    tool: "shell".into(),
                    status: ApprovalStatus::Approved,
                    requested_at: t(900),
                },
            )
        };
        let wait = settled(&mut s, 6000);
        assert_eq!(wait.len(), 1);
        assert_eq!(wait[0].name, "await_approval shell");
        assert_eq!((wait[0].start, wait[0].end), (t(1000), t(6000)));
        assert_eq!(int_attr(&wait[0], "ninetrix.approval.wait_ms"), Some(5000));
        assert_eq!(
            str_attr(&wait[0], "ninetrix.approval.status"),
            Some("approved")
        );
        assert!(settled(&mut s, 7000).is_empty(), "reported once");

        let collaborator: ThreadId = "0190a000-0000-7000-8000-000000000002".parse().unwrap();
        let handoff = feed(
            &mut s,
            10_000,
            TraceEvent::HandoffSettled(ev::HandoffSettled {
                delivery_key: "handoff:k".into(),
                agent: "researcher".into(),
                thread_id: collaborator,
                status: HandoffStatus::Replied,
                reply: "secret reply".into(),
                cost_usd: 0.25,
                waited_ms: 3000,
            }),
        );
        assert_eq!(handoff[0].name, "await_handoff researcher");
        assert_eq!(handoff[0].start, t(7000));
        assert_eq!(
            int_attr(&handoff[0], "ninetrix.handoff.wait_ms"),
            Some(3000)
        );
        let done = feed(&mut s, 11_000, completed(1, true));
        assert_eq!(int_attr(&done[0], "ninetrix.approval.wait_ms"), Some(5000));
        assert_eq!(int_attr(&done[0], "ninetrix.handoff.wait_ms"), Some(3000));
        no_contents(&[wait, handoff, done].concat());
    }

    #[test]
    fn a_failed_turn_says_why_without_its_reply() {
        let mut s = machine(1);
        feed(&mut s, 0, started(1));
        feed(
            &mut s,
            10,
            TraceEvent::BudgetExceeded(ev::BudgetExceeded {
                budget_usd: 0.1,
                spent_usd: 0.2,
            }),
        );
        let done = feed(&mut s, 20, completed(1, false));
        assert_eq!(str_attr(&done[0], "error.type"), Some("budget_exceeded"));
        assert!(matches!(&done[0].status, Status::Error(d) if !d.contains("secret")));
    }

    #[test]
    fn sampling_keeps_or_drops_a_whole_trace() {
        let ids: Vec<[u8; 16]> = (0..1000).map(|n| trace_id(thread(), n)).collect();
        assert!(ids.iter().all(|&id| sampled(SamplerSetting::AlwaysOn, id)));
        assert!(!ids.iter().any(|&id| sampled(SamplerSetting::AlwaysOff, id)));
        let kept = ids
            .iter()
            .filter(|&&id| sampled(SamplerSetting::TraceIdRatio(0.25), id))
            .count();
        assert!((150..350).contains(&kept), "{kept} of 1000 at 0.25");
        // The same answer for every attempt and child of a turn: they share the trace ID.
        let id = trace_id(thread(), 7);
        assert_eq!(
            sampled(SamplerSetting::ParentBasedTraceIdRatio(0.5), id),
            sampled(SamplerSetting::ParentBasedTraceIdRatio(0.5), id)
        );
    }

    #[tokio::test]
    async fn the_exporter_sends_the_records_over_otlp_http() {
        use opentelemetry_otlp::WithExportConfig as _;
        let receiver = ninetrix_telemetry::receiver::Receiver::start()
            .await
            .unwrap();
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(receiver.traces_url())
            .build()
            .unwrap();
        let resource = opentelemetry_sdk::Resource::builder()
            .with_service_name("helper")
            .build();
        let export = Exporter::start(exporter, resource);
        let mut s = machine(2);
        s.observe(
            t(0),
            Observed::Interrupted(TurnAttempt {
                epoch: 1,
                started_at: t(-100),
                turn_boot: 0,
            }),
        );
        let mut records = feed(
            &mut s,
            5,
            TraceEvent::TurnResumed(ev::TurnResumed {
                turn_seq: 1,
                seq: 1,
            }),
        );
        records.extend(feed(&mut s, 50, llm("end_turn", 10)));
        records.extend(feed(&mut s, 60, completed(1, true)));
        export.export(records);
        export.flush(Duration::from_secs(10)).await;
        let got = receiver
            .wait_for(|s| s.len() == 3, Duration::from_secs(10))
            .await
            .unwrap();
        let hex = |b: &[u8]| b.iter().map(|b| format!("{b:02x}")).collect::<String>();
        let old = got
            .iter()
            .find(|s| s.bool_attr("ninetrix.interrupted") == Some(true))
            .unwrap();
        let new = got
            .iter()
            .find(|s| s.name == "invoke_agent helper" && s.links.len() == 1)
            .unwrap();
        let chat = got.iter().find(|s| s.name == "chat claude-x").unwrap();
        assert_eq!(old.span_id, hex(&attempt_span_id(thread(), 1, 1)));
        assert_eq!(new.trace_id, hex(&trace_id(thread(), 1)));
        assert_eq!(new.links[0].span_id, old.span_id);
        assert_eq!(chat.parent_span_id.as_deref(), Some(new.span_id.as_str()));
        assert_eq!(
            chat.resource.get("service.name").and_then(|v| v.as_str()),
            Some("helper")
        );
        assert_eq!(chat.start_unix_nano, 1_800_000_000_040_000_000);
        assert_eq!(export.dropped(), 0);
    }

    #[tokio::test]
    async fn an_unreachable_collector_drops_spans_without_waiting() {
        use opentelemetry_otlp::WithExportConfig as _;
        // A port nothing listens on.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(format!("http://127.0.0.1:{port}/v1/traces"))
            .build()
            .unwrap();
        let export = Exporter::start(exporter, opentelemetry_sdk::Resource::builder().build());
        let mut s = machine(1);
        feed(&mut s, 0, started(1));
        // Far more than the queue holds: every call returns at once.
        for i in 0..(MAX_QUEUED as i64 * 2) {
            export.export(feed(&mut s, i, llm("tool_use", 1)));
        }
        export.flush(Duration::from_secs(10)).await;
        assert!(export.dropped() > 0);
    }
}
