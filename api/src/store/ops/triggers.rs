//! The queries of triggers: registering a pool's set, a scheduler tick's page of due schedules
//! (planned by `triggers::plan_tick`), a manual fire, a webhook delivery (deduplicated), the
//! history they write, and the listings. A fire puts its message in its session through the same
//! `open_session` and `deliver` as every other message.

use crate::store::codec::{corrupt, encode, parse_id, time, to_i64, to_u64};
use crate::store::conn::{AssertSqlSafe, Conn, query, query_as};
use crate::store::triggers::{
    DELIVERY_ID_KEPT_MS, Fired, HISTORY_COLUMNS, HISTORY_KEPT, HistoryRow, HookDelivery,
    HookTarget, MAX_TRIGGERS_PER_TICK, NewHistory, Step, TRIGGER_COLUMNS, TickInput, TriggerRow,
    delivery_id_key, delivery_key, digest, enum_name, fire_running, fire_session, first_fire,
    instant_text, ms, plan_tick, rule_changed, schedule_key, sorted, stored_text, unknown_trigger,
};
use crate::store::{StoreError, StoreResult};

use super::inbox::NewMessage;
use super::sessions::open_session;
use super::turn_control::deliver;

/// Makes the pool's registered triggers exactly `set` (checked by the caller): new ones
/// are inserted with their first fire after `now`, changed ones updated (a changed rule
/// plans from `now`; otherwise the next fire time is kept), missing ones deleted (their
/// history stays).
pub(crate) async fn put_triggers<C: Conn>(
    c: &mut C,
    pool: &str,
    set: &ninetrix_proto::api::TriggerSet,
    now: i64,
) -> StoreResult<ninetrix_proto::api::TriggersApplied> {
    let now_t = time(now);
    let sql = format!("SELECT {TRIGGER_COLUMNS} FROM triggers WHERE pool = $1");
    let existing: Vec<TriggerRow> = query_as(AssertSqlSafe(sql))
        .bind(pool)
        .fetch_all(&mut *c)
        .await?;
    let mut applied = ninetrix_proto::api::TriggersApplied::default();
    for row in &existing {
        if !set.triggers.iter().any(|r| r.spec.name == row.name) {
            query("DELETE FROM triggers WHERE pool = $1 AND name = $2")
                .bind(pool)
                .bind(&row.name)
                .execute(&mut *c)
                .await?;
            applied.removed.push(row.name.clone());
        }
    }
    for reg in &set.triggers {
        let spec = &reg.spec;
        let spec_json = encode(spec)?;
        let digest = digest(&spec_json, reg.secret.as_deref());
        let path = spec.webhook().map(|w| w.path.clone());
        match existing.iter().find(|r| r.name == spec.name) {
            Some(row) if row.digest == digest => applied.unchanged.push(spec.name.clone()),
            Some(row) => {
                let old = row.spec()?;
                let (next, planned, buffered) = if rule_changed(&old, spec) {
                    (first_fire(spec, now_t).map(ms), now, None)
                } else {
                    (row.next_fire_at, row.planned_to, row.buffered_at)
                };
                query(
                    "UPDATE triggers SET agent = $3, kind = $4, path = $5, spec = $6, secret = $7, digest = $8, next_fire_at = $9, planned_to = $10, buffered_at = $11, updated_at = $12 \
                     WHERE pool = $1 AND name = $2",
                )
                .bind(pool)
                .bind(&spec.name)
                .bind(&spec.agent)
                .bind(spec.kind_name())
                .bind(path)
                .bind(spec_json)
                .bind(reg.secret.clone())
                .bind(digest)
                .bind(next)
                .bind(planned)
                .bind(buffered)
                .bind(now)
                .execute(&mut *c)
                .await?;
                applied.updated.push(spec.name.clone());
            }
            None => {
                let (seq,): (i64,) = query_as("SELECT COALESCE(MAX(seq), 0) FROM trigger_history WHERE pool = $1 AND name = $2")
                    .bind(pool)
                    .bind(&spec.name)
                    .fetch_one(&mut *c)
                    .await?;
                query(
                    "INSERT INTO triggers (pool, name, agent, kind, path, spec, secret, digest, next_fire_at, planned_to, history_seq, created_at, updated_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $10, $10)",
                )
                .bind(pool)
                .bind(&spec.name)
                .bind(&spec.agent)
                .bind(spec.kind_name())
                .bind(path)
                .bind(spec_json)
                .bind(reg.secret.clone())
                .bind(digest)
                .bind(first_fire(spec, now_t).map(ms))
                .bind(now)
                .bind(seq)
                .execute(&mut *c)
                .await?;
                applied.created.push(spec.name.clone());
            }
        }
    }
    Ok(sorted(applied))
}

