//! What a pool container is doing, as people read it: Docker's state, the runner's own health
//! report (read from the pool's health volume, pool/health.rs; or, for a container made by an
//! older ninetrix, the output of its Docker healthcheck), the restart budget, and why a stopped
//! container stopped. [`Condition::of`] decides from plain [`Facts`] without I/O; [`inspect`]
//! gathers the facts of one container from Docker, [`Facts::judge_report`] adds its report, and
//! [`inspect_with_health`] does both for one container. `ps` shows a condition, `invoke` refuses
//! or stops waiting on one that cannot answer.

use bollard::Docker;
use bollard::models::{ContainerInspectResponse, ContainerStateStatusEnum, HealthStatusEnum};
use bollard::query_parameters::LogsOptionsBuilder;
use futures_util::StreamExt as _;

use crate::objects::DURABLE;
use crate::pool::health::{self, Health};
use crate::pool::spec::{Liveness, MAX_RESTARTS};

/// What [`Condition::of`] needs to know about a container.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Facts {
    /// Running, restarting, restart count, last exit code.
    pub(crate) liveness: Liveness,
    /// Docker's state (`created`, `running`, `paused`, `exited`, `dead`, …), parsed once; on
    /// Swarm the nearest of them for a slot's task. `None` if Docker did not say.
    pub(crate) state: Option<ContainerStateStatusEnum>,
    /// The container is durable (restarted on failure) rather than a batch job.
    pub(crate) durable: bool,
    /// The kernel killed it for memory.
    pub(crate) oom_killed: bool,
    /// The health verdict, once known (a report judged, or a Docker healthcheck).
    pub(crate) health: Option<Health>,
    /// The runner's one-line reason (or the last Docker healthcheck's output).
    pub(crate) health_output: Option<String>,
    /// For a stopped container: the last error its process logged.
    pub(crate) last_error: Option<String>,
    /// When Docker last started it (Unix milliseconds).
    pub(crate) started_ms: Option<i64>,
    /// The runner's report says only that it cannot reach the checkpoint API: its words (see
    /// [`health::api_complaint`]).
    pub(crate) api_complaint: Option<String>,
    /// How full the thread's context is, from the runner's report.
    pub(crate) context: Option<ninetrix_proto::context::ContextUse>,
}

impl Facts {
    /// Whether the runner's health report should be read: it runs and no Docker healthcheck
    /// already gave a verdict.
    pub(crate) fn wants_report(&self) -> bool {
        self.liveness.running && self.health.is_none()
    }

    /// Sets the health of a running container from its runner's report (see
    /// [`health::verdict`]); a container that does not run, or whose Docker healthcheck already
    /// gave a verdict, is left as it is.
    pub(crate) fn judge_report(&mut self, seen: &health::Seen, now_ms: i64) {
        if !self.wants_report() {
            return;
        }
        let (verdict, line) = health::verdict(seen, self.started_ms, now_ms);
        self.health = Some(verdict);
        self.health_output = Some(line);
        self.api_complaint = health::api_complaint(seen, self.started_ms, now_ms);
        if let health::Seen::Report(r) = seen {
            self.context = r.context.clone();
        }
    }

    /// For `invoke`, which has just reached the checkpoint API itself: why a message would not be
    /// answered, or `None`. Like [`Condition::why_no_answer`], except that a runner whose only
    /// complaint is the API is not a reason to refuse: the message waits in the API, and the
    /// runner (which retries the API without end) takes it once it reconnects — after an API
    /// restart, typically within a second.
    pub(crate) fn why_no_answer_to_invoke(&self, who: &Who<'_>) -> Option<String> {
        match Condition::of(self) {
            Condition::Unhealthy { .. } if self.api_complaint.is_some() => None,
            other => other.why_no_answer(who),
        }
    }
}

