//! The client side: one connection to one MCP server — streamable HTTP or a stdio child process
//! — its tool list, and tool calls that carry their ledger key in `_meta`.
//!
//! A failed call says what is known about it ([`CallError`]): never delivered (the tool did not
//! run), delivered and answered with an error, or delivered with no answer (the outcome is
//! unknown). The runner's ledger decides what each means for the turn; this module only tells
//! them apart truthfully.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation,
    ProtocolVersion, RequestMetaObject,
};
use rmcp::service::{ClientInitializeError, NotificationContext, RunningService};
use rmcp::transport::common::client_side_sse::ExponentialBackoff;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClientTransportConfig, StreamableHttpError,
};
use rmcp::transport::{ConfigureCommandExt, StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{
    ClientHandler, ClientLifecycleMode, ClientServiceExt, RoleClient, ServiceError, ServiceExt,
};
use serde_json::Value;

use crate::{IDEMPOTENCY_META_KEY, OUTCOME_META_KEY};

/// Where an MCP server is and how to reach it, with secrets already filled in (so this is never
/// logged: [`Endpoint::describe`] says where it is without them).
#[derive(Clone)]
pub enum Endpoint {
    /// A streamable-HTTP server.
    Http {
        /// Its endpoint URL.
        url: String,
        /// Headers for every request (values may be secrets).
        headers: Vec<(String, String)>,
        /// The HTTP client (the runner's: rustls with bundled roots).
        http: reqwest::Client,
    },
    /// A stdio server this process starts.
    Stdio(StdioServer),
}

impl Endpoint {
    /// Where the server is, for messages: the URL or the command, never a header or env value.
    pub fn describe(&self) -> String {
        match self {
            Endpoint::Http { url, .. } => url.clone(),
            Endpoint::Stdio(server) => format!("`{}`", server.command.join(" ")),
        }
    }
}

/// A stdio MCP server's command line and environment (the runner's local servers, the bridge's
/// child). Its `Debug` leaves out the environment's values, which may be secrets.
#[derive(Clone)]
pub struct StdioServer {
    /// The command line.
    pub command: Vec<String>,
    /// Environment for the server process (values may be secrets).
    pub env: Vec<(String, String)>,
    /// Its working directory.
    pub dir: Option<PathBuf>,
    /// Called on the command before each start (after `env` and `dir` are set): how a caller
    /// confines the process (the runner's tool sandbox); an error is a failed start.
    pub prepare: Option<Prepare>,
}

/// A hook that prepares a stdio server's command before it starts.
pub type Prepare =
    std::sync::Arc<dyn Fn(&mut tokio::process::Command) -> std::io::Result<()> + Send + Sync>;

impl std::fmt::Debug for StdioServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.env.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("StdioServer")
            .field("command", &self.command)
            .field("env", &names)
            .field("dir", &self.dir)
            .field("prepare", &self.prepare.is_some())
            .finish()
    }
}

impl StdioServer {
    /// A transport that spawns it; `None` for an empty command line.
    pub(crate) fn spawn(&self) -> Option<std::io::Result<TokioChildProcess>> {
        let (program, args) = self.command.split_first()?;
        let mut prepared = Ok(());
        let cmd = tokio::process::Command::new(program).configure(|c| {
            c.args(args);
            if let Some(prepare) = &self.prepare {
                prepared = prepare(c);
            }
            c.envs(self.env.iter().map(|(k, v)| (k, v)));
            if let Some(dir) = &self.dir {
                c.current_dir(dir);
            }
        });
        if let Err(e) = prepared {
            return Some(Err(e));
        }
        Some(TokioChildProcess::new(cmd))
    }
}

/// A tool as the server describes it.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolInfo {
    /// The server's name for it.
    pub name: String,
    /// What it does.
    pub description: String,
    /// Its arguments' JSON Schema.
    pub input_schema: Value,
    /// `readOnlyHint`.
    pub read_only: Option<bool>,
    /// `idempotentHint`.
    pub idempotent: Option<bool>,
}

/// A tool's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallOutput {
    /// Its text content (structured content as JSON when there is no text).
    pub text: String,
    /// The server marked it an error (`isError`).
    pub is_error: bool,
}

/// Why a call has no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// The request never reached the server (it is down, or refused the connection): the tool
    /// did not run.
    #[error("{0}")]
    NotSent(String),
    /// The server answered with a protocol error (unknown tool, invalid arguments): it says the
    /// tool did not run.
    #[error("{0}")]
    Refused(String),
    /// The request may have reached the server, but no answer came (the stream broke, the
    /// server died, the time ran out): whether the tool ran is unknown.
    #[error("{0}")]
    Lost(String),
}

