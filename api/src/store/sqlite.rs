//! The SQLite backend: one writer thread that group-commits, a pool of readers, and WAL
//! checkpoints off the request path.
//!
//! Writes from every thread go through one channel to one connection, owned by a thread of its
//! own and driven by rusqlite, so a write costs one hop to that thread and one back — no async
//! bridge between the statements of a transaction. The writer takes whatever is queued (up to
//! `max_batch`), runs each write inside its own SAVEPOINT within one `BEGIN IMMEDIATE`
//! transaction, commits once (`synchronous=FULL`: the WAL is fsynced), and only then answers
//! every caller. A write that fails rolls back to its savepoint without disturbing the others.
//! Under load many checkpoints share one fsync; alone, a write costs one commit. Reads and
//! migrations use sqlx (the readers' pool); both drivers link the same SQLite.

use std::cell::Cell;
use std::str::FromStr as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rusqlite::Connection;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Connection as _, SqliteConnection, SqlitePool};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::latest::LatestCache;
use super::{StoreError, StoreOptions, StoreResult};

/// Hands the outcome of the transaction a write ran in to its caller.
type Deliver = Box<dyn FnOnce(Result<(), StoreError>) + Send>;
/// One write: runs on the writer's connection and says whether it failed.
type Job = Box<dyn FnOnce(&mut Connection) -> (bool, Deliver) + Send>;

/// What the writer thread receives.
enum Msg {
    /// A write for the next group commit.
    Job(Job),
    /// Commit what is queued, then stop.
    Stop,
}

/// How often the WAL is checkpointed into the database file.
const WAL_CHECKPOINT_EVERY: Duration = Duration::from_secs(1);

/// What the writer thread has done since the store opened: how many group commits, how many
/// writes they carried, and where its time went. For benchmarks and diagnostics; reading it
/// never waits for the writer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Transactions committed (or rolled back as a whole): one fsync each when they wrote.
    pub commits: u64,
    /// Writes those transactions carried.
    pub writes: u64,
    /// Time spent running the writes' statements (from `BEGIN` to just before `COMMIT`).
    pub statements: Duration,
    /// Time spent in `COMMIT` (the WAL write and its fsync).
    pub commit: Duration,
    /// Pages the commits wrote to the WAL (each one WAL frame: the page and a 24-byte header).
    pub wal_frames: u64,
    /// The database's page size in bytes.
    pub page_size: u64,
}

impl WriterStats {
    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &WriterStats) -> WriterStats {
        WriterStats {
            commits: self.commits - earlier.commits,
            writes: self.writes - earlier.writes,
            statements: self.statements.saturating_sub(earlier.statements),
            commit: self.commit.saturating_sub(earlier.commit),
            wal_frames: self.wal_frames - earlier.wal_frames,
            page_size: self.page_size,
        }
    }

    /// Bytes the commits appended to the WAL.
    pub fn wal_bytes(&self) -> u64 {
        self.wal_frames * (self.page_size + WAL_FRAME_HEADER)
    }
}

/// Bytes of a WAL frame's header.
const WAL_FRAME_HEADER: u64 = 24;