/// Appends an entry to the trigger's history (numbered by its row) and drops the entries
/// older than the last [`HISTORY_KEPT`].
async fn add_history<C: Conn>(
    c: &mut C,
    pool: &str,
    name: &str,
    h: NewHistory,
    now: i64,
) -> StoreResult<u64> {
    let (seq,): (i64,) = query_as("UPDATE triggers SET history_seq = history_seq + 1 WHERE pool = $1 AND name = $2 RETURNING history_seq")
        .bind(pool)
        .bind(name)
        .fetch_one(&mut *c)
        .await?;
    query(
        "INSERT INTO trigger_history (pool, name, seq, at, source, outcome, reason, scheduled_at, delivery_id, session, thread_id, inbox_seq, detail, refusals) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
    )
    .bind(pool)
    .bind(name)
    .bind(seq)
    .bind(now)
    .bind(enum_name(h.source))
    .bind(enum_name(h.outcome))
    .bind(h.reason.map(enum_name))
    .bind(h.scheduled_at.map(ms))
    .bind(h.delivery_id)
    .bind(h.session)
    .bind(h.thread_id)
    .bind(h.inbox_seq.map(|s| i64::try_from(s).unwrap_or(i64::MAX)))
    .bind(h.detail.as_deref().map(stored_text))
    .bind(h.refusals.map(|n| i64::try_from(n).unwrap_or(i64::MAX)))
    .execute(&mut *c)
    .await?;
    if seq % 100 == 0 {
        query("DELETE FROM trigger_history WHERE pool = $1 AND name = $2 AND seq <= $3")
            .bind(pool)
            .bind(name)
            .bind(seq - HISTORY_KEPT)
            .execute(&mut *c)
            .await?;
    }
    Ok(to_u64(seq))
}

/// Whether the turn of the trigger's previous fire has not finished.
async fn previous_running<C: Conn>(c: &mut C, row: &TriggerRow) -> StoreResult<bool> {
    let (Some(thread), Some(seq)) = (&row.last_thread_id, row.last_inbox_seq) else {
        return Ok(false);
    };
    let found: Option<(i64, String)> =
        query_as("SELECT inbox_cursor, status FROM threads WHERE thread_id = $1")
            .bind(thread)
            .fetch_optional(&mut *c)
            .await?;
    Ok(found.is_some_and(|(cursor, status)| fire_running(to_u64(seq), to_u64(cursor), &status)))
}

/// Puts a trigger's message in session `session` of its agent, once per `dedupe` key;
/// records the fire (or the duplicate) in the history and, when new, as the trigger's
/// last fire. Returns the history entry and, when a message was added, what to wake.
#[allow(clippy::too_many_arguments)]
async fn fire_into<C: Conn>(
    c: &mut C,
    row: &TriggerRow,
    session: &str,
    message: &str,
    dedupe: Option<&str>,
    mut h: NewHistory,
    now: i64,
) -> StoreResult<(NewHistory, Option<Fired>)> {
    let (thread, _) = open_session(c, &row.pool, &row.agent, session, now).await?;
    let id = thread.thread_id;
    h.session = Some(session.to_string());
    h.thread_id = Some(id.to_string());
    if let Some(key) = dedupe {
        let seq: Option<(i64,)> =
            query_as("SELECT seq FROM inbox WHERE thread_id = $1 AND dedupe_key = $2")
                .bind(id.to_string())
                .bind(key)
                .fetch_optional(&mut *c)
                .await?;
        if let Some((seq,)) = seq {
            h.outcome = ninetrix_proto::api::TriggerOutcome::Deduplicated;
            h.inbox_seq = Some(to_u64(seq));
            return Ok((h, None));
        }
    }
    // The overlap policy decided to deliver it, and nobody could be told of a refusal: a
    // `reject` default queues it (a `steer` or `interrupt` default applies).
    let fire = NewMessage {
        dedupe_key: dedupe,
        ..NewMessage::work(message, None, false)
    };
    let (enqueued, wake) = deliver(c, id, &fire, now).await?;
    query("UPDATE triggers SET last_thread_id = $3, last_inbox_seq = $4 WHERE pool = $1 AND name = $2")
        .bind(&row.pool)
        .bind(&row.name)
        .bind(id.to_string())
        .bind(to_i64(enqueued.seq, "seq")?)
        .execute(&mut *c)
        .await?;
    h.inbox_seq = Some(enqueued.seq);
    let fired = Fired {
        pool: row.pool.clone(),
        trigger: row.name.clone(),
        agent: row.agent.clone(),
        thread_id: id,
        seq: enqueued.seq,
        scheduled_at: h.scheduled_at,
        wake,
    };
    Ok((h, Some(fired)))
}

