//! What `ninetrix ps` shows of a pool on one host: its containers, found by label, each with its
//! [`Condition`] — Docker's status Compose-style with the health verdict and the runner's reason
//! (the runners' reports read in one request per pool) — restarts, exit code, OOM, and "gave up"
//! for a durable agent that used its whole restart budget; and the durable replicas the pool
//! file records that have no container. [`Row`] is also what a pool on Swarm is listed as
//! (`swarm/status.rs`).

use std::path::Path;

use bollard::Docker;
use serde::Serialize;

use crate::docker::{label, name};
use crate::pool::condition::{self, Condition};
use crate::pool::engine::pool_containers;
use crate::pool::health::{self, Health};
use crate::pool::jobs::{self, JobShown};

/// What `ps` was asked for.
#[derive(Clone, Debug, Default)]
pub(crate) struct StatusSettings {
    /// Only this pool.
    pub(crate) pool: Option<String>,
    /// Also finished batch jobs, `ninetrix run` containers and finished background jobs.
    pub(crate) all: bool,
}

/// One container (or, on Swarm, one replica slot's task) as `ps` shows it (also its `--json`
/// form).
#[derive(Debug, Serialize)]
pub(crate) struct Row {
    pub(crate) pool: Option<String>,
    pub(crate) agent: Option<String>,
    pub(crate) replica: Option<u32>,
    pub(crate) container: String,
    pub(crate) thread_id: Option<String>,
    /// Docker's state word (`running`, `exited`, `restarting`, …).
    pub(crate) state: Option<String>,
    /// Compose-style status with health and reason.
    pub(crate) status: String,
    /// The healthcheck's verdict, when the container runs and has one.
    pub(crate) health: Option<Health>,
    /// Why it is unhealthy or stopped, or what a healthy runner is doing.
    pub(crate) reason: Option<String>,
    /// Whether it takes messages now or after its restart.
    pub(crate) answers: bool,
    pub(crate) restarts: i64,
    pub(crate) exit_code: Option<i64>,
    pub(crate) oom_killed: bool,
    pub(crate) gave_up: bool,
    pub(crate) durable: bool,
    /// The Swarm node of the task (a pool on Swarm only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) node: Option<String>,
    /// How full the thread's context is: the last model round's input tokens, the window and
    /// their ratio, and the compactions so far (from the runner's report; `None` before its
    /// first round).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) context: Option<ContextShown>,
    /// What the replica's thread has spent on model calls, ever, as the checkpoint API counts
    /// it (`ps --json` only; `None` when the API could not be asked).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) spent_usd: Option<f64>,
    /// How the container is confined, as Docker reports it (`ps --json` only; one host).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) security: Option<SecurityShown>,
    /// For a background job's container (listed under its agent, never a replica): the job.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) job: Option<JobShown>,
}

/// A container's confinement as Docker has it (docs/security.md), for `ps --json`.
#[derive(Debug, Serialize)]
pub(crate) struct SecurityShown {
    /// `uid:gid` (empty: the image's user, root unless it says otherwise).
    pub(crate) user: String,
    /// Capabilities dropped (`ALL`) and added back.
    pub(crate) cap_drop: Vec<String>,
    pub(crate) cap_add: Vec<String>,
    pub(crate) no_new_privileges: bool,
    pub(crate) read_only_root: bool,
    pub(crate) pids_limit: Option<i64>,
    /// The container runtime (`runc` unless `runtime.isolation` chose another).
    pub(crate) runtime: String,
}

impl SecurityShown {
    /// What an inspected container has.
    pub(crate) fn of(info: &bollard::models::ContainerInspectResponse) -> Option<Self> {
        let hc = info.host_config.as_ref()?;
        Some(SecurityShown {
            user: info
                .config
                .as_ref()
                .and_then(|c| c.user.clone())
                .unwrap_or_default(),
            cap_drop: hc.cap_drop.clone().unwrap_or_default(),
            cap_add: hc.cap_add.clone().unwrap_or_default(),
            no_new_privileges: hc
                .security_opt
                .iter()
                .flatten()
                .any(|o| o.starts_with("no-new-privileges")),
            read_only_root: hc.readonly_rootfs.unwrap_or(false),
            pids_limit: hc.pids_limit.filter(|p| *p > 0),
            runtime: hc.runtime.clone().unwrap_or_else(|| "runc".into()),
        })
    }
}

