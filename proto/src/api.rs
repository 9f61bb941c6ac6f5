//! The checkpoint API's request and response types (docs/design.md §7), shared by the server, the runner
//! and the CLI so the two sides cannot drift apart.
//!
//! Every request type rejects unknown fields. Times are RFC 3339 in UTC. No type here holds a
//! secret value.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::agentfile::Effect;
use crate::ids::{ApprovalId, ThreadId};
use crate::message::Message;

#[cfg(feature = "openapi")]
use utoipa::ToSchema;

/// Declares [`ErrorCode`]: each variant with its wire name, in one place.
macro_rules! error_codes {
    ($($(#[doc = $doc:literal])* $variant:ident = $name:literal,)*) => {
        /// The stable machine-readable code of an error response. Server and clients match on
        /// it; the text beside it is for people. A code this build does not know (from a newer
        /// server) reads as [`ErrorCode::Other`], never as an error.
        #[derive(Clone, Debug, PartialEq, Eq, Hash)]
        pub enum ErrorCode {
            $($(#[doc = $doc])* $variant,)*
            /// A code this build does not know.
            Other(String),
        }

        impl ErrorCode {
            /// Every known code, in declaration order.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant,)*];

            /// The wire name.
            pub fn as_str(&self) -> &str {
                match self {
                    $(ErrorCode::$variant => $name,)*
                    ErrorCode::Other(name) => name,
                }
            }

            /// The code for a wire name (unknown names become [`ErrorCode::Other`]).
            pub fn parse(name: &str) -> ErrorCode {
                match name {
                    $($name => ErrorCode::$variant,)*
                    other => ErrorCode::Other(other.to_string()),
                }
            }
        }
    };
}

error_codes! {
    /// 401: no usable bearer token.
    Unauthorized = "unauthorized",
    /// 403: a valid token that may not do this (another thread's, or a runner's on an admin route).
    Forbidden = "forbidden",
    /// 404: no such thread, version or ledger entry.
    NotFound = "not_found",
    /// 405: the route exists but not with this method.
    MethodNotAllowed = "method_not_allowed",
    /// 409: another runner claimed the thread; the writer must stop.
    Fenced = "fenced",
    /// 409: the checkpoint's parent is not the latest version.
    VersionConflict = "version_conflict",
    /// 409: the ledger entry already has a different outcome.
    AlreadyCompleted = "already_completed",
    /// 400: the body is not JSON.
    BadJson = "bad_json",
    /// 400: the body could not be read.
    BadBody = "bad_body",
    /// 400: a path parameter is malformed (e.g. not a UUID).
    InvalidPath = "invalid_path",
    /// 400: a query parameter is malformed.
    InvalidQuery = "invalid_query",
    /// 400: a header is malformed (e.g. `Last-Event-ID`).
    InvalidHeader = "invalid_header",
    /// 413: the body is larger than the server's limit (also 414 and 431: a request target or
    /// head larger than the server reads).
    TooLarge = "too_large",
    /// 400: not an HTTP/1.1 request the server can parse (a malformed request line or header).
    MalformedRequest = "malformed_request",
    /// 415: the body is not declared as `application/json`.
    UnsupportedMediaType = "unsupported_media_type",
    /// 422: JSON of the wrong shape (missing or unknown fields, wrong types).
    InvalidBody = "invalid_body",
    /// 422: a number outside what the store can hold.
    OutOfRange = "out_of_range",
    /// 422: a value that cannot be stored as JSON.
    Unencodable = "unencodable",
    /// 422: a truncation past the end of the history.
    InvalidTruncate = "invalid_truncate",
    /// 422: a checkpoint state that contradicts the history.
    InvalidState = "invalid_state",
    /// 422: a ledger key that is empty or too long.
    InvalidKey = "invalid_key",
    /// 422: a trace event without a type.
    InvalidEvent = "invalid_event",
    /// 409: the approval request was already decided differently (the body carries the first
    /// decision).
    AlreadyDecided = "already_decided",
    /// 409: the approval request expired before this decision; it counts as rejected.
    ApprovalExpired = "approval_expired",
    /// 409: a claim names a session that is not the thread's.
    SessionMismatch = "session_mismatch",
    /// 409: labels other than the thread's: a thread's pool, agent and replica are fixed when it
    /// is created (by the admin's token mint or `POST /v1/sessions`) and never change.
    LabelsFixed = "labels_fixed",
    /// 422: a decision that does not fit the request (an answer to an approval, a rejection
    /// without a reason, …).
    InvalidDecision = "invalid_decision",
    /// 403: a handoff to an agent that is not one of the caller's collaborators in the pool as
    /// `ninetrix up` last recorded it (or whose pool runs no such agent).
    NotCollaborator = "not_collaborator",
    /// 401: a webhook delivery whose signature is missing, does not match, or (Standard
    /// Webhooks) whose timestamp is outside the trigger's tolerance.
    BadSignature = "bad_signature",
    /// 429: more webhook deliveries than the trigger's `rate_limit` per minute.
    RateLimited = "rate_limited",
    /// 429: more webhook deliveries in flight from one address than the server takes at once
    /// (`ninetrix api --hook-requests-per-peer`). The connection is closed; retry after the
    /// deliveries in flight end.
    TooManyInFlight = "too_many_in_flight",
    /// 422: a trigger registration that cannot be used (a bad schedule, template or secret).
    InvalidTrigger = "invalid_trigger",
    /// 422: a webhook body that does not fit the trigger's message or session template (a
    /// missing field, a non-JSON body).
    TemplateFailed = "template_failed",
    /// 410: the thread was purged. A purged thread stays purged: its tokens are refused, its
    /// ID is never used again (a new conversation is a new thread).
    Purged = "purged",
    /// 409: a ledger key or an inbox `dedupe_key` already stored with a different payload (tool,
    /// arguments, turn, effect; or message content). The stored record is unchanged.
    KeyReused = "key_reused",
    /// 422 (400 in a path or query): text with U+0000 (NUL), which the API does not store on
    /// any backend. The message names the field.
    InvalidText = "invalid_text",
    /// 422: messages no provider accepts (a tool result for a call the history does not make, a
    /// duplicate message ID, a tool message with other blocks than results, a message without
    /// blocks).
    InvalidHistory = "invalid_history",
    /// 422: a list in the body has more items than one request may carry (a commit's `append`,
    /// `intents`, `outcomes` or `approvals`: [`MAX_LIST_ITEMS`] each). The message names the
    /// field and the limit: send the rest in further requests.
    TooMany = "too_many",
    /// 408: the request body stalled: no bytes arrived for longer than the server's body
    /// timeout (`ninetrix api --body-timeout`). The connection is closed; send the request again.
    RequestTimeout = "request_timeout",
    /// 500: the server failed; its log has the cause.
    Internal = "internal",
    /// 503: the database does not answer.
    NotReady = "not_ready",
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ErrorCode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ErrorCode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = std::borrow::Cow::<'de, str>::deserialize(d)?;
        Ok(ErrorCode::parse(&name))
    }
}

/// The body of every error response.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ErrorBody {
    /// A stable machine-readable code, e.g. `fenced`, `version_conflict`, `not_found`.
    #[cfg_attr(feature = "openapi", schema(value_type = String, example = "fenced"))]
    pub code: ErrorCode,
    /// What went wrong, for people.
    pub message: String,
}

/// The largest integer the API stores: counters, epochs and versions are 64-bit signed in the
/// database, so requests may not go past this.
pub const MAX_STORED_INT: u64 = i64::MAX as u64;

/// The longest `wait` a long-poll takes, in seconds (an hour). A server holds a request at most
/// its `--max-wait` (60 s by default, at most this); a larger `wait` is a malformed query, not a
/// request to hold a connection for ever.
pub const MAX_WAIT_SECS: u64 = 3600;

/// Deserializers for the integers of request bodies. JSON Schema (and so the OpenAPI document)
/// counts `2.0` as the integer 2, so these take a whole number however it is spelled; a fraction,
/// a negative number or one past the bound is refused.
pub(crate) mod int {
    use serde::de::{Deserializer, Error, Visitor};

    /// A whole number from 0 to `max`.
    struct Whole {
        max: u64,
    }

    impl Visitor<'_> for Whole {
        type Value = u64;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "a whole number from 0 to {}", self.max)
        }

        fn visit_u64<E: Error>(self, v: u64) -> Result<u64, E> {
            if v <= self.max {
                Ok(v)
            } else {
                Err(E::custom(format_args!("{v} is larger than {}", self.max)))
            }
        }

        fn visit_i64<E: Error>(self, v: i64) -> Result<u64, E> {
            u64::try_from(v)
                .map_err(|_| E::custom(format_args!("{v} is negative")))
                .and_then(|v| self.visit_u64(v))
        }

        fn visit_f64<E: Error>(self, v: f64) -> Result<u64, E> {
            // Every whole float below 2^64 converts exactly; the bound check does the rest.
            if v.fract() == 0.0 && (0.0..18_446_744_073_709_551_616.0).contains(&v) {
                self.visit_u64(v as u64)
            } else {
                Err(E::custom(format_args!(
                    "{v} is not a whole number from 0 to {}",
                    self.max
                )))
            }
        }
    }

    /// Any `u64`.
    pub(crate) fn any<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        d.deserialize_any(Whole { max: u64::MAX })
    }

    /// A stored integer: 0 to [`super::MAX_STORED_INT`].
    pub(crate) fn stored<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        d.deserialize_any(Whole {
            max: super::MAX_STORED_INT,
        })
    }

    /// An optional stored integer.
    pub(crate) fn stored_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        Option::<Stored>::deserialize(d).map(|o| o.map(|Stored(v)| v))
    }

    /// A `u32`.
    pub(crate) fn u32_req<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
        Small::deserialize(d).map(|Small(v)| v)
    }

    /// An optional `u32`.
    pub(crate) fn u32_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
        let v = Option::<Small>::deserialize(d)?;
        Ok(v.map(|Small(v)| v))
    }

    use serde::Deserialize;

    struct Stored(u64);

    impl<'de> Deserialize<'de> for Stored {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            stored(d).map(Stored)
        }
    }

    struct Small(u32);

    impl<'de> Deserialize<'de> for Small {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let v = d.deserialize_any(Whole {
                max: u64::from(u32::MAX),
            })?;
            u32::try_from(v).map(Small).map_err(D::Error::custom)
        }
    }
}

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

