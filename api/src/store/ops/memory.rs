//! Memories: an agent's (or a session's) files under `/memories`, one memory per (pool, agent,
//! scope, session). A runner's command runs in one transaction: the fencing read of its thread
//! (whose labels say whose memory it is), the op log (a key applied before answers its first
//! result, applied again never), the memory's lock row, its files, the pure command
//! (`memory_rules`), the changes and the op's record. The admin's reads, edits and purges go
//! through the same lock.

use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{
    ErrorCode, MemoryCommand, MemoryFile, MemoryFileContent, MemoryOpRequest, MemoryOpResult,
    MemoryScope, check_op_key,
};
use sha2::{Digest, Sha256};

use crate::memory_rules::{self, Change, Files, Outcome};
use crate::store::codec::{corrupt, time, to_u64};
use crate::store::conn::{AssertSqlSafe, Conn, Query, QueryAs, Record, for_write, query, query_as};
use crate::store::{StoreError, StoreResult};

use super::threads::fenced_thread;

/// Which memory: an agent's (`session` empty) or one session's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemorySpace {
    /// The pool.
    pub pool: String,
    /// The agent.
    pub agent: String,
    /// Whose memory.
    pub scope: MemoryScope,
    /// For `session` scope, the session key (a thread that is not a session's: its ID); empty
    /// for `agent` scope.
    pub session: String,
}

impl MemorySpace {
    /// The memory of `scope` that thread `id`, labelled so, uses: its agent's, or its session's
    /// (for a thread that is not a session's, the thread's own, under its ID).
    fn of_thread(
        id: ThreadId,
        pool: Option<String>,
        agent: Option<String>,
        session: Option<String>,
        scope: MemoryScope,
    ) -> StoreResult<MemorySpace> {
        let (Some(pool), Some(agent)) = (pool, agent) else {
            return Err(StoreError::Invalid {
                code: ErrorCode::UnlabelledThread,
                message: format!(
                    "thread {id} has no pool and agent, and memory belongs to an agent: run it as an agent of a pool (`ninetrix up`), or mint its runner token with `pool` and `agent`"
                ),
            });
        };
        let session = match scope {
            MemoryScope::Agent => String::new(),
            MemoryScope::Session => session.unwrap_or_else(|| id.to_string()),
        };
        Ok(MemorySpace {
            pool,
            agent,
            scope,
            session,
        })
    }

    /// A file of this memory as the API lists it.
    fn file(&self, path: String, size: i64, updated_at: i64) -> MemoryFile {
        MemoryFile {
            pool: self.pool.clone(),
            agent: self.agent.clone(),
            scope: self.scope,
            session: (self.scope == MemoryScope::Session).then(|| self.session.clone()),
            path,
            size: to_u64(size),
            updated_at: time(updated_at),
        }
    }
}

/// Which memory files a listing returns.
#[derive(Clone, Debug, Default)]
pub struct MemoryFilter {
    /// The pool.
    pub pool: String,
    /// Only this agent's.
    pub agent: Option<String>,
    /// Only this scope.
    pub scope: Option<MemoryScope>,
    /// Only this session's (scope `session`).
    pub session: Option<String>,
    /// At most this many.
    pub limit: u32,
    /// Skip this many.
    pub offset: u32,
}

/// The columns that name a memory, as `$1..$4` bind them.
const SPACE: &str = "pool = $1 AND agent = $2 AND scope = $3 AND session = $4";

/// A statement that binds parameters in order (a plain query, or one whose rows are read).
trait Binds: Sized {
    fn then(self, value: &str) -> Self;
}

impl Binds for Query {
    fn then(self, value: &str) -> Self {
        self.bind(value)
    }
}

impl<T: Record> Binds for QueryAs<T> {
    fn then(self, value: &str) -> Self {
        self.bind(value)
    }
}

/// Binds a memory's four columns as `$1..$4`.
fn bind_space<Q: Binds>(q: Q, s: &MemorySpace) -> Q {
    q.then(&s.pool)
        .then(&s.agent)
        .then(s.scope.as_str())
        .then(&s.session)
}