/// A thread's context use as `ps --json` shows it.
#[derive(Debug, Serialize)]
pub(crate) struct ContextShown {
    pub(crate) input_tokens: u64,
    pub(crate) window: Option<u64>,
    /// `input_tokens / window`, when the window is known.
    pub(crate) used: Option<f64>,
    pub(crate) compactions: u64,
}

impl From<&ninetrix_proto::context::ContextUse> for ContextShown {
    fn from(c: &ninetrix_proto::context::ContextUse) -> Self {
        ContextShown {
            input_tokens: c.input_tokens,
            window: c.window,
            used: c.fraction().map(|f| (f * 1000.0).round() / 1000.0),
            compactions: c.compactions,
        }
    }
}

impl Row {
    /// The EXIT column: the code (with OOM) once the container stopped, else `-`.
    pub(crate) fn exit(&self) -> String {
        match (self.oom_killed, self.exit_code) {
            (true, Some(code)) => format!("{code} (OOM)"),
            (_, Some(code)) if self.state.as_deref() != Some("running") => code.to_string(),
            _ => "-".into(),
        }
    }

    /// The Swarm table's cells: the task, its node, then as for a container.
    pub(crate) fn swarm_cells(&self) -> [String; 8] {
        let [task, agent, replica, thread, restarts, exit, status] = self.cells();
        [
            task,
            agent,
            replica,
            self.node.clone().unwrap_or_default(),
            thread,
            restarts,
            exit,
            status,
        ]
    }

    /// The container table's cells (a job's container is `job:<name>`, without replica or
    /// restarts).
    pub(crate) fn cells(&self) -> [String; 7] {
        if let Some(job) = &self.job {
            return [
                format!("job:{}", job.name),
                self.agent.clone().unwrap_or_default(),
                "-".into(),
                self.thread_id.clone().unwrap_or_default(),
                "-".into(),
                self.exit(),
                self.status.clone(),
            ];
        }
        [
            self.container.clone(),
            self.agent.clone().unwrap_or_default(),
            self.replica
                .map_or_else(|| "null".into(), |r| r.to_string()),
            self.thread_id.clone().unwrap_or_default(),
            self.restarts.to_string(),
            self.exit(),
            self.status.clone(),
        ]
    }
}

/// Whether `ps` lists a container: running ones always, durable agents always (a stopped one is
/// news), batch jobs and `ninetrix run` containers that stopped only with `-a`.
fn listed(all: bool, durable: bool, run: bool, c: &Condition) -> bool {
    all || (durable && !run)
        || matches!(
            c,
            Condition::Serving { .. }
                | Condition::Unhealthy { .. }
                | Condition::Restarting { .. }
                | Condition::Paused
        )
}

/// The durable replicas a pool file records that have no container (removed by hand, say):
/// (agent, replica, thread), so `ps` shows them as missing rather than leaving them out.
/// `durable` says which agents are durable (batch jobs' containers come and go).
pub(crate) fn missing(
    state: &crate::pool::state::PoolState,
    present: &std::collections::BTreeSet<(String, u32)>,
    durable: impl Fn(&str) -> bool,
) -> Vec<(String, u32, String)> {
    let mut out = Vec::new();
    for (agent, replicas) in &state.agents {
        if !durable(agent) {
            continue;
        }
        for (n, r) in replicas {
            if !present.contains(&(agent.clone(), *n)) {
                out.push((agent.clone(), *n, r.thread_id.to_string()));
            }
        }
    }
    out
}

/// Which agents of a pool are durable: by its recorded agentfile when it can be read (quietly),
/// else by the pool's containers' labels.
fn durable_agents(
    state: &crate::pool::state::PoolState,
    containers: &[bollard::models::ContainerSummary],
) -> std::collections::BTreeSet<String> {
    if let Some(parsed) = state
        .agentfile
        .as_deref()
        .and_then(|f| ninetrix_agentfile::load(f).ok())
    {
        return parsed
            .agentfile
            .agents
            .iter()
            .filter(|a| a.execution.durability)
            .map(|a| a.name.clone())
            .collect();
    }
    containers
        .iter()
        .filter(|c| label(c, crate::objects::DURABLE) == Some("true"))
        .filter_map(|c| label(c, crate::objects::AGENT).map(str::to_string))
        .collect()
}

