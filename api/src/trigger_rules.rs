//! The API's pure rules for triggers (issue 17): which registrations it takes
//! ([`check_set`]), how a webhook body becomes a message and a session key ([`render`]), and the
//! per-trigger delivery rate limit ([`RateLimiter`], a token bucket per trigger in this process).
//! No I/O; the clock is passed in.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ninetrix_proto::api::{TriggerReason, TriggerSet};
use ninetrix_proto::sessions;
use ninetrix_proto::triggers::spec::{
    MAX_CATCH_UP_WINDOW_SECS, MAX_MAX_BODY_BYTES, MAX_RATE_LIMIT_PER_MINUTE, MAX_TOLERANCE_SECS,
    MAX_TRIGGERS, is_valid_name,
};
use ninetrix_proto::triggers::template::Template;
use ninetrix_proto::triggers::{SignatureScheme, TriggerKind, TriggerSession, TriggerSpec};

use crate::hooks::{self, Scheme};

/// The longest schedule message.
pub(crate) const MAX_MESSAGE_BYTES: usize = 100 * 1024;

/// The signature scheme a trigger's deliveries are verified with (`None`: as the headers show).
pub(crate) fn scheme(s: SignatureScheme) -> Option<Scheme> {
    match s {
        SignatureScheme::Auto => None,
        SignatureScheme::Github => Some(Scheme::GitHub),
        SignatureScheme::StandardWebhooks => Some(Scheme::Standard),
    }
}

/// Checks a pool's whole registration: names and webhook paths unique and well formed, every
/// schedule's rule and every webhook's templates and secret usable, numbers in range. The
/// error names the trigger and says what to change.
/// `body_limit` is the server's `--body-limit`: a webhook's `max_body` above it could never be
/// delivered, so it is refused here.
pub(crate) fn check_set(set: &TriggerSet, body_limit: usize) -> Result<(), String> {
    if set.triggers.len() > MAX_TRIGGERS {
        return Err(format!(
            "a pool has at most {MAX_TRIGGERS} triggers, not {}",
            set.triggers.len()
        ));
    }
    let mut names = std::collections::HashSet::new();
    let mut paths = std::collections::HashSet::new();
    for reg in &set.triggers {
        let spec = &reg.spec;
        if !names.insert(spec.name.as_str()) {
            return Err(format!("trigger `{}` is registered twice", spec.name));
        }
        check_one(spec, reg.secret.as_deref(), body_limit)
            .map_err(|e| format!("trigger `{}`: {e}", spec.name))?;
        if let Some(w) = spec.webhook()
            && !paths.insert(w.path.as_str())
        {
            return Err(format!(
                "trigger `{}`: webhook path `{}` is another trigger's",
                spec.name, w.path
            ));
        }
    }
    Ok(())
}

