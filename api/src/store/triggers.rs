//! The store's side of triggers (issue 17): the pure decision of one scheduler tick for one
//! schedule ([`plan_tick`]) and the rows of `triggers` and `trigger_history`. Their queries are
//! `ops::triggers`, which call the same `open_session` and `deliver` as the rest of the
//! store.
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

use super::codec::{corrupt, time, to_u64};
use super::conn::rsq;
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
                .map(super::codec::parse_id)
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
    /// Whom the message wakes: its session's thread and replica, and the collaborators' threads
    /// an interrupt (the agent's `on_message_while_busy`) cancelled work in.
    pub wake: super::Wake,
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

impl rsq::FromRow for TriggerRow {
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

impl rsq::FromRow for HistoryRow {
    fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(HistoryRow {
            seq: row.get("seq")?,
            at: row.get("at")?,
            source: row.get("source")?,
            outcome: row.get("outcome")?,
            reason: row.get("reason")?,
            scheduled_at: row.get("scheduled_at")?,
            delivery_id: row.get("delivery_id")?,
            session: row.get("session")?,
            thread_id: row.get("thread_id")?,
            inbox_seq: row.get("inbox_seq")?,
            detail: row.get("detail")?,
            refusals: row.get("refusals")?,
        })
    }
}

#[cfg(test)]
mod tests;
