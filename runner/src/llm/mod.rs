//! Model providers: Anthropic's Messages API and OpenAI's Chat Completions (both streamed over
//! SSE), and the offline `scripted` model. One [`Llm`] in front of them adds retries with backoff
//! (honouring `retry-after`) — for as long as the model stays unreachable, reporting the outage in
//! the runner's health — the fallback chain (`runtime.fallback`: which model a call tries is
//! `fallback`'s pure decision), the permits of the pool-wide limits and budgets (`lease`), and
//! cost accounting. An assistant message exists only once the stream's terminal event has
//! arrived; a cut or idle stream is an error, never a partial message.
//!
//! Failures name their cause and the agentfile key to fix ([`Endpoint`]): a connection refused,
//! a DNS lookup, a TLS handshake or a timeout names the URL and `runtime.base_url`; a refused key
//! names the secret (`runtime.api_key_secret`); an unknown model names `runtime.model` — or the
//! same keys of `runtime.fallback[i]` for a fallback model.

mod anthropic;
pub mod fallback;
mod lease;
mod openai;
mod scripted;
#[cfg(test)]
pub(crate) mod wire_rules;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ninetrix_agentfile::{AgentSpec, Provider};
use ninetrix_client::sse;
use ninetrix_proto::Message;
use ninetrix_proto::api::{BudgetPolicy, BudgetSpent, ModelLimits};
use ninetrix_proto::events::{Dependency, LlmRetry, ModelFallback, TraceEvent};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::backoff::{self, Schedule};
use crate::config::{Config, SecretValue};
use crate::engine::{CallUsage, LlmTurn};
use crate::health::Health;
use crate::limits::{PermitError, Permits, limiter_name};
use fallback::{Chain, Step};

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
    /// Where the answer's text goes as it streams (for watchers; the answer itself is the
    /// returned turn).
    pub stream: Option<&'a TextSink>,
    /// What the call is for.
    pub purpose: Purpose,
}

impl LlmRequest<'_> {
    /// The request's size in tokens as the context module estimates it (a token per four
    /// characters of the history, the system prompt and the tool definitions): what a lease
    /// counts against `tokens_per_minute` until the call ends.
    fn estimated_tokens(&self) -> u64 {
        let tools: usize = self
            .tools
            .iter()
            .map(|t| t.name.len() + t.description.len() + crate::context::json_len(&t.parameters))
            .sum();
        let system = self.system.map_or(0, str::len);
        crate::context::estimate(self.history) + ((tools + system) / 4) as u64
    }
}

/// What a model call is for (only the offline `scripted` provider answers differently).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// A round of a turn; `hidden_rounds` assistant messages of the thread are compacted out of
    /// the history sent.
    Round {
        /// Assistant messages before the view.
        hidden_rounds: usize,
    },
    /// Writing a compaction's summary.
    Summary,
}

/// The answer's text as the model streams it. Each attempt of a call starts with `Start` (a
/// retry streams the answer again from its beginning); then the text in order. Thinking is not
/// text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TextPiece {
    /// An attempt begins.
    Start,
    /// More of the answer.
    Text(String),
}

/// Where streamed text goes.
pub type TextSink = tokio::sync::mpsc::UnboundedSender<TextPiece>;

/// Hands `text` to the sink, if there is one (a sink whose reader is gone is ignored: streaming
/// is for watchers and never fails a call).
pub(crate) fn stream_text(sink: Option<&TextSink>, text: &str) {
    if let Some(sink) = sink
        && !text.is_empty()
    {
        let _ = sink.send(TextPiece::Text(text.to_string()));
    }
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
        /// The provider refused the call as over its rate limit or overloaded (429, 529): the
        /// whole pool backs off (reported with the lease's release).
        rate_limited: bool,
    },
    /// Not worth retrying: a bad request, bad credentials, a refused model.
    #[error("{0}")]
    Fatal(String),
    /// The provider refused the input as longer than the model's context window (OpenAI's
    /// `context_length_exceeded`, Anthropic's "prompt is too long", an OpenAI-compatible
    /// server's equivalent): compacting the history may make it fit.
    #[error("{0}")]
    ContextTooLong(String),
    /// A budget beyond the run (the session's, the agent's or the pool's day), kept by the
    /// checkpoint API, has no room: the call was not made.
    #[error(
        "{} is spent (${:.2} of ${:.2})",
        .0.scope.key(),
        .0.spent_usd,
        .0.limit_usd
    )]
    OverBudget(BudgetSpent),
    /// No permit could be had from the checkpoint API (fenced, purged, refused, unreachable).
    #[error("{0}")]
    Lease(PermitError),
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

