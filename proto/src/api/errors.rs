//! The error codes of every refusal (`ErrorCode`, one variant per wire name, matched with no
//! catch-all) and the body every error response carries.

use serde::{Deserialize, Serialize};

#[cfg(doc)]
use super::MAX_LIST_ITEMS;

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
    /// 409: a message sent with mode `reject` (or to an agent whose
    /// `execution.on_message_while_busy` is `reject`) while the thread is in a turn; the body's
    /// `running` names the turn. Nothing was stored.
    Busy = "busy",
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
    /// 422: a memory write past the memory's limits (a file over 100 KiB, more than 1 MiB or
    /// 1,000 files in one agent's or session's memory). The message names the limit.
    MemoryLimit = "memory_limit",
    /// 409: an edit of a memory file whose path is a directory, or that a file stands in the way
    /// of (`/memories/a` is a file, so `/memories/a/b` cannot be written).
    MemoryConflict = "memory_conflict",
    /// 422: a route that needs the thread's pool and agent (its memory) on a thread that has
    /// none (one made by an enqueue alone, or minted without them).
    UnlabelledThread = "unlabelled_thread",
    /// 409: a snapshot names objects the store does not have (a node's files or children, or a
    /// commit's `turn_end.snapshot`). The message lists the first of them: upload them and send
    /// the request again.
    MissingObjects = "missing_objects",
    /// 409: a fork or a rewind to a turn whose workspace snapshot was dropped
    /// (`execution.snapshots.keep_turns`): its files cannot be restored, so nothing is done.
    SnapshotDropped = "snapshot_dropped",
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
    /// For `busy`: the turn the thread is in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<super::RunningTurn>,
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
