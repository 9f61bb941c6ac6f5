//! The runner's health: what it is doing and which dependency is down, written to a small status
//! file (`AGENTFILE_HEALTH_FILE`, default `/run/ninetrix/health`) that `ninetrix health` — the
//! image's Docker HEALTHCHECK — reads and judges. The report is plain data ([`HealthReport`]);
//! [`judge`] is the pure decision `(report, now) -> (healthy, line)`; [`Health`] is the shared
//! handle the driver, the checkpoint store and the model update, which rewrites the file on every
//! change and every [`HEARTBEAT`] (a report older than [`STALE_AFTER`] means a stuck runner).
//!
//! It also tracks outages: a dependency that failed at least once and then answers yields one
//! `outage` trace event, emitted through the runner's event sink.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ninetrix_proto::events::{Dependency, Outage, TraceEvent};
use serde::{Deserialize, Serialize};

/// Where the report goes unless `AGENTFILE_HEALTH_FILE` says otherwise.
pub const DEFAULT_PATH: &str = "/run/ninetrix/health";
/// How often the report is rewritten even when nothing changed.
pub const HEARTBEAT: Duration = Duration::from_secs(10);
/// A report older than this means the runner stopped reporting (hung or gone).
pub const STALE_AFTER: Duration = Duration::from_secs(60);
/// A dependency failure is shown in the health only after this many failed attempts in a row…
pub const SHOW_AFTER_ATTEMPTS: u32 = 3;
/// …or once it has lasted this long (a single blip is not an outage).
pub const SHOW_AFTER: Duration = Duration::from_secs(10);
/// The thread is unhealthy once this many of its turns in a row failed.
pub const FAILED_TURNS: u32 = 3;
/// How much of a failed turn's reply the health line quotes.
const CAUSE_CHARS: usize = 200;

/// What the runner is doing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Activity {
    /// Claiming and restoring its thread.
    Starting,
    /// Idle, waiting for inbox messages.
    Serving,
    /// In a turn for an inbox message.
    Working {
        /// The inbox message's sequence number.
        seq: u64,
    },
    /// Finishing a turn a previous run of this thread left interrupted.
    Resuming {
        /// The turn number.
        turn: u64,
    },
    /// Running a batch job's task.
    Batch,
    /// A turn waits for people to decide these requests (approvals or questions).
    Waiting {
        /// The pending requests.
        approvals: Vec<ninetrix_proto::ApprovalId>,
    },
    /// A turn waits for collaborators' replies to the tasks it handed them.
    Delegating {
        /// The collaborators.
        agents: Vec<String>,
    },
    /// A model call waits for a slot of its pool-wide limiter (`runtime.limits`): every slot is
    /// taken, or the provider rate-limited the pool. A wait, not a failure: healthy.
    ModelSlot {
        /// What it waits for: `waiting for a model slot (openai: 8/8 in flight)`,
        /// `rate-limited by openai until 12:00:03`.
        wait: String,
    },
    /// A turn is being stopped (an interrupt or a cancel): the call in flight is given
    /// `execution.interrupt_grace` to finish.
    Stopping {
        /// The turn.
        turn: u64,
        /// `interrupted by message N` or `cancelled by NAME`.
        by: String,
    },
    /// Not a runner: an agent's egress proxy (`ninetrix egress-proxy --health-file`), reporting
    /// what it let through and what it refused, so `ps` shows refusals on the proxy's line.
    Proxying {
        /// `egress: 12 allowed, 2 refused (last: evil.example:443 from …)`.
        line: String,
    },
}

/// The report in the status file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthReport {
    /// What the runner is doing.
    pub activity: Activity,
    /// Set while the checkpoint API is failing: the line to show.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api: Option<String>,
    /// Set while the model is failing: the line to show.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// MCP servers that are down or lack tools the agentfile names: server → the line to show.
    /// The agent still serves (their tools answer with an error naming the server), so this is
    /// said, not judged unhealthy.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub mcp: BTreeMap<String, String>,
    /// The thread's turns that failed in a row since its last turn that succeeded (while this
    /// runner ran), with the last one's cause; `None`: the last turn succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_turns: Option<FailedTurns>,
    /// How full the thread's context is (its last model round's input against the window):
    /// `ps --json` shows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<ninetrix_proto::context::ContextUse>,
    /// The replica's sessions whose model calls wait for a slot of the pool's limits, as one
    /// line (`2 sessions waiting for a model slot (openai: 8/8 in flight)`): said, not judged —
    /// a wait is not a failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions_waiting: Option<String>,
    /// When this report was written, Unix milliseconds.
    pub written_ms: i64,
}