/// A container's condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Condition {
    /// Running; healthy, or not (yet) checked. `note` is what the runner says it is doing.
    Serving {
        /// Docker's verdict (`None`: the image has no healthcheck).
        health: Option<Health>,
        /// `working on message 4`, `resuming turn 2`, … (`serving` is left out).
        note: Option<String>,
    },
    /// Running, but its healthcheck fails: a dependency is down (the runner waits it out).
    Unhealthy {
        /// The runner's reason, e.g. `model unreachable: connection refused at … (runtime.base_url)`.
        reason: String,
    },
    /// Paused by `docker pause`.
    Paused,
    /// Between two runs: Docker restarts it (within the budget).
    Restarting {
        /// Policy restarts so far.
        restarts: i64,
    },
    /// A durable agent that crashed through its whole restart budget: Docker will not restart
    /// it; only `ninetrix up` does.
    GaveUp {
        /// Restarts used.
        restarts: i64,
        /// Its last exit code.
        exit_code: i64,
        /// Killed for memory.
        oom: bool,
        /// The last error it logged.
        reason: Option<String>,
    },
    /// Stopped otherwise: a finished batch job, a stopped or fenced runner, a crash Docker does
    /// not restart (no policy), or OOM.
    Exited {
        /// Its exit code.
        exit_code: i64,
        /// Killed for memory.
        oom: bool,
        /// The last error it logged (for a non-zero exit).
        reason: Option<String>,
    },
    /// Created but never started.
    Created,
}

impl Condition {
    /// Decides the condition from the facts.
    pub(crate) fn of(f: &Facts) -> Condition {
        let live = f.liveness;
        if f.state == Some(ContainerStateStatusEnum::PAUSED) {
            return Condition::Paused;
        }
        if live.running {
            let output = f
                .health_output
                .as_deref()
                .map(first_line)
                .filter(|s| !s.is_empty());
            return match f.health {
                Some(Health::Unhealthy) => Condition::Unhealthy {
                    reason: output.unwrap_or_else(|| "its healthcheck fails".into()),
                },
                health => Condition::Serving {
                    health,
                    note: output.filter(|o| o != "serving" && health == Some(Health::Healthy)),
                },
            };
        }
        if live.restarting {
            return Condition::Restarting {
                restarts: live.restarts,
            };
        }
        if f.state == Some(ContainerStateStatusEnum::CREATED) {
            return Condition::Created;
        }
        let exit_code = live.exit_code.unwrap_or(-1);
        let reason = f.last_error.clone().filter(|_| exit_code != 0);
        if live.gave_up(f.durable) {
            Condition::GaveUp {
                restarts: live.restarts,
                exit_code,
                oom: f.oom_killed,
                reason,
            }
        } else {
            Condition::Exited {
                exit_code,
                oom: f.oom_killed,
                reason,
            }
        }
    }

    /// Whether the runner takes messages now or soon (running, or about to be restarted).
    pub(crate) fn answers(&self) -> bool {
        matches!(
            self,
            Condition::Serving { .. } | Condition::Restarting { .. }
        )
    }

    /// The healthcheck verdict, for `ps --json`.
    pub(crate) fn health(&self) -> Option<Health> {
        match self {
            Condition::Serving { health, .. } => *health,
            Condition::Unhealthy { .. } => Some(Health::Unhealthy),
            _ => None,
        }
    }

    /// The reason shown after the status, if there is one.
    pub(crate) fn reason(&self) -> Option<String> {
        match self {
            Condition::Serving { note, .. } => note.clone(),
            Condition::Unhealthy { reason } => Some(reason.clone()),
            Condition::GaveUp { reason, .. } | Condition::Exited { reason, .. } => reason.clone(),
            Condition::Paused | Condition::Restarting { .. } | Condition::Created => None,
        }
    }