/// Takes the memory's lock row (made on first use), so the commands on one memory run one at a
/// time (SQLite's writer already runs every write alone).
async fn lock<C: Conn>(c: &mut C, space: &MemorySpace, now: i64) -> StoreResult<()> {
    bind_space(
        query(
            "INSERT INTO memory_spaces (pool, agent, scope, session, updated_at) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (pool, agent, scope, session) DO NOTHING",
        ),
        space,
    )
    .bind(now)
    .execute(&mut *c)
    .await?;
    let _: Option<(String,)> = bind_space(
        query_as(for_write::<C>(&format!(
            "SELECT pool FROM memory_spaces WHERE {SPACE}"
        ))),
        space,
    )
    .fetch_optional(&mut *c)
    .await?;
    Ok(())
}

/// Every file of the memory with its content (at most 1 MiB in all).
async fn load<C: Conn>(c: &mut C, space: &MemorySpace) -> StoreResult<Files> {
    let rows: Vec<(String, String)> = bind_space(
        query_as(AssertSqlSafe(format!(
            "SELECT path, content FROM memories WHERE {SPACE}"
        ))),
        space,
    )
    .fetch_all(&mut *c)
    .await?;
    Ok(rows.into_iter().collect())
}

/// Stores a command's changes.
async fn write<C: Conn>(
    c: &mut C,
    space: &MemorySpace,
    changes: &[Change],
    now: i64,
) -> StoreResult<()> {
    for change in changes {
        match change {
            Change::Put { path, content } => {
                bind_space(
                    query(
                        "INSERT INTO memories (pool, agent, scope, session, path, content, size, updated_at) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
                         ON CONFLICT (pool, agent, scope, session, path) \
                         DO UPDATE SET content = excluded.content, size = excluded.size, updated_at = excluded.updated_at",
                    ),
                    space,
                )
                .bind(path.as_str())
                .bind(content.as_str())
                .bind(i64::try_from(content.len()).unwrap_or(i64::MAX))
                .bind(now)
                .execute(&mut *c)
                .await?;
            }
            Change::Delete { path } => {
                bind_space(
                    query(AssertSqlSafe(format!(
                        "DELETE FROM memories WHERE {SPACE} AND path = $5"
                    ))),
                    space,
                )
                .bind(path.as_str())
                .execute(&mut *c)
                .await?;
            }
        }
    }
    if !changes.is_empty() {
        bind_space(
            query(AssertSqlSafe(format!(
                "UPDATE memory_spaces SET updated_at = $5 WHERE {SPACE}"
            ))),
            space,
        )
        .bind(now)
        .execute(&mut *c)
        .await?;
    }
    Ok(())
}