fn check_one(spec: &TriggerSpec, secret: Option<&str>, body_limit: usize) -> Result<(), String> {
    if !is_valid_name(&spec.name) {
        return Err("a name has 1 to 63 lowercase letters, digits and `-`".into());
    }
    if !(1..=63).contains(&spec.agent.chars().count()) {
        return Err("the agent name must have 1 to 63 characters".into());
    }
    match &spec.kind {
        TriggerKind::Schedule(s) => {
            if secret.is_some() {
                return Err("a schedule has no secret".into());
            }
            s.spec().map_err(|e| e.to_string())?;
            if s.message.trim().is_empty() || s.message.len() > MAX_MESSAGE_BYTES {
                return Err(format!(
                    "the message must have 1 to {MAX_MESSAGE_BYTES} bytes"
                ));
            }
            if s.catch_up_window_secs == 0 || s.catch_up_window_secs > MAX_CATCH_UP_WINDOW_SECS {
                return Err(format!(
                    "catch_up_window must be 1 to {MAX_CATCH_UP_WINDOW_SECS} seconds"
                ));
            }
            if let TriggerSession::Key(key) = &spec.session {
                if key.contains("{{") {
                    return Err("a schedule's session key is not a template".into());
                }
                sessions::check_key(key).map_err(|e| e.to_string())?;
            }
        }
        TriggerKind::Webhook(w) => {
            if !is_valid_name(&w.path) {
                return Err("a webhook path has 1 to 63 lowercase letters, digits and `-`".into());
            }
            Template::parse(&w.message).map_err(|e| format!("message: {e}"))?;
            if let TriggerSession::Key(key) = &spec.session {
                Template::parse(key).map_err(|e| format!("session: {e}"))?;
            }
            let secret = secret.ok_or("a webhook needs its secret's value")?;
            for s in scheme(w.signature).map_or(vec![Scheme::GitHub, Scheme::Standard], |s| vec![s])
            {
                hooks::check_secret(s, secret.as_bytes()).map_err(|e| e.to_string())?;
            }
            if w.tolerance_secs == 0 || w.tolerance_secs > MAX_TOLERANCE_SECS {
                return Err(format!(
                    "tolerance must be 1 to {MAX_TOLERANCE_SECS} seconds"
                ));
            }
            if w.rate_limit_per_minute == 0 || w.rate_limit_per_minute > MAX_RATE_LIMIT_PER_MINUTE {
                return Err(format!(
                    "rate_limit must be 1 to {MAX_RATE_LIMIT_PER_MINUTE} a minute"
                ));
            }
            if w.max_body_bytes == 0 || w.max_body_bytes > MAX_MAX_BODY_BYTES {
                return Err(format!("max_body must be 1 to {MAX_MAX_BODY_BYTES} bytes"));
            }
            if w.max_body_bytes > body_limit as u64 {
                return Err(format!(
                    "max_body ({} bytes) is above this server's body limit of {body_limit} bytes \
                     (`ninetrix api --body-limit`), so no such delivery could arrive: lower \
                     `max_body`, or raise `--body-limit`",
                    w.max_body_bytes
                ));
            }
        }
    }
    Ok(())
}

/// A webhook body rendered for a trigger: the message, and the session key when the trigger's
/// session is a key (a template); `None` for `session: new`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Rendered {
    /// The message.
    pub(crate) message: String,
    /// The session key.
    pub(crate) session: Option<String>,
}

/// Renders a webhook trigger's message and session key from a JSON body. The error says which
/// template and why (a missing field, with the keys that exist there).
pub(crate) fn render(spec: &TriggerSpec, body: &serde_json::Value) -> Result<Rendered, String> {
    render_with(spec, body, None)
}

fn render_with(
    spec: &TriggerSpec,
    body: &serde_json::Value,
    raw: Option<&serde_json::value::RawValue>,
) -> Result<Rendered, String> {
    let TriggerKind::Webhook(w) = &spec.kind else {
        return Err("not a webhook trigger".into());
    };
    let apply = |t: Template| match raw {
        Some(raw) => t.render_raw(body, raw),
        None => t.render(body),
    };
    let message = Template::parse(&w.message)
        .and_then(apply)
        .map_err(|e| format!("the trigger's message template: {e}"))?;
    if message.contains('\0') {
        return Err(
            "the message rendered from the body contains U+0000 (NUL), which the API does not store"
                .into(),
        );
    }
    let session = match &spec.session {
        TriggerSession::New => None,
        TriggerSession::Key(key) => {
            let rendered = Template::parse(key)
                .and_then(apply)
                .map_err(|e| format!("the trigger's session template: {e}"))?;
            sessions::check_key(&rendered)
                .map_err(|e| format!("the session key rendered from the body: {e}"))?;
            Some(rendered)
        }
    };
    Ok(Rendered { message, session })
}

/// Renders a webhook delivery's body, as received: JSON (an error says it is not), numbers
/// inserted as the sender wrote them ([`Template::render_raw`]).
pub(crate) fn render_body(spec: &TriggerSpec, body: &[u8]) -> Result<Rendered, String> {
    let not_json = |e: serde_json::Error| {
        format!("the body is not JSON ({e}); webhooks take `application/json` payloads")
    };
    let json: serde_json::Value = serde_json::from_slice(body).map_err(not_json)?;
    let raw: &serde_json::value::RawValue = serde_json::from_slice(body).map_err(not_json)?;
    render_with(spec, &json, Some(raw))
}

