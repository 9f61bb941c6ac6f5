//! Model leases and spend (issue 38): a lease is granted, refused for a spent budget or answered
//! "wait" in one transaction that locks the thread's row (the epoch is fenced) and then the
//! limiter's (`model_limiters`, `FOR UPDATE` on Postgres — so the live leases and the window it
//! counts cannot change under it, whatever API replica grants); renewed while its call runs;
//! released once with what the call used and cost (the thread's total and its agent's
//! 15-minute bucket, `model_spend`) and a provider's 429 (the limiter's back-off). A claim frees
//! the leases of older epochs in its transaction. The decisions are `limit_rules`'.
//!
//! Locks are always taken in one order — the thread's row, then the limiter's, then lease rows —
//! so on Postgres a grant, a release, a renewal and a claim never wait for each other in a
//! circle.

use chrono_tz::Tz;
use ninetrix_proto::api::{
    BudgetPolicy, BudgetScope, BudgetSpent, ClaimRequest, ClaimResponse, ErrorCode, LeaseRelease,
    LeaseRequest, SlotWait, Spend,
};
use ninetrix_proto::{LeaseId, ThreadId};

use crate::limit_rules::{
    self, Day, Decision, Grant, LimiterKey, LimiterNow, MAX_BUCKET_NANOS, MAX_THREAD_NANOS,
    WINDOW_MS, WindowSum,
};
use crate::store::codec::{to_i64, to_u64};
use crate::store::conn::{Conn, for_write, query, query_as};
use crate::store::{StoreError, StoreResult};

use super::approvals::{AGENT_DAY, POOL_DAY, SESSION};
use super::threads::{SELECT_THREAD, ThreadRow, claim, fenced_thread, live};

/// How long a lease's row stays after it ended (released, freed by a claim, or expired): the
/// 60 s window needs a minute of them, and a release retried after an API outage still finds
/// its lease (and counts its spend once) within the hour.
const KEEP_ENDED_MS: i64 = 3_600_000;

/// How often a limiter's grants delete its old rows.
const PRUNE_EVERY_MS: i64 = WINDOW_MS;

/// What a lease request got.
#[derive(Clone, Debug, PartialEq)]
pub enum LeaseOutcome {
    /// A lease, until `expires_at` (Unix ms).
    Granted {
        /// The lease.
        lease: LeaseId,
        /// When it expires unless renewed.
        expires_at: i64,
    },
    /// No slot now: why, and when the reason may be gone by itself (Unix ms).
    Wait {
        /// Why.
        wait: SlotWait,
        /// When to look again at the latest.
        until: i64,
    },
    /// A budget has no room.
    OverBudget(BudgetSpent),
}

/// A limiter's key from the thread's pool label.
fn key_of(row: &ThreadRow, limiter: &str) -> LimiterKey {
    LimiterKey {
        pool: row.pool.clone().unwrap_or_default(),
        limiter: limiter.to_string(),
    }
}

/// The refusal of a request that breaks a rule (422 `invalid_body`).
fn invalid(message: String) -> StoreError {
    StoreError::Invalid {
        code: ErrorCode::InvalidBody,
        message,
    }
}

