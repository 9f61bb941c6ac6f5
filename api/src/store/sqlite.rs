//! The SQLite backend: one writer task that group-commits, a pool of readers, and WAL
//! checkpoints off the request path.
//!
//! Writes from every thread go through one channel to one connection. The writer takes whatever
//! is queued (up to `max_batch`), runs each write inside its own SAVEPOINT within one
//! `BEGIN IMMEDIATE` transaction, commits once (`synchronous=FULL`: the WAL is fsynced), and only
//! then answers every caller. A write that fails rolls back to its savepoint without disturbing
//! the others. Under load many checkpoints share one fsync; alone, a write costs one commit.

use std::str::FromStr as _;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use sqlx::sqlite::{
    SqliteAutoVacuum, SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Connection as _, SqliteConnection, SqlitePool};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::{StoreError, StoreOptions, StoreResult};

/// Hands the outcome of the transaction a write ran in to its caller.
type Deliver = Box<dyn FnOnce(Result<(), StoreError>) + Send>;
/// One write: runs on the writer's connection and says whether it failed.
type Job =
    Box<dyn for<'c> FnOnce(&'c mut SqliteConnection) -> BoxFuture<'c, (bool, Deliver)> + Send>;

/// How often the WAL is checkpointed into the database file.
const WAL_CHECKPOINT_EVERY: Duration = Duration::from_secs(1);

/// A SQLite checkpoint store.
#[derive(Clone)]
pub struct SqliteStore {
    jobs: mpsc::Sender<Job>,
    readers: SqlitePool,
    stop: CancellationToken,
    writer_done: Arc<tokio::sync::Notify>,
}

impl SqliteStore {
    /// Opens the database file (creating it), migrates it and starts the writer.
    pub(crate) async fn open(url: &str, options: &StoreOptions) -> StoreResult<Self> {
        let connect = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .auto_vacuum(SqliteAutoVacuum::Incremental)
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(false)
            // The background task checkpoints; never the committing request.
            .pragma("wal_autocheckpoint", "0");
        let mut writer = SqliteConnection::connect_with(&connect).await?;
        sqlx::migrate!("migrations/sqlite").run(&mut writer).await?;
        let readers = SqlitePoolOptions::new()
            .max_connections(options.max_connections.max(1))
            .connect_with(connect.clone())
            .await?;

        let (jobs, rx) = mpsc::channel::<Job>(options.max_batch.max(1) * 4);
        let stop = CancellationToken::new();
        let writer_done = Arc::new(tokio::sync::Notify::new());
        let checkpointer = SqliteConnection::connect_with(&connect).await?;
        tokio::spawn(run_checkpointer(checkpointer, stop.clone()));
        tokio::spawn(run_writer(
            writer,
            rx,
            options.max_batch.max(1),
            stop.clone(),
            writer_done.clone(),
        ));
        Ok(Self {
            jobs,
            readers,
            stop,
            writer_done,
        })
    }

    /// Runs one write in the next group commit and returns its result once committed.
    pub(crate) async fn write<T, F>(&self, op: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut SqliteConnection) -> BoxFuture<'c, StoreResult<T>>
            + Send
            + 'static,
    {
        let (tx, rx) = oneshot::channel::<StoreResult<T>>();
        let job: Job = Box::new(move |conn| {
            Box::pin(async move {
                let result = op(conn).await;
                let failed = result.is_err();
                let deliver: Deliver = Box::new(move |committed| {
                    let _ = tx.send(committed.and(result));
                });
                (failed, deliver)
            })
        });
        self.jobs
            .send(job)
            .await
            .map_err(|_| StoreError::Database("the writer has stopped".into()))?;
        rx.await
            .map_err(|_| StoreError::Database("the writer stopped before committing".into()))?
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
        done.await;
        self.readers.close().await;
    }
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

async fn run_writer(
    mut conn: SqliteConnection,
    mut rx: mpsc::Receiver<Job>,
    max_batch: usize,
    stop: CancellationToken,
    done: Arc<tokio::sync::Notify>,
) {
    let mut batch: Vec<Job> = Vec::with_capacity(max_batch);
    loop {
        tokio::select! {
            biased;
            n = rx.recv_many(&mut batch, max_batch) => {
                if n == 0 {
                    break;
                }
                commit_batch(&mut conn, &mut batch).await;
            }
            () = stop.cancelled() => {
                // Finish what is queued, then stop.
                rx.close();
                while rx.recv_many(&mut batch, max_batch).await > 0 {
                    commit_batch(&mut conn, &mut batch).await;
                }
                break;
            }
        }
    }
    let _ = sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
        .execute(&mut conn)
        .await;
    let _ = conn.close().await;
    done.notify_waiters();
    done.notify_one();
}

async fn commit_batch(conn: &mut SqliteConnection, batch: &mut Vec<Job>) {
    let mut deliveries: Vec<Deliver> = Vec::with_capacity(batch.len());
    // A lone write needs no savepoint: if it fails, the whole transaction rolls back.
    let alone = batch.len() == 1;
    let outcome: Result<(), StoreError> = async {
        sqlx::query("BEGIN IMMEDIATE").execute(&mut *conn).await?;
        if alone {
            let job = batch.pop().expect("one job");
            let (failed, deliver) = job(conn).await;
            deliveries.push(deliver);
            let end = if failed { "ROLLBACK" } else { "COMMIT" };
            sqlx::query(end).execute(&mut *conn).await?;
            return Ok(());
        }
        for job in batch.drain(..) {
            sqlx::query("SAVEPOINT w").execute(&mut *conn).await?;
            let (failed, deliver) = job(conn).await;
            deliveries.push(deliver);
            if failed {
                sqlx::query("ROLLBACK TO w").execute(&mut *conn).await?;
            }
            sqlx::query("RELEASE w").execute(&mut *conn).await?;
        }
        sqlx::query("COMMIT").execute(&mut *conn).await?;
        Ok(())
    }
    .await;
    if let Err(e) = &outcome {
        tracing::error!(error = %e, "group commit failed; rolling back");
        let _ = sqlx::query("ROLLBACK").execute(&mut *conn).await;
    }
    // Jobs never run because an earlier statement failed get the failure too.
    for job in batch.drain(..) {
        drop(job);
    }
    for deliver in deliveries {
        deliver(outcome.clone());
    }
}