/// USD per million (input, output) tokens, by model-name prefix. Unknown models cost 0, so a
/// budget cannot be enforced for them: the runner says so once, at boot ([`unpriced_budget`]).
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

/// The warning for an agent whose budget (`governance.max_budget_per_run`, or a budget beyond
/// the run) cannot bind: its model has no price in the table (its calls count $0). `None`
/// without a budget, for a priced model, and for the `scripted` provider (which costs nothing).
pub fn unpriced_budget(spec: &AgentSpec) -> Option<String> {
    let g = &spec.governance;
    let (budget, key) = [
        (g.max_budget_per_run, "max_budget_per_run"),
        (g.max_budget_per_session, "max_budget_per_session"),
        (g.max_budget_per_day, "max_budget_per_day"),
        (g.max_pool_budget_per_day, "max_pool_budget_per_day"),
    ]
    .into_iter()
    .find_map(|(budget, key)| Some((budget?, key)))?;
    if matches!(spec.runtime.provider, Provider::Scripted)
        || cost(&spec.runtime.model, 0, 0).is_some()
    {
        return None;
    }
    Some(format!(
        "governance.{key} is ${budget:.2}, but model `{}` (runtime.model) has no \
         price in ninetrix's table: its calls count $0, so the budget cannot stop a turn",
        spec.runtime.model
    ))
}

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

/// The sampling settings every model of the chain uses (`runtime.max_tokens`,
/// `runtime.temperature`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sampling {
    pub(crate) max_tokens: u32,
    pub(crate) temperature: f64,
}

/// Where the model is and which agentfile keys configure it: what an error names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// The base URL the runner calls.
    pub base: String,
    /// Whether the agentfile set it (`runtime.base_url`; else it is the provider's default).
    pub from_spec: bool,
    /// The provider's name.
    pub provider: &'static str,
    /// The secret holding the API key (`runtime.api_key_secret`).
    pub key_secret: Option<String>,
    /// The model (`runtime.model`).
    pub model: String,
    /// The agentfile entry that configures it, whose keys an error names: `runtime`, or
    /// `runtime.fallback[i]`.
    pub place: String,
}

/// The base URL a provider is called at unless the agentfile names another.
fn default_base(provider: Provider) -> &'static str {
    // `scripted` is never called: the scripted model answers in process.
    provider.default_base_url().unwrap_or("scripted")
}

impl Endpoint {
    /// The endpoint of `spec`'s model (the primary), whose provider's default base URL is
    /// `default`.
    pub fn of(spec: &AgentSpec, default: &str) -> Endpoint {
        Endpoint {
            base: spec
                .runtime
                .base_url
                .clone()
                .unwrap_or_else(|| default.to_string()),
            from_spec: spec.runtime.base_url.is_some(),
            provider: spec.runtime.provider.as_str(),
            key_secret: spec.runtime.api_key_secret.clone(),
            model: spec.runtime.model.clone(),
            place: "runtime".into(),
        }
    }

    /// The endpoint of fallback model `index` (`runtime.fallback[index]`).
    pub fn of_fallback(entry: &ninetrix_agentfile::FallbackModel, index: usize) -> Endpoint {
        Endpoint {
            base: entry
                .base_url
                .clone()
                .unwrap_or_else(|| default_base(entry.provider).to_string()),
            from_spec: entry.base_url.is_some(),
            provider: entry.provider.as_str(),
            key_secret: entry.api_key_secret.clone(),
            model: entry.model.clone(),
            place: format!("runtime.fallback[{index}]"),
        }
    }

    /// The key that sets the URL: `(runtime.base_url)`, or that it is the provider's default.
    fn url_key(&self) -> String {
        if self.from_spec {
            format!("({}.base_url)", self.place)
        } else {
            format!(
                "(the {} default URL; set {}.base_url to use another)",
                self.provider, self.place
            )
        }
    }

