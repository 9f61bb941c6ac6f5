//! `ninetrix ps`: the pools' containers, found by label (so it works from any directory), each
//! with its [`Condition`]: Docker's status Compose-style with the health verdict and the runner's
//! reason (the runners' reports are read in one request per pool) (`Up 3 minutes (unhealthy: model unreachable: …)`), restarts, exit code, OOM, and "gave
//! up" for a durable agent that used its whole restart budget. A durable agent that is not running
//! is listed without `-a`: that is exactly what `ps` is for. Finished batch jobs need `-a`.
//! A pool on Swarm is listed by task (one row per replica slot: node, replacements after
//! failures, health), before the containers.

use std::process::ExitCode;

use clap::Args;
use serde::Serialize;

use bollard::models::TaskState;

use crate::backend::Backend;
use crate::cli::pool_name;
use crate::docker::{label, name};
use crate::pool::condition::{self, Condition};
use crate::pool::engine::pool_containers;
use crate::pool::health;
use crate::pool::health::Health;
use crate::pool::spec;

/// Arguments of `ninetrix ps`.
#[derive(Debug, Args)]
pub struct PsArgs {
    /// Only this pool.
    #[arg(short, long, value_name = "POOL", value_parser = pool_name)]
    pub pool: Option<String>,
    /// Also finished batch jobs and `ninetrix run` containers (durable agents that stopped are
    /// always listed).
    #[arg(short, long)]
    pub all: bool,
    /// As JSON.
    #[arg(long)]
    pub json: bool,
}

/// One container as `ps` shows it (also its `--json` form).
#[derive(Debug, Serialize)]
struct Row {
    pool: Option<String>,
    agent: Option<String>,
    replica: Option<u32>,
    container: String,
    thread_id: Option<String>,
    /// Docker's state word (`running`, `exited`, `restarting`, …).
    state: Option<String>,
    /// Compose-style status with health and reason.
    status: String,
    /// The healthcheck's verdict, when the container runs and has one.
    health: Option<Health>,
    /// Why it is unhealthy or stopped, or what a healthy runner is doing.
    reason: Option<String>,
    /// Whether it takes messages now or after its restart.
    answers: bool,
    restarts: i64,
    exit_code: Option<i64>,
    oom_killed: bool,
    gave_up: bool,
    durable: bool,
    /// The Swarm node of the task (a pool on Swarm only).
    #[serde(skip_serializing_if = "Option::is_none")]
    node: Option<String>,
}

impl Row {
    /// The EXIT column: the code (with OOM) once the container stopped, else `-`.
    fn exit(&self) -> String {
        match (self.oom_killed, self.exit_code) {
            (true, Some(code)) => format!("{code} (OOM)"),
            (_, Some(code)) if self.state.as_deref() != Some("running") => code.to_string(),
            _ => "-".into(),
        }
    }

