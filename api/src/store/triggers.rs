//! The store's side of triggers (issue 17): the pure decision of one scheduler tick for one
//! schedule ([`plan_tick`]), the rows of `triggers` and `trigger_history`, and the queries
//! (`trigger_ops!`, expanded beside `sql_ops!` for each backend, so they call the same
//! `open_session` and `insert_inbox` as the rest of the store).
//!
//! A fire is one transaction: the trigger's row is read for update, the tick planned, each fire's
//! message put in its session's inbox under the dedupe key `schedule:<trigger>:<scheduled time>`,
//! the history written and the next fire time stored — so a crash before the commit leaves the
//! fire to the next tick (or the next process), and a crash after it finds the fire done. Two API
//! replicas on Postgres serialise on the row lock: the second re-reads the row, finds it planned
//! and fires nothing.

use chrono::{DateTime, Utc};
use ninetrix_proto::api::{
    Trigger, TriggerEvent, TriggerOutcome, TriggerReason, TriggerSource, TriggersApplied,
};
use ninetrix_proto::triggers::schedule::{
    self, FireKind, OverlapDecision, SkipReason, Spec, overlap_decision, plan_fires,
};
use ninetrix_proto::triggers::{ScheduleTrigger, TriggerSession, TriggerSpec};

use super::ops::{corrupt, time, to_u64};
use super::{StoreError, StoreResult};

/// Most missed fires one tick catches up (`catch_up: all`); the rest are skipped (`over_max`).
pub(crate) const MAX_CATCH_UP_PER_TICK: usize = 100;
/// Schedules one page of a tick plans (one transaction); a full page is followed by another.
pub(crate) const MAX_TRIGGERS_PER_TICK: i64 = 64;
/// Pages one tick runs at most (4,096 schedules): a page stays full while 64 schedules hold a
/// fire back behind turns still running, and must not loop for ever.
pub(crate) const MAX_PAGES_PER_TICK: usize = 64;
/// History entries kept per trigger: older ones are deleted as new ones are written.
pub(crate) const HISTORY_KEPT: i64 = 1000;

/// One step of a tick, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Put the trigger's message in its session for the fire scheduled at `scheduled`.
    Fire {
        /// The scheduled time (the dedupe key's).
        scheduled: DateTime<Utc>,
        /// `Fired` or `CaughtUp`.
        outcome: TriggerOutcome,
        /// Why it fires late, for a fire held back.
        detail: Option<String>,
    },
    /// Write a history entry and nothing else (`Skipped` or `Buffered`).
    Note {
        /// What became of the scheduled time.
        outcome: TriggerOutcome,
        /// Why.
        reason: Option<TriggerReason>,
        /// The scheduled time.
        scheduled: Option<DateTime<Utc>>,
        /// More for people.
        detail: Option<String>,
    },
}

/// What a tick does with one schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TickPlan {
    /// The steps, in order.
    pub(crate) steps: Vec<Step>,
    /// The next fire time to store.
    pub(crate) next_fire_at: Option<DateTime<Utc>>,
    /// Every instant up to this is decided.
    pub(crate) planned_to: DateTime<Utc>,
    /// The fire held back after this tick.
    pub(crate) buffered_at: Option<DateTime<Utc>>,
}

/// What a tick knows about one schedule.
pub(crate) struct TickInput<'a> {
    /// The schedule's settings.
    pub(crate) schedule: &'a ScheduleTrigger,
    /// Its rule, parsed.
    pub(crate) rule: &'a Spec,
    /// Instants up to this were decided by earlier ticks.
    pub(crate) planned_to: DateTime<Utc>,
    /// The stored next fire time.
    pub(crate) next_fire_at: Option<DateTime<Utc>>,
    /// A fire held back by `buffer_one`.
    pub(crate) buffered_at: Option<DateTime<Utc>>,
    /// The previous fire's turn has not finished.
    pub(crate) previous_running: bool,
    /// The tick's time.
    pub(crate) now: DateTime<Utc>,
}

fn skip_reason(reason: SkipReason) -> TriggerReason {
    match reason {
        SkipReason::OutsideWindow => TriggerReason::OutsideWindow,
        SkipReason::CatchUpNone => TriggerReason::CatchUpNone,
        SkipReason::OnlyLast => TriggerReason::OnlyLast,
        SkipReason::OverMax => TriggerReason::OverMax,
    }
}

