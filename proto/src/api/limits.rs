//! Pool-wide model limits and budgets (`/v1/runners/threads/{id}/model-leases`): what a runner
//! asks before a model call, what the API answers (a lease, a wait, or a budget refusal), and
//! what the runner reports when the call ends (tokens, cost, a provider's 429).
//!
//! A lease is a permit for one model call against one limiter — one provider key at one
//! endpoint, shared by every replica, session and job of the pool. It is tied to the thread's
//! epoch (a re-claim frees the older epoch's leases) and expires unless renewed, so a killed
//! runner never keeps a permit for longer than the lease time.

use chrono::{DateTime, Utc};
use serde::de::{DeserializeOwned, Deserializer, Error as _};
use serde::{Deserialize, Serialize};

use super::int;
use crate::LeaseId;
#[cfg(feature = "openapi")]
use utoipa::ToSchema;

/// The longest a lease request waits for a slot before it is answered `wait`, in milliseconds.
pub const MAX_LEASE_WAIT_MS: u64 = 30_000;

/// The longest a limiter's name may be.
pub const MAX_LIMITER_LEN: usize = 200;

/// A nested struct, read only from a JSON object: serde also reads a struct from an array of its
/// fields (`"limits": [null, null]`), which the schema (and so every other client) refuses.
pub(crate) fn object<'de, D: Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<T, D::Error> {
    let value = serde_json::Value::deserialize(d)?;
    if !value.is_object() {
        return Err(D::Error::custom(format_args!(
            "expected a JSON object, not {value}"
        )));
    }
    T::deserialize(value).map_err(D::Error::custom)
}

/// [`object`], or `null` for none.
pub(crate) fn object_opt<'de, D: Deserializer<'de>, T: DeserializeOwned>(
    d: D,
) -> Result<Option<T>, D::Error> {
    match serde_json::Value::deserialize(d)? {
        serde_json::Value::Null => Ok(None),
        value => object(value).map(Some).map_err(D::Error::custom),
    }
}

/// A limiter's numbers, as the agentfile declares them (`runtime.limits`, top-level `limits`).
/// `None` means no limit of that kind.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ModelLimits {
    /// Most calls in flight at once, pool-wide: 1 to 100,000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 100000))]
    pub max_in_flight: Option<u32>,
    /// Most calls started in any 60 seconds: 1 to 10,000,000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 10000000))]
    pub requests_per_minute: Option<u32>,
    /// Most tokens (input and output) in any 60 seconds: 1 to 10,000,000,000. A call in flight
    /// counts its estimate until it ends, then what it used.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "int::stored_opt"
    )]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 10000000000_i64))]
    pub tokens_per_minute: Option<u64>,
}

impl ModelLimits {
    /// Whether any limit is set.
    pub fn any(&self) -> bool {
        self.max_in_flight.is_some()
            || self.requests_per_minute.is_some()
            || self.tokens_per_minute.is_some()
    }
}

/// What to do when a budget is spent (`governance.on_budget_exceeded`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum OnBudgetExceeded {
    /// The turn ends with a reply naming the budget; later turns end the same way, without a
    /// model call, until the budget has room again (the next day, or a raise).
    #[default]
    Stop,
    /// The turn asks a person (a request through the approvals) to raise the budget by its own
    /// amount; approved, the turn goes on; rejected or expired, it stops.
    AskHuman,
}

impl OnBudgetExceeded {
    /// The name used in agentfiles.
    pub fn as_str(self) -> &'static str {
        match self {
            OnBudgetExceeded::Stop => "stop",
            OnBudgetExceeded::AskHuman => "ask_human",
        }
    }
}

/// The budgets beyond one run that bind a thread's model calls, kept by the API.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct BudgetPolicy {
    /// Most US dollars this thread (a replica's conversation or a session) may spend, ever
    /// (`governance.max_budget_per_session`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 1000000000))]
    pub per_session_usd: Option<f64>,
    /// Most US dollars the thread's agent may spend in one calendar day, all its threads
    /// together (`governance.max_budget_per_day`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 1000000000))]
    pub per_day_usd: Option<f64>,
    /// Most US dollars the whole pool may spend in one calendar day
    /// (top-level `governance.max_pool_budget_per_day`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 1000000000))]
    pub pool_per_day_usd: Option<f64>,
    /// The IANA time zone whose calendar days the day budgets count (`governance.timezone`).
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 64))]
    pub timezone: String,
}

impl BudgetPolicy {
    /// Whether any budget is set.
    pub fn any(&self) -> bool {
        self.per_session_usd.is_some()
            || self.per_day_usd.is_some()
            || self.pool_per_day_usd.is_some()
    }
}