thread_local! {
    /// The writer thread's WAL: frames in it after the last commit, and frames written by
    /// commits not yet counted. Set by [`count_wal_frames`], which SQLite calls on the thread
    /// that commits.
    static WAL_FRAMES: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

/// SQLite's WAL hook: after each commit, the number of frames in the WAL. A WAL that a
/// checkpoint let restart from its beginning holds only the last commit's frames.
fn count_wal_frames(_: &rusqlite::hooks::Wal, frames: std::ffi::c_int) -> rusqlite::Result<()> {
    let now = u64::try_from(frames).unwrap_or(0);
    WAL_FRAMES.with(|w| {
        let (before, pending) = w.get();
        let written = if now >= before { now - before } else { now };
        w.set((now, pending + written));
    });
    Ok(())
}

/// Frames written by the commits since the last call, on this thread.
fn take_wal_frames() -> u64 {
    WAL_FRAMES.with(|w| {
        let (before, pending) = w.get();
        w.set((before, 0));
        pending
    })
}

/// The writer's counters, updated once per group commit.
#[derive(Default)]
struct Counters {
    commits: AtomicU64,
    writes: AtomicU64,
    statements_ns: AtomicU64,
    commit_ns: AtomicU64,
    wal_frames: AtomicU64,
    page_size: AtomicU64,
}

impl Counters {
    fn add(&self, writes: usize, statements: Duration, commit: Duration, wal_frames: u64) {
        let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.commits.fetch_add(1, Ordering::Relaxed);
        self.writes.fetch_add(writes as u64, Ordering::Relaxed);
        self.statements_ns
            .fetch_add(ns(statements), Ordering::Relaxed);
        self.commit_ns.fetch_add(ns(commit), Ordering::Relaxed);
        self.wal_frames.fetch_add(wal_frames, Ordering::Relaxed);
    }

    fn read(&self) -> WriterStats {
        WriterStats {
            commits: self.commits.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
            statements: Duration::from_nanos(self.statements_ns.load(Ordering::Relaxed)),
            commit: Duration::from_nanos(self.commit_ns.load(Ordering::Relaxed)),
            wal_frames: self.wal_frames.load(Ordering::Relaxed),
            page_size: self.page_size.load(Ordering::Relaxed),
        }
    }
}

/// A SQLite checkpoint store.
#[derive(Clone)]
pub struct SqliteStore {
    jobs: mpsc::Sender<Msg>,
    readers: SqlitePool,
    stop: CancellationToken,
    /// The background checkpointer; [`SqliteStore::close`] waits for it before the writer's
    /// last checkpoint, because SQLite's checkpoint lock takes no busy handler: a PASSIVE
    /// checkpoint still running would make that TRUNCATE fail and leave the WAL at full size.
    checkpointer: Arc<std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>>,
    writer_done: Arc<tokio::sync::Notify>,
    latest: Arc<LatestCache>,
    counters: Arc<Counters>,
}

impl SqliteStore {
    /// Opens the database file (creating it), migrates it and starts the writer.
    pub(crate) async fn open(url: &str, options: &StoreOptions) -> StoreResult<Self> {
        let connect = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            // No auto_vacuum: in its incremental mode every commit that grows the file also
            // rewrites a pointer-map page (4 KB more to fsync per write), for a vacuum nothing
            // ran. Pages freed by a purge go to the free list and are reused by later writes.
            // (A database created with it keeps it; `VACUUM` offline drops it.)
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(false)
            // The background task checkpoints; never the committing request.
            .pragma("wal_autocheckpoint", "0");
        let mut migrator = SqliteConnection::connect_with(&connect).await?;
        sqlx::migrate!("migrations/sqlite")
            .run(&mut migrator)
            .await?;
        migrator.close().await?;
        let path = connect.get_filename().to_path_buf();
        let writer = tokio::task::spawn_blocking(move || open_writer(&path))
            .await
            .map_err(|e| StoreError::Database(format!("opening the writer: {e}").into()))??;
        let readers = SqlitePoolOptions::new()
            .max_connections(options.max_connections.max(1))
            .connect_with(connect.clone())
            .await?;

        let (jobs, rx) = mpsc::channel::<Msg>(options.max_batch.max(1) * 4);
        let stop = CancellationToken::new();
        let writer_done = Arc::new(tokio::sync::Notify::new());
        let checkpointer = SqliteConnection::connect_with(&connect).await?;
        let checkpointer = tokio::spawn(run_checkpointer(checkpointer, stop.clone()));
        let max_batch = options.max_batch.max(1);
        let done = writer_done.clone();
        let counters = Arc::new(Counters::default());
        let page_size: i64 = writer.query_row("PRAGMA page_size", [], |r| r.get(0))?;
        counters
            .page_size
            .store(u64::try_from(page_size).unwrap_or(0), Ordering::Relaxed);
        let counted = counters.clone();
        std::thread::Builder::new()
            .name("ninetrix-sqlite-writer".into())
            .spawn(move || {
                run_writer(writer, rx, max_batch, &counted);
                done.notify_waiters();
                done.notify_one();
            })
            .map_err(|e| StoreError::Database(format!("starting the writer thread: {e}").into()))?;
        Ok(Self {
            jobs,
            readers,
            stop,
            checkpointer: Arc::new(std::sync::Mutex::new(Some(checkpointer))),
            writer_done,
            latest: Arc::new(LatestCache::new(options.latest_cache_bytes)),
            counters,
        })
    }

    /// What the writer thread has done so far.
    pub fn writer_stats(&self) -> WriterStats {
        self.counters.read()
    }

    /// Runs one write in the next group commit and returns its result once committed.
    pub(crate) async fn write<T, F>(&self, op: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> StoreResult<T> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel::<StoreResult<T>>();
        let job: Job = Box::new(move |conn| {
            let result = op(conn);
            let failed = result.is_err();
            let deliver: Deliver = Box::new(move |committed| {
                let _ = tx.send(committed.and(result));
            });
            (failed, deliver)
        });
        self.jobs
            .send(Msg::Job(job))
            .await
            .map_err(|_| StoreError::Database("the writer has stopped".into()))?;
        rx.await
            .map_err(|_| StoreError::Database("the writer stopped before committing".into()))?
    }

    pub(crate) fn latest_cache(&self) -> &LatestCache {
        &self.latest
    }

    pub(crate) async fn reader(&self) -> StoreResult<sqlx::pool::PoolConnection<sqlx::Sqlite>> {
        Ok(self.readers.acquire().await?)
    }

    pub(crate) async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1")
            .execute(&mut *self.reader().await?)
            .await?;
        if self.jobs.is_closed() {
            return Err(StoreError::Database("the writer has stopped".into()));
        }
        Ok(())
    }

    pub(crate) async fn close(&self) {
        let done = self.writer_done.notified();
        self.stop.cancel();
        let checkpointer = self
            .checkpointer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(checkpointer) = checkpointer {
            let _ = checkpointer.await;
        }
        if self.jobs.send(Msg::Stop).await.is_ok() {
            done.await;
        }
        self.readers.close().await;
    }
}

