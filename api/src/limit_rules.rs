//! The pure rules of pool-wide model limits and budgets (issue 38), tested without I/O: what a
//! lease request must satisfy; whether a limiter grants one more call now or when it may
//! ([`decide`]: the provider's back-off, `max_in_flight`, `requests_per_minute` and
//! `tokens_per_minute` over a sliding 60-second window); whether a budget has room
//! ([`over_budget`]); money as whole nano-dollars (the store keeps BIGINTs only, and sums of them
//! are exact); and the calendar day of a time zone as a range of 15-minute UTC buckets
//! ([`day_of`], DST included). The store runs these inside the lease's transaction
//! (`store/ops/limits.rs`).

use chrono::{DateTime, Datelike, NaiveDate, NaiveTime, TimeDelta, TimeZone, Utc};
use chrono_tz::Tz;
use ninetrix_proto::api::{
    BudgetPolicy, BudgetRaise, BudgetScope, BudgetSpent, LeaseRelease, LeaseRequest,
    MAX_LIMITER_LEN, ModelLimits, SlotWait,
};

/// The window `requests_per_minute` and `tokens_per_minute` count over, in milliseconds: a
/// minute and one second. A call reaches its provider a little after its grant (the answer's way
/// back, the runner, the connection), and not always equally late; counting grants over 61 s
/// keeps the provider's own 60 s under the limit through that jitter (seen: one 429 in 750
/// calls at 600 a minute with a window of exactly 60 s), for about 1.6 % of throughput.
pub(crate) const WINDOW_MS: i64 = 61_000;

/// The width of a spend bucket: every UTC offset in use is a multiple of 15 minutes, so a
/// calendar day anywhere is a whole number of buckets (96, or 92 and 100 across a DST change).
pub(crate) const BUCKET_MS: i64 = 15 * 60_000;

/// Nano-dollars in a dollar.
const NANOS_PER_USD: f64 = 1e9;

/// The largest budget a request may state, in US dollars.
pub(crate) const MAX_BUDGET_USD: f64 = 1e9;

/// The largest cost one release or one raise may carry, in US dollars: a thousand of them in one
/// 15-minute bucket still sum far below what a BIGINT holds.
pub(crate) const MAX_AMOUNT_USD: f64 = 1e6;

/// The most nano-dollars one spend bucket keeps (more saturates there): about $1.1 million in 15
/// minutes for one agent, so a pool's day — 100 buckets of each of its agents — sums far below
/// what a BIGINT holds.
pub(crate) const MAX_BUCKET_NANOS: i64 = 1 << 50;

/// The most nano-dollars a thread's own total keeps.
pub(crate) const MAX_THREAD_NANOS: i64 = 1 << 62;

/// The longest a provider's `retry_after_ms` may be (an hour).
const MAX_RETRY_AFTER_MS: u64 = 3_600_000;

/// A limiter as the store keys it: the thread's pool label (`""` for a thread without one) and
/// the limiter's name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LimiterKey {
    /// The pool.
    pub pool: String,
    /// The limiter's name (`<provider>@<host>#<key digest>`).
    pub limiter: String,
}

/// One call started in the window: when, and its tokens (what it used once it ended, its
/// estimate while it runs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Grant {
    /// When it was granted, Unix ms.
    pub(crate) at: i64,
    /// Its tokens.
    pub(crate) tokens: u64,
}

/// A limiter at one moment, as the lease transaction read it.
#[derive(Clone, Debug)]
pub(crate) struct LimiterNow {
    /// Now, Unix ms.
    pub(crate) now: i64,
    /// The numbers (the latest request's).
    pub(crate) limits: ModelLimits,
    /// Until when the provider asked every call to wait (a 429), Unix ms (0: never).
    pub(crate) backoff_until: i64,
    /// Live leases: neither released nor expired.
    pub(crate) in_flight: u32,
    /// When the first live lease expires, if any.
    pub(crate) first_expiry: Option<i64>,
    /// The calls started in the last 60 s (granted after `now - WINDOW_MS`), oldest first.
    pub(crate) window: Vec<Grant>,
    /// This call's estimated tokens.
    pub(crate) estimate: u64,
}