/// `POST /v1/runners/threads/{id}/claim`: the body is the thread's labels, all optional. Labels
/// are fixed when the thread is created; a claim only restates them (409 `labels_fixed` for any
/// other value, `session_mismatch` for another session), it never changes them.
pub type ClaimRequest = ThreadLabels;

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

/// Where a ledger entry stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ToolCallStatus {
    /// Recorded before executing; no outcome yet.
    Intent,
    /// Executed; the result is stored.
    Completed,
    /// Executed and failed; the error is stored.
    Failed,
}

/// `POST /v1/runners/threads/{id}/tool-calls`: record the intent to run a tool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ToolCallIntent {
    /// The writer's epoch. Past the stored range it can only be stale (409 `fenced`).
    #[serde(deserialize_with = "int::any")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
    pub epoch: u64,
    /// The ledger key (docs/design.md §6.5): 1 to 128 characters.
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 128))]
    pub key: String,
    /// The turn the call belongs to.
    #[serde(deserialize_with = "int::stored")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
    pub turn_seq: u64,
    /// The tool's name.
    pub tool: String,
    /// Its arguments: a JSON object.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub args: serde_json::Value,
    /// Its effect class.
    pub effect: Effect,
}

/// `PUT /v1/runners/threads/{id}/tool-calls/{key}`: record the outcome.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ToolCallCompletion {
    /// The writer's epoch. Past the stored range it can only be stale (409 `fenced`).
    #[serde(deserialize_with = "int::any")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
    pub epoch: u64,
    /// Whether the tool succeeded.
    pub ok: bool,
    /// Its result (or error text), as given to the model.
    pub result: String,
}

