//! Schedules: when a schedule trigger fires, and what to do about the fires a scheduler missed.
//!
//! This module owns the [`Spec`] of a schedule (a 5-field cron expression in an IANA time zone,
//! or a fixed interval aligned to the Unix epoch), the instants it fires at
//! ([`Spec::next_after`], [`Spec::fires_between`]), the catch-up plan after an outage
//! ([`plan_fires`]) and the overlap rule for a fire whose previous turn still runs
//! ([`overlap_decision`]). It is pure: it reads no clock and does no I/O, so the API, the
//! agentfile validator and the CLI compute the same instants from the same inputs.
//!
//! Cron follows croner's (OCPS / Vixie cron) daylight saving rules. A *fixed-time* expression
//! (one value each for minute and hour, like `30 2 * * *`) whose local time falls in a
//! spring-forward gap fires once, at the first valid time after the gap (03:00 when 02:00 jumps
//! to 03:00); in a fall-back overlap it fires once, at the first pass. Any other expression
//! (`*/30 * * * *`, and also `0 1,2 * * *`, which lists two hours) runs in real time: it skips
//! wall clock times that do not exist and fires on both passes of a repeated hour.

use std::fmt;

use chrono::{DateTime, Datelike, NaiveDate, SecondsFormat, TimeDelta, Utc};
use chrono_tz::Tz;
use croner::errors::CronError;
use croner::parser::{CronParser, Seconds, Year};
use serde::{Deserialize, Serialize};

/// How late a fire may be and still count as on time. The scheduler ticks every second, so
/// anything within a minute of its instant is a normal fire, not a catch-up.
pub const GRACE: TimeDelta = TimeDelta::seconds(60);

/// The catch-up policy of a trigger that does not set one.
pub const DEFAULT_CATCH_UP: CatchUp = CatchUp::Last;

/// The catch-up window of a trigger that does not set one: one hour.
pub const DEFAULT_CATCH_UP_WINDOW_SECS: u64 = 3600;

/// The overlap policy of a trigger that does not set one.
pub const DEFAULT_OVERLAP: Overlap = Overlap::Skip;

/// The shortest interval of an [`Spec::Every`] schedule: one second.
pub const MIN_PERIOD_SECS: u64 = 1;

/// The longest interval of an [`Spec::Every`] schedule: 366 days.
pub const MAX_PERIOD_SECS: u64 = 366 * 86_400;

/// The most skipped instants a [`FirePlan`] lists; past it, [`FirePlan::more_skipped`] is set
/// and the plan jumps over the rest of the instants before the catch-up window instead of
/// walking them, so a trigger that missed a year of minutely fires costs no more than this.
pub const MAX_LISTED_SKIPS: usize = 100;

/// Why a schedule is refused, in the words of an agentfile's `triggers:`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// An empty (or all blank) cron expression.
    #[error(
        "a cron schedule must not be empty: write 5 fields, \
         `minute hour day-of-month month day-of-week` (e.g. `0 9 * * 1-5`)"
    )]
    EmptyCron,
    /// A cron expression without exactly 5 fields.
    #[error(
        "cron `{expr}` has {found} field{}; a schedule takes 5: minute hour day-of-month month \
         day-of-week{}",
        if *.found == 1 { "" } else { "s" },
        if matches!(.found, 6 | 7) { " (seconds and years are not supported)" } else { "" }
    )]
    FieldCount {
        /// The expression as written.
        expr: String,
        /// How many whitespace-separated fields it has.
        found: usize,
    },
    /// One field of a cron expression is out of range or malformed.
    #[error(
        "cron `{expr}`: the {field} field `{value}` is not valid ({reason}); {field} takes {}",
        field_takes(.field)
    )]
    Field {
        /// The expression as written.
        expr: String,
        /// Which field: `minute`, `hour`, `day-of-month`, `month` or `day-of-week`.
        field: &'static str,
        /// The field as written.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A cron expression refused as a whole (an unknown `@` nickname, or fields that do not
    /// combine).
    #[error("cron `{expr}` is not valid: {reason}")]
    Cron {
        /// The expression as written.
        expr: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A valid cron expression that matches no date, like `0 0 30 2 *` (30 February).
    #[error("cron `{expr}` never fires: no date matches it")]
    NeverFires {
        /// The expression as written.
        expr: String,
    },
    /// A time zone that is not an IANA name.
    #[error("unknown time zone `{name}`{}", zone_hint(.suggestion))]
    UnknownZone {
        /// The name as written.
        name: String,
        /// The closest known name, when one is close enough to be a likely typo.
        suggestion: Option<&'static str>,
    },
    /// An interval shorter than 1 second or longer than 366 days.
    #[error("{}", period_problem(*.secs))]
    Period {
        /// The interval in seconds (`u64::MAX` when it does not even fit).
        secs: u64,
    },
    /// A schedule with neither a cron expression nor an interval.
    #[error("a schedule needs `cron: <5 fields>` or `every: <interval>`")]
    NoRule,
    /// A schedule with both a cron expression and an interval.
    #[error(
        "a schedule has one rule: `cron` for times on a clock or `every` for a fixed interval,          not both"
    )]
    TwoRules,
    /// An interval with a time zone other than UTC (intervals are aligned to the Unix epoch).
    #[error(
        "`timezone` `{zone}` does not apply to `every`: intervals are aligned to the Unix epoch;          leave the zone out (UTC) or write the schedule as `cron`"
    )]
    ZoneWithEvery {
        /// The zone given.
        zone: String,
    },
    /// An interval that is not a number with a unit.
    #[error(
        "`{text}` is not an interval: write a whole number with `s`, `m`, `h` or `d` \
         (`30s`, `10m`, `2h`, `1d`), or plain seconds"
    )]
    Every {
        /// The text as written.
        text: String,
    },
}

