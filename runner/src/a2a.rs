//! The client of remote A2A agents (docs/a2a.md, "Calling remote A2A agents"): what a call to
//! one sends and what its task's state means for the call, as pure functions, and the HTTP of
//! it — the agent's card (fetched once per runner life, bounded in size and time), `SendMessage`
//! and `GetTask` over A2A 1.0's JSON-RPC binding, with the official SDK's wire types (`a2a-lf`).
//!
//! It knows nothing of the ledger, events or deadlines: `driver/a2a.rs` runs a call through
//! them. The bearer secret is only ever put in the `Authorization` header; no error or value
//! of this module holds it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ::a2a::{
    AgentCard, GetTaskRequest, JsonRpcId, JsonRpcRequest, JsonRpcResponse, Message, Part, Role,
    SendMessageConfiguration, SendMessageRequest, SendMessageResponse, Task, TaskState,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::config::SecretValue;

/// Most bytes of an agent card.
pub const CARD_MAX_BYTES: usize = 256 * 1024;
/// Most bytes of an answer to `SendMessage` or `GetTask`.
pub const ANSWER_MAX_BYTES: usize = 4 * 1024 * 1024;
/// How long one request may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a task that is not over is read again (`GetTask`).
pub const POLL: Duration = Duration::from_secs(1);
/// Kill point (`NINETRIX_RUNNER_CRASH_AT`): a call's intent is stored, nothing is sent.
pub const BEFORE_SEND: &str = "a2a_before_send";
/// Kill point: the remote agent answered the send with its task; the outcome is not stored.
pub const AFTER_SEND: &str = "a2a_after_send";
/// The A2A version spoken (the `A2A-Version` header, and the interface picked from a card).
pub const VERSION: &str = ::a2a::VERSION;

/// Why a request to a remote A2A agent failed. Never holds the bearer secret.
#[derive(Debug, thiserror::Error)]
pub enum A2aError {
    /// The card could not be fetched, or is not an agent card.
    #[error("the agent card at {url} could not be read: {why}")]
    Card {
        /// The card's URL.
        url: String,
        /// Why.
        why: String,
        /// Whether a later try may succeed (a connection error, a 5xx, a timeout).
        transient: bool,
    },
    /// The card offers no JSON-RPC interface of A2A 1.0.
    #[error(
        "the agent card at {url} offers no JSON-RPC interface of A2A {VERSION} (it offers: \
         {offered}); ninetrix speaks A2A {VERSION} over JSON-RPC"
    )]
    NoJsonRpc {
        /// The card's URL.
        url: String,
        /// What it offers, in words.
        offered: String,
    },
    /// The request did not get an answer (connection refused or lost, timeout).
    #[error("{method} to {url} got no answer: {why}")]
    Transport {
        /// The JSON-RPC method.
        method: &'static str,
        /// The endpoint.
        url: String,
        /// Why.
        why: String,
    },
    /// The endpoint answered with an HTTP error status.
    #[error("{method} to {url} was answered HTTP {status}{detail}")]
    Status {
        /// The JSON-RPC method.
        method: &'static str,
        /// The endpoint.
        url: String,
        /// The status.
        status: u16,
        /// What the body said, if anything (`: …`).
        detail: String,
    },
    /// The endpoint answered with a JSON-RPC error.
    #[error("{method} was refused by the remote agent (JSON-RPC error {code}): {message}")]
    Rpc {
        /// The JSON-RPC method.
        method: &'static str,
        /// The error's code.
        code: i32,
        /// Its message.
        message: String,
    },
    /// The answer is not an A2A 1.0 answer.
    #[error("the answer to {method} is not A2A {VERSION}: {why}")]
    Unreadable {
        /// The JSON-RPC method.
        method: &'static str,
        /// Why.
        why: String,
    },
}

impl A2aError {
    /// Whether trying again may succeed: no answer, a 408, 429 or 5xx, a transient card error.
    pub fn transient(&self) -> bool {
        match self {
            A2aError::Card { transient, .. } => *transient,
            A2aError::Transport { .. } => true,
            A2aError::Status { status, .. } => transient_status(*status),
            A2aError::NoJsonRpc { .. } | A2aError::Rpc { .. } | A2aError::Unreadable { .. } => {
                false
            }
        }
    }
}

fn transient_status(status: u16) -> bool {
    status == 408 || status == 429 || status >= 500
}

