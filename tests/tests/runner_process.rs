//! The runner as a process against a real `ninetrix api` (child process, SQLite): a scripted turn
//! that appends a line to a file (a `write` tool) survives SIGKILL just before and just after each
//! of its three durable writes — and at random times, many times over — with each inbox message applied exactly once, the side effect never
//! doubled, a valid transcript, and the turn completed — with exactly one `turn_completed` event,
//! which rides on the final commit. Plus SIGTERM, fencing, bad config, batch.

mod support;

use std::time::Duration;

use ninetrix_e2e::{Lcg, env_or, ninetrix_bin, seed_from_env};
use ninetrix_proto::api::{ThreadState, ThreadStatus, ToolCallStatus};
use ninetrix_proto::events::{Decoded, TraceEvent};
use ninetrix_proto::{Role, ThreadId};
use support::{Gate, Hold, Runner, Setup, appender_spec, lines, setup};

/// Checks what must hold after any crash: a valid transcript, each message applied once.
async fn check_invariants(s: &Setup, messages: usize) -> ThreadState {
    let latest = s.admin.latest(s.thread).await;
    let h = &latest.history;
    if let Err(v) = ninetrix_runner::history::validate(h) {
        panic!("invalid transcript after the crash: {v}\n{h:#?}");
    }
    for i in 0..messages {
        let content = format!("message {i}");
        let applied = h
            .iter()
            .filter(|m| m.role == Role::User && m.text_content() == content)
            .count();
        assert_eq!(applied, 1, "`{content}` applied {applied} times");
    }
    assert_eq!(latest.state.status, ThreadStatus::Idle);
    latest
}

/// The inbox seq of every `turn_completed` event of the thread, in order. It is stored in the
/// transaction of the turn's final commit, so a completed turn has exactly one, whatever the kills.
async fn completed_turns(s: &Setup) -> Vec<u64> {
    let events = s.admin.client.events_after(s.thread, 0).await.unwrap();
    events
        .iter()
        .filter_map(|e| match e.decode() {
            Decoded::Known(TraceEvent::TurnCompleted(t)) => Some(t.seq),
            _ => None,
        })
        .collect()
}

/// Kills the runner while the gate holds the chosen request, restarts it, and checks the turn.
async fn crash_at(hold: Hold, expected_lines: usize) {
    let s = setup();
    let gate = Gate::start(&s.api.url).await;
    let seq = s.admin.send(s.thread, "message 0", "k0").await;
    let held = gate.arm(hold.clone());
    let mut runner = Runner::start(&gate.url, s.thread, &appender_spec(), &s.workspace);
    tokio::time::timeout(Duration::from_secs(30), held)
        .await
        .unwrap_or_else(|_| panic!("the runner never reached {hold:?}"));
    runner.kill();
    let _restarted = Runner::start(&s.api.url, s.thread, &appender_spec(), &s.workspace);
    s.admin
        .wait_done(s.thread, seq, Duration::from_secs(30))
        .await;
    let latest = check_invariants(&s, 1).await;
    assert_eq!(
        completed_turns(&s).await,
        [seq],
        "one turn_completed after a crash at {hold:?}"
    );
    assert_eq!(
        lines(&s.workspace),
        expected_lines,
        "the side effect after a crash at {hold:?}"
    );
    // A turn already done before the kill is done before the restarted runner claims.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let thread = s.admin.client.thread(s.thread).await.unwrap().unwrap();
        if thread.boot_count >= 2 {
            assert_eq!(
                thread.boot_count, 2,
                "one claim before the crash, one after"
            );
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the restarted runner never claimed the thread"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let last = latest.history.last().unwrap();
    assert_eq!(
        (last.role, last.text_content().as_str()),
        (Role::Assistant, "Done."),
        "the turn ended with the script's answer after a crash at {hold:?}"
    );
}

/// Holds the commit whose body has every one of `body`: `stored` lets the API store it first
/// (the kill lands just after the write), else it never reaches the API (just before).
fn commit_hold(body: Vec<&'static str>, stored: bool) -> Hold {
    Hold {
        method: "POST",
        path_contains: "/commit",
        body_contains: body,
        forward_first: stored,
        lose_answer: false,
    }
}

// The scripted turn makes three durable writes (docs/durability.md, "Where a turn writes"): the
// first response with the write's intent (and the input message), the write's outcome with its
// result, and the final answer with the thread back to idle. One kill just before and one just
// after each.

/// The first response (with the input) never stored: the message is still in the inbox after the
/// stored cursor and is taken again; the write runs once, on the second boot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_before_the_first_response_is_stored() {
    crash_at(commit_hold(vec!["\"type\":\"tool_call\""], false), 1).await;
}