/// One ledger entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ToolCallRecord {
    /// The ledger key.
    pub key: String,
    /// The turn.
    pub turn_seq: u64,
    /// The tool.
    pub tool: String,
    /// Its arguments.
    #[cfg_attr(feature = "openapi", schema(value_type = Value))]
    pub args: serde_json::Value,
    /// Its effect class.
    pub effect: Effect,
    /// Where it stands.
    pub status: ToolCallStatus,
    /// The outcome, once recorded.
    pub result: Option<String>,
    /// The epoch that recorded the intent.
    pub intent_epoch: u64,
    /// The epoch that recorded the outcome.
    pub completed_epoch: Option<u64>,
    /// When the intent was recorded.
    pub created_at: DateTime<Utc>,
    /// When the outcome was recorded.
    pub completed_at: Option<DateTime<Utc>>,
}

/// A ledger intent inside a [`CommitRequest`]: a [`ToolCallIntent`] without its own epoch (the
/// commit's epoch records it).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CommitIntent {
    /// The ledger key (docs/design.md §6.5): 1 to 128 characters.
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 128))]
    pub key: String,
    /// The turn the call belongs to.
    #[serde(deserialize_with = "int::stored")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
    pub turn_seq: u64,
    /// The tool's name.
    pub tool: String,
    /// Its arguments: a JSON object.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub args: serde_json::Value,
    /// Its effect class.
    pub effect: Effect,
}

/// A ledger outcome inside a [`CommitRequest`]: a [`ToolCallCompletion`] for `key`, without its
/// own epoch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CommitOutcome {
    /// The ledger key: 1 to 128 characters, recorded earlier or among this commit's intents.
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 128))]
    pub key: String,
    /// Whether the tool succeeded.
    pub ok: bool,
    /// Its result (or error text), as given to the model.
    pub result: String,
}

/// Most items in each list of one commit or checkpoint (`append`, `intents`, `outcomes`,
/// `approvals`; events have their own limit of 1,000): one request is one transaction, so a huge
/// one would hold every other writer of the store behind it. More is `422 too_many`.
pub const MAX_LIST_ITEMS: usize = 1000;

/// `POST /v1/runners/threads/{id}/commit`: everything one durable step of a turn needs, in one
/// transaction — a checkpoint version (as [`CheckpointRequest`]; its `state` carries the inbox
/// cursor), the ledger intents of the calls about to run, and the outcomes of calls that ran.
/// Fenced and chained like a checkpoint; if any part is refused, nothing is written.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CommitRequest {
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
    /// The small state after this version (with the inbox cursor).
    pub state: CheckpointState,
    /// Ledger intents to record, in order. A key already in the ledger keeps its record (which
    /// comes back in `records`); nothing is overwritten. At most 1,000.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_items = 1000))]
    pub intents: Vec<CommitIntent>,
    /// Outcomes to record, after the intents. The first outcome of a key wins: the same one again
    /// is harmless, a different one is 409 `already_completed`. At most 1,000.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_items = 1000))]
    pub outcomes: Vec<CommitOutcome>,
    /// Trace events stored with this step, in order, after those already stored — in the same
    /// transaction, so an event that rides on a commit (a turn's `turn_completed` on its final
    /// one) is stored exactly when the step is, and costs no write of its own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<NewEvent>,
    /// Requests to a person stored with this step (the model response whose gated calls they
    /// are): one per gated call, keyed by the call's ledger key. A key that already has a
    /// request keeps it; an ID another request has is 409 `key_reused`. At most 1,000.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(max_items = 1000))]
    pub approvals: Vec<NewApproval>,
    /// The reply to the handoff whose task this turn did, stored with the step that ends the
    /// turn: the caller's waiting call gets it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff_reply: Option<HandoffReply>,
}

/// The answer to a commit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct CommitResponse {
    /// The new version.
    pub version: u64,
    /// The history length after it.
    pub history_len: u64,
    /// The ledger record of each intent, in the request's order, as stored when the commit
    /// ended: `intent` by this epoch for a new key; for a key already in the ledger, the record
    /// found (a `completed` one is to be replayed, not executed again).
    pub records: Vec<ToolCallRecord>,
}

/// `POST /v1/threads/{id}/messages`: put work in a thread's inbox.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct EnqueueRequest {
    /// The message text.
    pub content: String,
    /// A key that makes retries safe: a repeated key returns the original seq. 1 to 128
    /// characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 128))]
    pub dedupe_key: Option<String>,
}

/// The answer to an enqueue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct EnqueueResponse {
    /// The message's seq in the thread's inbox.
    pub seq: u64,
    /// True when the dedupe key was seen before and no new message was added.
    pub duplicate: bool,
}

/// One inbox message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct InboxMessage {
    /// Monotonic per thread, from 1.
    pub seq: u64,
    /// The message text.
    pub content: String,
    /// The dedupe key it was sent with.
    pub dedupe_key: Option<String>,
    /// When it was enqueued.
    pub created_at: DateTime<Utc>,
    /// For a task another agent handed over: who, and the chain it belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff: Option<HandoffOrigin>,
}