/// How a schedule fires. Build one with [`Spec::cron`] or [`Spec::every`], which validate it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Spec {
    /// A 5-field cron expression (minute hour day-of-month month day-of-week; croner's `L`, `W`,
    /// `#`, names like `MON` and `JAN`, and `@daily`-style nicknames are accepted) evaluated on
    /// the wall clock of `tz`.
    Cron {
        /// The expression as written.
        expr: String,
        /// The zone whose wall clock the expression reads.
        tz: Tz,
        /// `expr`, parsed once; only [`Spec::cron`] makes one.
        pattern: Pattern,
    },
    /// Every `period_secs` seconds, at the multiples of the period since
    /// 1970-01-01T00:00:00Z, so every replica computes the same instants without storing an
    /// anchor (a 10-minute schedule fires at :00, :10, :20…; a 7-second one at the Unix
    /// timestamps divisible by 7).
    Every {
        /// The interval, from [`MIN_PERIOD_SECS`] to [`MAX_PERIOD_SECS`] when built by
        /// [`Spec::every`]; a schedule built by hand with 0 never fires.
        period_secs: u64,
    },
}

/// A parsed cron expression, held inside [`Spec::Cron`] so it is parsed once (boxed: croner's
/// pattern is some 330 bytes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pattern(Box<croner::Cron>);

impl Spec {
    /// A cron schedule: `expr` (5 fields) on the wall clock of the IANA zone `tz_name`
    /// (`Europe/Lisbon`, `America/New_York`, `UTC`…). Refuses 6- and 7-field expressions
    /// (seconds, years), out-of-range fields, unknown zones (suggesting the closest name) and
    /// expressions that never fire.
    pub fn cron(expr: &str, tz_name: &str) -> Result<Spec, ScheduleError> {
        let tz = parse_zone(tz_name)?;
        let cron = parse_cron(expr)?;
        // Any 5-field pattern that fires at all fires within a 400-year Gregorian cycle, and
        // croner searches up to the year 5000; an impossible one fails in about 10 ms.
        let probe = DateTime::<Utc>::UNIX_EPOCH.with_timezone(&tz);
        if cron.find_next_occurrence(&probe, false).is_err() {
            return Err(ScheduleError::NeverFires {
                expr: expr.to_owned(),
            });
        }
        Ok(Spec::Cron {
            expr: expr.to_owned(),
            tz,
            pattern: Pattern(Box::new(cron)),
        })
    }

    /// An interval schedule firing every `period_secs` seconds (1 s to 366 days), aligned to
    /// the Unix epoch.
    pub fn every(period_secs: u64) -> Result<Spec, ScheduleError> {
        check_period(period_secs)?;
        Ok(Spec::Every { period_secs })
    }

    /// The first fire strictly after `after`. `None` when there is none: a cron expression
    /// with no match before croner's year limit (5000), or an instant past chrono's range.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            // croner walks real time from this exact instant, which also tells it which pass
            // of a repeated hour it is on.
            Spec::Cron { tz, pattern, .. } => pattern
                .0
                .find_next_occurrence(&in_cron_range(after)?.with_timezone(tz), false)
                .ok()
                .map(|t| t.with_timezone(&Utc)),
            Spec::Every { period_secs } => {
                let period = i64::try_from(*period_secs).ok().filter(|p| *p > 0)?;
                // `timestamp` rounds down, so a fraction of a second past a multiple still
                // moves on to the next one.
                let next = after
                    .timestamp()
                    .div_euclid(period)
                    .checked_add(1)?
                    .checked_mul(period)?;
                DateTime::from_timestamp(next, 0)
            }
        }
    }

    /// The fires in `(from_exclusive, to_inclusive]`, in order: the oldest `limit` of them
    /// when there are more.
    pub fn fires_between(
        &self,
        from_exclusive: DateTime<Utc>,
        to_inclusive: DateTime<Utc>,
        limit: usize,
    ) -> Vec<DateTime<Utc>> {
        let mut fires = Vec::new();
        let mut cursor = from_exclusive;
        while fires.len() < limit {
            match self.next_after(cursor) {
                // `t > cursor` always holds; checking it means a search that stood still could
                // never loop forever.
                Some(t) if t <= to_inclusive && t > cursor => {
                    fires.push(t);
                    cursor = t;
                }
                _ => break,
            }
        }
        fires
    }
}

/// `after`, moved into the years croner searches (1 to 5000) with a day's margin, so that no
/// zone's wall clock leaves chrono's range (chrono panics on a local time past its limits).
/// `None` past the year 5000, where croner finds nothing anyway.
fn in_cron_range(after: DateTime<Utc>) -> Option<DateTime<Utc>> {
    if after.year() >= croner::YEAR_UPPER_LIMIT {
        return None;
    }
    let floor = NaiveDate::from_ymd_opt(1, 1, 2)?
        .and_hms_opt(0, 0, 0)?
        .and_utc();
    Some(after.max(floor))
}

impl fmt::Display for Spec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Spec::Cron { expr, tz, .. } => write!(f, "cron `{expr}` ({})", tz.name()),
            Spec::Every { period_secs } => write!(f, "every {}", format_every(*period_secs)),
        }
    }
}

/// Which missed fires run after the scheduler was down (or the trigger was paused). Only fires
/// inside the catch-up window are candidates; older ones are always skipped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum CatchUp {
    /// Skip every missed fire.
    None,
    /// Run the most recent missed fire once, skip the others.
    #[default]
    Last,
    /// Run every missed fire, oldest first, up to the plan's `max`.
    All,
}

/// Whether a fire runs while the turn of the trigger's previous fire has not finished. The
/// policies mirror Temporal Schedules' overlap policies of the same names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    /// Skip a fire while the previous one's turn runs (Temporal's `SKIP`): at most one turn
    /// per trigger at a time, and nothing piles up behind a slow one.
    #[default]
    Skip,
    /// While the previous turn runs, hold one fire back and run it when that turn finishes; a
    /// further fire while one is already held is skipped (Temporal's `BUFFER_ONE`). Nothing
    /// is lost to a single slow turn, and a stuck one delays at most one fire.
    BufferOne,
    /// Always fire, even while earlier turns run (Temporal's `ALLOW_ALL`).
    Allow,
}

/// What to do with one fire, by [`overlap_decision`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum OverlapDecision {
    /// Append the fire's message now.
    Fire,
    /// Hold the fire back; append it when the running turn finishes.
    Buffer,
    /// Drop the fire.
    Skip,
}

