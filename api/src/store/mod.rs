//! Storage for the checkpoint API: one [`Store`] over SQLite or Postgres, chosen by URL scheme.
//!
//! Both backends run the same queries (`ops/`, one generic function per operation, called with
//! the backend's connection through `conn`) on the same schema (one migration folder each). What differs is how a write transaction runs: SQLite has one
//! writer task that group-commits concurrent writes (`sqlite.rs`); Postgres runs each write in
//! its own transaction, serialised per thread by a row lock (`postgres.rs`). A write is
//! acknowledged only after its transaction has committed durably.

pub(crate) mod checks;
mod codec;
mod conn;
mod latest;
mod ops;
mod postgres;
mod sqlite;
mod triggers;

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use ninetrix_proto::api::{
    Approval, ApprovalStatus, BudgetSpent, CancelRequest, CancelResponse, CheckpointCreated,
    CheckpointRequest, ClaimRequest, ClaimResponse, CommitRequest, CommitResponse, DecisionRequest,
    EnqueueRequest, EnqueueResponse, ErrorCode, EvalMember, EvalMemberRequest, EvalRunRequest,
    EvalRunStored, EvalSuite, EvalSuiteList, Event, EventsRequest, ForkRequest, ForkResponse,
    Handoff, HandoffRequest, InboxMessage, LeaseRelease, LeaseRequest, MemoryCommand, MemoryFile,
    MemoryFileContent, MemoryOpRequest, MemoryOpResult, MissingObjectsResponse, RecordedTurn,
    ReplayCreated, ReplayRequest, RewindQueued, RewindRequest, RunningTurn, Spend, ThreadLabels,
    ThreadState, ThreadStatus, ThreadSummary, ToolCallCompletion, ToolCallIntent, ToolCallRecord,
    Trigger, TriggerEvent, TriggerSet, TriggersApplied, TurnDiff, TurnList, TurnPoint,
    VersionDetail, VersionSummary,
};

pub use crate::limit_rules::LimiterKey;
use ninetrix_proto::snapshots::{ObjectId, ObjectKind};
use ninetrix_proto::{ApprovalId, LeaseId, ThreadId};
pub use ops::Decided;
pub use ops::LeaseOutcome;
pub use ops::Purge;
pub use ops::{
    A2aTask, Answered, NewTask, PushResult, PushTarget, TaskAnswer, TaskFilter, TaskPage,
};
pub use ops::{MemoryFilter, MemorySpace};
pub use ops::{SessionOf, Wake};
pub use postgres::PostgresStore;
pub use sqlite::{SqliteStore, WriterStats};
pub(crate) use triggers::body_digest_key;
pub use triggers::{Fired, HookDelivery, HookTarget};

