//! The pure tick plan: catch-up after an outage, the overlap rules and a held-back fire, DST in a
//! real zone — all without I/O.

use chrono::{DateTime, TimeZone, Utc};
use ninetrix_proto::api::{TriggerOutcome, TriggerReason};
use ninetrix_proto::triggers::ScheduleTrigger;
use ninetrix_proto::triggers::schedule::{CatchUp, Overlap};

use super::*;

fn at(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(y, mo, d, h, mi, s).unwrap()
}

fn every(secs: u64, overlap: Overlap, catch_up: CatchUp) -> ScheduleTrigger {
    ScheduleTrigger {
        cron: None,
        every_secs: Some(secs),
        timezone: "UTC".into(),
        message: "tick".into(),
        overlap,
        catch_up,
        catch_up_window_secs: 3600,
    }
}

fn cron(expr: &str, tz: &str) -> ScheduleTrigger {
    ScheduleTrigger {
        cron: Some(expr.into()),
        every_secs: None,
        timezone: tz.into(),
        message: "tick".into(),
        overlap: Overlap::Skip,
        catch_up: CatchUp::Last,
        catch_up_window_secs: 3600,
    }
}

/// Plans one tick of `s` with the given stored state.
fn tick(
    s: &ScheduleTrigger,
    planned_to: DateTime<Utc>,
    buffered_at: Option<DateTime<Utc>>,
    running: bool,
    now: DateTime<Utc>,
) -> TickPlan {
    let rule = s.spec().unwrap();
    let next = rule.next_after(planned_to);
    plan_tick(&TickInput {
        schedule: s,
        rule: &rule,
        planned_to,
        next_fire_at: next,
        buffered_at,
        previous_running: running,
        now,
    })
}

fn fires(plan: &TickPlan) -> Vec<(DateTime<Utc>, TriggerOutcome)> {
    plan.steps
        .iter()
        .filter_map(|s| match s {
            Step::Fire {
                scheduled, outcome, ..
            } => Some((*scheduled, *outcome)),
            Step::Note { .. } => None,
        })
        .collect()
}

fn notes(plan: &TickPlan) -> Vec<(Option<DateTime<Utc>>, TriggerOutcome, Option<TriggerReason>)> {
    plan.steps
        .iter()
        .filter_map(|s| match s {
            Step::Note {
                scheduled,
                outcome,
                reason,
                ..
            } => Some((*scheduled, *outcome, *reason)),
            Step::Fire { .. } => None,
        })
        .collect()
}

#[test]
fn an_on_time_fire_fires_once_and_plans_the_next() {
    let s = every(600, Overlap::Skip, CatchUp::Last);
    let plan = tick(
        &s,
        at(2026, 1, 1, 9, 59, 0),
        None,
        false,
        at(2026, 1, 1, 10, 0, 1),
    );
    assert_eq!(
        fires(&plan),
        [(at(2026, 1, 1, 10, 0, 0), TriggerOutcome::Fired)]
    );
    assert_eq!(plan.next_fire_at, Some(at(2026, 1, 1, 10, 10, 0)));
    assert_eq!(plan.planned_to, at(2026, 1, 1, 10, 0, 1));
    // The next tick, at the same instant, finds nothing due.
    let again = tick(&s, plan.planned_to, None, true, at(2026, 1, 1, 10, 0, 1));
    assert!(again.steps.is_empty());
}