/// Decides one tick of one schedule, without I/O: first a held-back fire whose previous turn
/// has ended; then, when the next fire time has come, every instant since the last tick — the
/// catch-up policy picks which missed ones run, and each fire goes through the overlap policy
/// (a fire counts as running from the moment it is put in the inbox).
pub(crate) fn plan_tick(input: &TickInput<'_>) -> TickPlan {
    let mut steps = Vec::new();
    let mut running = input.previous_running;
    let mut buffered = input.buffered_at;
    if let Some(held) = buffered.filter(|_| !running) {
        steps.push(Step::Fire {
            scheduled: held,
            outcome: TriggerOutcome::Fired,
            detail: Some(
                "held back by `overlap: buffer_one` until the previous fire's turn ended".into(),
            ),
        });
        buffered = None;
        running = true;
    }
    let due = input.next_fire_at.is_some_and(|t| t <= input.now);
    if !due {
        return TickPlan {
            steps,
            next_fire_at: input.next_fire_at,
            planned_to: input.planned_to,
            buffered_at: buffered,
        };
    }
    let s = input.schedule;
    let plan = plan_fires(
        input.rule,
        Some(input.planned_to),
        input.planned_to,
        input.now,
        s.catch_up,
        s.catch_up_window_secs,
        MAX_CATCH_UP_PER_TICK,
    );
    let last_listed = plan.skipped.len();
    for (i, (at, reason)) in plan.skipped.iter().enumerate() {
        let more = plan.more_skipped && i + 1 == last_listed;
        steps.push(Step::Note {
            outcome: TriggerOutcome::Skipped,
            reason: Some(skip_reason(*reason)),
            scheduled: Some(*at),
            detail: more.then(|| "and more missed times before the catch-up window".to_string()),
        });
    }
    for (at, kind) in plan.fire {
        match overlap_decision(s.overlap, running, buffered.is_some()) {
            OverlapDecision::Fire => {
                steps.push(Step::Fire {
                    scheduled: at,
                    outcome: match kind {
                        FireKind::OnTime => TriggerOutcome::Fired,
                        FireKind::CaughtUp => TriggerOutcome::CaughtUp,
                    },
                    detail: None,
                });
                running = true;
            }
            OverlapDecision::Buffer => {
                steps.push(Step::Note {
                    outcome: TriggerOutcome::Buffered,
                    reason: Some(TriggerReason::Overlap),
                    scheduled: Some(at),
                    detail: Some("the previous fire's turn is still running".into()),
                });
                buffered = Some(at);
            }
            OverlapDecision::Skip => steps.push(Step::Note {
                outcome: TriggerOutcome::Skipped,
                reason: Some(TriggerReason::Overlap),
                scheduled: Some(at),
                detail: Some(if buffered.is_some() {
                    "a fire is already held back for the previous fire's turn".into()
                } else {
                    "the previous fire's turn is still running".into()
                }),
            }),
        }
    }
    TickPlan {
        steps,
        next_fire_at: plan.next,
        planned_to: input.now,
        buffered_at: buffered,
    }
}

/// Whether the turn of a fire's message (`seq` in a thread whose runner has taken messages up to
/// `cursor` and stands at `status`) has not finished: not yet taken, or taken by the turn in
/// progress. (A runner takes one message per turn, so `cursor == seq` is that message's turn.)
pub(crate) fn fire_running(seq: u64, cursor: u64, status: &str) -> bool {
    cursor < seq || (cursor == seq && matches!(status, "in_turn" | "waiting"))
}

/// The session key a fire goes to: the trigger's fixed key, or for `session: new` one of its
/// own named after `instance` (the scheduled time or the delivery id).
pub(crate) fn fire_session(spec: &TriggerSpec, fixed: Option<&str>, instance: &str) -> String {
    match (&spec.session, fixed) {
        (_, Some(rendered)) => rendered.to_string(),
        (TriggerSession::Key(k), None) => k.clone(),
        (TriggerSession::New, None) => format!("trigger:{}:{instance}", spec.name),
    }
}

