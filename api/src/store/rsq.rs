//! The few parts of sqlx's query API that the store's writes use (`query`, `query_as`, `bind`,
//! `execute`, `fetch_one`, `fetch_optional`), over a rusqlite connection, so the same query text in
//! `ops.rs` runs on SQLite's writer thread without an async bridge.
//!
//! The futures never wait: rusqlite is synchronous, so each one completes on its first poll, on
//! the writer's own thread (see [`run_now`]). Statements are prepared once per connection
//! (`prepare_cached`). Parameters are written `$1`, `$2`, … as on Postgres and bound by their
//! number, whatever order they appear in.

use std::borrow::Cow;
use std::marker::PhantomData;

use rusqlite::Connection;
use rusqlite::types::Value;

use super::ops::{ApprovalRow, Enqueued, HandoffRow, ThreadRow, ToolCallRow};
use super::triggers::TriggerRow;

/// SQL built at run time (a table or column list spliced in), as `sqlx::AssertSqlSafe` marks it.
pub(crate) struct AssertSqlSafe<T>(pub(crate) T);

/// SQL text: a literal or a string marked safe.
pub(crate) struct Sql(Cow<'static, str>);

impl From<&'static str> for Sql {
    fn from(s: &'static str) -> Self {
        Sql(Cow::Borrowed(s))
    }
}

impl From<AssertSqlSafe<String>> for Sql {
    fn from(s: AssertSqlSafe<String>) -> Self {
        Sql(Cow::Owned(s.0))
    }
}

/// A value a query binds.
pub(crate) trait Arg {
    /// As SQLite stores it.
    fn value(self) -> Value;
}

impl Arg for i64 {
    fn value(self) -> Value {
        Value::Integer(self)
    }
}

impl Arg for String {
    fn value(self) -> Value {
        Value::Text(self)
    }
}

impl Arg for &str {
    fn value(self) -> Value {
        Value::Text(self.to_string())
    }
}

impl Arg for &String {
    fn value(self) -> Value {
        Value::Text(self.clone())
    }
}

impl<T: Arg> Arg for Option<T> {
    fn value(self) -> Value {
        self.map_or(Value::Null, Arg::value)
    }
}

/// What `execute` reports.
pub(crate) struct Done(usize);

impl Done {
    /// Rows inserted, updated or deleted.
    pub(crate) fn rows_affected(&self) -> u64 {
        self.0 as u64
    }
}

/// A query with its arguments.
pub(crate) struct Query {
    sql: Sql,
    args: Vec<Value>,
}

/// A statement to run.
pub(crate) fn query(sql: impl Into<Sql>) -> Query {
    Query {
        sql: sql.into(),
        args: Vec::new(),
    }
}

/// A statement whose rows are read as `T`.
pub(crate) fn query_as<T: FromRow>(sql: impl Into<Sql>) -> QueryAs<T> {
    QueryAs {
        query: query(sql),
        row: PhantomData,
    }
}

impl Query {
    /// Binds the next parameter (`$1`, then `$2`, …).
    pub(crate) fn bind(mut self, value: impl Arg) -> Self {
        self.args.push(value.value());
        self
    }

    fn prepare<'c>(&self, c: &'c Connection) -> rusqlite::Result<rusqlite::CachedStatement<'c>> {
        let mut stmt = c.prepare_cached(&self.sql.0)?;
        for i in 1..=stmt.parameter_count() {
            let name = stmt.parameter_name(i).unwrap_or_default();
            let n: usize = name
                .strip_prefix('$')
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| rusqlite::Error::InvalidParameterName(name.to_string()))?;
            let value = self
                .args
                .get(n.wrapping_sub(1))
                .ok_or(rusqlite::Error::InvalidParameterCount(n, self.args.len()))?;
            stmt.raw_bind_parameter(i, value)?;
        }
        Ok(stmt)
    }

    /// Runs the statement.
    pub(crate) async fn execute(self, c: &mut Connection) -> rusqlite::Result<Done> {
        self.prepare(c)?.raw_execute().map(Done)
    }
}