/// Which budget is spent.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(tag = "scope", rename_all = "snake_case")]
pub enum BudgetScope {
    /// This thread's (`max_budget_per_session`).
    Session,
    /// The agent's on one day (`max_budget_per_day`), `YYYY-MM-DD` in the policy's time zone.
    AgentDay {
        /// The day.
        day: String,
    },
    /// The pool's on one day (`max_pool_budget_per_day`).
    PoolDay {
        /// The day.
        day: String,
    },
}

impl BudgetScope {
    /// The agentfile key that sets this budget.
    pub fn key(&self) -> &'static str {
        match self {
            BudgetScope::Session => "governance.max_budget_per_session",
            BudgetScope::AgentDay { .. } => "governance.max_budget_per_day",
            BudgetScope::PoolDay { .. } => "governance.max_pool_budget_per_day",
        }
    }

    /// `this session's budget`, `agent writer's budget for 2026-11-28`, `the pool's budget
    /// for 2026-11-28`.
    pub fn text(&self, agent: &str) -> String {
        match self {
            BudgetScope::Session => "this session's budget".into(),
            BudgetScope::AgentDay { day } => format!("agent {agent}'s budget for {day}"),
            BudgetScope::PoolDay { day } => format!("the pool's budget for {day}"),
        }
    }
}

/// A budget with no room left.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct BudgetSpent {
    /// Which budget.
    #[serde(flatten)]
    pub scope: BudgetScope,
    /// What it allows: the agentfile's amount plus every approved raise.
    pub limit_usd: f64,
    /// What the scope has spent.
    pub spent_usd: f64,
    /// What approved raises added to the agentfile's amount.
    #[serde(default)]
    pub raised_usd: f64,
}

/// `POST /v1/runners/threads/{id}/model-leases`: a permit for one model call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct LeaseRequest {
    /// The caller's epoch (from its claim): an older one is 409 `fenced`.
    #[serde(deserialize_with = "int::stored")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
    pub epoch: u64,
    /// The limiter: `<provider>@<host>#<key digest>` (one provider key at one endpoint), 1 to
    /// 200 characters, no control characters. Threads of one pool naming the same limiter share
    /// its limits.
    #[cfg_attr(
        feature = "openapi",
        schema(
            min_length = 1,
            max_length = 200,
            pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F\\u061C\\u200E\\u200F\\u2028-\\u202E\\u2066-\\u2069]+$"
        )
    )]
    pub limiter: String,
    /// The provider's name, for what people read (`openai`): 1 to 64 characters, no control
    /// characters.
    #[cfg_attr(
        feature = "openapi",
        schema(
            min_length = 1,
            max_length = 64,
            pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F\\u061C\\u200E\\u200F\\u2028-\\u202E\\u2066-\\u2069]+$"
        )
    )]
    pub provider: String,
    /// The limiter's numbers as this runner's agentfile states them (the latest request's
    /// numbers rule the limiter).
    #[serde(default, deserialize_with = "object")]
    pub limits: ModelLimits,
    /// The budgets that bind this thread, if any.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "object_opt"
    )]
    pub budgets: Option<BudgetPolicy>,
    /// The call's estimated tokens (its input), counted against `tokens_per_minute` until the
    /// call ends.
    #[serde(default, deserialize_with = "int::stored")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
    pub estimated_tokens: u64,
    /// How long to wait for a slot before answering `wait`: 0 to 30,000 ms.
    #[serde(default, deserialize_with = "int::stored")]
    #[cfg_attr(feature = "openapi", schema(maximum = 30000))]
    pub wait_ms: u64,
}

/// Why a call must wait for its slot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum SlotWait {
    /// Every slot is taken.
    InFlight {
        /// Calls in flight.
        in_flight: u32,
        /// `max_in_flight`.
        max_in_flight: u32,
    },
    /// `requests_per_minute` calls started in the last minute.
    RequestsPerMinute {
        /// `requests_per_minute`.
        requests_per_minute: u32,
        /// When the oldest of them leaves the window.
        until: DateTime<Utc>,
    },
    /// The tokens of the last minute leave no room for this call's estimate.
    TokensPerMinute {
        /// `tokens_per_minute`.
        tokens_per_minute: u64,
        /// When enough of them leave the window (or, for an estimate larger than the whole
        /// limit, when the window is empty).
        until: DateTime<Utc>,
    },
    /// The provider answered 429: every call of the limiter waits.
    RateLimited {
        /// Until when.
        until: DateTime<Utc>,
    },
}