/// The A2A `messageId` of the call with ledger key `key`: the same on every attempt and after a
/// restart, so a compliant server answers a resent message with the task it made.
pub fn message_id(key: &str) -> String {
    format!("ninetrix-{key}")
}

/// The JSON-RPC endpoint of `card`: its first interface with binding `JSONRPC` and protocol
/// version 1.0 (`1.0`, or `1.0.x`); `None` when it has none.
pub fn jsonrpc_endpoint(card: &AgentCard) -> Option<&str> {
    card.supported_interfaces
        .iter()
        .find(|i| {
            i.protocol_binding
                .eq_ignore_ascii_case(::a2a::TRANSPORT_PROTOCOL_JSONRPC)
                && (i.protocol_version == VERSION
                    || i.protocol_version.starts_with(&format!("{VERSION}.")))
        })
        .map(|i| i.url.as_str())
}

/// What `card` offers, in words (`GRPC 1.0 at …, JSONRPC 0.3 at …`), for [`A2aError::NoJsonRpc`].
fn offered(card: &AgentCard) -> String {
    let list: Vec<String> = card
        .supported_interfaces
        .iter()
        .map(|i| format!("{} {} at {}", i.protocol_binding, i.protocol_version, i.url))
        .collect();
    if list.is_empty() {
        "no interface".into()
    } else {
        list.join(", ")
    }
}

/// The `SendMessage` of a call: one user message, its text the task (and the context after a
/// blank line, when the model gave one), no context ID (a new context per call), answered at
/// once (`returnImmediately`): the task is followed with `GetTask`.
pub fn send_request(message_id: &str, task: &str, context: Option<&str>) -> SendMessageRequest {
    let text = match context {
        Some(c) => format!("{task}\n\nContext:\n{c}"),
        None => task.to_string(),
    };
    let mut message = Message::new(Role::User, vec![Part::text(text)]);
    message.message_id = message_id.to_string();
    SendMessageRequest {
        message,
        configuration: Some(SendMessageConfiguration {
            accepted_output_modes: None,
            task_push_notification_config: None,
            history_length: None,
            return_immediately: Some(true),
        }),
        metadata: None,
        tenant: None,
    }
}

/// Where a remote task stands, for the call that sent it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Not over: read it again.
    Working,
    /// Over (or waiting for input, which ninetrix cannot give): the call's result.
    Done {
        /// The result text the model sees.
        content: String,
        /// Whether it is an error.
        is_error: bool,
    },
}

/// What `task` of remote agent `agent` means for the call: still working, or its result —
/// COMPLETED: its reply artifact's text (else the status message's); FAILED, CANCELED,
/// REJECTED: an error naming the state and the remote's message; INPUT_REQUIRED: "the remote
/// agent asks: …"; AUTH_REQUIRED: an error saying so.
pub fn progress(agent: &str, task: &Task) -> Progress {
    let said = task
        .status
        .message
        .as_ref()
        .map(message_text)
        .filter(|t| !t.trim().is_empty());
    let error = |content: String| Progress::Done {
        content,
        is_error: true,
    };
    let id = &task.id;
    match task.status.state {
        TaskState::Completed => Progress::Done {
            content: reply_text(task)
                .or(said)
                .unwrap_or_else(|| format!("(`{agent}` completed task {id} without a reply)")),
            is_error: false,
        },
        TaskState::Failed | TaskState::Canceled | TaskState::Rejected => error(format!(
            "Not done: the remote agent `{agent}` ended task {id} {}: {}",
            state_name(&task.status.state),
            said.as_deref().unwrap_or("it gave no reason")
        )),
        TaskState::InputRequired => error(format!(
            "Not done: the remote agent asks: {} (task {id} of `{agent}` is INPUT_REQUIRED; \
             this call cannot answer it: call `ask_{agent}` again with a task that says it)",
            said.as_deref().unwrap_or("(no question given)")
        )),
        TaskState::AuthRequired => error(format!(
            "Not done: the remote agent `{agent}` needs authentication for task {id} \
             (AUTH_REQUIRED){}",
            said.map(|s| format!(": {s}")).unwrap_or_default()
        )),
        TaskState::Submitted | TaskState::Working | TaskState::Unspecified => Progress::Working,
    }
}