/// A query whose rows are read as `T`.
pub(crate) struct QueryAs<T> {
    query: Query,
    row: PhantomData<fn() -> T>,
}

impl<T: FromRow> QueryAs<T> {
    /// Binds the next parameter.
    pub(crate) fn bind(mut self, value: impl Arg) -> Self {
        self.query = self.query.bind(value);
        self
    }

    /// The first row, if any.
    pub(crate) async fn fetch_optional(self, c: &mut Connection) -> rusqlite::Result<Option<T>> {
        let mut stmt = self.query.prepare(c)?;
        let mut rows = stmt.raw_query();
        match rows.next()? {
            Some(row) => T::from_row(row).map(Some),
            None => Ok(None),
        }
    }

    /// Every row.
    pub(crate) async fn fetch_all(self, c: &mut Connection) -> rusqlite::Result<Vec<T>> {
        let mut stmt = self.query.prepare(c)?;
        let mut rows = stmt.raw_query();
        let mut out = Vec::new();
        while let Some(row) = rows.next()? {
            out.push(T::from_row(row)?);
        }
        Ok(out)
    }

    /// The first row; no row is an error.
    pub(crate) async fn fetch_one(self, c: &mut Connection) -> rusqlite::Result<T> {
        self.fetch_optional(c)
            .await?
            .ok_or(rusqlite::Error::QueryReturnedNoRows)
    }
}

/// A type read from a row.
pub(crate) trait FromRow: Sized {
    /// Reads it.
    fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self>;
}

impl FromRow for (i64,) {
    fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok((row.get(0)?,))
    }
}

impl FromRow for (String,) {
    fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok((row.get(0)?,))
    }
}

impl FromRow for HandoffRow {
    fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(HandoffRow {
            thread_id: row.get("thread_id")?,
            key: row.get("key")?,
            pool: row.get("pool")?,
            from_agent: row.get("from_agent")?,
            epoch: row.get("epoch")?,
            turn_seq: row.get("turn_seq")?,
            call_id: row.get("call_id")?,
            agent: row.get("agent")?,
            session: row.get("session")?,
            target_thread_id: row.get("target_thread_id")?,
            inbox_seq: row.get("inbox_seq")?,
            task: row.get("task")?,
            context: row.get("context")?,
            chain: row.get("chain")?,
            status: row.get("status")?,
            reply: row.get("reply")?,
            cost_nano_usd: row.get("cost_nano_usd")?,
            created_at: row.get("created_at")?,
            expires_at: row.get("expires_at")?,
            replied_at: row.get("replied_at")?,
        })
    }
}

impl FromRow for (Option<String>,) {
    fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok((row.get(0)?,))
    }
}

impl FromRow for (i64, String) {
    fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok((row.get(0)?, row.get(1)?))
    }
}

impl FromRow for TriggerRow {
    fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(TriggerRow {
            pool: row.get(0)?,
            name: row.get(1)?,
            agent: row.get(2)?,
            path: row.get(3)?,
            spec: row.get(4)?,
            secret: row.get(5)?,
            digest: row.get(6)?,
            next_fire_at: row.get(7)?,
            planned_to: row.get(8)?,
            buffered_at: row.get(9)?,
            last_thread_id: row.get(10)?,
            last_inbox_seq: row.get(11)?,
            created_at: row.get(12)?,
            updated_at: row.get(13)?,
        })
    }
}

impl FromRow for (String, i64, String, String, i64) {
    fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok((
            row.get(0)?,
            row.get(1)?,
            row.get(2)?,
            row.get(3)?,
            row.get(4)?,
        ))
    }
}

impl FromRow for (i64, i64) {
    fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok((row.get(0)?, row.get(1)?))
    }
}

impl FromRow for ThreadRow {
    fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(ThreadRow {
            thread_id: row.get("thread_id")?,
            pool: row.get("pool")?,
            agent: row.get("agent")?,
            replica: row.get("replica")?,
            session: row.get("session")?,
            epoch: row.get("epoch")?,
            boot_count: row.get("boot_count")?,
            version: row.get("version")?,
            history_len: row.get("history_len")?,
            status: row.get("status")?,
            inbox_seq: row.get("inbox_seq")?,
            inbox_cursor: row.get("inbox_cursor")?,
            event_seq: row.get("event_seq")?,
            created_at: row.get("created_at")?,
            updated_at: row.get("updated_at")?,
        })
    }
}

