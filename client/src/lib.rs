//! The one typed client of the ninetrix checkpoint API.
//!
//! Every route of `ninetrix api` is a method of [`Client`], taking and returning the
//! [`ninetrix_proto::api`] types the server uses, so the runner, the CLI, the tests and the
//! benches cannot drift from the server or from each other. A failure is a [`ClientError`]:
//! unreachable, refused with a typed [`ErrorCode`], or an answer that could not be read — never
//! "no data". Retry policy belongs to the caller (the runner retries with a patience; the CLI
//! reports at once); [`ClientError::is_transient`] tells them apart.
//!
//! This crate also owns the HTTP client that works in a `FROM scratch` image ([`http_client`])
//! and the Server-Sent Events decoder ([`sse`]) shared by the event stream and the providers.

mod a2a;
mod admin;
mod error;
mod forks;
pub mod http;
mod limits;
mod memory;
mod replays;
mod runner;
pub mod sse;
mod triggers;

use std::time::Duration;

pub use error::ClientError;
pub use http::http_client;
use ninetrix_proto::api::ErrorBody;
pub use ninetrix_proto::api::ErrorCode;
use reqwest::{Method, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use admin::{ApprovalQuery, ThreadQuery, Watched};
pub use memory::{MemoryOf, MemoryQuery};

/// A bearer token (the admin token or a runner token). Its `Debug` never shows the value.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// Wraps a token value.
    pub fn new(value: impl Into<String>) -> Token {
        Token(value.into())
    }

    /// The value, for the one place that sends it (the `Authorization` header).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// A client of one checkpoint API.
#[derive(Clone, Debug)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    token: Option<Token>,
    timeout: Duration,
    /// A W3C `traceparent` sent with every request (the caller's span: the API's spans of these
    /// requests become its children).
    traceparent: Option<String>,
}

/// How long one request may take unless a method says otherwise.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// How long one request may take.
#[derive(Clone, Copy, Debug)]
enum Limit {
    /// The client's timeout.
    Default,
    /// This long (a long-poll's wait plus a margin).
    After(Duration),
    /// No limit: a stream that stays open.
    Never,
}

impl Client {
    /// A client of the API at `base_url` (e.g. `http://127.0.0.1:8787`), sending `token` as the
    /// bearer token (`None` for a server started with `--insecure-dev`).
    pub fn new(http: reqwest::Client, base_url: &str, token: Option<Token>) -> Client {
        Client {
            http,
            base: base_url.trim_end_matches('/').to_string(),
            token,
            timeout: DEFAULT_TIMEOUT,
            traceparent: None,
        }
    }

    /// The same client sending `traceparent` (a W3C trace context: `00-<trace>-<span>-<flags>`)
    /// with every request, or none.
    pub fn traced(&self, traceparent: Option<String>) -> Client {
        Client {
            traceparent,
            ..self.clone()
        }
    }

    /// The same client with another per-request timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Client {
        self.timeout = timeout;
        self
    }

    /// The API's base URL.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// `GET /healthz`: the process answers.
    pub async fn healthz(&self) -> Result<(), ClientError> {
        self.call::<(), serde_json::Value>(Method::GET, "/healthz", &[], None, None)
            .await
            .map(drop)
    }

    /// `GET /readyz`: the process answers and its database does.
    pub async fn readyz(&self) -> Result<(), ClientError> {
        self.call::<(), serde_json::Value>(Method::GET, "/readyz", &[], None, None)
            .await
            .map(drop)
    }

    /// `GET /openapi.json`: the API's own description.
    pub async fn openapi(&self) -> Result<serde_json::Value, ClientError> {
        self.call::<(), _>(Method::GET, "/openapi.json", &[], None, None)
            .await
    }

    /// Sends one request and returns the response if its status is a success.
    async fn send<B: Serialize + ?Sized>(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<&B>,
        limit: Limit,
    ) -> Result<reqwest::Response, ClientError> {
        let mut req = self.request(method, path, query, limit);
        if let Some(body) = body {
            req = req.json(body);
        }
        self.finish(req).await
    }

    /// A request with the client's timeout, token and trace context.
    fn request(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        limit: Limit,
    ) -> reqwest::RequestBuilder {
        let url = format!("{}{path}", self.base);
        let mut req = self.http.request(method, &url);
        match limit {
            Limit::Default => req = req.timeout(self.timeout),
            Limit::After(d) => req = req.timeout(d),
            Limit::Never => {}
        }
        if !query.is_empty() {
            req = req.query(query);
        }
        if let Some(token) = &self.token {
            req = req.bearer_auth(token.expose());
        }
        if let Some(tp) = &self.traceparent {
            req = req.header("traceparent", tp);
        }
        req
    }

    /// Sends a built request: the response if its status is a success, else the API's error.
    async fn finish(&self, req: reqwest::RequestBuilder) -> Result<reqwest::Response, ClientError> {
        let resp = req
            .send()
            .await
            .map_err(|e| ClientError::unreachable(&self.base, &e))?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let text = resp.bytes().await.unwrap_or_default();
        Err(match serde_json::from_slice::<ErrorBody>(&text) {
            Ok(body) => ClientError::Api {
                status: status.as_u16(),
                code: body.code,
                message: body.message,
                running: body.running,
            },
            Err(_) => ClientError::Api {
                status: status.as_u16(),
                code: fallback_code(status),
                message: String::from_utf8_lossy(&text).chars().take(200).collect(),
                running: None,
            },
        })
    }

    /// Sends one request and reads its JSON answer.
    async fn call<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<&B>,
        timeout: Option<Duration>,
    ) -> Result<T, ClientError> {
        let what = format!("{method} {path}");
        let limit = timeout.map_or(Limit::Default, Limit::After);
        let resp = self.send(method, path, query, body, limit).await?;
        let status = resp.status().as_u16();
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| ClientError::unreachable(&self.base, &e))?;
        serde_json::from_slice(&bytes).map_err(|e| ClientError::BadResponse {
            what,
            status,
            reason: e.to_string(),
        })
    }

    /// Like [`Client::call`], with a 404 answered as `None`.
    async fn call_optional<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<&B>,
        timeout: Option<Duration>,
    ) -> Result<Option<T>, ClientError> {
        match self.call(method, path, query, body, timeout).await {
            Ok(v) => Ok(Some(v)),
            Err(ClientError::Api {
                code: ErrorCode::NotFound,
                ..
            }) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// The code of an error answer whose body is not the API's `{code, message}` (a proxy's page).
fn fallback_code(status: StatusCode) -> ErrorCode {
    match status {
        StatusCode::UNAUTHORIZED => ErrorCode::Unauthorized,
        StatusCode::FORBIDDEN => ErrorCode::Forbidden,
        StatusCode::NOT_FOUND => ErrorCode::Other("http_404".into()),
        StatusCode::SERVICE_UNAVAILABLE => ErrorCode::NotReady,
        s if s.is_server_error() => ErrorCode::Internal,
        s => ErrorCode::Other(format!("http_{}", s.as_u16())),
    }
}
