//! Replay and eval (issue 42), as processes against a real `ninetrix api`, a real MCP server
//! (the Python SDK's, from PyPI) and the `ninetrix replay` command: a scripted clerk's 30-turn
//! session is recorded — MCP reads and writes (the server journals every call it gets), file
//! reads, an `ask_human` question a person answers, a gated `file_write` a person approves, and a
//! handoff to a helper agent — and then replayed.
//!
//! - Against the same agentfile: no turn diverges, no call runs (the server's journal and the
//!   recorded thread are unchanged), no person is asked, no task is handed over.
//! - Against a candidate whose turn 14 writes other text and whose turn 15 calls a write the
//!   recording does not have: exactly those turns diverge, the report says where first, nothing
//!   is executed (the journal proves it), and `--max-divergent-turns 0` fails the command.
//! - With `--live-reads`, a read the recording does not have runs for real, and still no write.
//! - Killed in the middle of a turn and after a turn (`replay_mid_turn`, `replay_after_turn`),
//!   the same command resumes the same replay and finishes it once; with the API killed before
//!   and after the commit that makes a replay (`replay_before_commit`, `replay_after_commit`),
//!   the same command makes it or finds it, and one replay exists.

mod support;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use ninetrix_client::ApprovalQuery;
use ninetrix_e2e::ninetrix_bin;
use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{ApprovalKind, ApprovalStatus, DecisionRequest, Verdict};
use ninetrix_proto::replay::{CallMatch, ReplayReport};
use serde_json::{Value, json};
use support::mcp::McpTestServer;
use support::{Runner, Setup, setup};

const POOL: &str = "desk";
const TURNS: usize = 30;
/// The turn that asks a person a question.
const ASK_TURN: usize = 10;
/// The turn whose `file_write` a person approves.
const GATED_TURN: usize = 20;
/// The turn that hands a task to the helper.
const HANDOFF_TURN: usize = 25;
const TURN: Duration = Duration::from_secs(60);

/// Which clerk the agentfile holds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Clerk {
    /// The one recorded.
    Recorded,
    /// Turn 14 appends other text; turn 15 appends a line instead of reading a file.
    Candidate,
    /// Turn 1 counts other text (a read the recording does not have).
    OtherRead,
}

/// The tool calls of turn `i` (from 1) of `clerk`, one list per model round: a turn whose number
/// is a multiple of 3 reads a file, then counts lines (two rounds, so a replay of it commits an
/// answer from the recording before the turn ends: where `replay_mid_turn` kills).
fn rounds(clerk: Clerk, i: usize) -> Vec<Value> {
    let count =
        json!([{"name": "notes__count_lines", "args": {"path": "log.txt", "text": "entry 2"}}]);
    if i.is_multiple_of(3) && ![ASK_TURN, GATED_TURN, HANDOFF_TURN, 15].contains(&i) {
        return vec![
            json!([{"name": "file_read", "args": {"path": "notes.md"}}]),
            count,
        ];
    }
    vec![one_round(clerk, i)]
}

/// The calls of a one-round turn `i` of `clerk`.
fn one_round(clerk: Clerk, i: usize) -> Value {
    let append = |text: String| json!([{"name": "notes__append_line", "args": {"path": "log.txt", "text": text}}]);
    match i {
        ASK_TURN => json!([{"name": "ask_human", "args": {"question": "Ship it?"}}]),
        GATED_TURN => {
            json!([{"name": "file_write", "args": {"path": "shipped.txt", "content": "shipped\n"}}])
        }
        HANDOFF_TURN => json!([{"name": "ask_helper", "args": {"task": "summarize the log"}}]),
        14 if clerk == Clerk::Candidate => append("entry 14 (changed)".into()),
        15 if clerk == Clerk::Candidate => append("an extra line".into()),
        1 if clerk == Clerk::OtherRead => {
            json!([{"name": "notes__count_lines", "args": {"path": "log.txt", "text": "something else"}}])
        }
        _ if i % 3 == 1 => {
            json!([{"name": "notes__count_lines", "args": {"path": "log.txt", "text": "entry 2"}}])
        }
        _ if i % 3 == 2 => append(format!("entry {i}")),
        _ => json!([{"name": "file_read", "args": {"path": "notes.md"}}]),
    }
}