/// One page of a scheduler tick at `now`: the first [`MAX_TRIGGERS_PER_TICK`] schedules
/// whose next fire time has come (or that hold a fire back) are planned ([`plan_tick`])
/// and their fires put in their sessions, in this one transaction. Also returns whether
/// the page was full (more may be due). `crash` is called after the writes, before the commit (the
/// deterministic kill point `trigger_fire_before_commit`).
pub(crate) async fn fire_due<C: Conn>(
    c: &mut C,
    now: i64,
    crash: fn(&str),
) -> StoreResult<(Vec<Fired>, bool)> {
    let now_t = time(now);
    let sql = format!(
        "SELECT {TRIGGER_COLUMNS} FROM triggers WHERE kind = 'schedule' AND ((next_fire_at IS NOT NULL AND next_fire_at <= $1) OR buffered_at IS NOT NULL) \
         ORDER BY next_fire_at, pool, name LIMIT {MAX_TRIGGERS_PER_TICK}{}",
        C::LOCK
    );
    let rows: Vec<TriggerRow> = query_as(AssertSqlSafe(sql))
        .bind(now)
        .fetch_all(&mut *c)
        .await?;
    let full = rows.len() as i64 == MAX_TRIGGERS_PER_TICK;
    let mut fired = Vec::new();
    for row in rows {
        let spec = row.spec()?;
        let Some(schedule) = spec.schedule() else {
            continue;
        };
        let rule = match schedule.spec() {
            Ok(rule) => rule,
            Err(e) => {
                tracing::error!(pool = %row.pool, trigger = %row.name, "a stored schedule no longer parses ({e}); it will not fire");
                query("UPDATE triggers SET next_fire_at = NULL, buffered_at = NULL WHERE pool = $1 AND name = $2")
                    .bind(&row.pool)
                    .bind(&row.name)
                    .execute(&mut *c)
                    .await?;
                continue;
            }
        };
        let running = previous_running(c, &row).await?;
        let plan = plan_tick(&TickInput {
            schedule,
            rule: &rule,
            planned_to: time(row.planned_to),
            next_fire_at: row.next_fire_at.map(time),
            buffered_at: row.buffered_at.map(time),
            previous_running: running,
            now: now_t,
        });
        for step in plan.steps {
            match step {
                Step::Fire {
                    scheduled,
                    outcome,
                    detail,
                } => {
                    let session = fire_session(&spec, None, &instant_text(scheduled));
                    let h = NewHistory {
                        scheduled_at: Some(scheduled),
                        detail,
                        ..NewHistory::new(ninetrix_proto::api::TriggerSource::Schedule, outcome)
                    };
                    let key = schedule_key(&spec.name, scheduled);
                    let (h, f) =
                        fire_into(c, &row, &session, &schedule.message, Some(&key), h, now).await?;
                    add_history(c, &row.pool, &row.name, h, now).await?;
                    fired.extend(f);
                }
                Step::Note {
                    outcome,
                    reason,
                    scheduled,
                    detail,
                } => {
                    let h = NewHistory {
                        reason,
                        scheduled_at: scheduled,
                        detail,
                        ..NewHistory::new(ninetrix_proto::api::TriggerSource::Schedule, outcome)
                    };
                    add_history(c, &row.pool, &row.name, h, now).await?;
                }
            }
        }
        query("UPDATE triggers SET next_fire_at = $3, planned_to = $4, buffered_at = $5 WHERE pool = $1 AND name = $2")
            .bind(&row.pool)
            .bind(&row.name)
            .bind(plan.next_fire_at.map(ms))
            .bind(ms(plan.planned_to))
            .bind(plan.buffered_at.map(ms))
            .execute(&mut *c)
            .await?;
    }
    if !fired.is_empty() {
        crash("trigger_fire_before_commit");
    }
    Ok((fired, full))
}