/// The result of a call that timed out waiting for task `task_id` (if the agent made one).
pub fn timed_out(agent: &str, waited_secs: u64, task_id: Option<&str>) -> String {
    format!(
        "Not done: the remote agent `{agent}` did not finish within {} (transfer_timeout{}): \
         timed out. It may still be working; its later answer will not reach this call.",
        ninetrix_agentfile::units::format_duration(waited_secs),
        task_id.map(|t| format!("; task {t}")).unwrap_or_default()
    )
}

/// A task state as the wire names it, without the prefix: `FAILED`.
pub fn state_name(state: &TaskState) -> String {
    wire_state(state)
        .trim_start_matches("TASK_STATE_")
        .to_string()
}

/// A task state as the wire names it: `TASK_STATE_FAILED`.
pub fn wire_state(state: &TaskState) -> String {
    serde_json::to_value(state)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// The text of a message: its text parts, one per line.
pub fn message_text(m: &Message) -> String {
    texts(&m.parts).join("\n")
}

fn texts(parts: &[Part]) -> Vec<&str> {
    parts.iter().filter_map(Part::as_text).collect()
}

/// A completed task's reply: the text of its artifact named `reply` if it has one, else of
/// all its artifacts; `None` when they hold no text.
fn reply_text(task: &Task) -> Option<String> {
    let artifacts = task.artifacts.as_deref().unwrap_or_default();
    let named: Vec<_> = artifacts
        .iter()
        .filter(|a| a.name.as_deref() == Some("reply"))
        .collect();
    let chosen: Vec<_> = if named.is_empty() {
        artifacts.iter().collect()
    } else {
        named
    };
    let text = chosen
        .iter()
        .flat_map(|a| texts(&a.parts))
        .collect::<Vec<_>>()
        .join("\n");
    (!text.trim().is_empty()).then_some(text)
}

/// The HTTP side: cards (cached by URL for the runner's life) and JSON-RPC calls.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    /// The JSON-RPC endpoint of each card read so far, by the card's URL.
    endpoints: Arc<Mutex<HashMap<String, String>>>,
}

impl Client {
    /// A client making its requests with `http`.
    pub fn new(http: reqwest::Client) -> Client {
        Client {
            http,
            endpoints: Arc::default(),
        }
    }

    /// The JSON-RPC endpoint the card at `card_url` names: fetched (GET, without the secret:
    /// a card is public) once per runner life, then from the cache.
    pub async fn endpoint(&self, card_url: &str) -> Result<String, A2aError> {
        if let Some(url) = self.cached(card_url) {
            return Ok(url);
        }
        let card_error = |why: String, transient: bool| A2aError::Card {
            url: card_url.to_string(),
            why,
            transient,
        };
        let response = self
            .http
            .get(card_url)
            .header(reqwest::header::ACCEPT, "application/json")
            .timeout(REQUEST_TIMEOUT)
            .send()
            .await
            .map_err(|e| card_error(describe(&e), true))?;
        let status = response.status();
        if !status.is_success() {
            let why = format!("HTTP {}", status.as_u16());
            return Err(card_error(why, transient_status(status.as_u16())));
        }
        let body = read_bounded(response, CARD_MAX_BYTES)
            .await
            .map_err(|why| card_error(why, true))?;
        let card: AgentCard = serde_json::from_slice(&body)
            .map_err(|e| card_error(format!("it is not an A2A agent card: {e}"), false))?;
        let Some(url) = jsonrpc_endpoint(&card).map(str::to_string) else {
            return Err(A2aError::NoJsonRpc {
                url: card_url.to_string(),
                offered: offered(&card),
            });
        };
        self.endpoints
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(card_url.to_string(), url.clone());
        Ok(url)
    }

    fn cached(&self, card_url: &str) -> Option<String> {
        self.endpoints
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(card_url)
            .cloned()
    }

    /// `SendMessage` to `endpoint`.
    pub async fn send(
        &self,
        endpoint: &str,
        bearer: Option<&SecretValue>,
        request: &SendMessageRequest,
    ) -> Result<SendMessageResponse, A2aError> {
        self.call(endpoint, bearer, ::a2a::methods::SEND_MESSAGE, request)
            .await
    }

