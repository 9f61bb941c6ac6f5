//! Eval suites (issue 42): threads (and ranges of their turns) marked into a named suite, and the
//! runs `ninetrix eval` stores. A suite is made when first named (`eval_suites`, the counters
//! its members' and runs' IDs come from — its row is locked while one is taken) and is listed
//! while it has members or runs. Marking the same thread and range again, or storing a run under
//! a key seen before, changes nothing. A purge of a thread deletes its memberships (`purge`).

use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{
    EvalCaseResult, EvalMember, EvalMemberRequest, EvalRun, EvalRunRequest, EvalRunStored,
    EvalSuite, EvalSuiteList, EvalSuiteSummary,
};

use crate::store::codec::{corrupt, encode, labels, parse_id, time, to_i64, to_u64};
use crate::store::conn::{Conn, query, query_as, rsq};
use crate::store::{StoreError, StoreResult};

use super::turns::live_thread;

/// A member row joined with its thread's labels.
#[derive(sqlx::FromRow)]
struct MemberRow {
    id: i64,
    thread_id: String,
    pool: Option<String>,
    agent: Option<String>,
    replica: Option<i64>,
    session: Option<String>,
    from_turn: Option<i64>,
    to_turn: Option<i64>,
    added_at: i64,
}

impl rsq::FromRow for MemberRow {
    fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(MemberRow {
            id: row.get("id")?,
            thread_id: row.get("thread_id")?,
            pool: row.get("pool")?,
            agent: row.get("agent")?,
            replica: row.get("replica")?,
            session: row.get("session")?,
            from_turn: row.get("from_turn")?,
            to_turn: row.get("to_turn")?,
            added_at: row.get("added_at")?,
        })
    }
}

impl MemberRow {
    fn member(self) -> StoreResult<EvalMember> {
        Ok(EvalMember {
            id: to_u64(self.id),
            thread: parse_id(&self.thread_id)?,
            labels: labels(self.pool, self.agent, self.replica, self.session),
            from_turn: self.from_turn.map(to_u64),
            to_turn: self.to_turn.map(to_u64),
            added_at: time(self.added_at),
        })
    }
}

const MEMBER_SELECT: &str = "SELECT m.id, m.thread_id, t.pool, t.agent, t.replica, t.session, m.from_turn, m.to_turn, m.added_at \
     FROM eval_members m JOIN threads t ON t.thread_id = m.thread_id WHERE m.suite = $1";

/// A run row.
#[derive(sqlx::FromRow)]
struct RunRow {
    id: i64,
    suite: String,
    candidate: String,
    cases: String,
    passed: i64,
    created_at: i64,
}

impl rsq::FromRow for RunRow {
    fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(RunRow {
            id: row.get("id")?,
            suite: row.get("suite")?,
            candidate: row.get("candidate")?,
            cases: row.get("cases")?,
            passed: row.get("passed")?,
            created_at: row.get("created_at")?,
        })
    }
}

impl RunRow {
    fn run(self) -> StoreResult<EvalRun> {
        let cases: Vec<EvalCaseResult> = serde_json::from_str(&self.cases)
            .map_err(|e| corrupt("eval run cases", &e.to_string()))?;
        Ok(EvalRun {
            id: to_u64(self.id),
            suite: self.suite,
            candidate: self.candidate,
            cases,
            passed: self.passed != 0,
            created_at: time(self.created_at),
        })
    }
}

/// Takes the next value of the suite's member (or `run`) counter; the caller made and locked
/// its row ([`lock_suite`]).
async fn next_id<C: Conn>(c: &mut C, suite: &str, run: bool) -> StoreResult<i64> {
    let sql = if run {
        "UPDATE eval_suites SET run_seq = run_seq + 1 WHERE name = $1 RETURNING run_seq"
    } else {
        "UPDATE eval_suites SET member_seq = member_seq + 1 WHERE name = $1 RETURNING member_seq"
    };
    let (id,): (i64,) = query_as(sql).bind(suite).fetch_one(&mut *c).await?;
    Ok(id)
}

/// Locks the suite's row (made if new), so checks and inserts below do not race another writer.
async fn lock_suite<C: Conn>(c: &mut C, suite: &str, now: i64) -> StoreResult<()> {
    query("INSERT INTO eval_suites (name, created_at) VALUES ($1, $2) ON CONFLICT DO NOTHING")
        .bind(suite)
        .bind(now)
        .execute(&mut *c)
        .await?;
    query("UPDATE eval_suites SET name = name WHERE name = $1")
        .bind(suite)
        .execute(&mut *c)
        .await?;
    Ok(())
}

/// The member with this thread and range, if marked.
async fn member_by_range<C: Conn>(
    c: &mut C,
    suite: &str,
    thread: ThreadId,
    from: Option<i64>,
    to: Option<i64>,
) -> StoreResult<Option<EvalMember>> {
    let sql = format!(
        "{MEMBER_SELECT} AND m.thread_id = $2 AND COALESCE(m.from_turn, 0) = $3 AND COALESCE(m.to_turn, 0) = $4"
    );
    let row: Option<MemberRow> = query_as(crate::store::conn::AssertSqlSafe(sql))
        .bind(suite)
        .bind(thread.to_string())
        .bind(from.unwrap_or(0))
        .bind(to.unwrap_or(0))
        .fetch_optional(&mut *c)
        .await?;
    row.map(MemberRow::member).transpose()
}