async fn trigger_for_write<C: Conn>(c: &mut C, pool: &str, name: &str) -> StoreResult<TriggerRow> {
    let sql = format!(
        "SELECT {TRIGGER_COLUMNS} FROM triggers WHERE pool = $1 AND name = $2{}",
        C::LOCK
    );
    let row: Option<TriggerRow> = query_as(AssertSqlSafe(sql))
        .bind(pool)
        .bind(name)
        .fetch_optional(&mut *c)
        .await?;
    row.ok_or_else(|| unknown_trigger(pool, name))
}

/// Runs a trigger now (`triggers fire`): its message — a webhook's already rendered by
/// the caller, with its session key — put in its session, recorded as a manual fire.
pub(crate) async fn fire_now<C: Conn>(
    c: &mut C,
    pool: &str,
    name: &str,
    rendered: Option<(String, Option<String>)>,
    now: i64,
) -> StoreResult<(ninetrix_proto::api::TriggerEvent, Option<Fired>)> {
    let row = trigger_for_write(c, pool, name).await?;
    let spec = row.spec()?;
    let instance = format!("manual:{}", ninetrix_proto::ThreadId::new_v7());
    let (message, session) = match (&spec.kind, rendered) {
        (_, Some((message, session))) => {
            (message, fire_session(&spec, session.as_deref(), &instance))
        }
        (ninetrix_proto::triggers::TriggerKind::Schedule(s), None) => {
            (s.message.clone(), fire_session(&spec, None, &instance))
        }
        (ninetrix_proto::triggers::TriggerKind::Webhook(_), None) => {
            return Err(StoreError::Invalid {
                code: ninetrix_proto::api::ErrorCode::TemplateFailed,
                message: "a webhook trigger's message is rendered from a body".into(),
            });
        }
    };
    let h = NewHistory::new(
        ninetrix_proto::api::TriggerSource::Manual,
        ninetrix_proto::api::TriggerOutcome::Fired,
    );
    let (h, fired) = fire_into(c, &row, &session, &message, None, h, now).await?;
    let event = history_event(c, &row.pool, &row.name, h, now).await?;
    Ok((event, fired))
}

/// Writes a history entry and returns it as the API shows it.
async fn history_event<C: Conn>(
    c: &mut C,
    pool: &str,
    name: &str,
    h: NewHistory,
    now: i64,
) -> StoreResult<ninetrix_proto::api::TriggerEvent> {
    let event = ninetrix_proto::api::TriggerEvent {
        seq: 0,
        at: time(now),
        source: h.source,
        outcome: h.outcome,
        reason: h.reason,
        scheduled_at: h.scheduled_at,
        delivery_id: h.delivery_id.clone(),
        session: h.session.clone(),
        thread_id: h.thread_id.as_deref().map(parse_id).transpose()?,
        inbox_seq: h.inbox_seq,
        detail: h.detail.as_deref().map(stored_text),
        refusals: h.refusals,
    };
    let seq = add_history(c, pool, name, h, now).await?;
    Ok(ninetrix_proto::api::TriggerEvent { seq, ..event })
}