/// One lease request in one transaction: fenced by `epoch` (the thread's row locked), its
/// budgets checked first (a spent budget never waits), then the limiter's row locked and its
/// numbers set to this request's, its live leases and window counted, and a lease written when
/// `limit_rules::decide` grants one. `clock` is read once the limiter's lock is held. `crash` is
/// called before the commit of a grant (the kill point `lease_before_commit`).
pub(crate) async fn lease<C: Conn>(
    c: &mut C,
    id: ThreadId,
    req: &LeaseRequest,
    ttl_ms: i64,
    clock: fn() -> i64,
    crash: fn(&str),
) -> StoreResult<LeaseOutcome> {
    let zone = limit_rules::check_request(req).map_err(invalid)?;
    let thread = fenced_thread(c, id, req.epoch).await?;
    if let (Some(policy), Some(zone)) = (&req.budgets, zone)
        && let Some(spent) = budget_refusal(c, &thread, policy, zone, clock()).await?
    {
        return Ok(LeaseOutcome::OverBudget(spent));
    }
    let key = key_of(&thread, &req.limiter);
    let (backoff_until, pruned_at): (i64, i64) = query_as(
        "INSERT INTO model_limiters (pool, limiter, provider, max_in_flight, rpm, tpm) VALUES ($1, $2, $3, $4, $5, $6) \
         ON CONFLICT (pool, limiter) DO UPDATE SET provider = excluded.provider, max_in_flight = excluded.max_in_flight, \
         rpm = excluded.rpm, tpm = excluded.tpm RETURNING backoff_until, pruned_at",
    )
    .bind(&key.pool)
    .bind(&key.limiter)
    .bind(&req.provider)
    .bind(req.limits.max_in_flight.map(i64::from))
    .bind(req.limits.requests_per_minute.map(i64::from))
    .bind(
        req.limits
            .tokens_per_minute
            .map(|t| to_i64(t, "limits.tokens_per_minute"))
            .transpose()?,
    )
    .fetch_one(&mut *c)
    .await?;
    // The upsert locked the limiter's row (on Postgres an `ON CONFLICT DO UPDATE` locks the row
    // it updates, and a concurrent first insert waits on the key), so until this transaction
    // ends no other grant or release of the limiter runs, on any API replica: what it counts
    // next is what it decides on. Its time is read now, once the lock is held, so a grant that
    // waited for another's commit is never dated before it.
    let now = clock();
    let (in_flight, first_expiry): (i64, Option<i64>) = query_as(
        "SELECT COUNT(*), MIN(expires_at) FROM model_leases \
         WHERE pool = $1 AND limiter = $2 AND released_at IS NULL AND expires_at > $3",
    )
    .bind(&key.pool)
    .bind(&key.limiter)
    .bind(now)
    .fetch_one(&mut *c)
    .await?;
    // The window's rows are read only when its sums say it is full, to say until when: a
    // limiter with room costs one index range count, whatever its requests per minute.
    let counted =
        req.limits.requests_per_minute.is_some() || req.limits.tokens_per_minute.is_some();
    let window = if counted && !window_fits(c, &key, req, now).await? {
        window(c, &key, now).await?
    } else {
        Vec::new()
    };
    let decision = limit_rules::decide(&LimiterNow {
        now,
        limits: req.limits.clone(),
        backoff_until,
        in_flight: u32::try_from(in_flight).unwrap_or(u32::MAX),
        first_expiry,
        window,
        estimate: req.estimated_tokens,
    });
    if let Decision::Wait { wait, until } = decision {
        return Ok(LeaseOutcome::Wait { wait, until });
    }
    let lease = LeaseId::new_v7();
    let expires_at = now.saturating_add(ttl_ms);
    query(
        "INSERT INTO model_leases (id, pool, limiter, thread_id, epoch, granted_at, expires_at, estimated_tokens) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(lease.to_string())
    .bind(&key.pool)
    .bind(&key.limiter)
    .bind(id.to_string())
    .bind(thread.epoch)
    .bind(now)
    .bind(expires_at)
    .bind(to_i64(req.estimated_tokens, "estimated_tokens")?)
    .execute(&mut *c)
    .await?;
    if now - pruned_at >= PRUNE_EVERY_MS {
        prune(c, &key, now).await?;
    }
    crash("lease_before_commit");
    Ok(LeaseOutcome::Granted { lease, expires_at })
}

/// Whether one more call of `req` fits the limiter's window, by its sums (see
/// `limit_rules::window_fits`).
async fn window_fits<C: Conn>(
    c: &mut C,
    key: &LimiterKey,
    req: &LeaseRequest,
    now: i64,
) -> StoreResult<bool> {
    let (calls, tokens): (i64, i64) = query_as(
        "SELECT COUNT(*), CAST(COALESCE(SUM(COALESCE(used_tokens, estimated_tokens)), 0) AS BIGINT) \
         FROM model_leases WHERE pool = $1 AND limiter = $2 AND granted_at > $3",
    )
    .bind(&key.pool)
    .bind(&key.limiter)
    .bind(now - WINDOW_MS)
    .fetch_one(&mut *c)
    .await?;
    let sum = WindowSum {
        calls: to_u64(calls),
        tokens: to_u64(tokens),
    };
    Ok(limit_rules::window_fits(
        &req.limits,
        sum,
        req.estimated_tokens,
    ))
}

/// A spent budget of a lease request, read without a lock (so a request that would wait its turn
/// in its limiter's queue is answered `over_budget` at once: a spent budget never waits). A
/// stale epoch is `fenced` and a purged thread `purged` at once too, as for the lease itself.
pub(crate) async fn lease_refusal<C: Conn>(
    c: &mut C,
    id: ThreadId,
    req: &LeaseRequest,
    now: i64,
) -> StoreResult<Option<BudgetSpent>> {
    let zone = limit_rules::check_request(req).map_err(invalid)?;
    let row: Option<ThreadRow> = query_as(SELECT_THREAD)
        .bind(id.to_string())
        .fetch_optional(&mut *c)
        .await?;
    let thread = live(id, row.ok_or(StoreError::NotFound("thread"))?)?;
    if to_u64(thread.epoch) != req.epoch {
        return Err(StoreError::Fenced {
            given: req.epoch,
            current: to_u64(thread.epoch),
        });
    }
    match (&req.budgets, zone) {
        (Some(policy), Some(zone)) => budget_refusal(c, &thread, policy, zone, now).await,
        _ => Ok(None),
    }
}

/// The calls of the limiter started in the last 60 s, oldest first, each with its tokens (used
/// once reported, estimated before).
async fn window<C: Conn>(c: &mut C, key: &LimiterKey, now: i64) -> StoreResult<Vec<Grant>> {
    let rows: Vec<(i64, i64)> = query_as(
        "SELECT granted_at, COALESCE(used_tokens, estimated_tokens) FROM model_leases \
         WHERE pool = $1 AND limiter = $2 AND granted_at > $3 ORDER BY granted_at",
    )
    .bind(&key.pool)
    .bind(&key.limiter)
    .bind(now - WINDOW_MS)
    .fetch_all(&mut *c)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(at, tokens)| Grant {
            at,
            tokens: to_u64(tokens),
        })
        .collect())
}