/// A trace event as a runner sends it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NewEvent {
    /// The event's type, e.g. `boot`, `turn_completed`: 1 to 64 of `a-z`, `0-9`, `_`, `.` and
    /// `-`, starting with a letter (what a [`TraceEvent`](crate::events::TraceEvent) is called;
    /// types this build does not know are kept, for newer runners).
    #[serde(rename = "type")]
    #[cfg_attr(
        feature = "openapi",
        schema(min_length = 1, max_length = 64, pattern = "^[a-z][a-z0-9_.-]{0,63}$")
    )]
    pub kind: String,
    /// Its data: a JSON object (`{}` when left out).
    #[serde(default = "empty_object")]
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub data: serde_json::Value,
}

/// `{}`: what a left-out object means.
fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(serde_json::Map::new())
}

/// `POST /v1/runners/threads/{id}/events`: a batch of events.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct EventsRequest {
    /// The writer's epoch. Past the stored range it can only be stale (409 `fenced`).
    #[serde(deserialize_with = "int::any")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
    pub epoch: u64,
    /// The events, in order.
    pub events: Vec<NewEvent>,
}

/// The answer to an events batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct EventsAppended {
    /// The seq of the last event stored (0 if the batch was empty).
    pub last_seq: u64,
}

/// A stored trace event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Event {
    /// Monotonic per thread, from 1: the SSE `id:`.
    pub seq: u64,
    /// The event's type.
    #[serde(rename = "type")]
    pub kind: String,
    /// Its data.
    #[cfg_attr(feature = "openapi", schema(value_type = Value))]
    pub data: serde_json::Value,
    /// The epoch of the runner that sent it.
    pub epoch: u64,
    /// When it was stored.
    pub created_at: DateTime<Utc>,
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

/// `POST /v1/tokens/runner`: mint a runner token for one thread.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RunnerTokenRequest {
    /// The thread the token is for (created if new).
    #[cfg_attr(feature = "openapi", schema(value_type = uuid::Uuid))]
    pub thread_id: ThreadId,
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
}

impl RunnerTokenRequest {
    /// The labels it carries.
    pub fn labels(&self) -> ThreadLabels {
        ThreadLabels {
            pool: self.pool.clone(),
            agent: self.agent.clone(),
            replica: self.replica,
            session: None,
        }
    }
}

/// A minted runner token.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct RunnerTokenResponse {
    /// The thread it is bound to.
    #[cfg_attr(feature = "openapi", schema(value_type = uuid::Uuid))]
    pub thread_id: ThreadId,
    /// The bearer token.
    pub token: String,
}

impl std::fmt::Debug for RunnerTokenResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunnerTokenResponse")
            .field("thread_id", &self.thread_id)
            .field("token", &"<redacted>")
            .finish()
    }
}

/// `POST /v1/sessions`: the session `key` of agent `agent` in pool `pool` — its thread is created
/// on first use and the same ever after.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SessionRequest {
    /// The pool: a pool name (`[a-z0-9][a-z0-9_-]*`, at most 48 characters, as in the agentfile).
    #[cfg_attr(
        feature = "openapi",
        schema(min_length = 1, max_length = 48, pattern = "^[a-z0-9][a-z0-9_-]*$")
    )]
    pub pool: String,
    /// The agent: an agent name (`[a-z0-9][a-z0-9_-]*`, at most 48 characters, as in the agentfile).
    #[cfg_attr(
        feature = "openapi",
        schema(min_length = 1, max_length = 48, pattern = "^[a-z0-9][a-z0-9_-]*$")
    )]
    pub agent: String,
    /// The session key: 1 to 200 characters, none of them a control, bidirectional-control or
    /// line-separator character (`text::is_unsafe_char`).
    #[cfg_attr(
        feature = "openapi",
        schema(
            min_length = 1,
            max_length = 200,
            pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F\\u061C\\u200E\\u200F\\u2028-\\u202E\\u2066-\\u2069]+$"
        )
    )]
    pub key: String,
}

/// `PUT /v1/pools/{pool}/agents/{agent}`: how many replicas the agent runs now (what sessions
/// are spread over), and the agents it may hand work to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AgentReplicas {
    /// 1 to 1000.
    #[serde(deserialize_with = "int::u32_req")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 1000))]
    pub replicas: u32,
    /// Its collaborators (agents of the same pool), at most 64; none when left out.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<AgentName>, max_items = 64))]
    pub collaborators: Vec<String>,
}

/// The thread of one replica of a pool's agent, as the API keeps it (`POST
/// /v1/runners/pools/{pool}/agents/{agent}/replicas/{replica}`): what a runner that knows only
/// its replica number (a Swarm task's slot, a pod's ordinal) claims and serves.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ReplicaThread {
    /// The replica's thread.
    #[cfg_attr(feature = "openapi", schema(value_type = uuid::Uuid))]
    pub thread_id: ThreadId,
    /// The replica number (1-based).
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 1000))]
    pub replica: u32,
    /// Whether the thread was made by this request: the replica's first boot, or its first
    /// after its thread was purged.
    pub created: bool,
    /// The runner token of the thread.
    pub token: String,
}

impl std::fmt::Debug for ReplicaThread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicaThread")
            .field("thread_id", &self.thread_id)
            .field("replica", &self.replica)
            .field("created", &self.created)
            .field("token", &"<redacted>")
            .finish()
    }
}