    /// `GetTask` of task `id` at `endpoint`.
    pub async fn get_task(
        &self,
        endpoint: &str,
        bearer: Option<&SecretValue>,
        id: &str,
    ) -> Result<Task, A2aError> {
        let request = GetTaskRequest {
            id: id.to_string(),
            history_length: None,
            tenant: None,
        };
        self.call(endpoint, bearer, ::a2a::methods::GET_TASK, &request)
            .await
    }

    /// One JSON-RPC call: `A2A-Version: 1.0`, the bearer secret when there is one, the answer
    /// read bounded and decoded as `T`.
    async fn call<T: DeserializeOwned>(
        &self,
        endpoint: &str,
        bearer: Option<&SecretValue>,
        method: &'static str,
        params: &impl Serialize,
    ) -> Result<T, A2aError> {
        let unreadable = |why: String| A2aError::Unreadable { method, why };
        let params = serde_json::to_value(params).map_err(|e| unreadable(e.to_string()))?;
        let body = JsonRpcRequest::new(JsonRpcId::Number(1), method, Some(params));
        let mut request = self
            .http
            .post(endpoint)
            .header(::a2a::SVC_PARAM_VERSION, VERSION)
            .header(reqwest::header::ACCEPT, "application/json")
            .timeout(REQUEST_TIMEOUT)
            .json(&body);
        if let Some(secret) = bearer {
            request = request.bearer_auth(secret.expose());
        }
        let transport = |why: String| A2aError::Transport {
            method,
            url: endpoint.to_string(),
            why,
        };
        let response = request.send().await.map_err(|e| transport(describe(&e)))?;
        let status = response.status();
        let bytes = read_bounded(response, ANSWER_MAX_BYTES)
            .await
            .map_err(transport)?;
        let answer: Result<JsonRpcResponse, _> = serde_json::from_slice(&bytes);
        let refusal = answer.as_ref().ok().and_then(|a| a.error.as_ref());
        if !status.is_success() {
            return Err(A2aError::Status {
                method,
                url: endpoint.to_string(),
                status: status.as_u16(),
                detail: refusal
                    .map(|e| format!(": {}", e.message))
                    .unwrap_or_default(),
            });
        }
        if let Some(error) = refusal {
            return Err(A2aError::Rpc {
                method,
                code: error.code,
                message: error.message.clone(),
            });
        }
        let result = answer
            .map_err(|e| unreadable(e.to_string()))?
            .result
            .ok_or_else(|| unreadable("neither `result` nor `error`".into()))?;
        serde_json::from_value(result).map_err(|e| unreadable(e.to_string()))
    }
}