/// What `policy` does with a new fire. `previous_running`: the turn of this trigger's previous
/// fire has not finished. `buffered`: a fire is held back, waiting for that turn.
///
/// | policy      | running, nothing held | running, one held | idle, nothing held | idle, one held |
/// |-------------|-----------------------|-------------------|--------------------|----------------|
/// | `Skip`      | `Skip`                | `Skip`            | `Fire`             | `Skip`         |
/// | `BufferOne` | `Buffer`              | `Skip`            | `Fire`             | `Skip`         |
/// | `Allow`     | `Fire`                | `Fire`            | `Fire`             | `Fire`         |
///
/// A held fire counts as work in progress even when the previous turn has just finished: it
/// is about to start, so a new fire would overlap it.
pub fn overlap_decision(
    policy: Overlap,
    previous_running: bool,
    buffered: bool,
) -> OverlapDecision {
    match policy {
        Overlap::Allow => OverlapDecision::Fire,
        Overlap::Skip if previous_running || buffered => OverlapDecision::Skip,
        Overlap::BufferOne if buffered => OverlapDecision::Skip,
        Overlap::BufferOne if previous_running => OverlapDecision::Buffer,
        Overlap::Skip | Overlap::BufferOne => OverlapDecision::Fire,
    }
}

/// Why a planned fire runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum FireKind {
    /// Within [`GRACE`] of its instant.
    OnTime,
    /// Missed, and taken by the catch-up policy.
    CaughtUp,
}

/// Why a due instant does not fire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum SkipReason {
    /// Missed, and older than the catch-up window.
    OutsideWindow,
    /// Missed, and the policy is [`CatchUp::None`].
    CatchUpNone,
    /// Missed, and a more recent missed instant runs instead ([`CatchUp::Last`]).
    OnlyLast,
    /// Missed, and the plan already runs `max` catch-up fires.
    OverMax,
}

/// What to do with the instants a schedule reached since it was last planned.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FirePlan {
    /// The instants to fire, oldest first: the caught-up ones, then the on-time ones.
    pub fire: Vec<(DateTime<Utc>, FireKind)>,
    /// Skipped instants, oldest first; at most [`MAX_LISTED_SKIPS`] of them.
    pub skipped: Vec<(DateTime<Utc>, SkipReason)>,
    /// More instants were skipped than `skipped` lists.
    pub more_skipped: bool,
    /// The first instant after `now` (and after `last_scheduled`): when to plan again. `None`
    /// if the schedule never fires again.
    pub next: Option<DateTime<Utc>>,
}

impl FirePlan {
    /// Records a skipped instant if the list has room; false when it had none.
    fn skip(&mut self, at: DateTime<Utc>, reason: SkipReason) -> bool {
        if self.skipped.len() < MAX_LISTED_SKIPS {
            self.skipped.push((at, reason));
            true
        } else {
            self.more_skipped = true;
            false
        }
    }
}

/// Plans the fires of `spec` that are due at `now`: its instants after `last_scheduled` (or
/// after `registered_at`, for a trigger never planned) up to and including `now`.
///
/// An instant is on time when `now - t <= GRACE` and always fires. An older one was missed:
/// missed instants more than `window_secs` before `now` are skipped; of those inside the
/// window, `catch_up` decides — [`CatchUp::None`] skips them all, [`CatchUp::Last`] fires only
/// the most recent, [`CatchUp::All`] fires them oldest first. `max` caps the catch-up fires of
/// one plan (the on-time ones are not counted); the rest are skipped.
///
/// Every instant up to `now` is decided by the plan, so the caller passes this `now` (or the
/// newest instant of the plan) as the next call's `last_scheduled`. The work is proportional
/// to the instants inside the window, plus at most [`MAX_LISTED_SKIPS`] older ones.
pub fn plan_fires(
    spec: &Spec,
    last_scheduled: Option<DateTime<Utc>>,
    registered_at: DateTime<Utc>,
    now: DateTime<Utc>,
    catch_up: CatchUp,
    window_secs: u64,
    max: usize,
) -> FirePlan {
    // The oldest instant inside the window; `None` when the window reaches past chrono's range.
    let window_start = i64::try_from(window_secs)
        .ok()
        .and_then(TimeDelta::try_seconds)
        .and_then(|w| now.checked_sub_signed(w));
    let mut plan = FirePlan::default();
    let mut caught_up = Vec::new();
    let mut on_time = Vec::new();
    // With `CatchUp::Last`: the most recent missed instant inside the window so far.
    let mut last_missed: Option<DateTime<Utc>> = None;

    let mut cursor = last_scheduled.unwrap_or(registered_at);
    while let Some(t) = spec.next_after(cursor) {
        if t > now {
            plan.next = Some(t);
            break;
        }
        if t <= cursor {
            break; // a search that stands still must not loop forever
        }
        cursor = t;
        if now - t <= GRACE {
            on_time.push((t, FireKind::OnTime));
            continue;
        }
        if let Some(start) = window_start.filter(|start| t < *start) {
            if !plan.skip(t, SkipReason::OutsideWindow) {
                // The list is full: jump over the rest of the instants before the window.
                cursor = start
                    .checked_sub_signed(TimeDelta::nanoseconds(1))
                    .unwrap_or(cursor)
                    .max(cursor);
            }
            continue;
        }
        match catch_up {
            CatchUp::None => {
                plan.skip(t, SkipReason::CatchUpNone);
            }
            CatchUp::Last => {
                if let Some(older) = last_missed.replace(t) {
                    plan.skip(older, SkipReason::OnlyLast);
                }
            }
            CatchUp::All if caught_up.len() < max => caught_up.push((t, FireKind::CaughtUp)),
            CatchUp::All => {
                plan.skip(t, SkipReason::OverMax);
            }
        }
    }
    if let Some(t) = last_missed {
        if max > 0 {
            caught_up.push((t, FireKind::CaughtUp));
        } else {
            plan.skip(t, SkipReason::OverMax);
        }
    }
    caught_up.extend(on_time);
    plan.fire = caught_up;
    plan
}

/// The dedupe key of the inbox message for the fire of `trigger` scheduled at `scheduled`:
/// `schedule:<trigger>:<RFC 3339 UTC, whole seconds>`, e.g.
/// `schedule:standup:2026-03-09T13:00:00Z`. Every replica derives the same key for the same
/// fire, so a fire appended twice is stored once.
pub fn dedupe_key(trigger: &str, scheduled: DateTime<Utc>) -> String {
    format!(
        "schedule:{trigger}:{}",
        scheduled.to_rfc3339_opts(SecondsFormat::Secs, true)
    )
}

