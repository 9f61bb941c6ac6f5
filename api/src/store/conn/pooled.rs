//! [`Conn`] for sqlx's connections: Postgres (reads and writes) and SQLite's readers. Each query
//! is handed to sqlx as it is, its arguments bound in order with their types.

use futures_util::TryStreamExt as _;
use sqlx::{PgConnection, Postgres, Sqlite, SqliteConnection};

use super::{Arg, Conn, Query, Record};
use crate::store::StoreResult;

/// Implements [`Conn`] for the sqlx connection `$conn` of database `$db`.
macro_rules! pooled_conn {
    ($conn:ty, $db:ty, $lock:literal) => {
        impl Conn for $conn {
            const LOCK: &'static str = $lock;

            async fn execute(&mut self, q: Query) -> StoreResult<u64> {
                let mut query = sqlx::query::<$db>(sqlx::AssertSqlSafe(q.sql.0));
                for arg in q.args {
                    query = match arg {
                        Arg::Int(v) => query.bind(v),
                        Arg::Text(v) => query.bind(v),
                        Arg::Bytes(v) => query.bind(v),
                    };
                }
                Ok(query.execute(&mut *self).await?.rows_affected())
            }

            async fn fetch_optional<T: Record>(&mut self, q: Query) -> StoreResult<Option<T>> {
                Ok(bound_as::<T, $db>(q).fetch_optional(&mut *self).await?)
            }

            async fn fetch_one<T: Record>(&mut self, q: Query) -> StoreResult<T> {
                Ok(bound_as::<T, $db>(q).fetch_one(&mut *self).await?)
            }

            async fn fetch_all<T: Record>(&mut self, q: Query) -> StoreResult<Vec<T>> {
                Ok(bound_as::<T, $db>(q).fetch_all(&mut *self).await?)
            }

            async fn fetch_each<T: Record, F: FnMut(T) + Send>(
                &mut self,
                q: Query,
                mut f: F,
            ) -> StoreResult<()> {
                let mut rows = bound_as::<T, $db>(q).fetch(&mut *self);
                while let Some(row) = rows.try_next().await? {
                    f(row);
                }
                Ok(())
            }
        }
    };
}

pooled_conn!(PgConnection, Postgres, " FOR UPDATE");
pooled_conn!(SqliteConnection, Sqlite, "");

/// `q` as an sqlx query of `DB` reading `T`, its arguments bound in order.
fn bound_as<'q, T, DB>(
    q: Query,
) -> sqlx::query::QueryAs<'q, DB, T, <DB as sqlx::Database>::Arguments>
where
    DB: sqlx::Database,
    T: for<'r> sqlx::FromRow<'r, DB::Row>,
    Option<i64>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    Option<String>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    Option<Vec<u8>>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    let mut query = sqlx::query_as::<DB, T>(sqlx::AssertSqlSafe(q.sql.0));
    for arg in q.args {
        query = match arg {
            Arg::Int(v) => query.bind(v),
            Arg::Text(v) => query.bind(v),
            Arg::Bytes(v) => query.bind(v),
        };
    }
    query
}