/// One session's wait for a model slot, shown in its replica's report while it lives.
pub struct SessionWait {
    health: Health,
    id: u64,
}

impl SessionWait {
    /// What the wait is for now (a new answer of the checkpoint API).
    pub fn update(&self, wait: String) {
        let changed = {
            let mut s = self.health.lock();
            s.session_waits.insert(self.id, wait.clone()) != Some(wait)
        };
        if changed {
            self.health.write();
        }
    }
}

impl Drop for SessionWait {
    fn drop(&mut self) {
        self.health.lock().session_waits.remove(&self.id);
        self.health.write();
    }
}

/// The line for the sessions' waits: how many, and what the newest waits for.
fn sessions_waiting(waits: &BTreeMap<u64, String>) -> Option<String> {
    let (_, newest) = waits.last_key_value()?;
    let n = waits.len();
    let sessions = if n == 1 { "session" } else { "sessions" };
    Some(format!("{n} {sessions} {newest}"))
}

/// Turns of the thread that failed in a row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailedTurns {
    /// How many.
    pub count: u32,
    /// The last one's reply (its cause), cut to a line.
    pub cause: String,
}

/// Judges a report at `now_ms` (Unix milliseconds): healthy or not, and the one line that says
/// why. A dependency down, [`FAILED_TURNS`] failed turns in a row or a stale report is
/// unhealthy; anything else is healthy and names the activity.
pub fn judge(report: &HealthReport, now_ms: i64) -> (bool, String) {
    let age = Duration::from_millis(u64::try_from(now_ms - report.written_ms).unwrap_or(0));
    if age > STALE_AFTER {
        return (
            false,
            format!("the runner has not reported for {} s", age.as_secs()),
        );
    }
    if let Some(api) = &report.api {
        return (false, api.clone());
    }
    if let Some(model) = &report.model {
        return (false, model.clone());
    }
    if let Some(failed) = report
        .failed_turns
        .as_ref()
        .filter(|f| f.count >= FAILED_TURNS)
    {
        return (
            false,
            format!("last {} turns failed: {}", failed.count, failed.cause),
        );
    }
    let mut line = match &report.activity {
        Activity::Starting => "starting: claiming the thread".to_string(),
        Activity::Serving => "serving".to_string(),
        Activity::Working { seq } => format!("working on message {seq}"),
        Activity::Resuming { turn } => format!("resuming turn {turn}"),
        Activity::Batch => "running its task".to_string(),
        Activity::Waiting { approvals } => {
            let ids: Vec<String> = approvals.iter().map(|id| id.to_string()).collect();
            format!("waiting for approval {}", ids.join(", "))
        }
        Activity::Delegating { agents } => {
            format!("waiting for collaborator {}", agents.join(", "))
        }
        Activity::ModelSlot { wait } => wait.clone(),
        Activity::Stopping { turn, by } => format!("stopping turn {turn} ({by})"),
        Activity::Proxying { line } => line.clone(),
    };
    for down in report.mcp.values() {
        line.push_str("; ");
        line.push_str(down);
    }
    if let Some(waiting) = &report.sessions_waiting {
        line.push_str("; ");
        line.push_str(waiting);
    }
    (true, line)
}

/// The run of failed turns after a turn that ended `ok` (or not, saying `reply`).
pub fn next_failed_turns(
    before: Option<&FailedTurns>,
    ok: bool,
    reply: &str,
) -> Option<FailedTurns> {
    if ok {
        return None;
    }
    let line = reply.lines().next().unwrap_or_default().trim();
    let cause = match line.char_indices().nth(CAUSE_CHARS) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line.to_string(),
    };
    Some(FailedTurns {
        count: before.map_or(0, |b| b.count).saturating_add(1),
        cause,
    })
}

/// Whether a dependency that has failed `attempts` times in a row for `lasting` is shown as down.
pub fn shows_as_down(attempts: u32, lasting: Duration) -> bool {
    attempts >= SHOW_AFTER_ATTEMPTS || lasting >= SHOW_AFTER
}

