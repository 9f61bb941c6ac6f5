//! MCP tool calls through the ledger, with the runner as a process against a real `ninetrix
//! api` and a real MCP server written with the official Python SDK (`mcp` 2.x, streamable HTTP;
//! tests/fixtures/mcp_ledger_server.py), which journals every call it starts:
//!
//! - SIGKILL of the runner mid MCP `write` call: after the restart the call is not made again
//!   (the server saw exactly one), its outcome is reported unknown, and the verifier's answer —
//!   a read through the same server — reaches the model;
//! - SIGKILL mid MCP `read` call: the read runs again (the server saw two);
//! - the server process killed mid `write` call behind `ninetrix mcp-bridge`: the runner gets no
//!   answer, reports the outcome unknown with the verifier's answer (after the bridge restarted
//!   the server), and the turn completes — without a runner restart.
//!
//! Needs `pip install mcp==2.3.0` (CI installs it); otherwise reported skipped (see build.rs).

mod support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use ninetrix_e2e::{ApiProcess, ninetrix_bin};
use ninetrix_proto::events::{Decoded, ToolMode, TraceEvent};
use ninetrix_proto::{Block, Role, ThreadId};
use serde_json::Value;
use support::mcp::{McpTestServer, SERVER, free_port, quiet, spec_of, wait_listening};
use support::{Admin, Runner};

/// A child process killed and reaped on drop.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Setup {
    _dir: tempfile::TempDir,
    api: ApiProcess,
    admin: Admin,
    workspace: PathBuf,
    thread: ThreadId,
    /// Where the MCP server works, and its journal.
    root: PathBuf,
    journal: PathBuf,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("api.db").display());
    let api = ApiProcess::start(&["--database", &db, "--insecure-dev"]);
    let workspace = dir.path().join("workspace");
    let root = dir.path().join("server");
    std::fs::create_dir(&workspace).unwrap();
    std::fs::create_dir(&root).unwrap();
    Setup {
        admin: Admin::new(&api.url),
        api,
        workspace,
        thread: ThreadId::new_v7(),
        journal: dir.path().join("journal"),
        root,
        _dir: dir,
    }
}

impl Setup {
    /// The ledger server over streamable HTTP on its own port.
    fn server(&self) -> (McpTestServer, String) {
        let server = McpTestServer::start(&self.root, &self.journal);
        let url = server.url();
        (server, url)
    }

    /// The ledger server as a stdio server behind `ninetrix mcp-bridge`.
    fn bridged_server(&self) -> (Child, String) {
        let port = free_port();
        let child = quiet(std::process::Command::new(ninetrix_bin()).args([
            "mcp-bridge",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--",
            "python3",
            SERVER,
            "--root",
            &self.root.display().to_string(),
            "--journal",
            &self.journal.display().to_string(),
        ]))
        .spawn()
        .expect("ninetrix mcp-bridge starts");
        wait_listening(port);
        (Child(child), format!("http://127.0.0.1:{port}/mcp"))
    }

    /// The calls the server started, as journalled: (tool, its JSON line).
    fn journal(&self) -> Vec<(String, Value)> {
        std::fs::read_to_string(&self.journal)
            .unwrap_or_default()
            .lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                (v["tool"].as_str().unwrap().to_string(), v)
            })
            .collect()
    }

    /// Waits until the server has started `n` calls of `tool`; the last one.
    fn wait_started(&self, tool: &str, n: usize) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let calls: Vec<Value> = self
                .journal()
                .into_iter()
                .filter(|(t, _)| t == tool)
                .map(|(_, v)| v)
                .collect();
            if calls.len() >= n {
                return calls[n - 1].clone();
            }
            assert!(
                Instant::now() < deadline,
                "the MCP server did not start call {n} of `{tool}` within 30 s: {:?}",
                self.journal()
            );
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// Sends a message, SIGKILLs the runner once the server has started its call of `tool`,
    /// starts another runner on the thread and waits until the turn is done; the call as the
    /// server journalled it.
    async fn crash_mid_call_and_finish(&self, spec: &Value, message: &str, tool: &str) -> Value {
        let seq = self.admin.send(self.thread, message, "k0").await;
        let mut runner = Runner::start(&self.api.url, self.thread, spec, &self.workspace);
        let call = self.wait_started(tool, 1);
        runner.kill();
        let _restarted = Runner::start(&self.api.url, self.thread, spec, &self.workspace);
        self.admin
            .wait_done(self.thread, seq, Duration::from_secs(60))
            .await;
        call
    }

    fn count(&self, tool: &str) -> usize {
        self.journal().iter().filter(|(t, _)| t == tool).count()
    }

    fn file_lines(&self, name: &str) -> usize {
        std::fs::read_to_string(self.root.join(name))
            .map(|s| s.lines().count())
            .unwrap_or(0)
    }
}