#[test]
fn after_an_outage_the_last_missed_fire_is_caught_up_once_and_the_rest_skipped() {
    // Down from 10:01 to 10:35: the fires at 10:10, 10:20 and 10:30 were missed.
    let s = every(600, Overlap::Skip, CatchUp::Last);
    let plan = tick(
        &s,
        at(2026, 1, 1, 10, 1, 0),
        None,
        false,
        at(2026, 1, 1, 10, 35, 0),
    );
    assert_eq!(
        fires(&plan),
        [(at(2026, 1, 1, 10, 30, 0), TriggerOutcome::CaughtUp)]
    );
    assert_eq!(
        notes(&plan),
        [
            (
                Some(at(2026, 1, 1, 10, 10, 0)),
                TriggerOutcome::Skipped,
                Some(TriggerReason::OnlyLast)
            ),
            (
                Some(at(2026, 1, 1, 10, 20, 0)),
                TriggerOutcome::Skipped,
                Some(TriggerReason::OnlyLast)
            ),
        ]
    );
    assert_eq!(plan.next_fire_at, Some(at(2026, 1, 1, 10, 40, 0)));
    let none = every(600, Overlap::Skip, CatchUp::None);
    let plan = tick(
        &none,
        at(2026, 1, 1, 10, 1, 0),
        None,
        false,
        at(2026, 1, 1, 10, 35, 0),
    );
    assert!(fires(&plan).is_empty());
    assert_eq!(notes(&plan).len(), 3);
}

#[test]
fn catch_up_all_goes_through_the_overlap_rule() {
    let allow = every(600, Overlap::Allow, CatchUp::All);
    let plan = tick(
        &allow,
        at(2026, 1, 1, 10, 1, 0),
        None,
        false,
        at(2026, 1, 1, 10, 35, 0),
    );
    assert_eq!(fires(&plan).len(), 3);
    assert!(
        fires(&plan)
            .iter()
            .all(|(_, o)| *o == TriggerOutcome::CaughtUp)
    );
    // With skip, the first missed fire runs and the two behind it would overlap it.
    let skip = every(600, Overlap::Skip, CatchUp::All);
    let plan = tick(
        &skip,
        at(2026, 1, 1, 10, 1, 0),
        None,
        false,
        at(2026, 1, 1, 10, 35, 0),
    );
    assert_eq!(
        fires(&plan),
        [(at(2026, 1, 1, 10, 10, 0), TriggerOutcome::CaughtUp)]
    );
    assert_eq!(
        notes(&plan)
            .iter()
            .filter(|n| n.2 == Some(TriggerReason::Overlap))
            .count(),
        2
    );
}

#[test]
fn skip_drops_a_fire_while_the_previous_turn_runs() {
    let s = every(60, Overlap::Skip, CatchUp::Last);
    let plan = tick(
        &s,
        at(2026, 1, 1, 10, 0, 30),
        None,
        true,
        at(2026, 1, 1, 10, 1, 0),
    );
    assert!(fires(&plan).is_empty());
    assert_eq!(
        notes(&plan),
        [(
            Some(at(2026, 1, 1, 10, 1, 0)),
            TriggerOutcome::Skipped,
            Some(TriggerReason::Overlap)
        )]
    );
    assert_eq!(plan.buffered_at, None);
    assert_eq!(plan.next_fire_at, Some(at(2026, 1, 1, 10, 2, 0)));
}

#[test]
fn buffer_one_holds_one_fire_and_runs_it_when_the_turn_ends() {
    let s = every(60, Overlap::BufferOne, CatchUp::Last);
    let first = tick(
        &s,
        at(2026, 1, 1, 10, 0, 30),
        None,
        true,
        at(2026, 1, 1, 10, 1, 0),
    );
    assert_eq!(first.buffered_at, Some(at(2026, 1, 1, 10, 1, 0)));
    assert_eq!(notes(&first)[0].1, TriggerOutcome::Buffered);
    // Still running at the next fire: that one is skipped, the held one stays held.
    let second = tick(
        &s,
        first.planned_to,
        first.buffered_at,
        true,
        at(2026, 1, 1, 10, 2, 0),
    );
    assert_eq!(second.buffered_at, Some(at(2026, 1, 1, 10, 1, 0)));
    assert_eq!(notes(&second)[0].2, Some(TriggerReason::Overlap));
    // The turn ended between fires: the held fire runs, under its own scheduled time.
    let rule = s.spec().unwrap();
    let third = plan_tick(&TickInput {
        schedule: &s,
        rule: &rule,
        planned_to: second.planned_to,
        next_fire_at: second.next_fire_at,
        buffered_at: second.buffered_at,
        previous_running: false,
        now: at(2026, 1, 1, 10, 2, 20),
    });
    assert_eq!(
        fires(&third),
        [(at(2026, 1, 1, 10, 1, 0), TriggerOutcome::Fired)]
    );
    assert_eq!(third.buffered_at, None);
    assert_eq!(
        third.next_fire_at, second.next_fire_at,
        "not due: the plan is kept"
    );
}