/// Why `ninetrix health` could not read a report.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// No file (yet).
    #[error("the runner has not reported yet (no {0})")]
    Missing(String),
    /// The file could not be read or parsed.
    #[error("cannot read the runner's health report {path}: {why}")]
    Unreadable {
        /// The file.
        path: String,
        /// Why.
        why: String,
    },
}

/// The status file's path: `AGENTFILE_HEALTH_FILE` if set, else [`DEFAULT_PATH`].
pub fn path_from_env() -> PathBuf {
    std::env::var_os(crate::launch::var::HEALTH_FILE)
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from(DEFAULT_PATH), PathBuf::from)
}

/// Reads a report.
pub fn read(path: &Path) -> Result<HealthReport, ReadError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ReadError::Missing(path.display().to_string()));
        }
        Err(e) => {
            return Err(ReadError::Unreadable {
                path: path.display().to_string(),
                why: e.to_string(),
            });
        }
    };
    serde_json::from_str(&text).map_err(|e| ReadError::Unreadable {
        path: path.display().to_string(),
        why: e.to_string(),
    })
}

/// A dependency failing now.
#[derive(Clone, Debug)]
struct Trouble {
    since: Instant,
    attempts: u32,
    /// The last failure, for the `outage` event.
    reason: String,
    /// The health line once it shows.
    line: String,
}

struct State {
    activity: Activity,
    failed_turns: Option<FailedTurns>,
    context: Option<ninetrix_proto::context::ContextUse>,
    /// MCP servers that are down (server → line).
    mcp: BTreeMap<String, String>,
    api: Option<Trouble>,
    model: Option<Trouble>,
    /// Where the runner's events go, once the thread is claimed.
    events: Option<Arc<dyn OutageSink>>,
    /// Outages that ended before there was an event sink (while claiming).
    pending: Vec<Outage>,
    /// The waits of this replica's sessions for a model slot (wait → what it waits for), newest
    /// key last.
    session_waits: BTreeMap<u64, String>,
    /// The key of the next session wait.
    next_wait: u64,
    /// The status file; `None`: not written (tests of the pure parts).
    path: Option<PathBuf>,
    /// A failed write was already logged.
    warned: bool,
}

/// Where health sends its `outage` events once the thread is claimed: the runner's event sender
/// (`events::Events` implements it). A trait here, so that health — which the checkpoint store
/// reports to — does not depend on the events module, which sends through that store.
pub trait OutageSink: Send + Sync {
    /// Sends one event (never blocks).
    fn emit(&self, event: TraceEvent);
}

/// The runner's shared health handle. Cloning shares it.
#[derive(Clone)]
pub struct Health {
    inner: Arc<Mutex<State>>,
}

impl std::fmt::Debug for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Health")
    }
}