/// Why a store operation failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The thread does not exist (or has no such item).
    #[error("{0} not found")]
    NotFound(&'static str),
    /// The writer's epoch is not the thread's current epoch.
    #[error("epoch {given} is stale: the thread is at epoch {current}; another runner claimed it")]
    Fenced {
        /// The epoch in the request.
        given: u64,
        /// The thread's epoch.
        current: u64,
    },
    /// `parent_version` is not the thread's latest version.
    #[error("parent_version {given} does not match the latest version {head}")]
    VersionConflict {
        /// The parent in the request.
        given: u64,
        /// The thread's latest version.
        head: u64,
    },
    /// A request that cannot apply to the thread as it is (answered with 422 and `code`).
    #[error("{message}")]
    Invalid {
        /// Which rule the request breaks.
        code: ErrorCode,
        /// What is wrong.
        message: String,
    },
    /// The ledger entry already has a different outcome.
    #[error("tool call {key} already has a different outcome recorded")]
    AlreadyCompleted {
        /// The ledger key.
        key: String,
    },
    /// A claim names a session the thread is not (409 `session_mismatch`).
    #[error(
        "thread {thread} is not the thread of session `{key}`; a session's thread is opened with POST /v1/sessions"
    )]
    SessionMismatch {
        /// The thread.
        thread: ThreadId,
        /// The session the claim named.
        key: String,
    },
    /// A claim or a mint gives a label with another value than the thread's (409 `labels_fixed`):
    /// labels are fixed when a thread is created.
    #[error(
        "thread {thread} has {field} {} and keeps it: a thread's labels are fixed when it is created, so `{field}` cannot become {asked:?}; a runner of another {field} needs a thread of its own (minted with POST /v1/tokens/runner for a new thread ID, as `ninetrix up` does)",
        stored.as_deref().map_or_else(|| "no value".to_string(), |s| format!("{s:?}"))
    )]
    LabelsFixed {
        /// The thread.
        thread: ThreadId,
        /// Which label.
        field: &'static str,
        /// The thread's value.
        stored: Option<String>,
        /// The value asked for.
        asked: String,
    },
    /// A handoff to an agent the caller may not hand work to (403 `not_collaborator`): why.
    #[error("{0}")]
    NotCollaborator(String),
    /// No trigger of that name in the pool (404): which.
    #[error("{0}")]
    UnknownTrigger(String),
    /// A commit's handoff reply names no handoff delivered to its thread (404).
    #[error("no handoff `{0}` was delivered to this thread")]
    UnknownHandoff(String),
    /// The thread was purged (410 `purged`): it stays purged, its ID is never used again.
    #[error("thread {0} was purged; a purged thread is never used again: start a new thread")]
    Purged(ThreadId),
    /// A message sent with mode `reject` (its own, or the agent's default) found the thread in a
    /// turn or about to start one (409 `busy`, the body naming the turn): nothing was stored.
    #[error(
        "thread {thread} is {} turn {} (message {}); send with mode queue to wait for it, steer to join it, or interrupt to stop it",
        if *started { "in" } else { "about to start" },
        running.turn_seq,
        running.seq
    )]
    Busy {
        /// The thread.
        thread: ThreadId,
        /// The turn it is in, or about to start.
        running: RunningTurn,
        /// Whether that turn has started (else a message waits after the cursor for it).
        started: bool,
    },
    /// A rewind found the thread in a turn or about to start one (409 `busy`, the body naming
    /// the turn): nothing was queued.
    #[error(
        "thread {thread} is {} turn {} (message {}); a rewind is refused while a turn runs or messages wait: rewind once the thread is idle (or cancel the turn first)",
        if *started { "in" } else { "about to start" },
        running.turn_seq,
        running.seq
    )]
    RewindBusy {
        /// The thread.
        thread: ThreadId,
        /// The turn it is in, or about to start.
        running: RunningTurn,
        /// Whether that turn has started.
        started: bool,
    },
    /// Objects a snapshot refers to are not stored (409 `missing_objects`): which, and what to do.
    #[error("{0}")]
    MissingObjects(String),
    /// A fork or a rewind to a turn whose snapshot was dropped (409 `snapshot_dropped`).
    #[error("{0}")]
    SnapshotDropped(String),
    /// Nothing there (404), with a message that says what there is instead.
    #[error("{0}")]
    Absent(String),
    /// A ledger key or an inbox `dedupe_key` is stored with another payload (409 `key_reused`).
    #[error("{0}")]
    KeyReused(String),
    /// The database URL names no supported backend.
    #[error("the database URL must start with sqlite:// or postgres://")]
    UnsupportedUrl,
    /// The database failed. The text is for logs only, never for clients.
    #[error("database error: {0}")]
    Database(Arc<str>),
    /// Stored data could not be read back (corruption or a schema mismatch).
    #[error("stored data is unreadable: {0}")]
    Corrupt(Arc<str>),
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        StoreError::Database(e.to_string().into())
    }
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError::Database(e.to_string().into())
    }
}

impl From<sqlx::migrate::MigrateError> for StoreError {
    fn from(e: sqlx::migrate::MigrateError) -> Self {
        StoreError::Database(format!("migration failed: {e}").into())
    }
}

impl crate::labels::LabelChanged {
    /// The store's refusal of this change on `thread` (409 `labels_fixed`).
    pub(crate) fn refused(self, thread: ThreadId) -> StoreError {
        StoreError::LabelsFixed {
            thread,
            field: self.field,
            stored: self.stored,
            asked: self.asked,
        }
    }
}

/// Shorthand for store results.
pub type StoreResult<T> = Result<T, StoreError>;

/// Filters for listing threads.
#[derive(Clone, Debug, Default)]
pub struct ThreadFilter {
    /// Only this pool.
    pub pool: Option<String>,
    /// Only this agent.
    pub agent: Option<String>,
    /// Only this status.
    pub status: Option<ThreadStatus>,
    /// Only sessions' threads.
    pub sessions: bool,
    /// Only the thread of this session key.
    pub session: Option<String>,
    /// At most this many.
    pub limit: u32,
    /// Skip this many.
    pub offset: u32,
}

/// Which handoffs a listing returns.
#[derive(Clone, Debug, Default)]
pub struct HandoffFilter {
    /// Only this pool.
    pub pool: Option<String>,
    /// Only those this (caller's) thread made.
    pub thread: Option<ThreadId>,
    /// Only the one delivered to this (collaborator's session) thread.
    pub target: Option<ThreadId>,
    /// At most this many.
    pub limit: u32,
    /// Skip this many.
    pub offset: u32,
}

