//! The store's one seam to a database connection: the query builder every operation in `ops` is
//! written with (`query`, `query_as`, `bind`, `execute`, `fetch_*`), and the [`Conn`] trait that
//! each connection implements — sqlx's Postgres and SQLite connections (`pooled.rs`) and the
//! rusqlite connection of SQLite's writer thread (`rsq.rs`). So every operation is one ordinary
//! generic function, and the backend is the connection it is called with.
//!
//! Arguments are integers, text and bytes, any of which may be NULL: everything the schema stores
//! is BIGINT or text (JSON is text, times are Unix milliseconds), but for the bytes of snapshot
//! objects (BLOB on SQLite, BYTEA on Postgres). A NULL keeps its type, so Postgres is told the
//! same parameter types as when each value was bound to sqlx directly.

pub(crate) mod pooled;
pub(crate) mod rsq;

use std::borrow::Cow;
use std::future::Future;
use std::marker::PhantomData;

use super::StoreResult;

/// SQL built at run time (a table or column list spliced in), as `sqlx::AssertSqlSafe` marks it.
pub(crate) struct AssertSqlSafe<T>(pub(crate) T);

/// SQL text: a literal or a string marked safe.
pub(crate) struct Sql(pub(crate) Cow<'static, str>);

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

/// A bound value: an integer or text, each typed even when NULL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Arg {
    /// A BIGINT.
    Int(Option<i64>),
    /// Text.
    Text(Option<String>),
    /// Bytes (a BLOB or BYTEA).
    Bytes(Option<Vec<u8>>),
}

/// A value a query binds.
pub(crate) trait Bind {
    /// The NULL of this type.
    const NULL: Arg;
    /// The value as bound.
    fn arg(self) -> Arg;
}

impl Bind for i64 {
    const NULL: Arg = Arg::Int(None);
    fn arg(self) -> Arg {
        Arg::Int(Some(self))
    }
}

impl Bind for String {
    const NULL: Arg = Arg::Text(None);
    fn arg(self) -> Arg {
        Arg::Text(Some(self))
    }
}

impl Bind for &str {
    const NULL: Arg = Arg::Text(None);
    fn arg(self) -> Arg {
        Arg::Text(Some(self.to_string()))
    }
}

impl Bind for &String {
    const NULL: Arg = Arg::Text(None);
    fn arg(self) -> Arg {
        Arg::Text(Some(self.clone()))
    }
}

impl Bind for &[u8] {
    const NULL: Arg = Arg::Bytes(None);
    fn arg(self) -> Arg {
        Arg::Bytes(Some(self.to_vec()))
    }
}

impl<T: Bind> Bind for Option<T> {
    const NULL: Arg = T::NULL;
    fn arg(self) -> Arg {
        self.map_or(T::NULL, Bind::arg)
    }
}

/// A type read from a row, on every backend: sqlx's `FromRow` for Postgres and SQLite's readers,
/// [`rsq::FromRow`] for SQLite's writer.
pub(crate) trait Record:
    rsq::FromRow
    + for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow>
    + for<'r> sqlx::FromRow<'r, sqlx::sqlite::SqliteRow>
    + Send
    + Unpin
    + 'static
{
}

impl<T> Record for T where
    T: rsq::FromRow
        + for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow>
        + for<'r> sqlx::FromRow<'r, sqlx::sqlite::SqliteRow>
        + Send
        + Unpin
        + 'static
{
}

/// A connection the store's operations run on (in a transaction its caller holds).
pub(crate) trait Conn: Send {
    /// What a read that starts a write appends to lock the rows it reads: `" FOR UPDATE"` on
    /// Postgres; nothing on SQLite, whose writer already holds the database's write lock.
    const LOCK: &'static str;

    /// Runs a statement; returns the rows it inserted, updated or deleted.
    fn execute(&mut self, q: Query) -> impl Future<Output = StoreResult<u64>> + Send;

    /// The first row, if any.
    fn fetch_optional<T: Record>(
        &mut self,
        q: Query,
    ) -> impl Future<Output = StoreResult<Option<T>>> + Send;

    /// The first row; no row is an error.
    fn fetch_one<T: Record>(&mut self, q: Query) -> impl Future<Output = StoreResult<T>> + Send;

    /// Every row.
    fn fetch_all<T: Record>(
        &mut self,
        q: Query,
    ) -> impl Future<Output = StoreResult<Vec<T>>> + Send;

    /// Hands each row to `f` as it is read (no list of all of them).
    fn fetch_each<T: Record, F: FnMut(T) + Send>(
        &mut self,
        q: Query,
        f: F,
    ) -> impl Future<Output = StoreResult<()>> + Send;
}

/// `sql` as the read that starts a write on `C`: with [`Conn::LOCK`] appended.
pub(crate) fn for_write<C: Conn>(sql: &str) -> AssertSqlSafe<String> {
    AssertSqlSafe(format!("{sql}{}", C::LOCK))
}

/// What `execute` reports.
pub(crate) struct Done(u64);

impl Done {
    /// Rows inserted, updated or deleted.
    pub(crate) fn rows_affected(&self) -> u64 {
        self.0
    }
}

/// A query with its arguments.
pub(crate) struct Query {
    pub(crate) sql: Sql,
    pub(crate) args: Vec<Arg>,
}

/// A statement to run.
pub(crate) fn query(sql: impl Into<Sql>) -> Query {
    Query {
        sql: sql.into(),
        args: Vec::new(),
    }
}

/// A statement whose rows are read as `T`.
pub(crate) fn query_as<T: Record>(sql: impl Into<Sql>) -> QueryAs<T> {
    QueryAs {
        query: query(sql),
        row: PhantomData,
    }
}

impl Query {
    /// Binds the next parameter (`$1`, then `$2`, …).
    pub(crate) fn bind(mut self, value: impl Bind) -> Self {
        self.args.push(value.arg());
        self
    }

    /// Runs the statement.
    pub(crate) async fn execute<C: Conn>(self, c: &mut C) -> StoreResult<Done> {
        c.execute(self).await.map(Done)
    }
}

/// A query whose rows are read as `T`.
pub(crate) struct QueryAs<T> {
    query: Query,
    row: PhantomData<fn() -> T>,
}

impl<T: Record> QueryAs<T> {
    /// Binds the next parameter.
    pub(crate) fn bind(mut self, value: impl Bind) -> Self {
        self.query = self.query.bind(value);
        self
    }

    /// The first row, if any.
    pub(crate) async fn fetch_optional<C: Conn>(self, c: &mut C) -> StoreResult<Option<T>> {
        c.fetch_optional(self.query).await
    }

    /// The first row; no row is an error.
    pub(crate) async fn fetch_one<C: Conn>(self, c: &mut C) -> StoreResult<T> {
        c.fetch_one(self.query).await
    }

    /// Every row.
    pub(crate) async fn fetch_all<C: Conn>(self, c: &mut C) -> StoreResult<Vec<T>> {
        c.fetch_all(self.query).await
    }

    /// Hands each row to `f` as it is read.
    pub(crate) async fn fetch_each<C: Conn>(
        self,
        c: &mut C,
        f: impl FnMut(T) + Send,
    ) -> StoreResult<()> {
        c.fetch_each(self.query, f).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_null_keeps_the_type_of_its_column() {
        assert_eq!(None::<i64>.arg(), Arg::Int(None));
        assert_eq!(None::<&str>.arg(), Arg::Text(None));
        assert_eq!(Some(3i64).arg(), Arg::Int(Some(3)));
        assert_eq!(Some("x").arg(), Arg::Text(Some("x".into())));
    }
}
