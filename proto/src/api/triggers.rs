//! Triggers (`/v1/pools/{pool}/triggers`, `/v1/hooks/{pool}/{path}`): registrations, what they
//! changed, the triggers the API holds and their history of fires and deliveries.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::ids::ThreadId;
#[cfg(feature = "openapi")]
use utoipa::ToSchema;

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
