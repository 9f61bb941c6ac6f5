//! Test support: a real server on a loopback port, over SQLite (a temp file) or Postgres (a fresh
//! database per test, when `NINETRIX_TEST_POSTGRES_URL` is set), and a small HTTP client.

use std::time::Duration;

use ninetrix_api::store::StoreOptions;
use ninetrix_api::{AuthConfig, Config, Secret, Server};
use ninetrix_proto::ThreadId;
use reqwest::{Method, StatusCode};
use serde_json::Value;
use sqlx::Connection as _;

pub(crate) const ADMIN: &str = "test-admin-token-0123456789";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Backend {
    Sqlite,
    Postgres,
}

/// The Postgres server for tests (`NINETRIX_TEST_POSTGRES_URL`), or `None` when the test is
/// skipped for want of one (a failure with `NINETRIX_REQUIRE_POSTGRES=1`, as CI sets).
pub(crate) fn postgres_url() -> Option<String> {
    ninetrix_testkit::require(ninetrix_testkit::Need::Postgres)
}

/// A database for one test: a temp SQLite file, or a fresh Postgres database dropped afterwards.
pub(crate) struct TestDb {
    pub(crate) url: String,
    pub(crate) dir: tempfile::TempDir,
    postgres: Option<(String, String)>,
}

impl TestDb {
    pub(crate) async fn new(backend: Backend) -> Option<TestDb> {
        let dir = tempfile::tempdir().unwrap();
        match backend {
            Backend::Sqlite => Some(TestDb {
                url: format!("sqlite://{}", dir.path().join("api.db").display()),
                dir,
                postgres: None,
            }),
            Backend::Postgres => {
                let admin_url = postgres_url()?;
                let name = format!("nt_{}", ThreadId::new_v7().as_uuid().simple());
                let mut conn = sqlx::PgConnection::connect(&admin_url)
                    .await
                    .expect("connect to the test Postgres");
                sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                    .execute(&mut conn)
                    .await
                    .unwrap();
                let base = admin_url
                    .rsplit_once('/')
                    .map_or(admin_url.as_str(), |(b, _)| b);
                Some(TestDb {
                    url: format!("{base}/{name}"),
                    dir,
                    postgres: Some((admin_url.clone(), name)),
                })
            }
        }
    }
}

impl TestDb {
    /// Another handle on `db`'s database, for a second server on it (as another API replica):
    /// dropping it drops nothing.
    pub(crate) fn beside(db: &TestDb) -> TestDb {
        TestDb {
            url: db.url.clone(),
            dir: tempfile::tempdir().unwrap(),
            postgres: None,
        }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let Some((admin_url, name)) = self.postgres.take() else {
            return;
        };
        // Drop from a thread of its own: the test's runtime may be shutting down.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                if let Ok(mut c) = sqlx::PgConnection::connect(&admin_url).await {
                    let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                    )))
                    .execute(&mut c)
                    .await;
                }
            });
        })
        .join();
    }
}

/// A running server and a client for it.
pub(crate) struct TestApi {
    pub(crate) url: String,
    pub(crate) client: reqwest::Client,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
    pub(crate) db: TestDb,
}

/// Tweaks to the default test configuration.
pub(crate) type Tweak = fn(&mut Config);

impl TestApi {
    pub(crate) async fn start(backend: Backend) -> Option<TestApi> {
        Self::start_with(backend, |_| {}).await
    }

    pub(crate) async fn start_with(backend: Backend, tweak: Tweak) -> Option<TestApi> {
        Some(Self::start_on(TestDb::new(backend).await?, tweak).await)
    }

    /// A server on `db` (a fresh database, or [`TestDb::beside`] another server's).
    pub(crate) async fn start_on(db: TestDb, tweak: Tweak) -> TestApi {
        let mut config = Config::new(
            db.url.clone(),
            AuthConfig::Tokens {
                secret: Secret::new(b"test-secret-for-runner-tokens".to_vec()),
                admin_token: Secret::new(ADMIN.as_bytes().to_vec()),
            },
        );
        config.listen = "127.0.0.1:0".parse().unwrap();
        config.store = StoreOptions {
            max_batch: 64,
            max_connections: 4,
            ..StoreOptions::default()
        };
        tweak(&mut config);
        let server = Server::bind(config).await.expect("server starts");
        let url = format!("http://{}", server.local_addr().unwrap());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            server
                .run(async move {
                    let _ = stopped.await;
                })
                .await
                .expect("server runs");
        });
        TestApi {
            url,
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()
                .unwrap(),
            stop: Some(stop),
            task: Some(task),
            db,
        }
    }

    /// Stops the server gracefully and waits for it.
    pub(crate) async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.unwrap();
        }
    }

    /// Stops the server gracefully and starts another on the same database (a restart of the
    /// API: what is stored stays, what was in memory is gone).
    pub(crate) async fn restart(mut self) -> TestApi {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.unwrap();
        }
        let placeholder = TestDb::beside(&self.db);
        let db = std::mem::replace(&mut self.db, placeholder);
        TestApi::start_on(db, |_| {}).await
    }

    /// Sends a request; returns the status and the body as JSON (`Null` when empty).
    pub(crate) fn call(
        &self,
        method: Method,
        path: impl Into<String>,
        token: Option<&str>,
        body: Option<Value>,
    ) -> impl std::future::Future<Output = (StatusCode, Value)> + '_ {
        let mut req = self
            .client
            .request(method, format!("{}{}", self.url, path.into()));
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        if let Some(body) = body {
            req = req.json(&body);
        }
        async move {
            let resp = req.send().await.expect("request sent");
            let status = resp.status();
            let bytes = resp.bytes().await.unwrap();
            let value = if bytes.is_empty() {
                Value::Null
            } else {
                serde_json::from_slice(&bytes).unwrap_or_else(|_| {
                    panic!("non-JSON body: {}", String::from_utf8_lossy(&bytes))
                })
            };
            (status, value)
        }
    }

    pub(crate) fn admin(
        &self,
        method: Method,
        path: impl Into<String>,
        body: Option<Value>,
    ) -> impl std::future::Future<Output = (StatusCode, Value)> + '_ {
        self.call(method, path, Some(ADMIN), body)
    }

    /// Mints the runner token of a thread.
    pub(crate) async fn runner_token(&self, thread: ThreadId) -> String {
        let (status, body) = self
            .admin(Method::POST, "/v1/tokens/runner", Some(serde_json::json!({"thread_id": thread, "pool": "p", "agent": "a", "replica": 1})))
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        body["token"].as_str().unwrap().to_string()
    }

    /// Mints the runner token of `thread` with these labels (a JSON object; `{}` restates any
    /// thread's): the answer as it is.
    pub(crate) async fn mint(
        &self,
        thread: ThreadId,
        labels: serde_json::Value,
    ) -> (StatusCode, serde_json::Value) {
        let mut body = labels;
        body["thread_id"] = serde_json::json!(thread);
        self.admin(Method::POST, "/v1/tokens/runner", Some(body))
            .await
    }

    /// The runner token of an existing thread (a session's, a replica's), minted without
    /// restating its labels: the token carries the thread's own.
    pub(crate) async fn token_of(&self, thread: ThreadId) -> String {
        let (status, body) = self.mint(thread, serde_json::json!({})).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        body["token"].as_str().unwrap().to_string()
    }

    /// Claims a thread with its runner token; returns the epoch.
    pub(crate) async fn claim(&self, thread: ThreadId, token: &str) -> u64 {
        let (status, body) = self
            .call(
                Method::POST,
                &format!("/v1/runners/threads/{thread}/claim"),
                Some(token),
                Some(serde_json::json!({})),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body["epoch"].as_u64().unwrap()
    }
}