/// Filters for listing requests to people.
#[derive(Clone, Debug, Default)]
pub struct ApprovalFilter {
    /// Only this pool.
    pub pool: Option<String>,
    /// Only this agent.
    pub agent: Option<String>,
    /// Only this thread.
    pub thread: Option<ThreadId>,
    /// Only requests standing so (`pending` leaves out the expired).
    pub status: Option<ApprovalStatus>,
    /// At most this many.
    pub limit: u32,
    /// Skip this many.
    pub offset: u32,
}

/// The checkpoint store: SQLite or Postgres.
#[derive(Clone)]
pub enum Store {
    /// A SQLite file.
    Sqlite(SqliteStore),
    /// A Postgres database.
    Postgres(PostgresStore),
}

/// Tuning for [`Store::open`].
#[derive(Clone, Debug)]
pub struct StoreOptions {
    /// Most writes group-committed in one SQLite transaction.
    pub max_batch: usize,
    /// Connections for reads (SQLite) or for everything (Postgres).
    pub max_connections: u32,
    /// Bytes of assembled histories kept for `latest` (0: none).
    pub latest_cache_bytes: usize,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            max_batch: 256,
            max_connections: 8,
            latest_cache_bytes: 64 << 20,
        }
    }
}

macro_rules! dispatch {
    ($self:ident, $s:ident => $call:expr) => {
        match $self {
            Store::Sqlite($s) => $call.await,
            Store::Postgres($s) => $call.await,
        }
    };
}

impl Store {
    /// Opens (creating and migrating as needed) the store at `url`: `sqlite://PATH` (or
    /// `sqlite:PATH`) or `postgres://…`.
    pub async fn open(url: &str, options: &StoreOptions) -> StoreResult<Store> {
        if url.starts_with("sqlite:") {
            Ok(Store::Sqlite(SqliteStore::open(url, options).await?))
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Store::Postgres(PostgresStore::open(url, options).await?))
        } else {
            Err(StoreError::UnsupportedUrl)
        }
    }

    /// What SQLite's writer thread has done so far (group commits, writes, time in statements
    /// and in commits); `None` on Postgres, which has no writer thread.
    pub fn writer_stats(&self) -> Option<WriterStats> {
        match self {
            Store::Sqlite(s) => Some(s.writer_stats()),
            Store::Postgres(_) => None,
        }
    }

    /// The backend's name.
    pub fn backend(&self) -> &'static str {
        match self {
            Store::Sqlite(_) => "sqlite",
            Store::Postgres(_) => "postgres",
        }
    }

    /// How often a long-poll or an event stream re-reads the store on its own. A SQLite file has
    /// one API process, which notifies its waiters of every write it commits: never (an idle pool
    /// of 500 runners long-polling cost this API 500 reads a second). On Postgres another API
    /// replica may write without notifying this one: every second.
    pub fn recheck_every(&self) -> Option<Duration> {
        match self {
            Store::Sqlite(_) => None,
            Store::Postgres(_) => Some(Duration::from_secs(1)),
        }
    }

    /// Checks the database answers.
    pub async fn ping(&self) -> StoreResult<()> {
        dispatch!(self, s => s.ping())
    }

    /// Stops background work and closes connections after pending writes finish.
    pub async fn close(&self) {
        dispatch!(self, s => s.close())
    }

    /// The latest state as the JSON of a [`ThreadState`], assembled without decoding the stored
    /// messages (what `GET latest` sends), from the cached history of the thread when it can be.
    pub async fn latest_json(&self, id: ThreadId) -> StoreResult<Option<String>> {
        match self {
            Store::Sqlite(s) => {
                let mut conn = s.reader().await?;
                let mut tx = sqlite::snapshot(&mut conn).await?;
                let json = ops::latest_json(&mut *tx, id, s.latest_cache()).await;
                tx.commit().await?;
                json
            }
            Store::Postgres(s) => {
                let mut conn = s.reader().await?;
                let mut tx = postgres::snapshot(&mut conn).await?;
                let json = ops::latest_json(&mut *tx, id, s.latest_cache()).await;
                tx.commit().await?;
                json
            }
        }
    }

    /// Deletes every trace of the thread but its tombstone (its ID is never used again).
    /// `crash` is called before the commit of a purge that deletes something (the kill point
    /// `purge_before_commit`).
    pub async fn purge(&self, id: ThreadId, crash: fn(&str)) -> StoreResult<Purge> {
        let purged = self.purge_rows(id, crash).await;
        match self {
            Store::Sqlite(s) => s.latest_cache().forget(id),
            Store::Postgres(s) => s.latest_cache().forget(id),
        }
        purged
    }

    /// The assembled latest state, or `None` before the first checkpoint.
    pub async fn latest(&self, id: ThreadId) -> StoreResult<Option<ThreadState>> {
        match self.latest_json(id).await? {
            None => Ok(None),
            Some(json) => serde_json::from_str(&json)
                .map(Some)
                .map_err(|e| StoreError::Corrupt(format!("assembled state: {e}").into())),
        }
    }
}