/// The reason recorded for a signature failure.
pub(crate) fn signature_reason(e: &hooks::HookError) -> TriggerReason {
    match e {
        hooks::HookError::MissingSignature => TriggerReason::MissingSignature,
        hooks::HookError::BadSignature | hooks::HookError::InvalidSecret(_) => {
            TriggerReason::BadSignature
        }
        hooks::HookError::Stale { .. } => TriggerReason::StaleTimestamp,
        hooks::HookError::MalformedHeader(_) => TriggerReason::MalformedHeader,
    }
}

/// One trigger's bucket: `tokens` deliveries may go now; it refills at the rate per minute up to
/// the rate (a burst of a minute's worth).
#[derive(Clone, Copy, Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
    /// Deliveries refused since the last one accepted.
    refused: u64,
}

/// Whether a delivery may go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Admit {
    /// Yes.
    Go,
    /// No: over the rate. `first`: the first refusal since the last accepted delivery (the one
    /// the history records); `retry_after`: when a token is back.
    Refuse {
        /// The first refusal of this burst.
        first: bool,
        /// When to try again.
        retry_after: Duration,
    },
}

/// Per-trigger token buckets of this API process (each replica counts its own deliveries).
#[derive(Default)]
pub(crate) struct RateLimiter {
    buckets: Mutex<HashMap<(String, String), Bucket>>,
}

