//! The HTTP side of the runner: one reqwest client that works in a `FROM scratch` image (Mozilla's
//! roots bundled, DNS through hickory, not NSS), and the checkpoint API's runner routes on top.

use std::time::{Duration, Instant};

use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{
    CheckpointCreated, CheckpointRequest, ClaimResponse, ErrorBody, ErrorCode, EventsRequest,
    InboxMessage, NewEvent, ThreadLabels, ThreadState, ToolCallCompletion, ToolCallIntent,
    ToolCallRecord,
};
use reqwest::{Method, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::config::ApiAccess;

/// An HTTP client that works without a system CA store or NSS (scratch images); the system
/// store, when there is one, is used too (`SSL_CERT_FILE` works for private gateways).
pub fn http_client() -> reqwest::Client {
    let roots = webpki_root_certs::TLS_SERVER_ROOT_CERTS
        .iter()
        .filter_map(|der| reqwest::Certificate::from_der(der).ok());
    reqwest::Client::builder()
        .tls_certs_merge(roots)
        .hickory_dns(true)
        .connect_timeout(Duration::from_secs(10))
        .build()
        .or_else(|_| {
            reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(10))
                .build()
        })
        .expect("an HTTP client with default settings always builds")
}

/// Why a call to the checkpoint API failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Another runner claimed the thread: stop at once.
    #[error("fenced: another runner owns this thread now ({0})")]
    Fenced(String),
    /// The parent version is not the latest: the local state is stale.
    #[error("version conflict: {0}")]
    VersionConflict(String),
    /// The API could not be reached (or answered 5xx) for longer than the runner's patience.
    #[error("the checkpoint API is unreachable: {0}")]
    Unreachable(String),
    /// The API refused the request.
    #[error("the checkpoint API answered {status}: {code}: {message}")]
    Refused {
        /// HTTP status.
        status: StatusCode,
        /// Error code.
        code: String,
        /// Message.
        message: String,
    },
}

/// The runner routes of one thread.
#[derive(Clone)]
pub struct ApiClient {
    http: reqwest::Client,
    base: String,
    access: ApiAccess,
    /// How long transient failures are retried before giving up.
    pub patience: Duration,
}

enum Attempt<T> {
    Done(T),
    Retry(String),
}

impl ApiClient {
    /// A client for `thread` at `access`.
    pub fn new(
        http: reqwest::Client,
        access: ApiAccess,
        thread: ThreadId,
        patience: Duration,
    ) -> Self {
        Self {
            base: format!("{}/v1/runners/threads/{thread}", access.url),
            http,
            access,
            patience,
        }
    }