/// A reqwest error in words, with its causes (no header is ever part of one).
fn describe(e: &reqwest::Error) -> String {
    let mut text = if e.is_timeout() {
        format!("timed out after {}s", REQUEST_TIMEOUT.as_secs())
    } else {
        e.to_string()
    };
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

/// The body of `response`, refused past `max` bytes.
async fn read_bounded(mut response: reqwest::Response, max: usize) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| describe(&e))? {
        if body.len() + chunk.len() > max {
            return Err(format!("the answer is larger than {max} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn task(state: &str, artifacts: serde_json::Value, said: Option<&str>) -> Task {
        let mut status = json!({ "state": state });
        if let Some(text) = said {
            status["message"] = json!({
                "messageId": "m", "role": "ROLE_AGENT", "parts": [{ "text": text }]
            });
        }
        serde_json::from_value(json!({
            "id": "t-1", "contextId": "c", "status": status, "artifacts": artifacts
        }))
        .unwrap()
    }

    fn done(content: &str, is_error: bool) -> Progress {
        Progress::Done {
            content: content.into(),
            is_error,
        }
    }

    #[test]
    fn the_send_is_one_user_text_part_with_the_ledger_message_id_answered_at_once() {
        let r = send_request(&message_id("abc"), "find Ada", Some("in Lisbon"));
        let wire = serde_json::to_value(&r).unwrap();
        assert_eq!(
            wire,
            json!({
                "message": {
                    "messageId": "ninetrix-abc",
                    "role": "ROLE_USER",
                    "parts": [{ "text": "find Ada\n\nContext:\nin Lisbon" }]
                },
                "configuration": { "returnImmediately": true }
            })
        );
        let plain = send_request("m", "find Ada", None);
        assert_eq!(plain.message.text(), Some("find Ada"));
        assert_eq!(plain.message.context_id, None, "a new context per call");
    }

    #[test]
    fn the_endpoint_is_the_jsonrpc_interface_of_a2a_1_0() {
        let card = |interfaces: serde_json::Value| -> AgentCard {
            serde_json::from_value(json!({
                "name": "crm", "version": "1", "capabilities": {},
                "supportedInterfaces": interfaces
            }))
            .unwrap()
        };
        let c = card(json!([
            { "url": "https://x/grpc", "protocolBinding": "GRPC", "protocolVersion": "1.0" },
            { "url": "https://x/old", "protocolBinding": "JSONRPC", "protocolVersion": "0.3" },
            { "url": "https://x/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0" }
        ]));
        assert_eq!(jsonrpc_endpoint(&c), Some("https://x/a2a"));
        let c = card(json!([
            { "url": "https://x/old", "protocolBinding": "JSONRPC", "protocolVersion": "0.3" }
        ]));
        assert_eq!(jsonrpc_endpoint(&c), None);
        assert_eq!(offered(&c), "JSONRPC 0.3 at https://x/old");
        assert_eq!(offered(&card(json!([]))), "no interface");
    }

    #[test]
    fn a_completed_task_answers_with_its_reply_artifact_else_its_status_message() {
        let arts = json!([
            { "artifactId": "a", "name": "notes", "parts": [{ "text": "scratch" }] },
            { "artifactId": "b", "name": "reply", "parts": [{ "text": "Ada, " }, { "text": "Lisbon" }] }
        ]);
        assert_eq!(
            progress("crm", &task("TASK_STATE_COMPLETED", arts, Some("ok"))),
            done("Ada, \nLisbon", false)
        );
        let unnamed = json!([{ "artifactId": "a", "parts": [{ "text": "all" }] }]);
        assert_eq!(
            progress("crm", &task("TASK_STATE_COMPLETED", unnamed, None)),
            done("all", false)
        );
        assert_eq!(
            progress(
                "crm",
                &task("TASK_STATE_COMPLETED", json!([]), Some("said so"))
            ),
            done("said so", false)
        );
        assert_eq!(
            progress("crm", &task("TASK_STATE_COMPLETED", json!([]), None)),
            done("(`crm` completed task t-1 without a reply)", false)
        );
    }

    #[test]
    fn ended_and_waiting_tasks_are_errors_naming_the_state_and_what_the_remote_said() {
        for (state, name) in [
            ("TASK_STATE_FAILED", "FAILED"),
            ("TASK_STATE_CANCELED", "CANCELED"),
            ("TASK_STATE_REJECTED", "REJECTED"),
        ] {
            assert_eq!(
                progress("crm", &task(state, json!([]), Some("no such customer"))),
                done(
                    &format!(
                        "Not done: the remote agent `crm` ended task t-1 {name}: no such customer"
                    ),
                    true
                )
            );
        }
        let Progress::Done { content, is_error } = progress(
            "crm",
            &task("TASK_STATE_INPUT_REQUIRED", json!([]), Some("which one?")),
        ) else {
            panic!("input required ends the call")
        };
        assert!(is_error);
        assert!(
            content.starts_with("Not done: the remote agent asks: which one? (task t-1"),
            "{content}"
        );
        for state in [
            "TASK_STATE_SUBMITTED",
            "TASK_STATE_WORKING",
            "TASK_STATE_UNSPECIFIED",
        ] {
            assert_eq!(
                progress("crm", &task(state, json!([]), None)),
                Progress::Working
            );
        }
        assert_eq!(
            timed_out("crm", 90, Some("t-1")),
            "Not done: the remote agent `crm` did not finish within 90s (transfer_timeout; task \
             t-1): timed out. It may still be working; its later answer will not reach this \
             call."
        );
    }

    #[test]
    fn only_no_answer_and_server_side_statuses_are_worth_a_retry() {
        let status = |status| A2aError::Status {
            method: "GetTask",
            url: "u".into(),
            status,
            detail: String::new(),
        };
        assert!(status(503).transient() && status(429).transient() && status(408).transient());
        assert!(!status(401).transient() && !status(404).transient());
        let rpc = A2aError::Rpc {
            method: "SendMessage",
            code: -32602,
            message: "bad".into(),
        };
        assert!(!rpc.transient());
        assert_eq!(
            rpc.to_string(),
            "SendMessage was refused by the remote agent (JSON-RPC error -32602): bad"
        );
    }
}