/// Deletes the limiter's leases that ended more than [`KEEP_ENDED_MS`] ago (and started before
/// the window), and notes when.
async fn prune<C: Conn>(c: &mut C, key: &LimiterKey, now: i64) -> StoreResult<()> {
    query(
        "DELETE FROM model_leases WHERE pool = $1 AND limiter = $2 AND granted_at < $3 \
         AND COALESCE(released_at, expires_at) < $4",
    )
    .bind(&key.pool)
    .bind(&key.limiter)
    .bind(now - WINDOW_MS)
    .bind(now - KEEP_ENDED_MS)
    .execute(&mut *c)
    .await?;
    query("UPDATE model_limiters SET pruned_at = $3 WHERE pool = $1 AND limiter = $2")
        .bind(&key.pool)
        .bind(&key.limiter)
        .bind(now)
        .execute(&mut *c)
        .await?;
    Ok(())
}

/// The first budget of `policy` without room for the thread, in the order session, the agent's
/// day, the pool's day; each allowance counts the approved raises for its scope.
async fn budget_refusal<C: Conn>(
    c: &mut C,
    thread: &ThreadRow,
    policy: &BudgetPolicy,
    zone: Tz,
    now: i64,
) -> StoreResult<Option<BudgetSpent>> {
    let pool = thread.pool.as_deref().unwrap_or_default();
    let agent = thread.agent.as_deref().unwrap_or_default();
    if let Some(limit) = policy.per_session_usd {
        let raised = raised(c, Raised::Session(&thread.thread_id)).await?;
        if let Some(spent) =
            limit_rules::over_budget(BudgetScope::Session, limit, thread.spent_nanos, raised)
        {
            return Ok(Some(spent));
        }
    }
    if policy.per_day_usd.is_none() && policy.pool_per_day_usd.is_none() {
        return Ok(None);
    }
    let day = limit_rules::day_of(zone, now);
    if let Some(limit) = policy.per_day_usd {
        let spent = day_spent(c, pool, Some(agent), &day).await?;
        let raised = raised(c, Raised::AgentDay(pool, agent, &day.day)).await?;
        let scope = BudgetScope::AgentDay {
            day: day.day.clone(),
        };
        if let Some(spent) = limit_rules::over_budget(scope, limit, spent, raised) {
            return Ok(Some(spent));
        }
    }
    if let Some(limit) = policy.pool_per_day_usd {
        let spent = day_spent(c, pool, None, &day).await?;
        let raised = raised(c, Raised::PoolDay(pool, &day.day)).await?;
        let scope = BudgetScope::PoolDay {
            day: day.day.clone(),
        };
        if let Some(spent) = limit_rules::over_budget(scope, limit, spent, raised) {
            return Ok(Some(spent));
        }
    }
    Ok(None)
}