fn check_period(secs: u64) -> Result<(), ScheduleError> {
    if (MIN_PERIOD_SECS..=MAX_PERIOD_SECS).contains(&secs) {
        Ok(())
    } else {
        Err(ScheduleError::Period { secs })
    }
}

/// An interval in its largest whole unit: `90s`, `10m`, `2h`, `1d`.
pub fn format_every(secs: u64) -> String {
    match secs {
        0 => "0s".to_owned(),
        s if s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s % 3600 == 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

fn period_problem(secs: u64) -> String {
    if secs < MIN_PERIOD_SECS {
        "an interval must be at least 1 second".to_owned()
    } else if secs == u64::MAX {
        "an interval must be at most 366 days".to_owned()
    } else {
        format!(
            "an interval must be at most 366 days; {} is longer",
            format_every(secs)
        )
    }
}

const FIELDS: [&str; 5] = ["minute", "hour", "day-of-month", "month", "day-of-week"];
const MONTHS: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const DAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

fn field_takes(field: &str) -> &'static str {
    match field {
        "minute" => "0-59",
        "hour" => "0-23",
        "day-of-month" => "1-31, `L` (last day) or `15W` (weekday nearest the 15th)",
        "month" => "1-12 or JAN-DEC",
        _ => "0-7 (0 and 7 are Sunday) or SUN-SAT, `5L` (last Friday), `1#2` (second Monday)",
    }
}

fn zone_hint(suggestion: &Option<&'static str>) -> String {
    match suggestion {
        Some(name) => format!("; did you mean `{name}`?"),
        None => {
            "; use an IANA name such as `Europe/Lisbon`, `America/New_York` or `UTC`".to_owned()
        }
    }
}

fn parse_zone(name: &str) -> Result<Tz, ScheduleError> {
    name.parse::<Tz>().map_err(|_| ScheduleError::UnknownZone {
        name: name.to_owned(),
        suggestion: closest_zone(name),
    })
}

/// The known zone closest to `name`, if one is close enough to be a likely typo. A name
/// without a region (`Lisbon`) is also compared with the city part of each zone.
fn closest_zone(name: &str) -> Option<&'static str> {
    let want = name.trim().to_ascii_lowercase();
    chrono_tz::TZ_VARIANTS
        .iter()
        .map(|tz| {
            let known = tz.name().to_ascii_lowercase();
            let mut score = strsim::jaro_winkler(&want, &known);
            if !want.contains('/') {
                let city = known.rsplit('/').next().unwrap_or(&known);
                score = score.max(strsim::jaro_winkler(&want, city));
            }
            (score, tz.name())
        })
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, name)| name)
}

fn cron_parser() -> CronParser {
    CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build()
}

/// croner's own words for what is wrong, without its prefixes.
fn cron_reason(error: CronError) -> String {
    let text = match error {
        CronError::InvalidPattern(msg)
        | CronError::IllegalCharacters(msg)
        | CronError::ComponentError(msg) => msg,
        other => other.to_string(),
    };
    // "Number out of bounds." reads as "number out of bounds" inside a sentence.
    let text = text.trim_end_matches('.');
    let mut chars = text.chars();
    chars.next().map_or_else(String::new, |first| {
        first.to_lowercase().chain(chars).collect()
    })
}

fn parse_cron(expr: &str) -> Result<croner::Cron, ScheduleError> {
    let text = expr.trim();
    if text.is_empty() {
        return Err(ScheduleError::EmptyCron);
    }
    let whole = |error: CronError| ScheduleError::Cron {
        expr: expr.to_owned(),
        reason: cron_reason(error),
    };
    if text.starts_with('@') {
        return cron_parser().parse(text).map_err(|_| ScheduleError::Cron {
            expr: expr.to_owned(),
            reason: "the nicknames are @yearly, @annually, @monthly, @weekly, @daily and @hourly"
                .to_owned(),
        });
    }
    let fields: Vec<&str> = text.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(ScheduleError::FieldCount {
            expr: expr.to_owned(),
            found: fields.len(),
        });
    }
    for (i, value) in fields.iter().enumerate() {
        check_field(i, value).map_err(|reason| ScheduleError::Field {
            expr: expr.to_owned(),
            field: FIELDS[i],
            value: (*value).to_owned(),
            reason,
        })?;
    }
    cron_parser().parse(text).map_err(whole)
}

