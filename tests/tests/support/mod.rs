//! Shared pieces of the end-to-end tests: the agent spec, a runner child process, the API's admin
//! calls, a gate — a proxy between runner and API that can hold one chosen request so the test
//! can kill the runner at an exact step — and pools on real Docker ([`docker`]); the chaos
//! suite's replay runs ([`chaos_replay`]) and A2A caller ([`chaos_a2a`]).

#![allow(dead_code)]

pub(crate) mod chaos_a2a;
pub(crate) mod chaos_replay;
pub(crate) mod docker;
pub(crate) mod mcp;
pub(crate) mod openai;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ninetrix_client::Client;
use ninetrix_e2e::ninetrix_bin;
use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{EnqueueRequest, ThreadState, ThreadStatus};
use ninetrix_proto::events::{Decoded, TraceEvent, TurnCompleted};
use serde_json::{Value, json};

/// A durable scripted agent whose every turn appends one line to `log.txt` (a `write` effect)
/// and then answers.
pub(crate) fn appender_spec() -> Value {
    json!({
        "name": "appender",
        "metadata": {"name": null, "description": null, "role": "test agent", "goal": null, "instructions": null, "constraints": []},
        "runtime": {"provider": "scripted", "via": null, "model": "scripted", "base_url": null, "api_key_secret": null,
                    "temperature": 0.2, "max_tokens": 1024, "tool_timeout_secs": 30, "image": null,
                    "resources": {"cpu": null, "memory_bytes": null},
                    "script": [
                        {"text": "Appending.", "tool_calls": [{"name": "file_write", "args": {"path": "log.txt", "content": "line\n", "mode": "append"}}]},
                        {"text": "Done.", "tool_calls": []}
                    ]},
        "tools": [{"name": "file_write", "effect": "idempotent", "effect_pinned": false}],
        "execution": {"durability": true, "replicas": 1, "max_turns": 10, "task": null, "resume": "truncate"},
        "governance": {"max_budget_per_run": null}, "env": {}, "secrets": []
    })
}

/// A `ninetrix api` process (SQLite in a temporary directory, `--insecure-dev`), its admin
/// client, a runner workspace and a fresh thread: what the process tests start from.
pub(crate) struct Setup {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) api: ninetrix_e2e::ApiProcess,
    pub(crate) admin: Admin,
    pub(crate) workspace: std::path::PathBuf,
    pub(crate) thread: ThreadId,
}

/// A new [`Setup`].
pub(crate) fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("api.db").display());
    let api = ninetrix_e2e::ApiProcess::start(&["--database", &db, "--insecure-dev"]);
    let workspace = dir.path().join("workspace");
    std::fs::create_dir(&workspace).unwrap();
    Setup {
        admin: Admin::new(&api.url),
        api,
        workspace,
        thread: ThreadId::new_v7(),
        dir,
    }
}

/// A runner child process.
pub(crate) struct Runner {
    pub(crate) child: std::process::Child,
}

impl Runner {
    pub(crate) fn start(
        api_url: &str,
        thread: ThreadId,
        spec: &Value,
        workspace: &std::path::Path,
    ) -> Runner {
        Runner::start_with_env(api_url, thread, spec, workspace, &[])
    }

    /// [`Runner::start`] with more environment (a provider's key, say).
    pub(crate) fn start_with_env(
        api_url: &str,
        thread: ThreadId,
        spec: &Value,
        workspace: &std::path::Path,
        env: &[(&str, &str)],
    ) -> Runner {
        let thread = thread.to_string();
        let mut all = vec![
            ("AGENTFILE_RUNNER_TOKEN", "insecure-dev"),
            ("AGENTFILE_THREAD_ID", thread.as_str()),
        ];
        all.extend_from_slice(env);
        Runner::spawn(api_url, spec, workspace, &thread, &all)
    }

    /// A runner that knows only its replica number (as a Swarm task does): no thread ID and no
    /// runner token; it asks the API for replica `AGENTFILE_REPLICA`'s thread with the agent
    /// token in `env`.
    pub(crate) fn start_replica(
        api_url: &str,
        spec: &Value,
        workspace: &std::path::Path,
        env: &[(&str, &str)],
    ) -> Runner {
        let name = workspace.file_name().unwrap().to_string_lossy().to_string();
        Runner::spawn(api_url, spec, workspace, &name, env)
    }