/// Whether a call may start now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// It may.
    Grant,
    /// It may not: why, and the moment (Unix ms, after now) the reason may be gone by itself —
    /// a back-off's end, the first lease's expiry, the window sliding past a grant.
    Wait {
        /// Why.
        wait: SlotWait,
        /// When to look again at the latest.
        until: i64,
    },
}

/// Whether one more call of the limiter may start now. The provider's back-off first (every
/// call waits it out), then `max_in_flight` (live leases), then `requests_per_minute` (calls
/// started in any 60 s) and `tokens_per_minute` (their tokens: actual for ended calls, estimated
/// for running ones). A call whose estimate alone exceeds `tokens_per_minute` waits for an empty
/// window and then goes alone — it never waits forever.
pub(crate) fn decide(l: &LimiterNow) -> Decision {
    if l.backoff_until > l.now {
        return Decision::Wait {
            wait: SlotWait::RateLimited {
                until: time(l.backoff_until),
            },
            until: l.backoff_until,
        };
    }
    if let Some(max) = l.limits.max_in_flight
        && l.in_flight >= max
    {
        return Decision::Wait {
            wait: SlotWait::InFlight {
                in_flight: l.in_flight,
                max_in_flight: max,
            },
            // A live lease expires by then unless renewed; a release wakes the waiter sooner.
            until: l.first_expiry.unwrap_or(l.now + WINDOW_MS).max(l.now + 1),
        };
    }
    let window: Vec<Grant> = l
        .window
        .iter()
        .copied()
        .filter(|g| g.at > l.now - WINDOW_MS)
        .collect();
    if let Some(rpm) = l.limits.requests_per_minute {
        let rpm = rpm as usize;
        if window.len() >= rpm {
            // The oldest `len - rpm + 1` calls must leave the window: the last of them leaves
            // at its start plus the window.
            let leaving = window[window.len() - rpm];
            let until = leaving.at + WINDOW_MS;
            return Decision::Wait {
                wait: SlotWait::RequestsPerMinute {
                    requests_per_minute: rpm as u32,
                    until: time(until),
                },
                until,
            };
        }
    }
    if let Some(tpm) = l.limits.tokens_per_minute
        && let Some(until) = tokens_free_at(&window, tpm, l.estimate)
    {
        return Decision::Wait {
            wait: SlotWait::TokensPerMinute {
                tokens_per_minute: tpm,
                until: time(until),
            },
            until,
        };
    }
    Decision::Grant
}

/// The calls of a limiter's window, summed: how many, and their tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct WindowSum {
    /// Calls started in the last 60 s.
    pub(crate) calls: u64,
    /// Their tokens (used once ended, estimated while running).
    pub(crate) tokens: u64,
}

/// Whether one more call of `estimate` tokens fits the window's requests and tokens per minute
/// — what [`decide`] finds of the window, from its sums alone, so the store reads the window's
/// rows only when it is full (to say until when).
pub(crate) fn window_fits(limits: &ModelLimits, sum: WindowSum, estimate: u64) -> bool {
    let requests = limits
        .requests_per_minute
        .is_none_or(|rpm| sum.calls < u64::from(rpm));
    let tokens = limits.tokens_per_minute.is_none_or(|tpm| {
        if estimate > tpm {
            sum.calls == 0
        } else {
            sum.tokens.saturating_add(estimate) <= tpm
        }
    });
    requests && tokens
}

/// When enough of the window's tokens leave it for `estimate` to fit under `tpm`, or `None` when
/// it fits now. An estimate larger than `tpm` fits only an empty window.
fn tokens_free_at(window: &[Grant], tpm: u64, estimate: u64) -> Option<i64> {
    let mut used: u64 = window.iter().map(|g| g.tokens).fold(0, u64::saturating_add);
    if estimate > tpm {
        return window.last().map(|g| g.at + WINDOW_MS);
    }
    if used.saturating_add(estimate) <= tpm {
        return None;
    }
    for g in window {
        used = used.saturating_sub(g.tokens);
        if used.saturating_add(estimate) <= tpm {
            return Some(g.at + WINDOW_MS);
        }
    }
    // Unreachable with an estimate within the limit: an empty window fits it.
    window.last().map(|g| g.at + WINDOW_MS)
}

