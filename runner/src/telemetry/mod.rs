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

use chrono::{DateTime, Utc};
use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{ApprovalKind, ApprovalStatus, TurnAttempt};
use ninetrix_proto::events::TraceEvent;
use sha2::{Digest, Sha256};

mod export;
mod spans;
#[cfg(test)]
mod testkit;

pub use export::{Exporter, MAX_QUEUED, Otlp, sampled, traceparent};
pub use spans::Spans;

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