impl Drop for TestApi {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// A message in the API's JSON form.
pub(crate) fn message(role: &str, text: &str) -> Value {
    serde_json::to_value(ninetrix_proto::Message::text(
        match role {
            "user" => ninetrix_proto::Role::User,
            "tool" => ninetrix_proto::Role::Tool,
            _ => ninetrix_proto::Role::Assistant,
        },
        text,
    ))
    .unwrap()
}

/// An assistant message calling tool `t` (no arguments) once per call ID.
pub(crate) fn calling(ids: &[&str]) -> ninetrix_proto::Message {
    ninetrix_proto::Message::new(
        ninetrix_proto::Role::Assistant,
        ids.iter()
            .map(|id| ninetrix_proto::message::Block::ToolCall {
                id: (*id).to_string(),
                name: "t".into(),
                args: serde_json::json!({}),
            })
            .collect(),
    )
}

/// A tool message with the result of call `id`.
pub(crate) fn result_of(id: &str, text: &str) -> ninetrix_proto::Message {
    ninetrix_proto::Message::new(
        ninetrix_proto::Role::Tool,
        vec![ninetrix_proto::message::Block::ToolResult {
            call_id: id.to_string(),
            content: text.to_string(),
            is_error: false,
        }],
    )
}

/// [`calling`] in the API's JSON form.
pub(crate) fn calling_json(ids: &[&str]) -> Value {
    serde_json::to_value(calling(ids)).unwrap()
}

/// [`result_of`] in the API's JSON form.
pub(crate) fn result_json(id: &str, text: &str) -> Value {
    serde_json::to_value(result_of(id, text)).unwrap()
}

/// A new thread with its runner token, claimed: (thread, token, epoch).
pub(crate) async fn claimed(api: &TestApi) -> (ThreadId, String, u64) {
    let thread = ThreadId::new_v7();
    let token = api.runner_token(thread).await;
    let epoch = api.claim(thread, &token).await;
    (thread, token, epoch)
}

/// A checkpoint request body.
pub(crate) fn checkpoint(
    epoch: u64,
    parent: u64,
    truncate_to: Option<u64>,
    append: Vec<Value>,
    len_after: u64,
) -> Value {
    let mut body = serde_json::json!({
        "epoch": epoch,
        "parent_version": parent,
        "append": append,
        "state": {"turn_seq": 1, "turn_start_history_len": len_after.min(1), "status": "in_turn", "inbox_cursor": 0}
    });
    if let Some(t) = truncate_to {
        body["truncate_to"] = t.into();
    }
    body
}

/// Generates one `#[tokio::test]` per backend for each async test function `f(Backend)`.
macro_rules! both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::support::Backend::Sqlite).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::support::Backend::Postgres).await;
                }
            )*
        }
    };
}
pub(crate) use both_backends;

/// The status, code and message of an API refusal (a panic for any other error).
pub(crate) fn refusal(
    e: &ninetrix_client::ClientError,
) -> (u16, ninetrix_client::ErrorCode, String) {
    match e {
        ninetrix_client::ClientError::Api {
            status,
            code,
            message,
            ..
        } => (*status, code.clone(), message.clone()),
        other => panic!("not an API error: {other}"),
    }
}

/// A number the database answers `sql` with.
pub(crate) async fn count(api: &TestApi, sql: &str) -> i64 {
    if api.db.url.starts_with("sqlite:") {
        let mut c = sqlx::SqliteConnection::connect(&api.db.url).await.unwrap();
        sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_string()))
            .fetch_one(&mut c)
            .await
            .unwrap()
    } else {
        let mut c = sqlx::PgConnection::connect(&api.db.url).await.unwrap();
        sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_string()))
            .fetch_one(&mut c)
            .await
            .unwrap()
    }
}
