//! The driver run in process, for tests of its paths that otherwise only the Docker and
//! process-kill e2e tests reach: the real [`run_with`] over [`MemoryCheckpoints`] (wrapped by
//! [`TestStore`], which adds an inbox, a purge switch, a commit held forever to stand for a
//! crash, and a record of the events), the `scripted` model, real builtin tools in a temporary
//! workspace, and tokio's paused clock (`start_paused`), so the driver's waits (inbox polls,
//! event batching, flushes) cost no real time. A crash is the driver's task aborted while its
//! commit is held; the next driver boots on the same store, as a restarted container would.
//! Tests wait for state with deadlines (a commit counter, the task's end), never with sleeps;
//! the one `sleep` lets 120 s of paused time pass to show that nothing more happens.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ninetrix_agentfile::AgentSpec;
use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{
    Approval, ClaimRequest, ClaimResponse, CommitRequest, CommitResponse, Handoff, HandoffRequest,
    InboxMessage, NewEvent, ThreadState, ThreadStatus, ToolCallRecord,
};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{Exit, run_with};
use crate::checkpoints::{CheckpointError, Checkpoints, MemoryCheckpoints};
use crate::config::{ApiAccess, Config, SecretValue};
use crate::health::{self, Health};

/// How long a test waits for the driver to reach a state (in paused time: the driver's own
/// waits are 30 s inbox polls and 2 s flushes, so this is many of them).
const DEADLINE: Duration = Duration::from_secs(600);

/// The thread's store: [`MemoryCheckpoints`] plus what the API would add.
#[derive(Clone)]
pub(super) struct TestStore {
    memory: MemoryCheckpoints,
    shared: Arc<Shared>,
}

struct Shared {
    inbox: Mutex<Vec<InboxMessage>>,
    arrived: Notify,
    purged: AtomicBool,
    /// The number of the commit (from 1) to hold forever: the runner "crashes" waiting for it.
    hold: Mutex<Option<u64>>,
    /// Commits stored so far.
    commits: watch::Sender<u64>,
    /// Every event stored, with commits and in batches, in order.
    events: Mutex<Vec<NewEvent>>,
    /// Bumped whenever events are stored.
    stored: watch::Sender<u64>,
}

impl TestStore {
    pub(super) fn new() -> TestStore {
        TestStore {
            memory: MemoryCheckpoints::new(ThreadId::new_v7()),
            shared: Arc::new(Shared {
                inbox: Mutex::new(Vec::new()),
                arrived: Notify::new(),
                purged: AtomicBool::new(false),
                hold: Mutex::new(None),
                commits: watch::channel(0).0,
                events: Mutex::new(Vec::new()),
                stored: watch::channel(0).0,
            }),
        }
    }

    /// Puts a message in the inbox (seqs from 1).
    pub(super) fn send(&self, content: &str) -> u64 {
        self.send_as(content, ninetrix_proto::api::MessageMode::Queue, None)
    }

    /// Puts a message in the inbox with a mode, or a control (a cancel by `ana`).
    pub(super) fn send_as(
        &self,
        content: &str,
        mode: ninetrix_proto::api::MessageMode,
        control: Option<ninetrix_proto::api::Control>,
    ) -> u64 {
        let mut inbox = self.shared.inbox.lock().unwrap();
        let seq = inbox.len() as u64 + 1;
        inbox.push(InboxMessage {
            seq,
            content: content.into(),
            dedupe_key: None,
            created_at: chrono::Utc::now(),
            handoff: None,
            control,
            mode,
            by: control.map(|_| "ana".to_string()),
        });
        drop(inbox);
        self.shared.arrived.notify_waiters();
        seq
    }

    /// Purges the thread: every later call answers `purged`, as the API's 410 does.
    pub(super) fn purge(&self) {
        self.shared.purged.store(true, Ordering::SeqCst);
        self.shared.arrived.notify_waiters();
    }

    /// Holds commit number `n` (from 1) forever.
    pub(super) fn hold_commit(&self, n: Option<u64>) {
        *self.shared.hold.lock().unwrap() = n;
    }

    /// Commits stored so far.
    pub(super) fn commits(&self) -> u64 {
        *self.shared.commits.borrow()
    }

    /// Waits (with the deadline) until `n` commits are stored.
    pub(super) async fn until_commits(&self, n: u64) {
        let mut rx = self.shared.commits.subscribe();
        tokio::time::timeout(DEADLINE, rx.wait_for(|c| *c >= n))
            .await
            .unwrap_or_else(|_| panic!("{n} commits never came ({} did)", self.commits()))
            .unwrap();
    }