/// When `-p POOL` names a pool that has neither containers nor state: the message that says so
/// and lists the pools there are (the caller exits 1).
pub(crate) async fn unknown_pool(
    docker: &Docker,
    home: &Path,
    pool: &str,
) -> anyhow::Result<Option<String>> {
    // The pool file first: no Docker request for a pool this home knows.
    if crate::pool::state::exists(home, pool)
        || !pool_containers(docker, Some(pool)).await?.is_empty()
    {
        return Ok(None);
    }
    let mut known: std::collections::BTreeSet<String> =
        crate::pool::state::pools(home).into_iter().collect();
    for c in pool_containers(docker, None).await.unwrap_or_default() {
        if let Some(p) = label(&c, crate::objects::POOL) {
            known.insert(p.to_string());
        }
    }
    let known: Vec<String> = known.into_iter().collect();
    Ok(Some(crate::pool::down::no_pool(
        pool,
        &crate::pool::state::pools_dir(home),
        &known,
    )))
}

/// The rows of the pools on this host (`settings.pool`'s, or every pool with containers or
/// state here; pools on Swarm are left to it).
pub(crate) async fn rows(
    docker: &Docker,
    home: &Path,
    settings: &StatusSettings,
) -> anyhow::Result<Vec<Row>> {
    let containers = pool_containers(docker, settings.pool.as_deref()).await?;
    let mut missing_rows = Vec::new();
    let pools = match &settings.pool {
        Some(p) => vec![p.clone()],
        None => crate::pool::state::pools(home),
    };
    for pool in pools {
        let Ok(state) = crate::pool::state::read(home, &pool) else {
            continue;
        };
        // A pool on Swarm is Swarm's to list.
        if state.swarm.is_some() {
            continue;
        }
        let mine: Vec<bollard::models::ContainerSummary> = containers
            .iter()
            .filter(|c| label(c, crate::objects::POOL) == Some(pool.as_str()))
            .filter(|c| !jobs::is_job(c))
            .cloned()
            .collect();
        let present: std::collections::BTreeSet<(String, u32)> = mine
            .iter()
            .filter_map(|c| {
                Some((
                    label(c, crate::objects::AGENT)?.to_string(),
                    label(c, crate::objects::REPLICA)?.parse().ok()?,
                ))
            })
            .collect();
        let durable = durable_agents(&state, &mine);
        let up = crate::pool::condition::up_command(&pool, state.agentfile.as_deref());
        for (agent, replica, thread) in missing(&state, &present, |a| durable.contains(a)) {
            missing_rows.push(Row {
                pool: Some(pool.clone()),
                container: crate::objects::container_name(&pool, &agent, replica),
                agent: Some(agent),
                replica: Some(replica),
                thread_id: Some(thread),
                state: Some("missing".into()),
                status: format!("Missing (its container was removed; `{up}` creates it again)"),
                health: None,
                reason: Some("its container was removed".into()),
                answers: false,
                restarts: 0,
                exit_code: None,
                oom_killed: false,
                gave_up: false,
                durable: true,
                node: None,
                context: None,
                spent_usd: None,
                security: None,
                job: None,
            });
        }
    }
    let mut found = Vec::new();
    let mut securities = Vec::new();
    let mut job_rows = Vec::new();
    for c in containers {
        // A job's container is the broker's: listed under its agent, never judged as a replica.
        if let Some(listed) = jobs::Listed::of(&c) {
            if settings.all || listed.running() || listed.job.state == "created" {
                job_rows.push(job_row(listed));
            }
            continue;
        }
        let id = c.id.clone().unwrap_or_default();
        let info = match docker.inspect_container(&id, None).await {
            Ok(info) => info,
            // Removed between the list and the inspect.
            Err(e) if crate::docker::is_not_found(&e) => continue,
            Err(e) => return Err(e.into()),
        };
        let facts = condition::inspect(docker, &info).await?;
        securities.push(SecurityShown::of(&info));
        found.push((c, facts));
    }
    judge_reports(docker, &mut found).await;
    let mut rows = Vec::new();
    for ((c, facts), security) in found.into_iter().zip(securities) {
        let cond = Condition::of(&facts);
        let run = label(&c, crate::objects::RUN) == Some("true");
        if !listed(settings.all, facts.durable, run, &cond) {
            continue;
        }
        let owned = |key| label(&c, key).map(str::to_string);
        // The broker is no agent's: named by what it is, as an egress proxy is.
        let agent = if jobs::is_broker(&c) {
            Some(jobs::BROKER_SHOWN.to_string())
        } else {
            owned(crate::objects::AGENT)
        };
        rows.push(Row {
            pool: owned(crate::objects::POOL),
            agent,
            replica: label(&c, crate::objects::REPLICA).and_then(|r| r.parse().ok()),
            container: name(&c),
            thread_id: owned(crate::objects::THREAD),
            state: facts.state.map(|s| s.to_string()).filter(|s| !s.is_empty()),
            status: cond.status(c.status.as_deref().unwrap_or_default()),
            health: cond.health(),
            reason: cond.reason(),
            answers: cond.answers(),
            restarts: facts.liveness.restarts,
            exit_code: facts.liveness.exit_code,
            oom_killed: facts.oom_killed,
            gave_up: matches!(cond, Condition::GaveUp { .. }),
            durable: facts.durable,
            node: None,
            context: facts.context.as_ref().map(ContextShown::from),
            spent_usd: None,
            security,
            job: None,
        });
    }
    rows.extend(missing_rows);
    rows.extend(job_rows);
    Ok(rows)
}