/// The SHA-256 of what a key stands for (the scope and the command), in hex.
fn digest(scope: MemoryScope, op: &MemoryCommand) -> String {
    let json = serde_json::to_string(&(scope, op)).unwrap_or_default();
    Sha256::digest(json.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Runs a runner's command that changes its memory (see the module doc): once per `op_key`.
pub(crate) async fn memory_op<C: Conn>(
    c: &mut C,
    id: ThreadId,
    request: &MemoryOpRequest,
    now: i64,
) -> StoreResult<MemoryOpResult> {
    check_op_key(&request.op_key).map_err(|message| StoreError::Invalid {
        code: ErrorCode::InvalidKey,
        message,
    })?;
    let row = fenced_thread(c, id, request.epoch).await?;
    let space = MemorySpace::of_thread(id, row.pool, row.agent, row.session, request.scope)?;
    let digest = digest(request.scope, &request.op);
    let done: Option<(String, String, i64)> = query_as(
        "SELECT digest, result, is_error FROM memory_ops WHERE thread_id = $1 AND op_key = $2",
    )
    .bind(id.to_string())
    .bind(request.op_key.as_str())
    .fetch_optional(&mut *c)
    .await?;
    if let Some((stored, result, is_error)) = done {
        if stored != digest {
            return Err(StoreError::KeyReused(format!(
                "op_key `{}` was used for another memory command of thread {id}; the first one stands (a key names one call)",
                request.op_key
            )));
        }
        return Ok(MemoryOpResult {
            content: result,
            is_error: is_error != 0,
            replayed: true,
        });
    }
    lock(c, &space, now).await?;
    let files = load(c, &space).await?;
    let outcome = memory_rules::apply(&files, &request.op);
    write(c, &space, &outcome.changes, now).await?;
    query(
        "INSERT INTO memory_ops (thread_id, op_key, pool, agent, digest, result, is_error, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(id.to_string())
    .bind(request.op_key.as_str())
    .bind(space.pool.as_str())
    .bind(space.agent.as_str())
    .bind(digest)
    .bind(outcome.text.as_str())
    .bind(i64::from(outcome.is_error()))
    .bind(now)
    .execute(&mut *c)
    .await?;
    Ok(MemoryOpResult {
        is_error: outcome.is_error(),
        content: outcome.text,
        replayed: false,
    })
}

/// Runs a runner's `view` (it changes nothing, so it is neither fenced nor logged).
pub(crate) async fn memory_view<C: Conn>(
    c: &mut C,
    id: ThreadId,
    request: &MemoryOpRequest,
) -> StoreResult<MemoryOpResult> {
    let row: Option<super::threads::ThreadRow> = query_as(super::threads::SELECT_THREAD)
        .bind(id.to_string())
        .fetch_optional(&mut *c)
        .await?;
    let row = super::threads::live(id, row.ok_or(StoreError::NotFound("thread"))?)?;
    let space = MemorySpace::of_thread(id, row.pool, row.agent, row.session, request.scope)?;
    let files = load(c, &space).await?;
    let outcome = memory_rules::apply(&files, &request.op);
    Ok(MemoryOpResult {
        is_error: outcome.is_error(),
        content: outcome.text,
        replayed: false,
    })
}

/// Runs the admin's command on a memory (an edit or a deletion): the outcome, whose refusal the
/// route answers as an error.
pub(crate) async fn edit_memory<C: Conn>(
    c: &mut C,
    space: &MemorySpace,
    command: &MemoryCommand,
    now: i64,
) -> StoreResult<Outcome> {
    lock(c, space, now).await?;
    let files = load(c, space).await?;
    let outcome = memory_rules::apply(&files, command);
    write(c, space, &outcome.changes, now).await?;
    Ok(outcome)
}

/// Memory files matching the filter, by agent, scope, session and path.
pub(crate) async fn list_memories<C: Conn>(
    c: &mut C,
    f: &MemoryFilter,
) -> StoreResult<Vec<MemoryFile>> {
    let rows: Vec<(String, String, String, String, i64, i64)> = query_as(
        "SELECT agent, scope, session, path, size, updated_at FROM memories \
         WHERE pool = $1 AND ($2 IS NULL OR agent = $2) AND ($3 IS NULL OR scope = $3) AND ($4 IS NULL OR session = $4) \
         ORDER BY agent, scope, session, path LIMIT $5 OFFSET $6",
    )
    .bind(f.pool.as_str())
    .bind(f.agent.as_deref())
    .bind(f.scope.map(MemoryScope::as_str))
    .bind(f.session.as_deref())
    .bind(i64::from(f.limit))
    .bind(i64::from(f.offset))
    .fetch_all(&mut *c)
    .await?;
    rows.into_iter()
        .map(|(agent, scope, session, path, size, updated_at)| {
            let scope =
                MemoryScope::parse(&scope).ok_or_else(|| corrupt("memory scope", &scope))?;
            let space = MemorySpace {
                pool: f.pool.clone(),
                agent,
                scope,
                session,
            };
            Ok(space.file(path, size, updated_at))
        })
        .collect()
}

/// One memory file with its content.
pub(crate) async fn memory_file<C: Conn>(
    c: &mut C,
    space: &MemorySpace,
    path: &str,
) -> StoreResult<Option<MemoryFileContent>> {
    let row: Option<(String, i64, i64)> = bind_space(
        query_as(AssertSqlSafe(format!(
            "SELECT content, size, updated_at FROM memories WHERE {SPACE} AND path = $5"
        ))),
        space,
    )
    .bind(path)
    .fetch_optional(&mut *c)
    .await?;
    Ok(row.map(|(content, size, updated_at)| MemoryFileContent {
        file: space.file(path.to_string(), size, updated_at),
        content,
    }))
}

/// Deletes every memory of a pool (of one agent, when given), with the op log of its commands;
/// returns how many files.
pub(crate) async fn purge_memories<C: Conn>(
    c: &mut C,
    pool: &str,
    agent: Option<&str>,
) -> StoreResult<u64> {
    let mut files = 0;
    for table in ["memories", "memory_spaces", "memory_ops"] {
        let done = query(AssertSqlSafe(format!(
            "DELETE FROM {table} WHERE pool = $1 AND ($2 IS NULL OR agent = $2)"
        )))
        .bind(pool)
        .bind(agent)
        .execute(&mut *c)
        .await?;
        if table == "memories" {
            files = done.rows_affected();
        }
    }
    Ok(files)
}