/// The RFC 3339 text of a scheduled time, as keys carry it.
pub(crate) fn instant_text(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// The digest that tells a changed registration from an unchanged one: the spec and the secret.
pub(crate) fn digest(spec_json: &str, secret: Option<&str>) -> String {
    use sha2::Digest as _;
    let mut h = sha2::Sha256::new();
    h.update(spec_json.as_bytes());
    h.update([0]);
    if let Some(s) = secret {
        h.update([1]);
        h.update(s.as_bytes());
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The first fire of a schedule registered (or changed) at `now`.
pub(crate) fn first_fire(spec: &TriggerSpec, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    spec.schedule()?.spec().ok()?.next_after(now)
}

/// Whether two specs fire at different instants (their rule, zone or kind differ).
pub(crate) fn rule_changed(old: &TriggerSpec, new: &TriggerSpec) -> bool {
    match (old.schedule(), new.schedule()) {
        (Some(a), Some(b)) => {
            a.cron != b.cron || a.every_secs != b.every_secs || a.timezone != b.timezone
        }
        (None, None) => false,
        _ => true,
    }
}

/// The columns every read of `triggers` selects.
pub(crate) const TRIGGER_COLUMNS: &str = "pool, name, agent, path, spec, secret, digest, next_fire_at, planned_to, buffered_at, last_thread_id, last_inbox_seq, created_at, updated_at";

/// A row of `triggers`.
#[derive(sqlx::FromRow)]
pub(crate) struct TriggerRow {
    pub(crate) pool: String,
    pub(crate) name: String,
    pub(crate) agent: String,
    pub(crate) path: Option<String>,
    pub(crate) spec: String,
    pub(crate) secret: Option<String>,
    pub(crate) digest: String,
    pub(crate) next_fire_at: Option<i64>,
    pub(crate) planned_to: i64,
    pub(crate) buffered_at: Option<i64>,
    pub(crate) last_thread_id: Option<String>,
    pub(crate) last_inbox_seq: Option<i64>,
    pub(crate) created_at: i64,
    pub(crate) updated_at: i64,
}

impl TriggerRow {
    /// The stored spec.
    pub(crate) fn spec(&self) -> StoreResult<TriggerSpec> {
        serde_json::from_str(&self.spec).map_err(|e| corrupt("trigger spec", &e.to_string()))
    }

    /// As the API shows it (never with its secret).
    pub(crate) fn trigger(&self, last: Option<TriggerEvent>) -> StoreResult<Trigger> {
        let spec = self.spec()?;
        Ok(Trigger {
            pool: self.pool.clone(),
            hook_path: self
                .path
                .as_ref()
                .map(|p| format!("/v1/hooks/{}/{p}", self.pool)),
            spec,
            next_fire_at: self.next_fire_at.map(time),
            buffered_at: self.buffered_at.map(time),
            last,
            created_at: time(self.created_at),
            updated_at: time(self.updated_at),
        })
    }
}

/// The columns every read of `trigger_history` selects.
pub(crate) const HISTORY_COLUMNS: &str = "seq, at, source, outcome, reason, scheduled_at, delivery_id, session, thread_id, inbox_seq, detail, refusals";

/// A row of `trigger_history`.
#[derive(sqlx::FromRow)]
pub(crate) struct HistoryRow {
    pub(crate) seq: i64,
    pub(crate) at: i64,
    pub(crate) source: String,
    pub(crate) outcome: String,
    pub(crate) reason: Option<String>,
    pub(crate) scheduled_at: Option<i64>,
    pub(crate) delivery_id: Option<String>,
    pub(crate) session: Option<String>,
    pub(crate) thread_id: Option<String>,
    pub(crate) inbox_seq: Option<i64>,
    pub(crate) detail: Option<String>,
    pub(crate) refusals: Option<i64>,
}

/// A stored enum's name, through its serde form.
pub(crate) fn enum_name<T: serde::Serialize>(value: T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        _ => String::new(),
    }
}

fn parse_enum<T: serde::de::DeserializeOwned>(what: &str, name: &str) -> StoreResult<T> {
    serde_json::from_value(serde_json::Value::String(name.to_string()))
        .map_err(|_| corrupt(what, name))
}

impl HistoryRow {
    /// As the API shows it.
    pub(crate) fn event(self) -> StoreResult<TriggerEvent> {
        Ok(TriggerEvent {
            seq: to_u64(self.seq),
            at: time(self.at),
            source: parse_enum::<TriggerSource>("trigger source", &self.source)?,
            outcome: parse_enum::<TriggerOutcome>("trigger outcome", &self.outcome)?,
            reason: self
                .reason
                .as_deref()
                .map(|r| parse_enum::<TriggerReason>("trigger reason", r))
                .transpose()?,
            scheduled_at: self.scheduled_at.map(time),
            delivery_id: self.delivery_id,
            session: self.session,
            thread_id: self
                .thread_id
                .as_deref()
                .map(super::ops::parse_id)
                .transpose()?,
            inbox_seq: self.inbox_seq.map(to_u64),
            detail: self.detail,
            refusals: self.refusals.map(to_u64),
        })
    }
}

/// A history entry to write.
#[derive(Clone, Debug)]
pub(crate) struct NewHistory {
    pub(crate) source: TriggerSource,
    pub(crate) outcome: TriggerOutcome,
    pub(crate) reason: Option<TriggerReason>,
    pub(crate) scheduled_at: Option<DateTime<Utc>>,
    pub(crate) delivery_id: Option<String>,
    pub(crate) session: Option<String>,
    pub(crate) thread_id: Option<String>,
    pub(crate) inbox_seq: Option<u64>,
    pub(crate) detail: Option<String>,
    pub(crate) refusals: Option<u64>,
}

impl NewHistory {
    /// An entry with only its source and outcome set.
    pub(crate) fn new(source: TriggerSource, outcome: TriggerOutcome) -> NewHistory {
        NewHistory {
            source,
            outcome,
            reason: None,
            scheduled_at: None,
            delivery_id: None,
            session: None,
            thread_id: None,
            inbox_seq: None,
            detail: None,
            refusals: None,
        }
    }
}

/// What a tick fired, for the scheduler to wake the agents and log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fired {
    /// The pool.
    pub pool: String,
    /// The trigger.
    pub trigger: String,
    /// The target agent (its replicas are woken).
    pub agent: String,
    /// The session's thread (its long-polls are woken).
    pub thread_id: ninetrix_proto::ThreadId,
    /// The message's seq in it.
    pub seq: u64,
    /// The scheduled time, for a schedule's fire.
    pub scheduled_at: Option<DateTime<Utc>>,
}

/// The trigger a webhook delivery is for, with what verifying it needs (no `Debug`: it holds the
/// secret).
#[derive(Clone)]
pub struct HookTarget {
    /// The trigger.
    pub spec: TriggerSpec,
    /// Its secret.
    pub secret: String,
}

impl std::fmt::Debug for TriggerRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secret.
        f.debug_struct("TriggerRow")
            .field("pool", &self.pool)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Sorts each list of a registration's result.
pub(crate) fn sorted(mut applied: TriggersApplied) -> TriggersApplied {
    applied.created.sort();
    applied.updated.sort();
    applied.unchanged.sort();
    applied.removed.sort();
    applied
}

/// A time as stored: Unix milliseconds.
pub(crate) fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

/// Refuses a store call on a trigger that does not exist.
pub(crate) fn unknown_trigger(pool: &str, name: &str) -> StoreError {
    StoreError::UnknownTrigger(format!("pool `{pool}` has no trigger `{name}`"))
}

/// The inbox dedupe key of a webhook delivery's message.
pub(crate) fn delivery_key(trigger: &str, delivery_id: &str) -> String {
    format!("webhook:{trigger}:{delivery_id}")
}

/// The most characters of a history entry's `detail` that are stored.
pub(crate) const MAX_DETAIL_CHARS: usize = 1000;

/// A history entry's `detail` as stored: U+0000 (which Postgres text cannot hold) shown as
/// U+FFFD, and cut to [`MAX_DETAIL_CHARS`] with `…` — a refusal's detail may quote the sender.
pub(crate) fn stored_text(detail: &str) -> String {
    let clean = detail.replace('\0', "\u{fffd}");
    ninetrix_proto::triggers::template::clip(&clean, MAX_DETAIL_CHARS)
}

/// What identifies a verified delivery for deduplication.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HookDelivery {
    /// The sender's delivery id (`X-GitHub-Delivery` / `webhook-id`).
    pub delivery_id: Option<String>,
    /// [`body_digest_key`] of the body, for senders whose delivery id is not signed (GitHub).
    pub body_digest: Option<String>,
    /// How long, in ms, the same body counts as a duplicate: the trigger's tolerance.
    pub digest_window_ms: i64,
}