/// The writer's connection, with the store's pragmas.
fn open_writer(path: &std::path::Path) -> StoreResult<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(10))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", false)?;
    conn.pragma_update(None, "wal_autocheckpoint", 0)?;
    conn.set_prepared_statement_cache_capacity(64);
    // Counts the pages each commit writes (WriterStats); replaces the automatic checkpoint,
    // which is off anyway (`wal_autocheckpoint = 0`).
    conn.wal_hook(Some(count_wal_frames));
    Ok(conn)
}

/// Copies the WAL into the database file every second on a connection of its own, so the
/// writer never pays for it. PASSIVE neither blocks nor waits for the writer or the readers.
async fn run_checkpointer(mut conn: SqliteConnection, stop: CancellationToken) {
    let mut every = tokio::time::interval(WAL_CHECKPOINT_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = every.tick() => {
                if let Err(e) = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)").execute(&mut conn).await {
                    tracing::warn!(error = %e, "WAL checkpoint failed");
                }
            }
            () = stop.cancelled() => break,
        }
    }
    let _ = conn.close().await;
}

/// The writer thread: group-commits whatever is queued until told to stop (or every sender is
/// gone), then checkpoints the WAL into the database file.
fn run_writer(
    mut conn: Connection,
    mut rx: mpsc::Receiver<Msg>,
    max_batch: usize,
    counters: &Counters,
) {
    let mut batch: Vec<Job> = Vec::with_capacity(max_batch);
    let mut stopping = false;
    while !stopping {
        match rx.blocking_recv() {
            Some(Msg::Job(job)) => batch.push(job),
            Some(Msg::Stop) | None => stopping = true,
        }
        while batch.len() < max_batch {
            match rx.try_recv() {
                Ok(Msg::Job(job)) => batch.push(job),
                Ok(Msg::Stop) => stopping = true,
                Err(_) => break,
            }
        }
        if !batch.is_empty() {
            commit_batch(&mut conn, &mut batch, counters);
        }
    }
    // Finish what is still queued, then stop taking writes.
    rx.close();
    while let Some(msg) = rx.blocking_recv() {
        if let Msg::Job(job) = msg {
            batch.push(job);
            if batch.len() == max_batch {
                commit_batch(&mut conn, &mut batch, counters);
            }
        }
    }
    if !batch.is_empty() {
        commit_batch(&mut conn, &mut batch, counters);
    }
    // The pragma answers (busy, WAL frames, frames checkpointed); busy = 1 means it could not
    // finish and the WAL stays as it is until the next open checkpoints it.
    match conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
        r.get::<_, i64>(0)
    }) {
        Ok(0) => {}
        Ok(_) => {
            tracing::warn!("the last WAL checkpoint was blocked; the WAL is kept for the next open")
        }
        Err(e) => {
            tracing::warn!(error = %e, "the last WAL checkpoint failed; the WAL is kept for the next open")
        }
    }
    if let Err((_, e)) = conn.close() {
        tracing::warn!(error = %e, "closing the writer connection failed");
    }
}