impl RateLimiter {
    /// Takes a token of trigger (pool, name), whose rate is `per_minute`, at `now`.
    pub(crate) fn admit(&self, pool: &str, name: &str, per_minute: u32, now: Instant) -> Admit {
        let rate = f64::from(per_minute.max(1));
        let mut buckets = self
            .buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let bucket = buckets
            .entry((pool.to_string(), name.to_string()))
            .or_insert(Bucket {
                tokens: rate,
                at: now,
                refused: 0,
            });
        let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * rate / 60.0).min(rate);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            bucket.refused = 0;
            Admit::Go
        } else {
            bucket.refused += 1;
            let wait = (1.0 - bucket.tokens) * 60.0 / rate;
            Admit::Refuse {
                first: bucket.refused == 1,
                retry_after: Duration::from_secs_f64(wait.max(0.001)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use ninetrix_proto::api::TriggerRegistration;
    use ninetrix_proto::triggers::schedule::{CatchUp, Overlap};
    use ninetrix_proto::triggers::{ScheduleTrigger, WebhookTrigger};
    use serde_json::json;

    use super::*;

    fn webhook(name: &str, path: &str, session: TriggerSession) -> TriggerSpec {
        TriggerSpec {
            name: name.into(),
            agent: "a".into(),
            session,
            kind: TriggerKind::Webhook(WebhookTrigger {
                path: path.into(),
                message: "New issue: {{ issue.title }}".into(),
                secret: "HOOK_SECRET".into(),
                signature: SignatureScheme::Auto,
                tolerance_secs: 300,
                rate_limit_per_minute: 60,
                max_body_bytes: 1 << 20,
            }),
        }
    }

    fn schedule(name: &str, cron: &str, tz: &str) -> TriggerSpec {
        TriggerSpec {
            name: name.into(),
            agent: "a".into(),
            session: TriggerSession::default_for(name),
            kind: TriggerKind::Schedule(ScheduleTrigger {
                cron: Some(cron.into()),
                every_secs: None,
                timezone: tz.into(),
                message: "go".into(),
                overlap: Overlap::Skip,
                catch_up: CatchUp::Last,
                catch_up_window_secs: 3600,
            }),
        }
    }

    fn reg(spec: TriggerSpec, secret: Option<&str>) -> TriggerRegistration {
        TriggerRegistration {
            spec,
            secret: secret.map(str::to_string),
        }
    }

    #[test]
    fn a_good_set_passes_and_each_problem_is_named() {
        let good = TriggerSet {
            triggers: vec![
                reg(schedule("daily", "0 9 * * 1-5", "Europe/Lisbon"), None),
                reg(
                    webhook(
                        "gh",
                        "gh",
                        TriggerSession::Key("issue-{{ issue.number }}".into()),
                    ),
                    Some("s3cret"),
                ),
            ],
        };
        assert_eq!(check_set(&good, 8 << 20), Ok(()));
        let bad = [
            (
                vec![reg(schedule("x", "0 9 * *", "UTC"), None)],
                "trigger `x`: cron",
            ),
            (
                vec![reg(schedule("x", "0 9 * * *", "Europe/Lisbom"), None)],
                "unknown time zone",
            ),
            (
                vec![reg(schedule("x", "0 9 * * *", "UTC"), Some("s"))],
                "a schedule has no secret",
            ),
            (
                vec![reg(webhook("x", "x", TriggerSession::New), None)],
                "needs its secret",
            ),
            (
                vec![reg(
                    webhook("x", "x", TriggerSession::New),
                    Some("whsec_!!"),
                )],
                "secret",
            ),
            (
                vec![
                    reg(webhook("x", "p", TriggerSession::New), Some("s")),
                    reg(webhook("y", "p", TriggerSession::New), Some("s")),
                ],
                "webhook path `p` is another trigger's",
            ),
            (
                vec![
                    reg(schedule("x", "0 9 * * *", "UTC"), None),
                    reg(schedule("x", "0 9 * * *", "UTC"), None),
                ],
                "registered twice",
            ),
            (
                vec![reg(
                    webhook("x", "x", TriggerSession::Key("{{ broken".into())),
                    Some("s"),
                )],
                "session:",
            ),
        ];
        for (triggers, expected) in bad {
            let e = check_set(&TriggerSet { triggers }, 8 << 20).unwrap_err();
            assert!(e.contains(expected), "{e:?} lacks {expected:?}");
            assert!(!e.contains("s3cret"));
        }
    }

    #[test]
    fn a_body_renders_the_message_and_one_session_per_field_value() {
        let spec = webhook(
            "gh",
            "gh",
            TriggerSession::Key("issue-{{ issue.number }}".into()),
        );
        let body = json!({"issue": {"title": "Crash on boot", "number": 42}});
        assert_eq!(
            render(&spec, &body),
            Ok(Rendered {
                message: "New issue: Crash on boot".into(),
                session: Some("issue-42".into()),
            })
        );
        let e = render(&spec, &json!({"issue": {"number": 1}})).unwrap_err();
        assert!(
            e.contains("message template") && e.contains("issue.title"),
            "{e}"
        );
        let new = webhook("gh", "gh", TriggerSession::New);
        assert_eq!(render(&new, &body).unwrap().session, None);
    }

    #[test]
    fn the_bucket_takes_a_minutes_worth_then_refills_at_the_rate() {
        let limiter = RateLimiter::default();
        let t0 = Instant::now();
        for _ in 0..3 {
            assert_eq!(limiter.admit("p", "t", 3, t0), Admit::Go);
        }
        let Admit::Refuse { first, retry_after } = limiter.admit("p", "t", 3, t0) else {
            panic!("a fourth delivery within the minute went");
        };
        assert!(first);
        assert!(retry_after <= Duration::from_secs(20) && retry_after > Duration::from_secs(19));
        assert!(matches!(
            limiter.admit("p", "t", 3, t0),
            Admit::Refuse { first: false, .. }
        ));
        // Other triggers have their own bucket.
        assert_eq!(limiter.admit("p", "u", 3, t0), Admit::Go);
        // One token back after 20 s (3 a minute).
        assert_eq!(
            limiter.admit("p", "t", 3, t0 + Duration::from_secs(20)),
            Admit::Go
        );
        assert!(matches!(
            limiter.admit("p", "t", 3, t0 + Duration::from_secs(20)),
            Admit::Refuse { first: true, .. }
        ));
    }
}
