//! Triggers as people read them (`ninetrix triggers`): the table of a pool's schedules and
//! webhooks, the history of one, and the line a manual fire prints. Pure functions of the API's
//! records and the time, so every word is tested without a server.
//!
//! Times are shown in UTC (RFC 3339, whole seconds) beside a span relative to now (`in 5m`,
//! `2m ago`): the listing never depends on the terminal's time zone.

use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};
use ninetrix_proto::api::{Trigger, TriggerEvent, TriggerOutcome, TriggerReason, TriggerSource};
use ninetrix_proto::triggers::{TriggerKind, TriggerSession, TriggerSpec};

use crate::ui::handoffs::short_session;

/// A span in the largest whole unit that fits, kubectl-style: `45s`, `12m`, `23h`, `3d` (hours
/// up to two days, as `approvals` shows expiries).
pub(crate) fn span(d: TimeDelta) -> String {
    match d.num_seconds().max(0) {
        s if s < 60 => format!("{s}s"),
        s if s < 3_600 => format!("{}m", s / 60),
        s if s < 48 * 3_600 => format!("{}h", s / 3_600),
        s => format!("{}d", s / 86_400),
    }
}

/// `at` relative to `now`: `in 5m` ahead, `2m ago` behind.
pub(crate) fn relative(at: DateTime<Utc>, now: DateTime<Utc>) -> String {
    if at > now {
        format!("in {}", span(at - now))
    } else {
        format!("{} ago", span(now - at))
    }
}

/// `2026-03-02T09:00:00Z`.
pub(crate) fn utc(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// A reason's name as the API spells it: `overlap`, `bad_signature`, `outside_window`.
pub(crate) fn reason_name(reason: TriggerReason) -> String {
    serde_json::to_value(reason)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| format!("{reason:?}"))
}

/// A source's name: `schedule`, `webhook`, `manual`.
pub(crate) fn source_name(source: TriggerSource) -> &'static str {
    match source {
        TriggerSource::Schedule => "schedule",
        TriggerSource::Webhook => "webhook",
        TriggerSource::Manual => "manual",
    }
}

/// What became of an entry: `fired`, `skipped (overlap)`, `rejected (bad_signature)`.
pub(crate) fn outcome(e: &TriggerEvent) -> String {
    match e.reason {
        Some(reason) => format!("{} ({})", e.outcome.as_str(), reason_name(reason)),
        None => e.outcome.as_str().to_string(),
    }
}

/// The SESSION column: `new` (a session per fire), else the key (templates as written).
pub(crate) fn session(spec: &TriggerSpec) -> String {
    match &spec.session {
        TriggerSession::New => "new".into(),
        TriggerSession::Key(key) => short_session(key),
    }
}

/// The RULE column: a schedule's rule (`cron 0 9 * * 1-5 (Europe/Lisbon)`, `every 10m`), or the
/// request a webhook sender makes (`POST http://127.0.0.1:8787/v1/hooks/shop/gh-issues`).
pub(crate) fn rule(t: &Trigger, api_url: &str) -> String {
    match &t.spec.kind {
        TriggerKind::Schedule(s) => s.describe(),
        TriggerKind::Webhook(w) => {
            let path = t
                .hook_path
                .clone()
                .unwrap_or_else(|| format!("/v1/hooks/{}/{}", t.pool, w.path));
            format!("POST {}{path}", api_url.trim_end_matches('/'))
        }
    }
}

/// The NEXT FIRE column: a schedule's next time and how far off it is (`due 2m ago` when the API
/// is behind), plus a fire held back by `overlap: buffer_one`; `never` for a schedule with no
/// more fires; `-` for a webhook (it fires when a delivery comes).
pub(crate) fn next_fire(t: &Trigger, now: DateTime<Utc>) -> String {
    if t.spec.webhook().is_some() {
        return "-".into();
    }
    let next = match t.next_fire_at {
        Some(at) if at > now => format!("{} ({})", utc(at), relative(at, now)),
        Some(at) => format!("{} (due {})", utc(at), relative(at, now)),
        None => "never".into(),
    };
    match t.buffered_at {
        Some(b) => format!("{next}; {} buffered", utc(b)),
        None => next,
    }
}