/// `POST /v1/evals/{suite}/members` (the route checked the suite's name and the range): the
/// member, and whether it was marked now (`false`: marked before, nothing changed).
pub(crate) async fn add_eval_member<C: Conn>(
    c: &mut C,
    suite: &str,
    req: &EvalMemberRequest,
    now: i64,
) -> StoreResult<(EvalMember, bool)> {
    live_thread(c, req.thread, false).await?;
    let from = req.from_turn.map(|t| to_i64(t, "from_turn")).transpose()?;
    let to = req.to_turn.map(|t| to_i64(t, "to_turn")).transpose()?;
    lock_suite(c, suite, now).await?;
    if let Some(member) = member_by_range(c, suite, req.thread, from, to).await? {
        return Ok((member, false));
    }
    let id = next_id(c, suite, false).await?;
    query("INSERT INTO eval_members (suite, id, thread_id, from_turn, to_turn, added_at) VALUES ($1, $2, $3, $4, $5, $6)")
        .bind(suite)
        .bind(id)
        .bind(req.thread.to_string())
        .bind(from)
        .bind(to)
        .bind(now)
        .execute(&mut *c)
        .await?;
    let member = member_by_range(c, suite, req.thread, from, to)
        .await?
        .ok_or_else(|| corrupt("eval member", "not found after its insert"))?;
    Ok((member, true))
}

/// `DELETE /v1/evals/{suite}/members/{id}`: 404 when the suite has no such member.
pub(crate) async fn remove_eval_member<C: Conn>(
    c: &mut C,
    suite: &str,
    id: u64,
) -> StoreResult<()> {
    let done = query("DELETE FROM eval_members WHERE suite = $1 AND id = $2")
        .bind(suite)
        .bind(to_i64(id, "id")?)
        .execute(&mut *c)
        .await?;
    if done.rows_affected() == 0 {
        return Err(StoreError::Absent(format!(
            "suite `{suite}` has no member {id}: GET /v1/evals/{suite} lists its members"
        )));
    }
    Ok(())
}

/// `POST /v1/evals/{suite}/runs` (the route checked the fields): stored once per key.
pub(crate) async fn store_eval_run<C: Conn>(
    c: &mut C,
    suite: &str,
    req: &EvalRunRequest,
    now: i64,
) -> StoreResult<EvalRunStored> {
    lock_suite(c, suite, now).await?;
    let seen: Option<(i64,)> = query_as("SELECT id FROM eval_runs WHERE suite = $1 AND key = $2")
        .bind(suite)
        .bind(req.key.as_str())
        .fetch_optional(&mut *c)
        .await?;
    if let Some((id,)) = seen {
        return Ok(EvalRunStored {
            id: to_u64(id),
            duplicate: true,
        });
    }
    let id = next_id(c, suite, true).await?;
    query("INSERT INTO eval_runs (suite, id, key, candidate, cases, passed, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)")
        .bind(suite)
        .bind(id)
        .bind(req.key.as_str())
        .bind(req.candidate.as_str())
        .bind(encode(&req.cases)?)
        .bind(i64::from(req.passed))
        .bind(now)
        .execute(&mut *c)
        .await?;
    Ok(EvalRunStored {
        id: to_u64(id),
        duplicate: false,
    })
}

/// The suite's last run.
async fn last_run<C: Conn>(c: &mut C, suite: &str) -> StoreResult<Option<EvalRun>> {
    let row: Option<RunRow> = query_as(
        "SELECT id, suite, candidate, cases, passed, created_at FROM eval_runs WHERE suite = $1 ORDER BY id DESC LIMIT 1",
    )
    .bind(suite)
    .fetch_optional(&mut *c)
    .await?;
    row.map(RunRow::run).transpose()
}

/// `GET /v1/evals/{suite}`: `None` for a suite with neither members nor runs.
pub(crate) async fn eval_suite<C: Conn>(c: &mut C, suite: &str) -> StoreResult<Option<EvalSuite>> {
    let sql = format!("{MEMBER_SELECT} ORDER BY m.id");
    let rows: Vec<MemberRow> = query_as(crate::store::conn::AssertSqlSafe(sql))
        .bind(suite)
        .fetch_all(&mut *c)
        .await?;
    let members = rows
        .into_iter()
        .map(MemberRow::member)
        .collect::<StoreResult<Vec<_>>>()?;
    let last_run = last_run(c, suite).await?;
    if members.is_empty() && last_run.is_none() {
        return Ok(None);
    }
    Ok(Some(EvalSuite {
        name: suite.to_string(),
        members,
        last_run,
    }))
}

/// `GET /v1/evals`: every suite with members or runs, by name.
pub(crate) async fn eval_suites<C: Conn>(c: &mut C) -> StoreResult<EvalSuiteList> {
    let rows: Vec<(String, i64, Option<i64>, Option<i64>)> = query_as(
        "SELECT s.name, \
         (SELECT COUNT(*) FROM eval_members m WHERE m.suite = s.name), \
         (SELECT r.created_at FROM eval_runs r WHERE r.suite = s.name ORDER BY r.id DESC LIMIT 1), \
         (SELECT r.passed FROM eval_runs r WHERE r.suite = s.name ORDER BY r.id DESC LIMIT 1) \
         FROM eval_suites s ORDER BY s.name",
    )
    .fetch_all(&mut *c)
    .await?;
    let suites = rows
        .into_iter()
        .filter(|(_, members, at, _)| *members > 0 || at.is_some())
        .map(|(name, members, at, passed)| EvalSuiteSummary {
            name,
            members: to_u64(members),
            last_run_at: at.map(time),
            last_run_passed: passed.map(|p| p != 0),
        })
        .collect();
    Ok(EvalSuiteList { suites })
}
