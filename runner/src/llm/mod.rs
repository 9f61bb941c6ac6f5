//! Model providers: Anthropic's Messages API and OpenAI's Chat Completions (both streamed over
//! SSE), and the offline `scripted` model. One [`Llm`] in front of them adds retries with backoff
//! (honouring `retry-after`) and cost accounting. An assistant message exists only once the
//! stream's terminal event has arrived; a cut or idle stream is an error, never a partial message.

mod anthropic;
mod openai;
mod scripted;

use std::time::{Duration, Instant};

use ninetrix_client::sse;
use ninetrix_proto::Message;
use ninetrix_proto::agentfile::{AgentSpec, Provider};
use ninetrix_proto::events::LlmRetry;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::engine::{CallUsage, LlmTurn};

/// A tool as offered to the model.
#[derive(Clone, Debug)]
pub struct ToolDef {
    /// Its name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// JSON Schema of its arguments.
    pub parameters: serde_json::Value,
}

/// One model call.
#[derive(Clone, Debug)]
pub struct LlmRequest<'a> {
    /// The system prompt.
    pub system: Option<&'a str>,
    /// The history.
    pub history: &'a [Message],
    /// The tools.
    pub tools: &'a [ToolDef],
}

/// Why a model call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LlmError {
    /// Worth retrying: rate limits, overload, 5xx, a cut or idle stream, a connection error.
    #[error("{message}")]
    Transient {
        /// What happened.
        message: String,
        /// The server's `retry-after`, if it gave one.
        retry_after: Option<Duration>,
    },
    /// Not worth retrying: a bad request, bad credentials, a refused model.
    #[error("{0}")]
    Fatal(String),
    /// Shutdown cancelled the call.
    #[error("cancelled")]
    Cancelled,
}

/// What a provider returns before accounting.
#[derive(Clone, Debug)]
pub(crate) struct RawTurn {
    pub(crate) message: Message,
    pub(crate) input_tokens: u64,
    pub(crate) output_tokens: u64,
    pub(crate) stop_reason: String,
    pub(crate) model: String,
}

/// USD per million (input, output) tokens, by model-name prefix. Unknown models cost 0 (and a
/// budget cannot be enforced for them; the runner logs that once).
const PRICES: &[(&str, f64, f64)] = &[
    ("claude-opus-4-1", 15.0, 75.0),
    ("claude-opus-4-0", 15.0, 75.0),
    ("claude-opus-4", 5.0, 25.0),
    ("claude-sonnet-4", 3.0, 15.0),
    ("claude-3-7-sonnet", 3.0, 15.0),
    ("claude-haiku-4", 1.0, 5.0),
    ("claude-3-5-haiku", 0.8, 4.0),
    ("gpt-4o-mini", 0.15, 0.6),
    ("gpt-4o", 2.5, 10.0),
    ("gpt-4.1-nano", 0.1, 0.4),
    ("gpt-4.1-mini", 0.4, 1.6),
    ("gpt-4.1", 2.0, 8.0),
    ("gpt-5-nano", 0.05, 0.4),
    ("gpt-5-mini", 0.25, 2.0),
    ("gpt-5", 1.25, 10.0),
    ("o4-mini", 1.1, 4.4),
    ("o3", 2.0, 8.0),
];

/// The price of a call, if the model is known.
pub fn cost(model: &str, input_tokens: u64, output_tokens: u64) -> Option<f64> {
    PRICES
        .iter()
        .find(|(prefix, _, _)| model.starts_with(prefix))
        .map(|(_, i, o)| (input_tokens as f64 * i + output_tokens as f64 * o) / 1_000_000.0)
}

enum Backend {
    Scripted(scripted::Scripted),
    Anthropic(anthropic::Anthropic),
    OpenAi(openai::OpenAi),
}

/// The agent's model, with retries.
pub struct Llm {
    backend: Backend,
    /// Attempts per call before giving up (transient errors only).
    pub max_attempts: u32,
    /// The longest wait between attempts.
    pub max_backoff: Duration,
}

impl Llm {
    /// The provider the spec names.
    pub fn new(config: &Config, http: reqwest::Client) -> Llm {
        let spec: &AgentSpec = &config.spec;
        let key = spec
            .runtime
            .api_key_secret
            .as_ref()
            .and_then(|name| config.secrets.get(name))
            .cloned();
        let backend = match spec.runtime.provider {
            Provider::Scripted => {
                Backend::Scripted(scripted::Scripted::new(spec.runtime.script.clone()))
            }
            Provider::Anthropic => Backend::Anthropic(anthropic::Anthropic::new(
                http,
                spec,
                key,
                config.stream_idle_timeout,
            )),
            Provider::Openai => Backend::OpenAi(openai::OpenAi::new(
                http,
                spec,
                key,
                config.stream_idle_timeout,
            )),
        };
        Llm {
            backend,
            max_attempts: 6,
            max_backoff: Duration::from_secs(30),
        }
    }