/// The response and the write's intent are stored, the write never ran: on restart its outcome
/// is unknown, so it is not run again (and was never run): no line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_after_the_first_response_is_stored() {
    crash_at(
        commit_hold(vec!["\"type\":\"tool_call\"", "\"intents\":[{"], true),
        0,
    )
    .await;
}

/// The line was appended, its outcome never stored: on restart the outcome is unknown and the
/// write is not repeated: exactly one line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_after_the_write_before_its_outcome_is_stored() {
    crash_at(commit_hold(vec!["\"outcomes\":[{"], false), 1).await;
}

/// The outcome is stored: the re-asked call is replayed from the ledger, not run again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_after_the_writes_outcome_is_stored() {
    crash_at(commit_hold(vec!["\"outcomes\":[{"], true), 1).await;
}

/// The final answer never stored: the turn resumes from the stored result and answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_before_the_final_answer_is_stored() {
    crash_at(commit_hold(vec!["\"status\":\"idle\""], false), 1).await;
}

/// The final answer stored, its events perhaps not: nothing is done twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_after_the_final_answer_is_stored() {
    crash_at(commit_hold(vec!["\"status\":\"idle\""], true), 1).await;
}

/// The API stores the write's outcome and its answer is lost (as when the API dies right after
/// its commit): the runner's retry meets `version_conflict`, recognises its own stored write,
/// and goes on — no restart, nothing written twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_whose_answer_is_lost_is_recognised_not_repeated() {
    let s = setup();
    let gate = Gate::start(&s.api.url).await;
    let seq = s.admin.send(s.thread, "message 0", "k0").await;
    let lost = gate.arm(Hold {
        lose_answer: true,
        ..commit_hold(vec!["\"outcomes\":[{"], true)
    });
    let mut runner = Runner::start(&gate.url, s.thread, &appender_spec(), &s.workspace);
    tokio::time::timeout(Duration::from_secs(30), lost)
        .await
        .expect("the runner sent the write's outcome");
    s.admin
        .wait_done(s.thread, seq, Duration::from_secs(30))
        .await;
    let latest = check_invariants(&s, 1).await;
    assert_eq!(lines(&s.workspace), 1);
    assert_eq!(
        latest.history.len(),
        4,
        "input, call, result, answer: the outcome's commit was not applied twice"
    );
    assert!(
        runner.wait_exit(Duration::from_millis(200)).is_none(),
        "the runner goes on serving"
    );
    let thread = s.admin.client.thread(s.thread).await.unwrap().unwrap();
    assert_eq!(thread.boot_count, 1, "no restart");
    assert_eq!(latest.version, 3, "three commits, each once");
    runner.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_at_random_times_many_times_over() {
    let kills: usize = env_or("NINETRIX_RUNNER_KILLS", 25);
    let seed = seed_from_env(&format!("runner kills ({kills})"));
    let mut rng = Lcg(seed);
    let s = setup();
    let mut last_seq = 0;
    for i in 0..kills {
        last_seq = s
            .admin
            .send(s.thread, &format!("message {i}"), &format!("k{i}"))
            .await;
        // The per-turn restart budget off (as in the chaos suite): this test's invariant is
        // exactly-once through any number of kills of one turn; the budget has its own test.
        let mut runner = Runner::start_with_env(
            &s.api.url,
            s.thread,
            &appender_spec(),
            &s.workspace,
            &[("AGENTFILE_TURN_RESTARTS", "1000000")],
        );
        tokio::time::sleep(Duration::from_millis(rng.next(120))).await;
        runner.kill();
    }
    let _runner = Runner::start_with_env(
        &s.api.url,
        s.thread,
        &appender_spec(),
        &s.workspace,
        &[("AGENTFILE_TURN_RESTARTS", "1000000")],
    );
    s.admin
        .wait_done(s.thread, last_seq, Duration::from_secs(60))
        .await;
    let latest = check_invariants(&s, kills).await;
    assert_eq!(
        completed_turns(&s).await,
        (1..=kills as u64).collect::<Vec<_>>(),
        "seed {seed}: each turn has exactly one turn_completed, in order"
    );
    // Every message answered: each user message's turn ends with a final assistant answer.
    let h = &latest.history;
    let inputs: Vec<usize> = h
        .iter()
        .enumerate()
        .filter(|(_, m)| m.role == Role::User)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(inputs.len(), kills, "seed {seed}");
    for (n, start) in inputs.iter().enumerate() {
        let end = inputs.get(n + 1).copied().unwrap_or(h.len());
        let last = &h[end - 1];
        assert!(
            last.role == Role::Assistant && last.tool_call_ids().next().is_none(),
            "seed {seed}: turn {n} did not complete: {:?}",
            &h[*start..end]
        );
    }
    // The side effect: each ledger entry executed at most once. Lines come only from calls the
    // ledger shows completed, or whose outcome was reported unknown (never re-run).
    let ledger = s.admin.client.tool_calls(s.thread).await.unwrap();
    let ok = ledger
        .iter()
        .filter(|r| r.status == ToolCallStatus::Completed)
        .count();
    let unknown = ledger
        .iter()
        .filter(|r| {
            r.status == ToolCallStatus::Failed
                && r.result.as_deref().unwrap_or("").contains("unknown")
        })
        .count();
    let written = lines(&s.workspace);
    assert!(
        ok <= written && written <= ok + unknown,
        "seed {seed}: {written} lines, {ok} completed, {unknown} unknown"
    );
    assert_eq!(ok + unknown, ledger.len(), "every intent has an outcome");
    assert_eq!(
        ledger.len(),
        kills,
        "one ledger entry per turn: re-runs reused their key"
    );
    assert_eq!(latest.state.inbox_cursor, kills as u64);
    let versions = s.admin.client.versions(s.thread).await.unwrap();
    let repairs = versions.iter().filter(|v| v.truncate_to.is_some()).count();
    let boots = s
        .admin
        .client
        .thread(s.thread)
        .await
        .unwrap()
        .unwrap()
        .boot_count;
    eprintln!(
        "seed {seed}: {kills} kills, {boots} boots, {repairs} repairs, {ok} writes completed, {unknown} outcomes unknown, {written} lines"
    );
}