/// Delivers a verified webhook: its rendered message into session `session`, once per
/// delivery for this trigger — a delivery id seen in the last week, or (GitHub) the same
/// body within the trigger's tolerance, is answered as a duplicate of the first. `crash`
/// is the kill point before the commit (`hook_before_commit`).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn deliver_hook<C: Conn>(
    c: &mut C,
    pool: &str,
    name: &str,
    delivery: HookDelivery,
    message: &str,
    session: Option<String>,
    now: i64,
    crash: fn(&str),
) -> StoreResult<(ninetrix_proto::api::TriggerEvent, Option<Fired>)> {
    let row = trigger_for_write(c, pool, name).await?;
    let spec = row.spec()?;
    let id_key = delivery.delivery_id.as_deref().map(delivery_id_key);
    let seen: Vec<(String, i64, String, String, i64)> = query_as(
        "SELECT key, at, session, thread_id, inbox_seq FROM trigger_deliveries WHERE pool = $1 AND name = $2 AND (key = $3 OR key = $4)",
    )
    .bind(pool)
    .bind(name)
    .bind(id_key.as_deref())
    .bind(delivery.body_digest.as_deref())
    .fetch_all(&mut *c)
    .await?;
    let by_id = seen
        .iter()
        .find(|s| Some(&s.0) == id_key.as_ref() && s.1 >= now - DELIVERY_ID_KEPT_MS);
    let by_body = seen.iter().find(|s| {
        Some(&s.0) == delivery.body_digest.as_ref() && s.1 >= now - delivery.digest_window_ms
    });
    if let Some((_, _, session, thread_id, inbox_seq)) = by_id.or(by_body) {
        let h = NewHistory {
            delivery_id: delivery.delivery_id.clone(),
            reason: by_id
                .is_none()
                .then_some(ninetrix_proto::api::TriggerReason::SameBody),
            session: Some(session.clone()),
            thread_id: Some(thread_id.clone()),
            inbox_seq: Some(to_u64(*inbox_seq)),
            ..NewHistory::new(
                ninetrix_proto::api::TriggerSource::Webhook,
                ninetrix_proto::api::TriggerOutcome::Deduplicated,
            )
        };
        let event = history_event(c, pool, name, h, now).await?;
        return Ok((event, None));
    }
    let instance = delivery
        .delivery_id
        .clone()
        .unwrap_or_else(|| ninetrix_proto::ThreadId::new_v7().to_string());
    let session = fire_session(&spec, session.as_deref(), &instance);
    let h = NewHistory {
        delivery_id: delivery.delivery_id.clone(),
        ..NewHistory::new(
            ninetrix_proto::api::TriggerSource::Webhook,
            ninetrix_proto::api::TriggerOutcome::Fired,
        )
    };
    // The inbox's own dedupe key too: what older versions checked (per session), and
    // what a reader of the inbox sees the delivery by.
    let inbox_key = delivery
        .delivery_id
        .as_deref()
        .map(|d| delivery_key(name, d));
    let (h, fired) = fire_into(c, &row, &session, message, inbox_key.as_deref(), h, now).await?;
    if let (Some(thread_id), Some(inbox_seq)) = (h.thread_id.clone(), h.inbox_seq) {
        for key in id_key.iter().chain(delivery.body_digest.iter()) {
            query(
                "INSERT INTO trigger_deliveries (pool, name, key, at, session, thread_id, inbox_seq) VALUES ($1, $2, $3, $4, $5, $6, $7) \
                 ON CONFLICT (pool, name, key) DO UPDATE SET at = excluded.at, session = excluded.session, thread_id = excluded.thread_id, inbox_seq = excluded.inbox_seq",
            )
            .bind(pool)
            .bind(name)
            .bind(key)
            .bind(now)
            .bind(&session)
            .bind(&thread_id)
            .bind(to_i64(inbox_seq, "seq")?)
            .execute(&mut *c)
            .await?;
        }
        query("DELETE FROM trigger_deliveries WHERE pool = $1 AND name = $2 AND at < $3")
            .bind(pool)
            .bind(name)
            .bind(now - DELIVERY_ID_KEPT_MS)
            .execute(&mut *c)
            .await?;
    }
    let event = history_event(c, pool, name, h, now).await?;
    crash("hook_before_commit");
    Ok((event, fired))
}

/// Records a refused delivery (or another note) in a trigger's history, if the trigger
/// still exists.
pub(crate) async fn note_trigger<C: Conn>(
    c: &mut C,
    pool: &str,
    name: &str,
    event: ninetrix_proto::api::TriggerEvent,
    now: i64,
) -> StoreResult<()> {
    let found: Option<(i64,)> =
        query_as("SELECT history_seq FROM triggers WHERE pool = $1 AND name = $2")
            .bind(pool)
            .bind(name)
            .fetch_optional(&mut *c)
            .await?;
    if found.is_none() {
        return Ok(());
    }
    let h = NewHistory {
        source: event.source,
        outcome: event.outcome,
        reason: event.reason,
        scheduled_at: event.scheduled_at,
        delivery_id: event.delivery_id,
        session: event.session,
        thread_id: event.thread_id.map(|t| t.to_string()),
        inbox_seq: event.inbox_seq,
        detail: event.detail,
        refusals: event.refusals,
    };
    add_history(c, pool, name, h, now).await?;
    Ok(())
}