/// A session with work for its owner: messages after its cursor, or a turn in progress.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct SessionWork {
    /// The session's thread.
    #[cfg_attr(feature = "openapi", schema(value_type = uuid::Uuid))]
    pub thread_id: ThreadId,
    /// The session key.
    pub key: String,
    /// Where the thread stands.
    pub status: ThreadStatus,
    /// The last inbox seq.
    pub inbox_seq: u64,
    /// The last inbox seq applied (the stored cursor).
    pub inbox_cursor: u64,
    /// The runner token of the session's thread: what the owner claims and serves it with.
    pub token: String,
}

impl std::fmt::Debug for SessionWork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionWork")
            .field("thread_id", &self.thread_id)
            .field("key", &self.key)
            .field("status", &self.status)
            .field("inbox_seq", &self.inbox_seq)
            .field("inbox_cursor", &self.inbox_cursor)
            .field("token", &"<redacted>")
            .finish()
    }
}

/// `POST /v1/tokens/agent`: mint the token an agent's replicas find their sessions' work with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AgentTokenRequest {
    /// The pool: a pool name (`[a-z0-9][a-z0-9_-]*`, at most 48 characters, as in the agentfile).
    #[cfg_attr(
        feature = "openapi",
        schema(min_length = 1, max_length = 48, pattern = "^[a-z0-9][a-z0-9_-]*$")
    )]
    pub pool: String,
    /// The agent: an agent name (`[a-z0-9][a-z0-9_-]*`, at most 48 characters, as in the agentfile).
    #[cfg_attr(
        feature = "openapi",
        schema(min_length = 1, max_length = 48, pattern = "^[a-z0-9][a-z0-9_-]*$")
    )]
    pub agent: String,
}

/// A minted agent token.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct AgentTokenResponse {
    /// The pool.
    pub pool: String,
    /// The agent.
    pub agent: String,
    /// The bearer token.
    pub token: String,
}

impl std::fmt::Debug for AgentTokenResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentTokenResponse")
            .field("pool", &self.pool)
            .field("agent", &self.agent)
            .field("token", &"<redacted>")
            .finish()
    }
}

/// What a request to a person asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ApprovalKind {
    /// Approve or reject a gated tool call before it runs.
    Approval,
    /// Answer an `ask_human` question; the answer is the call's result.
    Question,
}

impl ApprovalKind {
    /// The name used in the API and in storage.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalKind::Approval => "approval",
            ApprovalKind::Question => "question",
        }
    }

    /// Parses the stored name.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "approval" => Some(ApprovalKind::Approval),
            "question" => Some(ApprovalKind::Question),
            _ => None,
        }
    }
}

/// Where a request to a person stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    /// Waiting for a person.
    Pending,
    /// Approved: the call runs (through the ledger, once).
    Approved,
    /// Rejected: the call does not run; the model gets the reason as an error result.
    Rejected,
    /// A question answered: the answer is the call's result.
    Answered,
    /// Not decided in time: counts as a rejection; the call never runs.
    Expired,
}

impl ApprovalStatus {
    /// The name used in the API and in storage.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalStatus::Pending => "pending",
            ApprovalStatus::Approved => "approved",
            ApprovalStatus::Rejected => "rejected",
            ApprovalStatus::Answered => "answered",
            ApprovalStatus::Expired => "expired",
        }
    }

    /// Parses the stored name.
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "pending" => ApprovalStatus::Pending,
            "approved" => ApprovalStatus::Approved,
            "rejected" => ApprovalStatus::Rejected,
            "answered" => ApprovalStatus::Answered,
            "expired" => ApprovalStatus::Expired,
            _ => return None,
        })
    }

    /// Whether a person (or the clock) has settled it.
    pub fn is_settled(self) -> bool {
        self != ApprovalStatus::Pending
    }
}

/// A request to a person inside a [`CommitRequest`]: one gated call of the response that commit
/// stores.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NewApproval {
    /// Its ID (UUID v7, chosen by the runner so a retried commit stores the same request).
    #[cfg_attr(feature = "openapi", schema(value_type = uuid::Uuid))]
    pub id: ApprovalId,
    /// The gated call's ledger key: 1 to 128 characters.
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 128))]
    pub key: String,
    /// The provider's ID of the call: 1 to 128 characters.
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 128))]
    pub call_id: String,
    /// The turn.
    #[serde(deserialize_with = "int::stored")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
    pub turn_seq: u64,
    /// What it asks.
    pub kind: ApprovalKind,
    /// The tool, by the name the model called.
    pub tool: String,
    /// The call's arguments as shown to people: secret values masked.
    #[cfg_attr(feature = "openapi", schema(value_type = Value))]
    pub args: serde_json::Value,
    /// SHA-256 (hex) of the call's canonical arguments, unmasked: what was approved.
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 128))]
    pub args_hash: String,
    /// Seconds it stands before it expires: 1 to 31,536,000 (a year).
    #[serde(deserialize_with = "int::stored")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 31536000))]
    pub timeout_secs: u64,
}

/// A request to a person, as stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Approval {
    /// Its ID.
    #[cfg_attr(feature = "openapi", schema(value_type = uuid::Uuid))]
    pub id: ApprovalId,
    /// The thread whose turn waits for it.
    #[cfg_attr(feature = "openapi", schema(value_type = uuid::Uuid))]
    pub thread_id: ThreadId,
    /// The thread's pool, agent and replica.
    #[serde(flatten)]
    pub labels: ThreadLabels,
    /// The epoch of the runner that asked.
    pub epoch: u64,
    /// The turn.
    pub turn_seq: u64,
    /// The gated call's ledger key.
    pub key: String,
    /// The provider's ID of the call.
    pub call_id: String,
    /// What it asks.
    pub kind: ApprovalKind,
    /// The tool.
    pub tool: String,
    /// The call's arguments, secret values masked.
    #[cfg_attr(feature = "openapi", schema(value_type = Value))]
    pub args: serde_json::Value,
    /// SHA-256 (hex) of the call's canonical arguments.
    pub args_hash: String,
    /// Where it stands (`expired` once `expires_at` passed undecided).
    pub status: ApprovalStatus,
    /// When it was stored.
    pub requested_at: DateTime<Utc>,
    /// When it expires if undecided.
    pub expires_at: DateTime<Utc>,
    /// When it was decided (or found expired).
    pub decided_at: Option<DateTime<Utc>>,
    /// Who decided.
    pub decided_by: Option<String>,
    /// Why (for a rejection; optional for an approval).
    pub reason: Option<String>,
    /// A question's answer.
    pub answer: Option<String>,
}