    /// The Swarm table's cells: the task, its node, then as for a container.
    fn swarm_cells(&self) -> [String; 8] {
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

    fn cells(&self) -> [String; 7] {
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
        .filter(|c| label(c, crate::labels::DURABLE) == Some("true"))
        .filter_map(|c| label(c, crate::labels::AGENT).map(str::to_string))
        .collect()
}

/// Runs `ninetrix ps`.
pub(crate) async fn run(args: &PsArgs) -> anyhow::Result<ExitCode> {
    let docker = crate::docker::connect().await?;
    let home = crate::home::agentfile_home()?;
    let containers = pool_containers(&docker, args.pool.as_deref()).await?;
    if let Some(pool) = &args.pool
        && containers.is_empty()
        && !crate::pool::state::exists(&home, pool)
    {
        let mut known: std::collections::BTreeSet<String> =
            crate::pool::state::pools(&home).into_iter().collect();
        for c in pool_containers(&docker, None).await.unwrap_or_default() {
            if let Some(p) = label(&c, crate::labels::POOL) {
                known.insert(p.to_string());
            }
        }
        let known: Vec<String> = known.into_iter().collect();
        eprintln!(
            "{}",
            crate::pool::down::no_pool(pool, &crate::pool::state::pools_dir(&home), &known)
        );
        return Ok(ExitCode::from(crate::EXIT_FAILURE));
    }
    let mut missing_rows = Vec::new();
    let pools = match &args.pool {
        Some(p) => vec![p.clone()],
        None => crate::pool::state::pools(&home),
    };
    for pool in pools {
        let Ok(state) = crate::pool::state::read(&home, &pool) else {
            continue;
        };
        if Backend::of(&state) == Backend::Swarm {
            continue;
        }
        let mine: Vec<bollard::models::ContainerSummary> = containers
            .iter()
            .filter(|c| label(c, crate::labels::POOL) == Some(pool.as_str()))
            .cloned()
            .collect();
        let present: std::collections::BTreeSet<(String, u32)> = mine
            .iter()
            .filter_map(|c| {
                Some((
                    label(c, crate::labels::AGENT)?.to_string(),
                    label(c, crate::labels::REPLICA)?.parse().ok()?,
                ))
            })
            .collect();
        let durable = durable_agents(&state, &mine);
        let up = crate::pool::condition::up_command(&pool, state.agentfile.as_deref());
        for (agent, replica, thread) in missing(&state, &present, |a| durable.contains(a)) {
            missing_rows.push(Row {
                pool: Some(pool.clone()),
                container: spec::container_name(&pool, &agent, replica),
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
            });
        }
    }
    let mut found = Vec::new();
    for c in containers {
        let id = c.id.clone().unwrap_or_default();
        let info = match docker.inspect_container(&id, None).await {
            Ok(info) => info,
            // Removed between the list and the inspect.
            Err(e) if crate::docker::is_not_found(&e) => continue,
            Err(e) => return Err(e.into()),
        };
        let facts = condition::inspect(&docker, &info).await?;
        found.push((c, facts));
    }
    judge_reports(&docker, &mut found).await;
    let mut rows = Vec::new();
    for (c, facts) in found {
        let cond = Condition::of(&facts);
        let run = label(&c, crate::labels::RUN) == Some("true");
        if !listed(args.all, facts.durable, run, &cond) {
            continue;
        }
        let owned = |key| label(&c, key).map(str::to_string);
        rows.push(Row {
            pool: owned(crate::labels::POOL),
            agent: owned(crate::labels::AGENT),
            replica: label(&c, crate::labels::REPLICA).and_then(|r| r.parse().ok()),
            container: name(&c),
            thread_id: owned(crate::labels::THREAD),
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
        });
    }
    rows.extend(missing_rows);
    let swarm_rows = swarm_rows(&docker, args).await?;
    let on_swarm_only = args.pool.is_some() && !swarm_rows.is_empty();
    rows.sort_by(|a, b| {
        (&a.pool, &a.agent, a.replica, &a.container).cmp(&(
            &b.pool,
            &b.agent,
            b.replica,
            &b.container,
        ))
    });
    if args.json {
        rows.extend(swarm_rows);
        outln!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(ExitCode::SUCCESS);
    }
    if !swarm_rows.is_empty() {
        let header = [
            "TASK", "AGENT", "REPLICA", "NODE", "THREAD", "RESTARTS", "EXIT", "STATUS",
        ];
        let cells: Vec<[String; 8]> = swarm_rows.iter().map(Row::swarm_cells).collect();
        crate::output::text(&crate::ui::table::table(header, &cells));
        if on_swarm_only || rows.is_empty() {
            return Ok(ExitCode::SUCCESS);
        }
        outln!();
    }
    let header = [
        "CONTAINER",
        "AGENT",
        "REPLICA",
        "THREAD",
        "RESTARTS",
        "EXIT",
        "STATUS",
    ];
    let cells: Vec<[String; 7]> = rows.iter().map(Row::cells).collect();
    crate::output::text(&crate::ui::table::table(header, &cells));
    Ok(ExitCode::SUCCESS)
}

/// The tasks of the pools on Swarm (`-p`'s, or every pool of this home that `up --swarm` made),
/// one row per replica slot: its newest task, the node it runs on, how often Swarm replaced it
/// after a failure, its health (a task on this node), and its thread.
async fn swarm_rows(docker: &bollard::Docker, args: &PsArgs) -> anyhow::Result<Vec<Row>> {
    let home = crate::home::agentfile_home()?;
    let pools = match &args.pool {
        Some(p) => vec![p.clone()],
        None => crate::pool::state::pools(&home),
    };
    let mut rows = Vec::new();
    for pool in pools {
        let state = crate::pool::state::read(&home, &pool)?;
        if Backend::of(&state) != Backend::Swarm {
            continue;
        }
        let slots = match crate::swarm::observe::slots(docker, &pool, None).await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("warning: cannot read the tasks of pool {pool} on Swarm: {e:#}");
                continue;
            }
        };
        for view in slots {
            let facts = view.facts();
            let cond = Condition::of(&facts);
            let finished_job = !view.durable && view.state == Some(TaskState::COMPLETE);
            if finished_job && !args.all {
                continue;
            }
            // Swarm's word for the state, as `docker service ps` prints it.
            let word = view.state.map_or_else(String::new, |s| s.to_string());
            let status = match (&cond, &word[..], &view.error) {
                (_, "running", _) => cond.status("Up"),
                (Condition::GaveUp { .. }, state, _) => cond.status(state),
                (_, state, Some(err)) => format!("{state}: {err}"),
                (_, state, None) => state.to_string(),
            };
            rows.push(Row {
                pool: Some(pool.clone()),
                agent: Some(view.agent.clone()),
                replica: Some(view.slot),
                container: view.task_name(),
                thread_id: state
                    .agents
                    .get(&view.agent)
                    .and_then(|r| r.get(&view.slot))
                    .map(|r| r.thread_id.to_string()),
                state: Some(word.clone()),
                status,
                health: cond.health(),
                reason: cond.reason(),
                answers: cond.answers(),
                restarts: view.restarts,
                exit_code: view.exit_code,
                oom_killed: false,
                gave_up: matches!(cond, Condition::GaveUp { .. }),
                durable: view.durable,
                node: view.node.clone(),
            });
        }
    }
    Ok(rows)
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
    let mut pools: Vec<String> = found
        .iter()
        .filter(|(_, f)| f.wants_report())
        .filter_map(|(c, _)| label(c, crate::labels::POOL).map(str::to_string))
        .collect();
    pools.sort();
    pools.dedup();
    for pool in pools {
        let through: Vec<String> = found
            .iter()
            .filter(|(c, f)| {
                f.wants_report() && label(c, crate::labels::POOL) == Some(pool.as_str())
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
        for (c, facts) in found
            .iter_mut()
            .filter(|(c, _)| label(c, crate::labels::POOL) == Some(pool.as_str()))
        {
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
}