/// A turn that takes its runner down every time (a poison message) is resumed through three
/// restarts, as Docker's `on-failure:3` would restart it; at the fourth the runner gives the turn
/// up with a reply saying so and stays up, serving: no crash loop, even where pods restart
/// forever (Kubernetes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_through_more_than_three_restarts_is_given_up_and_the_runner_stays_up() {
    let s = setup();
    let mut spec = appender_spec();
    spec["tools"] =
        serde_json::json!([{"name": "sleep", "effect": "read", "effect_pinned": false}]);
    spec["runtime"]["script"] = serde_json::json!([
        {"text": "Waiting.", "tool_calls": [{"name": "sleep", "args": {"seconds": 20}}]},
        {"text": "Done.", "tool_calls": []}
    ]);
    s.admin.send(s.thread, "message 0", "k0").await;
    let deadline = |secs| std::time::Instant::now() + Duration::from_secs(secs);
    for boot in 1..=4u64 {
        let mut runner = Runner::start(&s.api.url, s.thread, &spec, &s.workspace);
        // Killed once it has claimed (a boot) and the turn is stored as in progress.
        let until = deadline(30);
        loop {
            let thread = s.admin.client.thread(s.thread).await.unwrap().unwrap();
            let latest = s.admin.client.latest(s.thread).await.unwrap();
            let in_turn =
                latest.is_some_and(|l| l.state.status == ThreadStatus::InTurn && l.version > 0);
            if thread.boot_count == boot && in_turn {
                break;
            }
            assert!(
                std::time::Instant::now() < until,
                "boot {boot} never got going"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        runner.kill();
    }
    let mut fifth = Runner::start(&s.api.url, s.thread, &spec, &s.workspace);
    let until = deadline(30);
    let latest = loop {
        let latest = s.admin.latest(s.thread).await;
        if latest.state.status == ThreadStatus::Idle {
            break latest;
        }
        assert!(
            std::time::Instant::now() < until,
            "the turn was not given up"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // The reply saying so goes to the caller (the turn's completion) and the trace, not into the
    // history the model reads as its own words.
    let events = s.admin.client.events_after(s.thread, 0).await.unwrap();
    let given_up = events
        .iter()
        .find_map(|e| match e.decode() {
            Decoded::Known(TraceEvent::TurnCompleted(t)) => Some(t),
            _ => None,
        })
        .expect("the turn completed");
    assert!(!given_up.ok);
    assert!(
        given_up.reply.contains("restarted 4 times"),
        "{}",
        given_up.reply
    );
    assert!(
        latest
            .history
            .iter()
            .all(|m| !m.text_content().contains("restarted 4 times")),
        "the failure is not in the model's history"
    );
    assert!(ninetrix_runner::history::validate(&latest.history).is_ok());
    assert_eq!(completed_turns(&s).await, vec![1], "the turn ended once");
    assert!(
        fifth.child.try_wait().unwrap().is_none(),
        "the runner stays up, serving the next message"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_exits_zero_promptly() {
    let s = setup();
    let mut runner = Runner::start(&s.api.url, s.thread, &appender_spec(), &s.workspace);
    let seq = s.admin.send(s.thread, "message 0", "k0").await;
    s.admin
        .wait_turn(s.thread, seq, Duration::from_secs(30))
        .await;
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &runner.child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    let status = runner
        .wait_exit(Duration::from_secs(10))
        .expect("exits promptly on SIGTERM");
    assert_eq!(status.code(), Some(0));
    check_invariants(&s, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_runner_stops_with_exit_zero() {
    let s = setup();
    let mut stale = Runner::start(&s.api.url, s.thread, &appender_spec(), &s.workspace);
    // Wait until it has claimed (its boot event), then another copy claims the thread.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while s
        .admin
        .client
        .events_page(s.thread, 0, Some(1))
        .await
        .unwrap_or_default()
        .is_empty()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the runner never booted"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let claim = s
        .admin
        .client
        .claim(s.thread, &Default::default())
        .await
        .unwrap();
    assert_eq!(claim.epoch, 2);
    s.admin.send(s.thread, "message 0", "k0").await;
    let status = stale
        .wait_exit(Duration::from_secs(30))
        .expect("the stale runner stops");
    assert_eq!(status.code(), Some(0));
    assert_eq!(
        lines(&s.workspace),
        0,
        "the fenced runner's write never happened"
    );
}

#[test]
fn missing_environment_exits_two_naming_the_variable() {
    let out = std::process::Command::new(ninetrix_bin())
        .arg("runner")
        .env_remove("AGENTFILE_AGENT_SPEC")
        .env("AGENTFILE_THREAD_ID", ThreadId::new_v7().to_string())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("AGENTFILE_AGENT_SPEC is not set"));
    let out = std::process::Command::new(ninetrix_bin())
        .arg("runner")
        .env("AGENTFILE_AGENT_SPEC", appender_spec().to_string())
        .env("AGENTFILE_THREAD_ID", "not-a-uuid")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("AGENTFILE_THREAD_ID is invalid"));
}

#[test]
fn a_batch_job_runs_its_task_once_and_prints_the_reply() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = appender_spec();
    spec["execution"]["durability"] = false.into();
    spec["execution"]["task"] = "write the digest".into();
    let out = std::process::Command::new(ninetrix_bin())
        .arg("runner")
        .env("AGENTFILE_AGENT_SPEC", spec.to_string())
        .env("AGENTFILE_THREAD_ID", ThreadId::new_v7().to_string())
        .env("AGENTFILE_WORKSPACE", dir.path())
        .env_remove("AGENTFILE_API_URL")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "Done.\n");
    assert_eq!(lines(dir.path()), 1);
}

#[tokio::test]
async fn a_runner_that_cannot_claim_its_thread_says_why_before_it_exits_one() {
    // A refused claim used to exit 1 in silence: `ps`'s "gave up: <the last error it logged>"
    // had nothing to show. The thread belongs to pool `one`; a runner claiming it for pool `two`
    // is refused.
    let s = setup();
    let mut first = Runner::start_with_env(
        &s.api.url,
        s.thread,
        &appender_spec(),
        &s.workspace,
        &[("AGENTFILE_POOL", "one")],
    );
    let seq = s.admin.send(s.thread, "message 0", "k0").await;
    s.admin
        .wait_done(s.thread, seq, Duration::from_secs(60))
        .await;
    first.kill();
    let mut refused = std::process::Command::new(ninetrix_bin())
        .arg("runner")
        .env("AGENTFILE_API_URL", &s.api.url)
        .env("AGENTFILE_RUNNER_TOKEN", "insecure-dev")
        .env("AGENTFILE_THREAD_ID", s.thread.to_string())
        .env("AGENTFILE_POOL", "two")
        .env("AGENTFILE_AGENT_SPEC", appender_spec().to_string())
        .env("AGENTFILE_WORKSPACE", &s.workspace)
        .env("AGENTFILE_API_PATIENCE", "5")
        .env(
            "AGENTFILE_HEALTH_FILE",
            s.workspace.with_file_name("health-refused"),
        )
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = refused.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            refused.kill().unwrap();
            panic!("the refused runner did not exit within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut refused.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    let claim = format!("cannot claim thread {}", s.thread);
    assert!(
        stderr
            .lines()
            .any(|l| l.trim_start().starts_with("ERROR") && l.contains(&claim)),
        "no `ERROR {claim}` line:\n{stderr}"
    );
}