/// Checks field `i` on its own, so an error can name it. croner replaces day and month names
/// anywhere in an expression (`MON * * * *` would read as minute 1), so letters are only let
/// through in the fields that take them.
fn check_field(i: usize, value: &str) -> Result<(), String> {
    let upper = value.to_ascii_uppercase();
    let (rest, allowed) = match i {
        2 => (upper, "*,-/?LW"),
        3 => (
            MONTHS.iter().fold(upper, |s, name| s.replace(name, "")),
            "*,-/",
        ),
        4 => (
            DAYS.iter().fold(upper, |s, name| s.replace(name, "")),
            "*,-/?#+L",
        ),
        _ => (upper, "*,-/"),
    };
    if let Some(c) = rest
        .chars()
        .find(|c| !c.is_ascii_digit() && !allowed.contains(*c))
    {
        return Err(format!("`{c}` does not belong in it"));
    }
    let mut alone = ["*"; 5];
    alone[i] = value;
    cron_parser()
        .parse(&alone.join(" "))
        .map(drop)
        .map_err(cron_reason)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Timelike};

    fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, mo, d, h, mi, 0).unwrap()
    }

    fn cron(expr: &str, tz: &str) -> Spec {
        Spec::cron(expr, tz).unwrap()
    }

    fn local(t: DateTime<Utc>, tz: &str) -> String {
        t.with_timezone(&tz.parse::<Tz>().unwrap())
            .format("%Y-%m-%d %H:%M %Z")
            .to_string()
    }

    #[test]
    fn weekdays_at_nine_in_new_york() {
        let spec = cron("0 9 * * 1-5", "America/New_York");
        // Sunday 2026-01-04 to Sunday 2026-01-11, EST (UTC-5).
        let winter = spec.fires_between(utc(2026, 1, 4, 0, 0), utc(2026, 1, 11, 0, 0), 100);
        assert_eq!(
            winter,
            (5..=9).map(|d| utc(2026, 1, d, 14, 0)).collect::<Vec<_>>()
        );
        // Sunday 2026-07-05 to Sunday 2026-07-12, EDT (UTC-4).
        let summer = spec.fires_between(utc(2026, 7, 5, 0, 0), utc(2026, 7, 12, 0, 0), 100);
        assert_eq!(
            summer,
            (6..=10).map(|d| utc(2026, 7, d, 13, 0)).collect::<Vec<_>>()
        );
        // Friday 09:00 to the next Monday 09:00.
        assert_eq!(
            spec.next_after(utc(2026, 1, 9, 14, 0)),
            Some(utc(2026, 1, 12, 14, 0))
        );
    }

    #[test]
    fn every_fifteen_minutes_in_utc() {
        let spec = cron("*/15 * * * *", "UTC");
        let start = Utc.with_ymd_and_hms(2026, 5, 1, 10, 7, 30).unwrap();
        let fires = spec.fires_between(start, utc(2026, 5, 1, 11, 0), 100);
        assert_eq!(
            fires,
            vec![
                utc(2026, 5, 1, 10, 15),
                utc(2026, 5, 1, 10, 30),
                utc(2026, 5, 1, 10, 45),
                utc(2026, 5, 1, 11, 0)
            ]
        );
        // Strictly after: an instant that is itself a fire moves on.
        assert_eq!(
            spec.next_after(utc(2026, 5, 1, 10, 15)),
            Some(utc(2026, 5, 1, 10, 30))
        );
        // A fraction of a second before a fire still finds it.
        let just_before = utc(2026, 5, 1, 10, 15) - TimeDelta::milliseconds(1);
        assert_eq!(spec.next_after(just_before), Some(utc(2026, 5, 1, 10, 15)));
    }

    #[test]
    fn intervals_align_to_the_unix_epoch() {
        let spec = Spec::every(600).unwrap();
        let odd =
            Utc.with_ymd_and_hms(2026, 5, 1, 10, 7, 30).unwrap() + TimeDelta::milliseconds(500);
        assert_eq!(spec.next_after(odd), Some(utc(2026, 5, 1, 10, 10)));
        assert_eq!(
            spec.next_after(utc(2026, 5, 1, 10, 10)),
            Some(utc(2026, 5, 1, 10, 20))
        );
        assert_eq!(
            spec.fires_between(utc(2026, 5, 1, 10, 0), utc(2026, 5, 1, 10, 30), 10),
            vec![
                utc(2026, 5, 1, 10, 10),
                utc(2026, 5, 1, 10, 20),
                utc(2026, 5, 1, 10, 30)
            ]
        );
        // Before the epoch too.
        let before = Utc.with_ymd_and_hms(1969, 12, 31, 23, 59, 59).unwrap();
        assert_eq!(spec.next_after(before), Some(DateTime::UNIX_EPOCH));
        // A period that does not divide a day: the Unix timestamps divisible by 7.
        let seven = Spec::every(7).unwrap();
        let t = seven.next_after(utc(2026, 5, 1, 0, 0)).unwrap();
        assert_eq!(t.timestamp(), 1_777_593_601); // 2026-05-01T00:00:01Z
        assert_eq!(t.timestamp() % 7, 0);
        assert_eq!(seven.to_string(), "every 7s");
        assert_eq!(spec.to_string(), "every 10m");
    }

    #[test]
    fn spring_forward_in_new_york_fires_once_after_the_gap() {
        // 2026-03-08: 02:00 EST jumps to 03:00 EDT; 02:30 does not exist.
        let spec = cron("30 2 * * *", "America/New_York");
        let day = spec.fires_between(utc(2026, 3, 8, 5, 0), utc(2026, 3, 9, 4, 0), 10);
        assert_eq!(day, vec![utc(2026, 3, 8, 7, 0)]);
        assert_eq!(local(day[0], "America/New_York"), "2026-03-08 03:00 EDT");
        assert_eq!(
            spec.next_after(utc(2026, 3, 7, 12, 0)),
            Some(utc(2026, 3, 8, 7, 0))
        );
        let next = spec.next_after(utc(2026, 3, 8, 7, 0)).unwrap();
        assert_eq!(next, utc(2026, 3, 9, 6, 30));
        assert_eq!(local(next, "America/New_York"), "2026-03-09 02:30 EDT");
    }

    #[test]
    fn fall_back_in_new_york_fixed_time_fires_once_at_the_first_pass() {
        // 2026-11-01: 02:00 EDT falls back to 01:00 EST; 01:30 happens twice.
        let spec = cron("30 1 * * *", "America/New_York");
        let day = spec.fires_between(utc(2026, 11, 1, 4, 0), utc(2026, 11, 2, 5, 0), 10);
        assert_eq!(day, vec![utc(2026, 11, 1, 5, 30)]);
        assert_eq!(local(day[0], "America/New_York"), "2026-11-01 01:30 EDT");
        // From the first 01:30, and from inside the second pass, the next is the next day.
        assert_eq!(
            spec.next_after(utc(2026, 11, 1, 5, 30)),
            Some(utc(2026, 11, 2, 6, 30))
        );
        assert_eq!(
            spec.next_after(utc(2026, 11, 1, 6, 0)),
            Some(utc(2026, 11, 2, 6, 30))
        );
    }

    #[test]
    fn fall_back_in_new_york_intervals_fire_on_both_passes() {
        let spec = cron("*/30 * * * *", "America/New_York");
        let fires = spec.fires_between(utc(2026, 11, 1, 4, 59), utc(2026, 11, 1, 6, 59), 10);
        assert_eq!(
            fires,
            vec![
                utc(2026, 11, 1, 5, 0),
                utc(2026, 11, 1, 5, 30),
                utc(2026, 11, 1, 6, 0),
                utc(2026, 11, 1, 6, 30)
            ]
        );
        let wall: Vec<String> = fires
            .iter()
            .map(|t| local(*t, "America/New_York"))
            .collect();
        assert_eq!(
            wall,
            [
                "2026-11-01 01:00 EDT",
                "2026-11-01 01:30 EDT",
                "2026-11-01 01:00 EST",
                "2026-11-01 01:30 EST"
            ]
        );
        // Starting inside the second pass continues on it.
        let inside = Utc.with_ymd_and_hms(2026, 11, 1, 5, 45, 0).unwrap();
        assert_eq!(spec.next_after(inside), Some(utc(2026, 11, 1, 6, 0)));
        // An hour listed twice is not a fixed time: `0 1,3` fires on both 01:00 passes.
        let listed = cron("0 1,3 * * *", "America/New_York");
        assert_eq!(
            listed.fires_between(utc(2026, 11, 1, 4, 0), utc(2026, 11, 1, 9, 0), 10),
            vec![
                utc(2026, 11, 1, 5, 0),
                utc(2026, 11, 1, 6, 0),
                utc(2026, 11, 1, 8, 0)
            ]
        );
    }

    #[test]
    fn spring_forward_in_berlin() {
        // 2026-03-29: 02:00 CET jumps to 03:00 CEST.
        let spec = cron("30 2 * * *", "Europe/Berlin");
        assert_eq!(
            spec.fires_between(utc(2026, 3, 28, 0, 0), utc(2026, 3, 31, 0, 0), 10),
            vec![
                utc(2026, 3, 28, 1, 30),
                utc(2026, 3, 29, 1, 0),
                utc(2026, 3, 30, 0, 30)
            ]
        );
        assert_eq!(
            local(utc(2026, 3, 29, 1, 0), "Europe/Berlin"),
            "2026-03-29 03:00 CEST"
        );
        // An interval in the missing hour skips it on that day only.
        let half_hours = cron("*/30 2 * * *", "Europe/Berlin");
        assert_eq!(
            half_hours.fires_between(utc(2026, 3, 28, 0, 0), utc(2026, 3, 30, 12, 0), 10),
            vec![
                utc(2026, 3, 28, 1, 0),
                utc(2026, 3, 28, 1, 30),
                utc(2026, 3, 30, 0, 0),
                utc(2026, 3, 30, 0, 30)
            ]
        );
    }

    #[test]
    fn fires_between_across_a_dst_change() {
        // Hourly in New York across the spring-forward: still one fire per real hour.
        let hourly = cron("0 * * * *", "America/New_York");
        let fires = hourly.fires_between(utc(2026, 3, 8, 4, 30), utc(2026, 3, 8, 9, 0), 100);
        assert_eq!(
            fires,
            (5..=9).map(|h| utc(2026, 3, 8, h, 0)).collect::<Vec<_>>()
        );
        let wall: Vec<u32> = fires
            .iter()
            .map(|t| t.with_timezone(&chrono_tz::America::New_York).hour())
            .collect();
        assert_eq!(wall, [0, 1, 3, 4, 5]);
        // The oldest `limit`.
        assert_eq!(
            hourly.fires_between(utc(2026, 3, 8, 4, 30), utc(2026, 3, 8, 9, 0), 2),
            fires[..2]
        );
        assert!(
            hourly
                .fires_between(utc(2026, 3, 8, 4, 30), utc(2026, 3, 8, 9, 0), 0)
                .is_empty()
        );
        // Noon in Lisbon moves from 12:00Z (WET) to 11:00Z (WEST) on 2026-03-29.
        let noon = cron("0 12 * * *", "Europe/Lisbon");
        assert_eq!(
            noon.fires_between(utc(2026, 3, 28, 0, 0), utc(2026, 3, 31, 0, 0), 10),
            vec![
                utc(2026, 3, 28, 12, 0),
                utc(2026, 3, 29, 11, 0),
                utc(2026, 3, 30, 11, 0)
            ]
        );
        // The fall-back day in New York has 25 hours of hourly fires.
        let day = hourly.fires_between(utc(2026, 11, 1, 4, 0), utc(2026, 11, 2, 5, 0), 100);
        assert_eq!(day.len(), 25);
    }

    fn hourly_utc() -> Spec {
        cron("0 * * * *", "UTC")
    }

    #[test]
    fn plan_on_time() {
        let now = Utc.with_ymd_and_hms(2026, 5, 1, 10, 0, 5).unwrap();
        let plan = plan_fires(
            &hourly_utc(),
            Some(utc(2026, 5, 1, 9, 0)),
            utc(2026, 1, 1, 0, 0),
            now,
            CatchUp::None,
            3600,
            10,
        );
        assert_eq!(
            plan,
            FirePlan {
                fire: vec![(utc(2026, 5, 1, 10, 0), FireKind::OnTime)],
                skipped: vec![],
                more_skipped: false,
                next: Some(utc(2026, 5, 1, 11, 0)),
            }
        );
        // The edge of the grace: 60 s late is on time, 61 s is missed.
        let at_grace = utc(2026, 5, 1, 10, 1);
        let plan = plan_fires(
            &hourly_utc(),
            Some(utc(2026, 5, 1, 9, 0)),
            at_grace,
            at_grace,
            CatchUp::None,
            3600,
            10,
        );
        assert_eq!(plan.fire, vec![(utc(2026, 5, 1, 10, 0), FireKind::OnTime)]);
        let past_grace = at_grace + TimeDelta::seconds(1);
        let plan = plan_fires(
            &hourly_utc(),
            Some(utc(2026, 5, 1, 9, 0)),
            past_grace,
            past_grace,
            CatchUp::None,
            3600,
            10,
        );
        assert_eq!(plan.fire, vec![]);
        assert_eq!(
            plan.skipped,
            vec![(utc(2026, 5, 1, 10, 0), SkipReason::CatchUpNone)]
        );
    }

    #[test]
    fn plan_after_a_three_hour_outage_with_a_one_hour_window() {
        // Fired at 08:00, down from 08:30 to 11:30: 09:00, 10:00 and 11:00 were missed, and
        // only 11:00 is within an hour of now.
        let (last, now) = (Some(utc(2026, 5, 1, 8, 0)), utc(2026, 5, 1, 11, 30));
        let plan = |catch_up| {
            plan_fires(
                &hourly_utc(),
                last,
                utc(2026, 1, 1, 0, 0),
                now,
                catch_up,
                3600,
                10,
            )
        };
        let outside = [
            (utc(2026, 5, 1, 9, 0), SkipReason::OutsideWindow),
            (utc(2026, 5, 1, 10, 0), SkipReason::OutsideWindow),
        ];
        let next = Some(utc(2026, 5, 1, 12, 0));

        let none = plan(CatchUp::None);
        assert_eq!(none.fire, vec![]);
        assert_eq!(
            none.skipped,
            [
                &outside[..],
                &[(utc(2026, 5, 1, 11, 0), SkipReason::CatchUpNone)]
            ]
            .concat()
        );
        assert_eq!(none.next, next);

        let last_only = plan(CatchUp::Last);
        assert_eq!(
            last_only.fire,
            vec![(utc(2026, 5, 1, 11, 0), FireKind::CaughtUp)]
        );
        assert_eq!(last_only.skipped, outside);
        assert_eq!(last_only.next, next);

        let all = plan(CatchUp::All);
        assert_eq!(all.fire, vec![(utc(2026, 5, 1, 11, 0), FireKind::CaughtUp)]);
        assert_eq!(all.skipped, outside);
        assert!(!all.more_skipped);
    }

    #[test]
    fn plan_after_an_outage_inside_a_wide_window() {
        // The same outage, a 4-hour window, and now just after noon: 09:00-11:00 are missed
        // inside the window and 12:00 is on time.
        let (last, now) = (
            Some(utc(2026, 5, 1, 8, 0)),
            Utc.with_ymd_and_hms(2026, 5, 1, 12, 0, 20).unwrap(),
        );
        let plan = |catch_up, max| {
            plan_fires(
                &hourly_utc(),
                last,
                utc(2026, 1, 1, 0, 0),
                now,
                catch_up,
                4 * 3600,
                max,
            )
        };
        let noon = (utc(2026, 5, 1, 12, 0), FireKind::OnTime);

        let none = plan(CatchUp::None, 10);
        assert_eq!(none.fire, vec![noon]);
        assert_eq!(
            none.skipped,
            (9..=11)
                .map(|h| (utc(2026, 5, 1, h, 0), SkipReason::CatchUpNone))
                .collect::<Vec<_>>()
        );

        let last_only = plan(CatchUp::Last, 10);
        assert_eq!(
            last_only.fire,
            vec![(utc(2026, 5, 1, 11, 0), FireKind::CaughtUp), noon]
        );
        assert_eq!(
            last_only.skipped,
            vec![
                (utc(2026, 5, 1, 9, 0), SkipReason::OnlyLast),
                (utc(2026, 5, 1, 10, 0), SkipReason::OnlyLast)
            ]
        );

        let all = plan(CatchUp::All, 10);
        let mut expected: Vec<_> = (9..=11)
            .map(|h| (utc(2026, 5, 1, h, 0), FireKind::CaughtUp))
            .collect();
        expected.push(noon);
        assert_eq!(all.fire, expected);
        assert_eq!(all.skipped, vec![]);
        assert_eq!(all.next, Some(utc(2026, 5, 1, 13, 0)));

        // `max` caps the catch-up fires, oldest first; the on-time fire is not counted.
        let capped = plan(CatchUp::All, 2);
        assert_eq!(
            capped.fire,
            vec![
                (utc(2026, 5, 1, 9, 0), FireKind::CaughtUp),
                (utc(2026, 5, 1, 10, 0), FireKind::CaughtUp),
                noon
            ]
        );
        assert_eq!(
            capped.skipped,
            vec![(utc(2026, 5, 1, 11, 0), SkipReason::OverMax)]
        );
        let zero = plan(CatchUp::Last, 0);
        assert_eq!(zero.fire, vec![noon]);
        assert_eq!(
            zero.skipped.last(),
            Some(&(utc(2026, 5, 1, 11, 0), SkipReason::OverMax))
        );
    }

    #[test]
    fn plan_for_a_trigger_never_fired() {
        let registered = Utc.with_ymd_and_hms(2026, 5, 1, 10, 7, 0).unwrap();
        let plan = plan_fires(
            &hourly_utc(),
            None,
            registered,
            registered,
            DEFAULT_CATCH_UP,
            DEFAULT_CATCH_UP_WINDOW_SECS,
            10,
        );
        assert_eq!(
            plan,
            FirePlan {
                next: Some(utc(2026, 5, 1, 11, 0)),
                ..FirePlan::default()
            }
        );
        let later = Utc.with_ymd_and_hms(2026, 5, 1, 10, 59, 59).unwrap();
        let plan = plan_fires(
            &hourly_utc(),
            None,
            registered,
            later,
            CatchUp::All,
            3600,
            10,
        );
        assert_eq!(plan.fire, vec![]);
        let after = Utc.with_ymd_and_hms(2026, 5, 1, 11, 0, 1).unwrap();
        let plan = plan_fires(
            &hourly_utc(),
            None,
            registered,
            after,
            CatchUp::All,
            3600,
            10,
        );
        assert_eq!(plan.fire, vec![(utc(2026, 5, 1, 11, 0), FireKind::OnTime)]);
        // A clock behind the last plan (another replica's) fires nothing and plans past it.
        let plan = plan_fires(
            &hourly_utc(),
            Some(utc(2026, 5, 1, 12, 0)),
            registered,
            after,
            CatchUp::All,
            3600,
            10,
        );
        assert_eq!(
            plan,
            FirePlan {
                next: Some(utc(2026, 5, 1, 13, 0)),
                ..FirePlan::default()
            }
        );
    }

    #[test]
    fn plan_after_a_long_outage_lists_a_bounded_number_of_skips() {
        // Every second, a day down, catch up the last within an hour.
        let spec = Spec::every(1).unwrap();
        let now = utc(2026, 5, 2, 0, 0);
        let plan = plan_fires(
            &spec,
            Some(utc(2026, 5, 1, 0, 0)),
            utc(2026, 1, 1, 0, 0),
            now,
            CatchUp::Last,
            3600,
            10,
        );
        assert_eq!(plan.skipped.len(), MAX_LISTED_SKIPS);
        assert!(plan.more_skipped);
        assert_eq!(
            plan.skipped[0],
            (
                utc(2026, 5, 1, 0, 0) + TimeDelta::seconds(1),
                SkipReason::OutsideWindow
            )
        );
        // The most recent missed second, then the 61 on-time ones (60 s to 0 s late).
        assert_eq!(plan.fire.len(), 62);
        assert_eq!(
            plan.fire[0],
            (now - TimeDelta::seconds(61), FireKind::CaughtUp)
        );
        assert_eq!(
            plan.fire[1],
            (now - TimeDelta::seconds(60), FireKind::OnTime)
        );
        assert_eq!(plan.fire[61], (now, FireKind::OnTime));
        assert_eq!(plan.next, Some(now + TimeDelta::seconds(1)));
    }

    #[test]
    fn overlap_table() {
        use OverlapDecision::{Buffer, Fire, Skip};
        let table = [
            (Overlap::Skip, [Skip, Skip, Fire, Skip]),
            (Overlap::BufferOne, [Buffer, Skip, Fire, Skip]),
            (Overlap::Allow, [Fire, Fire, Fire, Fire]),
        ];
        let states = [(true, false), (true, true), (false, false), (false, true)];
        for (policy, expected) in table {
            for ((running, buffered), want) in states.into_iter().zip(expected) {
                assert_eq!(
                    overlap_decision(policy, running, buffered),
                    want,
                    "{policy:?} running={running} buffered={buffered}"
                );
            }
        }
        assert_eq!(Overlap::default(), DEFAULT_OVERLAP);
        assert_eq!(CatchUp::default(), DEFAULT_CATCH_UP);
        assert_eq!(
            serde_json::to_string(&Overlap::BufferOne).unwrap(),
            "\"buffer_one\""
        );
    }

    #[test]
    fn errors_say_what_is_wrong() {
        let message = |expr: &str| Spec::cron(expr, "UTC").unwrap_err().to_string();

        assert_eq!(
            message("0 0 9 * * 1-5"),
            "cron `0 0 9 * * 1-5` has 6 fields; a schedule takes 5: minute hour day-of-month \
             month day-of-week (seconds and years are not supported)"
        );
        assert!(message("0 0 9 * * * 2027").contains("has 7 fields"));
        assert_eq!(
            message("garbage"),
            "cron `garbage` has 1 field; a schedule takes 5: minute hour day-of-month month day-of-week"
        );
        assert_eq!(Spec::cron("  ", "UTC"), Err(ScheduleError::EmptyCron));

        let err = Spec::cron("61 * * * *", "UTC").unwrap_err();
        assert!(
            matches!(&err, ScheduleError::Field { field: "minute", value, .. } if value == "61"),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "cron `61 * * * *`: the minute field `61` is not valid (number out of bounds); minute takes 0-59"
        );
        assert!(message("0 24 * * *").contains("the hour field `24`"));
        assert!(message("*/0 * * * *").contains("(step cannot be zero)"));
        // Names belong to the month and day-of-week fields only.
        assert!(
            message("MON * * * *")
                .contains("the minute field `MON` is not valid (`M` does not belong in it)")
        );
        assert!(message("0 9 * * JAN").contains("the day-of-week field"));
        assert!(message("@reboot").contains("the nicknames are"));
        assert!(matches!(
            Spec::cron("0 0 30 2 *", "UTC"),
            Err(ScheduleError::NeverFires { .. })
        ));

        let zone = Spec::cron("0 9 * * *", "Europe/Lisbn").unwrap_err();
        assert_eq!(
            zone,
            ScheduleError::UnknownZone {
                name: "Europe/Lisbn".into(),
                suggestion: Some("Europe/Lisbon")
            }
        );
        assert_eq!(
            zone.to_string(),
            "unknown time zone `Europe/Lisbn`; did you mean `Europe/Lisbon`?"
        );
        assert!(matches!(
            Spec::cron("0 9 * * *", "Lisbon"),
            Err(ScheduleError::UnknownZone {
                suggestion: Some("Europe/Lisbon"),
                ..
            })
        ));
        assert!(matches!(
            Spec::cron("0 9 * * *", "utc"),
            Err(ScheduleError::UnknownZone {
                suggestion: Some("UTC"),
                ..
            })
        ));
        assert!(
            Spec::cron("0 9 * * *", "Mars/Olympus")
                .unwrap_err()
                .to_string()
                .contains("use an IANA name")
        );

        assert_eq!(
            Spec::every(0).unwrap_err().to_string(),
            "an interval must be at least 1 second"
        );
        assert!(
            Spec::every(MAX_PERIOD_SECS + 1)
                .unwrap_err()
                .to_string()
                .contains("at most 366 days")
        );
    }

    #[test]
    fn accepted_forms() {
        assert!(Spec::cron("@daily", "UTC").is_ok());
        assert!(Spec::cron("0 9 * JAN-MAR MON-FRI", "Etc/UTC").is_ok());
        assert!(Spec::cron("0 18 L * *", "Asia/Tokyo").is_ok());
        assert!(Spec::cron("0 9 * * 5L", "UTC").is_ok());
        let spec = cron("0 9 * * 1-5", "America/New_York");
        assert_eq!(spec.to_string(), "cron `0 9 * * 1-5` (America/New_York)");
        assert_eq!(
            dedupe_key("standup", utc(2026, 3, 9, 13, 0)),
            "schedule:standup:2026-03-09T13:00:00Z"
        );
    }

    #[test]
    fn extremes_do_not_panic() {
        let specs = [
            cron("* * * * *", "America/New_York"),
            Spec::every(1).unwrap(),
            Spec::Every { period_secs: 0 },
            Spec::Every {
                period_secs: u64::MAX,
            },
        ];
        for spec in &specs {
            for t in [
                DateTime::<Utc>::MIN_UTC,
                DateTime::<Utc>::MAX_UTC,
                utc(4999, 12, 31, 23, 59),
            ] {
                let _ = spec.next_after(t);
                let _ = spec.fires_between(t, DateTime::<Utc>::MAX_UTC, 3);
                let now = t.checked_add_signed(TimeDelta::hours(1)).unwrap_or(t);
                let _ = plan_fires(spec, Some(t), t, now, CatchUp::All, u64::MAX, usize::MAX);
                let _ = plan_fires(spec, None, DateTime::<Utc>::MIN_UTC, t, CatchUp::Last, 0, 0);
            }
        }
        assert_eq!(
            Spec::Every { period_secs: 0 }.next_after(utc(2026, 1, 1, 0, 0)),
            None
        );
        assert_eq!(specs[0].next_after(DateTime::<Utc>::MAX_UTC), None);
    }
}