/// Whether one budget has room: `None`, or the refusal naming it. `limit_usd` is the
/// agentfile's amount, `raised` what approved raises add, both compared in nano-dollars: a scope
/// that has spent its allowance or more has no room.
pub(crate) fn over_budget(
    scope: BudgetScope,
    limit_usd: f64,
    spent: i64,
    raised: i64,
) -> Option<BudgetSpent> {
    let allowed = nanos(limit_usd).saturating_add(raised);
    (spent >= allowed).then(|| BudgetSpent {
        scope,
        limit_usd: usd(allowed),
        spent_usd: usd(spent),
        raised_usd: usd(raised),
    })
}

/// Dollars as whole nano-dollars (rounded; the callers checked the amount).
pub(crate) fn nanos(usd: f64) -> i64 {
    (usd * NANOS_PER_USD).round() as i64
}

/// Nano-dollars as dollars.
pub(crate) fn usd(nanos: i64) -> f64 {
    nanos as f64 / NANOS_PER_USD
}

/// Checks an amount of money a request carries: finite, at least 0 (more than 0 when
/// `positive`), at most `max`. The message names `field`.
pub(crate) fn check_usd(field: &str, value: f64, positive: bool, max: f64) -> Result<(), String> {
    if !value.is_finite() || value < 0.0 || (positive && value <= 0.0) || value > max {
        let least = if positive { "more than 0" } else { "0 or more" };
        return Err(format!(
            "`{field}` must be {least} and at most {max} US dollars, not {value}"
        ));
    }
    Ok(())
}

/// Checks a lease request before anything is read: the limiter's and provider's names, the
/// limits' ranges (the schema's), the budgets' amounts and their time zone. The message names the
/// field and says what it takes.
pub(crate) fn check_request(req: &LeaseRequest) -> Result<Option<Tz>, String> {
    check_name("limiter", &req.limiter, MAX_LIMITER_LEN)?;
    check_name("provider", &req.provider, 64)?;
    let ranges: [(&str, Option<u64>, u64); 3] = [
        (
            "limits.max_in_flight",
            req.limits.max_in_flight.map(u64::from),
            100_000,
        ),
        (
            "limits.requests_per_minute",
            req.limits.requests_per_minute.map(u64::from),
            10_000_000,
        ),
        (
            "limits.tokens_per_minute",
            req.limits.tokens_per_minute,
            10_000_000_000,
        ),
    ];
    for (field, value, most) in ranges {
        if let Some(v) = value
            && !(1..=most).contains(&v)
        {
            return Err(format!("`{field}` must be 1 to {most}, not {v}"));
        }
    }
    if req.wait_ms > ninetrix_proto::api::MAX_LEASE_WAIT_MS {
        return Err(format!(
            "`wait_ms` must be 0 to {}, not {}",
            ninetrix_proto::api::MAX_LEASE_WAIT_MS,
            req.wait_ms
        ));
    }
    let Some(budgets) = &req.budgets else {
        return Ok(None);
    };
    check_policy(budgets).map(Some)
}

/// Checks a budget policy: each amount 0 to [`MAX_BUDGET_USD`], a time zone the IANA database
/// names. Returns the zone.
fn check_policy(p: &BudgetPolicy) -> Result<Tz, String> {
    for (field, value) in [
        ("budgets.per_session_usd", p.per_session_usd),
        ("budgets.per_day_usd", p.per_day_usd),
        ("budgets.pool_per_day_usd", p.pool_per_day_usd),
    ] {
        if let Some(v) = value {
            check_usd(field, v, false, MAX_BUDGET_USD)?;
        }
    }
    zone("budgets.timezone", &p.timezone)
}

/// Checks a release: its cost and its 429's back-off.
pub(crate) fn check_release(r: &LeaseRelease) -> Result<(), String> {
    check_usd("cost_usd", r.cost_usd, false, MAX_AMOUNT_USD)?;
    if let Some(limited) = &r.rate_limited
        && limited.retry_after_ms > MAX_RETRY_AFTER_MS
    {
        return Err(format!(
            "`rate_limited.retry_after_ms` must be 0 to {MAX_RETRY_AFTER_MS}, not {}",
            limited.retry_after_ms
        ));
    }
    Ok(())
}