impl Health {
    /// A handle writing to `path` (`None`: kept in memory only), starting in
    /// [`Activity::Starting`]. Call [`Health::heartbeat`] from within a Tokio runtime to keep the
    /// file fresh.
    pub fn new(path: Option<PathBuf>) -> Health {
        let health = Health {
            inner: Arc::new(Mutex::new(State {
                activity: Activity::Starting,
                failed_turns: None,
                context: None,
                mcp: BTreeMap::new(),
                session_waits: BTreeMap::new(),
                next_wait: 0,
                api: None,
                model: None,
                events: None,
                pending: Vec::new(),
                path,
                warned: false,
            })),
        };
        health.write();
        health
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Every update is a few assignments: a poisoned lock is still consistent.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Rewrites the report every [`HEARTBEAT`] until the runtime stops.
    pub fn heartbeat(&self) {
        let me = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(HEARTBEAT).await;
                me.write();
            }
        });
    }

    /// Sends outage events to `events` from now on (and those that ended before).
    pub fn attach(&self, events: impl OutageSink + 'static) {
        let events: Arc<dyn OutageSink> = Arc::new(events);
        let pending = {
            let mut s = self.lock();
            s.events = Some(events.clone());
            std::mem::take(&mut s.pending)
        };
        for outage in pending {
            events.emit(TraceEvent::Outage(outage));
        }
    }

    /// What the runner is doing now.
    pub fn activity(&self) -> Activity {
        self.lock().activity.clone()
    }

    /// Sets what the runner is doing.
    pub fn set(&self, activity: Activity) {
        let changed = {
            let mut s = self.lock();
            let changed = s.activity != activity;
            s.activity = activity;
            changed
        };
        if changed {
            self.write();
        }
    }

    /// Sets what the runner is doing to `activity` if it is doing `expected` now (a wait that
    /// ends puts back what it replaced, unless something else took over meanwhile).
    pub fn set_if(&self, expected: &Activity, activity: Activity) {
        let changed = {
            let mut s = self.lock();
            let changed = s.activity == *expected && s.activity != activity;
            if changed {
                s.activity = activity;
            }
            changed
        };
        if changed {
            self.write();
        }
    }

    /// A session of this replica waits for a model slot (`wait`: `waiting for a model slot
    /// (openai: 8/8 in flight)`): shown beside the replica's own activity until the returned
    /// [`SessionWait`] is dropped (its call got its slot, or stopped waiting).
    pub fn session_waiting(&self, wait: String) -> SessionWait {
        let id = {
            let mut s = self.lock();
            let id = s.next_wait;
            s.next_wait += 1;
            s.session_waits.insert(id, wait);
            id
        };
        self.write();
        SessionWait {
            health: self.clone(),
            id,
        }
    }

    /// Sets the MCP servers that are down (server → line); rewrites the report on a change.
    pub fn set_mcp(&self, down: BTreeMap<String, String>) {
        let changed = {
            let mut s = self.lock();
            let changed = s.mcp != down;
            s.mcp = down;
            changed
        };
        if changed {
            self.write();
        }
    }

    /// Sets the thread's context use. It changes every model round, so it does not rewrite the
    /// report by itself: it rides on the next write (the turn's end, the next activity, or the
    /// heartbeat).
    pub fn set_context(&self, context: Option<ninetrix_proto::context::ContextUse>) {
        self.lock().context = context;
    }

    /// Records how a turn of the thread ended: a success ends a run of failures; a failure
    /// (`reply` says why) adds to it. Rewrites the report on a change.
    pub fn turn_ended(&self, ok: bool, reply: &str) {
        let changed = {
            let mut s = self.lock();
            let before = s.failed_turns.clone();
            s.failed_turns = next_failed_turns(before.as_ref(), ok, reply);
            s.failed_turns != before
        };
        if changed {
            self.write();
        }
    }

    /// The current report (written at `now`).
    pub fn report(&self) -> HealthReport {
        let s = self.lock();
        let shown = |t: &Option<Trouble>| {
            t.as_ref()
                .filter(|t| shows_as_down(t.attempts, t.since.elapsed()))
                .map(|t| t.line.clone())
        };
        HealthReport {
            activity: s.activity.clone(),
            api: shown(&s.api),
            model: shown(&s.model),
            mcp: s.mcp.clone(),
            failed_turns: s.failed_turns.clone(),
            context: s.context.clone(),
            sessions_waiting: sessions_waiting(&s.session_waits),
            written_ms: chrono::Utc::now().timestamp_millis(),
        }
    }

    /// Records a failed attempt to reach `dependency`: `reason` for the event, `line` for the
    /// health report.
    pub fn failed(&self, dependency: Dependency, reason: &str, line: String) {
        let before = self.report();
        {
            let mut s = self.lock();
            let slot = match dependency {
                Dependency::Api => &mut s.api,
                Dependency::Model => &mut s.model,
            };
            match slot {
                Some(t) => {
                    t.attempts += 1;
                    t.reason = reason.to_string();
                    t.line = line;
                }
                None => {
                    *slot = Some(Trouble {
                        since: Instant::now(),
                        attempts: 1,
                        reason: reason.to_string(),
                        line,
                    })
                }
            }
        }
        let after = self.report();
        if (before.api, before.model) != (after.api, after.model) {
            self.write();
        }
    }

    /// Records that `dependency` answered: ends its outage, if there was one, with an `outage`
    /// event.
    pub fn answered(&self, dependency: Dependency) {
        let (outage, events) = {
            let mut s = self.lock();
            let slot = match dependency {
                Dependency::Api => &mut s.api,
                Dependency::Model => &mut s.model,
            };
            let Some(t) = slot.take() else {
                return;
            };
            let outage = Outage {
                dependency,
                reason: t.reason,
                attempts: t.attempts,
                duration_ms: t.since.elapsed().as_millis() as u64,
            };
            if s.events.is_none() {
                s.pending.push(outage);
                drop(s);
                self.write();
                return;
            }
            (outage, s.events.clone())
        };
        self.write();
        if let Some(events) = events {
            events.emit(TraceEvent::Outage(outage));
        }
    }

    /// Writes the report atomically (a temporary file renamed over the old one). A failure is
    /// logged once; health is diagnostics and never stops the runner.
    fn write(&self) {
        let report = self.report();
        let path = self.lock().path.clone();
        let Some(path) = path else { return };
        if let Err(e) = write_atomically(&path, &report) {
            let mut s = self.lock();
            if !s.warned {
                s.warned = true;
                tracing::warn!(
                    "cannot write the health report {}: {e}; `ninetrix health` will call this runner unhealthy (set AGENTFILE_HEALTH_FILE to a writable path)",
                    path.display()
                );
            }
        }
    }
}

