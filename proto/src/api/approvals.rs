//! Requests to people and their decisions (`/v1/approvals`): kinds, statuses, verdicts and the
//! 409 a second decision gets.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::int;
use super::*;
use crate::ids::ApprovalId;
use crate::ids::ThreadId;
#[cfg(feature = "openapi")]
use utoipa::ToSchema;

/// What a request to a person asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ApprovalKind {
    /// Approve or reject a gated tool call before it runs.
    Approval,
    /// Answer an `ask_human` question; the answer is the call's result.
    Question,
    /// Raise a spent budget (`governance.on_budget_exceeded: ask_human`): approved, the
    /// request's [`BudgetRaise`] is added to the budget and the turn goes on.
    Budget,
}

impl ApprovalKind {
    /// The name used in the API and in storage.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalKind::Approval => "approval",
            ApprovalKind::Question => "question",
            ApprovalKind::Budget => "budget",
        }
    }

    /// Parses the stored name.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "approval" => Some(ApprovalKind::Approval),
            "question" => Some(ApprovalKind::Question),
            "budget" => Some(ApprovalKind::Budget),
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
    /// The turn that asked was cancelled (`ninetrix cancel`) while it waited: the call never
    /// runs, and nobody can decide it any more.
    Cancelled,
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
            ApprovalStatus::Cancelled => "cancelled",
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
            "cancelled" => ApprovalStatus::Cancelled,
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
    /// For kind `budget`: the raise asked for (required for that kind, refused for the others).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::limits::object_opt"
    )]
    pub raise: Option<BudgetRaise>,
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
    /// For kind `budget`: the raise asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raise: Option<BudgetRaise>,
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