/// A person's decision, as posted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Let the gated call run.
    Approve,
    /// Do not run it (or decline to answer a question); needs a reason.
    Reject,
    /// Answer a question; needs `answer`.
    Answer,
}

impl Verdict {
    /// The status the request takes.
    pub fn status(self) -> ApprovalStatus {
        match self {
            Verdict::Approve => ApprovalStatus::Approved,
            Verdict::Reject => ApprovalStatus::Rejected,
            Verdict::Answer => ApprovalStatus::Answered,
        }
    }
}

/// `POST /v1/approvals/{id}/decision`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct DecisionRequest {
    /// approve, reject (needs `reason`) or answer (a question; needs `answer`).
    pub decision: Verdict,
    /// Why: shown to the model with a rejection. Up to 4,000 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(max_length = 4000))]
    pub reason: Option<String>,
    /// The answer to a question: 1 to 100,000 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 100000))]
    pub answer: Option<String>,
    /// Who decides, as recorded (with the admin token; an approver token records its own
    /// name): 1 to 200 characters, `admin` when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 200))]
    pub by: Option<String>,
}

/// 409 to a decision: the error, and the request as first decided (or expired).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct DecisionConflict {
    /// `already_decided` or `approval_expired`.
    #[cfg_attr(feature = "openapi", schema(value_type = String, example = "already_decided"))]
    pub code: ErrorCode,
    /// What happened, for people.
    pub message: String,
    /// The request with the decision that stands.
    pub approval: Approval,
}

/// `POST /v1/tokens/approver`: mint a token that may list and decide one pool's requests.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ApproverTokenRequest {
    /// The pool: a pool name (`[a-z0-9][a-z0-9_-]*`, at most 48 characters, as in the agentfile).
    #[cfg_attr(
        feature = "openapi",
        schema(min_length = 1, max_length = 48, pattern = "^[a-z0-9][a-z0-9_-]*$")
    )]
    pub pool: String,
    /// Who holds it (recorded as `decided_by`): 1 to 200 characters, none of them a control,
    /// bidirectional-control or line-separator character (`text::is_unsafe_char`).
    #[cfg_attr(
        feature = "openapi",
        schema(
            min_length = 1,
            max_length = 200,
            pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F\\u061C\\u200E\\u200F\\u2028-\\u202E\\u2066-\\u2069]+$"
        )
    )]
    pub name: String,
    /// Seconds until it expires: 60 to 31,536,000 (30 days when left out).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "int::stored_opt"
    )]
    #[cfg_attr(feature = "openapi", schema(minimum = 60, maximum = 31536000))]
    pub ttl_secs: Option<u64>,
}

/// A minted approver token.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ApproverTokenResponse {
    /// The pool it may decide for.
    pub pool: String,
    /// Who holds it.
    pub name: String,
    /// When it stops working.
    pub expires_at: DateTime<Utc>,
    /// The bearer token.
    pub token: String,
}

impl std::fmt::Debug for ApproverTokenResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApproverTokenResponse")
            .field("pool", &self.pool)
            .field("name", &self.name)
            .field("expires_at", &self.expires_at)
            .field("token", &"<redacted>")
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_code_round_trips_through_its_wire_name() {
        for code in ErrorCode::ALL {
            let json = serde_json::to_string(code).unwrap();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
            assert_eq!(&serde_json::from_str::<ErrorCode>(&json).unwrap(), code);
        }
    }

    #[test]
    fn an_unknown_error_code_from_a_newer_server_is_kept_not_refused() {
        let body: ErrorBody =
            serde_json::from_str(r#"{"code":"quota_exceeded","message":"slow down"}"#).unwrap();
        assert_eq!(body.code, ErrorCode::Other("quota_exceeded".into()));
        assert_eq!(body.code.to_string(), "quota_exceeded");
    }
}

/// An agent's name in a list (its schema only): an agent name as in the agentfile.
#[cfg(feature = "openapi")]
struct AgentName;

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for AgentName {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .min_length(Some(1))
            .max_length(Some(48))
            .pattern(Some("^[a-z0-9][a-z0-9_-]*$"))
            .into()
    }
}

#[cfg(feature = "openapi")]
impl ToSchema for AgentName {}

/// Where a handed-over task came from: stored with the task in the collaborator's inbox and kept
/// in its checkpoint state while it works on it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct HandoffOrigin {
    /// The handoff (`handoff:<ledger key>`): what the reply names.
    pub delivery_key: String,
    /// The agent that asked.
    pub from_agent: String,
    /// The thread whose turn waits for the reply.
    #[cfg_attr(feature = "openapi", schema(value_type = uuid::Uuid))]
    pub from_thread: ThreadId,
    /// The agents from the first caller to the one that asked, inclusive.
    pub chain: Vec<String>,
    /// What the caller's turn may still spend (US dollars), if it has a budget: the delegated
    /// turn stops when it would spend more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_usd: Option<f64>,
}

