//! The chaos suite's replay (issue 42): `ninetrix replay` of the first [`K`] turns of one of the
//! appender's conversations, as a child process started once the conversation has ended them,
//! while the nemeses kill the runners and the API. When the API is down the command's own calls
//! fail and it exits non-zero: the suite runs the same command again after the API is back (the
//! resume path). Now and then the replay process itself — whose runner runs in it — is SIGKILLed
//! and the same command is run again. After the faults the command is run once more, and must
//! succeed.
//!
//! What [`Replaying::check`] asserts: that final run reports the K turns, each replayed; exactly
//! one replay thread was made for the command's key (the source, the range, the candidate),
//! however many runs and kills; the replay's own turns are 1..=K, each ended once, and its inbox
//! holds the K recorded inputs only; it asked no person and handed nothing over; its ledger is
//! empty and its workspace untouched (no `--live-reads`: nothing ran, not even a read); the
//! source's turns 1..=K are as they were before the replay began. Where the recorded turns have
//! the appender's plain shape, no turn diverges.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ninetrix_client::{ApprovalQuery, ThreadQuery};
use ninetrix_e2e::{Lcg, ninetrix_bin};
use ninetrix_proto::api::{RecordedTurn, ThreadStatus};
use ninetrix_proto::events::TraceEvent;
use ninetrix_proto::replay::ReplayReport;
use ninetrix_proto::{Role, ThreadId};

use super::Admin;

/// The recorded turns replayed: `1..=K`.
pub(crate) const K: u64 = 4;

/// How long one run of the command may take once the API stays up (a replay of K scripted turns
/// takes a second or two; a runner that was killed mid-turn waits out its claim first).
const RUN: Duration = Duration::from_secs(120);

/// The appender (`support::appender_spec`) as an agentfile: the candidate is the recorded agent
/// itself, its script the same, so every call it makes is one the recording has.
fn agentfile(pool: &str) -> String {
    format!(
        r#"name: {pool}
agents:
  appender:
    metadata: {{ role: test agent }}
    runtime:
      provider: scripted
      model: scripted
      temperature: 0.2
      max_tokens: 1024
      script:
        - text: Appending.
          tool_calls: [{{ name: file_write, args: {{ path: log.txt, content: "line\n", mode: append }} }}]
        - text: Done.
    tools: [file_write]
    execution: {{ durability: true, max_turns: 10 }}
"#
    )
}

/// The conversation replayed, and its turns as recorded before the replay began.
struct Source {
    thread: ThreadId,
    before: Vec<RecordedTurn>,
}

/// A run of the command in flight: the child and the number of its run (its output files).
struct Run {
    child: Child,
    n: usize,
}

/// The replay's state through the faults.
pub(crate) struct Replaying {
    pool: String,
    agent: String,
    url: String,
    /// The candidate agentfile.
    file: PathBuf,
    /// The command's `AGENTFILE_HOME` (the replay's workspace is under it).
    home: PathBuf,
    /// Where each run's stdout and stderr go.
    logs: PathBuf,
    /// Its own draws, so the suite's other faults fall as they did before for the same seed.
    rng: Lcg,
    source: Option<Source>,
    run: Option<Run>,
    /// A run during the faults succeeded with every turn: no more runs until the final one.
    settled: bool,
    /// Runs started.
    pub(crate) runs: usize,
    /// Runs that exited non-zero (or reported turns not replayed) and were run again.
    pub(crate) failed: usize,
    /// Runs SIGKILLed.
    pub(crate) kills: usize,
}