    /// The host (and port) of the base URL.
    fn host(&self) -> &str {
        let rest = self.base.split_once("://").map_or(&*self.base, |(_, r)| r);
        rest.split(['/', '?']).next().unwrap_or(rest)
    }
}

/// One model of the chain: the primary (`runtime`) or a fallback (`runtime.fallback[i]`).
struct Model {
    backend: Backend,
    endpoint: Endpoint,
    /// `provider/model` as traced (the service's name for an OpenAI-compatible one).
    label: String,
    /// The provider's name people read (`openai`, `groq`).
    provider: String,
    /// Its pool-wide limiter (never the key itself).
    limiter: String,
    /// Its pool-wide limits (`runtime.limits`, `runtime.fallback[i].limits`).
    limits: ModelLimits,
}

impl Model {
    /// Model `provider` (the service `via`, if one) at `endpoint`, its key read from the
    /// secrets its endpoint names.
    fn new(
        provider: Provider,
        via: Option<&str>,
        endpoint: Endpoint,
        limits: ModelLimits,
        config: &Config,
        http: &reqwest::Client,
        sampling: Sampling,
    ) -> Model {
        let key: Option<SecretValue> = endpoint
            .key_secret
            .as_ref()
            .and_then(|name| config.secrets.get(name))
            .cloned();
        let limiter = limiter_name(
            endpoint.provider,
            endpoint.host(),
            key.as_ref().map(SecretValue::expose),
        );
        let idle = config.stream_idle_timeout;
        let backend = match provider {
            Provider::Scripted => {
                Backend::Scripted(scripted::Scripted::new(config.spec.runtime.script.clone()))
            }
            Provider::Anthropic => Backend::Anthropic(anthropic::Anthropic::new(
                http.clone(),
                endpoint.clone(),
                key,
                sampling,
                idle,
            )),
            Provider::Openai => Backend::OpenAi(openai::OpenAi::new(
                http.clone(),
                endpoint.clone(),
                key,
                sampling,
                idle,
            )),
        };
        let provider = via.unwrap_or(provider.as_str()).to_string();
        Model {
            label: format!("{provider}/{}", endpoint.model),
            backend,
            endpoint,
            provider,
            limiter,
            limits,
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

/// The agent's model — with its fallbacks, retries and permits.
pub struct Llm {
    /// The primary, then each `runtime.fallback` entry.
    models: Vec<Model>,
    /// Each model's run of failures: which one a call tries.
    chain: Mutex<Chain>,
    /// Permits of the pool-wide limits and budgets, when the runner has a checkpoint API.
    leasing: Option<lease::Leasing>,
    /// Attempts per call before giving up on transient errors; `None` (the default): until the
    /// model answers.
    pub max_attempts: Option<u32>,
    /// The backoff between attempts (the longest wait also caps a `retry-after`).
    pub schedule: Schedule,
    health: Health,
}

impl Llm {
    /// The models the spec names (its primary, then `runtime.fallback`), reporting outages to
    /// `health`. Without [`Llm::with_permits`] no call leases anything.
    pub fn new(config: &Config, http: reqwest::Client, health: Health) -> Llm {
        let spec: &AgentSpec = &config.spec;
        let runtime = &spec.runtime;
        let sampling = Sampling {
            max_tokens: runtime.max_tokens,
            temperature: runtime.temperature,
        };
        let primary = Model::new(
            runtime.provider,
            runtime.via.as_deref(),
            Endpoint::of(spec, default_base(runtime.provider)),
            runtime.limits.clone(),
            config,
            &http,
            sampling,
        );
        let mut models = vec![primary];
        for (i, entry) in runtime.fallback.iter().enumerate() {
            models.push(Model::new(
                entry.provider,
                entry.via.as_deref(),
                Endpoint::of_fallback(entry, i),
                entry.limits.clone(),
                config,
                &http,
                sampling,
            ));
        }
        let after = Duration::from_secs(runtime.fallback_after_secs.max(1));
        Llm {
            chain: Mutex::new(Chain::new(models.len(), after)),
            models,
            leasing: None,
            max_attempts: None,
            schedule: backoff::MODEL,
            health,
        }
    }

    /// Whether any model of the chain has pool-wide limits.
    pub fn limited(&self) -> bool {
        self.models.iter().any(|m| m.limits.any())
    }

    /// The same models, each attempt leasing a permit from `permits` (as the runner of `epoch`)
    /// when its model has limits or the agent has `budgets`.
    pub fn with_permits(
        mut self,
        permits: Arc<dyn Permits>,
        epoch: u64,
        budgets: Option<BudgetPolicy>,
    ) -> Llm {
        self.leasing = Some(lease::Leasing::new(
            permits,
            epoch,
            budgets,
            self.health.clone(),
        ));
        self
    }

    /// For a session's model: its waits for a slot also show in its replica's health.
    pub fn showing_waits_on(mut self, replica: Option<Health>) -> Llm {
        self.leasing = self.leasing.map(|l| l.showing_waits_on(replica));
        self
    }

    fn chain(&self) -> std::sync::MutexGuard<'_, Chain> {
        // Every update is a few assignments: a poisoned lock is still consistent.
        self.chain
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Calls the model, retrying transient failures with capped exponential backoff (or the
    /// server's `retry-after`, capped too) until it answers (or `max_attempts`), moving to the
    /// next model of the chain when one has failed for `runtime.fallback_after`. Each attempt
    /// first leases a permit when its model has limits or the agent has budgets (waiting for a
    /// slot meanwhile; a spent budget ends the call unmade). Each retry is reported to
    /// `on_event` (`llm_retry`) before the wait and to the health (which shows the model down
    /// after a short debounce); so are a wait for a slot of more than a second
    /// (`model_waited`) and an answer by a fallback (`model_fallback`). The first answer after
    /// failures ends the outage: an `outage` event. Cancellation aborts at once.
    pub async fn complete(
        &self,
        req: &LlmRequest<'_>,
        cancel: &CancellationToken,
        on_event: impl Fn(TraceEvent),
    ) -> Result<LlmTurn, LlmError> {
        let estimated = req.estimated_tokens();
        let mut attempt = 1;
        // Each model's attempts in this call, for its backoff.
        let mut tries = vec![0u32; self.models.len()];
        loop {
            let i = self.chain().pick(Instant::now());
            let model = &self.models[i];
            tries[i] = tries[i].saturating_add(1);
            let permit = match &self.leasing {
                Some(leasing) => {
                    let target = lease::Target {
                        limiter: &model.limiter,
                        provider: &model.provider,
                        limits: &model.limits,
                    };
                    leasing
                        .acquire(target, estimated, cancel, &on_event)
                        .await?
                }
                None => None,
            };
            let started = Instant::now();
            if let Some(sink) = req.stream {
                let _ = sink.send(TextPiece::Start);
            }
            // A permit dropped unused (cancelled here, or the whole call dropped by a stop) is
            // released with nothing used.
            let result = tokio::select! {
                r = model.once(req) => r,
                () = cancel.cancelled() => return Err(LlmError::Cancelled),
            };
            match result {
                Ok(raw) => return Ok(self.answered(i, raw, started, permit, &on_event)),
                Err(LlmError::Transient {
                    message,
                    retry_after,
                    rate_limited,
                }) => {
                    let backoff = retry_after
                        .unwrap_or_else(|| self.schedule.delay(tries[i], backoff::jitter()))
                        .min(self.schedule.cap);
                    if let Some(permit) = permit {
                        // The pool backs off for what the provider asked (else this runner's
                        // backoff), not the runner's capped wait.
                        permit.failed(rate_limited.then(|| retry_after.unwrap_or(backoff)));
                    }
                    self.health.failed(
                        Dependency::Model,
                        &message,
                        format!("model unreachable: {message}"),
                    );
                    let (step, wait) = {
                        let mut chain = self.chain();
                        let now = Instant::now();
                        let step = chain.failed(i, started, now, &message);
                        // Never wait past the moment the model would be left for its fallback.
                        let wait = chain
                            .wait_cap(i, now)
                            .map_or(backoff, |cap| backoff.min(cap));
                        (step, wait)
                    };
                    if self.max_attempts.is_some_and(|max| attempt >= max) {
                        return Err(LlmError::Transient {
                            message,
                            retry_after,
                            rate_limited,
                        });
                    }
                    attempt = attempt.saturating_add(1);
                    if let Step::Leave { to } = step {
                        tracing::warn!(
                            "{} ({}) has kept failing for {} s (runtime.fallback_after): trying {} ({}) — {message}",
                            model.label,
                            model.endpoint.place,
                            self.chain().after().as_secs(),
                            self.models[to].label,
                            self.models[to].endpoint.place
                        );
                        continue;
                    }
                    on_event(TraceEvent::LlmRetry(LlmRetry {
                        attempt: attempt - 1,
                        max_attempts: self.max_attempts,
                        reason: message,
                        retry_in_ms: wait.as_millis() as u64,
                    }));
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        () = cancel.cancelled() => return Err(LlmError::Cancelled),
                    }
                }
                Err(e @ LlmError::Fatal(_)) => {
                    // It answered, if with a refusal: not an outage.
                    self.health.answered(Dependency::Model);
                    return Err(e);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Model `i` answered: its run of failures ends, the permit is released with what the call
    /// used, and an answer by a fallback says so.
    fn answered(
        &self,
        i: usize,
        raw: RawTurn,
        started: Instant,
        permit: Option<lease::Permit>,
        on_event: &impl Fn(TraceEvent),
    ) -> LlmTurn {
        self.health.answered(Dependency::Model);
        let usage = CallUsage {
            input_tokens: raw.input_tokens,
            output_tokens: raw.output_tokens,
            cost_usd: cost(&raw.model, raw.input_tokens, raw.output_tokens).unwrap_or(0.0),
        };
        if let Some(permit) = permit {
            permit.used(&usage);
        }
        let fell_back = {
            let mut chain = self.chain();
            let from = (i > 0).then(|| chain.fell_back_from(i).unwrap_or_default());
            chain.answered(i);
            from
        };
        if let Some((from, reason)) = fell_back {
            on_event(TraceEvent::ModelFallback(ModelFallback {
                from: self.models[from].label.clone(),
                to: self.models[i].label.clone(),
                reason,
            }));
        }
        LlmTurn {
            message: raw.message,
            usage,
            model: raw.model,
            stop_reason: raw.stop_reason,
            latency_ms: started.elapsed().as_millis() as u64,
        }
    }
}

/// 12 hex digits of SHA-256 of a tool-call ID: what an adapter appends to an ID it must
/// rewrite for its provider, so rewritten IDs stay distinct.
pub(crate) fn id_digest(id: &str) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(id.as_bytes())
        .iter()
        .take(6)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The provider's own explanation in an error body: `error.message` of the JSON both Anthropic
/// and OpenAI send, else the start of the body as text.
fn error_text(body: &str) -> String {
    let message = serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_string));
    message.unwrap_or_else(|| body.chars().take(300).collect())
}

/// Classifies an HTTP error status: overload, rate limits and server errors are transient;
/// anything else ends the turn with a text naming what to fix — the secret for a refused key, the
/// model for an unknown one, else the provider's own message.
pub(crate) fn status_error(
    status: reqwest::StatusCode,
    headers: &reqwest::header::HeaderMap,
    body: &str,
    endpoint: &Endpoint,
) -> LlmError {
    let retry_after = headers
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0 && *s < 1e9)
        .map(Duration::from_secs_f64);
    let code = status.as_u16();
    let said = format!("HTTP {code}: {}", error_text(body));
    if matches!(code, 408 | 429 | 529) || status.is_server_error() {
        return LlmError::Transient {
            message: format!("{said} from {} {}", endpoint.base, endpoint.url_key()),
            retry_after,
            rate_limited: matches!(code, 429 | 529),
        };
    }
    if context_overflow(code, body) {
        return LlmError::ContextTooLong(format!(
            "the input is longer than the model's context window: {said}"
        ));
    }
    let unknown_model = code == 404 || error_code(body).as_deref() == Some("model_not_found");
    let place = &endpoint.place;
    LlmError::Fatal(match code {
        401 | 403 => match &endpoint.key_secret {
            Some(secret) => format!(
                "the model provider refused the API key: {said} — check the secret {secret} ({place}.api_key_secret)"
            ),
            None => format!(
                "the model provider refused the request without an API key: {said} — name the secret holding the key in {place}.api_key_secret"
            ),
        },
        _ if unknown_model => {
            let also = if endpoint.from_spec {
                format!(
                    ", or {place}.base_url ({}) if its path is wrong",
                    endpoint.base
                )
            } else {
                String::new()
            };
            format!(
                "the model provider does not know the model `{}`: {said} — check {place}.model{also}",
                endpoint.model
            )
        }
        _ => format!("the model provider refused the request: {said}"),
    })
}

/// Whether an error answer says the input does not fit the model's context window: OpenAI's
/// code `context_length_exceeded`; Anthropic's 400 "prompt is too long: N tokens > M maximum"
/// (or a 413 `request_too_large`); vLLM's and other OpenAI-compatible servers' "maximum context
/// length is N tokens"; llama.cpp's "exceeds the available context size".
pub fn context_overflow(status: u16, body: &str) -> bool {
    if !matches!(status, 400 | 413) {
        return false;
    }
    let code = error_code(body);
    if matches!(
        code.as_deref(),
        Some("context_length_exceeded" | "request_too_large")
    ) {
        return true;
    }
    let text = error_text(body).to_ascii_lowercase();
    [
        "prompt is too long",
        "maximum context length",
        "context length exceeded",
        "exceeds the available context size",
        "exceeds the context window",
        "context window",
        "too many tokens",
    ]
    .iter()
    .any(|needle| text.contains(needle))
}

/// `error.code` (OpenAI) or `error.type` (Anthropic) of an error body.
fn error_code(body: &str) -> Option<String> {
    let v = serde_json::from_str::<serde_json::Value>(body).ok()?;
    v["error"]["code"]
        .as_str()
        .or(v["error"]["type"].as_str())
        .map(str::to_string)
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
                    rate_limited: false,
                });
            }
            Ok(None) => {
                return Err(LlmError::Transient {
                    message: "the stream ended before its terminal event".into(),
                    retry_after: None,
                    rate_limited: false,
                });
            }
            Ok(Some(Err(e))) => {
                return Err(LlmError::Transient {
                    message: format!("the stream broke: {e}"),
                    retry_after: None,
                    rate_limited: false,
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
pub(crate) async fn send(
    request: reqwest::RequestBuilder,
    endpoint: &Endpoint,
) -> Result<reqwest::Response, LlmError> {
    let resp = request.send().await.map_err(|e| LlmError::Transient {
        message: connect_error_text(&classify(&e), endpoint),
        retry_after: None,
        rate_limited: false,
    })?;
    if resp.status().is_success() {
        return Ok(resp);
    }
    let (status, headers) = (resp.status(), resp.headers().clone());
    Err(status_error(
        status,
        &headers,
        &resp.text().await.unwrap_or_default(),
        endpoint,
    ))
}

/// Why a request got no answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NoAnswer {
    /// Nothing listens at the address.
    Refused,
    /// The host name did not resolve.
    Dns,
    /// The TLS handshake failed (the innermost cause).
    Tls(String),
    /// Connecting took too long.
    ConnectTimeout,
    /// The request timed out after connecting.
    Timeout,
    /// Something else (the innermost cause).
    Other(String),
}

/// Classifies a failed request by walking its cause chain: the I/O error kinds for a refused or
/// timed-out connection, the resolver's error for DNS, the TLS stack's for a handshake.
pub fn classify(e: &reqwest::Error) -> NoAnswer {
    let mut chain: Vec<&(dyn std::error::Error + 'static)> = Vec::new();
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(cause) = next {
        chain.push(cause);
        next = cause.source();
    }
    let innermost = chain.last().map(|c| c.to_string()).unwrap_or_default();
    let io_kind = |kind: std::io::ErrorKind| {
        chain.iter().any(|c| {
            c.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == kind)
        })
    };
    let text = |needles: &[&str]| {
        chain.iter().any(|c| {
            let t = c.to_string().to_lowercase();
            needles.iter().any(|n| t.contains(n))
        })
    };
    if io_kind(std::io::ErrorKind::ConnectionRefused) {
        NoAnswer::Refused
    } else if text(&[
        "dns error",
        "failed to lookup address",
        "no record found",
        "nxdomain",
    ]) {
        NoAnswer::Dns
    } else if e.is_timeout() || io_kind(std::io::ErrorKind::TimedOut) {
        if e.is_connect() {
            NoAnswer::ConnectTimeout
        } else {
            NoAnswer::Timeout
        }
    } else if e.is_connect()
        && text(&["tls", "handshake", "certificate", "corrupt message", "peer"])
    {
        NoAnswer::Tls(innermost)
    } else {
        NoAnswer::Other(innermost)
    }
}

/// The text of a request that got no answer: the cause, the URL (or host) and the agentfile key.
pub fn connect_error_text(cause: &NoAnswer, endpoint: &Endpoint) -> String {
    let key = endpoint.url_key();
    match cause {
        NoAnswer::Refused => format!("connection refused at {} {key}", endpoint.base),
        NoAnswer::Dns => format!("DNS lookup failed for {} {key}", endpoint.host()),
        NoAnswer::Tls(why) => format!("TLS handshake with {} failed: {why} {key}", endpoint.host()),
        NoAnswer::ConnectTimeout => format!("timed out connecting to {} {key}", endpoint.base),
        NoAnswer::Timeout => format!("the request to {} timed out {key}", endpoint.base),
        NoAnswer::Other(why) => format!("cannot reach the model at {}: {why} {key}", endpoint.base),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(runtime: &str, governance: &str) -> AgentSpec {
        let text = format!("agents:\n  a:\n    runtime: {runtime}\n{governance}");
        ninetrix_agentfile::parse("t.yaml", &text)
            .unwrap_or_else(|r| panic!("{r:?}"))
            .agentfile
            .agents
            .remove(0)
    }

    #[test]
    fn a_budget_on_a_model_without_a_price_is_said_once_at_boot() {
        let budget = "    governance: { max_budget_per_run: 2 }\n";
        let unpriced = agent(
            "{ provider: openai, model: my-local-model, base_url: 'http://127.0.0.1:1/v1' }",
            budget,
        );
        let warning = unpriced_budget(&unpriced).expect("a warning");
        assert!(warning.contains("`my-local-model`"), "{warning}");
        assert!(warning.contains("$2.00"), "{warning}");
        let priced = agent("{ provider: openai, model: gpt-5-mini }", budget);
        assert_eq!(unpriced_budget(&priced), None);
        let no_budget = agent(
            "{ provider: openai, model: my-local-model, base_url: 'http://127.0.0.1:1/v1' }",
            "",
        );
        assert_eq!(unpriced_budget(&no_budget), None);
        let scripted = agent("{ provider: scripted, script: [hi] }", budget);
        assert_eq!(unpriced_budget(&scripted), None);
    }

    #[test]
    fn providers_answers_to_an_input_too_long_are_recognised() {
        // OpenAI Chat Completions.
        let openai = r#"{"error": {"message": "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.", "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}"#;
        assert!(context_overflow(400, openai));
        // Anthropic Messages.
        let anthropic = r#"{"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long: 208533 tokens > 200000 maximum"}}"#;
        assert!(context_overflow(400, anthropic));
        assert!(context_overflow(
            413,
            r#"{"type": "error", "error": {"type": "request_too_large", "message": "Request exceeds the maximum allowed number of bytes."}}"#
        ));
        // vLLM and llama.cpp's OpenAI-compatible servers.
        assert!(context_overflow(
            400,
            r#"{"object": "error", "message": "This model's maximum context length is 8192 tokens. However, you requested 9000 tokens.", "type": "BadRequestError", "code": 400}"#
        ));
        assert!(context_overflow(
            400,
            r#"{"error": {"code": 400, "message": "the request exceeds the available context size, try increasing it", "type": "exceed_context_size_error"}}"#
        ));
        // Other refusals are not.
        assert!(!context_overflow(
            400,
            r#"{"error": {"message": "Invalid value for 'temperature'", "code": "invalid_value"}}"#
        ));
        assert!(
            !context_overflow(429, openai),
            "only a refusal of the request"
        );
        let endpoint = Endpoint {
            base: "http://x".into(),
            from_spec: true,
            provider: "openai",
            key_secret: None,
            model: "m".into(),
            place: "runtime".into(),
        };
        let e = status_error(
            reqwest::StatusCode::BAD_REQUEST,
            &reqwest::header::HeaderMap::new(),
            openai,
            &endpoint,
        );
        assert!(
            matches!(&e, LlmError::ContextTooLong(m) if m.contains("128000 tokens")),
            "{e:?}"
        );
    }
}