/// Checks a budget approval's raise (`field` is where it sits in the request): an amount more
/// than 0 and at most [`MAX_AMOUNT_USD`], and for a day's budget a real `YYYY-MM-DD`.
pub(crate) fn check_raise(field: &str, raise: &BudgetRaise) -> Result<(), String> {
    check_usd(
        &format!("{field}.amount_usd"),
        raise.amount_usd,
        true,
        MAX_AMOUNT_USD,
    )?;
    match &raise.scope {
        BudgetScope::Session => Ok(()),
        BudgetScope::AgentDay { day } | BudgetScope::PoolDay { day } => {
            check_day(&format!("{field}.day"), day)
        }
    }
}

/// Checks a calendar day written `YYYY-MM-DD` (exactly: `2026-1-5` is refused).
pub(crate) fn check_day(field: &str, day: &str) -> Result<(), String> {
    match NaiveDate::parse_from_str(day, "%Y-%m-%d") {
        Ok(date) if date.format("%Y-%m-%d").to_string() == day => Ok(()),
        _ => Err(format!(
            "`{field}` must be a calendar day written YYYY-MM-DD, such as 2026-11-28, not {:?}",
            crate::names::shown(day)
        )),
    }
}

/// The IANA time zone `name` (`UTC`, `Europe/Paris`), or a message naming `field` and the value.
pub(crate) fn zone(field: &str, name: &str) -> Result<Tz, String> {
    name.parse::<Tz>().map_err(|_| {
        format!(
            "`{field}` {:?} is not a time zone of the IANA database; use a name such as UTC, Europe/Paris or America/New_York",
            crate::names::shown(name)
        )
    })
}

/// 1 to `max` characters, none of them a control, bidirectional-control or line-separator
/// character (what the schema's pattern says).
fn check_name(field: &str, value: &str, max: usize) -> Result<(), String> {
    let n = value.chars().count();
    if n == 0 || n > max {
        return Err(format!(
            "`{field}` must have 1 to {max} characters, not {n}"
        ));
    }
    if let Some(c) = ninetrix_proto::text::first_unsafe(value) {
        return Err(format!(
            "`{field}` holds the control character U+{:04X}; a {field} is printable text",
            u32::from(c)
        ));
    }
    Ok(())
}

/// One calendar day of a time zone: its name and its UTC range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Day {
    /// `YYYY-MM-DD`.
    pub(crate) day: String,
    /// Its first instant, Unix ms.
    pub(crate) start: i64,
    /// The next day's first instant, Unix ms.
    pub(crate) end: i64,
}

/// The calendar day of `zone` that holds `now` (Unix ms), as a UTC range: from the day's first
/// instant (midnight, or the first time after it when a DST change skips midnight) to the next
/// day's.
pub(crate) fn day_of(zone: Tz, now: i64) -> Day {
    let date = time(now).with_timezone(&zone).date_naive();
    let next = date.succ_opt().unwrap_or(date);
    Day {
        day: format!("{:04}-{:02}-{:02}", date.year(), date.month(), date.day()),
        start: day_start(zone, date),
        end: day_start(zone, next),
    }
}

/// The first instant of `date` in `zone`: its midnight, the earlier one if midnight happens
/// twice, or the first minute after a gap that skips it.
fn day_start(zone: Tz, date: NaiveDate) -> i64 {
    let midnight = date.and_time(NaiveTime::MIN);
    // A DST gap is at most a few hours; a minute at a time finds its end.
    for minute in 0..24 * 60 {
        let local = midnight + TimeDelta::minutes(minute);
        if let Some(at) = zone.from_local_datetime(&local).earliest() {
            return at.timestamp_millis();
        }
    }
    Utc.from_utc_datetime(&midnight).timestamp_millis()
}

/// The 15-minute UTC bucket that holds `at` (Unix ms): its first instant.
pub(crate) fn bucket_of(at: i64) -> i64 {
    at.div_euclid(BUCKET_MS) * BUCKET_MS
}

