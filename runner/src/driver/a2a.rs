//! Calls to remote A2A collaborators (`ask_<name>` of a `{name, a2a}` collaborator), the I/O of
//! a delegated call whose target is remote: the task sent with the call's ledger key as its
//! `messageId` (so a resend after a restart finds the task it made), then followed with
//! `GetTask` until it ends — within `transfer_timeout` counted from the call's intent, not from
//! this runner's start — retrying what got no answer with the runner's backoff. What a task's
//! state means is `crate::a2a`'s pure `progress`; the ledger (intent before the send, outcome
//! recorded once) is the engine's, as for any handoff. Kill points around the send:
//! [`a2a::BEFORE_SEND`], [`a2a::AFTER_SEND`].

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use ninetrix_agentfile::A2aRemote;
use ninetrix_proto::api::HandoffStatus;
use ninetrix_proto::events::{self as ev, A2aTask, TraceEvent};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Stop;
use crate::a2a::{self, A2aError, Progress};
use crate::backoff;
use crate::config::SecretValue;
use crate::engine::{Delegated, Delegation};
use crate::events::Events;

/// What the calls to remote agents need of the runner, owned, so they run beside the wait for
/// the pool's collaborators.
pub(super) struct Remote {
    pub(super) client: a2a::Client,
    pub(super) events: Events,
    pub(super) secrets: HashMap<String, SecretValue>,
    pub(super) workspace: PathBuf,
    pub(super) shutdown: CancellationToken,
}

/// How a call ended short of an answer from the remote agent.
enum Short {
    /// `transfer_timeout` ran out.
    TimedOut,
    /// A request failed in a way no retry fixes.
    Failed(A2aError),
}

impl Remote {
    /// Runs every call (at the same time) to its answer; stops only for a shutdown.
    pub(super) async fn ask_all(&self, calls: &[Delegation]) -> Result<Vec<Delegated>, Stop> {
        let asked = calls
            .iter()
            .filter_map(|d| Some(self.ask(d, d.remote.as_ref()?)));
        futures_util::future::join_all(asked)
            .await
            .into_iter()
            .collect()
    }

    /// One call: its answer — the reply, or an error naming why there is none.
    async fn ask(&self, d: &Delegation, remote: &A2aRemote) -> Result<Delegated, Stop> {
        let started = Instant::now();
        let answer = |content: String, is_error: bool| Delegated {
            call_id: d.call.call_id.clone(),
            content,
            is_error,
            cost_usd: 0.0,
        };
        let bearer = match &remote.secret {
            Some(name) => match self.secrets.get(name) {
                Some(value) => Some(value),
                None => {
                    return Ok(answer(
                        format!(
                            "Not done: the secret `{name}` that calls to `{}` carry is not \
                             given to this agent (/run/secrets/{name}); provide it and run `up`.",
                            d.agent
                        ),
                        true,
                    ));
                }
            },
            None => None,
        };
        let deadline = started + left(d.timeout_secs, d.since, chrono::Utc::now());
        let mut seen = A2aTask {
            card: remote.card.clone(),
            task_id: None,
            state: None,
        };
        let ended = tokio::select! {
            r = self.exchange(d, remote, bearer, &mut seen) => r,
            () = tokio::time::sleep_until(deadline) => Err(Short::TimedOut),
            () = self.shutdown.cancelled() => return Err(Stop::Shutdown),
        };
        let (content, is_error, status) = match ended {
            Ok((content, is_error)) => {
                let status = if is_error {
                    HandoffStatus::Failed
                } else {
                    HandoffStatus::Replied
                };
                (content, is_error, status)
            }
            Err(Short::TimedOut) => {
                let waited = d.timeout_secs;
                let text = a2a::timed_out(&d.agent, waited, seen.task_id.as_deref());
                (text, true, HandoffStatus::TimedOut)
            }
            Err(Short::Failed(e)) => (
                format!(
                    "Not done: the remote agent `{}` could not be asked: {e}",
                    d.agent
                ),
                true,
                HandoffStatus::Failed,
            ),
        };
        self.events
            .emit(TraceEvent::HandoffSettled(ev::HandoffSettled {
                delivery_key: a2a::message_id(&d.call.key),
                agent: d.agent.clone(),
                thread_id: None,
                a2a: Some(seen),
                status,
                reply: crate::engine::preview(&content, 200),
                cost_usd: 0.0,
                waited_ms: started.elapsed().as_millis() as u64,
            }));
        Ok(answer(content, is_error))
    }