fn write_atomically(path: &Path, report: &HealthReport) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let json = serde_json::to_vec(report).map_err(std::io::Error::other)?;
    std::fs::write(&tmp, json)?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(activity: Activity) -> HealthReport {
        HealthReport {
            activity,
            api: None,
            model: None,
            mcp: BTreeMap::new(),
            failed_turns: None,
            context: None,
            sessions_waiting: None,
            written_ms: 1_000_000,
        }
    }

    #[test]
    fn three_failed_turns_in_a_row_are_unhealthy_until_one_succeeds() {
        let why = "The model could not be called: HTTP 400: context too long";
        let mut run = None;
        let mut r = report(Activity::Serving);
        let now = r.written_ms + 1_000;
        for n in 1..=3 {
            run = next_failed_turns(run.as_ref(), false, why);
            r.failed_turns = run.clone();
            let (healthy, line) = judge(&r, now);
            assert_eq!(healthy, n < 3, "after {n} failed turns: {line}");
        }
        assert_eq!(
            judge(&r, now).1,
            "last 3 turns failed: The model could not be called: HTTP 400: context too long"
        );
        run = next_failed_turns(run.as_ref(), false, why);
        r.failed_turns = run.clone();
        assert!(judge(&r, now).1.starts_with("last 4 turns failed: "));
        r.failed_turns = next_failed_turns(run.as_ref(), true, "fine");
        assert_eq!(judge(&r, now), (true, "serving".into()));
        // A long cause is cut to one line of at most 200 characters.
        let long = next_failed_turns(None, false, &format!("{}\nmore", "x".repeat(500))).unwrap();
        assert_eq!(long.cause.chars().count(), 201);
        assert!(long.cause.ends_with('…'));
    }

    #[test]
    fn judging_names_the_activity_or_the_fault() {
        let now = 1_005_000;
        assert_eq!(
            judge(&report(Activity::Serving), now),
            (true, "serving".into())
        );
        assert_eq!(
            judge(&report(Activity::Working { seq: 4 }), now),
            (true, "working on message 4".into())
        );
        assert_eq!(
            judge(&report(Activity::Resuming { turn: 2 }), now),
            (true, "resuming turn 2".into())
        );
        let mut down = report(Activity::Working { seq: 1 });
        down.model = Some(
            "model unreachable: connection refused at http://h:9/v1 (runtime.base_url)".into(),
        );
        assert_eq!(
            judge(&down, now),
            (
                false,
                "model unreachable: connection refused at http://h:9/v1 (runtime.base_url)".into()
            )
        );
        // The API first: nothing can be stored while it is down.
        down.api = Some("checkpoint API unreachable: connection refused (http://api:8080)".into());
        assert!(
            judge(&down, now)
                .1
                .starts_with("checkpoint API unreachable")
        );
    }

    #[test]
    fn an_mcp_server_down_is_said_but_the_agent_stays_healthy() {
        let mut r = report(Activity::Serving);
        r.mcp.insert(
            "time".into(),
            "MCP server `time` unreachable: connection refused at http://mcp-time:8931/mcp".into(),
        );
        assert_eq!(
            judge(&r, r.written_ms + 1_000),
            (
                true,
                "serving; MCP server `time` unreachable: connection refused at \
                 http://mcp-time:8931/mcp"
                    .into()
            )
        );
    }

    #[test]
    fn a_call_waiting_for_a_model_slot_is_healthy_and_says_why() {
        let wait = ninetrix_proto::api::SlotWait::InFlight {
            in_flight: 8,
            max_in_flight: 8,
        };
        let r = report(Activity::ModelSlot {
            wait: wait.text("openai"),
        });
        assert_eq!(
            judge(&r, r.written_ms + 1_000),
            (
                true,
                "waiting for a model slot (openai: 8/8 in flight)".into()
            )
        );
        // The wait ends: what it replaced comes back, unless something else took over.
        let health = Health::new(None);
        health.set(Activity::Working { seq: 3 });
        let waiting = Activity::ModelSlot {
            wait: wait.text("openai"),
        };
        health.set(waiting.clone());
        health.set_if(&waiting, Activity::Working { seq: 3 });
        assert_eq!(health.activity(), Activity::Working { seq: 3 });
        health.set_if(&waiting, Activity::Serving);
        assert_eq!(health.activity(), Activity::Working { seq: 3 }, "not ours");
    }

    #[test]
    fn sessions_waiting_for_a_slot_show_beside_the_replicas_own_activity_while_they_wait() {
        let health = Health::new(None);
        health.set(Activity::Serving);
        let line = |h: &Health| {
            let r = h.report();
            judge(&r, r.written_ms)
        };
        let first =
            health.session_waiting("waiting for a model slot (openai: 8/8 in flight)".into());
        assert_eq!(
            line(&health),
            (
                true,
                "serving; 1 session waiting for a model slot (openai: 8/8 in flight)".into()
            )
        );
        let second =
            health.session_waiting("waiting for a model slot (openai: 8/8 in flight)".into());
        second.update("rate-limited by openai until 12:00:03".into());
        assert_eq!(
            line(&health),
            (
                true,
                "serving; 2 sessions rate-limited by openai until 12:00:03".into()
            )
        );
        drop(second);
        drop(first);
        assert_eq!(line(&health), (true, "serving".into()), "the waits ended");
    }

    #[test]
    fn a_stale_report_is_unhealthy() {
        let r = report(Activity::Serving);
        assert!(judge(&r, r.written_ms + 59_000).0);
        assert_eq!(
            judge(&r, r.written_ms + 75_000),
            (false, "the runner has not reported for 75 s".into())
        );
        // A clock that went backwards is not staleness.
        assert!(judge(&r, r.written_ms - 5_000).0);
    }

    #[test]
    fn a_blip_is_not_an_outage() {
        assert!(!shows_as_down(1, Duration::from_secs(1)));
        assert!(!shows_as_down(2, Duration::from_secs(9)));
        assert!(shows_as_down(3, Duration::from_millis(300)));
        assert!(shows_as_down(1, Duration::from_secs(10)));
    }

    #[tokio::test]
    async fn the_file_follows_failures_and_recovery() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/health");
        let health = Health::new(Some(path.clone()));
        assert_eq!(read(&path).unwrap().activity, Activity::Starting);
        health.set(Activity::Serving);
        for _ in 0..3 {
            health.failed(
                Dependency::Api,
                "connection refused",
                "checkpoint API unreachable: connection refused (http://x)".into(),
            );
        }
        let (healthy, line) = judge(&read(&path).unwrap(), chrono::Utc::now().timestamp_millis());
        assert!(!healthy);
        assert_eq!(
            line,
            "checkpoint API unreachable: connection refused (http://x)"
        );
        health.answered(Dependency::Api);
        let (healthy, line) = judge(&read(&path).unwrap(), chrono::Utc::now().timestamp_millis());
        assert!(healthy, "{line}");
        assert_eq!(line, "serving");
        // The outage ended before an event sink existed: it is kept for it.
        let pending = health.lock().pending.clone();
        assert_eq!(pending.len(), 1);
        assert_eq!(
            (pending[0].dependency, pending[0].attempts),
            (Dependency::Api, 3)
        );
        assert!(matches!(
            read(&dir.path().join("none")),
            Err(ReadError::Missing(_))
        ));
    }
}
