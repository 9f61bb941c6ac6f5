//! The client and the bridge against MCP servers nobody here wrote: the reference servers
//! `mcp-server-time` (through `ninetrix mcp-bridge`'s code, over streamable HTTP) and
//! `mcp-server-git` (a stdio child, on a local repository), and a server written with the
//! official Python SDK that can die mid-call.
//!
//! Needs `pip install mcp==2.3.0 mcp-server-time mcp-server-git` (CI installs them); without
//! them each test says `SKIPPED: needs …` and passes (`ninetrix-testkit`), unless
//! `NINETRIX_REQUIRE_MCP=1`.

use std::time::Duration;

use ninetrix_mcp::bridge;
use ninetrix_mcp::client::{CallError, Connection, Endpoint, StdioServer};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const T: Duration = Duration::from_secs(30);

/// A bridge serving on a loopback port.
struct Bridge {
    url: String,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), bridge::BridgeError>>,
}

impl Bridge {
    /// Stops the bridge and waits until its server process is gone (so nothing outlives the
    /// test).
    async fn stop(self) {
        self.stop.cancel();
        tokio::time::timeout(T, self.task)
            .await
            .expect("the bridge stops within 30 s")
            .unwrap()
            .unwrap();
    }
}

/// Serves `command` through the bridge on a loopback port.
async fn bridge(command: &[&str]) -> Bridge {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let stop = CancellationToken::new();
    let config = StdioServer {
        prepare: None,
        command: command.iter().map(|s| s.to_string()).collect(),
        env: Vec::new(),
        dir: None,
    };
    let task = tokio::spawn(bridge::serve(listener, config, stop.clone()));
    Bridge { url, stop, task }
}

fn http(url: &str) -> Endpoint {
    Endpoint::Http {
        url: url.to_string(),
        headers: Vec::new(),
        http: reqwest::Client::new(),
    }
}

#[tokio::test]
async fn the_time_server_answers_through_the_bridge() {
    if ninetrix_testkit::require(ninetrix_testkit::Need::Mcp).is_none() {
        return;
    }
    let bridge = bridge(&["mcp-server-time", "--local-timezone", "UTC"]).await;
    let conn = Connection::open(&http(&bridge.url), T)
        .await
        .expect("the bridge serves the time server");
    let tools = conn.tools(T).await.unwrap();
    let now = tools
        .iter()
        .find(|t| t.name == "get_current_time")
        .expect("the time server offers get_current_time");
    assert_eq!(now.read_only, Some(true), "annotated read-only: {now:?}");
    assert!(tools.iter().any(|t| t.name == "convert_time"));

    let out = conn
        .call(
            "get_current_time",
            &json!({"timezone": "Europe/Paris"}),
            "k-1",
            T,
        )
        .await
        .unwrap();
    assert!(
        !out.is_error && out.text.contains("Europe/Paris"),
        "{out:?}"
    );
    // A tool error is an answer, marked as an error.
    let bad = conn
        .call(
            "get_current_time",
            &json!({"timezone": "Nowhere/Else"}),
            "k-2",
            T,
        )
        .await
        .unwrap();
    assert!(bad.is_error, "{bad:?}");
    // An unknown tool is refused by the server: it did not run.
    let unknown = conn.call("no_such_tool", &json!({}), "k-3", T).await;
    assert!(matches!(unknown, Err(CallError::Refused(_))), "{unknown:?}");
    conn.close().await;
    bridge.stop().await;
}

#[tokio::test]
async fn the_git_server_runs_as_a_stdio_child_on_a_local_repository() {
    if ninetrix_testkit::require(ninetrix_testkit::Need::Mcp).is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path();
    let git = |args: &[&str]| {
        let ok = std::process::Command::new("git")
            .args(args)
            .current_dir(repo)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.com")
            .status()
            .unwrap()
            .success();
        assert!(ok, "git {args:?}");
    };
    git(&["init", "-q"]);
    std::fs::write(repo.join("a.txt"), "one\n").unwrap();
    git(&["add", "a.txt"]);
    git(&["commit", "-q", "-m", "the first commit"]);
    let endpoint = Endpoint::Stdio(StdioServer {
        prepare: None,
        command: vec![
            "mcp-server-git".into(),
            "--repository".into(),
            repo.display().to_string(),
        ],
        env: Vec::new(),
        dir: None,
    });
    let conn = Connection::open(&endpoint, T)
        .await
        .expect("mcp-server-git starts");
    let tools = conn.tools(T).await.unwrap();
    let log = tools.iter().find(|t| t.name == "git_log").unwrap();
    assert_eq!(log.read_only, Some(true));
    let commit = tools.iter().find(|t| t.name == "git_commit").unwrap();
    assert_ne!(commit.read_only, Some(true), "git_commit writes");
    let out = conn
        .call(
            "git_log",
            &json!({"repo_path": repo.display().to_string()}),
            "k-log",
            T,
        )
        .await
        .unwrap();
    assert!(out.text.contains("the first commit"), "{out:?}");
    conn.close().await;
}

#[tokio::test]
async fn a_server_that_dies_mid_call_is_lost_then_restarted_by_the_bridge() {
    if ninetrix_testkit::require(ninetrix_testkit::Need::Mcp).is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/mcp_ledger_server.py"
    );
    let root = dir.path().display().to_string();
    let journal_arg = journal.display().to_string();
    let bridge = bridge(&[
        "python3",
        script,
        "--root",
        &root,
        "--journal",
        &journal_arg,
    ])
    .await;
    let conn = Connection::open(&http(&bridge.url), T).await.unwrap();
    let died = conn.call("crash", &json!({}), "k-crash", T).await;
    assert!(
        matches!(&died, Err(CallError::Lost(why)) if why.contains("unknown")),
        "a call whose server died is lost (outcome unknown): {died:?}"
    );
    // The bridge restarts the server; the same connection goes on.
    let out = conn
        .call(
            "append_line",
            &json!({"path": "f.txt", "text": "hello"}),
            "k-append",
            T,
        )
        .await
        .unwrap();
    assert!(!out.is_error, "{out:?}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("f.txt")).unwrap(),
        "hello\n"
    );
    // The ledger key reached the server in `_meta`.
    let seen = std::fs::read_to_string(&journal).unwrap();
    assert!(seen.contains("\"key\": \"k-append\""), "{seen}");
    conn.close().await;
    bridge.stop().await;
}

#[tokio::test]
async fn a_server_that_is_not_there_is_not_sent_to() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    drop(listener);
    let err = Connection::open(&http(&url), T).await.err().unwrap();
    assert!(
        err.0.contains("connection refused") && err.0.contains(&url),
        "{err}"
    );
    let missing = Endpoint::Stdio(StdioServer {
        prepare: None,
        command: vec!["/no/such/mcp-server".into()],
        env: Vec::new(),
        dir: None,
    });
    let err = Connection::open(&missing, T).await.err().unwrap();
    assert!(err.0.contains("no such program"), "{err}");
}
