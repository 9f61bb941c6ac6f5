//! Storage for the checkpoint API: one [`Store`] over SQLite or Postgres, chosen by URL scheme.
//!
//! Both backends run the same queries (`ops.rs`, expanded once per backend) on the same schema
//! (one migration folder each). What differs is how a write transaction runs: SQLite has one
//! writer task that group-commits concurrent writes (`sqlite.rs`); Postgres runs each write in
//! its own transaction, serialised per thread by a row lock (`postgres.rs`). A write is
//! acknowledged only after its transaction has committed durably.

mod ops;
mod postgres;
mod sqlite;

use std::sync::Arc;

use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{
    CheckpointCreated, CheckpointRequest, ClaimResponse, EnqueueRequest, EnqueueResponse,
    ErrorCode, Event, EventsRequest, InboxMessage, ThreadLabels, ThreadState, ThreadStatus,
    ThreadSummary, ToolCallCompletion, ToolCallIntent, ToolCallRecord, VersionDetail,
    VersionSummary,
};

pub use postgres::PostgresStore;
pub use sqlite::SqliteStore;

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

impl From<sqlx::migrate::MigrateError> for StoreError {
    fn from(e: sqlx::migrate::MigrateError) -> Self {
        StoreError::Database(format!("migration failed: {e}").into())
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
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            max_batch: 256,
            max_connections: 8,
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

    /// The backend's name.
    pub fn backend(&self) -> &'static str {
        match self {
            Store::Sqlite(_) => "sqlite",
            Store::Postgres(_) => "postgres",
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

    /// Creates the thread if new and records its labels (those given).
    pub async fn ensure_thread(&self, id: ThreadId, labels: ThreadLabels) -> StoreResult<()> {
        dispatch!(self, s => s.ensure_thread(id, labels))
    }

    /// Claims the thread: a new epoch, one more boot.
    pub async fn claim(&self, id: ThreadId, labels: ThreadLabels) -> StoreResult<ClaimResponse> {
        dispatch!(self, s => s.claim(id, labels))
    }

    /// Appends a checkpoint version.
    pub async fn append_checkpoint(
        &self,
        id: ThreadId,
        request: CheckpointRequest,
    ) -> StoreResult<CheckpointCreated> {
        dispatch!(self, s => s.append_checkpoint(id, request))
    }

    /// Records a tool call's intent, or returns the existing record for the key (`true` when new).
    pub async fn record_intent(
        &self,
        id: ThreadId,
        intent: ToolCallIntent,
    ) -> StoreResult<(ToolCallRecord, bool)> {
        dispatch!(self, s => s.record_intent(id, intent))
    }

    /// Records a tool call's outcome.
    pub async fn complete_tool_call(
        &self,
        id: ThreadId,
        key: String,
        completion: ToolCallCompletion,
    ) -> StoreResult<ToolCallRecord> {
        dispatch!(self, s => s.complete_tool_call(id, key, completion))
    }

    /// Puts a message in the thread's inbox (creating the thread if new).
    pub async fn enqueue(
        &self,
        id: ThreadId,
        request: EnqueueRequest,
    ) -> StoreResult<EnqueueResponse> {
        dispatch!(self, s => s.enqueue(id, request))
    }

    /// Appends trace events; returns the last seq.
    pub async fn append_events(&self, id: ThreadId, request: EventsRequest) -> StoreResult<u64> {
        dispatch!(self, s => s.append_events(id, request))
    }

    /// Deletes every trace of the thread; `false` if it did not exist.
    pub async fn purge(&self, id: ThreadId) -> StoreResult<bool> {
        dispatch!(self, s => s.purge(id))
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

    /// The latest state as the JSON of a [`ThreadState`], assembled without decoding the stored
    /// messages (what `GET latest` sends).
    pub async fn latest_json(&self, id: ThreadId) -> StoreResult<Option<String>> {
        dispatch!(self, s => s.latest_json(id))
    }

    /// Inbox messages after `after`, oldest first.
    pub async fn inbox_after(
        &self,
        id: ThreadId,
        after: u64,
        limit: u32,
    ) -> StoreResult<Vec<InboxMessage>> {
        dispatch!(self, s => s.inbox_after(id, after, limit))
    }

    /// Events after `after`, oldest first.
    pub async fn events_after(
        &self,
        id: ThreadId,
        after: u64,
        limit: u32,
    ) -> StoreResult<Vec<Event>> {
        dispatch!(self, s => s.events_after(id, after, limit))
    }

    /// Threads matching the filter, oldest first.
    pub async fn list_threads(&self, filter: ThreadFilter) -> StoreResult<Vec<ThreadSummary>> {
        dispatch!(self, s => s.list_threads(filter))
    }

    /// One thread.
    pub async fn thread(&self, id: ThreadId) -> StoreResult<Option<ThreadSummary>> {
        dispatch!(self, s => s.thread(id))
    }

    /// The version chain.
    pub async fn versions(&self, id: ThreadId) -> StoreResult<Vec<VersionSummary>> {
        dispatch!(self, s => s.versions(id))
    }

    /// One version with the history as of it.
    pub async fn version(&self, id: ThreadId, version: u64) -> StoreResult<Option<VersionDetail>> {
        dispatch!(self, s => s.version(id, version))
    }

    /// The ledger of a thread.
    pub async fn tool_calls(&self, id: ThreadId) -> StoreResult<Vec<ToolCallRecord>> {
        dispatch!(self, s => s.tool_calls(id))
    }
}

/// Current time in Unix milliseconds.
pub(crate) fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}