impl FromRow for ToolCallRow {
    fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(ToolCallRow {
            key: row.get("key")?,
            turn_seq: row.get("turn_seq")?,
            tool: row.get("tool")?,
            args: row.get("args")?,
            effect: row.get("effect")?,
            status: row.get("status")?,
            result: row.get("result")?,
            intent_epoch: row.get("intent_epoch")?,
            completed_epoch: row.get("completed_epoch")?,
            created_at: row.get("created_at")?,
            completed_at: row.get("completed_at")?,
        })
    }
}

impl FromRow for Enqueued {
    fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(Enqueued {
            inbox_seq: row.get("inbox_seq")?,
            pool: row.get("pool")?,
            agent: row.get("agent")?,
            session: row.get("session")?,
            session_replicas: row.get("session_replicas")?,
            session_replica: row.get("session_replica")?,
        })
    }
}

impl FromRow for (String, String) {
    fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok((row.get(0)?, row.get(1)?))
    }
}

impl FromRow for (String, String, i64, i64) {
    fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
    }
}

impl FromRow for ApprovalRow {
    fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(ApprovalRow {
            id: row.get("id")?,
            thread_id: row.get("thread_id")?,
            pool: row.get("pool")?,
            agent: row.get("agent")?,
            replica: row.get("replica")?,
            session: row.get("session")?,
            key: row.get("key")?,
            call_id: row.get("call_id")?,
            epoch: row.get("epoch")?,
            turn_seq: row.get("turn_seq")?,
            kind: row.get("kind")?,
            tool: row.get("tool")?,
            args: row.get("args")?,
            args_hash: row.get("args_hash")?,
            status: row.get("status")?,
            requested_at: row.get("requested_at")?,
            expires_at: row.get("expires_at")?,
            decided_at: row.get("decided_at")?,
            decided_by: row.get("decided_by")?,
            reason: row.get("reason")?,
            answer: row.get("answer")?,
        })
    }
}

/// Runs a future that never waits (every future of this module, and the store's write operations
/// built only from them) to completion on this thread. One that did wait is an error, not a hang.
pub(crate) fn run_now<F: std::future::Future>(f: F) -> Option<F::Output> {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match f.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(v) => Some(v),
        std::task::Poll::Pending => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_bind_by_number_whatever_order_they_appear_in() {
        let mut c = Connection::open_in_memory().unwrap();
        c.execute_batch("CREATE TABLE t (a BIGINT, b TEXT, c TEXT)")
            .unwrap();
        let done = run_now(
            query("INSERT INTO t (c, a, b) VALUES ($3, $1, $2)")
                .bind(7i64)
                .bind("bee")
                .bind(Some("sea".to_string()))
                .execute(&mut c),
        )
        .unwrap()
        .unwrap();
        assert_eq!(done.rows_affected(), 1);
        let row: (i64,) = run_now(
            query_as("SELECT a FROM t WHERE b = $2 AND c = $1")
                .bind("sea")
                .bind("bee")
                .fetch_one(&mut c),
        )
        .unwrap()
        .unwrap();
        assert_eq!(row, (7,));
        let none: Option<(i64,)> = run_now(
            query_as("SELECT a FROM t WHERE b = $1")
                .bind(None::<String>)
                .fetch_optional(&mut c),
        )
        .unwrap()
        .unwrap();
        assert_eq!(none, None);
    }

    #[test]
    fn a_missing_argument_is_an_error_not_a_null() {
        let mut c = Connection::open_in_memory().unwrap();
        let err = run_now(query("SELECT $1, $2").bind(1i64).execute(&mut c))
            .unwrap()
            .err()
            .unwrap();
        assert!(
            matches!(err, rusqlite::Error::InvalidParameterCount(2, 1)),
            "{err}"
        );
    }
}