/// The pool's agentfile: the clerk (`clerk`'s script) and its helper, on the MCP server at `url`.
fn agentfile(url: &str, clerk: Clerk) -> String {
    let mut script = String::new();
    for i in 1..=TURNS {
        for calls in rounds(clerk, i) {
            script.push_str(&format!(
                "        - {{ text: \"Working on {i}.\", tool_calls: {calls} }}\n"
            ));
        }
        script.push_str(&format!("        - {{ text: \"Done with {i}.\" }}\n"));
    }
    format!(
        r#"name: {POOL}
mcp_servers:
  notes:
    url: {url}
    trusted: true
agents:
  clerk:
    runtime:
      provider: scripted
      script:
{script}    tools: [mcp://notes/append_line, mcp://notes/count_lines, file_read, file_write, ask_human]
    collaborators: [helper]
    governance:
      human_approval:
        actions: [file_write]
  helper:
    runtime:
      provider: scripted
      script:
        - {{ text: "The log has entries." }}
"#
    )
}

/// The recorded session, and what the test started to record it.
struct Recorded {
    s: Setup,
    server: McpTestServer,
    _runners: Vec<Runner>,
    file: PathBuf,
    thread: ThreadId,
}

/// Starts the API, the MCP server and a replica of each agent, and records the clerk's 30 turns
/// in session `support-1`: a person answers turn 10's question and approves turn 20's write.
async fn record() -> Recorded {
    let s = setup();
    let root = s.dir.path().join("mcp-root");
    std::fs::create_dir_all(&root).unwrap();
    let server = McpTestServer::start(&root, &s.dir.path().join("journal"));
    let text = agentfile(&server.url(), Clerk::Recorded);
    let file = s.dir.path().join("agentfile.yaml");
    std::fs::write(&file, &text).unwrap();
    let parsed = ninetrix_agentfile::parse("agentfile.yaml", &text).unwrap();
    let mut runners = Vec::new();
    for agent in &parsed.agentfile.agents {
        s.admin
            .client
            .set_replicas(POOL, &agent.name, 1, &agent.collaborators, None)
            .await
            .unwrap();
        let workspace = s.dir.path().join(&agent.name);
        std::fs::create_dir_all(&workspace).unwrap();
        runners.push(Runner::start_with_env(
            &s.api.url,
            ThreadId::new_v7(),
            &serde_json::to_value(agent).unwrap(),
            &workspace,
            &[
                ("AGENTFILE_POOL", POOL),
                ("AGENTFILE_REPLICA", "1"),
                ("AGENTFILE_AGENT_TOKEN", "insecure-dev"),
            ],
        ));
    }
    let thread = s
        .admin
        .client
        .open_session(POOL, "clerk", "support-1")
        .await
        .unwrap()
        .thread_id;
    for i in 1..=TURNS {
        let seq = s
            .admin
            .send(thread, &format!("request {i}"), &format!("m{i}"))
            .await;
        if i == ASK_TURN || i == GATED_TURN {
            let pending = pending_request(&s, thread).await;
            let decision = if i == ASK_TURN {
                assert_eq!(pending.kind, ApprovalKind::Question);
                DecisionRequest {
                    decision: Verdict::Answer,
                    reason: None,
                    answer: Some("yes, ship it".into()),
                    by: Some("dana".into()),
                }
            } else {
                assert_eq!(pending.kind, ApprovalKind::Approval);
                DecisionRequest {
                    decision: Verdict::Approve,
                    reason: None,
                    answer: None,
                    by: Some("dana".into()),
                }
            };
            s.admin
                .client
                .decide_approval(pending.id, &decision)
                .await
                .unwrap();
        }
        let done = s.admin.wait_turn(thread, seq, TURN).await;
        assert!(done.ok, "turn {i} of the recording failed: {done:?}");
    }
    Recorded {
        s,
        server,
        _runners: runners,
        file,
        thread,
    }
}

/// The pending request of `thread`, once there is one.
async fn pending_request(s: &Setup, thread: ThreadId) -> ninetrix_proto::api::Approval {
    let deadline = Instant::now() + TURN;
    loop {
        let query = ApprovalQuery {
            thread: Some(thread),
            status: Some(ApprovalStatus::Pending),
            ..ApprovalQuery::default()
        };
        if let Some(a) = s.admin.client.list_approvals(&query).await.unwrap().pop() {
            return a;
        }
        assert!(Instant::now() < deadline, "no request of {thread} came");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What the test watches to prove that nothing ran and nothing was written to the recording:
/// the MCP server's journal, the recorded thread's version, events and inbox, every request to
/// a person and every handoff.
#[derive(Debug, PartialEq)]
struct Untouched {
    journal: usize,
    version: u64,
    events: u64,
    inbox: u64,
    approvals: usize,
    handoffs: usize,
}

async fn untouched(r: &Recorded) -> Untouched {
    let summary = r.s.admin.client.thread(r.thread).await.unwrap().unwrap();
    let all = ApprovalQuery {
        status: None,
        limit: Some(500),
        ..ApprovalQuery::default()
    };
    Untouched {
        journal: r.server.journal().len(),
        version: summary.version,
        events: summary.event_seq,
        inbox: summary.inbox_seq,
        approvals: r.s.admin.client.list_approvals(&all).await.unwrap().len(),
        handoffs: r
            .s
            .admin
            .client
            .list_handoffs(None, Some(r.thread), None)
            .await
            .unwrap()
            .len(),
    }
}

/// `ninetrix replay --agent clerk --thread <recorded> -f <file> --json` with `args` and `env`,
/// in `home` (its scratch workspaces live there).
fn replay(r: &Recorded, file: &Path, home: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let thread = r.thread.to_string();
    let mut cmd = std::process::Command::new(ninetrix_bin());
    cmd.args(["replay", "--agent", "clerk", "--thread", &thread, "-f"])
        .arg(file)
        .args(["--json"])
        .args(args)
        .env("AGENTFILE_API_URL", &r.s.api.url)
        .env("AGENTFILE_ADMIN_TOKEN", "insecure-dev")
        .env("AGENTFILE_HOME", home)
        .env_remove("NINETRIX_RUNNER_CRASH_AT");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

/// The report a successful `replay --json` printed.
fn report(out: &Output) -> ReplayReport {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "replay printed no report ({e}); status {:?}\nstdout: {}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// A candidate agentfile beside the recorded one.
fn candidate(r: &Recorded, clerk: Clerk, name: &str) -> PathBuf {
    let path = r.s.dir.path().join(name);
    std::fs::write(&path, agentfile(&r.server.url(), clerk)).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replays_answer_from_the_recording_and_never_run_a_write() {
    if ninetrix_testkit::require(ninetrix_testkit::Need::Mcp).is_none() {
        return;
    }
    let r = record().await;
    let before = untouched(&r).await;
    assert_eq!(before.approvals, 2, "the recording asked a person twice");
    assert_eq!(
        before.handoffs,
        1,
        "the recording handed one task over: {:#?}",
        r.s.admin
            .client
            .recorded_turn(r.thread, HANDOFF_TURN as u64)
            .await
            .unwrap()
            .calls
    );
    let home = r.s.dir.path().join("home");

    // The same agentfile: every turn as recorded, nothing run.
    let out = replay(&r, &r.file, &home, &[], &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let same = report(&out);
    assert_eq!(same.turns.len(), TURNS);
    assert_eq!(same.divergent_turns, 0, "{:#?}", same.first_divergence);
    assert_eq!((same.calls_run, same.calls_not_run), (0, 0));
    for t in &same.turns {
        assert!(t.answer_identical && t.calls.iter().all(|c| c.verdict == CallMatch::Same));
        assert_eq!(
            t.calls.len(),
            rounds(Clerk::Recorded, t.turn as usize).len(),
            "turn {}",
            t.turn
        );
    }
    assert_eq!(
        untouched(&r).await,
        before,
        "the replay ran nothing and wrote nothing"
    );
    let replayed = r.s.admin.client.thread(same.replay).await.unwrap().unwrap();
    assert_eq!(
        replayed.replay_of.as_ref().map(|o| o.source),
        Some(r.thread)
    );
    assert_eq!(
        replayed.labels.session, None,
        "a replay is in no session's namespace"
    );

    // A candidate that writes other text at turn 14 and a line at turn 15: reported, not run.
    let file = candidate(&r, Clerk::Candidate, "candidate.yaml");
    let out = replay(&r, &file, &home, &["--max-divergent-turns", "0"], &[]);
    assert_eq!(out.status.code(), Some(1), "past the threshold: exit 1");
    let changed = report(&out);
    assert_ne!(
        changed.replay, same.replay,
        "another candidate, another replay"
    );
    assert_eq!(changed.divergent_turns, 2);
    let first = changed.first_divergence.as_ref().unwrap();
    assert_eq!(first.turn, 14);
    assert_eq!(changed.turns[13].calls[0].verdict, CallMatch::Different);
    assert_eq!(
        changed.turns[14]
            .calls
            .iter()
            .map(|c| c.verdict)
            .collect::<Vec<_>>(),
        vec![CallMatch::New, CallMatch::Missing]
    );
    assert_eq!(changed.calls_not_run, 2);
    assert_eq!(changed.calls_run, 0);
    assert_eq!(
        untouched(&r).await,
        before,
        "the candidate's writes never reached the server"
    );

    // A read the recording does not have runs only with --live-reads, and only that read.
    let file = candidate(&r, Clerk::OtherRead, "other-read.yaml");
    let out = replay(&r, &file, &home, &["--live-reads"], &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let live = report(&out);
    assert_eq!((live.calls_run, live.calls_not_run), (1, 0));
    let journal = r.server.journal();
    assert_eq!(
        journal.len(),
        before.journal + 1,
        "one live read reached the server"
    );
    assert_eq!(journal.last().unwrap()["tool"], "count_lines");

    // An eval suite: one case from the file (turns 12..16 against the candidate, with a check
    // its turn 15 fails) and one thread marked into the suite as the console marks it (turns
    // 1..3, which pass); the run is stored as the suite's last.
    let suite = "desk-regressions";
    r.s.admin
        .client
        .add_eval_member(
            suite,
            &ninetrix_proto::api::EvalMemberRequest {
                thread: r.thread,
                from_turn: Some(1),
                to_turn: Some(3),
            },
        )
        .await
        .unwrap();
    let suite_file = r.s.dir.path().join("suite.yaml");
    std::fs::write(
        &suite_file,
        format!(
            "suite: {suite}\nagentfile: candidate.yaml\nagent: clerk\npool: {POOL}\n\
             cases:\n  - thread: {}\n    turns: 12..16\n    expect:\n      - turn: 14\n        \
             calls: [notes__append_line]\n        answer_contains: Done with 14\n      - turn: 15\n        \
             calls: [file_read]\n",
            r.thread
        ),
    )
    .unwrap();
    let out = std::process::Command::new(ninetrix_bin())
        .args(["eval", "--json"])
        .arg(&suite_file)
        .env("AGENTFILE_API_URL", &r.s.api.url)
        .env("AGENTFILE_ADMIN_TOKEN", "insecure-dev")
        .env("AGENTFILE_HOME", &home)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "a case failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run: ninetrix_proto::api::EvalRunRequest = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(run.cases.len(), 2, "{run:#?}");
    let failed: Vec<&ninetrix_proto::api::EvalCaseResult> =
        run.cases.iter().filter(|c| !c.passed).collect();
    assert_eq!(failed.len(), 1, "{run:#?}");
    assert_eq!(failed[0].divergent_turns, 2);
    assert_eq!(
        failed[0].failed_checks.len(),
        1,
        "{:?}",
        failed[0].failed_checks
    );
    assert!(
        failed[0].failed_checks[0].contains("turn 15"),
        "{:?}",
        failed[0].failed_checks
    );
    let stored = r.s.admin.client.eval_suite(suite).await.unwrap();
    let last = stored.last_run.expect("the run is stored");
    assert_eq!((last.cases.len(), last.passed), (2, false));
    assert_eq!(
        untouched(&r).await.journal,
        before.journal + 1,
        "the eval ran nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_killed_mid_turn_or_after_a_turn_resumes_with_the_same_command() {
    if ninetrix_testkit::require(ninetrix_testkit::Need::Mcp).is_none() {
        return;
    }
    let mut r = record().await;
    let before = untouched(&r).await;
    // Each kill point on its own range, so each is its own replay (its key is the source, the
    // range and the candidate): the same command again resumes it.
    for (point, range, replayed) in [
        ("replay_mid_turn", "1..30", TURNS),
        ("replay_after_turn", "2..30", TURNS - 1),
    ] {
        let home = r.s.dir.path().join(format!("home-{point}"));
        let args = ["--turns", range];
        let crash = [("NINETRIX_RUNNER_CRASH_AT", point)];
        let out = replay(&r, &r.file, &home, &args, &crash);
        assert!(
            !out.status.success(),
            "{point}: the replay died at its kill point: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let made = replays_of(&r).await;
        // The kill point fires once per replay workspace: the same command goes on.
        let out = replay(&r, &r.file, &home, &args, &crash);
        assert!(
            out.status.success(),
            "{point}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let resumed = report(&out);
        assert_eq!(
            replays_of(&r).await,
            made,
            "{point}: no second replay was made"
        );
        assert_eq!(
            Some(&resumed.replay),
            made.last(),
            "{point}: the same replay went on"
        );
        assert_eq!(resumed.turns.len(), replayed, "{point}");
        assert_eq!(
            resumed.divergent_turns,
            0,
            "{point}: {:#?}\nreplay history: {:#?}",
            resumed.turns[0],
            r.s.admin
                .latest(resumed.replay)
                .await
                .history
                .iter()
                .take(8)
                .map(|m| (m.role, m.text_content()))
                .collect::<Vec<_>>()
        );
        // The replay's own rows: its runner's turns, after the turn it starts from (whose row
        // it holds for the snapshot) — 1..=30 both ways, each once.
        let own: Vec<u64> =
            r.s.admin
                .client
                .turns(resumed.replay)
                .await
                .unwrap()
                .turns
                .iter()
                .filter(|t| t.live && t.thread_id == resumed.replay)
                .map(|t| t.turn_seq)
                .collect();
        assert_eq!(own, (1..=TURNS as u64).collect::<Vec<_>>(), "{point}");
    }
    // The API killed before and after the commit that makes a replay: the same command then
    // makes it (before: nothing was stored) or finds it (after), and only one exists.
    for (point, range) in [
        ("replay_before_commit", "3..30"),
        ("replay_after_commit", "4..30"),
    ] {
        let home = r.s.dir.path().join(format!("home-{point}"));
        let args = ["--turns", range];
        let made = replays_of(&r).await.len();
        restart_api(&mut r, &[("NINETRIX_API_CRASH_AT", point)]);
        let out = replay(&r, &r.file, &home, &args, &[]);
        assert!(
            !out.status.success(),
            "{point}: the API died making the replay"
        );
        let deadline = Instant::now() + TURN;
        let died = loop {
            if let Some(status) = r.s.api.child.try_wait().unwrap() {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "{point}: the API did not stop: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert!(
            !died.success(),
            "{point}: the API aborted at its kill point"
        );
        restart_api(&mut r, &[]);
        let after_kill = replays_of(&r).await.len();
        let expected = made + usize::from(point == "replay_after_commit");
        assert_eq!(
            after_kill, expected,
            "{point}: stored before the kill or not"
        );
        let out = replay(&r, &r.file, &home, &args, &[]);
        assert!(
            out.status.success(),
            "{point}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(report(&out).divergent_turns, 0, "{point}");
        assert_eq!(
            replays_of(&r).await.len(),
            made + 1,
            "{point}: one replay, made once"
        );
    }
    assert_eq!(untouched(&r).await, before);
}

/// Stops the API (SIGKILL) and starts it again on the same address and database, with `env`.
fn restart_api(r: &mut Recorded, env: &[(&str, &str)]) {
    let listen = r.s.api.url.trim_start_matches("http://").to_string();
    let db = format!("sqlite://{}", r.s.dir.path().join("api.db").display());
    let _ = r.s.api.child.kill();
    let _ = r.s.api.child.wait();
    r.s.api = ninetrix_e2e::ApiProcess::start_with_env(
        &listen,
        &["--database", &db, "--insecure-dev"],
        env,
    );
}

/// The replays made of the recorded thread, oldest first.
async fn replays_of(r: &Recorded) -> Vec<ThreadId> {
    let mut out: Vec<(chrono::DateTime<chrono::Utc>, ThreadId)> =
        r.s.admin
            .client
            .list_threads(&Default::default())
            .await
            .unwrap()
            .into_iter()
            .filter(|t| t.replay_of.as_ref().is_some_and(|o| o.source == r.thread))
            .map(|t| (t.created_at, t.thread_id))
            .collect();
    out.sort();
    out.into_iter().map(|(_, t)| t).collect()
}