impl SlotWait {
    /// What `ps` shows while a runner waits: `waiting for a model slot (openai: 8/8 in
    /// flight)`, `rate-limited by openai until 12:00:03`.
    pub fn text(&self, provider: &str) -> String {
        match self {
            SlotWait::InFlight {
                in_flight,
                max_in_flight,
            } => format!(
                "waiting for a model slot ({provider}: {in_flight}/{max_in_flight} in flight)"
            ),
            SlotWait::RequestsPerMinute {
                requests_per_minute,
                until,
            } => format!(
                "waiting for a model slot ({provider}: {requests_per_minute} requests/minute, next at {})",
                until.format("%H:%M:%S")
            ),
            SlotWait::TokensPerMinute {
                tokens_per_minute,
                until,
            } => format!(
                "waiting for a model slot ({provider}: {tokens_per_minute} tokens/minute, next at {})",
                until.format("%H:%M:%S")
            ),
            SlotWait::RateLimited { until } => {
                format!(
                    "rate-limited by {provider} until {}",
                    until.format("%H:%M:%S")
                )
            }
        }
    }
}

/// The answer to a lease request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum LeaseResponse {
    /// The call may start; release the lease when it ends, renew it while it runs.
    Granted {
        /// The lease.
        #[cfg_attr(feature = "openapi", schema(value_type = uuid::Uuid))]
        lease_id: LeaseId,
        /// When it expires unless renewed.
        expires_at: DateTime<Utc>,
        /// How long a lease lasts (renew well before: every third of it).
        ttl_ms: u64,
    },
    /// No slot within `wait_ms`: ask again.
    Wait {
        /// Why.
        #[serde(flatten)]
        wait: SlotWait,
        /// When to ask again, at the latest.
        retry_in_ms: u64,
    },
    /// A budget has no room: the call must not be made.
    OverBudget {
        /// Which, and by how much.
        #[serde(flatten)]
        spent: BudgetSpent,
    },
}

/// A provider's 429 (or 529), reported with a release so the whole limiter backs off.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RateLimited {
    /// The provider's `retry-after` (or the runner's backoff when it gave none): 0 to 3,600,000
    /// ms. Every call of the limiter waits this long from now.
    #[serde(deserialize_with = "int::stored")]
    #[cfg_attr(feature = "openapi", schema(maximum = 3600000))]
    pub retry_after_ms: u64,
}

/// `POST /v1/runners/threads/{id}/model-leases/{lease}/release`: the call ended.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct LeaseRelease {
    /// Input tokens the call used (0 if it failed).
    #[serde(default, deserialize_with = "int::stored")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
    pub input_tokens: u64,
    /// Output tokens.
    #[serde(default, deserialize_with = "int::stored")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
    pub output_tokens: u64,
    /// What the call cost in US dollars (0 to 1,000,000), added to the thread's, its agent's and
    /// its pool's spend.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 1000000))]
    pub cost_usd: f64,
    /// The provider refused the call as over its rate limit.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "object_opt"
    )]
    pub rate_limited: Option<RateLimited>,
}

/// The answer to a renewal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct LeaseRenewed {
    /// The new expiry.
    pub expires_at: DateTime<Utc>,
}

/// A raise of a budget, asked of a person when `on_budget_exceeded: ask_human` (carried by a
/// [`super::NewApproval`] of kind `budget`). Approved, it adds `amount_usd` to the scope's
/// allowance.
///
/// Read through [`RaiseWire`]: serde cannot refuse unknown fields of a struct that flattens
/// another (`deny_unknown_fields` with `flatten` refused every raise, `scope` included), so the
/// wire form is one closed object and the scope is checked when it is read.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(try_from = "RaiseWire")]
pub struct BudgetRaise {
    /// Which budget.
    #[serde(flatten)]
    pub scope: BudgetScope,
    /// By how much: more than 0, at most 1,000,000 US dollars.
    #[cfg_attr(feature = "openapi", schema(exclusive_minimum = 0, maximum = 1000000))]
    pub amount_usd: f64,
}

/// The names of [`BudgetScope`]'s variants, as `scope` carries them.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ScopeName {
    Session,
    AgentDay,
    PoolDay,
}

/// A [`BudgetRaise`] as it is sent: `{scope, day?, amount_usd}`, nothing else.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RaiseWire {
    scope: ScopeName,
    #[serde(default)]
    day: Option<String>,
    amount_usd: f64,
}

impl TryFrom<RaiseWire> for BudgetRaise {
    type Error = String;