/// Why a connection could not be opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConnectError(pub String);

/// Receives the server's notifications: a changed tool list is noted for the next turn.
#[derive(Clone)]
struct Handler {
    changed: Arc<AtomicBool>,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("ninetrix", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.changed.store(true, Ordering::Release);
    }
}

/// An open connection to one server.
pub struct Connection {
    service: RunningService<RoleClient, Handler>,
    changed: Arc<AtomicBool>,
    describe: String,
}

impl Connection {
    /// Connects (spawning a stdio server) and completes the handshake within `timeout`: the
    /// 2026-07-28 revision where the server speaks it, else `initialize` (2025-11-25).
    pub async fn open(endpoint: &Endpoint, timeout: Duration) -> Result<Connection, ConnectError> {
        let changed = Arc::new(AtomicBool::new(false));
        let handler = Handler {
            changed: changed.clone(),
        };
        let describe = endpoint.describe();
        let work = async {
            match endpoint {
                Endpoint::Http { url, headers, http } => {
                    let mut custom = HashMap::new();
                    for (name, value) in headers {
                        let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                            .map_err(|_| ConnectError(format!("`{name}` is not a header name")))?;
                        let value =
                            reqwest::header::HeaderValue::from_str(value).map_err(|_| {
                                ConnectError(format!("the value of header `{name}` is not valid"))
                            })?;
                        custom.insert(name, value);
                    }
                    let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                        .custom_headers(custom);
                    // A broken response stream is resumed a few times, then the call is lost
                    // (rmcp's default retries without end).
                    let mut retry = ExponentialBackoff::default();
                    retry.max_times = Some(3);
                    retry.base_duration = Duration::from_millis(200);
                    retry.max_delay = Some(Duration::from_secs(2));
                    config.retry_config = Arc::new(retry);
                    let transport =
                        StreamableHttpClientTransport::with_client(http.clone(), config);
                    handler
                        .serve_with_lifecycle(
                            transport,
                            ClientLifecycleMode::Auto {
                                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                                legacy_version: Some(ProtocolVersion::V_2025_11_25),
                            },
                        )
                        .await
                        .map_err(|e| ConnectError(connect_reason(&e, &describe)))
                }
                Endpoint::Stdio(server) => {
                    let transport = server
                        .spawn()
                        .ok_or_else(|| ConnectError("the command is empty".into()))?
                        .map_err(|e| {
                            ConnectError(format!("cannot start {describe}: {}", io_reason(&e)))
                        })?;
                    handler
                        .serve(transport)
                        .await
                        .map_err(|e| ConnectError(connect_reason(&e, &describe)))
                }
            }
        };
        let service = tokio::time::timeout(timeout, work).await.map_err(|_| {
            ConnectError(format!(
                "{describe} did not complete the MCP handshake within {}s",
                timeout.as_secs()
            ))
        })??;
        // Tool lists are read fresh at turn boundaries, never served stale from a cache.
        service
            .peer()
            .set_response_cache_config(rmcp::ClientCacheConfig::disabled())
            .await;
        Ok(Connection {
            service,
            changed,
            describe,
        })
    }

    /// Whether the connection is gone (the server process died, the session ended).
    pub fn is_closed(&self) -> bool {
        self.service.peer().is_transport_closed()
    }

    /// Whether the server said its tool list changed since the last call of this.
    pub fn take_tools_changed(&self) -> bool {
        self.changed.swap(false, Ordering::AcqRel)
    }

    /// The server's tools (every page).
    pub async fn tools(&self, timeout: Duration) -> Result<Vec<ToolInfo>, CallError> {
        let list = tokio::time::timeout(timeout, self.service.peer().list_all_tools())
            .await
            .map_err(|_| {
                CallError::Lost(format!(
                    "{} did not list its tools within {}s",
                    self.describe,
                    timeout.as_secs()
                ))
            })?
            .map_err(|e| self.call_error(e))?;
        Ok(list
            .into_iter()
            .map(|t| {
                let annotations = t.annotations.clone().unwrap_or_default();
                ToolInfo {
                    name: t.name.to_string(),
                    description: t.description.as_deref().unwrap_or_default().to_string(),
                    input_schema: Value::Object((*t.input_schema).clone()),
                    read_only: annotations.read_only_hint,
                    idempotent: annotations.idempotent_hint,
                }
            })
            .collect())
    }

