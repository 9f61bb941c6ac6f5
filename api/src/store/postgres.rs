//! The Postgres backend: a connection pool; each write is one transaction that starts by locking
//! its thread's row (`SELECT … FOR UPDATE`), so writes to one thread are serialised and fencing
//! and version checks cannot race. Commits use the server's default `synchronous_commit = on`.

use std::time::Duration;

use futures_util::future::BoxFuture;
use sqlx::postgres::PgPoolOptions;
use sqlx::{PgConnection, PgPool};

use std::sync::Arc;

use super::latest::LatestCache;
use super::{StoreOptions, StoreResult};

/// A Postgres checkpoint store.
#[derive(Clone)]
pub struct PostgresStore {
    pool: PgPool,
    latest: Arc<LatestCache>,
}

impl PostgresStore {
    /// Connects and migrates.
    pub(crate) async fn open(url: &str, options: &StoreOptions) -> StoreResult<Self> {
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections.max(2))
            .acquire_timeout(Duration::from_secs(10))
            .test_before_acquire(true)
            .connect(url)
            .await?;
        sqlx::migrate!("migrations/postgres").run(&pool).await?;
        Ok(Self {
            pool,
            latest: Arc::new(LatestCache::new(options.latest_cache_bytes)),
        })
    }

    pub(crate) async fn write<T, F>(&self, op: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut PgConnection) -> BoxFuture<'c, StoreResult<T>> + Send + 'static,
    {
        let mut tx = self.pool.begin().await?;
        let value = op(&mut tx).await?;
        tx.commit().await?;
        Ok(value)
    }

    pub(crate) fn latest_cache(&self) -> &LatestCache {
        &self.latest
    }

    pub(crate) async fn reader(&self) -> StoreResult<sqlx::pool::PoolConnection<sqlx::Postgres>> {
        Ok(self.pool.acquire().await?)
    }

    pub(crate) async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    pub(crate) async fn close(&self) {
        self.pool.close().await;
    }
}

/// Starts a read transaction: every statement in it reads one snapshot (`REPEATABLE READ`), so
/// what a read assembles from several rows (a thread row, its state, its messages) is never torn
/// by a commit between them.
pub(crate) async fn snapshot(
    c: &mut PgConnection,
) -> StoreResult<sqlx::Transaction<'_, sqlx::Postgres>> {
    Ok(sqlx::Connection::begin_with(c, "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY").await?)
}
