//! A trigger as the agentfile resolves it and as `up` registers it with the API: what starts a
//! turn without a person typing. One type serves the resolved agentfile (`Agentfile::triggers` in `ninetrix-agentfile`),
//! the registration `up` sends (`PUT /v1/pools/{pool}/triggers`) and the listing the API
//! answers, so the three never drift. It holds the *name* of a webhook's secret, never its value
//! (the registration carries the value beside it, in [`crate::api::TriggerRegistration`]).

use serde::{Deserialize, Serialize};

use super::schedule::{CatchUp, Overlap};

/// The catch-up window of a schedule that does not set one, in seconds (one hour).
pub const DEFAULT_CATCH_UP_WINDOW_SECS: u64 = super::schedule::DEFAULT_CATCH_UP_WINDOW_SECS;
/// The longest catch-up window: 30 days.
pub const MAX_CATCH_UP_WINDOW_SECS: u64 = 30 * 86_400;
/// Webhook deliveries one trigger accepts per minute by default (each API process counts its
/// own).
pub const DEFAULT_RATE_LIMIT_PER_MINUTE: u32 = 60;
/// The largest `rate_limit`.
pub const MAX_RATE_LIMIT_PER_MINUTE: u32 = 60_000;
/// The largest webhook body accepted by default: 1 MiB.
pub const DEFAULT_MAX_BODY_BYTES: u64 = 1 << 20;
/// The largest `max_body` a trigger may set: 25 MiB (GitHub's own cap on a payload).
pub const MAX_MAX_BODY_BYTES: u64 = 25 << 20;
/// How far a Standard Webhooks timestamp may be from the server's clock by default (5 minutes,
/// the reference libraries' tolerance).
pub const DEFAULT_TOLERANCE_SECS: u64 = 5 * 60;
/// The longest `tolerance`: one day.
pub const MAX_TOLERANCE_SECS: u64 = 86_400;
/// The most triggers one pool has (the agentfile's and the API's limit).
pub const MAX_TRIGGERS: usize = 256;
/// The longest trigger name, so `schedule:<name>:<RFC 3339>` fits a dedupe key.
pub const MAX_NAME_CHARS: usize = 63;

/// One trigger, resolved.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TriggerSpec {
    /// Its name, unique in the pool: lowercase letters, digits and `-`, 1 to 63 characters.
    #[cfg_attr(feature = "openapi", schema(pattern = r"^[a-z0-9][a-z0-9-]{0,62}$"))]
    pub name: String,
    /// The agent whose session gets the trigger's messages: the agent the trigger is declared
    /// under, or a pool-level trigger's `target_agent` (else the file's first agent).
    pub agent: String,
    /// Which session of the agent each fire goes to.
    pub session: TriggerSession,
    /// When it fires and what it says.
    pub kind: TriggerKind,
}

impl TriggerSpec {
    /// `schedule` or `webhook`.
    pub fn kind_name(&self) -> &'static str {
        match self.kind {
            TriggerKind::Schedule(_) => "schedule",
            TriggerKind::Webhook(_) => "webhook",
        }
    }

    /// The webhook part, for a webhook trigger.
    pub fn webhook(&self) -> Option<&WebhookTrigger> {
        match &self.kind {
            TriggerKind::Webhook(w) => Some(w),
            TriggerKind::Schedule(_) => None,
        }
    }

    /// The schedule part, for a schedule trigger.
    pub fn schedule(&self) -> Option<&ScheduleTrigger> {
        match &self.kind {
            TriggerKind::Schedule(s) => Some(s),
            TriggerKind::Webhook(_) => None,
        }
    }
}

/// Which session of the target agent a fire's message goes to.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum TriggerSession {
    /// Every fire into the session with this key (one conversation that remembers the earlier
    /// fires). For a webhook the key may be a template over the body (`chat-{{ message.chat.id }}`):
    /// one conversation per chat or customer. The default is `trigger:<name>`.
    Key(String),
    /// Each fire into a session of its own (`trigger:<name>:<scheduled time>` for a schedule,
    /// `trigger:<name>:<delivery id>` for a webhook): no memory between fires, and fires may run
    /// side by side on different replicas.
    New,
}