/// The LAST column: the newest entry's outcome and when (`fired 2m ago`, `skipped (overlap) 10s
/// ago`); `-` before the first.
pub(crate) fn last(t: &Trigger, now: DateTime<Utc>) -> String {
    match &t.last {
        Some(e) => format!("{} {}", outcome(e), relative(e.at, now)),
        None => "-".into(),
    }
}

/// The table of triggers: NAME, TYPE, AGENT, SESSION, RULE, NEXT FIRE, LAST.
pub(crate) fn table(triggers: &[Trigger], api_url: &str, now: DateTime<Utc>) -> String {
    let rows: Vec<[String; 7]> = triggers
        .iter()
        .map(|t| {
            [
                t.spec.name.clone(),
                t.spec.kind_name().to_string(),
                t.spec.agent.clone(),
                session(&t.spec),
                rule(t, api_url),
                next_fire(t, now),
                last(t, now),
            ]
        })
        .collect();
    crate::ui::table::table(
        [
            "NAME",
            "TYPE",
            "AGENT",
            "SESSION",
            "RULE",
            "NEXT FIRE",
            "LAST",
        ],
        &rows,
    )
}

/// What an entry was for: a schedule's scheduled time, a webhook's delivery id, `-` otherwise.
fn what_for(e: &TriggerEvent) -> String {
    match (&e.scheduled_at, &e.delivery_id) {
        (Some(at), _) => format!("scheduled {}", utc(*at)),
        (None, Some(id)) => format!("delivery {id}"),
        (None, None) => "-".into(),
    }
}

/// The history of one trigger, oldest first: AT, SOURCE, OUTCOME (with its reason), FOR (the
/// scheduled time, or the delivery id), SESSION, MESSAGE (its seq in the session's inbox),
/// DETAIL.
pub(crate) fn history(events: &[TriggerEvent]) -> String {
    let rows: Vec<[String; 7]> = events
        .iter()
        .map(|e| {
            [
                utc(e.at),
                source_name(e.source).to_string(),
                outcome(e),
                what_for(e),
                e.session
                    .as_deref()
                    .map_or("-".into(), |k| crate::ui::one_line(k, 80)),
                e.inbox_seq.map_or("-".into(), |s| format!("#{s}")),
                e.detail
                    .as_deref()
                    .map_or("-".into(), |d| crate::ui::one_line(d, 80)),
            ]
        })
        .collect();
    crate::ui::table::table(
        [
            "AT", "SOURCE", "OUTCOME", "FOR", "SESSION", "MESSAGE", "DETAIL",
        ],
        &rows,
    )
}