/// Declares each store operation once: its doc, its signature, and the operation it runs (from
/// `ops`, called with each backend's connection). `write` runs it as one durable transaction (SQLite's
/// group commit, Postgres' own transaction); `read` on a pooled connection.
macro_rules! store_ops {
    ($(
        $(#[doc = $doc:literal])*
        $kind:ident fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty
            = |$c:ident| $op:ident($($call:tt)*);
    )*) => {
        impl Store {
            $(
                $(#[doc = $doc])*
                pub async fn $name(&self, $($arg: $ty),*) -> StoreResult<$ret> {
                    match self {
                        Store::Sqlite(s) => store_ops!(@sqlite $kind s, $c, $op($($call)*)),
                        Store::Postgres(s) => store_ops!(@postgres $kind s, $c, $op($($call)*)),
                    }
                }
            )*
        }
    };
    // SQLite's writes run on the writer thread's rusqlite connection; their futures never wait.
    (@sqlite write $s:ident, $c:ident, $op:ident($($call:tt)*)) => {
        $s.write(move |$c| conn::rsq::run(ops::$op($($call)*))).await
    };
    (@sqlite read $s:ident, $c:ident, $op:ident($($call:tt)*)) => {
        store_ops!(@read $s, $c, sqlite, $op($($call)*))
    };
    (@postgres write $s:ident, $c:ident, $op:ident($($call:tt)*)) => {
        $s.write(move |$c| Box::pin(async move { ops::$op($($call)*).await })).await
    };
    (@postgres read $s:ident, $c:ident, $op:ident($($call:tt)*)) => {
        store_ops!(@read $s, $c, postgres, $op($($call)*))
    };
    // A read runs in one read transaction: the rows it assembles are one snapshot, whatever
    // commits meanwhile.
    (@read $s:ident, $c:ident, $backend:ident, $op:ident($($call:tt)*)) => {{
        let mut conn = $s.reader().await?;
        let mut tx = $backend::snapshot(&mut conn).await?;
        let $c = &mut *tx;
        let read = ops::$op($($call)*).await;
        tx.commit().await?;
        read
    }};
}

store_ops! {
    /// Creates the thread if new with the labels given; returns its labels (fixed at creation:
    /// others are 409 `labels_fixed`).
    write fn ensure_thread(id: ThreadId, labels: ThreadLabels) -> ThreadLabels
        = |c| ensure_thread(c, id, &labels, crate::labels::Stating::Mint, now_ms());

    /// Claims the thread: a new epoch, one more boot; the claim's `on_message_while_busy`, when
    /// given, becomes the mode of messages sent without one. The older epochs' live model
    /// leases are freed in the same transaction: also returns their limiters, to wake.
    write fn claim(id: ThreadId, request: ClaimRequest, stating: crate::labels::Stating) -> (ClaimResponse, Vec<LimiterKey>)
        = |c| claim_freeing(c, id, &request, stating, now_ms());

    /// A model lease for the thread's runner (see `ops::lease`): granted for `ttl_ms`, a wait,
    /// or a spent budget. `crash` is called before the commit of a grant
    /// (`lease_before_commit`).
    write fn lease(id: ThreadId, request: LeaseRequest, ttl_ms: i64, crash: fn(&str)) -> LeaseOutcome
        = |c| lease(c, id, &request, ttl_ms, now_ms, crash);

    /// A lease request's refusal before any limit, read without a lock: a spent budget (`Some`),
    /// or `fenced`/`purged`.
    read fn lease_refusal(id: ThreadId, request: LeaseRequest) -> Option<BudgetSpent>
        = |c| lease_refusal(c, id, &request, now_ms());

    /// Extends a live lease of the thread's epoch by `ttl_ms` from now; returns its new expiry
    /// (Unix ms).
    write fn renew_lease(id: ThreadId, lease: LeaseId, ttl_ms: i64) -> i64
        = |c| renew_lease(c, id, lease, ttl_ms, now_ms());

    /// Releases a lease once with what its call used (see `ops::release_lease`); returns its
    /// limiter when the release recorded something (its waiters to wake). `crash` is called
    /// before the commit of a first release (`release_before_commit`).
    write fn release_lease(id: ThreadId, lease: LeaseId, release: LeaseRelease, crash: fn(&str)) -> Option<LimiterKey>
        = |c| release_lease(c, id, lease, &release, now_ms, crash);

    /// Appends a checkpoint version.
    write fn append_checkpoint(id: ThreadId, request: CheckpointRequest) -> CheckpointCreated
        = |c| append_checkpoint(c, id, &request, now_ms());

    /// One durable step in one transaction: a checkpoint version, ledger intents and outcomes.
    /// Also returns the thread of the caller whose handoff the commit answered.
    write fn commit(id: ThreadId, request: CommitRequest) -> (CommitResponse, Option<ThreadId>)
        = |c| commit(c, id, &request, now_ms());

    /// Hands a call's task to a collaborator, once (see `ops::open_handoff`); `true` when made
    /// now, `false` for the handoff the same call made before. `as_labels`: the runner token's
    /// labels (whose agent hands work), `None` for the admin (the thread's own).
    write fn open_handoff(caller: ThreadId, request: HandoffRequest, as_labels: Option<ThreadLabels>) -> (Handoff, bool)
        = |c| open_handoff(c, caller, &request, as_labels.as_ref(), now_ms());

    /// Records a tool call's intent, or returns the existing record for the key (`true` when new).
    write fn record_intent(id: ThreadId, intent: ToolCallIntent) -> (ToolCallRecord, bool)
        = |c| record_intent(c, id, &intent, now_ms());

    /// Records a tool call's outcome.
    write fn complete_tool_call(
        id: ThreadId,
        key: String,
        completion: ToolCallCompletion
    ) -> ToolCallRecord
        = |c| complete_tool_call(c, id, &key, &completion, now_ms());

    /// Puts a message in the thread's inbox (creating the thread if new) with its mode resolved
    /// against the turn the thread is in (see `ops::enqueue`); also returns whom to wake.
    write fn enqueue(id: ThreadId, request: EnqueueRequest) -> (EnqueueResponse, Wake)
        = |c| enqueue(c, id, &request, now_ms());

    /// Cancels the thread's turn, recorded as sent by `by` (see `ops::cancel`); also returns
    /// whom to wake.
    write fn cancel(id: ThreadId, request: CancelRequest, by: String, crash: fn(&str)) -> (CancelResponse, Wake)
        = |c| cancel(c, id, &request, &by, now_ms(), crash);

    /// Appends trace events; returns the last seq.
    write fn append_events(id: ThreadId, request: EventsRequest) -> u64
        = |c| append_events(c, id, &request, now_ms());

    /// Records a person's decision on a request (once; see `ops::decide`). `by` is recorded as
    /// who decided; `pool`, when given (an approver's), must be the request's pool. Returns the
    /// request's thread and what the decision did.
    write fn decide(
        approval: ApprovalId,
        decision: DecisionRequest,
        by: String,
        pool: Option<String>
    ) -> (ThreadId, Decided)
        = |c| decide(c, approval, &decision, &by, pool.as_deref(), now_ms());

    /// The thread of a session (created on first use); `true` when created now.
    write fn open_session(pool: String, agent: String, key: String) -> (ThreadSummary, bool)
        = |c| open_session(c, &pool, &agent, &key, now_ms());

    /// The thread of replica `replica` of (pool, agent), made or adopted on first use and made
    /// anew after a purge (see `ops::replica_thread`); `true` when made now. `crash` is called
    /// before the commit of a write that made a thread (`replica_thread_before_commit`).
    write fn replica_thread(pool: String, agent: String, replica: u32, crash: fn(&str)) -> (ThreadSummary, bool)
        = |c| replica_thread(c, &pool, &agent, replica, now_ms(), crash);

    /// Records how many replicas an agent runs (what its sessions are spread over), its
    /// collaborators and its A2A card.
    write fn set_replicas(pool: String, agent: String, replicas: u32, collaborators: Vec<String>, card: Option<ninetrix_proto::api::AgentCardInfo>) -> ()
        = |c| set_replicas(c, &pool, &agent, replicas, &collaborators, card.as_ref(), now_ms());

    /// The A2A card `up` recorded for an agent: `None` when the agent was not recorded,
    /// `Some(None)` when it was without one.
    read fn a2a_card(pool: String, agent: String) -> Option<Option<ninetrix_proto::api::AgentCardInfo>>
        = |c| a2a_card(c, &pool, &agent);

    /// Files an A2A message as a new task, once per `messageId` of the agent (see
    /// `ops::a2a_send`): the task, whom to wake, and whether it was made now. `crash` is called
    /// before the commit of a task made now (`a2a_send_before_commit`).
    write fn a2a_send(task: NewTask, crash: fn(&str)) -> (A2aTask, Wake, bool)
        = |c| a2a_send(c, &task, now_ms(), crash);

    /// An A2A task of an agent, with its messages and where it stands.
    read fn a2a_task(pool: String, agent: String, task_id: String) -> Option<A2aTask>
        = |c| a2a_task(c, &pool, &agent, &task_id, now_ms());

    /// Records an answer to a task waiting for input: the approvals' decision and the message's
    /// row, once per `messageId` (see `ops::a2a_answer`).
    write fn a2a_answer(answer: TaskAnswer) -> Answered
        = |c| a2a_answer(c, &answer, now_ms());

    /// One page of an agent's A2A tasks, newest first.
    read fn a2a_list(pool: String, agent: String, filter: TaskFilter) -> TaskPage
        = |c| a2a_list(c, &pool, &agent, &filter, now_ms());

    /// Stores a webhook of a task (the caller found the task); returns it with its ID.
    write fn a2a_put_push(task_id: String, config: a2a::TaskPushNotificationConfig) -> a2a::TaskPushNotificationConfig
        = |c| a2a_put_push(c, &task_id, &config, now_ms());

    /// A task's webhooks (`id`: only that one).
    read fn a2a_push_configs(task_id: String, id: Option<String>) -> Vec<a2a::TaskPushNotificationConfig>
        = |c| a2a_push_configs(c, &task_id, id);

    /// Removes a webhook of a task; `true` when it was there.
    write fn a2a_delete_push(task_id: String, id: String) -> bool
        = |c| a2a_delete_push(c, &task_id, &id);

    /// The webhooks with a state to deliver now, each with its task.
    read fn a2a_push_due() -> Vec<(PushTarget, A2aTask)> = |c| a2a_push_due(c, now_ms());

    /// Records what became of a push delivery attempt.
    write fn a2a_push_record(result: PushResult) -> () = |c| a2a_push_record(c, &result);

    /// Deletes every row of the thread (see [`Store::purge`]).
    write fn purge_rows(id: ThreadId, crash: fn(&str)) -> Purge = |c| purge(c, id, now_ms(), crash);


    /// Inbox messages after `after`, oldest first.
    read fn inbox_after(id: ThreadId, after: u64, limit: u32) -> Vec<InboxMessage>
        = |c| inbox_after(c, id, after, limit);

    /// Events after `after`, oldest first.
    read fn events_after(id: ThreadId, after: u64, limit: u32) -> Vec<Event>
        = |c| events_after(c, id, after, limit);

    /// Threads matching the filter, oldest first.
    read fn list_threads(filter: ThreadFilter) -> Vec<ThreadSummary>
        = |c| list_threads(c, &filter);

    /// One thread.
    read fn thread(id: ThreadId) -> Option<ThreadSummary> = |c| thread(c, id);

    /// What the thread spent, ever, and its agent and pool on today's date in `zone`.
    read fn spend(id: ThreadId, zone: chrono_tz::Tz) -> Spend = |c| spend(c, id, zone, now_ms());

    /// The version chain.
    read fn versions(id: ThreadId) -> Vec<VersionSummary> = |c| versions(c, id);

    /// One version with the history as of it.
    read fn version(id: ThreadId, version: u64) -> Option<VersionDetail>
        = |c| version(c, id, version);

    /// The ledger of a thread.
    read fn tool_calls(id: ThreadId) -> Vec<ToolCallRecord> = |c| listed_tool_calls(c, id);

    /// Forks the thread at the end of one of its turns (see `ops::fork`); also returns the
    /// threads whose events changed.
    write fn fork(parent: ThreadId, request: ForkRequest) -> (ForkResponse, Vec<ThreadId>)
        = |c| fork(c, parent, &request, now_ms());

    /// Queues a rewind of the thread to the end of one of its turns (see `ops::rewind`); also
    /// returns whom to wake.
    write fn rewind(id: ThreadId, request: RewindRequest) -> (RewindQueued, Wake)
        = |c| rewind(c, id, &request, now_ms());

    /// Makes (or finds again, by its key) the replay of turns of `source` (see
    /// `ops::create_replay`). `crash` is called before the commit of a replay made now
    /// (`replay_before_commit`).
    write fn create_replay(source: ThreadId, request: ReplayRequest, crash: fn(&str)) -> ReplayCreated
        = |c| create_replay(c, source, &request, now_ms(), crash);

    /// Turn `turn` of the thread as it happened: input, messages, calls with their results and
    /// decisions, answer, cost, latency, model.
    read fn recorded_turn(id: ThreadId, turn: u64) -> RecordedTurn
        = |c| recorded_turn(c, id, turn, now_ms());

    /// Marks a thread (and a range of its turns) into a suite; `true` when marked now.
    write fn add_eval_member(suite: String, request: EvalMemberRequest) -> (EvalMember, bool)
        = |c| add_eval_member(c, &suite, &request, now_ms());

    /// Removes a member from a suite (404 when absent).
    write fn remove_eval_member(suite: String, id: u64) -> ()
        = |c| remove_eval_member(c, &suite, id);

    /// Stores an eval run, once per key.
    write fn store_eval_run(suite: String, request: EvalRunRequest) -> EvalRunStored
        = |c| store_eval_run(c, &suite, &request, now_ms());

    /// One suite: its members and last run (`None`: neither).
    read fn eval_suite(suite: String) -> Option<EvalSuite> = |c| eval_suite(c, &suite);

    /// Every suite with members or runs, by name.
    read fn eval_suites() -> EvalSuiteList = |c| eval_suites(c);

    /// The thread's ended turns (a fork's shared turns included), its origin and its forks.
    read fn turns(id: ThreadId) -> TurnList = |c| turns(c, id);

    /// The history, state and snapshot at the end of turn `turn`, and the effects after it that
    /// going back does not undo.
    read fn turn_point(id: ThreadId, turn: u64) -> TurnPoint = |c| turn_point(c, id, turn);

    /// The files turn `turn` changed.
    read fn turn_diff(id: ThreadId, turn: u64) -> TurnDiff = |c| turn_diff(c, id, turn);

    /// Which of `ids` the thread's pool does not store.
    read fn missing_objects(id: ThreadId, ids: Vec<ObjectId>) -> MissingObjectsResponse
        = |c| missing_objects(c, id, &ids);

    /// Stores a snapshot object in the thread's pool, once (see `ops::put_object`).
    write fn put_object(id: ThreadId, object: ObjectId, kind: ObjectKind, bytes: Vec<u8>) -> ()
        = |c| put_object(c, id, &object, kind, &bytes, now_ms());

    /// One object of the thread's pool.
    read fn get_object(id: ThreadId, object: ObjectId) -> Option<Vec<u8>>
        = |c| get_object(c, id, &object);

    /// The sessions of an agent that replica `replica` of `replicas` owns and that have work
    /// (messages after the cursor, or a turn in progress), each with its stored inbox cursor.
    read fn session_work(pool: String, agent: String, replicas: u32, replica: u32) -> Vec<(ThreadSummary, u64)>
        = |c| session_work(c, &pool, &agent, replicas, replica);

    /// How many replicas an agent runs, as last recorded.
    read fn replicas(pool: String, agent: String) -> Option<u32> = |c| replicas(c, &pool, &agent);

    /// Makes the pool's registered triggers exactly `set` (see `triggers::put_triggers`), as
    /// of `now`.
    write fn put_triggers(pool: String, set: TriggerSet, now: DateTime<Utc>) -> TriggersApplied
        = |c| put_triggers(c, &pool, &set, now.timestamp_millis());

    /// One page of a scheduler tick at `now` (see `triggers::fire_due`); `true` when the page was
    /// full. `crash` is called before the commit when something fired.
    write fn fire_due_page(now: DateTime<Utc>, crash: fn(&str)) -> (Vec<Fired>, bool)
        = |c| fire_due(c, now.timestamp_millis(), crash);

    /// Runs a trigger now: a schedule's message, or a webhook's as rendered from a body
    /// (`rendered`: the message and the session key it renders, if any).
    write fn fire_now(pool: String, name: String, rendered: Option<(String, Option<String>)>) -> (TriggerEvent, Option<Fired>)
        = |c| fire_now(c, &pool, &name, rendered, now_ms());

    /// Puts a verified webhook delivery's message in its session, once per delivery (its id, or
    /// for GitHub its body within the tolerance) for the trigger.
    write fn deliver_hook(
        pool: String,
        name: String,
        delivery: HookDelivery,
        message: String,
        session: Option<String>,
        crash: fn(&str)
    ) -> (TriggerEvent, Option<Fired>)
        = |c| deliver_hook(c, &pool, &name, delivery, &message, session, now_ms(), crash);

    /// Records an entry (a refused delivery) in a trigger's history, if it still exists.
    write fn note_trigger(pool: String, name: String, event: TriggerEvent) -> ()
        = |c| note_trigger(c, &pool, &name, event, now_ms());

    /// Registered triggers by pool and name, each with its last history entry.
    read fn list_triggers(pool: Option<String>, name: Option<String>) -> Vec<Trigger>
        = |c| list_triggers(c, pool.as_deref(), name.as_deref());

    /// The newest `limit` history entries of a trigger before `before`, oldest first (`None`:
    /// no such trigger and no history).
    read fn trigger_history(pool: String, name: String, before: Option<u64>, limit: u32) -> Option<Vec<TriggerEvent>>
        = |c| trigger_history(c, &pool, &name, before, limit);

    /// The webhook trigger at `/v1/hooks/{pool}/{path}`, with its secret.
    read fn hook_target(pool: String, path: String) -> Option<HookTarget>
        = |c| hook_target(c, &pool, &path);

    /// Whether a schedule is due at `now` (a read: an idle scheduler writes nothing).
    read fn triggers_due(now: DateTime<Utc>) -> bool
        = |c| triggers_due(c, now.timestamp_millis());

    /// The requests to people of one turn of a thread, as they stand now.
    read fn turn_approvals(id: ThreadId, turn_seq: u64) -> Vec<Approval>
        = |c| turn_approvals(c, id, turn_seq, now_ms());

    /// One request to a person, as it stands now.
    read fn approval(id: ApprovalId) -> Option<Approval> = |c| approval(c, id, now_ms());

    /// Requests to people matching the filter, oldest first.
    read fn list_approvals(filter: ApprovalFilter) -> Vec<Approval>
        = |c| list_approvals(c, &filter, now_ms());

    /// The handoffs one turn of a thread made, as they stand now.
    read fn turn_handoffs(id: ThreadId, turn_seq: u64) -> Vec<Handoff>
        = |c| turn_handoffs(c, id, turn_seq, now_ms());

    /// Handoffs matching the filter, oldest first, as they stand now.
    read fn list_handoffs(filter: HandoffFilter) -> Vec<Handoff>
        = |c| list_handoffs(c, &filter, now_ms());

    /// Runs a runner's memory command that changes its memory, once per op key (see
    /// `ops::memory_op`).
    write fn memory_op(id: ThreadId, request: MemoryOpRequest) -> MemoryOpResult
        = |c| memory_op(c, id, &request, now_ms());

    /// Runs a runner's memory `view`.
    read fn memory_view(id: ThreadId, request: MemoryOpRequest) -> MemoryOpResult
        = |c| memory_view(c, id, &request);

    /// Runs the admin's command (an edit or a deletion) on a memory; a refusal changes nothing.
    write fn edit_memory(space: MemorySpace, command: MemoryCommand) -> crate::memory_rules::Outcome
        = |c| edit_memory(c, &space, &command, now_ms());

    /// Memory files matching the filter.
    read fn list_memories(filter: MemoryFilter) -> Vec<MemoryFile>
        = |c| list_memories(c, &filter);

    /// One memory file with its content.
    read fn memory_file(space: MemorySpace, path: String) -> Option<MemoryFileContent>
        = |c| memory_file(c, &space, &path);

    /// Deletes every memory of a pool (or of one of its agents); returns how many files.
    write fn purge_memories(pool: String, agent: Option<String>) -> u64
        = |c| purge_memories(c, &pool, agent.as_deref());

    /// The ledger records of one turn of a thread (what a resuming runner decides its calls by).
    read fn turn_tool_calls(id: ThreadId, turn_seq: u64) -> Vec<ToolCallRecord>
        = |c| turn_tool_calls(c, id, turn_seq);
}

impl Store {
    /// One scheduler tick at `now`: fires every schedule that is due, each scheduled time once,
    /// a page (one transaction) of them at a time. `crash` is called before each commit that
    /// fires something (the scheduler's kill point `trigger_fire_before_commit`).
    pub async fn fire_due(&self, now: DateTime<Utc>, crash: fn(&str)) -> StoreResult<Vec<Fired>> {
        let mut all = Vec::new();
        for _ in 0..triggers::MAX_PAGES_PER_TICK {
            let (fired, full) = self.fire_due_page(now, crash).await?;
            all.extend(fired);
            if !full {
                break;
            }
        }
        Ok(all)
    }
}

/// Current time in Unix milliseconds.
pub(crate) fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}