impl TriggerSession {
    /// The session key of trigger `name` when `session:` is not given.
    pub fn default_for(name: &str) -> TriggerSession {
        TriggerSession::Key(format!("trigger:{name}"))
    }
}

/// When a trigger fires.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TriggerKind {
    /// On a clock.
    Schedule(ScheduleTrigger),
    /// On a signed HTTP delivery to `POST /v1/hooks/{pool}/{path}`.
    Webhook(WebhookTrigger),
}

/// A schedule: cron or a fixed interval.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ScheduleTrigger {
    /// A 5-field cron expression (`cron:`), read on the wall clock of `timezone`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// Or a fixed interval in seconds (`every: 10m`), aligned to the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every_secs: Option<u64>,
    /// The IANA zone of `cron` (`UTC` when not given).
    pub timezone: String,
    /// The message each fire puts in the session.
    pub message: String,
    /// What a fire does while the previous fire's turn still runs.
    pub overlap: Overlap,
    /// Which missed fires run after the API was down.
    pub catch_up: CatchUp,
    /// How far back, in seconds, a missed fire may still be caught up.
    pub catch_up_window_secs: u64,
}

impl ScheduleTrigger {
    /// The schedule's rule, validated: the one check of a schedule's rule that the agentfile
    /// and the API's registration both make — exactly one of `cron` and `every`, a zone only
    /// with `cron`, and the rule itself.
    pub fn spec(&self) -> Result<super::schedule::Spec, super::schedule::ScheduleError> {
        use super::schedule::ScheduleError;
        match (&self.cron, self.every_secs) {
            (Some(_), Some(_)) => Err(ScheduleError::TwoRules),
            (Some(expr), None) => super::schedule::Spec::cron(expr, &self.timezone),
            (None, Some(_)) if self.timezone != "UTC" => Err(ScheduleError::ZoneWithEvery {
                zone: self.timezone.clone(),
            }),
            (None, Some(secs)) => super::schedule::Spec::every(secs),
            (None, None) => Err(ScheduleError::NoRule),
        }
    }

    /// The rule as a person wrote it: `cron 0 9 * * 1-5 (Europe/Lisbon)` or `every 10m`.
    pub fn describe(&self) -> String {
        match (&self.cron, self.every_secs) {
            (Some(expr), _) => format!("cron {expr} ({})", self.timezone),
            (None, Some(secs)) => format!("every {}", super::schedule::format_every(secs)),
            (None, None) => "never".to_string(),
        }
    }
}

/// Which signature a webhook's deliveries must carry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum SignatureScheme {
    /// Whichever of the two the delivery's headers show (Standard Webhooks when it has a
    /// `webhook-signature`, else GitHub's `X-Hub-Signature-256`).
    #[default]
    Auto,
    /// GitHub's `X-Hub-Signature-256` (delivery id `X-GitHub-Delivery`).
    Github,
    /// Standard Webhooks: `webhook-id`, `webhook-timestamp`, `webhook-signature`.
    StandardWebhooks,
}

/// A webhook.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct WebhookTrigger {
    /// The last segment of its URL, `/v1/hooks/{pool}/{path}` (the trigger's name when not
    /// given): lowercase letters, digits and `-`.
    #[cfg_attr(feature = "openapi", schema(pattern = r"^[a-z0-9][a-z0-9-]{0,62}$"))]
    pub path: String,
    /// The message each delivery puts in the session: a template over the JSON body
    /// (`New issue: {{ issue.title }}`).
    pub message: String,
    /// The *name* of the secret deliveries are signed with; `up` reads its value from its
    /// environment and gives it to the API only.
    pub secret: String,
    /// The signature scheme.
    pub signature: SignatureScheme,
    /// How far a Standard Webhooks `webhook-timestamp` may be from the server's clock, seconds.
    pub tolerance_secs: u64,
    /// Deliveries accepted per minute (more are answered 429).
    pub rate_limit_per_minute: u32,
    /// The largest body accepted, bytes (larger is answered 413).
    pub max_body_bytes: u64,
}