    /// The card, the send, and the task followed to its end; `seen` keeps what is known of the
    /// task for the trace.
    async fn exchange(
        &self,
        d: &Delegation,
        remote: &A2aRemote,
        bearer: Option<&SecretValue>,
        seen: &mut A2aTask,
    ) -> Result<(String, bool), Short> {
        crate::snapshots::faults::reached(a2a::BEFORE_SEND, &self.workspace).await;
        let endpoint = retrying(|| self.client.endpoint(&remote.card)).await?;
        let message_id = a2a::message_id(&d.call.key);
        let request = a2a::send_request(&message_id, &d.task, d.context.as_deref());
        let sent = retrying(|| self.client.send(&endpoint, bearer, &request)).await?;
        let (mut current, said) = match sent {
            ::a2a::SendMessageResponse::Task(task) => {
                seen.task_id = Some(task.id.clone());
                seen.state = Some(a2a::wire_state(&task.status.state));
                (Some(task), None)
            }
            ::a2a::SendMessageResponse::Message(m) => (None, Some(a2a::message_text(&m))),
        };
        self.events.emit(TraceEvent::HandoffSent(ev::HandoffSent {
            delivery_key: message_id,
            tool: d.call.name.clone(),
            agent: d.agent.clone(),
            session: String::new(),
            thread_id: None,
            a2a: Some(seen.clone()),
            task: crate::engine::preview(&d.task, 200),
            depth: d.chain.len() as u32,
            reattached: d.since.is_some(),
        }));
        crate::snapshots::faults::reached(a2a::AFTER_SEND, &self.workspace).await;
        // Answered with a message instead of a task: that message is the reply.
        if let Some(text) = said {
            return Ok((text, false));
        }
        while let Some(task) = current.take() {
            if let Progress::Done { content, is_error } = a2a::progress(&d.agent, &task) {
                return Ok((content, is_error));
            }
            tokio::time::sleep(a2a::POLL).await;
            let next = retrying(|| self.client.get_task(&endpoint, bearer, &task.id)).await?;
            seen.state = Some(a2a::wire_state(&next.status.state));
            current = Some(next);
        }
        Ok((String::new(), false))
    }
}

/// How long a call may still wait: `timeout_secs` from its intent (`since`, when an earlier
/// runner stored it; else from now), never less than nothing.
fn left(
    timeout_secs: u64,
    since: Option<chrono::DateTime<chrono::Utc>>,
    now: chrono::DateTime<chrono::Utc>,
) -> Duration {
    let spent = since
        .and_then(|t| (now - t).to_std().ok())
        .unwrap_or_default();
    Duration::from_secs(timeout_secs).saturating_sub(spent)
}

/// `call` until it answers, retrying what got no answer with the runner's backoff (the caller
/// bounds it with the deadline).
async fn retrying<T, F, Fut>(call: F) -> Result<T, Short>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T, A2aError>>,
{
    backoff::patiently(
        backoff::API,
        None,
        std::future::pending::<std::convert::Infallible>(),
        A2aError::transient,
        |e, delay| {
            tracing::warn!("{e}; retrying in {} ms", delay.as_millis());
        },
        call,
    )
    .await
    .map_err(|gave_up| match gave_up {
        backoff::GaveUp::Failed(e) | backoff::GaveUp::Patience(e) => Short::Failed(e),
        backoff::GaveUp::Stopped(never) => match never {},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_runs_from_the_intent_not_from_the_restart() {
        let now = chrono::Utc::now();
        assert_eq!(left(600, None, now), Duration::from_secs(600));
        let earlier = now - chrono::Duration::seconds(90);
        assert_eq!(left(600, Some(earlier), now), Duration::from_secs(510));
        let long_ago = now - chrono::Duration::hours(2);
        assert_eq!(left(600, Some(long_ago), now), Duration::ZERO);
        let ahead = now + chrono::Duration::seconds(5);
        assert_eq!(
            left(600, Some(ahead), now),
            Duration::from_secs(600),
            "a clock behind the API's costs nothing"
        );
    }
}
