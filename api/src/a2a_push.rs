//! The A2A push dispatcher (docs/a2a.md, "Push notifications"): a task of every API process,
//! started with the scheduler and stopped at shutdown, that POSTs each change of state of a task
//! with webhooks to each of them — a `StreamResponse` `{"task": …}`, signed and named by
//! `a2a_rules::push_headers` — at least once. What was delivered is stored per webhook
//! (`last_state`), so an API restart goes on where it stopped; a failed attempt is retried with
//! `ninetrix_proto::notify`'s backoff while the answer may change, up to its attempts, and then
//! given up for that state. It wakes on any thread's notification and every second.

use std::time::Duration;

use a2a::StreamResponse;

use crate::a2a_rules::{push_headers, state_name};
use crate::state::App;
use crate::store::{A2aTask, PushResult, PushTarget};

/// How often the dispatcher looks even when nothing woke it (a backoff's end, another API
/// replica's writes).
const TICK: Duration = Duration::from_secs(1);
/// How long one delivery attempt may take.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

/// Delivers until the server shuts down.
pub(crate) async fn run(app: App) {
    let http = ninetrix_client::http_client();
    loop {
        tokio::select! {
            () = app.hub.pushes().notified() => {}
            () = tokio::time::sleep(TICK) => {}
            () = app.shutdown.cancelled() => return,
        }
        let due = match app.store.a2a_push_due().await {
            Ok(due) => due,
            Err(e) => {
                tracing::warn!(error = %e, "the A2A push dispatcher cannot read its webhooks; trying again");
                continue;
            }
        };
        for (target, task) in due {
            if app.shutdown.is_cancelled() {
                return;
            }
            let result = deliver(&http, &target, &task).await;
            if let Err(e) = app.store.a2a_push_record(result).await {
                tracing::warn!(error = %e, task_id = %task.task_id, "cannot record an A2A push delivery; it will be sent again");
            }
        }
    }
}

/// One attempt at delivering the task's state to one webhook, and what became of it.
async fn deliver(http: &reqwest::Client, target: &PushTarget, task: &A2aTask) -> PushResult {
    let state = state_name(&task.phase.state());
    let config = &target.config;
    let id = config.id.clone().unwrap_or_default();
    let body = serde_json::to_vec(&StreamResponse::Task(task.to_a2a(None))).unwrap_or_default();
    let delivery = format!("{}:{state}", task.task_id);
    let bearer = config
        .authentication
        .as_ref()
        .filter(|a| a.scheme.eq_ignore_ascii_case("bearer"))
        .and_then(|a| a.credentials.as_deref());
    let timestamp = chrono::Utc::now().timestamp();
    let mut request = http.post(&config.url).timeout(ATTEMPT_TIMEOUT);
    for (name, value) in push_headers(config.token.as_deref(), bearer, &delivery, timestamp, &body)
    {
        request = request.header(name, value);
    }
    // `None`: no answer (a connection error, a timeout).
    let status = request
        .body(body)
        .send()
        .await
        .ok()
        .map(|r| r.status().as_u16());
    let attempt = target.attempts + 1;
    let delivered = status.is_some_and(|s| (200..300).contains(&s));
    let retry = status.is_none_or(ninetrix_proto::notify::worth_retrying);
    let given_up = !delivered && (!retry || attempt >= ninetrix_proto::notify::MAX_ATTEMPTS);
    if delivered {
        tracing::info!(task_id = %task.task_id, state = %state, config = %id, "a2a push delivered");
    } else {
        // The URL is not logged: its query may carry a credential.
        tracing::warn!(task_id = %task.task_id, state = %state, config = %id, ?status, attempt,
            given_up, "a2a push not delivered");
    }
    PushResult {
        task_id: task.task_id.clone(),
        id,
        state,
        retry: (!delivered && !given_up).then(|| {
            let wait = ninetrix_proto::notify::retry_delay(attempt);
            let at = chrono::Utc::now().timestamp_millis()
                + i64::try_from(wait.as_millis()).unwrap_or(i64::MAX);
            (attempt, at)
        }),
    }
}