/// An agent whose turn makes one call of `tool` (with `args`) on the MCP server at `url`, then
/// answers "Done.". `append_line` is a write verified by `count_lines`.
fn spec(url: &str, tool: &str, args: &str) -> Value {
    let yaml = format!(
        r#"
mcp_servers:
  notes:
    url: {url}
    trusted: true
agents:
  scribe:
    runtime:
      provider: scripted
      tool_timeout: 60
      script:
        - tool_calls: [{{ name: {tool}, args: {args} }}]
        - text: Done.
    tools:
      - name: mcp://notes/append_line
        verify:
          tool: mcp://notes/count_lines
          args: {{ path: "{{{{args.path}}}}", text: "{{{{args.text}}}}" }}
      - mcp://notes/count_lines
"#
    );
    spec_of(&yaml)
}

/// The result the model got for the turn's one tool call.
async fn tool_result(s: &Setup) -> (String, bool) {
    let latest = s.admin.latest(s.thread).await;
    if let Err(v) = ninetrix_runner::history::validate(&latest.history) {
        panic!("invalid transcript: {v}");
    }
    let results: Vec<(String, bool)> = latest
        .history
        .iter()
        .filter(|m| m.role == Role::Tool)
        .flat_map(|m| &m.blocks)
        .filter_map(|b| match b {
            Block::ToolResult {
                content, is_error, ..
            } => Some((content.clone(), *is_error)),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 1, "one tool result: {results:?}");
    let last = latest.history.last().unwrap();
    assert_eq!(
        (last.role, last.text_content().as_str()),
        (Role::Assistant, "Done.")
    );
    results[0].clone()
}

/// The `tool_call` events of the thread: (tool, mode).
async fn tool_events(s: &Setup) -> Vec<(String, ToolMode)> {
    let events = s.admin.client.events_after(s.thread, 0).await.unwrap();
    events
        .iter()
        .filter_map(|e| match e.decode() {
            Decoded::Known(TraceEvent::ToolCall(t)) => Some((t.name, t.mode)),
            _ => None,
        })
        .collect()
}

fn kill_pid(pid: u64) {
    let ok = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -KILL {pid}");
}

#[tokio::test]
async fn sigkill_mid_mcp_write_reports_unknown_with_the_verifiers_answer_and_never_repeats_it() {
    if ninetrix_testkit::require(ninetrix_testkit::Need::Mcp).is_none() {
        return;
    }
    let s = setup();
    let (_server, url) = s.server();
    let spec = spec(
        &url,
        "notes__append_line",
        r#"{ path: out.txt, text: hello, delay: 5 }"#,
    );
    let call = s
        .crash_mid_call_and_finish(&spec, "write it", "append_line")
        .await;
    assert!(
        call["key"].as_str().is_some_and(|k| !k.is_empty()),
        "the ledger key reaches the server in _meta: {call}"
    );
    let (content, is_error) = tool_result(&s).await;
    assert_eq!(s.count("append_line"), 1, "the write was never repeated");
    assert!(is_error, "an unknown outcome is an error result");
    assert!(
        content.contains("is unknown") && content.contains("notes__count_lines"),
        "the model is told the outcome is unknown, and what the verifier said: {content}"
    );
    // The verifier saw the file as it is (the server may or may not have finished the write
    // after the runner died): its answer is the truth the model decides on.
    let lines = s.file_lines("out.txt");
    assert!(
        content.contains(&format!("{lines} line(s) of out.txt equal 'hello'")),
        "the verifier's answer ({lines} line(s)) reaches the model: {content}"
    );
    assert!(
        s.count("count_lines") >= 1,
        "the verifier ran on the server"
    );
    let events = tool_events(&s).await;
    assert!(
        events.contains(&("notes__append_line".into(), ToolMode::OutcomeUnknown))
            && events.contains(&("notes__count_lines".into(), ToolMode::Verification)),
        "{events:?}"
    );
}

#[tokio::test]
async fn sigkill_mid_mcp_read_runs_the_read_again() {
    if ninetrix_testkit::require(ninetrix_testkit::Need::Mcp).is_none() {
        return;
    }
    let s = setup();
    let (_server, url) = s.server();
    let spec = spec(
        &url,
        "notes__count_lines",
        r#"{ path: out.txt, text: hello, delay: 5 }"#,
    );
    s.crash_mid_call_and_finish(&spec, "count them", "count_lines")
        .await;
    let (content, is_error) = tool_result(&s).await;
    assert!(!is_error, "{content}");
    assert_eq!(content, "0 line(s) of out.txt equal 'hello'");
    assert_eq!(
        s.count("count_lines"),
        2,
        "a read whose runner died mid-call runs again"
    );
    assert_eq!(
        tool_events(&s).await,
        [("notes__count_lines".to_string(), ToolMode::Executed)],
        "only the second run answered (the first runner died before tracing it)"
    );
}

#[tokio::test]
async fn a_bridged_server_killed_mid_write_is_an_unknown_outcome_verified_after_its_restart() {
    if ninetrix_testkit::require(ninetrix_testkit::Need::Mcp).is_none() {
        return;
    }
    let s = setup();
    let (_bridge, url) = s.bridged_server();
    let spec = spec(
        &url,
        "notes__append_line",
        r#"{ path: out.txt, text: hello, delay: 5 }"#,
    );
    let seq = s.admin.send(s.thread, "write it", "k0").await;
    let _runner = Runner::start(&s.api.url, s.thread, &spec, &s.workspace);
    let call = s.wait_started("append_line", 1);
    // The server process (the bridge's child), not the runner.
    kill_pid(
        call["pid"]
            .as_u64()
            .expect("the journal has the server's pid"),
    );
    s.admin
        .wait_done(s.thread, seq, Duration::from_secs(60))
        .await;
    let (content, is_error) = tool_result(&s).await;
    assert!(is_error);
    assert!(
        content.contains("is unknown") && content.contains("0 line(s) of out.txt equal 'hello'"),
        "the server died before writing: unknown, and the verifier (on the restarted server) \
         says 0: {content}"
    );
    assert_eq!(s.count("append_line"), 1, "never repeated");
    assert_eq!(s.file_lines("out.txt"), 0);
    let thread = s.admin.client.thread(s.thread).await.unwrap().unwrap();
    assert_eq!(thread.boot_count, 1, "the runner itself never restarted");
}

/// An agent whose turn calls `tool` with `args` on a server defined by `server_yaml` (the
/// `notes` entry of `mcp_servers`), then answers "Done.".
fn spec_with(server_yaml: &str, entries: &str, tool: &str, args: &str) -> Value {
    let yaml = format!(
        r#"
mcp_servers:
  notes:
{server_yaml}
agents:
  scribe:
    runtime:
      provider: scripted
      image: any-image-with-the-servers-runtime
      script:
        - tool_calls: [{{ name: {tool}, args: {args} }}]
        - text: Done.
    tools:
{entries}
"#
    );
    spec_of(&yaml)
}

#[tokio::test]
async fn a_stdio_server_runs_inside_the_runner_and_its_trusted_annotations_set_the_classes() {
    if ninetrix_testkit::require(ninetrix_testkit::Need::Mcp).is_none() {
        return;
    }
    let s = setup();
    let repo = s.root.join("repo");
    std::fs::create_dir(&repo).unwrap();
    for args in [
        vec!["init", "-q"],
        vec![
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "the very first commit",
        ],
    ] {
        let ok = std::process::Command::new("git")
            .args(&args)
            .current_dir(&repo)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.com")
            .status()
            .unwrap()
            .success();
        assert!(ok, "git {args:?}");
    }
    let repo_path = repo.display().to_string();
    let spec = spec_with(
        &format!("    command: [mcp-server-git, --repository, \"{repo_path}\"]\n    trusted: true"),
        "      - mcp://notes",
        "notes__git_log",
        &format!("{{ repo_path: \"{repo_path}\" }}"),
    );
    let seq = s.admin.send(s.thread, "what happened?", "k0").await;
    let _runner = Runner::start(&s.api.url, s.thread, &spec, &s.workspace);
    s.admin
        .wait_done(s.thread, seq, Duration::from_secs(60))
        .await;
    let (content, is_error) = tool_result(&s).await;
    assert!(
        !is_error && content.contains("the very first commit"),
        "{content}"
    );
    let events = s.admin.client.events_after(s.thread, 0).await.unwrap();
    let tools = events
        .iter()
        .find_map(|e| match e.decode() {
            Decoded::Known(TraceEvent::McpTools(t)) => Some(t),
            _ => None,
        })
        .expect("the runner traced the server's tools");
    let class = |name: &str| {
        tools
            .tools
            .iter()
            .find(|t| t.name == name)
            .map(|t| (t.effect.as_str(), t.source.as_str()))
    };
    assert_eq!(class("notes__git_log"), Some(("read", "annotations")));
    assert_eq!(class("notes__git_commit"), Some(("write", "annotations")));
    assert_eq!(
        tool_events(&s).await,
        [("notes__git_log".to_string(), ToolMode::Executed)]
    );
}

#[tokio::test]
async fn a_server_down_at_boot_answers_with_an_error_naming_it_and_shows_in_health() {
    let s = setup();
    let port = free_port();
    let spec = spec_with(
        &format!("    url: http://127.0.0.1:{port}/mcp"),
        "      - mcp://notes/append_line",
        "notes__append_line",
        "{ path: out.txt, text: hello }",
    );
    let seq = s.admin.send(s.thread, "write it", "k0").await;
    let _runner = Runner::start(&s.api.url, s.thread, &spec, &s.workspace);
    s.admin
        .wait_done(s.thread, seq, Duration::from_secs(60))
        .await;
    let (content, is_error) = tool_result(&s).await;
    assert!(is_error);
    assert!(
        content.contains("MCP server `notes` is unreachable")
            && content.contains("the call was not made"),
        "{content}"
    );
    let events = s.admin.client.events_after(s.thread, 0).await.unwrap();
    assert!(
        events.iter().any(|e| matches!(
            e.decode(),
            Decoded::Known(TraceEvent::McpServerDown(d)) if d.server == "notes"
                && d.reason.contains("connection refused")
        )),
        "mcp_server_down is traced"
    );
    let health_file = s.workspace.with_file_name(format!("health-{}", s.thread));
    let report = ninetrix_runner::health::read(&health_file).unwrap();
    let (healthy, line) =
        ninetrix_runner::health::judge(&report, chrono::Utc::now().timestamp_millis());
    assert!(
        healthy && line.contains("MCP server `notes` unreachable: connection refused"),
        "{line}"
    );
}

/// The runner's health as `ninetrix ps` judges it: (healthy, its line).
fn health_of(s: &Setup) -> (bool, String) {
    let health_file = s.workspace.with_file_name(format!("health-{}", s.thread));
    match ninetrix_runner::health::read(&health_file) {
        Ok(report) => {
            ninetrix_runner::health::judge(&report, chrono::Utc::now().timestamp_millis())
        }
        Err(e) => (false, e.to_string()),
    }
}

/// The thread's events of `kind`.
async fn events_of(s: &Setup, kind: &str) -> Vec<TraceEvent> {
    let events = s.admin.client.events_after(s.thread, 0).await.unwrap();
    events
        .iter()
        .filter(|e| e.kind == kind)
        .filter_map(|e| match e.decode() {
            Decoded::Known(e) => Some(e),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_server_that_dies_after_boot_is_marked_down_by_the_failed_call_and_up_when_it_answers() {
    if ninetrix_testkit::require(ninetrix_testkit::Need::Mcp).is_none() {
        return;
    }
    let s = setup();
    let (mut server, url) = s.server();
    let spec = spec(&url, "notes__count_lines", "{ path: out.txt, text: x }");
    let _runner = Runner::start(&s.api.url, s.thread, &spec, &s.workspace);
    let deadline = Instant::now() + Duration::from_secs(30);
    while health_of(&s) != (true, "serving".to_string()) {
        assert!(
            Instant::now() < deadline,
            "the runner did not start: {:?}",
            health_of(&s)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let result_of = |seq: u64| {
        let s = &s;
        async move {
            let done = s
                .admin
                .wait_turn(s.thread, seq, Duration::from_secs(60))
                .await;
            assert!(done.ok, "{done:?}");
            let latest = s.admin.latest(s.thread).await;
            latest
                .history
                .iter()
                .rev()
                .flat_map(|m| &m.blocks)
                .find_map(|b| match b {
                    Block::ToolResult {
                        content, is_error, ..
                    } => Some((content.clone(), *is_error)),
                    _ => None,
                })
                .unwrap()
        }
    };
    let seq = s.admin.send(s.thread, "count", "k0").await;
    let (_, is_error) = result_of(seq).await;
    assert!(!is_error, "the server answers at first");

    // The server dies after boot: the refused call marks it down, traced and in the health.
    server.kill();
    let seq = s.admin.send(s.thread, "count again", "k1").await;
    let (content, is_error) = result_of(seq).await;
    assert!(is_error && content.contains("cannot connect"), "{content}");
    let down = events_of(&s, "mcp_server_down").await;
    assert!(
        matches!(&down[..], [TraceEvent::McpServerDown(d)] if d.server == "notes" && d.reason.contains("cannot connect")),
        "one mcp_server_down: {down:?}"
    );
    let (healthy, line) = health_of(&s);
    assert!(
        healthy && line.contains("MCP server `notes` unreachable: cannot connect"),
        "ps says the server is down (the agent still serves): {line}"
    );

    // It comes back: the next turn reaches it, says so and the health line goes.
    server.start_again();
    let mut n = 2;
    loop {
        // A turn that comes before the retry is due is answered "unreachable" and tried again.
        let seq = s.admin.send(s.thread, "and again", &format!("k{n}")).await;
        let (content, is_error) = result_of(seq).await;
        if !is_error {
            break;
        }
        assert!(n < 10 && content.contains("unreachable"), "{content}");
        n += 1;
    }
    let up = events_of(&s, "mcp_server_up").await;
    assert!(
        matches!(&up[..], [TraceEvent::McpServerUp(u)] if u.server == "notes" && u.down_ms > 0),
        "one mcp_server_up: {up:?}"
    );
    assert_eq!(health_of(&s), (true, "serving".to_string()));
}

/// `ninetrix mcp-bridge --listen 127.0.0.1:<port> -- <command>` as a child process; its URL.
fn bridge_binary(command: &[&str]) -> (Child, String) {
    let port = free_port();
    let child = quiet(
        std::process::Command::new(ninetrix_bin())
            .args(["mcp-bridge", "--listen", &format!("127.0.0.1:{port}"), "--"])
            .args(command),
    )
    .spawn()
    .expect("ninetrix mcp-bridge starts");
    wait_listening(port);
    (Child(child), format!("http://127.0.0.1:{port}/mcp"))
}

#[tokio::test]
async fn the_reference_servers_from_pypi_serve_a_turn_through_ninetrix_mcp_bridge() {
    if ninetrix_testkit::require(ninetrix_testkit::Need::Mcp).is_none() {
        return;
    }
    let s = setup();
    let repo = s.root.join("repo");
    std::fs::create_dir(&repo).unwrap();
    let ok = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(&repo)
        .status()
        .unwrap()
        .success();
    assert!(ok);
    std::fs::write(repo.join("README.md"), "hello\n").unwrap();
    let repo_path = repo.display().to_string();
    let (_time, time_url) = bridge_binary(&["mcp-server-time", "--local-timezone", "UTC"]);
    let (_git, git_url) = bridge_binary(&["mcp-server-git", "--repository", &repo_path]);
    let yaml = format!(
        r#"
mcp_servers:
  time: {{ url: "{time_url}", trusted: true }}
  git: {{ url: "{git_url}", trusted: true }}
agents:
  clerk:
    runtime:
      provider: scripted
      script:
        - tool_calls:
            - {{ name: time__get_current_time, args: {{ timezone: Asia/Tokyo }} }}
            - {{ name: git__git_status, args: {{ repo_path: "{repo_path}" }} }}
        - text: Done.
    tools: [mcp://time, "mcp://git"]
"#
    );
    let spec = spec_of(&yaml);
    let seq = s.admin.send(s.thread, "what time is it?", "k0").await;
    let _runner = Runner::start(&s.api.url, s.thread, &spec, &s.workspace);
    s.admin
        .wait_done(s.thread, seq, Duration::from_secs(60))
        .await;
    let latest = s.admin.latest(s.thread).await;
    let results: Vec<String> = latest
        .history
        .iter()
        .flat_map(|m| &m.blocks)
        .filter_map(|b| match b {
            Block::ToolResult {
                content, is_error, ..
            } => {
                assert!(!is_error, "{content}");
                Some(content.clone())
            }
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(results[0].contains("Asia/Tokyo"), "{}", results[0]);
    assert!(
        results[1].contains("README.md"),
        "untracked file listed: {}",
        results[1]
    );
    // Both read-only by their (trusted) annotations: traced as reads.
    let events = s.admin.client.events_after(s.thread, 0).await.unwrap();
    let reads = events
        .iter()
        .filter(|e| {
            matches!(e.decode(), Decoded::Known(TraceEvent::ToolCall(t))
                if t.effect == ninetrix_proto::effects::Effect::Read)
        })
        .count();
    let kinds: Vec<String> = events.iter().map(|e| format!("{:?}", e.decode())).collect();
    assert_eq!(reads, 2, "{kinds:#?}");
}

#[tokio::test]
async fn secret_values_are_scrubbed_from_mcp_results_and_events() {
    if ninetrix_testkit::require(ninetrix_testkit::Need::Mcp).is_none() {
        return;
    }
    let s = setup();
    let (_server, url) = s.server();
    const VALUE: &str = "tok-5150-never-shown";
    let yaml = format!(
        r#"
mcp_servers:
  notes: {{ url: "{url}" }}
agents:
  scribe:
    runtime:
      provider: scripted
      script:
        - tool_calls: [{{ name: notes__count_lines, args: {{ path: out.txt, text: "{VALUE}" }} }}]
        - text: Done.
    tools: [mcp://notes/count_lines]
    secrets: [NOTES_TOKEN]
"#
    );
    let spec = spec_of(&yaml);
    let seq = s.admin.send(s.thread, "count", "k0").await;
    let _runner = Runner::start_with_env(
        &s.api.url,
        s.thread,
        &spec,
        &s.workspace,
        &[("NOTES_TOKEN", VALUE)],
    );
    s.admin
        .wait_done(s.thread, seq, Duration::from_secs(60))
        .await;
    // The server echoed the value; the model, the checkpoint and the trace see `***`.
    let (content, _) = tool_result(&s).await;
    assert_eq!(content, "0 line(s) of out.txt equal '***'");
    let events = s.admin.client.events_after(s.thread, 0).await.unwrap();
    let text = serde_json::to_string(&events).unwrap();
    assert!(
        !text.contains(VALUE),
        "a secret value reached an event: {text}"
    );
}

#[test]
fn the_bridge_refuses_to_start_without_a_secret_it_was_told_to_pass() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(ninetrix_bin())
        .args([
            "mcp-bridge",
            "--listen",
            "127.0.0.1:0",
            "--secret",
            "NOPE_TOKEN",
        ])
        .arg("--secrets-dir")
        .arg(dir.path())
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("secret NOPE_TOKEN cannot be read from"),
        "{stderr}"
    );
}