fn commit_batch(conn: &mut Connection, batch: &mut Vec<Job>, counters: &Counters) {
    let mut deliveries: Vec<Deliver> = Vec::with_capacity(batch.len());
    // A lone write needs no savepoint: if it fails, the whole transaction rolls back.
    let alone = batch.len() == 1;
    let writes = batch.len();
    let started = Instant::now();
    let mut committing = started;
    let outcome: Result<(), StoreError> = (|| {
        conn.execute_batch("BEGIN IMMEDIATE")?;
        if alone {
            let job = batch.pop().expect("one job");
            let (failed, deliver) = job(conn);
            deliveries.push(deliver);
            committing = Instant::now();
            conn.execute_batch(if failed { "ROLLBACK" } else { "COMMIT" })?;
            return Ok(());
        }
        for job in batch.drain(..) {
            conn.execute_batch("SAVEPOINT w")?;
            let (failed, deliver) = job(conn);
            deliveries.push(deliver);
            if failed {
                conn.execute_batch("ROLLBACK TO w")?;
            }
            conn.execute_batch("RELEASE w")?;
        }
        committing = Instant::now();
        conn.execute_batch("COMMIT")?;
        Ok(())
    })();
    let committed = Instant::now();
    counters.add(
        writes,
        committing.saturating_duration_since(started),
        committed.saturating_duration_since(committing),
        take_wal_frames(),
    );
    if let Err(e) = &outcome {
        tracing::error!(error = %e, "group commit failed; rolling back");
        if !conn.is_autocommit() {
            let _ = conn.execute_batch("ROLLBACK");
        }
    }
    // Jobs never run because an earlier statement failed get the failure too: dropping them
    // drops their reply channel, which their callers read as the writer failing.
    batch.clear();
    for deliver in deliveries {
        deliver(outcome.clone());
    }
}

/// Starts a read transaction on a reader: every statement in it reads one snapshot (SQLite's
/// deferred transaction in WAL mode), so what a read assembles from several rows (a thread row,
/// its state, its messages) is never torn by a commit between them.
pub(crate) async fn snapshot(
    c: &mut SqliteConnection,
) -> StoreResult<sqlx::Transaction<'_, sqlx::Sqlite>> {
    Ok(c.begin_with("BEGIN").await?)
}

#[cfg(test)]
mod tests {
    use ninetrix_proto::ThreadId;

    use super::*;
    use crate::store::Store;

