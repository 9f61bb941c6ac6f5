//! Notifications of requests to people (`governance.human_approval.notify_url`): one signed JSON
//! POST per request, retried with backoff while the request is pending, each attempt recorded as
//! an `approval_notified` trace event.
//!
//! The signature is HMAC-SHA256 over `"<timestamp>.<body>"` keyed by the value of the agentfile's
//! `notify_secret`, sent as `X-Ninetrix-Signature: sha256=<hex>` beside `X-Ninetrix-Timestamp`
//! (Unix seconds; receivers refuse old ones against replay) and `X-Ninetrix-Delivery` (the
//! request's ID, the same on every attempt and after a restart: delivery is at least once, so
//! receivers dedupe on it). The pure parts — signing, the retry schedule, which answers are worth
//! another attempt — are `ninetrix_proto::notify`'s, shared with the API's A2A push notifications.

use std::time::Duration;

use ninetrix_proto::ApprovalId;
use ninetrix_proto::events::{ApprovalNotified, TraceEvent};
pub use ninetrix_proto::notify::{MAX_ATTEMPTS, retry_delay, signature, worth_retrying};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::config::SecretValue;
use crate::events::Events;

/// How long one attempt may take.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

/// What a notification says: the request, enough to decide it.
#[derive(Clone, Debug, Serialize)]
pub struct Notification {
    /// Always `approval_requested`.
    pub event: &'static str,
    /// The request.
    pub id: ApprovalId,
    /// `approval` or `question`.
    pub kind: &'static str,
    /// The thread whose turn waits.
    pub thread_id: String,
    /// The pool, agent and replica.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// The agent.
    pub agent: String,
    /// The replica.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replica: Option<u32>,
    /// The turn.
    pub turn_seq: u64,
    /// The tool called.
    pub tool: String,
    /// Its arguments, secret values masked.
    pub args: serde_json::Value,
    /// SHA-256 of its canonical arguments.
    pub args_hash: String,
    /// When the runner stored it (its clock).
    pub requested_at: String,
    /// Seconds it stands before it expires.
    pub timeout_secs: u64,
    /// How to decide it from the command line.
    pub decide: Commands,
}

/// The commands that decide a request.
#[derive(Clone, Debug, Serialize)]
pub struct Commands {
    /// Approve (an approval) or answer (a question).
    pub accept: String,
    /// Reject.
    pub reject: String,
}

impl Commands {
    /// The commands for request `id` of `kind`.
    pub fn for_request(id: ApprovalId, question: bool) -> Self {
        Commands {
            accept: if question {
                format!("ninetrix answer {id} TEXT")
            } else {
                format!("ninetrix approve {id}")
            },
            reject: format!("ninetrix deny {id} --reason REASON"),
        }
    }
}

/// Sends notifications for one agent.
#[derive(Clone)]
pub struct Notifier {
    url: String,
    secret: SecretValue,
    http: reqwest::Client,
    events: Events,
}

impl Notifier {
    /// A notifier posting to `url`, signing with `secret`.
    pub fn new(url: String, secret: SecretValue, http: reqwest::Client, events: Events) -> Self {
        Self {
            url,
            secret,
            http,
            events,
        }
    }

    /// Delivers `n` in the background: until the receiver takes it, it refuses it, the attempts
    /// run out, or `settled` is cancelled (the request was decided: nobody needs telling).
    pub fn send(&self, n: Notification, settled: CancellationToken) {
        let me = self.clone();
        tokio::spawn(async move { me.deliver(n, settled).await });
    }

    async fn deliver(&self, n: Notification, settled: CancellationToken) {
        let body = match serde_json::to_vec(&n) {
            Ok(b) => b,
            Err(e) => {
                tracing::error!("cannot encode the notification of {}: {e}", n.id);
                return;
            }
        };
        for attempt in 1..=MAX_ATTEMPTS {
            if settled.is_cancelled() {
                return;
            }
            let timestamp = chrono::Utc::now().timestamp();
            let sent = self
                .http
                .post(&self.url)
                .timeout(ATTEMPT_TIMEOUT)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .header(
                    "X-Ninetrix-Signature",
                    signature(self.secret.expose().as_bytes(), timestamp, &body),
                )
                .header("X-Ninetrix-Timestamp", timestamp.to_string())
                .header("X-Ninetrix-Delivery", n.id.to_string())
                .header("X-Ninetrix-Event", n.event)
                .body(body.clone())
                .send()
                .await;
            let (status, error, again) = match sent {
                Ok(r) if r.status().is_success() => (Some(r.status().as_u16()), None, false),
                Ok(r) => {
                    let s = r.status().as_u16();
                    (Some(s), Some(format!("HTTP {s}")), worth_retrying(s))
                }
                Err(e) => (None, Some(failure_text(&e)), true),
            };
            let last = !again || attempt == MAX_ATTEMPTS;
            let wait = retry_delay(attempt);
            self.events
                .emit(TraceEvent::ApprovalNotified(ApprovalNotified {
                    id: n.id,
                    attempt,
                    status,
                    ok: error.is_none(),
                    error,
                    retry_in_ms: (!last).then_some(wait.as_millis() as u64),
                }));
            if last {
                return;
            }
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = settled.cancelled() => return,
            }
        }
    }
}

/// Why a request failed, without the URL's query (it may carry a token) and with the cause.
fn failure_text(e: &reqwest::Error) -> String {
    let what = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "could not connect"
    } else {
        "failed"
    };
    let mut cause = String::new();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        cause = s.to_string();
        source = s.source();
    }
    if cause.is_empty() {
        what.to_string()
    } else {
        format!("{what}: {cause}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_notification_names_the_commands_that_decide_it() {
        let id = ApprovalId::new_v7();
        let question = Commands::for_request(id, true);
        assert_eq!(question.accept, format!("ninetrix answer {id} TEXT"));
        let approval = Commands::for_request(id, false);
        assert_eq!(approval.accept, format!("ninetrix approve {id}"));
        assert_eq!(
            approval.reject,
            format!("ninetrix deny {id} --reason REASON")
        );
    }

    #[test]
    fn the_runner_signs_and_backs_off_by_the_shared_rule() {
        // One rule for the runner's and the API's notifications (`ninetrix_proto::notify`).
        assert_eq!(
            signature(b"whsec", 1_700_000_000, br#"{"a":1}"#),
            ninetrix_proto::notify::signature(b"whsec", 1_700_000_000, br#"{"a":1}"#)
        );
        assert_eq!(retry_delay(MAX_ATTEMPTS).as_secs(), 64);
    }
}
