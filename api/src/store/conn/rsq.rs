//! [`Conn`] for the rusqlite connection of SQLite's writer thread, so the store's operations run
//! there without an async bridge.
//!
//! The futures never wait: rusqlite is synchronous, so each one completes on its first poll, on
//! the writer's own thread (see [`run_now`]). Statements are prepared once per connection
//! (`prepare_cached`). Parameters are written `$1`, `$2`, … as on Postgres and bound by their
//! number, whatever order they appear in.

use rusqlite::Connection;
use rusqlite::types::Value;

use super::{Arg, Conn, Query, Record};
use crate::store::{StoreError, StoreResult};

/// An argument as SQLite stores it.
fn value(arg: &Arg) -> Value {
    match arg {
        Arg::Int(v) => v.map_or(Value::Null, Value::Integer),
        Arg::Text(v) => v.clone().map_or(Value::Null, Value::Text),
        Arg::Bytes(v) => v.clone().map_or(Value::Null, Value::Blob),
    }
}

/// The statement of `q`, prepared (or taken from the connection's cache) with its arguments bound
/// by number.
fn prepare<'c>(c: &'c Connection, q: &Query) -> rusqlite::Result<rusqlite::CachedStatement<'c>> {
    let mut stmt = c.prepare_cached(&q.sql.0)?;
    for i in 1..=stmt.parameter_count() {
        let name = stmt.parameter_name(i).unwrap_or_default();
        let n: usize = name
            .strip_prefix('$')
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| rusqlite::Error::InvalidParameterName(name.to_string()))?;
        let arg = q
            .args
            .get(n.wrapping_sub(1))
            .ok_or(rusqlite::Error::InvalidParameterCount(n, q.args.len()))?;
        stmt.raw_bind_parameter(i, value(arg))?;
    }
    Ok(stmt)
}

/// Runs the statement of `q`.
fn execute(c: &Connection, q: &Query) -> rusqlite::Result<usize> {
    prepare(c, q)?.raw_execute()
}

/// Reads the rows of `q`, each handed to `f`.
fn each<T: FromRow>(c: &Connection, q: &Query, mut f: impl FnMut(T)) -> rusqlite::Result<()> {
    let mut stmt = prepare(c, q)?;
    let mut rows = stmt.raw_query();
    while let Some(row) = rows.next()? {
        f(T::from_row(row)?);
    }
    Ok(())
}

/// The first row of `q`, if any.
fn first<T: FromRow>(c: &Connection, q: &Query) -> rusqlite::Result<Option<T>> {
    let mut stmt = prepare(c, q)?;
    let mut rows = stmt.raw_query();
    match rows.next()? {
        Some(row) => T::from_row(row).map(Some),
        None => Ok(None),
    }
}

impl Conn for Connection {
    const LOCK: &'static str = "";

    async fn execute(&mut self, q: Query) -> StoreResult<u64> {
        Ok(execute(self, &q)? as u64)
    }

    async fn fetch_optional<T: Record>(&mut self, q: Query) -> StoreResult<Option<T>> {
        Ok(first(self, &q)?)
    }

    async fn fetch_one<T: Record>(&mut self, q: Query) -> StoreResult<T> {
        Ok(first(self, &q)?.ok_or(rusqlite::Error::QueryReturnedNoRows)?)
    }

    async fn fetch_all<T: Record>(&mut self, q: Query) -> StoreResult<Vec<T>> {
        let mut out = Vec::new();
        each(self, &q, |row| out.push(row))?;
        Ok(out)
    }

    async fn fetch_each<T: Record, F: FnMut(T) + Send>(
        &mut self,
        q: Query,
        f: F,
    ) -> StoreResult<()> {
        Ok(each(self, &q, f)?)
    }
}

/// A type read from a row.
pub(crate) trait FromRow: Sized {
    /// Reads it.
    fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self>;
}

/// Implements [`FromRow`] for a tuple of columns read by position.
macro_rules! tuple_from_row {
    ($($t:ident $i:tt),+) => {
        impl<$($t: rusqlite::types::FromSql),+> FromRow for ($($t,)+) {
            fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
                Ok(($(row.get::<_, $t>($i)?,)+))
            }
        }
    };
}

tuple_from_row!(A 0);
tuple_from_row!(A 0, B 1);
tuple_from_row!(A 0, B 1, C 2);
tuple_from_row!(A 0, B 1, C 2, D 3);
tuple_from_row!(A 0, B 1, C 2, D 3, E 4);
tuple_from_row!(A 0, B 1, C 2, D 3, E 4, F 5);

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

/// Runs one of the store's operations on the writer's connection (its futures never wait) to
/// completion on this thread; one that waited is an error.
pub(crate) fn run<T>(op: impl std::future::Future<Output = StoreResult<T>>) -> StoreResult<T> {
    run_now(op).unwrap_or_else(|| {
        Err(StoreError::Database(
            "a SQLite write waited on the writer thread".into(),
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::conn::{query, query_as};

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
        let c = Connection::open_in_memory().unwrap();
        let err = execute(&c, &query("SELECT $1, $2").bind(1i64))
            .err()
            .unwrap();
        assert!(
            matches!(err, rusqlite::Error::InvalidParameterCount(2, 1)),
            "{err}"
        );
    }
}