/// What `triggers fire` prints: where the message went and that it waits in the session's inbox
/// until a replica takes it — or, when the API did not fire it, what became of it instead.
pub(crate) fn fired(name: &str, e: &TriggerEvent) -> String {
    let queued = matches!(e.outcome, TriggerOutcome::Fired | TriggerOutcome::CaughtUp);
    match (queued, &e.session, e.inbox_seq) {
        (true, Some(session), Some(seq)) => {
            let thread = e
                .thread_id
                .map(|t| format!(" (thread {t})"))
                .unwrap_or_default();
            format!(
                "fired trigger {name} → session {session}{thread}, message #{seq} queued in its \
                 inbox until a replica takes it"
            )
        }
        _ => {
            let detail = e
                .detail
                .as_deref()
                .map(|d| format!(": {d}"))
                .unwrap_or_default();
            format!("trigger {name} was not fired: {}{detail}", outcome(e))
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone as _;
    use ninetrix_proto::ThreadId;
    use ninetrix_proto::triggers::schedule::{CatchUp, Overlap};
    use ninetrix_proto::triggers::{ScheduleTrigger, SignatureScheme, WebhookTrigger};

    use super::*;

    fn at(h: u32, m: u32, s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 3, 2, h, m, s).unwrap()
    }

    fn thread() -> ThreadId {
        ThreadId::from(uuid::Uuid::from_u128(
            0x0193_6f5e_0000_7000_8000_0000_0000_0001,
        ))
    }

    fn schedule(name: &str, cron: Option<&str>, every: Option<u64>) -> TriggerSpec {
        TriggerSpec {
            name: name.into(),
            agent: "writer".into(),
            session: TriggerSession::default_for(name),
            kind: TriggerKind::Schedule(ScheduleTrigger {
                cron: cron.map(str::to_string),
                every_secs: every,
                timezone: "Europe/Lisbon".into(),
                message: "Write the daily report".into(),
                overlap: Overlap::Skip,
                catch_up: CatchUp::Last,
                catch_up_window_secs: 3_600,
            }),
        }
    }

    fn webhook(name: &str) -> TriggerSpec {
        TriggerSpec {
            name: name.into(),
            agent: "triage".into(),
            session: TriggerSession::New,
            kind: TriggerKind::Webhook(WebhookTrigger {
                path: name.into(),
                message: "New issue: {{ issue.title }}".into(),
                secret: "GH_SECRET".into(),
                signature: SignatureScheme::Github,
                tolerance_secs: 300,
                rate_limit_per_minute: 60,
                max_body_bytes: 1 << 20,
            }),
        }
    }

    fn event(
        seq: u64,
        when: DateTime<Utc>,
        source: TriggerSource,
        outcome: TriggerOutcome,
        reason: Option<TriggerReason>,
    ) -> TriggerEvent {
        let fired = matches!(outcome, TriggerOutcome::Fired | TriggerOutcome::CaughtUp);
        TriggerEvent {
            seq,
            at: when,
            source,
            outcome,
            reason,
            scheduled_at: None,
            delivery_id: None,
            session: fired.then(|| "trigger:nightly".to_string()),
            thread_id: fired.then(thread),
            inbox_seq: fired.then_some(seq),
            detail: None,
            refusals: None,
        }
    }

    fn trigger(spec: TriggerSpec, last: Option<TriggerEvent>) -> Trigger {
        Trigger {
            pool: "shop".into(),
            hook_path: spec.webhook().map(|w| format!("/v1/hooks/shop/{}", w.path)),
            spec,
            next_fire_at: None,
            buffered_at: None,
            last,
            created_at: at(8, 0, 0),
            updated_at: at(8, 0, 0),
        }
    }

    fn sample(now: DateTime<Utc>) -> Vec<Trigger> {
        let mut nightly = trigger(
            schedule("nightly", Some("0 9 * * 1-5"), None),
            Some(event(
                3,
                now - TimeDelta::minutes(2),
                TriggerSource::Schedule,
                TriggerOutcome::Fired,
                None,
            )),
        );
        nightly.next_fire_at = Some(now + TimeDelta::minutes(5));
        let mut poll = trigger(
            schedule("poll", None, Some(600)),
            Some(event(
                9,
                now - TimeDelta::seconds(10),
                TriggerSource::Schedule,
                TriggerOutcome::Skipped,
                Some(TriggerReason::Overlap),
            )),
        );
        poll.next_fire_at = Some(now - TimeDelta::seconds(30));
        poll.buffered_at = Some(now - TimeDelta::minutes(10));
        let gh = trigger(
            webhook("gh-issues"),
            Some(event(
                1,
                now - TimeDelta::hours(1),
                TriggerSource::Webhook,
                TriggerOutcome::Rejected,
                Some(TriggerReason::BadSignature),
            )),
        );
        let mut fresh = trigger(schedule("fresh", None, Some(86_400)), None);
        fresh.spec.session = TriggerSession::Key("reports".into());
        fresh.next_fire_at = Some(now + TimeDelta::hours(30));
        vec![fresh, gh, nightly, poll]
    }

    #[test]
    fn spans_read_ahead_and_behind() {
        let now = at(12, 0, 0);
        assert_eq!(relative(now + TimeDelta::minutes(5), now), "in 5m");
        assert_eq!(relative(now - TimeDelta::seconds(10), now), "10s ago");
        assert_eq!(relative(now, now), "0s ago");
        assert_eq!(relative(now + TimeDelta::hours(47), now), "in 47h");
        assert_eq!(relative(now - TimeDelta::days(3), now), "3d ago");
        assert_eq!(utc(at(9, 0, 0)), "2026-03-02T09:00:00Z");
    }

    #[test]
    fn the_last_column_names_the_outcome_its_reason_and_when() {
        let now = at(12, 0, 0);
        let rows = sample(now);
        let lasts: Vec<String> = rows.iter().map(|t| last(t, now)).collect();
        assert_eq!(
            lasts,
            [
                "-",
                "rejected (bad_signature) 1h ago",
                "fired 2m ago",
                "skipped (overlap) 10s ago",
            ]
        );
        assert_eq!(reason_name(TriggerReason::OutsideWindow), "outside_window");
        assert_eq!(reason_name(TriggerReason::CatchUpNone), "catch_up_none");
    }

    #[test]
    fn the_rule_of_a_webhook_is_the_request_its_sender_makes() {
        let now = at(12, 0, 0);
        let rows = sample(now);
        assert_eq!(
            rule(&rows[1], "http://127.0.0.1:8787/"),
            "POST http://127.0.0.1:8787/v1/hooks/shop/gh-issues"
        );
        let mut no_path = rows[1].clone();
        no_path.hook_path = None;
        assert_eq!(
            rule(&no_path, "https://agents.example.com"),
            "POST https://agents.example.com/v1/hooks/shop/gh-issues"
        );
        assert_eq!(rule(&rows[2], ""), "cron 0 9 * * 1-5 (Europe/Lisbon)");
        assert_eq!(rule(&rows[3], ""), "every 10m");
        assert_eq!(next_fire(&rows[1], now), "-");
        assert_eq!(
            next_fire(&rows[3], now),
            "2026-03-02T11:59:30Z (due 30s ago); 2026-03-02T11:50:00Z buffered"
        );
        let mut done = rows[2].clone();
        done.next_fire_at = None;
        assert_eq!(next_fire(&done, now), "never");
    }

    #[test]
    fn the_table_shows_each_trigger_on_one_line() {
        let now = at(12, 0, 0);
        let text = table(&sample(now), "http://127.0.0.1:8787", now);
        insta::assert_snapshot!(text);
    }

    #[test]
    fn the_history_shows_what_each_entry_was_for_and_where_it_went() {
        let mut scheduled = event(
            1,
            at(9, 0, 1),
            TriggerSource::Schedule,
            TriggerOutcome::Fired,
            None,
        );
        scheduled.scheduled_at = Some(at(9, 0, 0));
        let mut missed = event(
            2,
            at(10, 0, 0),
            TriggerSource::Schedule,
            TriggerOutcome::Skipped,
            Some(TriggerReason::OutsideWindow),
        );
        missed.scheduled_at = Some(at(8, 0, 0));
        missed.detail = Some("missed 3 fires\nwhile the API was down".into());
        let mut rejected = event(
            3,
            at(10, 5, 0),
            TriggerSource::Webhook,
            TriggerOutcome::Rejected,
            Some(TriggerReason::BadSignature),
        );
        rejected.delivery_id = Some("72d3162e-cc78-11e3-81ab-4c9367dc0958".into());
        let manual = event(
            4,
            at(11, 0, 0),
            TriggerSource::Manual,
            TriggerOutcome::Fired,
            None,
        );
        let text = history(&[scheduled, missed, rejected, manual]);
        insta::assert_snapshot!(text);
    }

    #[test]
    fn a_manual_fire_says_the_message_waits_in_the_inbox() {
        let e = event(
            4,
            at(11, 0, 0),
            TriggerSource::Manual,
            TriggerOutcome::Fired,
            None,
        );
        assert_eq!(
            fired("nightly", &e),
            format!(
                "fired trigger nightly → session trigger:nightly (thread {}), message #4 queued \
                 in its inbox until a replica takes it",
                thread()
            )
        );
        let mut skipped = event(
            5,
            at(11, 0, 0),
            TriggerSource::Manual,
            TriggerOutcome::Skipped,
            Some(TriggerReason::Overlap),
        );
        skipped.detail = Some("the previous fire's turn still runs".into());
        assert_eq!(
            fired("nightly", &skipped),
            "trigger nightly was not fired: skipped (overlap): the previous fire's turn still runs"
        );
    }
}