/// A job's row: under its agent, its state and age as Docker says them (`Up 5 minutes`,
/// `Exited (0) 2 hours ago`); no replica, restarts or health of its own.
fn job_row(listed: jobs::Listed) -> Row {
    Row {
        pool: Some(listed.pool),
        agent: Some(listed.agent),
        replica: None,
        container: listed.container,
        thread_id: listed.job.thread.clone(),
        state: Some(listed.job.state.clone()),
        status: listed.status,
        health: None,
        reason: None,
        answers: false,
        restarts: 0,
        exit_code: listed.job.exit_code,
        oom_killed: false,
        gave_up: false,
        durable: false,
        node: None,
        context: None,
        spent_usd: None,
        security: None,
        job: Some(listed.job),
    }
}

/// How many running containers of a pool `ps` tries to read the pool's health reports through
/// (one that stops meanwhile fails the request).
const HEALTH_READ_TRIES: usize = 3;

/// Judges the health of every running runner from its report: one archive request per pool,
/// through one of its running containers (pool/health.rs), never one per container.
async fn judge_reports(
    docker: &bollard::Docker,
    found: &mut [(bollard::models::ContainerSummary, condition::Facts)],
) {
    // The broker writes no health report (its Docker state is its condition).
    let reports_health = |c: &bollard::models::ContainerSummary| !jobs::is_broker(c);
    let mut pools: Vec<String> = found
        .iter()
        .filter(|(c, f)| f.wants_report() && reports_health(c))
        .filter_map(|(c, _)| label(c, crate::objects::POOL).map(str::to_string))
        .collect();
    pools.sort();
    pools.dedup();
    for pool in pools {
        let through: Vec<String> = found
            .iter()
            .filter(|(c, f)| {
                f.wants_report()
                    && reports_health(c)
                    && label(c, crate::objects::POOL) == Some(pool.as_str())
            })
            .filter_map(|(c, _)| c.id.clone())
            .take(HEALTH_READ_TRIES)
            .collect();
        let mut reports = Err(anyhow::anyhow!("no running container"));
        for id in &through {
            reports = health::read_pool(docker, id).await;
            if reports.is_ok() {
                break;
            }
        }
        let now = chrono::Utc::now().timestamp_millis();
        for (c, facts) in found.iter_mut().filter(|(c, _)| {
            reports_health(c) && label(c, crate::objects::POOL) == Some(pool.as_str())
        }) {
            let seen = match &reports {
                Ok(r) => r.get(&name(c)).cloned().unwrap_or(health::Seen::Missing),
                Err(e) => health::Seen::Unreadable(format!(
                    "cannot read the pool's health reports: {e:#}"
                )),
            };
            facts.judge_report(&seen, now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_durable_replica_without_its_container_is_missing_and_a_batch_one_is_not() {
        use crate::pool::state::{PoolState, ReplicaState};
        let mut state = PoolState::default();
        for (agent, n, t) in [("writer", 1, 1u128), ("writer", 2, 2), ("job", 1, 3)] {
            state.agents.entry(agent.into()).or_default().insert(
                n,
                ReplicaState {
                    thread_id: ninetrix_proto::ThreadId::from(uuid::Uuid::from_u128(t)),
                    container_id: None,
                    config_hash: None,
                },
            );
        }
        let present = [("writer".to_string(), 1u32)].into();
        assert_eq!(
            missing(&state, &present, |a| a == "writer"),
            [(
                "writer".to_string(),
                2,
                "00000000-0000-0000-0000-000000000002".to_string()
            )]
        );
        assert!(missing(&state, &present, |_| false).is_empty());
    }

    #[test]
    fn exit_codes_show_only_once_stopped_with_oom() {
        let row = |state: &str, exit: Option<i64>, oom: bool| Row {
            pool: Some("p".into()),
            agent: Some("writer".into()),
            replica: Some(1),
            container: "ninetrix-p-writer-1".into(),
            thread_id: Some("t".into()),
            state: Some(state.into()),
            status: "Up".into(),
            health: None,
            reason: None,
            answers: true,
            restarts: 0,
            exit_code: exit,
            oom_killed: oom,
            gave_up: false,
            durable: true,
            node: None,
            context: None,
            spent_usd: None,
            security: None,
            job: None,
        };
        assert_eq!(row("running", Some(0), false).exit(), "-");
        assert_eq!(row("exited", Some(2), false).exit(), "2");
        assert_eq!(row("exited", Some(137), true).exit(), "137 (OOM)");
    }

    #[test]
    fn stopped_durable_agents_are_listed_without_all_finished_jobs_are_not() {
        let gave_up = Condition::GaveUp {
            restarts: 3,
            exit_code: 1,
            oom: false,
            reason: None,
        };
        let done = Condition::Exited {
            exit_code: 0,
            oom: false,
            reason: None,
        };
        let up = Condition::Serving {
            health: None,
            note: None,
        };
        assert!(listed(false, true, false, &gave_up));
        assert!(listed(false, true, false, &done), "a stopped durable agent");
        assert!(!listed(false, false, false, &done), "a finished batch job");
        assert!(
            !listed(false, true, true, &done),
            "a finished `ninetrix run`"
        );
        assert!(listed(false, false, false, &up));
        assert!(listed(true, false, true, &done));
    }

    #[test]
    fn a_background_job_is_a_row_under_its_agent_never_a_replica() {
        use crate::objects::{AGENT, JOB_ROLE, POOL, ROLE};
        use ninetrix_proto::jobs::labels;
        let c = bollard::models::ContainerSummary {
            id: Some("c1".into()),
            names: Some(vec!["/ninetrix-p-job-0123456789abcdef".into()]),
            labels: Some(
                [
                    (POOL, "p"),
                    (AGENT, "writer"),
                    (ROLE, JOB_ROLE),
                    (labels::ID, "0123456789abcdef"),
                    (labels::NAME, "build"),
                    (labels::THREAD, "t1"),
                    (labels::REPLICA, "1"),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ),
            state: Some(bollard::models::ContainerSummaryStateEnum::EXITED),
            status: Some("Exited (2) 3 minutes ago".into()),
            created: Some(1_700_000_000),
            ..Default::default()
        };
        let row = job_row(jobs::Listed::of(&c).unwrap());
        assert_eq!(row.replica, None);
        assert!(!row.durable && !row.gave_up && row.restarts == 0);
        assert_eq!(
            row.cells(),
            [
                "job:build",
                "writer",
                "-",
                "t1",
                "-",
                "2",
                "Exited (2) 3 minutes ago"
            ]
            .map(String::from)
        );
        let json = serde_json::to_value(&row).unwrap();
        assert_eq!(json["container"], "ninetrix-p-job-0123456789abcdef");
        assert_eq!(
            json["job"],
            serde_json::json!({
                "id": "0123456789abcdef",
                "name": "build",
                "state": "exited",
                "exit_code": 2,
                "thread": "t1",
                "created": "2023-11-14T22:13:20Z"
            })
        );
        // Not a replica the pool file should have a container for.
        let present: std::collections::BTreeSet<(String, u32)> = [c]
            .iter()
            .filter(|c| !jobs::is_job(c))
            .filter_map(|c| {
                Some((
                    label(c, AGENT)?.to_string(),
                    label(c, crate::objects::REPLICA)?.parse().ok()?,
                ))
            })
            .collect();
        assert!(present.is_empty());
    }
}