    async fn once<B: Serialize, T: DeserializeOwned>(
        &self,
        method: &Method,
        path: &str,
        body: Option<&B>,
        timeout: Duration,
    ) -> Result<Attempt<Option<T>>, ApiError> {
        let mut req = self
            .http
            .request(method.clone(), format!("{}{path}", self.base))
            .bearer_auth(self.access.token.expose())
            .timeout(timeout);
        if let Some(body) = body {
            req = req.json(body);
        }
        let resp = match req.send().await {
            Ok(resp) => resp,
            Err(e) => return Ok(Attempt::Retry(e.to_string())),
        };
        let status = resp.status();
        if status.is_success() {
            let bytes = match resp.bytes().await {
                Ok(b) => b,
                Err(e) => return Ok(Attempt::Retry(e.to_string())),
            };
            return serde_json::from_slice(&bytes)
                .map(|v| Attempt::Done(Some(v)))
                .map_err(|e| ApiError::Refused {
                    status,
                    code: "bad_response".into(),
                    message: e.to_string(),
                });
        }
        if status == StatusCode::NOT_FOUND && method == Method::GET {
            return Ok(Attempt::Done(None));
        }
        if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
            return Ok(Attempt::Retry(format!("HTTP {status}")));
        }
        let body: ErrorBody = resp.json().await.unwrap_or(ErrorBody {
            code: ErrorCode::Other("unknown".into()),
            message: String::new(),
        });
        Err(match body.code {
            ErrorCode::Fenced => ApiError::Fenced(body.message),
            ErrorCode::VersionConflict => ApiError::VersionConflict(body.message),
            code => ApiError::Refused {
                status,
                code: code.to_string(),
                message: body.message,
            },
        })
    }

    /// Sends a request, retrying transient failures (connection errors, 5xx, 429) with backoff
    /// for up to `patience`. Every runner request is safe to repeat: writes are fenced and
    /// versioned, ledger calls are idempotent by key.
    async fn call<B: Serialize, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
        timeout: Duration,
    ) -> Result<Option<T>, ApiError> {
        let started = Instant::now();
        let mut delay = Duration::from_millis(100);
        loop {
            match self.once(&method, path, body, timeout).await? {
                Attempt::Done(v) => return Ok(v),
                Attempt::Retry(why) => {
                    if started.elapsed() + delay > self.patience {
                        return Err(ApiError::Unreachable(why));
                    }
                    tracing::warn!(reason = %why, retry_in_ms = delay.as_millis() as u64, "checkpoint API call failed; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
            }
        }
    }

    fn required<T>(v: Option<T>) -> Result<T, ApiError> {
        v.ok_or_else(|| ApiError::Refused {
            status: StatusCode::NOT_FOUND,
            code: "not_found".into(),
            message: "unexpected 404".into(),
        })
    }

    const T: Duration = Duration::from_secs(30);

    /// Claims the thread: a new epoch.
    pub async fn claim(&self, labels: &ThreadLabels) -> Result<ClaimResponse, ApiError> {
        Self::required(
            self.call(Method::POST, "/claim", Some(labels), Self::T)
                .await?,
        )
    }

    /// The latest state; `None` for a fresh thread.
    pub async fn latest(&self) -> Result<Option<ThreadState>, ApiError> {
        self.call::<(), _>(Method::GET, "/latest", None, Self::T)
            .await
    }

    /// Appends a checkpoint version.
    pub async fn checkpoint(&self, req: &CheckpointRequest) -> Result<CheckpointCreated, ApiError> {
        Self::required(
            self.call(Method::POST, "/checkpoints", Some(req), Self::T)
                .await?,
        )
    }

    /// Records a tool call's intent (or gets the existing record).
    pub async fn intent(&self, intent: &ToolCallIntent) -> Result<ToolCallRecord, ApiError> {
        Self::required(
            self.call(Method::POST, "/tool-calls", Some(intent), Self::T)
                .await?,
        )
    }

    /// Records a tool call's outcome.
    pub async fn complete(
        &self,
        key: &str,
        done: &ToolCallCompletion,
    ) -> Result<ToolCallRecord, ApiError> {
        Self::required(
            self.call(
                Method::PUT,
                &format!("/tool-calls/{key}"),
                Some(done),
                Self::T,
            )
            .await?,
        )
    }

    /// Inbox messages after `after`, waiting up to `wait`.
    pub async fn inbox(&self, after: u64, wait: Duration) -> Result<Vec<InboxMessage>, ApiError> {
        let path = format!("/inbox?after={after}&wait={}&limit=1", wait.as_secs());
        Ok(self
            .call::<(), _>(Method::GET, &path, None, wait + Duration::from_secs(15))
            .await?
            .unwrap_or_default())
    }

    /// Appends trace events (one attempt with a short timeout: events never hold up a turn).
    pub async fn events(&self, epoch: u64, events: Vec<NewEvent>) -> Result<(), ApiError> {
        let body = EventsRequest { epoch, events };
        match self
            .once::<_, serde_json::Value>(
                &Method::POST,
                "/events",
                Some(&body),
                Duration::from_secs(5),
            )
            .await?
        {
            Attempt::Done(_) => Ok(()),
            Attempt::Retry(why) => Err(ApiError::Unreachable(why)),
        }
    }
}