/// Whose approved raises to sum.
enum Raised<'a> {
    /// The thread's (its session budget).
    Session(&'a str),
    /// A pool's agent's, for a day.
    AgentDay(&'a str, &'a str, &'a str),
    /// A pool's, for a day.
    PoolDay(&'a str, &'a str),
}

/// What approved budget requests add to a scope, in nano-dollars.
async fn raised<C: Conn>(c: &mut C, whose: Raised<'_>) -> StoreResult<i64> {
    const SUM: &str = "SELECT CAST(COALESCE(SUM(raise_nanos), 0) AS BIGINT) FROM approvals \
         WHERE kind = 'budget' AND status = 'approved' AND raise_scope = $1 AND ";
    let (sum,): (i64,) = match whose {
        Raised::Session(thread) => {
            query_as(crate::store::conn::AssertSqlSafe(format!(
                "{SUM}thread_id = $2"
            )))
            .bind(SESSION)
            .bind(thread)
            .fetch_one(&mut *c)
            .await?
        }
        Raised::AgentDay(pool, agent, day) => {
            query_as(crate::store::conn::AssertSqlSafe(format!(
                "{SUM}raise_pool = $2 AND raise_day = $3 AND raise_agent = $4"
            )))
            .bind(AGENT_DAY)
            .bind(pool)
            .bind(day)
            .bind(agent)
            .fetch_one(&mut *c)
            .await?
        }
        Raised::PoolDay(pool, day) => {
            query_as(crate::store::conn::AssertSqlSafe(format!(
                "{SUM}raise_pool = $2 AND raise_day = $3"
            )))
            .bind(POOL_DAY)
            .bind(pool)
            .bind(day)
            .fetch_one(&mut *c)
            .await?
        }
    };
    Ok(sum)
}

/// What a pool (or one of its agents) spent on `day`, in nano-dollars: the sum of its 15-minute
/// buckets in the day's range.
async fn day_spent<C: Conn>(
    c: &mut C,
    pool: &str,
    agent: Option<&str>,
    day: &Day,
) -> StoreResult<i64> {
    let (sum,): (i64,) = query_as(
        "SELECT CAST(COALESCE(SUM(cost_nanos), 0) AS BIGINT) FROM model_spend \
         WHERE pool = $1 AND ($2 IS NULL OR agent = $2) AND bucket >= $3 AND bucket < $4",
    )
    .bind(pool)
    .bind(agent)
    .bind(day.start)
    .bind(day.end)
    .fetch_one(&mut *c)
    .await?;
    Ok(sum)
}

/// Extends a live lease of the thread's current epoch by the lease time; returns its new expiry
/// (Unix ms). A lease that expired, was released, or is an older epoch's is `not_found`.
pub(crate) async fn renew_lease<C: Conn>(
    c: &mut C,
    id: ThreadId,
    lease: LeaseId,
    ttl_ms: i64,
    now: i64,
) -> StoreResult<i64> {
    let row: Option<ThreadRow> = query_as(for_write::<C>(SELECT_THREAD))
        .bind(id.to_string())
        .fetch_optional(&mut *c)
        .await?;
    let thread = live(id, row.ok_or(StoreError::NotFound("thread"))?)?;
    let expires_at = now.saturating_add(ttl_ms);
    let renewed = query(
        "UPDATE model_leases SET expires_at = $4 WHERE id = $1 AND thread_id = $2 AND epoch = $3 \
         AND released_at IS NULL AND expires_at > $5",
    )
    .bind(lease.to_string())
    .bind(id.to_string())
    .bind(thread.epoch)
    .bind(expires_at)
    .bind(now)
    .execute(&mut *c)
    .await?
    .rows_affected();
    if renewed == 0 {
        return Err(StoreError::NotFound("live lease"));
    }
    Ok(expires_at)
}

/// Releases a lease of the thread with what its call used, once: the first release records the
/// tokens (for the window), the cost (the thread's total and its agent's bucket) and a 429's
/// back-off (`max(backoff_until, now + retry_after)` for the whole limiter), and frees the slot
/// if it still held one; a release of a lease already reported changes nothing. A lease that
/// expired or was freed by a claim still records what it used. Returns the limiter, to wake its
/// waiters, when something was recorded. `crash` is called before the commit of a first release
/// (`release_before_commit`).
pub(crate) async fn release_lease<C: Conn>(
    c: &mut C,
    id: ThreadId,
    lease: LeaseId,
    r: &LeaseRelease,
    clock: fn() -> i64,
    crash: fn(&str),
) -> StoreResult<Option<LimiterKey>> {
    limit_rules::check_release(r).map_err(invalid)?;
    let row: Option<ThreadRow> = query_as(for_write::<C>(SELECT_THREAD))
        .bind(id.to_string())
        .fetch_optional(&mut *c)
        .await?;
    let thread = live(id, row.ok_or(StoreError::NotFound("thread"))?)?;
    let found: Option<(String, String, Option<i64>)> = query_as(
        "SELECT pool, limiter, reported_at FROM model_leases WHERE id = $1 AND thread_id = $2",
    )
    .bind(lease.to_string())
    .bind(id.to_string())
    .fetch_optional(&mut *c)
    .await?;
    let Some((pool, limiter, reported_at)) = found else {
        return Err(StoreError::NotFound("lease"));
    };
    let key = LimiterKey { pool, limiter };
    // The limiter's row before the lease's (the order every lease transaction locks in).
    query_as::<(i64,)>(for_write::<C>(
        "SELECT backoff_until FROM model_limiters WHERE pool = $1 AND limiter = $2",
    ))
    .bind(&key.pool)
    .bind(&key.limiter)
    .fetch_optional(&mut *c)
    .await?;
    if reported_at.is_some() {
        return Ok(None);
    }
    // Read with the limiter's lock held (see `lease`).
    let now = clock();
    let cost = limit_rules::nanos(r.cost_usd);
    // A count past what the store holds is kept at its largest (it only fills the window).
    let used = i64::try_from(r.input_tokens.saturating_add(r.output_tokens)).unwrap_or(i64::MAX);
    let recorded = query(
        "UPDATE model_leases SET reported_at = $2, released_at = COALESCE(released_at, $2), used_tokens = $3, cost_nanos = $4 \
         WHERE id = $1 AND reported_at IS NULL",
    )
    .bind(lease.to_string())
    .bind(now)
    .bind(used)
    .bind(cost)
    .execute(&mut *c)
    .await?
    .rows_affected();
    if recorded == 0 {
        return Ok(None);
    }
    if cost > 0 {
        record_spend(c, &thread, cost, now).await?;
    }
    if let Some(limited) = &r.rate_limited {
        let until = now.saturating_add(to_i64(limited.retry_after_ms, "retry_after_ms")?);
        query(
            "UPDATE model_limiters SET backoff_until = CASE WHEN backoff_until > $3 THEN backoff_until ELSE $3 END \
             WHERE pool = $1 AND limiter = $2",
        )
        .bind(&key.pool)
        .bind(&key.limiter)
        .bind(until)
        .execute(&mut *c)
        .await?;
    }
    crash("release_before_commit");
    Ok(Some(key))
}

/// Adds `cost` nano-dollars to the thread's total and to its agent's bucket of now, each
/// saturating at its cap.
async fn record_spend<C: Conn>(
    c: &mut C,
    thread: &ThreadRow,
    cost: i64,
    now: i64,
) -> StoreResult<()> {
    query("UPDATE threads SET spent_nanos = $2 WHERE thread_id = $1")
        .bind(thread.thread_id.as_str())
        .bind(
            thread
                .spent_nanos
                .saturating_add(cost)
                .min(MAX_THREAD_NANOS),
        )
        .execute(&mut *c)
        .await?;
    query(
        "INSERT INTO model_spend (pool, agent, bucket, cost_nanos) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (pool, agent, bucket) DO UPDATE SET cost_nanos = CASE \
         WHEN model_spend.cost_nanos > $5 - excluded.cost_nanos THEN $5 \
         ELSE model_spend.cost_nanos + excluded.cost_nanos END",
    )
    .bind(thread.pool.as_deref().unwrap_or_default())
    .bind(thread.agent.as_deref().unwrap_or_default())
    .bind(limit_rules::bucket_of(now))
    .bind(cost.min(MAX_BUCKET_NANOS))
    .bind(MAX_BUCKET_NANOS)
    .execute(&mut *c)
    .await?;
    Ok(())
}

/// What a thread has spent, ever, and its agent's and pool's spend on the day of `zone` that
/// holds `now`.
pub(crate) async fn spend<C: Conn>(
    c: &mut C,
    id: ThreadId,
    zone: Tz,
    now: i64,
) -> StoreResult<Spend> {
    let row: Option<ThreadRow> = query_as(SELECT_THREAD)
        .bind(id.to_string())
        .fetch_optional(&mut *c)
        .await?;
    let thread = live(id, row.ok_or(StoreError::NotFound("thread"))?)?;
    let pool = thread.pool.as_deref().unwrap_or_default();
    let agent = thread.agent.as_deref().unwrap_or_default();
    let day = limit_rules::day_of(zone, now);
    Ok(Spend {
        thread_usd: limit_rules::usd(thread.spent_nanos),
        agent_today_usd: limit_rules::usd(day_spent(c, pool, Some(agent), &day).await?),
        pool_today_usd: limit_rules::usd(day_spent(c, pool, None, &day).await?),
        day: day.day,
    })
}

/// A claim (see `threads::claim`) that also frees, in its transaction, the live leases of the
/// thread's older epochs: the runner that held them is fenced, so their slots are free at once.
/// They stay in the window (their calls may have reached the provider) and a late release still
/// records what they used. Returns the limiters freed, to wake their waiters.
pub(crate) async fn claim_freeing<C: Conn>(
    c: &mut C,
    id: ThreadId,
    request: &ClaimRequest,
    stating: crate::labels::Stating,
    now: i64,
) -> StoreResult<(ClaimResponse, Vec<LimiterKey>)> {
    let claimed = claim(c, id, request, stating, now).await?;
    let epoch = to_i64(claimed.epoch, "epoch")?;
    let freed: Vec<(String, String)> = query_as(
        "SELECT DISTINCT pool, limiter FROM model_leases \
         WHERE thread_id = $1 AND epoch < $2 AND released_at IS NULL AND expires_at > $3",
    )
    .bind(id.to_string())
    .bind(epoch)
    .bind(now)
    .fetch_all(&mut *c)
    .await?;
    if !freed.is_empty() {
        query(
            "UPDATE model_leases SET released_at = $3 \
             WHERE thread_id = $1 AND epoch < $2 AND released_at IS NULL AND expires_at > $3",
        )
        .bind(id.to_string())
        .bind(epoch)
        .bind(now)
        .execute(&mut *c)
        .await?;
    }
    Ok((
        claimed,
        freed
            .into_iter()
            .map(|(pool, limiter)| LimiterKey { pool, limiter })
            .collect(),
    ))
}