    /// Docker's own status text (`Up 3 minutes (unhealthy)`, `Exited (1) 2 minutes ago`) with
    /// the health and the reason spelled out, Compose-style: `Up 3 minutes (unhealthy: model
    /// unreachable: …)`, `Exited (1) 2 minutes ago (gave up after 3 restarts: cannot claim …)`.
    pub(crate) fn status(&self, docker_status: &str) -> String {
        let base = strip_health(docker_status);
        let detail = match self {
            Condition::Serving { health, note } => match (health, note) {
                (Some(Health::Starting), _) => Some("health: starting".to_string()),
                (Some(Health::Healthy), Some(note)) => Some(format!("healthy: {note}")),
                (Some(Health::Healthy), None) => Some("healthy".to_string()),
                (_, _) => None,
            },
            Condition::Unhealthy { reason } => Some(format!("unhealthy: {reason}")),
            Condition::GaveUp {
                restarts,
                oom,
                reason,
                ..
            } => Some(join(
                format!(
                    "gave up after {restarts} restarts{}",
                    if *oom { ", OOM-killed" } else { "" }
                ),
                reason.as_deref(),
            )),
            Condition::Exited { oom, reason, .. } => match (oom, reason) {
                (true, r) => Some(join("OOM-killed".into(), r.as_deref())),
                (false, Some(r)) => Some(r.clone()),
                (false, None) => None,
            },
            Condition::Paused | Condition::Restarting { .. } | Condition::Created => None,
        };
        match detail {
            Some(d) => format!("{base} ({d})"),
            None => base.to_string(),
        }
    }

    /// For a condition in which the runner will not answer: what is wrong and the command that
    /// fixes it (`invoke` prints it).
    pub(crate) fn why_no_answer(&self, who: &Who<'_>) -> Option<String> {
        let Who {
            pool,
            agent,
            container,
            up,
        } = *who;
        let logs = format!("`ninetrix logs -p {pool} --agent {agent}`");
        let because = |reason: &Option<String>| {
            reason
                .as_deref()
                .map(|r| format!(": {r}"))
                .unwrap_or_default()
        };
        match self {
            Condition::Serving { .. } | Condition::Restarting { .. } => None,
            Condition::Unhealthy { reason } => Some(format!(
                "{container} is unhealthy: {reason}. It keeps retrying and answers once that is \
                 fixed; if the agentfile is wrong, fix it and run `{up}` (details: {logs})"
            )),
            Condition::Paused => Some(format!(
                "{container} is paused; `docker unpause {container}` resumes it"
            )),
            // Exit 2: the runner refused its configuration; a restart runs into it again.
            Condition::GaveUp {
                exit_code: CONFIG_EXIT,
                reason,
                ..
            }
            | Condition::Exited {
                exit_code: CONFIG_EXIT,
                reason,
                ..
            } => Some(format!(
                "{container} refused its configuration (exit {CONFIG_EXIT}){}; a restart does not \
                 fix that: fix what it names (the agentfile, or a secret or variable of this \
                 host), then run `{up}` (details: {logs})",
                because(reason)
            )),
            Condition::GaveUp {
                restarts, reason, ..
            } => Some(format!(
                "{container} gave up after {restarts} restarts{}; `{up}` starts it again \
                 (details: {logs})",
                because(reason)
            )),
            Condition::Exited {
                exit_code,
                oom,
                reason,
            } => Some(format!(
                "{container} is not running (exited with code {exit_code}{}{}); `{up}` starts it \
                 again (details: {logs})",
                if *oom { ", OOM-killed" } else { "" },
                because(reason)
            )),
            Condition::Created => Some(format!(
                "{container} was created but never started; `{up}` starts it"
            )),
        }
    }
}

/// The runner's exit code for a configuration error (a variable, a secret, the spec).
const CONFIG_EXIT: i64 = 2;

/// The `up` command a hint names: one that works wherever the user stands — with `-f` and the
/// agentfile `up` recorded for the pool (absolute), when it did.
pub(crate) fn up_command(pool: &str, agentfile: Option<&std::path::Path>) -> String {
    match agentfile {
        Some(file) => format!("ninetrix up -f {} -p {pool}", file.display()),
        None => format!("ninetrix up -p {pool}"),
    }
}

/// The container a condition belongs to, for the messages that name it and its fix.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Who<'a> {
    /// The pool.
    pub(crate) pool: &'a str,
    /// The agent.
    pub(crate) agent: &'a str,
    /// The container's name.
    pub(crate) container: &'a str,
    /// The command that starts the pool again ([`up_command`]).
    pub(crate) up: &'a str,
}

