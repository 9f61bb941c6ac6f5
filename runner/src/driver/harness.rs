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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ninetrix_agentfile::AgentSpec;
use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{
    Approval, ApprovalKind, ApprovalStatus, ClaimRequest, ClaimResponse, CommitRequest,
    CommitResponse, Control, Handoff, HandoffRequest, InboxMessage, NewEvent, ThreadState,
    ThreadStatus, ToolCallRecord, TurnPoint,
};
use ninetrix_proto::snapshots::{ObjectId, ObjectKind};
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
    thread: ThreadId,
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
    /// The requests to people the commits made, as the API keeps them.
    approvals: Mutex<Vec<Approval>>,
    /// Woken when a request is decided.
    decided: Notify,
    /// Every object stored, in order.
    puts: Mutex<Vec<(ObjectId, ObjectKind)>>,
    /// Object IDs the runner asked the store about (`objects/missing`), summed.
    asked: AtomicU64,
    /// An object the store loses just before each of the next N commits that end a turn with
    /// a snapshot (a snapshot's object dropped while the runner uploaded).
    lose: Mutex<Option<(ObjectId, u32)>>,
    /// Handoffs the runner tried to file.
    handoffs_opened: AtomicU64,
}

impl TestStore {
    pub(super) fn new() -> TestStore {
        let thread = ThreadId::new_v7();
        TestStore {
            memory: MemoryCheckpoints::new(thread),
            thread,
            shared: Arc::new(Shared {
                inbox: Mutex::new(Vec::new()),
                arrived: Notify::new(),
                purged: AtomicBool::new(false),
                hold: Mutex::new(None),
                commits: watch::channel(0).0,
                events: Mutex::new(Vec::new()),
                stored: watch::channel(0).0,
                approvals: Mutex::new(Vec::new()),
                decided: Notify::new(),
                puts: Mutex::new(Vec::new()),
                asked: AtomicU64::new(0),
                lose: Mutex::new(None),
                handoffs_opened: AtomicU64::new(0),
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
            to_turn: None,
        });
        drop(inbox);
        self.shared.arrived.notify_waiters();
        seq
    }

    /// The requests to people stored so far.
    pub(super) fn approvals_stored(&self) -> Vec<Approval> {
        self.shared.approvals.lock().unwrap().clone()
    }

    /// Settles every pending request as `status`, decided by `alice` (a rejection with a
    /// reason), as the API's decision route does, and wakes the long-polls.
    pub(super) fn decide(&self, status: ApprovalStatus) {
        for a in self.shared.approvals.lock().unwrap().iter_mut() {
            if a.status == ApprovalStatus::Pending {
                a.status = status;
                a.decided_at = Some(chrono::Utc::now());
                a.decided_by = Some("alice".into());
                a.reason = (status == ApprovalStatus::Rejected).then(|| "not today".into());
            }
        }
        self.shared.decided.notify_waiters();
    }

    /// Answers every pending question with `text`, as `alice`, and wakes the long-polls.
    pub(super) fn answer(&self, text: &str) {
        for a in self.shared.approvals.lock().unwrap().iter_mut() {
            if a.status == ApprovalStatus::Pending && a.kind == ApprovalKind::Question {
                a.status = ApprovalStatus::Answered;
                a.decided_at = Some(chrono::Utc::now());
                a.decided_by = Some("alice".into());
                a.answer = Some(text.into());
            }
        }
        self.shared.decided.notify_waiters();
    }

    /// Handoffs the runner tried to file so far.
    pub(super) fn handoffs_opened(&self) -> u64 {
        self.shared.handoffs_opened.load(Ordering::SeqCst)
    }

    /// Keeps a commit's requests to people, pending (a key already stored keeps its request).
    fn keep_approvals(&self, request: &CommitRequest) {
        let now = chrono::Utc::now();
        let mut stored = self.shared.approvals.lock().unwrap();
        for a in &request.approvals {
            if stored.iter().any(|s| s.key == a.key) {
                continue;
            }
            stored.push(Approval {
                id: a.id,
                thread_id: self.thread,
                labels: Default::default(),
                epoch: request.epoch,
                turn_seq: a.turn_seq,
                key: a.key.clone(),
                call_id: a.call_id.clone(),
                kind: a.kind,
                tool: a.tool.clone(),
                args: a.args.clone(),
                args_hash: a.args_hash.clone(),
                status: ApprovalStatus::Pending,
                requested_at: now,
                expires_at: now + chrono::Duration::seconds(a.timeout_secs as i64),
                decided_at: None,
                decided_by: None,
                reason: None,
                answer: None,
                raise: a.raise.clone(),
            });
        }
    }

    /// The objects stored so far, in order.
    pub(super) fn puts(&self) -> Vec<(ObjectId, ObjectKind)> {
        self.shared.puts.lock().unwrap().clone()
    }

    /// Object IDs the runner has asked the store about so far.
    pub(super) fn asked(&self) -> u64 {
        self.shared.asked.load(Ordering::SeqCst)
    }

    /// Forgets a stored object (a dropped snapshot's).
    pub(super) fn drop_object(&self, id: &ObjectId) {
        self.memory.drop_object(id);
    }

    /// Loses `id` just before each of the next `times` commits that end a turn with a
    /// snapshot.
    pub(super) fn lose_at_turn_ends(&self, id: ObjectId, times: u32) {
        *self.shared.lose.lock().unwrap() = Some((id, times));
    }

    /// Puts a `rewind` control to turn `to_turn` in the inbox (queued by `ana`).
    pub(super) fn rewind(&self, to_turn: u64) -> u64 {
        let mut inbox = self.shared.inbox.lock().unwrap();
        let seq = inbox.len() as u64 + 1;
        inbox.push(InboxMessage {
            seq,
            content: String::new(),
            dedupe_key: None,
            created_at: chrono::Utc::now(),
            handoff: None,
            control: Some(Control::Rewind),
            mode: ninetrix_proto::api::MessageMode::Queue,
            by: Some("ana".to_string()),
            to_turn: Some(to_turn),
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
        if request
            .turn_end
            .as_ref()
            .is_some_and(|t| t.snapshot.is_some())
        {
            let mut lose = self.shared.lose.lock().unwrap();
            if let Some((id, times)) = lose.as_mut()
                && *times > 0
            {
                *times -= 1;
                self.memory.drop_object(id);
            }
        }
        let done = self.memory.commit(request).await?;
        self.keep_approvals(request);
        self.shared.commits.send_replace(n);
        self.store_events(request.events.iter().cloned());
        Ok(done)
    }

    async fn turn_ledger(&self, turn_seq: u64) -> Result<Vec<ToolCallRecord>, CheckpointError> {
        self.memory.turn_ledger(turn_seq).await
    }

    /// The API's long-poll of a turn's requests to people: at once when more than `settled`
    /// are settled or none is pending, else when one is decided or after `wait`. (Memory alone
    /// refuses: without an API nobody could decide.)
    async fn approvals(
        &self,
        turn_seq: u64,
        settled: u64,
        wait: Duration,
    ) -> Result<Vec<Approval>, CheckpointError> {
        self.check()?;
        let decided = self.shared.decided.notified();
        tokio::pin!(decided);
        decided.as_mut().enable();
        let of_turn = || -> Vec<Approval> {
            let stored = self.shared.approvals.lock().unwrap();
            stored
                .iter()
                .filter(|a| a.turn_seq == turn_seq)
                .cloned()
                .collect()
        };
        let now = of_turn();
        let count = now.iter().filter(|a| a.status.is_settled()).count() as u64;
        let pending = now.iter().any(|a| a.status == ApprovalStatus::Pending);
        if wait.is_zero() || count > settled || !pending {
            return Ok(now);
        }
        let _ = tokio::time::timeout(wait, decided).await;
        Ok(of_turn())
    }

    async fn open_handoff(&self, request: &HandoffRequest) -> Result<Handoff, CheckpointError> {
        self.shared.handoffs_opened.fetch_add(1, Ordering::SeqCst);
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

    async fn turn_point(&self, turn_seq: u64) -> Result<TurnPoint, CheckpointError> {
        self.check()?;
        self.memory.turn_point(turn_seq).await
    }

    async fn missing_objects(&self, ids: Vec<ObjectId>) -> Result<Vec<ObjectId>, CheckpointError> {
        self.check()?;
        self.shared
            .asked
            .fetch_add(ids.len() as u64, Ordering::SeqCst);
        self.memory.missing_objects(ids).await
    }

    async fn put_object(
        &self,
        id: &ObjectId,
        kind: ObjectKind,
        bytes: Vec<u8>,
    ) -> Result<(), CheckpointError> {
        self.check()?;
        self.shared.puts.lock().unwrap().push((id.clone(), kind));
        self.memory.put_object(id, kind, bytes).await
    }

    async fn get_object(&self, id: &ObjectId) -> Result<Vec<u8>, CheckpointError> {
        self.check()?;
        self.memory.get_object(id).await
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
        jobs_url: None,
        replay: None,
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
        Driver::start_with(store, config, None)
    }

    /// Boots a driver on `store`'s thread that stops once its inbox is served and no turn is
    /// left, as a session's (and a replay's) runner does.
    pub(super) fn start_until_idle(store: &TestStore, config: &Config) -> Driver {
        Driver::spawn(store, config, None, true)
    }

    /// Boots a driver on `store`'s thread whose model calls lease from `permits`.
    pub(super) fn start_with(
        store: &TestStore,
        config: &Config,
        permits: Option<Arc<dyn crate::limits::Permits>>,
    ) -> Driver {
        Driver::spawn(store, config, permits, false)
    }

    fn spawn(
        store: &TestStore,
        config: &Config,
        permits: Option<Arc<dyn crate::limits::Permits>>,
        until_idle: bool,
    ) -> Driver {
        let health = Health::new(None);
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(run_with(
            store.clone(),
            super::boot::Leases {
                permits,
                replica: None,
            },
            config.clone(),
            reqwest::Client::new(),
            health.clone(),
            shutdown.clone(),
            until_idle,
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

mod a2a;
mod replay;
mod snapshots;

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

/// Pool-wide limits and budgets beyond a run, with the in-memory permits.
#[cfg(test)]
mod limits_tests {
    use super::*;
    use crate::health::Activity;
    use crate::limits::{MemoryPermits, Permits, limiter_name};
    use ninetrix_proto::api::{
        BudgetScope, LeaseRelease, LeaseRequest, LeaseResponse, ModelLimits, OnBudgetExceeded,
    };

    /// A durable agent that answers `Done.` at once, with a session budget of $1.
    fn budgeted(workspace: &Path, on: OnBudgetExceeded) -> Config {
        let mut spec = agent(
            "    runtime:
      provider: scripted
      script:
        - text: Done.
    execution: { durability: true }
",
        );
        spec.governance.max_budget_per_session = Some(1.0);
        spec.governance.on_budget_exceeded = on;
        config(spec, workspace)
    }

    fn last_completed(store: &TestStore) -> serde_json::Value {
        store
            .events_of("turn_completed")
            .pop()
            .expect("a turn_completed")
    }

    /// Polls `check` every 10 ms (of paused time) until it holds, up to the deadline.
    async fn until(what: &str, check: impl Fn() -> bool) {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        while !check() {
            assert!(tokio::time::Instant::now() < deadline, "never: {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_turn_over_the_session_budget_stops_with_a_reply_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = TestStore::new();
        let permits = MemoryPermits::new();
        permits.set_spent(1.25);
        let config = budgeted(dir.path(), OnBudgetExceeded::Stop);
        let driver = Driver::start_with(&store, &config, Some(Arc::new(permits.clone())));
        store.send("go");
        store.until_event("turn_completed", 1).await;
        let done = last_completed(&store);
        assert_eq!(done["ok"], false);
        assert_eq!(
            done["reply"],
            "Stopped: this session's budget is spent ($1.25 of $1.00, \
             governance.max_budget_per_session). Start the conversation over with `ninetrix \
             reset`, or raise it in the agentfile."
        );
        let exceeded = store.events_of("budget_exceeded");
        assert_eq!(exceeded[0]["scope"]["scope"], "session");
        // The call was never made: its lease request carried the budgets and was refused.
        let asked = permits.requests();
        assert_eq!(asked.len(), 1);
        assert_eq!(
            asked[0].budgets.as_ref().and_then(|b| b.per_session_usd),
            Some(1.0)
        );
        assert!(
            permits.releases().is_empty(),
            "no lease, nothing to release"
        );
        let thread = store.thread().await;
        assert!(thread.history.is_empty(), "the conversation is as it was");
        assert_eq!(thread.state.inbox_cursor, 1, "the message is answered once");
        // The runner serves on: a later turn meets the same budget.
        store.send("again");
        store.until_event("turn_completed", 2).await;
        assert_eq!(last_completed(&store)["ok"], false);
        driver.shutdown.cancel();
        assert_eq!(driver.exit().await, Exit::Ok);
    }

    #[tokio::test(start_paused = true)]
    async fn ask_human_waits_for_a_raise_and_goes_on_once_it_is_approved() {
        let dir = tempfile::tempdir().unwrap();
        let store = TestStore::new();
        let permits = MemoryPermits::new();
        permits.set_spent(1.25);
        let config = budgeted(dir.path(), OnBudgetExceeded::AskHuman);
        let driver = Driver::start_with(&store, &config, Some(Arc::new(permits.clone())));
        store.send("go");
        store.until_event("approval_requested", 1).await;
        let requested = store.events_of("approval_requested");
        assert_eq!(requested[0]["kind"], "budget");
        assert_eq!(
            requested[0]["args"],
            "raise this session's budget by $1.00?"
        );
        let stored = store.approvals_stored();
        assert_eq!(stored.len(), 1);
        assert_eq!(
            stored[0].raise.as_ref().map(|r| (&r.scope, r.amount_usd)),
            Some((&BudgetScope::Session, 1.0))
        );
        until("the health says it waits for a person", || {
            matches!(driver.health.activity(), Activity::Waiting { .. })
        })
        .await;
        assert_eq!(store.thread().await.state.status, ThreadStatus::Waiting);
        // A person approves; the API counts the raise.
        permits.raise(BudgetScope::Session, 1.0);
        store.decide(ApprovalStatus::Approved);
        store.until_event("turn_completed", 1).await;
        let done = last_completed(&store);
        assert_eq!(
            (done["ok"].as_bool(), done["reply"].as_str()),
            (Some(true), Some("Done."))
        );
        let thread = store.thread().await;
        assert_eq!(thread.state.status, ThreadStatus::Idle);
        assert_eq!(thread.history.len(), 2, "the input and the answer");
        assert_eq!(
            permits.releases().len(),
            1,
            "the answered call's lease is released"
        );
        driver.shutdown.cancel();
        assert_eq!(driver.exit().await, Exit::Ok);
    }

    #[tokio::test(start_paused = true)]
    async fn a_runner_restarted_while_it_waits_for_a_raise_waits_for_the_same_request() {
        let dir = tempfile::tempdir().unwrap();
        let store = TestStore::new();
        let permits = MemoryPermits::new();
        permits.set_spent(1.25);
        let config = budgeted(dir.path(), OnBudgetExceeded::AskHuman);
        let first = Driver::start_with(&store, &config, Some(Arc::new(permits.clone())));
        store.send("go");
        store.until_event("approval_requested", 1).await;
        first.kill().await;
        let second = Driver::start_with(&store, &config, Some(Arc::new(permits.clone())));
        store.until_event("ready", 2).await;
        until("the restarted runner waits for the person", || {
            matches!(second.health.activity(), Activity::Waiting { .. })
        })
        .await;
        assert_eq!(store.approvals_stored().len(), 1, "no second request");
        assert_eq!(
            permits.requests().len(),
            1,
            "no model call is tried while the request stands"
        );
        permits.raise(BudgetScope::Session, 1.0);
        store.decide(ApprovalStatus::Approved);
        store.until_event("turn_completed", 1).await;
        assert_eq!(last_completed(&store)["reply"], "Done.");
        second.shutdown.cancel();
        assert_eq!(second.exit().await, Exit::Ok);
    }

    #[tokio::test(start_paused = true)]
    async fn ask_human_rejected_stops_the_turn_with_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let store = TestStore::new();
        let permits = MemoryPermits::new();
        permits.set_spent(1.25);
        let config = budgeted(dir.path(), OnBudgetExceeded::AskHuman);
        let driver = Driver::start_with(&store, &config, Some(Arc::new(permits.clone())));
        store.send("go");
        store.until_event("approval_requested", 1).await;
        store.decide(ApprovalStatus::Rejected);
        store.until_event("turn_completed", 1).await;
        let done = last_completed(&store);
        assert_eq!(done["ok"], false);
        let reply = done["reply"].as_str().unwrap();
        assert!(
            reply.contains("alice rejected raising it by $1.00"),
            "{reply}"
        );
        assert!(reply.contains("not today"), "{reply}");
        let thread = store.thread().await;
        assert!(
            thread.history.is_empty(),
            "the unanswered input is cut again"
        );
        assert_eq!(thread.state.status, ThreadStatus::Idle);
        driver.shutdown.cancel();
        assert_eq!(driver.exit().await, Exit::Ok);
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_waiting_for_a_slot_says_so_in_the_health_and_traces_the_wait() {
        let dir = tempfile::tempdir().unwrap();
        let store = TestStore::new();
        let permits = MemoryPermits::new();
        let mut spec = agent(
            "    runtime:
      provider: scripted
      script:
        - text: Done.
    execution: { durability: true }
",
        );
        spec.runtime.limits = ModelLimits {
            max_in_flight: Some(1),
            ..ModelLimits::default()
        };
        let config = config(spec, dir.path());
        // Another runner of the pool holds the limiter's one slot.
        let limiter = limiter_name("scripted", "scripted", None);
        let held = LeaseRequest {
            epoch: 1,
            limiter: limiter.clone(),
            provider: "scripted".into(),
            limits: config.spec.runtime.limits.clone(),
            budgets: None,
            estimated_tokens: 0,
            wait_ms: 0,
        };
        let LeaseResponse::Granted { lease_id, .. } = permits.acquire(&held).await.unwrap() else {
            panic!("the slot is free")
        };
        let driver = Driver::start_with(&store, &config, Some(Arc::new(permits.clone())));
        store.send("go");
        until("the health says it waits for a slot", || {
            matches!(driver.health.activity(), Activity::ModelSlot { .. })
        })
        .await;
        let (healthy, line) = health::judge(
            &driver.health.report(),
            chrono::Utc::now().timestamp_millis(),
        );
        assert!(healthy, "a wait is not a failure: {line}");
        assert_eq!(line, "waiting for a model slot (scripted: 1/1 in flight)");
        assert!(permits.waits() > 0);
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(
            store.events_of("turn_completed").is_empty(),
            "still waiting"
        );
        // The slot is freed: the call is made, the wait is traced, the health goes back.
        permits
            .release(lease_id, &LeaseRelease::default())
            .await
            .unwrap();
        store.until_event("turn_completed", 1).await;
        assert_eq!(last_completed(&store)["ok"], true);
        let waited = store.events_of("model_waited");
        assert_eq!(waited.len(), 1, "{:?}", store.event_kinds());
        assert_eq!(waited[0]["provider"], "scripted");
        assert_eq!(waited[0]["wait"]["reason"], "in_flight");
        assert!(waited[0]["waited_ms"].as_u64().unwrap() >= 5_000);
        assert_eq!(permits.peak(&limiter), 1, "never more than the limit");
        until("the lease is released", || permits.in_flight(&limiter) == 0).await;
        assert!(!matches!(
            driver.health.activity(),
            Activity::ModelSlot { .. }
        ));
        driver.shutdown.cancel();
        assert_eq!(driver.exit().await, Exit::Ok);
    }

    #[tokio::test(start_paused = true)]
    async fn without_limits_or_budgets_no_lease_is_asked() {
        let dir = tempfile::tempdir().unwrap();
        let store = TestStore::new();
        let permits = MemoryPermits::new();
        let config = config(
            agent(
                "    runtime:
      provider: scripted
      script:
        - text: Done.
    execution: { durability: true }
",
            ),
            dir.path(),
        );
        let driver = Driver::start_with(&store, &config, Some(Arc::new(permits.clone())));
        store.send("go");
        store.until_event("turn_completed", 1).await;
        assert!(permits.requests().is_empty(), "zero cost without limits");
        driver.shutdown.cancel();
        assert_eq!(driver.exit().await, Exit::Ok);
    }
}