    /// Calls the model, retrying transient failures with exponential backoff (or the server's
    /// `retry-after`); each retry is reported to `on_retry` before the wait. Cancellation aborts
    /// at once.
    pub async fn complete(
        &self,
        req: &LlmRequest<'_>,
        cancel: &CancellationToken,
        on_retry: impl Fn(LlmRetry),
    ) -> Result<LlmTurn, LlmError> {
        let mut delay = Duration::from_millis(500);
        let mut attempt = 1;
        loop {
            let started = Instant::now();
            let result = tokio::select! {
                r = self.once(req) => r,
                () = cancel.cancelled() => return Err(LlmError::Cancelled),
            };
            match result {
                Ok(raw) => {
                    let usage = CallUsage {
                        input_tokens: raw.input_tokens,
                        output_tokens: raw.output_tokens,
                        cost_usd: cost(&raw.model, raw.input_tokens, raw.output_tokens)
                            .unwrap_or(0.0),
                    };
                    return Ok(LlmTurn {
                        message: raw.message,
                        usage,
                        model: raw.model,
                        stop_reason: raw.stop_reason,
                        latency_ms: started.elapsed().as_millis() as u64,
                    });
                }
                Err(LlmError::Transient {
                    message,
                    retry_after,
                }) if attempt < self.max_attempts => {
                    let wait = retry_after.unwrap_or(delay).min(self.max_backoff);
                    on_retry(LlmRetry {
                        attempt,
                        max_attempts: Some(self.max_attempts),
                        reason: message,
                        retry_in_ms: wait.as_millis() as u64,
                    });
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        () = cancel.cancelled() => return Err(LlmError::Cancelled),
                    }
                    delay = (delay * 2).min(self.max_backoff);
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn once(&self, req: &LlmRequest<'_>) -> Result<RawTurn, LlmError> {
        match &self.backend {
            Backend::Scripted(s) => s.complete(req),
            Backend::Anthropic(a) => a.complete(req).await,
            Backend::OpenAi(o) => o.complete(req).await,
        }
    }
}

/// The provider's own explanation in an error body: `error.message` of the JSON both Anthropic
/// and OpenAI send, else the start of the body as text.
fn error_text(body: &str) -> String {
    let message = serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_string));
    message.unwrap_or_else(|| body.chars().take(300).collect())
}

/// Classifies an HTTP error status.
pub(crate) fn status_error(
    status: reqwest::StatusCode,
    headers: &reqwest::header::HeaderMap,
    body: &str,
) -> LlmError {
    let retry_after = headers
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64);
    let message = format!("HTTP {status}: {}", error_text(body));
    if status.as_u16() == 429
        || status.as_u16() == 408
        || status.as_u16() == 529
        || status.is_server_error()
    {
        LlmError::Transient {
            message,
            retry_after,
        }
    } else {
        LlmError::Fatal(message)
    }
}

/// Reads a streamed response through the SSE decoder, with an idle timeout between chunks.
pub(crate) async fn read_stream(
    resp: reqwest::Response,
    idle: Duration,
    mut on_event: impl FnMut(sse::SseEvent) -> Result<bool, LlmError>,
) -> Result<(), LlmError> {
    use futures_util::StreamExt as _;
    let mut stream = resp.bytes_stream();
    let mut decoder = sse::SseDecoder::default();
    loop {
        let chunk = match tokio::time::timeout(idle, stream.next()).await {
            Err(_) => {
                return Err(LlmError::Transient {
                    message: format!("the stream was idle for {}s", idle.as_secs()),
                    retry_after: None,
                });
            }
            Ok(None) => {
                return Err(LlmError::Transient {
                    message: "the stream ended before its terminal event".into(),
                    retry_after: None,
                });
            }
            Ok(Some(Err(e))) => {
                return Err(LlmError::Transient {
                    message: format!("the stream broke: {e}"),
                    retry_after: None,
                });
            }
            Ok(Some(Ok(chunk))) => chunk,
        };
        for event in decoder.push(&chunk) {
            if on_event(event)? {
                return Ok(());
            }
        }
    }
}

/// Sends a streaming request; a non-2xx answer becomes the classified error.
pub(crate) async fn send(request: reqwest::RequestBuilder) -> Result<reqwest::Response, LlmError> {
    let resp = request.send().await.map_err(|e| send_error(&e))?;
    if resp.status().is_success() {
        return Ok(resp);
    }
    let (status, headers) = (resp.status(), resp.headers().clone());
    Err(status_error(
        status,
        &headers,
        &resp.text().await.unwrap_or_default(),
    ))
}

/// Connection-level failures are transient.
pub(crate) fn send_error(e: &reqwest::Error) -> LlmError {
    LlmError::Transient {
        message: format!("cannot reach the model: {e}"),
        retry_after: None,
    }
}