impl Replaying {
    pub(crate) fn new(dir: &Path, url: &str, pool: &str, agent: &str, seed: u64) -> Replaying {
        let file = dir.join("replay-candidate.yaml");
        std::fs::write(&file, agentfile(pool)).unwrap();
        let home = dir.join("replay-home");
        let logs = dir.join("replay-logs");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&logs).unwrap();
        Replaying {
            pool: pool.to_string(),
            agent: agent.to_string(),
            url: url.to_string(),
            file,
            home,
            logs,
            rng: Lcg(seed ^ 0x7e91_a7c0_ffee_0042),
            source: None,
            run: None,
            settled: false,
            runs: 0,
            failed: 0,
            kills: 0,
        }
    }

    /// Whether the command was started (a conversation had ended K turns during the faults).
    pub(crate) fn started(&self) -> bool {
        self.source.is_some()
    }

    /// One round of the faults: once a conversation has ended K turns, the command starts; a run
    /// that failed is run again (the API is back by now: each API kill restarts it in its round);
    /// one in five rounds SIGKILLs the run in flight and starts the same command again.
    pub(crate) async fn step(&mut self, admin: &Admin, conversations: &[(ThreadId, Vec<String>)]) {
        if self.settled {
            return;
        }
        if self.source.is_none() {
            for (thread, sent) in conversations {
                if (sent.len() as u64) < K {
                    continue;
                }
                if let Some(before) = recorded(admin, *thread).await {
                    self.source = Some(Source {
                        thread: *thread,
                        before,
                    });
                    self.start();
                    return;
                }
            }
            return;
        }
        let Some(run) = &mut self.run else {
            return;
        };
        match run.child.try_wait().unwrap() {
            Some(status) => {
                let n = run.n;
                self.run = None;
                if status.success() && self.report(n).is_some_and(|r| complete(&r)) {
                    self.settled = true;
                } else {
                    self.failed += 1;
                    self.start();
                }
            }
            None if self.rng.next(5) == 0 => {
                let _ = run.child.kill();
                let _ = run.child.wait();
                self.kills += 1;
                self.run = None;
                self.start();
            }
            None => {}
        }
    }

    /// Starts the command (always the same one) as run number `self.runs`.
    fn start(&mut self) {
        let source = self.source.as_ref().expect("a source").thread.to_string();
        let n = self.runs;
        self.runs += 1;
        let out = std::fs::File::create(self.logs.join(format!("run-{n}.out"))).unwrap();
        let err = std::fs::File::create(self.logs.join(format!("run-{n}.err"))).unwrap();
        let child = Command::new(ninetrix_bin())
            .args(["replay", "--agent", &self.agent, "--thread", &source, "-f"])
            .arg(&self.file)
            .args(["--turns", &format!("1..{K}"), "--json"])
            .env("AGENTFILE_API_URL", &self.url)
            .env("AGENTFILE_ADMIN_TOKEN", "insecure-dev")
            .env("AGENTFILE_HOME", &self.home)
            .env_remove("NINETRIX_RUNNER_CRASH_AT")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("ninetrix replay starts");
        self.run = Some(Run { child, n });
    }

    /// What run `n` printed on stdout, as a report (`None`: none).
    fn report(&self, n: usize) -> Option<ReplayReport> {
        let out = std::fs::read(self.logs.join(format!("run-{n}.out"))).ok()?;
        serde_json::from_slice(&out).ok()
    }

    /// What run `n` printed on stderr.
    fn stderr(&self, n: usize) -> String {
        std::fs::read_to_string(self.logs.join(format!("run-{n}.err"))).unwrap_or_default()
    }

    /// Waits up to [`RUN`] for run `run` to exit (killed and reported if it does not).
    async fn wait(&self, run: &mut Run, seed: u64) -> std::process::ExitStatus {
        let deadline = Instant::now() + RUN;
        loop {
            if let Some(status) = run.child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() >= deadline {
                let _ = run.child.kill();
                let _ = run.child.wait();
                panic!(
                    "seed {seed}: replay run {} did not end within {RUN:?}; its stderr:\n{}",
                    run.n,
                    self.stderr(run.n)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// After the faults (the API stays up; every conversation is done): the run in flight ends
    /// (a failed one is simply superseded), then the same command runs once more and must
    /// succeed; then every invariant of the replay. Returns what happened, for the summary line.
    pub(crate) async fn check(
        &mut self,
        admin: &Admin,
        conversations: &[(ThreadId, Vec<String>)],
        seed: u64,
    ) -> String {
        if self.source.is_none() {
            // The faults ended before a conversation had ended K turns: the replay runs now,
            // without faults (the suite topped a conversation up to K messages).
            for (thread, _) in conversations {
                if let Some(before) = recorded(admin, *thread).await {
                    self.source = Some(Source {
                        thread: *thread,
                        before,
                    });
                    break;
                }
            }
        }
        let (thread, before) = match &self.source {
            Some(s) => (s.thread, s.before.clone()),
            None => panic!("seed {seed}: no conversation ended {K} turns to replay"),
        };
        let started_during_faults = self.runs > 0;
        if let Some(mut run) = self.run.take() {
            self.wait(&mut run, seed).await;
        }
        self.start();
        let mut last = self.run.take().expect("started");
        let status = self.wait(&mut last, seed).await;
        assert!(
            status.success(),
            "seed {seed}: the final run of the replay exited {status}; its stderr:\n{}",
            self.stderr(last.n)
        );
        let report = self.report(last.n).unwrap_or_else(|| {
            panic!(
                "seed {seed}: the final run printed no report; its stderr:\n{}",
                self.stderr(last.n)
            )
        });
        let replay = report.replay;
        // The report: the K turns, each replayed as the same turn (the replay starts at the
        // beginning: its base turn is 0), nothing run live.
        assert_eq!(report.source, thread, "seed {seed}");
        assert_eq!(
            report
                .turns
                .iter()
                .map(|t| (t.turn, t.replay_turn))
                .collect::<Vec<_>>(),
            (1..=K).map(|n| (n, Some(n))).collect::<Vec<_>>(),
            "seed {seed}: replay {replay}: the final report has the {K} turns, each replayed"
        );
        assert_eq!(
            report.calls_run, 0,
            "seed {seed}: replay {replay}: no call ran (no --live-reads)"
        );
        // One replay for the command's key, however many runs and kills.
        let replays: Vec<_> = admin
            .client
            .list_threads(&ThreadQuery {
                pool: Some(self.pool.clone()),
                agent: Some(self.agent.clone()),
                limit: Some(1000),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_iter()
            .filter(|t| t.replay_of.as_ref().is_some_and(|o| o.source == thread))
            .collect();
        assert_eq!(
            replays.iter().map(|t| t.thread_id).collect::<Vec<_>>(),
            vec![replay],
            "seed {seed}: one replay of {thread} over {} runs ({} killed, {} failed)",
            self.runs,
            self.kills,
            self.failed
        );
        let origin = replays[0].replay_of.as_ref().unwrap();
        assert_eq!((origin.from_turn, origin.to_turn), (1, K), "seed {seed}");
        // Its own turns: 1..=K, each ended once; its inbox the K recorded inputs, all served.
        let list = admin.client.turns(replay).await.unwrap();
        let mut own: Vec<u64> = list
            .turns
            .iter()
            .filter(|t| t.thread_id == replay && t.turn_seq > 0)
            .map(|t| t.turn_seq)
            .collect();
        own.sort_unstable();
        assert_eq!(
            own,
            (1..=K).collect::<Vec<_>>(),
            "seed {seed}: replay {replay}: its turns, each once: {:?}",
            list.turns
        );
        let completed: Vec<u64> = admin
            .trace(replay)
            .await
            .into_iter()
            .filter_map(|e| match e {
                TraceEvent::TurnCompleted(t) => Some(t.seq),
                _ => None,
            })
            .collect();
        for n in 1..=K {
            let times = completed.iter().filter(|s| **s == n).count();
            assert!(
                times <= 1,
                "seed {seed}: replay {replay}: the turn of input {n} completed {times} times"
            );
        }
        let summary = admin.client.thread(replay).await.unwrap().unwrap();
        let state = admin.latest(replay).await.state;
        assert_eq!(
            (summary.inbox_seq, state.inbox_cursor, state.status),
            (K, K, ThreadStatus::Idle),
            "seed {seed}: replay {replay}: its inbox is the {K} recorded inputs, all served"
        );
        // Nothing asked, nothing handed over, nothing run.
        let asked = admin
            .client
            .list_approvals(&ApprovalQuery {
                thread: Some(replay),
                status: None,
                limit: Some(1000),
                ..ApprovalQuery::default()
            })
            .await
            .unwrap();
        assert!(
            asked.is_empty(),
            "seed {seed}: replay {replay} asked a person: {asked:?}"
        );
        for (caller, target) in [(Some(replay), None), (None, Some(replay))] {
            let handoffs = admin
                .client
                .list_handoffs(None, caller, target)
                .await
                .unwrap();
            assert!(
                handoffs.is_empty(),
                "seed {seed}: replay {replay} took part in a handoff: {handoffs:?}"
            );
        }
        let ledger = admin.client.tool_calls(replay).await.unwrap();
        assert!(
            ledger.is_empty(),
            "seed {seed}: replay {replay} ran calls (its ledger): {ledger:?}"
        );
        let workspace = self
            .home
            .join("replays")
            .join(replay.to_string())
            .join("workspace");
        assert!(
            !workspace.join("log.txt").exists(),
            "seed {seed}: replay {replay} wrote {}",
            workspace.join("log.txt").display()
        );
        // The source's turns 1..=K are as they were before the replay began.
        let after = recorded(admin, thread)
            .await
            .expect("the API is up: the source's turns");
        for (b, a) in before.iter().zip(&after) {
            assert_eq!(
                (
                    b.turn_seq,
                    b.live,
                    &b.input,
                    &b.messages,
                    &b.calls,
                    &b.answer,
                    b.ok
                ),
                (
                    a.turn_seq,
                    a.live,
                    &a.input,
                    &a.messages,
                    &a.calls,
                    &a.answer,
                    a.ok
                ),
                "seed {seed}: source {thread}: turn {} changed under the replay",
                b.turn_seq
            );
        }
        // The candidate is the recorded agent, so a turn of the appender's plain shape (its
        // input, the write, the write's result — whatever it was, `unknown` included — and
        // "Done.") replays the same: the scripted model answers by the count of assistant
        // messages, and every call is answered from the recording. A turn of another shape (a
        // crash whose repair left another count of assistant messages) shifts the script for the
        // replay's later turns, which a replay cannot reproduce: divergences are then allowed,
        // but the checks above still hold.
        let plain = before.iter().all(plain_turn);
        if plain {
            assert_eq!(
                (report.divergent_turns, report.calls_not_run),
                (0, 0),
                "seed {seed}: replay {replay} of plain turns diverged: {:#?}",
                report.first_divergence
            );
        }
        format!(
            "replay of {K} turns of {thread} ({} during the faults; {} runs, {} killed, {} failed, {} divergent turns{})",
            if started_during_faults {
                "started"
            } else {
                "not started"
            },
            self.runs,
            self.kills,
            self.failed,
            report.divergent_turns,
            if plain { "" } else { ", not all turns plain" }
        )
    }
}

impl Drop for Replaying {
    /// A run still in flight (the suite failed) is killed, not left behind.
    fn drop(&mut self) {
        if let Some(run) = &mut self.run {
            let _ = run.child.kill();
            let _ = run.child.wait();
        }
    }
}

/// Turns 1..=K of `thread` as recorded, once all have ended on its branch (`None`: not yet, or
/// the API did not answer).
async fn recorded(admin: &Admin, thread: ThreadId) -> Option<Vec<RecordedTurn>> {
    let list = admin.client.turns(thread).await.ok()?;
    let ended = |n: u64| {
        list.turns
            .iter()
            .any(|t| t.thread_id == thread && t.turn_seq == n && t.live)
    };
    if !(1..=K).all(ended) {
        return None;
    }
    let mut turns = Vec::new();
    for n in 1..=K {
        turns.push(admin.client.recorded_turn(thread, n).await.ok()?);
    }
    Some(turns)
}

/// Every recorded turn of the report was replayed.
fn complete(report: &ReplayReport) -> bool {
    report.turns.len() as u64 == K && report.turns.iter().all(|t| t.replay_turn.is_some())
}

/// The appender's turn as it runs without a crash in its history: its input, the write, its
/// result, the answer — two assistant messages.
fn plain_turn(turn: &RecordedTurn) -> bool {
    let roles: Vec<Role> = turn.messages.iter().map(|m| m.role).collect();
    turn.ok
        && roles == [Role::User, Role::Assistant, Role::Tool, Role::Assistant]
        && turn.calls.len() == 1
        && turn.answer == "Done."
}