    /// Waits (with the deadline) until `n` events of type `kind` are stored.
    pub(super) async fn until_event(&self, kind: &str, n: usize) {
        let count = || self.event_kinds().iter().filter(|k| *k == kind).count();
        let mut rx = self.shared.stored.subscribe();
        tokio::time::timeout(DEADLINE, rx.wait_for(|_| count() >= n))
            .await
            .unwrap_or_else(|_| panic!("{n} `{kind}` events never came ({} did)", count()))
            .unwrap();
    }

    fn store_events(&self, events: impl IntoIterator<Item = NewEvent>) {
        self.shared.events.lock().unwrap().extend(events);
        self.shared.stored.send_modify(|n| *n += 1);
    }

    /// The stored events whose type is `kind`, their data, in order.
    pub(super) fn events_of(&self, kind: &str) -> Vec<serde_json::Value> {
        self.shared
            .events
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e.kind == kind)
            .map(|e| e.data.clone())
            .collect()
    }

    /// The stored events' types, in order.
    pub(super) fn event_kinds(&self) -> Vec<String> {
        self.shared
            .events
            .lock()
            .unwrap()
            .iter()
            .map(|e| e.kind.clone())
            .collect()
    }

    /// The stored thread.
    pub(super) async fn thread(&self) -> ThreadState {
        self.memory
            .latest()
            .await
            .unwrap()
            .expect("a stored version")
    }

    fn check(&self) -> Result<(), CheckpointError> {
        if self.shared.purged.load(Ordering::SeqCst) {
            return Err(CheckpointError::Purged("the thread was purged".into()));
        }
        Ok(())
    }
}

impl Checkpoints for TestStore {
    async fn claim(&self, claim: &ClaimRequest) -> Result<ClaimResponse, CheckpointError> {
        self.check()?;
        self.memory.claim(claim).await
    }

    async fn latest(&self) -> Result<Option<ThreadState>, CheckpointError> {
        self.check()?;
        self.memory.latest().await
    }

    async fn commit(&self, request: &CommitRequest) -> Result<CommitResponse, CheckpointError> {
        self.check()?;
        let n = self.commits() + 1;
        if *self.shared.hold.lock().unwrap() == Some(n) {
            std::future::pending::<()>().await;
        }
        let done = self.memory.commit(request).await?;
        self.shared.commits.send_replace(n);
        self.store_events(request.events.iter().cloned());
        Ok(done)
    }

    async fn turn_ledger(&self, turn_seq: u64) -> Result<Vec<ToolCallRecord>, CheckpointError> {
        self.memory.turn_ledger(turn_seq).await
    }

    /// No request to a person is ever made here (the tests' agents have no gates): the API's
    /// answer is an empty list. (Memory alone refuses: without an API nobody could decide.)
    async fn approvals(
        &self,
        _turn_seq: u64,
        _settled: u64,
        _wait: Duration,
    ) -> Result<Vec<Approval>, CheckpointError> {
        self.check()?;
        Ok(Vec::new())
    }

    async fn open_handoff(&self, request: &HandoffRequest) -> Result<Handoff, CheckpointError> {
        self.memory.open_handoff(request).await
    }

    async fn handoffs(
        &self,
        turn_seq: u64,
        settled: u64,
        wait: Duration,
    ) -> Result<Vec<Handoff>, CheckpointError> {
        self.memory.handoffs(turn_seq, settled, wait).await
    }

    /// The API's long-poll: the messages after `after`, or nothing after `wait`.
    async fn inbox(
        &self,
        after: u64,
        wait: Duration,
    ) -> Result<Vec<InboxMessage>, CheckpointError> {
        let arrived = self.shared.arrived.notified();
        tokio::pin!(arrived);
        arrived.as_mut().enable();
        self.check()?;
        let after_it = |inbox: &[InboxMessage]| -> Vec<InboxMessage> {
            inbox.iter().filter(|m| m.seq > after).cloned().collect()
        };
        let now = after_it(&self.shared.inbox.lock().unwrap());
        if !now.is_empty() {
            return Ok(now);
        }
        if tokio::time::timeout(wait, arrived).await.is_ok() {
            self.check()?;
            return Ok(after_it(&self.shared.inbox.lock().unwrap()));
        }
        Ok(Vec::new())
    }