fn join(head: String, tail: Option<&str>) -> String {
    match tail {
        Some(t) => format!("{head}: {t}"),
        None => head,
    }
}

/// The first non-empty line, trimmed.
fn first_line(s: &str) -> String {
    s.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or_default()
        .to_string()
}

/// Docker's status text without its own health suffix (ours replaces it).
fn strip_health(status: &str) -> &str {
    for suffix in [" (healthy)", " (unhealthy)", " (health: starting)"] {
        if let Some(base) = status.strip_suffix(suffix) {
            return base;
        }
    }
    status
}

/// The last error a runner logged: its last `ERROR` line (the runner's log format), else the
/// last `error:` line (a configuration error), without the level.
pub(crate) fn last_error_in(logs: &str) -> Option<String> {
    logs.lines().rev().find_map(|line| {
        let line = line.trim();
        line.strip_prefix("ERROR ")
            .or_else(|| line.strip_prefix("error: "))
            .map(|rest| rest.trim().to_string())
    })
}

/// A container's facts by name (with its runner's health report when `with_health`); `None` if
/// it does not exist.
pub(crate) async fn of_container(
    docker: &bollard::Docker,
    container: &str,
    with_health: bool,
) -> anyhow::Result<Option<Facts>> {
    use anyhow::Context as _;
    match docker.inspect_container(container, None).await {
        Ok(info) if with_health => Ok(Some(inspect_with_health(docker, &info).await?)),
        Ok(info) => Ok(Some(inspect(docker, &info).await?)),
        Err(e) if crate::docker::is_not_found(&e) => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot inspect {container}")),
    }
}

/// The facts of a container from `docker inspect` (and, when it is stopped with a failure, its
/// last log lines).
pub(crate) async fn inspect(
    docker: &Docker,
    info: &ContainerInspectResponse,
) -> anyhow::Result<Facts> {
    let st = info.state.clone().unwrap_or_default();
    let durable = info
        .config
        .as_ref()
        .and_then(|c| c.labels.as_ref())
        .and_then(|l| l.get(DURABLE))
        .is_some_and(|v| v == "true");
    let liveness = Liveness::of(info);
    let health = st.health.as_ref().and_then(|h| match h.status {
        Some(HealthStatusEnum::STARTING) => Some(Health::Starting),
        Some(HealthStatusEnum::HEALTHY) => Some(Health::Healthy),
        Some(HealthStatusEnum::UNHEALTHY) => Some(Health::Unhealthy),
        _ => None,
    });
    let health_output = st
        .health
        .as_ref()
        .and_then(|h| h.log.as_ref())
        .and_then(|log| log.last())
        .and_then(|r| r.output.clone());
    let stopped_badly =
        !liveness.running && !liveness.restarting && liveness.exit_code.is_some_and(|c| c != 0);
    let last_error = match (&info.id, stopped_badly) {
        (Some(id), true) => last_error_in(&tail(docker, id, 20).await),
        _ => None,
    };
    Ok(Facts {
        liveness,
        state: st.status,
        durable,
        oom_killed: st.oom_killed.unwrap_or(false),
        health,
        health_output,
        last_error,
        started_ms: health::started_ms(info),
        api_complaint: None,
        context: None,
    })
}

/// The facts of one container, its runner's report included (one archive request when it runs).
pub(crate) async fn inspect_with_health(
    docker: &Docker,
    info: &ContainerInspectResponse,
) -> anyhow::Result<Facts> {
    let mut facts = inspect(docker, info).await?;
    if facts.wants_report() {
        let name = info
            .name
            .as_deref()
            .unwrap_or_default()
            .trim_start_matches('/');
        let id = info.id.as_deref().unwrap_or(name);
        let seen = health::read_one(docker, id, name).await;
        facts.judge_report(&seen, chrono::Utc::now().timestamp_millis());
    }
    Ok(facts)
}