    /// `ninetrix runner` with the basics and `env`; its health file is `health-<health>` beside
    /// the workspace.
    fn spawn(
        api_url: &str,
        spec: &Value,
        workspace: &std::path::Path,
        health: &str,
        env: &[(&str, &str)],
    ) -> Runner {
        let child = std::process::Command::new(ninetrix_bin())
            .arg("runner")
            .envs(env.iter().copied())
            .env("AGENTFILE_API_URL", api_url)
            .env("AGENTFILE_AGENT_SPEC", spec.to_string())
            .env("AGENTFILE_WORKSPACE", workspace)
            .env("AGENTFILE_API_PATIENCE", "20")
            .env(
                "AGENTFILE_HEALTH_FILE",
                workspace.with_file_name(format!("health-{health}")),
            )
            .env(
                "RUST_LOG",
                std::env::var("NINETRIX_RUNNER_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdout(std::process::Stdio::null())
            // NINETRIX_RUNNER_STDERR=1 shows the runners' own log lines when a test fails.
            .stderr(if std::env::var_os("NINETRIX_RUNNER_STDERR").is_some() {
                std::process::Stdio::inherit()
            } else {
                std::process::Stdio::null()
            })
            .spawn()
            .expect("ninetrix runner starts");
        Runner { child }
    }

    /// SIGKILL and reap.
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits for the process to exit, up to `timeout`.
    pub(crate) fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The API as the tests call it: the typed client (the API runs with `--insecure-dev`), plus
/// the few steps the tests repeat.
#[derive(Clone)]
pub(crate) struct Admin {
    pub(crate) client: Client,
}

impl Admin {
    pub(crate) fn new(url: &str) -> Admin {
        Admin {
            client: Client::new(ninetrix_client::http_client(), url, None),
        }
    }

    /// Enqueues a message with a dedupe key; returns its inbox seq.
    pub(crate) async fn send(&self, thread: ThreadId, content: &str, key: &str) -> u64 {
        self.send_as(thread, content, key, None).await
    }

    /// [`Admin::send`] with a mode (`steer`, `interrupt`, …).
    pub(crate) async fn send_as(
        &self,
        thread: ThreadId,
        content: &str,
        key: &str,
        mode: Option<ninetrix_proto::api::MessageMode>,
    ) -> u64 {
        let request = EnqueueRequest {
            content: content.to_string(),
            dedupe_key: Some(key.to_string()),
            control: None,
            mode,
        };
        self.client.enqueue(thread, &request).await.unwrap().seq
    }

    /// Waits until the thread has completed the turn that answers inbox `seq`.
    pub(crate) async fn wait_turn(
        &self,
        thread: ThreadId,
        seq: u64,
        timeout: Duration,
    ) -> TurnCompleted {
        let deadline = Instant::now() + timeout;
        let mut after = 0;
        loop {
            for event in self
                .client
                .events_after(thread, after)
                .await
                .unwrap_or_default()
            {
                after = event.seq;
                if let Decoded::Known(TraceEvent::TurnCompleted(done)) = event.decode()
                    && done.seq == seq
                {
                    return done;
                }
            }
            assert!(
                Instant::now() < deadline,
                "turn for inbox seq {seq} did not complete within {timeout:?}"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Waits until the thread's record (its latest checkpoint, not its events) shows inbox `seq`
    /// taken and the thread idle. Events are best-effort: a runner killed between its final
    /// checkpoint and its event flush loses that turn's `turn_completed`, but never the turn.
    pub(crate) async fn wait_done(&self, thread: ThreadId, seq: u64, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let latest = self.client.latest(thread).await.ok().flatten();
            let state = latest.map(|l| l.state);
            if state
                .as_ref()
                .is_some_and(|s| s.inbox_cursor >= seq && s.status == ThreadStatus::Idle)
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "inbox seq {seq} was not done within {timeout:?}: {state:?}"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// The thread's events so far, decoded (a kind this build does not know is left out).
    pub(crate) async fn trace(&self, thread: ThreadId) -> Vec<TraceEvent> {
        let events = self.client.events_after(thread, 0).await.unwrap();
        events
            .iter()
            .filter_map(|e| match e.decode() {
                Decoded::Known(e) => Some(e),
                Decoded::Unknown { .. } => None,
            })
            .collect()
    }

    /// The thread's `turn_completed` events so far.
    pub(crate) async fn turns(&self, thread: ThreadId) -> Vec<TurnCompleted> {
        self.trace(thread)
            .await
            .into_iter()
            .filter_map(|e| match e {
                TraceEvent::TurnCompleted(t) => Some(t),
                _ => None,
            })
            .collect()
    }

    /// The thread at its latest version (it must have one).
    pub(crate) async fn latest(&self, thread: ThreadId) -> ThreadState {
        self.client
            .latest(thread)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("thread {thread} has no checkpoint"))
    }
}

/// Which request the gate holds.
#[derive(Clone, Debug)]
pub(crate) struct Hold {
    pub(crate) method: &'static str,
    pub(crate) path_contains: &'static str,
    pub(crate) body_contains: Vec<&'static str>,
    /// Let the API store it first (then hold the response); else never forward it.
    pub(crate) forward_first: bool,
    /// Instead of holding: let the API store it, then answer 503 as if the answer were lost
    /// (the API died after its commit); later requests pass.
    pub(crate) lose_answer: bool,
}

/// A proxy in front of the API that holds the first request matching a [`Hold`].
#[derive(Clone)]
pub(crate) struct Gate {
    pub(crate) url: String,
    hold: Arc<Mutex<Option<Hold>>>,
    held: Arc<tokio::sync::Notify>,
}

impl Gate {
    pub(crate) async fn start(api_url: &str) -> Gate {
        let hold: Arc<Mutex<Option<Hold>>> = Arc::default();
        let held = Arc::new(tokio::sync::Notify::new());
        let state = (
            api_url.to_string(),
            hold.clone(),
            held.clone(),
            reqwest::Client::new(),
        );
        let app = axum::Router::new().fallback(forward).with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Gate { url, hold, held }
    }

    /// Arms the gate; the returned future resolves when the request is being held.
    pub(crate) fn arm(&self, hold: Hold) -> impl std::future::Future<Output = ()> + use<> {
        let held = self.held.clone();
        let notified = async move { held.notified().await };
        *self.hold.lock().unwrap() = Some(hold);
        notified
    }
}

type GateState = (
    String,
    Arc<Mutex<Option<Hold>>>,
    Arc<tokio::sync::Notify>,
    reqwest::Client,
);

async fn forward(
    axum::extract::State((api, hold, held, http)): axum::extract::State<GateState>,
    req: axum::extract::Request,
) -> axum::response::Response {
    let method = req.method().clone();
    let uri = req.uri().clone();
    let headers = req.headers().clone();
    let body = axum::body::to_bytes(req.into_body(), usize::MAX)
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&body).to_string();
    let matched = {
        let mut h = hold.lock().unwrap();
        let hit = h.as_ref().is_some_and(|h| {
            method.as_str() == h.method
                && uri.path().contains(h.path_contains)
                && h.body_contains.iter().all(|s| text.contains(s))
        });
        if hit { h.take() } else { None }
    };
    let send = || async {
        let mut r = http
            .request(
                method.clone(),
                format!("{api}{}", uri.path_and_query().map_or("", |p| p.as_str())),
            )
            .body(body.clone());
        for name in ["content-type", "authorization"] {
            if let Some(v) = headers.get(name) {
                r = r.header(name, v);
            }
        }
        r.send().await
    };
    if matched.as_ref().is_some_and(|h| h.lose_answer) {
        let _ = send().await;
        held.notify_one();
        return axum::response::Response::builder()
            .status(503)
            .body(axum::body::Body::empty())
            .unwrap();
    }
    if let Some(h) = matched {
        if h.forward_first {
            let _ = send().await;
        }
        // Wait while the test does not come back (it kills the runner while this is pending).
        held.notify_one();
        std::future::pending::<()>().await;
    }
    match send().await {
        Ok(resp) => {
            let status = resp.status();
            let ct = resp.headers().get("content-type").cloned();
            let bytes = resp.bytes().await.unwrap_or_default();
            let mut out = axum::response::Response::builder().status(status.as_u16());
            if let Some(ct) = ct {
                out = out.header("content-type", ct);
            }
            out.body(axum::body::Body::from(bytes)).unwrap()
        }
        Err(_) => axum::response::Response::builder()
            .status(502)
            .body(axum::body::Body::empty())
            .unwrap(),
    }
}

/// Counts lines in the workspace's log file.
pub(crate) fn lines(workspace: &std::path::Path) -> usize {
    std::fs::read_to_string(workspace.join("log.txt"))
        .map(|s| s.lines().count())
        .unwrap_or(0)
}