/// The pattern the OpenAPI document gives names and paths; [`is_valid_name`] is the same rule.
pub const NAME_PATTERN: &str = r"^[a-z0-9][a-z0-9-]{0,62}$";

/// Whether `name` may name a trigger (and a webhook path): 1 to 63 of `a-z`, `0-9` and `-`,
/// starting with a letter or digit.
pub fn is_valid_name(name: &str) -> bool {
    let n = name.chars().count();
    (1..=MAX_NAME_CHARS).contains(&n)
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_trigger_kind_refuses_unknown_fields_in_either_branch() {
        for kind in [
            r#"{"type": "webhook", "path": "p", "message": "m", "secret": "S", "signature": "github", "tolerance_secs": 1, "rate_limit_per_minute": 1, "max_body_bytes": 1, "extra": 1}"#,
            r#"{"type": "schedule", "every_secs": 60, "timezone": "UTC", "message": "m", "overlap": "skip", "catch_up": "last", "catch_up_window_secs": 60, "extra": 1}"#,
        ] {
            let err = serde_json::from_str::<super::TriggerKind>(kind).unwrap_err();
            assert!(err.to_string().contains("unknown field `extra`"), "{err}");
            let known = kind.replace(r#", "extra": 1"#, "");
            assert!(
                serde_json::from_str::<super::TriggerKind>(&known).is_ok(),
                "{known}"
            );
        }
    }

    #[test]
    fn the_documented_name_pattern_is_the_name_rule() {
        // The pattern, spelled out: a first character of [a-z0-9], then up to 62 of [a-z0-9-].
        assert_eq!(super::NAME_PATTERN, r"^[a-z0-9][a-z0-9-]{0,62}$");
        for (name, ok) in [
            ("a", true),
            ("0-", true),
            ("-a", false),
            ("A", false),
            ("", false),
            (&"a".repeat(63), true),
            (&"a".repeat(64), false),
            ("a_b", false),
        ] {
            assert_eq!(super::is_valid_name(name), ok, "{name}");
        }
    }

    use super::*;

    #[test]
    fn names_are_url_and_key_safe() {
        for ok in ["nightly", "gh-issues", "a", "9am", &"x".repeat(63)] {
            assert!(is_valid_name(ok), "{ok}");
        }
        for bad in [
            "",
            "-x",
            "Nightly",
            "a_b",
            "a:b",
            "a/b",
            "a b",
            &"x".repeat(64),
        ] {
            assert!(!is_valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn a_spec_round_trips_through_json_with_its_kind_tagged() {
        let spec = TriggerSpec {
            name: "hook".into(),
            agent: "a".into(),
            session: TriggerSession::Key("chat-{{ message.chat.id }}".into()),
            kind: TriggerKind::Webhook(WebhookTrigger {
                path: "hook".into(),
                message: "{{ text }}".into(),
                secret: "HOOK_SECRET".into(),
                signature: SignatureScheme::Github,
                tolerance_secs: DEFAULT_TOLERANCE_SECS,
                rate_limit_per_minute: DEFAULT_RATE_LIMIT_PER_MINUTE,
                max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            }),
        };
        let json = serde_json::to_value(&spec).unwrap();
        assert_eq!(json["kind"]["type"], "webhook");
        assert_eq!(json["session"]["key"], "chat-{{ message.chat.id }}");
        let back: TriggerSpec = serde_json::from_value(json).unwrap();
        assert_eq!(back, spec);
        let new = serde_json::to_value(TriggerSession::New).unwrap();
        assert_eq!(new, "new");
    }
}
