//! `ninetrix cancel`, the real binary against a real checkpoint API (in this process, SQLite in a
//! temp dir) named by `AGENTFILE_API_URL`: no Docker is needed, and none is started. The pool is
//! a state file and an agentfile in the home; its runner is played by the test with the runner
//! token — it takes the cancel from the inbox and commits what a real runner would (the turn
//! ending `cancelled`, the cancel finding no turn, or the turn finishing first), so each way the
//! command can end is seen.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use ninetrix_client::Client;
use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{
    ClaimRequest, CommitRequest, Control, EnqueueRequest, RunnerTokenRequest,
};
use ninetrix_proto::events::{
    CancelMissed, StoppedBy, TraceEvent, TurnCompleted, TurnStarted, TurnStopping,
};
use serde_json::{Value, json};

mod support;

use support::{ADMIN, TestApi};

const AGENTFILE: &str = "name: shop
agents:
  writer:
    runtime: { provider: scripted, script: [hi] }
  job:
    runtime: { provider: scripted, script: [hi] }
    execution: { durability: false, task: go }
";

/// A pool `shop` whose `writer-1` thread the test's "runner" holds.
struct Pool {
    api: TestApi,
    thread: ThreadId,
    runner: Client,
    epoch: u64,
    /// The thread's latest version.
    version: u64,
}

impl Pool {
    /// The pool's files in the home, and `writer-1`'s thread claimed by the test's runner with
    /// message 1 taken: in turn 1 when `in_turn`, else done with it (idle).
    fn start(in_turn: bool) -> Pool {
        let api = TestApi::start();
        let thread = ThreadId::new_v7();
        std::fs::write(api.home.path().join("agentfile.yaml"), AGENTFILE).unwrap();
        let pools = api.home.path().join("pools");
        std::fs::create_dir_all(&pools).unwrap();
        let state = json!({
            "pool": "shop",
            "agents": {"writer": {"1": {"thread_id": thread, "container_id": null, "config_hash": null}}},
        });
        std::fs::write(pools.join("shop.json"), state.to_string()).unwrap();
        let admin = api.client(ADMIN);
        let (runner, epoch) = api.runtime.block_on(async {
            let minted = admin
                .mint_runner_token(&RunnerTokenRequest {
                    thread_id: thread,
                    pool: Some("shop".into()),
                    agent: Some("writer".into()),
                    replica: Some(1),
                })
                .await
                .unwrap();
            let runner = api.client(&minted.token);
            let epoch = runner
                .claim(thread, &ClaimRequest::default())
                .await
                .unwrap()
                .epoch;
            admin
                .enqueue(
                    thread,
                    &EnqueueRequest {
                        content: "write the report".into(),
                        dedupe_key: None,
                        control: None,
                        mode: None,
                    },
                )
                .await
                .unwrap();
            (runner, epoch)
        });
        let mut pool = Pool {
            api,
            thread,
            runner,
            epoch,
            version: 0,
        };
        let started = TraceEvent::TurnStarted(TurnStarted {
            turn_seq: 1,
            seq: 1,
            input: "write the report".into(),
        });
        pool.commit(json!({"turn_seq": 1, "turn_start_history_len": 1, "status": "in_turn", "inbox_cursor": 1, "turn_message": 1}), &[started]);
        if !in_turn {
            pool.commit(
                json!({"turn_seq": 1, "turn_start_history_len": 1, "status": "idle", "inbox_cursor": 1, "turn_message": 1}),
                &[completed(None, true)],
            );
        }
        pool
    }

    /// Commits the next version with `state` and `events`, as the runner.
    fn commit(&mut self, state: Value, events: &[TraceEvent]) {
        let append = if self.version == 0 {
            vec![
                serde_json::to_value(ninetrix_proto::Message::text(
                    ninetrix_proto::Role::User,
                    "write the report",
                ))
                .unwrap(),
            ]
        } else {
            Vec::new()
        };
        let events: Vec<_> = events
            .iter()
            .map(|e| e.to_new_event(chrono::Utc::now()))
            .collect();
        let commit: CommitRequest = serde_json::from_value(json!({
            "epoch": self.epoch,
            "parent_version": self.version,
            "append": append,
            "state": state,
            "events": events,
        }))
        .unwrap();
        let done = self
            .api
            .runtime
            .block_on(self.runner.commit(self.thread, &commit))
            .unwrap();
        self.version = done.version;
    }

    /// Waits (the inbox's long poll) for the cancel the command stores; its seq and sender.
    fn take_cancel(&self) -> (u64, String) {
        self.api.runtime.block_on(async {
            for _ in 0..30 {
                let messages = self
                    .runner
                    .inbox(self.thread, 1, Duration::from_secs(1), 10)
                    .await
                    .unwrap();
                if let Some(m) = messages
                    .into_iter()
                    .find(|m| m.control == Some(Control::Cancel))
                {
                    return (m.seq, m.by.unwrap_or_default());
                }
            }
            panic!("no cancel reached the inbox within 30 s");
        })
    }

    /// `ninetrix ARGS` started in the background.
    fn spawn(&self, args: &[&str]) -> Child {
        let mut cmd = Command::new(assert_cmd::cargo::cargo_bin!("ninetrix"));
        cmd.current_dir(self.api.home.path())
            .env("AGENTFILE_HOME", self.api.home.path())
            .env("AGENTFILE_API_URL", &self.api.url)
            .env("AGENTFILE_ADMIN_TOKEN", ADMIN)
            .env("USER", "tester")
            .env("COLUMNS", "200")
            .env("NO_COLOR", "1")
            .env_remove("CLICOLOR_FORCE")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd.spawn().expect("ninetrix starts")
    }