    async fn events(&self, _epoch: u64, events: Vec<NewEvent>) -> Result<(), CheckpointError> {
        self.store_events(events);
        Ok(())
    }
}

/// The agent `a` of an agentfile with `body` under it (its runtime, tools, execution).
pub(super) fn agent(body: &str) -> AgentSpec {
    let text = format!("agents:\n  a:\n{body}");
    ninetrix_agentfile::parse("t.yaml", &text)
        .unwrap_or_else(|r| panic!("{r:?}"))
        .agentfile
        .agents
        .remove(0)
}

/// The runner's configuration for `spec` with its workspace at `workspace` (a durable agent
/// gets an API address, which nothing calls: the store is in process).
pub(super) fn config(spec: AgentSpec, workspace: &Path) -> Config {
    let api = spec.execution.durability.then(|| ApiAccess {
        url: "http://127.0.0.1:9".into(),
        token: SecretValue::new("t"),
    });
    Config {
        thread_id: ThreadId::new_v7(),
        api,
        pool: None,
        replica: None,
        workspace: workspace.to_path_buf(),
        task: None,
        secrets: Default::default(),
        stream_idle_timeout: Duration::from_secs(120),
        api_patience: None,
        turn_restarts: crate::engine::TURN_RESTARTS,
        health_file: workspace.join("health"),
        agent_token: None,
        session: None,
        instance: None,
        created: None,
        telemetry: None,
        spec,
    }
}

/// A driver running in a task of its own, as one runner process.
pub(super) struct Driver {
    pub(super) task: JoinHandle<Exit>,
    pub(super) health: Health,
    pub(super) shutdown: CancellationToken,
}

impl Driver {
    /// Boots a driver on `store`'s thread.
    pub(super) fn start(store: &TestStore, config: &Config) -> Driver {
        let health = Health::new(None);
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(run_with(
            store.clone(),
            None,
            config.clone(),
            reqwest::Client::new(),
            health.clone(),
            shutdown.clone(),
            false,
        ));
        Driver {
            task,
            health,
            shutdown,
        }
    }

    /// Waits (with the deadline) for the driver to end on its own.
    pub(super) async fn exit(self) -> Exit {
        tokio::time::timeout(DEADLINE, self.task)
            .await
            .expect("the driver never ended")
            .expect("the driver panicked")
    }

    /// Kills the driver wherever it is (a crash: nothing more of it runs).
    pub(super) async fn kill(self) {
        self.task.abort();
        let _ = self.task.await;
    }
}

mod tests {
    use super::*;