    /// Calls `tool` with `args`, passing `key` (the call's ledger key) in `_meta` so a server
    /// that honours it can deduplicate. Dropping the future cancels the call
    /// (`notifications/cancelled`).
    pub async fn call(
        &self,
        tool: &str,
        args: &Value,
        key: &str,
        timeout: Duration,
    ) -> Result<CallOutput, CallError> {
        if self.is_closed() {
            return Err(CallError::NotSent(format!(
                "the connection to {} is closed",
                self.describe
            )));
        }
        let arguments = match args {
            Value::Object(map) => map.clone(),
            Value::Null => serde_json::Map::new(),
            _ => {
                return Err(CallError::Refused(
                    "the arguments must be a JSON object".into(),
                ));
            }
        };
        let mut params = CallToolRequestParams::new(tool.to_string()).with_arguments(arguments);
        let mut meta = RequestMetaObject::new();
        meta.insert(IDEMPOTENCY_META_KEY.to_string(), Value::String(key.into()));
        params.meta = Some(meta);
        match tokio::time::timeout(timeout, self.service.peer().call_tool(params)).await {
            Err(_) => Err(CallError::Lost(format!(
                "no answer from {} within {}s",
                self.describe,
                timeout.as_secs()
            ))),
            Ok(Ok(result)) => Ok(output(result)),
            Ok(Err(e)) => Err(self.call_error(e)),
        }
    }

    /// Ends the connection (a stdio server is asked to exit, then stopped).
    pub async fn close(self) {
        let _ = tokio::time::timeout(Duration::from_secs(5), self.service.cancel()).await;
    }

    fn call_error(&self, e: ServiceError) -> CallError {
        let at = &self.describe;
        match e {
            ServiceError::McpError(data) => {
                let outcome = data
                    .data
                    .as_ref()
                    .and_then(|d| d.get(OUTCOME_META_KEY))
                    .and_then(Value::as_str);
                let text = format!("{at} answered: {}", data.message);
                match outcome {
                    Some("unknown") => CallError::Lost(text),
                    Some("not_run") => CallError::NotSent(text),
                    _ => CallError::Refused(text),
                }
            }
            ServiceError::TransportSend(err) => {
                let refused = err
                    .error
                    .downcast_ref::<StreamableHttpError<reqwest::Error>>()
                    .is_some_and(|e| matches!(e, StreamableHttpError::Client(c) if c.is_connect()));
                if refused {
                    CallError::NotSent(format!("cannot connect to {at}"))
                } else {
                    CallError::Lost(format!("sending to {at} failed: {}", err.error))
                }
            }
            ServiceError::TransportClosed => {
                CallError::Lost(format!("the connection to {at} broke before it answered"))
            }
            ServiceError::Timeout { timeout } => {
                CallError::Lost(format!("no answer from {at} within {}s", timeout.as_secs()))
            }
            other => CallError::Lost(format!("{at}: {other}")),
        }
    }
}

/// The text the model sees for a result: its text blocks, else its structured content.
fn output(result: CallToolResult) -> CallOutput {
    let mut parts: Vec<String> = Vec::new();
    for block in &result.content {
        if let Some(text) = block.as_text() {
            parts.push(text.text.clone());
        } else if let Some(resource) = block.as_resource() {
            parts.push(serde_json::to_string(&resource.resource).unwrap_or_default());
        } else {
            parts.push("[non-text content omitted]".into());
        }
    }
    if parts.is_empty()
        && let Some(structured) = &result.structured_content
    {
        parts.push(structured.to_string());
    }
    CallOutput {
        text: parts.join("\n"),
        is_error: result.is_error.unwrap_or(false),
    }
}

fn connect_reason(e: &ClientInitializeError, describe: &str) -> String {
    match e {
        ClientInitializeError::TransportError { error, .. } => {
            match error
                .error
                .downcast_ref::<StreamableHttpError<reqwest::Error>>()
            {
                Some(StreamableHttpError::Client(c)) if c.is_connect() => {
                    format!("connection refused at {describe}")
                }
                Some(StreamableHttpError::Client(c)) if c.is_timeout() => {
                    format!("timed out connecting to {describe}")
                }
                _ => format!("{describe}: {}", error.error),
            }
        }
        ClientInitializeError::ConnectionClosed(_) => {
            format!("{describe} exited during the MCP handshake")
        }
        other => format!("{describe}: {other}"),
    }
}

fn io_reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such program in this image".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => e.to_string(),
    }
}