    /// Runs `ninetrix ARGS`: its exit code, stdout and stderr.
    fn run(&self, args: &[&str]) -> (i32, String, String) {
        finish(self.spawn(args))
    }
}

/// Waits for a command started with [`Pool::spawn`]: its exit code, stdout and stderr.
fn finish(child: Child) -> (i32, String, String) {
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// Turn 1's `turn_completed` (it answered message 1).
fn completed(stopped_by: Option<StoppedBy>, ok: bool) -> TraceEvent {
    TraceEvent::TurnCompleted(TurnCompleted {
        turn_seq: 1,
        seq: 1,
        ok,
        reply: if ok {
            "the report".into()
        } else {
            String::new()
        },
        usage: Default::default(),
        duration_ms: 10.0,
        stopped_by,
    })
}

#[test]
fn a_batch_agent_has_no_turn_to_cancel() {
    let pool = Pool::start(false);
    let (code, out, err) = pool.run(&["cancel", "-p", "shop", "--agent", "job"]);
    assert_eq!(code, 69, "{err}");
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains("agent `job` is a batch job") && err.contains("nothing was sent"),
        "{err}"
    );
    let (code, _, err) = pool.run(&["cancel", "-p", "shop", "--agent", "editor"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("pool `shop` has no agent `editor`"),
        "an unknown agent is named: {err}"
    );
}

#[test]
fn a_running_turn_is_cancelled_and_the_command_says_so_once_it_stopped() {
    let mut pool = Pool::start(true);
    let child = pool.spawn(&[
        "cancel",
        "-p",
        "shop",
        "--agent",
        "writer",
        "--reason",
        "wrong file",
    ]);
    let (seq, by) = pool.take_cancel();
    assert_eq!(by, "tester", "--by defaults to $USER");
    let stopped = StoppedBy::Cancelled {
        seq,
        by: by.clone(),
    };
    pool.commit(
        json!({"turn_seq": 1, "turn_start_history_len": 1, "status": "idle", "inbox_cursor": seq, "turn_message": 1}),
        &[
            TraceEvent::TurnStopping(TurnStopping {
                turn_seq: 1,
                by: stopped.clone(),
                running: vec!["shell".into()],
            }),
            completed(Some(stopped), false),
        ],
    );
    let (code, out, err) = finish(child);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "⏹ turn 1 cancelled by tester\n");
    assert!(
        err.contains(&format!(
            "cancel stored as message {seq} for writer-1: turn 1 is running; waiting for it to stop"
        )),
        "{err}"
    );
    assert!(
        err.contains("stopping turn 1: letting shell finish"),
        "{err}"
    );
}

#[test]
fn a_cancel_that_finds_no_turn_or_a_turn_that_finished_first_stops_nothing() {
    // No turn runs: the command says so, and the runner's `cancel_missed` settles it.
    let mut idle = Pool::start(false);
    let child = idle.spawn(&[
        "cancel", "-p", "shop", "--agent", "writer", "--by", "ana", "--json",
    ]);
    let (seq, by) = idle.take_cancel();
    assert_eq!(by, "ana");
    idle.commit(
        json!({"turn_seq": 1, "turn_start_history_len": 1, "status": "idle", "inbox_cursor": seq, "turn_message": 1}),
        &[TraceEvent::CancelMissed(CancelMissed {
            seq,
            by,
            last_turn: 1,
        })],
    );
    let (code, out, err) = finish(child);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).expect("one JSON object");
    assert_eq!(v["outcome"], "no_turn", "{v}");
    assert_eq!(
        (v["seq"].as_u64(), v["turn"].as_u64()),
        (Some(seq), Some(1))
    );
    assert_eq!(v["running"], Value::Null);
    assert_eq!(v["by"], "ana");

    // The turn finishes before the runner takes the cancel.
    let mut busy = Pool::start(true);
    let child = busy.spawn(&["cancel", "-p", "shop", "--agent", "writer"]);
    let (seq, _) = busy.take_cancel();
    busy.commit(
        json!({"turn_seq": 1, "turn_start_history_len": 1, "status": "idle", "inbox_cursor": 1, "turn_message": 1}),
        &[completed(None, true)],
    );
    let (code, out, err) = finish(child);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        format!(
            "turn 1 finished before the cancel reached it, so nothing was stopped (the cancel, \
             message {seq}, does nothing)\n"
        )
    );
}

#[test]
fn without_waiting_the_cancel_is_stored_and_a_turn_that_does_not_stop_times_out() {
    let pool = Pool::start(true);
    let (code, out, err) = pool.run(&[
        "cancel",
        "-p",
        "shop",
        "--agent",
        "writer",
        "--no-wait",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).expect("one JSON object");
    assert_eq!(v["outcome"], "stored", "{v}");
    assert_eq!(v["running"], json!({"turn_seq": 1, "seq": 1}));
    assert_eq!(v["duplicate"], false);
    assert_eq!(v["by"], "tester");

    // Nothing takes it: the wait ends at the deadline, exit 124, the cancel still stored.
    let (code, out, err) = pool.run(&[
        "cancel",
        "-p",
        "shop",
        "--agent",
        "writer",
        "--timeout",
        "0",
    ]);
    assert_eq!(code, 124, "{out}{err}");
    assert!(
        err.contains("turn 1 has not stopped within 0s")
            && err.contains("stays stored")
            && err.contains("ninetrix ps -p shop"),
        "{err}"
    );
}