/// The registered triggers, by pool and name, each with its last history entry.
pub(crate) async fn list_triggers<C: Conn>(
    c: &mut C,
    pool: Option<&str>,
    name: Option<&str>,
) -> StoreResult<Vec<ninetrix_proto::api::Trigger>> {
    let sql = format!(
        "SELECT {TRIGGER_COLUMNS} FROM triggers WHERE ($1 IS NULL OR pool = $1) AND ($2 IS NULL OR name = $2) ORDER BY pool, name"
    );
    let rows: Vec<TriggerRow> = query_as(AssertSqlSafe(sql))
        .bind(pool)
        .bind(name)
        .fetch_all(&mut *c)
        .await?;
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let sql = format!(
            "SELECT {HISTORY_COLUMNS} FROM trigger_history WHERE pool = $1 AND name = $2 ORDER BY seq DESC LIMIT 1"
        );
        let last: Option<HistoryRow> = query_as(AssertSqlSafe(sql))
            .bind(&row.pool)
            .bind(&row.name)
            .fetch_optional(&mut *c)
            .await?;
        out.push(row.trigger(last.map(HistoryRow::event).transpose()?)?);
    }
    Ok(out)
}

/// The newest `limit` history entries of a trigger before `before`, oldest first;
/// `None` when the pool has no such trigger and no history of one.
pub(crate) async fn trigger_history<C: Conn>(
    c: &mut C,
    pool: &str,
    name: &str,
    before: Option<u64>,
    limit: u32,
) -> StoreResult<Option<Vec<ninetrix_proto::api::TriggerEvent>>> {
    let before = before.map_or(i64::MAX, |b| i64::try_from(b).unwrap_or(i64::MAX));
    let sql = format!(
        "SELECT {HISTORY_COLUMNS} FROM trigger_history WHERE pool = $1 AND name = $2 AND seq < $3 ORDER BY seq DESC LIMIT $4"
    );
    let rows: Vec<HistoryRow> = query_as(AssertSqlSafe(sql))
        .bind(pool)
        .bind(name)
        .bind(before)
        .bind(i64::from(limit))
        .fetch_all(&mut *c)
        .await?;
    if rows.is_empty() {
        let exists: Option<(i64,)> =
            query_as("SELECT history_seq FROM triggers WHERE pool = $1 AND name = $2")
                .bind(pool)
                .bind(name)
                .fetch_optional(&mut *c)
                .await?;
        if exists.is_none() {
            return Ok(None);
        }
    }
    let mut events = rows
        .into_iter()
        .map(HistoryRow::event)
        .collect::<StoreResult<Vec<_>>>()?;
    events.reverse();
    Ok(Some(events))
}

/// The webhook trigger at `/v1/hooks/{pool}/{path}`, with its secret.
pub(crate) async fn hook_target<C: Conn>(
    c: &mut C,
    pool: &str,
    path: &str,
) -> StoreResult<Option<HookTarget>> {
    let sql = format!(
        "SELECT {TRIGGER_COLUMNS} FROM triggers WHERE pool = $1 AND path = $2 AND kind = 'webhook'"
    );
    let row: Option<TriggerRow> = query_as(AssertSqlSafe(sql))
        .bind(pool)
        .bind(path)
        .fetch_optional(&mut *c)
        .await?;
    let Some(row) = row else { return Ok(None) };
    let spec = row.spec()?;
    let secret = row
        .secret
        .clone()
        .ok_or_else(|| corrupt("webhook trigger", "no secret"))?;
    Ok(Some(HookTarget { spec, secret }))
}

/// Whether any schedule is due at `now` (or holds a fire back): a cheap read, so an idle
/// scheduler does not take the write lock every tick.
pub(crate) async fn triggers_due<C: Conn>(c: &mut C, now: i64) -> StoreResult<bool> {
    let found: Option<(i64,)> = query_as(
        "SELECT CAST(1 AS BIGINT) FROM triggers WHERE kind = 'schedule' AND ((next_fire_at IS NOT NULL AND next_fire_at <= $1) OR buffered_at IS NOT NULL) LIMIT 1",
    )
    .bind(now)
    .fetch_optional(&mut *c)
    .await?;
    Ok(found.is_some())
}
