//! Fork and rewind with files (issue 41), as processes against a real `ninetrix api`: a replica
//! runner of a scripted agent serves sessions whose every turn writes files in the session's own
//! workspace — turn *i* writes `f<i>.txt` (an overwrite) and appends a line to `log.txt` (a
//! `write`) — and each turn's end stores a snapshot of that workspace.
//!
//! - A fork at every turn of a 50-turn conversation starts with the parent's history up to that
//!   turn and its files as they were then; its one new turn runs its own calls and none of the
//!   parent's again, and the parent's files are untouched.
//! - A rewind goes back (history and files), the conversation goes on with turn numbers that keep
//!   growing, and a rewind to a turn the first rewind left brings that branch back.
//! - A rewind is refused while a turn runs.
//! - SIGKILL at each step of a rewind's restore (the kill points `rewind_before_commit`,
//!   `rewind_after_commit`, `restore_midway`): the next boot finishes or discards it, and the next
//!   turn runs on the history and files of the same turn — never a mix.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{ErrorCode, ForkRequest, RewindRequest, ThreadStatus};
use ninetrix_proto::events::{ToolMode, TraceEvent};
use serde_json::{Value, json};
use support::{Runner, Setup, setup};

const POOL: &str = "forks";
const AGENT: &str = "writer";
const TURN: Duration = Duration::from_secs(60);

/// The writer agent: turn *i* (counted by the assistant messages in its history, so a turn after
/// a rewind to turn *k* is scripted as turn *k + 1*) writes `f<i>.txt` and appends to `log.txt`;
/// `sleep_secs` makes every turn first sleep that long (a turn a test can catch running).
fn writer_spec(turns: usize, sleep_secs: u64) -> Value {
    let mut script = Vec::new();
    for i in 1..=turns {
        let mut calls = vec![
            json!({"name": "file_write", "args": {"path": format!("f{i}.txt"), "content": format!("turn {i}\n")}}),
            json!({"name": "file_write", "args": {"path": "log.txt", "content": format!("{i}\n"), "mode": "append"}}),
        ];
        if sleep_secs > 0 {
            calls.insert(0, json!({"name": "sleep", "args": {"seconds": sleep_secs}}));
        }
        script.push(json!({"text": format!("Writing {i}."), "tool_calls": calls}));
        script.push(json!({"text": format!("Wrote {i}."), "tool_calls": []}));
    }
    json!({
        "name": AGENT,
        "metadata": {"name": null, "description": null, "role": "test agent", "goal": null, "instructions": null, "constraints": []},
        "runtime": {"provider": "scripted", "via": null, "model": "scripted", "base_url": null, "api_key_secret": null,
                    "temperature": 0.2, "max_tokens": 1024, "tool_timeout_secs": 30, "image": null,
                    "resources": {"cpu": null, "memory_bytes": null},
                    "script": script},
        "tools": [
            {"name": "file_write", "effect": "idempotent", "effect_pinned": false},
            {"name": "sleep", "effect": "read", "effect_pinned": false}
        ],
        "execution": {"durability": true, "replicas": 1, "max_turns": 10, "task": null, "resume": "truncate"},
        "governance": {"max_budget_per_run": null}, "env": {}, "secrets": []
    })
}

/// Replica 1 of the writer: it serves the pool's sessions, each in `replica-1/sessions/<thread>`.
fn replica(s: &Setup, spec: &Value, env: &[(&str, &str)]) -> Runner {
    let workspace = s.dir.path().join("replica-1");
    std::fs::create_dir_all(&workspace).unwrap();
    let mut all = vec![
        ("AGENTFILE_POOL", POOL),
        ("AGENTFILE_REPLICA", "1"),
        ("AGENTFILE_AGENT_TOKEN", "insecure-dev"),
    ];
    all.extend_from_slice(env);
    Runner::start_with_env(&s.api.url, ThreadId::new_v7(), spec, &workspace, &all)
}

/// A session's workspace.
fn workspace(s: &Setup, thread: ThreadId) -> PathBuf {
    s.dir
        .path()
        .join("replica-1")
        .join("sessions")
        .join(thread.to_string())
}

/// The files of a workspace (`.ninetrix/` left out), path → content.
fn files(dir: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if name == ".ninetrix" || !e.file_type().unwrap().is_file() {
            continue;
        }
        out.insert(name, std::fs::read_to_string(e.path()).unwrap());
    }
    out
}

/// What the writer's workspace holds after its turns `1..=n` ran on one history (`log.txt`
/// lists the scripted turn of each line).
fn expected(turns: &[usize]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut log = String::new();
    for &i in turns {
        out.insert(format!("f{i}.txt"), format!("turn {i}\n"));
        log.push_str(&format!("{i}\n"));
    }
    if !turns.is_empty() {
        out.insert("log.txt".into(), log);
    }
    out
}