    fn try_from(w: RaiseWire) -> Result<Self, Self::Error> {
        let scope = match (w.scope, w.day) {
            (ScopeName::Session, None) => BudgetScope::Session,
            (ScopeName::Session, Some(_)) => {
                return Err("a raise of scope `session` has no `day`".into());
            }
            (ScopeName::AgentDay, Some(day)) => BudgetScope::AgentDay { day },
            (ScopeName::PoolDay, Some(day)) => BudgetScope::PoolDay { day },
            (ScopeName::AgentDay | ScopeName::PoolDay, None) => {
                return Err("a raise of a day's budget needs its `day` (YYYY-MM-DD)".into());
            }
        };
        Ok(BudgetRaise {
            scope,
            amount_usd: w.amount_usd,
        })
    }
}

/// What a thread and its agent have spent (`GET /v1/threads/{id}/spend`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Spend {
    /// The thread's spend, ever.
    pub thread_usd: f64,
    /// Its agent's spend today (UTC unless `timezone` is given).
    pub agent_today_usd: f64,
    /// Its pool's spend today.
    pub pool_today_usd: f64,
    /// The day counted.
    pub day: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_raise_reads_every_scope_and_refuses_unknown_fields() {
        for (json, scope) in [
            (
                serde_json::json!({"scope": "session", "amount_usd": 5.0}),
                BudgetScope::Session,
            ),
            (
                serde_json::json!({"scope": "agent_day", "day": "2026-11-28", "amount_usd": 5.0}),
                BudgetScope::AgentDay {
                    day: "2026-11-28".into(),
                },
            ),
            (
                serde_json::json!({"scope": "pool_day", "day": "2026-11-28", "amount_usd": 5.0}),
                BudgetScope::PoolDay {
                    day: "2026-11-28".into(),
                },
            ),
        ] {
            let raise: BudgetRaise = serde_json::from_value(json.clone()).unwrap();
            assert_eq!(raise.scope, scope);
            assert_eq!(serde_json::to_value(&raise).unwrap(), json);
        }
        for refused in [
            serde_json::json!({"scope": "session", "amount_usd": 5, "extra": 1}),
            serde_json::json!({"scope": "session", "day": "2026-11-28", "amount_usd": 5.0}),
            serde_json::json!({"scope": "agent_day", "amount_usd": 5.0}),
            serde_json::json!({"scope": "week", "amount_usd": 5.0}),
        ] {
            assert!(
                serde_json::from_value::<BudgetRaise>(refused.clone()).is_err(),
                "{refused}"
            );
        }
    }

    #[test]
    fn nested_structs_are_read_from_objects_only() {
        let lease = |extra: serde_json::Value| {
            let mut body = serde_json::json!({"epoch": 1, "limiter": "l", "provider": "p"});
            for (k, v) in extra.as_object().unwrap() {
                body[k] = v.clone();
            }
            serde_json::from_value::<LeaseRequest>(body)
        };
        assert!(lease(serde_json::json!({"limits": {"max_in_flight": 2}})).is_ok());
        assert!(lease(serde_json::json!({"budgets": null})).is_ok());
        for refused in [
            serde_json::json!({"limits": [null, null]}),
            serde_json::json!({"limits": null}),
            serde_json::json!({"budgets": [null, null, null, "UTC"]}),
        ] {
            assert!(lease(refused.clone()).is_err(), "{refused}");
        }
        let release = |body| serde_json::from_value::<LeaseRelease>(body);
        assert!(release(serde_json::json!({"rate_limited": {"retry_after_ms": 5}})).is_ok());
        assert!(release(serde_json::json!({"rate_limited": [5]})).is_err());
    }

    #[test]
    fn answers_carry_their_status_and_reason_side_by_side() {
        let wait = LeaseResponse::Wait {
            wait: SlotWait::InFlight {
                in_flight: 3,
                max_in_flight: 3,
            },
            retry_in_ms: 5,
        };
        let json = serde_json::to_value(&wait).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"status": "wait", "reason": "in_flight", "in_flight": 3, "max_in_flight": 3, "retry_in_ms": 5})
        );
        assert_eq!(serde_json::from_value::<LeaseResponse>(json).unwrap(), wait);
        let over = LeaseResponse::OverBudget {
            spent: BudgetSpent {
                scope: BudgetScope::PoolDay {
                    day: "2026-11-28".into(),
                },
                limit_usd: 1.0,
                spent_usd: 1.5,
                raised_usd: 0.5,
            },
        };
        let json = serde_json::to_value(&over).unwrap();
        assert_eq!(json["scope"], "pool_day");
        assert_eq!(serde_json::from_value::<LeaseResponse>(json).unwrap(), over);
    }
}