    #[tokio::test]
    async fn the_writer_counts_its_commits_and_the_writes_they_carried() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("stats.db").display());
        let store = Store::open(&url, &StoreOptions::default()).await.unwrap();
        let before = store.writer_stats().unwrap();
        for _ in 0..3 {
            store
                .claim(
                    ThreadId::new_v7(),
                    Default::default(),
                    crate::labels::Stating::Claim,
                )
                .await
                .unwrap();
        }
        let done = store.writer_stats().unwrap().since(&before);
        // Each claim was awaited before the next was sent, so each had a commit of its own.
        assert_eq!((done.writes, done.commits), (3, 3));
        assert!(done.commit > Duration::ZERO && done.statements > Duration::ZERO);
        // Each claim changed at least the thread's page; none wrote more than a few.
        assert!(
            (3..=3 * 8).contains(&done.wal_frames),
            "{} frames",
            done.wal_frames
        );
        assert_eq!(done.wal_bytes(), done.wal_frames * (done.page_size + 24));
        store.close().await;
    }

    #[tokio::test]
    async fn a_new_database_keeps_no_pointer_map_pages() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("new.db");
        let store = Store::open(
            &format!("sqlite://{}", path.display()),
            &StoreOptions::default(),
        )
        .await
        .unwrap();
        store.close().await;
        let mode: i64 = Connection::open(&path)
            .unwrap()
            .query_row("PRAGMA auto_vacuum", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, 0, "auto_vacuum NONE");
    }

    /// A database written by the first schema (messages keyed by version, versions with a rowid)
    /// reads the same after the store migrates it: the live history, the history as of a version
    /// whose messages a later truncation cut, and the inbox cursor.
    #[tokio::test]
    async fn a_database_of_the_first_schema_reads_the_same_after_migrating() {
        use ninetrix_proto::api::{CheckpointState, ThreadStatus};
        use ninetrix_proto::{Message, Role};

        let dir = tempfile::tempdir().unwrap();
        let first_only = dir.path().join("migrations");
        std::fs::create_dir(&first_only).unwrap();
        std::fs::copy(
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/migrations/sqlite/0001_init.sql"
            ),
            first_only.join("0001_init.sql"),
        )
        .unwrap();
        let path = dir.path().join("old.db");
        let url = format!("sqlite://{}", path.display());
        let connect = SqliteConnectOptions::from_str(&url)
            .unwrap()
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal);
        let mut conn = SqliteConnection::connect_with(&connect).await.unwrap();
        sqlx::migrate::Migrator::new(first_only.as_path())
            .await
            .unwrap()
            .run(&mut conn)
            .await
            .unwrap();
        conn.close().await.unwrap();

        // Version 1 appends m0 and m1; version 2 cuts back to 1 message and appends m2;
        // version 3 appends m3.
        let id = ThreadId::new_v7();
        let m: Vec<Message> = (0..4)
            .map(|i| Message::text(Role::User, format!("m{i}")))
            .collect();
        let msg = |i: usize| m[i].clone();
        let body = |i: usize| serde_json::to_string(&m[i]).unwrap();
        let state = serde_json::to_string(&CheckpointState {
            turn_seq: 1,
            turn_start_history_len: 1,
            status: ThreadStatus::Idle,
            inbox_cursor: 4,
            usage: Default::default(),
            handoff: None,
            attempt: None,
            context: None,
            ..Default::default()
        })
        .unwrap();
        let old = Connection::open(&path).unwrap();
        let t = id.to_string();
        old.execute(
            "INSERT INTO threads (thread_id, epoch, version, history_len, created_at, updated_at) VALUES (?1, 1, 3, 3, 0, 0)",
            [&t],
        )
        .unwrap();
        for (v, truncate_to, appended, len) in
            [(1, None, 2, 2), (2, Some(1), 1, 2), (3, None, 1, 3)]
        {
            old.execute(
                "INSERT INTO versions (thread_id, version, parent_version, epoch, truncate_to, appended, history_len, state, created_at) VALUES (?1, ?2, ?3, 1, ?4, ?5, ?6, ?7, 0)",
                rusqlite::params![t, v, v - 1, truncate_to, appended, len, state],
            )
            .unwrap();
        }
        for (v, position, superseded_by, i) in [
            (1, 0, None, 0),
            (1, 1, Some(2), 1),
            (2, 1, None, 2),
            (3, 2, None, 3),
        ] {
            old.execute(
                "INSERT INTO messages (thread_id, version, position, superseded_by, body) VALUES (?1, ?2, ?3, ?4, ?5)",
                rusqlite::params![t, v, position, superseded_by, body(i)],
            )
            .unwrap();
        }
        old.close().unwrap();

        let store = Store::open(&url, &StoreOptions::default()).await.unwrap();
        let latest = store.latest(id).await.unwrap().unwrap();
        assert_eq!(latest.history, vec![msg(0), msg(2), msg(3)]);
        let first = store.version(id, 1).await.unwrap().unwrap();
        assert_eq!(first.history, vec![msg(0), msg(1)]);
        assert_eq!(store.versions(id).await.unwrap().len(), 3);
        store.close().await;
        // The inbox cursor, once only inside each version's state, is a column now (filled
        // from the latest version's state).
        let cursor: i64 = Connection::open(&path)
            .unwrap()
            .query_row(
                "SELECT inbox_cursor FROM threads WHERE thread_id = ?1",
                [&t],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(cursor, 4);
    }
}