/// `POST /v1/runners/threads/{id}/handoffs`: hand one call's task to a collaborator — file it in
/// the collaborator's session for this call (created now), deduplicated by the call's ledger
/// key, so a repeat returns the handoff already made.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct HandoffRequest {
    /// The caller's epoch (from its claim). Past the stored range it can only be stale (409 `fenced`).
    #[serde(deserialize_with = "int::any")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
    pub epoch: u64,
    /// The caller's turn.
    #[serde(deserialize_with = "int::stored")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
    pub turn_seq: u64,
    /// The call's ledger key: 1 to 64 characters, no control characters or `:`.
    #[cfg_attr(
        feature = "openapi",
        schema(
            min_length = 1,
            max_length = 64,
            pattern = "^[^:\\u0000-\\u001F\\u007F-\\u009F]+$"
        )
    )]
    pub key: String,
    /// The provider's ID of the call: 1 to 128 characters.
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 128))]
    pub call_id: String,
    /// The collaborator: an agent of the caller's pool.
    #[cfg_attr(
        feature = "openapi",
        schema(min_length = 1, max_length = 48, pattern = "^[a-z0-9][a-z0-9_-]*$")
    )]
    pub agent: String,
    /// The task.
    pub task: String,
    /// Context for the task, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// The agents that handed work down to the caller's turn, from the first (none for a turn
    /// nobody handed over): at most 63. The handoff's chain is these and the caller's agent.
    #[serde(default)]
    #[cfg_attr(
        feature = "openapi",
        schema(value_type = Vec<AgentName>, max_items = 63)
    )]
    pub via: Vec<String>,
    /// Seconds the caller waits for the reply: 1 to 31,536,000. A reply later than that does
    /// not count (the handoff reads `timed_out`).
    #[serde(deserialize_with = "int::stored")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 31536000))]
    pub timeout_secs: u64,
    /// What the caller's turn may still spend (US dollars), if it has a budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 0))]
    pub budget_usd: Option<f64>,
}

/// Where a handoff stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum HandoffStatus {
    /// The collaborator is working on it (or has not started).
    Pending,
    /// The collaborator's turn ended with a reply: the call's result.
    Replied,
    /// The collaborator's turn ended without doing the task (its budget, its round limit, its
    /// model failing): the call's error result.
    Failed,
    /// No reply came within the caller's `transfer_timeout`: the call failed.
    TimedOut,
}

impl HandoffStatus {
    /// The name used in the API and in storage.
    pub fn as_str(self) -> &'static str {
        match self {
            HandoffStatus::Pending => "pending",
            HandoffStatus::Replied => "replied",
            HandoffStatus::Failed => "failed",
            HandoffStatus::TimedOut => "timed_out",
        }
    }

    /// Parses the stored name.
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "pending" => HandoffStatus::Pending,
            "replied" => HandoffStatus::Replied,
            "failed" => HandoffStatus::Failed,
            "timed_out" => HandoffStatus::TimedOut,
            _ => return None,
        })
    }

    /// Whether the caller's call has its answer.
    pub fn is_settled(self) -> bool {
        self != HandoffStatus::Pending
    }
}

/// A handoff, as stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Handoff {
    /// `handoff:<ledger key>`: the inbox dedupe key of the task.
    pub delivery_key: String,
    /// The caller's thread.
    #[cfg_attr(feature = "openapi", schema(value_type = uuid::Uuid))]
    pub thread_id: ThreadId,
    /// The pool.
    pub pool: String,
    /// The calling agent.
    pub from_agent: String,
    /// The epoch of the caller's runner that filed it (a later one that asks again
    /// re-attaches to it).
    pub epoch: u64,
    /// The caller's turn.
    pub turn_seq: u64,
    /// The call's ledger key.
    pub key: String,
    /// The provider's ID of the call.
    pub call_id: String,
    /// The collaborator.
    pub agent: String,
    /// The collaborator's session that does the task.
    pub session: String,
    /// That session's thread.
    #[cfg_attr(feature = "openapi", schema(value_type = uuid::Uuid))]
    pub target_thread_id: ThreadId,
    /// The task's seq in that thread's inbox.
    pub inbox_seq: u64,
    /// The task.
    pub task: String,
    /// Its context.
    pub context: Option<String>,
    /// The agents from the first caller to the calling one, inclusive.
    pub chain: Vec<String>,
    /// Where it stands (`timed_out` once `expires_at` passed without a reply).
    pub status: HandoffStatus,
    /// The collaborator's reply (for `failed`, why it gave up).
    pub reply: Option<String>,
    /// What the collaborator's turn spent (US dollars), its own collaborators included.
    pub cost_usd: f64,
    /// When it was made.
    pub created_at: DateTime<Utc>,
    /// When the caller stops waiting.
    pub expires_at: DateTime<Utc>,
    /// When the reply was stored (also for a reply that came too late).
    pub replied_at: Option<DateTime<Utc>>,
}

/// The reply to a handoff, in the [`CommitRequest`] that ends the collaborator's turn.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct HandoffReply {
    /// The handoff (from the task's [`HandoffOrigin`]).
    pub delivery_key: String,
    /// Whether the turn did the task (`false`: it stopped short; `text` says why).
    pub ok: bool,
    /// The turn's reply.
    pub text: String,
    /// What the turn spent (US dollars), its own collaborators included.
    #[cfg_attr(feature = "openapi", schema(minimum = 0))]
    pub cost_usd: f64,
}

/// One trigger as `up` registers it: its resolved spec and, for a webhook, the value of its
/// secret (read from `up`'s environment; stored by the API and never returned).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TriggerRegistration {
    /// The trigger.
    pub spec: crate::triggers::TriggerSpec,
    /// The webhook's secret (required for a webhook, refused for a schedule).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

/// `PUT /v1/pools/{pool}/triggers`: every trigger of the pool. Those not in the set are removed
/// (their history is kept); a changed one is updated (a changed schedule plans from now on); an
/// unchanged one keeps its next fire time.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TriggerSet {
    /// The triggers, at most 256.
    pub triggers: Vec<TriggerRegistration>,
}