/// The fires of `s` when ticked every 10 minutes from `from` to `to`, each tick planning from
/// where the last one left off.
fn fires_ticking(
    s: &ScheduleTrigger,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Vec<(DateTime<Utc>, TriggerOutcome)> {
    let rule = s.spec().unwrap();
    let (mut planned, mut now, mut fired) = (from, from, Vec::new());
    while now < to {
        now += chrono::TimeDelta::minutes(10);
        let plan = plan_tick(&TickInput {
            schedule: s,
            rule: &rule,
            planned_to: planned,
            next_fire_at: rule.next_after(planned),
            buffered_at: None,
            previous_running: false,
            now,
        });
        fired.extend(fires(&plan));
        planned = plan.planned_to;
    }
    fired
}

#[test]
fn a_skipped_local_time_fires_once_after_the_jump_and_a_repeated_one_once() {
    // New York springs forward on 2026-03-08: 02:30 does not exist; it fires at 03:00 EDT
    // (07:00Z), once.
    let spring = cron("30 2 * * *", "America/New_York");
    assert_eq!(
        fires_ticking(&spring, at(2026, 3, 7, 12, 0, 0), at(2026, 3, 8, 12, 0, 0)),
        [(at(2026, 3, 8, 7, 0, 0), TriggerOutcome::Fired)]
    );
    // It falls back on 2026-11-01: 01:30 happens twice; it fires at the first pass only
    // (05:30Z, EDT).
    let fall = cron("30 1 * * *", "America/New_York");
    assert_eq!(
        fires_ticking(&fall, at(2026, 10, 31, 12, 0, 0), at(2026, 11, 1, 12, 0, 0)),
        [(at(2026, 11, 1, 5, 30, 0), TriggerOutcome::Fired)]
    );
}

#[test]
fn a_fire_runs_until_its_message_is_taken_and_its_turn_ends() {
    assert!(fire_running(5, 4, "idle"), "not taken yet");
    assert!(fire_running(5, 5, "in_turn"));
    assert!(fire_running(5, 5, "waiting"));
    assert!(!fire_running(5, 5, "idle"));
    assert!(!fire_running(5, 5, "failed"));
    assert!(!fire_running(5, 6, "in_turn"), "a later message's turn");
}

#[test]
fn digests_change_with_the_secret_and_new_sessions_are_named_per_instance() {
    assert_ne!(digest("{}", Some("a")), digest("{}", Some("b")));
    assert_ne!(digest("{}", None), digest("{}", Some("")));
    assert_eq!(digest("{}", Some("a")), digest("{}", Some("a")));
    let spec: TriggerSpec = serde_json::from_value(serde_json::json!({
        "name": "n", "agent": "a", "session": "new",
        "kind": {"type": "schedule", "every_secs": 60, "timezone": "UTC", "message": "m",
                 "overlap": "skip", "catch_up": "last", "catch_up_window_secs": 3600}
    }))
    .unwrap();
    assert_eq!(
        fire_session(&spec, None, &instant_text(at(2026, 1, 1, 0, 0, 0))),
        "trigger:n:2026-01-01T00:00:00Z"
    );
    assert_eq!(fire_session(&spec, Some("chat-7"), "x"), "chat-7");
}