/// The key under which a delivery is remembered for deduplication, per trigger: its delivery id.
pub(crate) fn delivery_id_key(delivery_id: &str) -> String {
    format!("id:{delivery_id}")
}

/// The key under which a delivery's body is remembered (GitHub deliveries, whose delivery id is
/// not signed): the SHA-256 of the body, in hex.
pub(crate) fn body_digest_key(body: &[u8]) -> String {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(body);
    let mut key = String::with_capacity(7 + 64);
    key.push_str("sha256:");
    for byte in digest.iter() {
        key.push_str(&format!("{byte:02x}"));
    }
    key
}

/// How long a delivery id is remembered for deduplication: GitHub redelivers for 3 days, Svix
/// retries for about 5; a week covers both.
pub(crate) const DELIVERY_ID_KEPT_MS: i64 = 7 * 24 * 3600 * 1000;

/// The dedupe key of a schedule's fire.
pub(crate) fn schedule_key(trigger: &str, scheduled: DateTime<Utc>) -> String {
    schedule::dedupe_key(trigger, scheduled)
}

macro_rules! trigger_ops {
    (writes $lock:literal) => {
        use $crate::store::triggers::*;

        /// Makes the pool's registered triggers exactly `set` (checked by the caller): new ones
        /// are inserted with their first fire after `now`, changed ones updated (a changed rule
        /// plans from `now`; otherwise the next fire time is kept), missing ones deleted (their
        /// history stays).
        pub(crate) async fn put_triggers(c: &mut Conn, pool: &str, set: &ninetrix_proto::api::TriggerSet, now: i64) -> StoreResult<ninetrix_proto::api::TriggersApplied> {
            let now_t = $crate::store::ops::time(now);
            let sql = format!("SELECT {TRIGGER_COLUMNS} FROM triggers WHERE pool = $1");
            let existing: Vec<TriggerRow> = q::query_as(q::AssertSqlSafe(sql)).bind(pool).fetch_all(&mut *c).await?;
            let mut applied = ninetrix_proto::api::TriggersApplied::default();
            for row in &existing {
                if !set.triggers.iter().any(|r| r.spec.name == row.name) {
                    q::query("DELETE FROM triggers WHERE pool = $1 AND name = $2").bind(pool).bind(&row.name).execute(&mut *c).await?;
                    applied.removed.push(row.name.clone());
                }
            }
            for reg in &set.triggers {
                let spec = &reg.spec;
                let spec_json = $crate::store::ops::encode(spec)?;
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
                        q::query(
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
                        let (seq,): (i64,) = q::query_as("SELECT COALESCE(MAX(seq), 0) FROM trigger_history WHERE pool = $1 AND name = $2")
                            .bind(pool)
                            .bind(&spec.name)
                            .fetch_one(&mut *c)
                            .await?;
                        q::query(
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
        async fn add_history(c: &mut Conn, pool: &str, name: &str, h: NewHistory, now: i64) -> StoreResult<u64> {
            let (seq,): (i64,) = q::query_as("UPDATE triggers SET history_seq = history_seq + 1 WHERE pool = $1 AND name = $2 RETURNING history_seq")
                .bind(pool)
                .bind(name)
                .fetch_one(&mut *c)
                .await?;
            q::query(
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
                q::query("DELETE FROM trigger_history WHERE pool = $1 AND name = $2 AND seq <= $3")
                    .bind(pool)
                    .bind(name)
                    .bind(seq - HISTORY_KEPT)
                    .execute(&mut *c)
                    .await?;
            }
            Ok(to_u64(seq))
        }

        /// Whether the turn of the trigger's previous fire has not finished.
        async fn previous_running(c: &mut Conn, row: &TriggerRow) -> StoreResult<bool> {
            let (Some(thread), Some(seq)) = (&row.last_thread_id, row.last_inbox_seq) else { return Ok(false) };
            let found: Option<(i64, String)> = q::query_as("SELECT inbox_cursor, status FROM threads WHERE thread_id = $1")
                .bind(thread)
                .fetch_optional(&mut *c)
                .await?;
            Ok(found.is_some_and(|(cursor, status)| fire_running(to_u64(seq), to_u64(cursor), &status)))
        }

        /// Puts a trigger's message in session `session` of its agent, once per `dedupe` key;
        /// records the fire (or the duplicate) in the history and, when new, as the trigger's
        /// last fire. Returns the history entry and, when a message was added, what to wake.
        #[allow(clippy::too_many_arguments)]
        async fn fire_into(
            c: &mut Conn,
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
                let seq: Option<(i64,)> = q::query_as("SELECT seq FROM inbox WHERE thread_id = $1 AND dedupe_key = $2")
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
            let (enqueued, _) = insert_inbox(c, id, message, dedupe, None, now).await?;
            q::query("UPDATE triggers SET last_thread_id = $3, last_inbox_seq = $4 WHERE pool = $1 AND name = $2")
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
            };
            Ok((h, Some(fired)))
        }

        /// One page of a scheduler tick at `now`: the first [`MAX_TRIGGERS_PER_TICK`] schedules
        /// whose next fire time has come (or that hold a fire back) are planned ([`plan_tick`])
        /// and their fires put in their sessions, in this one transaction. Also returns whether
        /// the page was full (more may be due). `crash` is called after the writes, before the commit (the
        /// deterministic kill point `trigger_fire_before_commit`).
        pub(crate) async fn fire_due(c: &mut Conn, now: i64, crash: fn(&str)) -> StoreResult<(Vec<Fired>, bool)> {
            let now_t = $crate::store::ops::time(now);
            let sql = format!(
                "SELECT {TRIGGER_COLUMNS} FROM triggers WHERE kind = 'schedule' AND ((next_fire_at IS NOT NULL AND next_fire_at <= $1) OR buffered_at IS NOT NULL) \
                 ORDER BY next_fire_at, pool, name LIMIT {MAX_TRIGGERS_PER_TICK}{}", $lock
            );
            let rows: Vec<TriggerRow> = q::query_as(q::AssertSqlSafe(sql)).bind(now).fetch_all(&mut *c).await?;
            let full = rows.len() as i64 == MAX_TRIGGERS_PER_TICK;
            let mut fired = Vec::new();
            for row in rows {
                let spec = row.spec()?;
                let Some(schedule) = spec.schedule() else { continue };
                let rule = match schedule.spec() {
                    Ok(rule) => rule,
                    Err(e) => {
                        tracing::error!(pool = %row.pool, trigger = %row.name, "a stored schedule no longer parses ({e}); it will not fire");
                        q::query("UPDATE triggers SET next_fire_at = NULL, buffered_at = NULL WHERE pool = $1 AND name = $2")
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
                    planned_to: $crate::store::ops::time(row.planned_to),
                    next_fire_at: row.next_fire_at.map($crate::store::ops::time),
                    buffered_at: row.buffered_at.map($crate::store::ops::time),
                    previous_running: running,
                    now: now_t,
                });
                for step in plan.steps {
                    match step {
                        Step::Fire { scheduled, outcome, detail } => {
                            let session = fire_session(&spec, None, &instant_text(scheduled));
                            let h = NewHistory {
                                scheduled_at: Some(scheduled),
                                detail,
                                ..NewHistory::new(ninetrix_proto::api::TriggerSource::Schedule, outcome)
                            };
                            let key = schedule_key(&spec.name, scheduled);
                            let (h, f) = fire_into(c, &row, &session, &schedule.message, Some(&key), h, now).await?;
                            add_history(c, &row.pool, &row.name, h, now).await?;
                            fired.extend(f);
                        }
                        Step::Note { outcome, reason, scheduled, detail } => {
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
                q::query("UPDATE triggers SET next_fire_at = $3, planned_to = $4, buffered_at = $5 WHERE pool = $1 AND name = $2")
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

        async fn trigger_for_write(c: &mut Conn, pool: &str, name: &str) -> StoreResult<TriggerRow> {
            let sql = format!("SELECT {TRIGGER_COLUMNS} FROM triggers WHERE pool = $1 AND name = $2{}", $lock);
            let row: Option<TriggerRow> = q::query_as(q::AssertSqlSafe(sql)).bind(pool).bind(name).fetch_optional(&mut *c).await?;
            row.ok_or_else(|| unknown_trigger(pool, name))
        }

        /// Runs a trigger now (`triggers fire`): its message — a webhook's already rendered by
        /// the caller, with its session key — put in its session, recorded as a manual fire.
        pub(crate) async fn fire_now(c: &mut Conn, pool: &str, name: &str, rendered: Option<(String, Option<String>)>, now: i64) -> StoreResult<(ninetrix_proto::api::TriggerEvent, Option<Fired>)> {
            let row = trigger_for_write(c, pool, name).await?;
            let spec = row.spec()?;
            let instance = format!("manual:{}", ninetrix_proto::ThreadId::new_v7());
            let (message, session) = match (&spec.kind, rendered) {
                (_, Some((message, session))) => (message, fire_session(&spec, session.as_deref(), &instance)),
                (ninetrix_proto::triggers::TriggerKind::Schedule(s), None) => (s.message.clone(), fire_session(&spec, None, &instance)),
                (ninetrix_proto::triggers::TriggerKind::Webhook(_), None) => {
                    return Err(StoreError::Invalid {
                        code: ninetrix_proto::api::ErrorCode::TemplateFailed,
                        message: "a webhook trigger's message is rendered from a body".into(),
                    });
                }
            };
            let h = NewHistory::new(ninetrix_proto::api::TriggerSource::Manual, ninetrix_proto::api::TriggerOutcome::Fired);
            let (h, fired) = fire_into(c, &row, &session, &message, None, h, now).await?;
            let event = history_event(c, &row.pool, &row.name, h, now).await?;
            Ok((event, fired))
        }

        /// Writes a history entry and returns it as the API shows it.
        async fn history_event(c: &mut Conn, pool: &str, name: &str, h: NewHistory, now: i64) -> StoreResult<ninetrix_proto::api::TriggerEvent> {
            let event = ninetrix_proto::api::TriggerEvent {
                seq: 0,
                at: $crate::store::ops::time(now),
                source: h.source,
                outcome: h.outcome,
                reason: h.reason,
                scheduled_at: h.scheduled_at,
                delivery_id: h.delivery_id.clone(),
                session: h.session.clone(),
                thread_id: h.thread_id.as_deref().map($crate::store::ops::parse_id).transpose()?,
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
        pub(crate) async fn deliver_hook(
            c: &mut Conn,
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
            let seen: Vec<(String, i64, String, String, i64)> = q::query_as(
                "SELECT key, at, session, thread_id, inbox_seq FROM trigger_deliveries WHERE pool = $1 AND name = $2 AND (key = $3 OR key = $4)",
            )
            .bind(pool)
            .bind(name)
            .bind(id_key.as_deref())
            .bind(delivery.body_digest.as_deref())
            .fetch_all(&mut *c)
            .await?;
            let by_id = seen.iter().find(|s| Some(&s.0) == id_key.as_ref() && s.1 >= now - DELIVERY_ID_KEPT_MS);
            let by_body = seen.iter().find(|s| Some(&s.0) == delivery.body_digest.as_ref() && s.1 >= now - delivery.digest_window_ms);
            if let Some((_, _, session, thread_id, inbox_seq)) = by_id.or(by_body) {
                let h = NewHistory {
                    delivery_id: delivery.delivery_id.clone(),
                    reason: by_id.is_none().then_some(ninetrix_proto::api::TriggerReason::SameBody),
                    session: Some(session.clone()),
                    thread_id: Some(thread_id.clone()),
                    inbox_seq: Some(to_u64(*inbox_seq)),
                    ..NewHistory::new(ninetrix_proto::api::TriggerSource::Webhook, ninetrix_proto::api::TriggerOutcome::Deduplicated)
                };
                let event = history_event(c, pool, name, h, now).await?;
                return Ok((event, None));
            }
            let instance = delivery.delivery_id.clone().unwrap_or_else(|| ninetrix_proto::ThreadId::new_v7().to_string());
            let session = fire_session(&spec, session.as_deref(), &instance);
            let h = NewHistory {
                delivery_id: delivery.delivery_id.clone(),
                ..NewHistory::new(ninetrix_proto::api::TriggerSource::Webhook, ninetrix_proto::api::TriggerOutcome::Fired)
            };
            // The inbox's own dedupe key too: what older versions checked (per session), and
            // what a reader of the inbox sees the delivery by.
            let inbox_key = delivery.delivery_id.as_deref().map(|d| delivery_key(name, d));
            let (h, fired) = fire_into(c, &row, &session, message, inbox_key.as_deref(), h, now).await?;
            if let (Some(thread_id), Some(inbox_seq)) = (h.thread_id.clone(), h.inbox_seq) {
                for key in id_key.iter().chain(delivery.body_digest.iter()) {
                    q::query(
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
                q::query("DELETE FROM trigger_deliveries WHERE pool = $1 AND name = $2 AND at < $3")
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
        pub(crate) async fn note_trigger(c: &mut Conn, pool: &str, name: &str, event: ninetrix_proto::api::TriggerEvent, now: i64) -> StoreResult<()> {
            let found: Option<(i64,)> = q::query_as("SELECT history_seq FROM triggers WHERE pool = $1 AND name = $2")
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
    };
    (reads) => {
        use $crate::store::triggers::*;

        /// The registered triggers, by pool and name, each with its last history entry.
        pub(crate) async fn list_triggers(c: &mut ReadConn, pool: Option<&str>, name: Option<&str>) -> StoreResult<Vec<ninetrix_proto::api::Trigger>> {
            let sql = format!("SELECT {TRIGGER_COLUMNS} FROM triggers WHERE ($1 IS NULL OR pool = $1) AND ($2 IS NULL OR name = $2) ORDER BY pool, name");
            let rows: Vec<TriggerRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(pool).bind(name).fetch_all(&mut *c).await?;
            let mut out = Vec::with_capacity(rows.len());
            for row in rows {
                let sql = format!("SELECT {HISTORY_COLUMNS} FROM trigger_history WHERE pool = $1 AND name = $2 ORDER BY seq DESC LIMIT 1");
                let last: Option<HistoryRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(&row.pool).bind(&row.name).fetch_optional(&mut *c).await?;
                out.push(row.trigger(last.map(HistoryRow::event).transpose()?)?);
            }
            Ok(out)
        }

        /// The newest `limit` history entries of a trigger before `before`, oldest first;
        /// `None` when the pool has no such trigger and no history of one.
        pub(crate) async fn trigger_history(c: &mut ReadConn, pool: &str, name: &str, before: Option<u64>, limit: u32) -> StoreResult<Option<Vec<ninetrix_proto::api::TriggerEvent>>> {
            let before = before.map_or(i64::MAX, |b| i64::try_from(b).unwrap_or(i64::MAX));
            let sql = format!("SELECT {HISTORY_COLUMNS} FROM trigger_history WHERE pool = $1 AND name = $2 AND seq < $3 ORDER BY seq DESC LIMIT $4");
            let rows: Vec<HistoryRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(pool)
                .bind(name)
                .bind(before)
                .bind(i64::from(limit))
                .fetch_all(&mut *c)
                .await?;
            if rows.is_empty() {
                let exists: Option<(i64,)> = sqlx::query_as("SELECT history_seq FROM triggers WHERE pool = $1 AND name = $2")
                    .bind(pool)
                    .bind(name)
                    .fetch_optional(&mut *c)
                    .await?;
                if exists.is_none() {
                    return Ok(None);
                }
            }
            let mut events = rows.into_iter().map(HistoryRow::event).collect::<StoreResult<Vec<_>>>()?;
            events.reverse();
            Ok(Some(events))
        }

        /// The webhook trigger at `/v1/hooks/{pool}/{path}`, with its secret.
        pub(crate) async fn hook_target(c: &mut ReadConn, pool: &str, path: &str) -> StoreResult<Option<HookTarget>> {
            let sql = format!("SELECT {TRIGGER_COLUMNS} FROM triggers WHERE pool = $1 AND path = $2 AND kind = 'webhook'");
            let row: Option<TriggerRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(pool).bind(path).fetch_optional(&mut *c).await?;
            let Some(row) = row else { return Ok(None) };
            let spec = row.spec()?;
            let secret = row.secret.clone().ok_or_else(|| corrupt("webhook trigger", "no secret"))?;
            Ok(Some(HookTarget { spec, secret }))
        }

        /// Whether any schedule is due at `now` (or holds a fire back): a cheap read, so an idle
        /// scheduler does not take the write lock every tick.
        pub(crate) async fn triggers_due(c: &mut ReadConn, now: i64) -> StoreResult<bool> {
            let found: Option<(i64,)> = sqlx::query_as(
                "SELECT CAST(1 AS BIGINT) FROM triggers WHERE kind = 'schedule' AND ((next_fire_at IS NOT NULL AND next_fire_at <= $1) OR buffered_at IS NOT NULL) LIMIT 1",
            )
            .bind(now)
            .fetch_optional(&mut *c)
            .await?;
            Ok(found.is_some())
        }
    };
}
pub(crate) use trigger_ops;

#[cfg(test)]
mod tests;