/// What a registration changed, by trigger name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct TriggersApplied {
    /// New triggers.
    pub created: Vec<String>,
    /// Triggers whose spec or secret changed.
    pub updated: Vec<String>,
    /// Triggers left as they were.
    pub unchanged: Vec<String>,
    /// Triggers no longer in the set, removed.
    pub removed: Vec<String>,
}

/// A trigger as the API holds it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Trigger {
    /// The pool.
    pub pool: String,
    /// The trigger as registered (a webhook's secret by name only).
    pub spec: crate::triggers::TriggerSpec,
    /// A webhook's route: `/v1/hooks/{pool}/{path}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook_path: Option<String>,
    /// A schedule's next fire (`None`: it never fires again).
    pub next_fire_at: Option<DateTime<Utc>>,
    /// A fire held back by `overlap: buffer_one`, waiting for the previous turn: its scheduled
    /// time.
    pub buffered_at: Option<DateTime<Utc>>,
    /// The last entry of its history.
    pub last: Option<TriggerEvent>,
    /// When it was first registered.
    pub created_at: DateTime<Utc>,
    /// When its spec last changed.
    pub updated_at: DateTime<Utc>,
}

/// What started a trigger's fire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum TriggerSource {
    /// The schedule's clock.
    Schedule,
    /// A webhook delivery.
    Webhook,
    /// `ninetrix triggers fire` (`POST …/fire`).
    Manual,
}

/// What became of one fire or delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum TriggerOutcome {
    /// Its message was put in the session.
    Fired,
    /// A missed scheduled time, fired late by the catch-up policy.
    CaughtUp,
    /// Held back by `overlap: buffer_one` until the previous fire's turn ends.
    Buffered,
    /// Not fired: `reason` says why (overlap, outside the catch-up window…).
    Skipped,
    /// A delivery (or scheduled time) already fired: nothing was added.
    Deduplicated,
    /// A webhook delivery refused: `reason` says why.
    Rejected,
}

impl TriggerOutcome {
    /// The stored and displayed name.
    pub fn as_str(self) -> &'static str {
        match self {
            TriggerOutcome::Fired => "fired",
            TriggerOutcome::CaughtUp => "caught_up",
            TriggerOutcome::Buffered => "buffered",
            TriggerOutcome::Skipped => "skipped",
            TriggerOutcome::Deduplicated => "deduplicated",
            TriggerOutcome::Rejected => "rejected",
        }
    }
}

/// Why a fire was skipped or a delivery rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum TriggerReason {
    /// The previous fire's turn was still running (`overlap: skip`, or a fire already buffered).
    Overlap,
    /// Missed, and older than the catch-up window.
    OutsideWindow,
    /// Missed, and `catch_up: none`.
    CatchUpNone,
    /// Missed, and a later missed time ran instead (`catch_up: last`).
    OnlyLast,
    /// Missed, and the catch-up had already run as many fires as it may at once.
    OverMax,
    /// No signature header, or not the trigger's scheme.
    MissingSignature,
    /// A signature that does not match the body.
    BadSignature,
    /// A Standard Webhooks timestamp outside the tolerance.
    StaleTimestamp,
    /// A signature header that cannot be read.
    MalformedHeader,
    /// A body larger than `max_body`.
    TooLarge,
    /// Over the trigger's `rate_limit`.
    RateLimited,
    /// A body that is not JSON, or does not fit the message or session template.
    Template,
    /// A `Content-Type` that is not JSON.
    ContentType,
    /// More deliveries in flight from the sender's address than the server takes at once.
    PeerLimit,
    /// The body did not arrive within the webhook body deadline.
    BodyTimeout,
    /// A body already delivered within the trigger's tolerance (GitHub: the same bytes under
    /// another or no delivery id), recorded as a duplicate.
    SameBody,
}

/// One entry of a trigger's history.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct TriggerEvent {
    /// Its position in the trigger's history, from 1.
    pub seq: u64,
    /// When it happened.
    pub at: DateTime<Utc>,
    /// What started it.
    pub source: TriggerSource,
    /// What became of it.
    pub outcome: TriggerOutcome,
    /// Why it was skipped or rejected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<TriggerReason>,
    /// A schedule's fire: the time it was scheduled for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled_at: Option<DateTime<Utc>>,
    /// A webhook's delivery id (`X-GitHub-Delivery` / `webhook-id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery_id: Option<String>,
    /// The session its message went to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// That session's thread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<uuid::Uuid>))]
    pub thread_id: Option<ThreadId>,
    /// The message's seq in that thread's inbox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inbox_seq: Option<u64>,
    /// More, for people: the missed times a skip covers, a rejection's cause.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// A refusal of a delivery that did not prove it holds the secret (unsigned, wrongly signed,
    /// too large, not JSON, …): how many such refusals this entry stands for — itself and those
    /// since the previous recorded one, which were counted but not written (at most one is
    /// written per trigger per minute).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusals: Option<u64>,
}

/// `POST /v1/pools/{pool}/triggers/{name}/fire`: run a trigger now.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct FireRequest {
    /// For a webhook trigger: the JSON body its templates render (`{}` when left out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub body: Option<serde_json::Value>,
}

/// The answer to a webhook delivery that was accepted (`202`) or had already been (`200`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct HookAccepted {
    /// The trigger.
    pub trigger: String,
    /// `fired`, or `deduplicated` for a delivery id seen before.
    pub outcome: TriggerOutcome,
    /// The session the message is in.
    pub session: String,
    /// Its seq in the session's inbox: queued there until a replica takes it.
    pub seq: u64,
}