/// The last `n` lines a container wrote (both streams); empty if they cannot be read.
async fn tail(docker: &Docker, id: &str, n: usize) -> String {
    let mut out = String::new();
    let mut logs = docker.logs(
        id,
        Some(
            LogsOptionsBuilder::default()
                .stdout(true)
                .stderr(true)
                .tail(&n.to_string())
                .build(),
        ),
    );
    while let Some(Ok(chunk)) = logs.next().await {
        out.push_str(&chunk.to_string());
    }
    out
}

/// How many restarts a durable agent has left, for progress lines.
pub(crate) fn restarts_left(restarts: i64) -> i64 {
    (MAX_RESTARTS - restarts).max(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const WHO: Who<'static> = Who {
        pool: "p",
        agent: "writer",
        container: "ninetrix-p-writer-1",
        up: "ninetrix up -p p",
    };

    fn running(health: Option<Health>, output: Option<&str>) -> Facts {
        Facts {
            liveness: Liveness {
                running: true,
                ..Liveness::default()
            },
            state: Some(ContainerStateStatusEnum::RUNNING),
            durable: true,
            health,
            health_output: output.map(str::to_string),
            ..Facts::default()
        }
    }

    fn exited(code: i64, restarts: i64, durable: bool) -> Facts {
        Facts {
            liveness: Liveness {
                restarts,
                exit_code: Some(code),
                ..Liveness::default()
            },
            state: Some(ContainerStateStatusEnum::EXITED),
            durable,
            last_error: Some("cannot claim thread 0193: the checkpoint API is unreachable".into()),
            ..Facts::default()
        }
    }

    #[test]
    fn a_failing_healthcheck_is_unhealthy_with_the_runners_reason() {
        let c = Condition::of(&running(
            Some(Health::Unhealthy),
            Some(
                "model unreachable: connection refused at http://172.18.0.1:9/v1 (runtime.base_url)\n",
            ),
        ));
        assert_eq!(
            c.status("Up 3 minutes (unhealthy)"),
            "Up 3 minutes (unhealthy: model unreachable: connection refused at http://172.18.0.1:9/v1 (runtime.base_url))"
        );
        assert!(!c.answers());
        assert_eq!(c.health(), Some(Health::Unhealthy));
        let why = c.why_no_answer(&WHO).unwrap();
        assert!(why.contains("unhealthy: model unreachable"), "{why}");
        assert!(why.contains("ninetrix up -p p"), "{why}");
        assert!(why.contains("`ninetrix logs -p p --agent writer`"), "{why}");
    }

    #[test]
    fn a_healthy_runner_shows_what_it_does_but_not_serving() {
        let busy = Condition::of(&running(
            Some(Health::Healthy),
            Some("working on message 4"),
        ));
        assert_eq!(
            busy.status("Up 2 minutes (healthy)"),
            "Up 2 minutes (healthy: working on message 4)"
        );
        let idle = Condition::of(&running(Some(Health::Healthy), Some("serving")));
        assert_eq!(
            idle.status("Up 2 minutes (healthy)"),
            "Up 2 minutes (healthy)"
        );
        let early = Condition::of(&running(Some(Health::Starting), None));
        assert_eq!(
            early.status("Up 1 second (health: starting)"),
            "Up 1 second (health: starting)"
        );
        let unchecked = Condition::of(&running(None, None));
        assert_eq!(unchecked.status("Up 1 second"), "Up 1 second");
        assert!(busy.answers() && idle.answers() && early.answers() && unchecked.answers());
        assert!(busy.why_no_answer(&WHO).is_none());
    }

    #[test]
    fn the_runners_report_decides_the_health_of_a_running_container_only() {
        use ninetrix_runner::health::{Activity, HealthReport};
        let now = 1_000_000;
        let sick = health::Seen::Report(HealthReport {
            context: None,
            activity: Activity::Serving,
            api: Some(
                "checkpoint API unreachable: connection refused (http://ninetrix-api:8080)".into(),
            ),
            model: None,
            mcp: Default::default(),
            failed_turns: None,
            sessions_waiting: None,
            written_ms: now - 1_000,
        });
        let mut f = running(None, None);
        f.started_ms = Some(now - 60_000);
        f.judge_report(&sick, now);
        let c = Condition::of(&f);
        assert_eq!(
            c,
            Condition::Unhealthy {
                reason: "checkpoint API unreachable: connection refused (http://ninetrix-api:8080)"
                    .into()
            }
        );
        assert!(!c.answers());
        // …but invoke, which reaches the API itself, queues: the runner takes the message once it
        // reconnects (after an API restart it has not noticed yet).
        assert_eq!(
            f.api_complaint.as_deref(),
            Some("checkpoint API unreachable: connection refused (http://ninetrix-api:8080)")
        );
        assert!(f.why_no_answer_to_invoke(&WHO).is_none());
        // A model that is down too, or a stale report, is still a refusal.
        let mut both = f.clone();
        let both_down = health::Seen::Report(HealthReport {
            context: None,
            activity: Activity::Serving,
            api: Some("checkpoint API unreachable".into()),
            model: Some("model unreachable".into()),
            mcp: Default::default(),
            failed_turns: None,
            sessions_waiting: None,
            written_ms: now - 1_000,
        });
        both.health = None;
        both.judge_report(&both_down, now);
        assert!(both.why_no_answer_to_invoke(&WHO).is_some());
        let mut stale = f.clone();
        let old = health::Seen::Report(HealthReport {
            context: None,
            activity: Activity::Serving,
            api: Some("checkpoint API unreachable".into()),
            model: None,
            mcp: Default::default(),
            failed_turns: None,
            sessions_waiting: None,
            written_ms: now - 61_000,
        });
        stale.started_ms = Some(now - 300_000);
        stale.health = None;
        stale.judge_report(&old, now);
        assert!(stale.why_no_answer_to_invoke(&WHO).is_some());
        // A Docker healthcheck's verdict (a container made by an older ninetrix) stands.
        let mut legacy = running(Some(Health::Healthy), Some("serving"));
        legacy.judge_report(&sick, now);
        assert_eq!(legacy.health, Some(Health::Healthy));
        // A stopped container has no health.
        let mut stopped = exited(1, 1, true);
        stopped.judge_report(&sick, now);
        assert_eq!(stopped.health, None);
        // Just started, nothing reported yet: starting, and it answers.
        let mut fresh = running(None, None);
        fresh.started_ms = Some(now - 2_000);
        fresh.judge_report(&health::Seen::Missing, now);
        let c = Condition::of(&fresh);
        assert_eq!(c.status("Up 2 seconds"), "Up 2 seconds (health: starting)");
        assert!(c.answers());
    }

    #[test]
    fn a_turn_being_stopped_shows_in_ps_as_the_runner_reports_it() {
        use ninetrix_runner::health::{Activity, HealthReport};
        let now = 1_000_000;
        let stopping = health::Seen::Report(HealthReport {
            context: None,
            activity: Activity::Stopping {
                turn: 3,
                by: "cancelled by ana".into(),
            },
            api: None,
            model: None,
            mcp: Default::default(),
            failed_turns: None,
            sessions_waiting: None,
            written_ms: now - 1_000,
        });
        let mut f = running(None, None);
        f.started_ms = Some(now - 60_000);
        f.judge_report(&stopping, now);
        let c = Condition::of(&f);
        // `ps`'s STATUS column and its `--json` reason.
        assert_eq!(
            c.status("Up 2 minutes"),
            "Up 2 minutes (healthy: stopping turn 3 (cancelled by ana))"
        );
        assert_eq!(
            c.reason().as_deref(),
            Some("stopping turn 3 (cancelled by ana)")
        );
        // A turn being stopped still answers: the next message is taken once it has stopped.
        assert!(c.answers() && f.why_no_answer_to_invoke(&WHO).is_none());
    }

    #[test]
    fn a_durable_agent_that_spent_its_budget_gave_up_and_says_why() {
        let c = Condition::of(&exited(1, MAX_RESTARTS, true));
        assert!(matches!(c, Condition::GaveUp { restarts: 3, .. }));
        assert_eq!(
            c.status("Exited (1) 2 minutes ago"),
            "Exited (1) 2 minutes ago (gave up after 3 restarts: cannot claim thread 0193: the checkpoint API is unreachable)"
        );
        assert!(!c.answers());
        let why = c.why_no_answer(&WHO).unwrap();
        assert!(
            why.starts_with("ninetrix-p-writer-1 gave up after 3 restarts"),
            "{why}"
        );
        assert!(why.contains("`ninetrix up -p p`"), "{why}");
    }

    #[test]
    fn other_stops_are_exits_with_their_reason_only_when_they_failed() {
        let batch = Condition::of(&exited(1, 0, false));
        assert!(matches!(batch, Condition::Exited { exit_code: 1, .. }));
        let mut clean = exited(0, 0, true);
        clean.last_error = None;
        let stopped = Condition::of(&clean);
        assert_eq!(
            stopped.status("Exited (0) 5 seconds ago"),
            "Exited (0) 5 seconds ago"
        );
        let mut oom = exited(137, 1, true);
        oom.oom_killed = true;
        oom.last_error = None;
        assert_eq!(
            Condition::of(&oom).status("Exited (137) 1 second ago"),
            "Exited (137) 1 second ago (OOM-killed)"
        );
    }

    #[test]
    fn restarting_paused_and_created_containers() {
        let mut f = exited(1, 1, true);
        f.liveness.restarting = true;
        f.state = Some(ContainerStateStatusEnum::RESTARTING);
        let c = Condition::of(&f);
        assert_eq!(c, Condition::Restarting { restarts: 1 });
        assert!(c.answers());
        f.liveness.restarting = false;
        f.state = Some(ContainerStateStatusEnum::CREATED);
        assert_eq!(Condition::of(&f), Condition::Created);
        f.state = Some(ContainerStateStatusEnum::PAUSED);
        assert_eq!(Condition::of(&f), Condition::Paused);
        assert_eq!(restarts_left(1), 2);
    }

    #[test]
    fn the_last_error_is_read_from_the_runner_log_format() {
        let logs = " INFO boot epoch 3\nERROR cannot claim thread x: refused\n INFO stopping\n";
        assert_eq!(
            last_error_in(logs).as_deref(),
            Some("cannot claim thread x: refused")
        );
        assert_eq!(
            last_error_in("error: AGENTFILE_API_URL is not set\n").as_deref(),
            Some("AGENTFILE_API_URL is not set")
        );
        assert_eq!(last_error_in(" INFO fine\n"), None);
    }

    #[test]
    fn hints_name_an_up_that_works_anywhere_and_a_configuration_error_is_not_restarted() {
        assert_eq!(
            up_command(
                "shop",
                Some(std::path::Path::new("/home/me/shop/agentfile.yaml"))
            ),
            "ninetrix up -f /home/me/shop/agentfile.yaml -p shop"
        );
        assert_eq!(up_command("shop", None), "ninetrix up -p shop");
        let who = Who {
            up: "ninetrix up -f /home/me/shop/agentfile.yaml -p p",
            ..WHO
        };
        let crashed = Condition::of(&exited(1, MAX_RESTARTS, true));
        let why = crashed.why_no_answer(&who).unwrap();
        assert!(
            why.contains("`ninetrix up -f /home/me/shop/agentfile.yaml -p p` starts it again"),
            "{why}"
        );
        let mut refused = exited(2, MAX_RESTARTS, true);
        refused.last_error =
            Some("secret OPENAI_API_KEY is missing (runtime.api_key_secret)".into());
        let why = Condition::of(&refused).why_no_answer(&who).unwrap();
        insta::assert_snapshot!("hint_for_a_configuration_error", why);
        assert!(!why.contains("starts it again"), "{why}");
        let once = exited(2, 0, true);
        let why = Condition::of(&once).why_no_answer(&who).unwrap();
        assert!(why.contains("a restart does not fix that"), "{why}");
    }
}