    /// A durable agent whose turn appends to a file (a `write`), reads it back, then answers.
    const WRITER: &str = "    runtime:
      provider: scripted
      script:
        - tool_calls:
            - name: file_write
              args: { path: log, mode: append, content: \"x\" }
            - name: file_read
              args: { path: log }
        - text: Done.
    tools: [file_read, file_write]
    execution: { durability: true, resume: truncate }
";

    fn writer(workspace: &Path) -> Config {
        config(agent(WRITER), workspace)
    }

    fn log(workspace: &Path) -> String {
        std::fs::read_to_string(workspace.join("log")).unwrap_or_default()
    }

    #[tokio::test(start_paused = true)]
    async fn a_turn_from_the_inbox_is_committed_once_and_the_runner_serves_on() {
        let dir = tempfile::tempdir().unwrap();
        let store = TestStore::new();
        let config = writer(dir.path());
        let driver = Driver::start(&store, &config);
        store.send("go");
        // The response (with the write's intent), the write's outcome, the final answer.
        store.until_commits(3).await;
        let thread = store.thread().await;
        assert_eq!(thread.state.status, ThreadStatus::Idle);
        assert_eq!(thread.state.inbox_cursor, 1);
        assert_eq!(thread.history.last().unwrap().text_content(), "Done.");
        assert_eq!(log(dir.path()), "x", "the write ran once");
        // Nothing more is committed while the inbox is empty: the message is not taken again.
        tokio::time::sleep(Duration::from_secs(120)).await;
        assert_eq!(store.commits(), 3);
        let kinds = store.event_kinds();
        assert_eq!(
            kinds.iter().filter(|k| *k == "turn_completed").count(),
            1,
            "{kinds:?}"
        );
        assert!(
            !driver.task.is_finished(),
            "a durable runner waits for more"
        );
        driver.shutdown.cancel();
        assert_eq!(driver.exit().await, Exit::Ok);
    }

    #[tokio::test(start_paused = true)]
    async fn a_crash_mid_turn_resumes_it_and_replays_the_completed_write_from_the_ledger() {
        let dir = tempfile::tempdir().unwrap();
        let store = TestStore::new();
        let config = writer(dir.path());
        // The turn's last commit (the answer) never arrives: the runner dies waiting for it,
        // after the write ran and its outcome was stored, before the read's result was.
        store.hold_commit(Some(3));
        let first = Driver::start(&store, &config);
        store.send("go");
        store.until_commits(2).await;
        let stored = store.thread().await;
        assert_eq!(stored.state.status, ThreadStatus::InTurn);
        assert_eq!(log(dir.path()), "x");
        first.kill().await;

        store.hold_commit(None);
        let second = Driver::start(&store, &config);
        // The repair (truncate: the response's read was never answered) and the resumed
        // turn's response and answer.
        store.until_commits(5).await;
        let thread = store.thread().await;
        assert_eq!(thread.state.status, ThreadStatus::Idle);
        assert_eq!(thread.history.last().unwrap().text_content(), "Done.");
        assert_eq!(
            log(dir.path()),
            "x",
            "the write was replayed, not run again"
        );
        let kinds = store.event_kinds();
        for kind in ["repair", "turn_resumed", "tool_replayed", "turn_completed"] {
            assert!(kinds.iter().any(|k| k == kind), "no {kind} in {kinds:?}");
        }
        second.shutdown.cancel();
        assert_eq!(second.exit().await, Exit::Ok);
    }

    #[tokio::test(start_paused = true)]
    async fn a_purged_thread_ends_the_runner_with_the_purged_exit() {
        let dir = tempfile::tempdir().unwrap();
        let store = TestStore::new();
        let config = writer(dir.path());
        let driver = Driver::start(&store, &config);
        store.send("go");
        store.until_commits(3).await;
        store.purge();
        let exit = driver.exit().await;
        assert!(matches!(exit, Exit::Purged(_)), "{exit:?}");
        assert_eq!(exit.code(), 0, "Docker must not restart it");
    }

    #[tokio::test(start_paused = true)]
    async fn three_failed_turns_in_a_row_make_the_runner_unhealthy() {
        let dir = tempfile::tempdir().unwrap();
        let store = TestStore::new();
        let mut spec = agent(WRITER);
        // A model that cannot be called: every turn fails at once.
        spec.runtime.script.clear();
        let config = config(spec, dir.path());
        let driver = Driver::start(&store, &config);
        let judged = |driver: &Driver| {
            health::judge(
                &driver.health.report(),
                chrono::Utc::now().timestamp_millis(),
            )
        };
        for n in 1..=3u64 {
            assert!(judged(&driver).0, "healthy before failed turn {n}");
            store.send("go");
            // Each failed turn leaves the conversation as it was and says so in its
            // `turn_completed`.
            store.until_event("turn_completed", n as usize).await;
        }
        let (healthy, line) = judged(&driver);
        assert!(!healthy, "three failed turns: {line}");
        assert_eq!(driver.health.report().failed_turns.unwrap().count, 3);
        driver.shutdown.cancel();
        assert_eq!(driver.exit().await, Exit::Ok);
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_job_exits_after_its_one_turn() {
        let dir = tempfile::tempdir().unwrap();
        let store = TestStore::new();
        let spec = agent(&WRITER.replace("durability: true", "durability: false"));
        let mut config = config(spec, dir.path());
        config.task = Some("do it".into());
        let exit = Driver::start(&store, &config).exit().await;
        assert_eq!(exit, Exit::Ok);
        let thread = store.thread().await;
        assert_eq!(thread.state.status, ThreadStatus::Done);
        assert_eq!(log(dir.path()), "x");
        assert_eq!(store.commits(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_job_whose_turn_fails_exits_without_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let store = TestStore::new();
        let mut spec = agent(&WRITER.replace("durability: true", "durability: false"));
        spec.runtime.script.clear();
        let mut config = config(spec, dir.path());
        config.task = Some("do it".into());
        let exit = Driver::start(&store, &config).exit().await;
        assert_eq!(exit, Exit::TurnFailed);
        assert_eq!(exit.code(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_fenced_runner_stops_and_leaves_the_thread_to_the_new_one() {
        let dir = tempfile::tempdir().unwrap();
        let store = TestStore::new();
        let config = writer(dir.path());
        let old = Driver::start(&store, &config);
        store.send("go");
        store.until_commits(3).await;
        // A second runner claims the thread: the old one is fenced at its next write.
        let new = Driver::start(&store, &config);
        store.send("again");
        store.until_commits(6).await;
        assert_eq!(store.thread().await.state.inbox_cursor, 2);
        let old_exit = old.exit().await;
        assert_eq!(old_exit, Exit::Ok);
        assert_eq!(log(dir.path()), "xx", "each turn's write ran once");
        new.shutdown.cancel();
        assert_eq!(new.exit().await, Exit::Ok);
    }

    /// A durable agent whose turn sleeps (a `read` that takes `secs`), then answers.
    fn sleeper(workspace: &Path, secs: u64) -> Config {
        config(
            agent(&format!(
                "    runtime:
      provider: scripted
      script:
        - tool_calls:
            - name: sleep
              args: {{ seconds: {secs} }}
        - text: Done.
    tools: [sleep]
    execution: {{ durability: true, interrupt_grace: 5s }}
"
            )),
            workspace,
        )
    }

    #[tokio::test(start_paused = true)]
    async fn an_interrupt_stops_a_slow_tool_after_its_grace_and_starts_the_next_turn() {
        use ninetrix_proto::api::MessageMode;
        let dir = tempfile::tempdir().unwrap();
        let store = TestStore::new();
        let driver = Driver::start(&store, &sleeper(dir.path(), 100));
        store.send("go");
        store.until_commits(1).await;
        store.send_as("do this instead", MessageMode::Interrupt, None);
        store.until_event("turn_completed", 2).await;
        let done = store.events_of("turn_completed");
        assert_eq!(done[0]["stopped_by"]["kind"], "interrupted");
        assert_eq!(done[0]["stopped_by"]["seq"], 2);
        assert_eq!(
            (done[1]["seq"].as_u64(), done[1]["ok"].as_bool()),
            (Some(2), Some(true))
        );
        assert_eq!(store.events_of("turn_stopping")[0]["running"][0], "sleep");
        let thread = store.thread().await;
        let stopped = thread
            .history
            .iter()
            .find(|m| m.role == ninetrix_proto::Role::Tool)
            .unwrap();
        assert!(
            stopped.blocks.iter().any(|b| matches!(b,
                ninetrix_proto::Block::ToolResult { content, is_error: true, .. }
                    if content.contains("execution.interrupt_grace"))),
            "{stopped:?}"
        );
        assert_eq!(thread.state.inbox_cursor, 2, "both messages taken, once");
        crate::llm::wire_rules::accepted(&thread.history).unwrap();
        driver.shutdown.cancel();
        assert_eq!(driver.exit().await, Exit::Ok);
    }

    #[tokio::test(start_paused = true)]
    async fn a_steer_joins_the_running_turn_after_its_tool_and_is_answered_in_it() {
        use ninetrix_proto::api::MessageMode;
        let dir = tempfile::tempdir().unwrap();
        let store = TestStore::new();
        let driver = Driver::start(&store, &sleeper(dir.path(), 30));
        store.send("go");
        store.until_commits(1).await;
        store.send_as("and mention the weather", MessageMode::Steer, None);
        store.until_event("turn_completed", 1).await;
        let kinds = store.event_kinds();
        assert_eq!(
            kinds.iter().filter(|k| *k == "turn_started").count(),
            1,
            "{kinds:?}"
        );
        assert_eq!(store.events_of("steered")[0]["seq"], 2);
        let thread = store.thread().await;
        let roles: Vec<_> = thread.history.iter().map(|m| m.role).collect();
        use ninetrix_proto::Role::*;
        assert_eq!(roles, [User, Assistant, Tool, User, Assistant]);
        assert_eq!(thread.history[3].text_content(), "and mention the weather");
        assert_eq!(thread.state.inbox_cursor, 2);
        crate::llm::wire_rules::accepted(&thread.history).unwrap();
        // Nothing more: the steer is not taken again as a turn of its own.
        tokio::time::sleep(Duration::from_secs(120)).await;
        assert_eq!(
            store
                .event_kinds()
                .iter()
                .filter(|k| *k == "turn_started")
                .count(),
            1
        );
        driver.shutdown.cancel();
        assert_eq!(driver.exit().await, Exit::Ok);
    }
}