async fn setup_pool(s: &Setup) {
    s.admin
        .client
        .set_replicas(POOL, AGENT, 1, &[], None)
        .await
        .unwrap();
}

async fn session(s: &Setup, key: &str) -> ThreadId {
    s.admin
        .client
        .open_session(POOL, AGENT, key)
        .await
        .unwrap()
        .thread_id
}

/// Sends one message and waits for its turn.
async fn turn(s: &Setup, thread: ThreadId, key: &str) -> u64 {
    let seq = s.admin.send(thread, "go on", key).await;
    let done = s.admin.wait_turn(thread, seq, TURN).await;
    assert!(done.ok, "turn {} of {thread} failed", done.turn_seq);
    done.turn_seq
}

/// Waits for the thread's `rewound` (Ok) or `rewind_failed` (Err) event.
async fn rewound(s: &Setup, thread: ThreadId, to_turn: u64) -> Result<(u64, u64), String> {
    let deadline = Instant::now() + TURN;
    loop {
        for e in s.admin.trace(thread).await {
            match e {
                TraceEvent::Rewound(r) if r.to_turn == to_turn => {
                    return Ok((r.files_written, r.files_removed));
                }
                TraceEvent::RewindFailed(r) if r.to_turn == to_turn => return Err(r.why),
                _ => {}
            }
        }
        assert!(
            Instant::now() < deadline,
            "no rewind to turn {to_turn} on {thread}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The message IDs of the history at the end of `turn` (from the version that ended it).
async fn history_at(s: &Setup, thread: ThreadId, turn: u64) -> Vec<String> {
    let list = s.admin.client.turns(thread).await.unwrap();
    let t = list
        .turns
        .iter()
        .find(|t| t.turn_seq == turn)
        .unwrap_or_else(|| panic!("turn {turn} of {thread} is not listed"));
    let v = s
        .admin
        .client
        .version(t.thread_id, t.version)
        .await
        .unwrap();
    v.history.iter().map(|m| m.id.to_string()).collect()
}

async fn live_ids(s: &Setup, thread: ThreadId) -> Vec<String> {
    s.admin
        .latest(thread)
        .await
        .history
        .iter()
        .map(|m| m.id.to_string())
        .collect()
}

/// Tool calls the thread's runners executed, and replayed from the ledger.
async fn executions(s: &Setup, thread: ThreadId) -> (usize, usize) {
    let trace = s.admin.trace(thread).await;
    let executed = trace
        .iter()
        .filter(|e| matches!(e, TraceEvent::ToolCall(c) if c.mode == ToolMode::Executed))
        .count();
    let replayed = trace
        .iter()
        .filter(|e| matches!(e, TraceEvent::ToolReplayed(_)))
        .count();
    (executed, replayed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_at_every_turn_of_fifty_starts_from_that_turn_and_runs_no_effect_again() {
    const TURNS: usize = 50;
    let s = setup();
    setup_pool(&s).await;
    let spec = writer_spec(TURNS + 1, 0);
    let _replica = replica(&s, &spec, &[]);
    let parent = session(&s, "main").await;
    for i in 1..=TURNS {
        assert_eq!(turn(&s, parent, &format!("main-{i}")).await, i as u64);
    }
    let all: Vec<usize> = (1..=TURNS).collect();
    assert_eq!(files(&workspace(&s, parent)), expected(&all));
    let listed = s.admin.client.turns(parent).await.unwrap();
    assert_eq!(listed.turns.len(), TURNS);
    assert!(listed.turns.iter().all(|t| t.live && t.snapshot.is_some()));

    let mut forks = Vec::new();
    for n in 1..=TURNS as u64 {
        let fork = s
            .admin
            .client
            .fork(
                parent,
                &ForkRequest {
                    at_turn: n,
                    session: Some(format!("at-{n}")),
                },
            )
            .await
            .unwrap();
        assert_eq!(fork.forked_from.parent, parent);
        assert_eq!(fork.forked_from.at_turn, n);
        assert!(
            fork.undone.is_empty(),
            "file_write only touched the workspace, which the fork restores: {:?}",
            fork.undone
        );
        let turn_n = &listed.turns[n as usize - 1];
        assert_eq!(fork.history_len, turn_n.history_len, "fork at turn {n}");
        assert_eq!(fork.snapshot, turn_n.snapshot, "fork at turn {n}");
        assert_eq!(
            live_ids(&s, fork.thread_id).await,
            history_at(&s, parent, n).await,
            "the fork at turn {n} starts with the parent's history at its end"
        );
        forks.push((n, fork.thread_id));
    }
    // One turn in every fork: it runs on the files of its fork point.
    for &(n, fork) in &forks {
        let seq = s.admin.send(fork, "go on", &format!("fork-{n}")).await;
        let done = s.admin.wait_turn(fork, seq, TURN).await;
        assert!(done.ok);
        assert_eq!(
            done.turn_seq,
            n + 1,
            "turn numbers go on from the fork point"
        );
    }
    for &(n, fork) in &forks {
        let turns: Vec<usize> = (1..=n as usize + 1).collect();
        assert_eq!(
            files(&workspace(&s, fork)),
            expected(&turns),
            "fork at turn {n}: its files are the parent's at turn {n} plus its own turn"
        );
        assert_eq!(
            executions(&s, fork).await,
            (2, 0),
            "fork at turn {n}: its own turn's two calls ran, nothing of the parent's ran or replayed"
        );
        let trace = s.admin.trace(fork).await;
        assert!(
            trace.iter().any(
                |e| matches!(e, TraceEvent::Forked(f) if f.parent == parent && f.at_turn == n)
            ),
            "fork at turn {n}: its trace says where it came from"
        );
    }
    // The parent: untouched, every call once.
    assert_eq!(files(&workspace(&s, parent)), expected(&all));
    assert_eq!(executions(&s, parent).await, (2 * TURNS, 0));
    let listed = s.admin.client.turns(parent).await.unwrap();
    assert_eq!(listed.forks.len(), TURNS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewind_goes_back_with_its_files_and_a_rewind_of_the_rewind_brings_the_branch_back() {
    let s = setup();
    setup_pool(&s).await;
    let spec = writer_spec(8, 0);
    let _replica = replica(&s, &spec, &[]);
    let thread = session(&s, "main").await;
    for i in 1..=5 {
        turn(&s, thread, &format!("m{i}")).await;
    }
    let dir = workspace(&s, thread);
    assert_eq!(files(&dir), expected(&[1, 2, 3, 4, 5]));
    let at_five = live_ids(&s, thread).await;

    // Back to turn 2.
    let queued = s
        .admin
        .client
        .rewind(
            thread,
            &RewindRequest {
                to_turn: 2,
                dedupe_key: Some("back-to-2".into()),
            },
        )
        .await
        .unwrap();
    assert_eq!((queued.from_turn, queued.to_turn), (5, 2));
    let (written, removed) = rewound(&s, thread, 2).await.unwrap();
    assert_eq!(files(&dir), expected(&[1, 2]));
    assert_eq!(
        (written, removed),
        (1, 3),
        "log.txt written back; f3–f5 removed"
    );
    assert_eq!(live_ids(&s, thread).await, history_at(&s, thread, 2).await);

    // The conversation goes on from turn 2, as turn 6.
    assert_eq!(turn(&s, thread, "m6").await, 6);
    assert_eq!(files(&dir), expected(&[1, 2, 3]));
    let listed = s.admin.client.turns(thread).await.unwrap();
    let live: Vec<(u64, bool)> = listed.turns.iter().map(|t| (t.turn_seq, t.live)).collect();
    assert_eq!(
        live,
        [
            (1, true),
            (2, true),
            (3, false),
            (4, false),
            (5, false),
            (6, true)
        ]
    );
    // Turn 6 changed two files against turn 2.
    let diff = s.admin.client.turn_diff(thread, 6).await.unwrap();
    assert_eq!(diff.against, Some(2));
    let changed: Vec<&str> = diff.changes.iter().map(|c| c.path.as_str()).collect();
    assert_eq!(changed, ["f3.txt", "log.txt"]);

    // The rewind of the rewind: back to turn 5, on the branch the first rewind left.
    s.admin
        .client
        .rewind(
            thread,
            &RewindRequest {
                to_turn: 5,
                dedupe_key: None,
            },
        )
        .await
        .unwrap();
    rewound(&s, thread, 5).await.unwrap();
    assert_eq!(files(&dir), expected(&[1, 2, 3, 4, 5]));
    assert_eq!(live_ids(&s, thread).await, at_five);
    assert_eq!(turn(&s, thread, "m7").await, 7);
    assert_eq!(files(&dir), expected(&[1, 2, 3, 4, 5, 6]));
    // Every call of every turn ran once: 7 turns, none replayed.
    assert_eq!(executions(&s, thread).await, (14, 0));
    let trace = s.admin.trace(thread).await;
    let rewinds = trace
        .iter()
        .filter(|e| matches!(e, TraceEvent::Rewound(_)))
        .count();
    assert_eq!(rewinds, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewind_is_refused_while_a_turn_runs_and_for_a_turn_that_did_not_end() {
    let s = setup();
    setup_pool(&s).await;
    let spec = writer_spec(4, 2);
    let _replica = replica(&s, &spec, &[]);
    let thread = session(&s, "main").await;
    turn(&s, thread, "m1").await;
    let missing = s
        .admin
        .client
        .rewind(
            thread,
            &RewindRequest {
                to_turn: 9,
                dedupe_key: None,
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&missing, ninetrix_client::ClientError::Api { code: ErrorCode::NotFound, message, .. } if message.contains('1')),
        "{missing:?}"
    );
    // A turn that sleeps 2 s: the rewind is refused while it runs, naming it.
    let seq = s.admin.send(thread, "go on", "m2").await;
    let deadline = Instant::now() + TURN;
    while s.admin.latest(thread).await.state.status != ThreadStatus::InTurn {
        assert!(Instant::now() < deadline, "turn 2 did not start");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let busy = s
        .admin
        .client
        .rewind(
            thread,
            &RewindRequest {
                to_turn: 1,
                dedupe_key: None,
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&busy, ninetrix_client::ClientError::Api { code: ErrorCode::Busy, running: Some(r), .. } if r.turn_seq == 2),
        "{busy:?}"
    );
    s.admin.wait_turn(thread, seq, TURN).await;
    // Nothing was rewound.
    assert_eq!(files(&workspace(&s, thread)), expected(&[1, 2]));
}

/// SIGKILL at `point` during a rewind from turn 4 to turn 1, then a runner again: the rewind is
/// done once, and the next turn runs on turn 1's history and files.
async fn crash_during_a_rewind(point: &str) {
    let s = setup();
    setup_pool(&s).await;
    let spec = writer_spec(6, 0);
    let mut runner = replica(&s, &spec, &[("NINETRIX_RUNNER_CRASH_AT", point)]);
    let thread = session(&s, "main").await;
    for i in 1..=4 {
        turn(&s, thread, &format!("m{i}")).await;
    }
    let dir = workspace(&s, thread);
    let before = live_ids(&s, thread).await;
    s.admin
        .client
        .rewind(
            thread,
            &RewindRequest {
                to_turn: 1,
                dedupe_key: None,
            },
        )
        .await
        .unwrap();
    let status = runner
        .wait_exit(TURN)
        .expect("the kill point ends the runner");
    assert!(!status.success(), "{point}: {status:?}");
    let history = live_ids(&s, thread).await;
    match point {
        // Not committed: the old conversation and the old files.
        "rewind_before_commit" => {
            assert_eq!(history, before, "{point}");
            assert_eq!(files(&dir), expected(&[1, 2, 3, 4]), "{point}");
        }
        // Committed: the new conversation; the files are restored by the next boot before
        // anything runs.
        _ => assert_eq!(history, history_at(&s, thread, 1).await, "{point}"),
    }
    // The same kill point again: it fires once per workspace, so this runner finishes. A
    // session's runner boots when the session has work: the next message. Before its turn runs,
    // the rewind is finished (before the commit: carried out again; after it: the files
    // restored at boot).
    let _runner = replica(&s, &spec, &[("NINETRIX_RUNNER_CRASH_AT", point)]);
    let seq = s.admin.send(thread, "go on", "m5").await;
    let done = s.admin.wait_turn(thread, seq, TURN).await;
    assert!(done.ok, "{point}");
    assert_eq!(done.turn_seq, 5, "{point}");
    rewound(&s, thread, 1).await.unwrap();
    // Turn 5 ran on turn 1's history and files: it is scripted as turn 2, and wrote f2.txt and
    // the second line of log.txt.
    assert_eq!(files(&dir), expected(&[1, 2]), "{point}");
    let history = live_ids(&s, thread).await;
    let at_one = history_at(&s, thread, 1).await;
    assert_eq!(&history[..at_one.len()], &at_one[..], "{point}");
    let restored = s
        .admin
        .trace(thread)
        .await
        .iter()
        .filter(|e| matches!(e, TraceEvent::WorkspaceRestored(_)))
        .count();
    let expected_restores = usize::from(point != "rewind_before_commit");
    assert_eq!(
        restored, expected_restores,
        "{point}: a boot restores the files only when the commit was made"
    );
    let trace = s.admin.trace(thread).await;
    let rewinds = trace
        .iter()
        .filter(|e| matches!(e, TraceEvent::Rewound(_)))
        .count();
    assert_eq!(rewinds, 1, "{point}: the rewind was done once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_before_a_rewinds_commit_leaves_the_old_state_and_the_rewind_is_done_next_boot() {
    crash_during_a_rewind("rewind_before_commit").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_a_rewinds_commit_is_finished_by_the_next_boot() {
    crash_during_a_rewind("rewind_after_commit").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_midway_through_a_restore_is_finished_by_the_next_boot() {
    crash_during_a_rewind("restore_midway").await;
}