/// Unix ms as a time.
fn time(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms).single().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000_000;

    fn limits(max_in_flight: Option<u32>, rpm: Option<u32>, tpm: Option<u64>) -> ModelLimits {
        ModelLimits {
            max_in_flight,
            requests_per_minute: rpm,
            tokens_per_minute: tpm,
        }
    }

    fn at(limits: &ModelLimits, window: &[Grant]) -> LimiterNow {
        LimiterNow {
            now: NOW,
            limits: limits.clone(),
            backoff_until: 0,
            in_flight: 0,
            first_expiry: None,
            window: window.to_vec(),
            estimate: 0,
        }
    }

    fn grants(ages_ms: &[(i64, u64)]) -> Vec<Grant> {
        ages_ms
            .iter()
            .map(|&(age, tokens)| Grant {
                at: NOW - age,
                tokens,
            })
            .collect()
    }

    #[test]
    fn no_limits_grant_every_call() {
        assert_eq!(decide(&at(&ModelLimits::default(), &[])), Decision::Grant);
    }

    #[test]
    fn a_providers_back_off_holds_every_call_until_it_ends() {
        let mut l = at(&ModelLimits::default(), &[]);
        l.backoff_until = NOW + 3_000;
        assert_eq!(
            decide(&l),
            Decision::Wait {
                wait: SlotWait::RateLimited {
                    until: time(NOW + 3_000)
                },
                until: NOW + 3_000
            }
        );
        l.backoff_until = NOW;
        assert_eq!(decide(&l), Decision::Grant, "over at its end");
    }

    #[test]
    fn every_slot_taken_waits_for_the_first_expiry() {
        let lim = limits(Some(3), None, None);
        let mut l = at(&lim, &[]);
        l.in_flight = 2;
        assert_eq!(decide(&l), Decision::Grant);
        l.in_flight = 3;
        l.first_expiry = Some(NOW + 40_000);
        assert_eq!(
            decide(&l),
            Decision::Wait {
                wait: SlotWait::InFlight {
                    in_flight: 3,
                    max_in_flight: 3
                },
                until: NOW + 40_000
            }
        );
        // A limit lowered under what is in flight waits too.
        l.in_flight = 5;
        assert!(matches!(decide(&l), Decision::Wait { .. }));
    }

    #[test]
    fn the_sixth_call_of_five_a_minute_waits_until_the_first_leaves_the_window() {
        let lim = limits(None, Some(5), None);
        let window = grants(&[(50_000, 0), (40_000, 0), (30_000, 0), (20_000, 0)]);
        assert_eq!(decide(&at(&lim, &window)), Decision::Grant, "the fifth");
        let window = grants(&[(50_000, 0), (40_000, 0), (30_000, 0), (20_000, 0), (1, 0)]);
        let until = NOW - 50_000 + WINDOW_MS;
        assert_eq!(
            decide(&at(&lim, &window)),
            Decision::Wait {
                wait: SlotWait::RequestsPerMinute {
                    requests_per_minute: 5,
                    until: time(until)
                },
                until
            }
        );
        // A grant exactly the window's width old has left it.
        let window = grants(&[
            (WINDOW_MS, 0),
            (40_000, 0),
            (30_000, 0),
            (20_000, 0),
            (1, 0),
        ]);
        assert_eq!(decide(&at(&lim, &window)), Decision::Grant);
    }

    #[test]
    fn a_limit_lowered_below_the_window_waits_for_enough_grants_to_leave() {
        let lim = limits(None, Some(2), None);
        let window = grants(&[(50_000, 0), (40_000, 0), (30_000, 0), (20_000, 0)]);
        // Four in the window, two allowed: three must leave, the third at 30 s ago + 60 s.
        let Decision::Wait { until, .. } = decide(&at(&lim, &window)) else {
            panic!("granted")
        };
        assert_eq!(until, NOW - 30_000 + WINDOW_MS);
    }

    #[test]
    fn tokens_per_minute_count_used_and_estimated_tokens_in_the_window() {
        let lim = limits(None, None, Some(1_000));
        let window = grants(&[(50_000, 400), (10_000, 300)]);
        let mut l = at(&lim, &window);
        l.estimate = 300;
        assert_eq!(decide(&l), Decision::Grant, "700 + 300 fits 1000");
        l.estimate = 301;
        let until = NOW - 50_000 + WINDOW_MS;
        assert_eq!(
            decide(&l),
            Decision::Wait {
                wait: SlotWait::TokensPerMinute {
                    tokens_per_minute: 1_000,
                    until: time(until)
                },
                until
            },
            "the 400 must leave first"
        );
        l.estimate = 800;
        assert_eq!(
            decide(&l).clone(),
            Decision::Wait {
                wait: SlotWait::TokensPerMinute {
                    tokens_per_minute: 1_000,
                    until: time(NOW - 10_000 + WINDOW_MS)
                },
                until: NOW - 10_000 + WINDOW_MS
            },
            "both must leave"
        );
    }

    #[test]
    fn an_estimate_above_the_whole_limit_waits_for_an_empty_window_then_goes_alone() {
        let lim = limits(None, None, Some(1_000));
        let window = grants(&[(50_000, 10), (5_000, 10)]);
        let mut l = at(&lim, &window);
        l.estimate = 5_000;
        assert_eq!(
            decide(&l),
            Decision::Wait {
                wait: SlotWait::TokensPerMinute {
                    tokens_per_minute: 1_000,
                    until: time(NOW - 5_000 + WINDOW_MS)
                },
                until: NOW - 5_000 + WINDOW_MS
            }
        );
        let empty = at(&lim, &[]);
        let l = LimiterNow {
            estimate: 5_000,
            ..empty
        };
        assert_eq!(decide(&l), Decision::Grant, "alone in an empty window");
        // And while it is in the window, nothing else fits.
        let after = grants(&[(1_000, 5_000)]);
        let mut l = at(&lim, &after);
        l.estimate = 1;
        assert!(matches!(
            decide(&l),
            Decision::Wait {
                wait: SlotWait::TokensPerMinute { .. },
                ..
            }
        ));
    }

    #[test]
    fn the_back_off_comes_first_then_slots_then_the_window() {
        let lim = limits(Some(1), Some(1), Some(1));
        let window = grants(&[(1_000, 5)]);
        let mut l = at(&lim, &window);
        l.in_flight = 1;
        l.first_expiry = Some(NOW + 10);
        l.backoff_until = NOW + 5;
        assert!(matches!(
            decide(&l),
            Decision::Wait {
                wait: SlotWait::RateLimited { .. },
                ..
            }
        ));
        l.backoff_until = 0;
        assert!(matches!(
            decide(&l),
            Decision::Wait {
                wait: SlotWait::InFlight { .. },
                ..
            }
        ));
        l.in_flight = 0;
        assert!(matches!(
            decide(&l),
            Decision::Wait {
                wait: SlotWait::RequestsPerMinute { .. },
                ..
            }
        ));
    }

    proptest::proptest! {
        /// The sums say "fits" exactly when the rows would not make the call wait for the window.
        #[test]
        fn the_windows_sums_decide_as_its_rows_do(
            ages in proptest::collection::vec((1i64..60_000, 0u64..400), 0..12),
            rpm in proptest::option::of(1u32..12),
            tpm in proptest::option::of(1u64..3_000),
            estimate in 0u64..4_000,
        ) {
            // Ages within the window (a grant 60 s old has left it).
            let mut window = grants(&ages);
            window.sort_by_key(|g| g.at);
            let lim = limits(None, rpm, tpm);
            let sum = WindowSum {
                calls: window.len() as u64,
                tokens: window.iter().map(|g| g.tokens).sum(),
            };
            let mut l = at(&lim, &window);
            l.estimate = estimate;
            proptest::prop_assert_eq!(window_fits(&lim, sum, estimate), decide(&l) == Decision::Grant);
        }
    }

    #[test]
    fn a_budget_with_its_allowance_spent_has_no_room_and_raises_add_to_it() {
        assert_eq!(over_budget(BudgetScope::Session, 1.0, nanos(0.99), 0), None);
        assert_eq!(
            over_budget(BudgetScope::Session, 1.0, nanos(1.0), 0),
            Some(BudgetSpent {
                scope: BudgetScope::Session,
                limit_usd: 1.0,
                spent_usd: 1.0,
                raised_usd: 0.0
            })
        );
        assert_eq!(
            over_budget(BudgetScope::Session, 1.0, nanos(1.5), nanos(1.0)),
            None
        );
        let spent = over_budget(
            BudgetScope::AgentDay {
                day: "2026-11-28".into(),
            },
            1.0,
            nanos(2.5),
            nanos(1.5),
        )
        .unwrap();
        assert_eq!(
            (spent.limit_usd, spent.spent_usd, spent.raised_usd),
            (2.5, 2.5, 1.5)
        );
        assert!(
            over_budget(BudgetScope::Session, 0.0, 0, 0).is_some(),
            "a zero budget allows nothing"
        );
    }

    #[test]
    fn money_is_whole_nano_dollars() {
        assert_eq!(nanos(5.0), 5_000_000_000);
        assert_eq!(nanos(0.000_000_000_4), 0);
        assert_eq!(usd(nanos(0.1)), 0.1);
        assert!(
            check_usd("cost_usd", -0.01, false, 10.0)
                .unwrap_err()
                .contains("cost_usd")
        );
        assert!(check_usd("cost_usd", f64::NAN, false, 10.0).is_err());
        assert!(check_usd("cost_usd", f64::INFINITY, false, 10.0).is_err());
        assert!(
            check_usd("a", 0.0, true, 10.0)
                .unwrap_err()
                .contains("more than 0")
        );
        assert!(check_usd("a", 11.0, false, 10.0).is_err());
        assert!(check_usd("a", 0.0, false, 10.0).is_ok());
    }

    fn request() -> LeaseRequest {
        LeaseRequest {
            epoch: 1,
            limiter: "openai@api.openai.com#0123456789ab".into(),
            provider: "openai".into(),
            limits: ModelLimits::default(),
            budgets: None,
            estimated_tokens: 0,
            wait_ms: 0,
        }
    }

    #[test]
    fn a_request_names_the_field_it_gets_wrong() {
        assert_eq!(check_request(&request()), Ok(None));
        type Change = Box<dyn Fn(&mut LeaseRequest)>;
        let cases: Vec<(Change, &str)> = vec![
            (Box::new(|r| r.limiter.clear()), "`limiter`"),
            (Box::new(|r| r.limiter = "x".repeat(201)), "`limiter`"),
            (Box::new(|r| r.limiter = "a\u{7}b".into()), "U+0007"),
            (Box::new(|r| r.provider = "a\nb".into()), "`provider`"),
            (
                Box::new(|r| r.limits.max_in_flight = Some(0)),
                "`limits.max_in_flight`",
            ),
            (
                Box::new(|r| r.limits.tokens_per_minute = Some(10_000_000_001)),
                "`limits.tokens_per_minute`",
            ),
            (Box::new(|r| r.wait_ms = 30_001), "`wait_ms`"),
            (
                Box::new(|r| {
                    r.budgets = Some(BudgetPolicy {
                        per_session_usd: Some(-1.0),
                        per_day_usd: None,
                        pool_per_day_usd: None,
                        timezone: "UTC".into(),
                    })
                }),
                "`budgets.per_session_usd`",
            ),
            (
                Box::new(|r| {
                    r.budgets = Some(BudgetPolicy {
                        per_session_usd: None,
                        per_day_usd: Some(1.0),
                        pool_per_day_usd: None,
                        timezone: "Mars/Olympus".into(),
                    })
                }),
                "\"Mars/Olympus\" is not a time zone",
            ),
        ];
        for (change, named) in cases {
            let mut r = request();
            change(&mut r);
            let message = check_request(&r).unwrap_err();
            assert!(message.contains(named), "{message}");
        }
        let mut r = request();
        r.budgets = Some(BudgetPolicy {
            per_session_usd: Some(1.0),
            per_day_usd: None,
            pool_per_day_usd: None,
            timezone: "Europe/Paris".into(),
        });
        assert_eq!(check_request(&r), Ok(Some(chrono_tz::Europe::Paris)));
    }

    #[test]
    fn a_raise_needs_a_positive_amount_and_a_real_day() {
        let raise = |scope, amount_usd| BudgetRaise { scope, amount_usd };
        assert!(check_raise("raise", &raise(BudgetScope::Session, 5.0)).is_ok());
        let day = |d: &str| BudgetScope::AgentDay { day: d.into() };
        assert!(check_raise("raise", &raise(day("2026-11-28"), 5.0)).is_ok());
        for (r, named) in [
            (raise(BudgetScope::Session, 0.0), "raise.amount_usd"),
            (raise(BudgetScope::Session, f64::NAN), "raise.amount_usd"),
            (raise(day("2026-11-31"), 1.0), "raise.day"),
            (raise(day("2026-1-5"), 1.0), "raise.day"),
            (
                raise(
                    BudgetScope::PoolDay {
                        day: "tomorrow".into(),
                    },
                    1.0,
                ),
                "raise.day",
            ),
        ] {
            let message = check_raise("raise", &r).unwrap_err();
            assert!(message.contains(named), "{message}");
        }
    }

    #[test]
    fn a_release_refuses_a_negative_cost_and_an_endless_back_off() {
        let mut r = LeaseRelease::default();
        assert!(check_release(&r).is_ok());
        r.cost_usd = -1.0;
        assert!(check_release(&r).unwrap_err().contains("cost_usd"));
        r.cost_usd = 1.0;
        r.rate_limited = Some(ninetrix_proto::api::RateLimited {
            retry_after_ms: 3_600_001,
        });
        assert!(check_release(&r).unwrap_err().contains("retry_after_ms"));
    }

    fn ms(text: &str) -> i64 {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .timestamp_millis()
    }

    #[test]
    fn a_day_is_its_zones_calendar_day_in_utc() {
        let day = day_of(chrono_tz::UTC, ms("2026-11-28T23:59:59Z"));
        assert_eq!(
            day,
            Day {
                day: "2026-11-28".into(),
                start: ms("2026-11-28T00:00:00Z"),
                end: ms("2026-11-29T00:00:00Z"),
            }
        );
        // 23:30 UTC is already the next day in Paris (UTC+1 in November).
        let paris = day_of(chrono_tz::Europe::Paris, ms("2026-11-28T23:30:00Z"));
        assert_eq!(paris.day, "2026-11-29");
        assert_eq!(paris.start, ms("2026-11-28T23:00:00Z"));
        assert_eq!(paris.end, ms("2026-11-29T23:00:00Z"));
        // Kathmandu is UTC+5:45: still whole 15-minute buckets.
        let ktm = day_of(chrono_tz::Asia::Kathmandu, ms("2026-11-28T12:00:00Z"));
        assert_eq!(ktm.start, ms("2026-11-27T18:15:00Z"));
        assert_eq!(ktm.start % BUCKET_MS, 0);
    }

    #[test]
    fn a_day_across_a_dst_change_is_23_or_25_hours() {
        let hours = |d: &Day| (d.end - d.start) / 3_600_000;
        // Europe/Paris springs forward on 2026-03-29 and falls back on 2026-10-25.
        let spring = day_of(chrono_tz::Europe::Paris, ms("2026-03-29T12:00:00Z"));
        assert_eq!((spring.day.as_str(), hours(&spring)), ("2026-03-29", 23));
        assert_eq!(spring.start, ms("2026-03-28T23:00:00Z"));
        assert_eq!(spring.end, ms("2026-03-29T22:00:00Z"));
        let autumn = day_of(chrono_tz::Europe::Paris, ms("2026-10-25T12:00:00Z"));
        assert_eq!((autumn.day.as_str(), hours(&autumn)), ("2026-10-25", 25));
        assert!((autumn.end - autumn.start) / BUCKET_MS <= 100);
        // A zone whose DST change skips midnight: the day starts at the first minute after the
        // gap (America/Santiago springs forward at 24:00 on 2026-09-05, so 2026-09-06 starts at
        // 01:00 local, 04:00 UTC).
        let santiago = day_of(chrono_tz::America::Santiago, ms("2026-09-06T12:00:00Z"));
        assert_eq!(santiago.day, "2026-09-06");
        assert_eq!(santiago.start, ms("2026-09-06T04:00:00Z"));
    }

    #[test]
    fn buckets_are_quarter_hours_of_utc() {
        assert_eq!(
            bucket_of(ms("2026-11-28T10:14:59.999Z")),
            ms("2026-11-28T10:00:00Z")
        );
        assert_eq!(
            bucket_of(ms("2026-11-28T10:15:00Z")),
            ms("2026-11-28T10:15:00Z")
        );
        assert_eq!(bucket_of(-1), -BUCKET_MS);
    }
}
