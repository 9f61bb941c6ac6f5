//! What a pool on one host knows of background jobs (issue 40) outside the broker itself: which
//! agents have the job tools, what their restricted runners reach directly (the broker), and the
//! job containers the broker made (`ROLE=job`, labelled with their pool, agent and
//! `ninetrix_proto::jobs::labels`) as `ps`, `logs --job` and `down` see them. A job container
//! has no replica label: it is never a replica, never in the restart budget and never in `up`'s
//! plan (pool/observed.rs leaves it out with [`is_job`] and [`is_broker`]).
//!
//! Pure: decisions over listed containers; the Docker calls are in `status.rs`, `logs.rs` and
//! `down.rs`. The broker's container is `broker.rs`.

use bollard::models::{ContainerSummary, ContainerSummaryStateEnum};
use ninetrix_agentfile::{AgentSpec, Agentfile};
use ninetrix_proto::jobs::labels;
use serde::Serialize;

use crate::docker::{label, name};
use crate::objects::{AGENT, JOB_BROKER_ROLE, JOB_ROLE, POOL, ROLE};

/// The agents of `af` with the job tools, by name (what Swarm and `k8s render` refuse).
pub(crate) fn job_agents(af: &Agentfile) -> Vec<&str> {
    af.agents
        .iter()
        .filter(|a| a.has_job_tools())
        .map(|a| a.name.as_str())
        .collect()
}

/// What a runner of `spec` with `network.egress` reaches directly on its internal network (its
/// `NO_PROXY`): the local API and its sidecars (pool/egress_env.rs), and the pool's job broker
/// when it has the job tools (the broker joins that network).
pub(crate) fn direct_hosts(
    spec: &AgentSpec,
    pool: &str,
    api_url: &str,
    api_local: bool,
) -> Vec<String> {
    let mut hosts = crate::pool::egress_env::direct_hosts(spec, api_url, api_local);
    if spec.has_job_tools() {
        // The broker's container name is its host name (`jobs::config::url`).
        hosts.push(crate::jobs::config::container_name(pool));
    }
    hosts
}

/// How `ps` (AGENT column) and `logs` (prefix) name the job broker, as an egress proxy is
/// `egress:<agent>` (a `:` no agent name has).
pub(crate) const BROKER_SHOWN: &str = "jobs:broker";

/// Whether a listed container is a background job's.
pub(crate) fn is_job(c: &ContainerSummary) -> bool {
    label(c, ROLE) == Some(JOB_ROLE)
}

/// Whether a listed container is the pool's job broker.
pub(crate) fn is_broker(c: &ContainerSummary) -> bool {
    label(c, ROLE) == Some(JOB_BROKER_ROLE)
}

/// A job as `ps` (and `ps --json`) shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct JobShown {
    /// Its ID (16 hex digits).
    pub(crate) id: String,
    /// Its name (the model's, else its ID).
    pub(crate) name: String,
    /// `created`, `running` or `exited` (Docker's word otherwise: `paused`, `dead`, …).
    pub(crate) state: String,
    /// Its exit code, once it exited (from Docker's status line).
    pub(crate) exit_code: Option<i64>,
    /// The thread that started it.
    pub(crate) thread: Option<String>,
    /// When its container was created (RFC 3339).
    pub(crate) created: String,
}

/// A job container of a pool, as listed: its pool, agent, container and what `ps` shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Listed {
    /// The pool.
    pub(crate) pool: String,
    /// The agent that started it.
    pub(crate) agent: String,
    /// Docker's ID of the container.
    pub(crate) container_id: String,
    /// The container's name.
    pub(crate) container: String,
    /// Docker's status line (`Up 5 minutes`, `Exited (0) 2 hours ago`): state and age.
    pub(crate) status: String,
    /// Unix seconds of its creation (orders jobs of one name).
    pub(crate) created_secs: i64,
    /// The job.
    pub(crate) job: JobShown,
}

impl Listed {
    /// Reads a listed container; `None` if it is not a job's.
    pub(crate) fn of(c: &ContainerSummary) -> Option<Listed> {
        if !is_job(c) {
            return None;
        }
        let id = label(c, labels::ID).unwrap_or_default().to_string();
        let status = c.status.clone().unwrap_or_default();
        let state = match c.state {
            Some(ContainerSummaryStateEnum::CREATED) => "created".to_string(),
            Some(ContainerSummaryStateEnum::RUNNING) => "running".to_string(),
            Some(ContainerSummaryStateEnum::EXITED) => "exited".to_string(),
            Some(other) => other.to_string(),
            None => String::new(),
        };
        let exit_code = (state == "exited").then(|| exit_code_of(&status)).flatten();
        let created_secs = c.created.unwrap_or(0);
        let created = chrono::DateTime::from_timestamp(created_secs, 0)
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
            .unwrap_or_default();
        Some(Listed {
            pool: label(c, POOL).unwrap_or_default().to_string(),
            agent: label(c, AGENT).unwrap_or_default().to_string(),
            container_id: c.id.clone().unwrap_or_default(),
            container: name(c),
            status,
            created_secs,
            job: JobShown {
                name: label(c, labels::NAME)
                    .filter(|n| !n.is_empty())
                    .unwrap_or(&id)
                    .to_string(),
                id,
                state,
                exit_code,
                thread: label(c, labels::THREAD).map(str::to_string),
                created,
            },
        })
    }

    /// Whether its process runs (or is paused or restarting: it is not over).
    pub(crate) fn running(&self) -> bool {
        matches!(self.job.state.as_str(), "running" | "paused" | "restarting")
    }

    /// How `ps`'s CONTAINER column names it: `job:<name>`.
    pub(crate) fn shown_name(&self) -> String {
        format!("job:{}", self.job.name)
    }
}

/// The exit code in Docker's status line of an exited container (`Exited (137) 2 minutes ago`).
fn exit_code_of(status: &str) -> Option<i64> {
    let rest = status.strip_prefix("Exited (")?;
    rest.split(')').next()?.parse().ok()
}

/// Why `logs --job` found no job, or which of several it chose.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum JobsError {
    /// Nothing of the agent's jobs has that name or ID.
    #[error(
        "pool `{pool}` has no job `{wanted}` of agent `{agent}`; {}",
        known_jobs(.known)
    )]
    NoSuchJob {
        /// The pool.
        pool: String,
        /// The agent.
        agent: String,
        /// What was asked for.
        wanted: String,
        /// The agent's jobs: `name (id, state)`.
        known: Vec<String>,
    },
}

fn known_jobs(known: &[String]) -> String {
    if known.is_empty() {
        "it has no jobs (`ninetrix ps` lists a pool's jobs under their agent)".to_string()
    } else {
        format!("its jobs: {}", known.join(", "))
    }
}

/// The job `logs --agent AGENT --job WANTED` means among the pool's `jobs`: the one whose ID is
/// `wanted`, else the newest of those named `wanted`. With a note when several have that name.
pub(crate) fn pick<'a>(
    jobs: &'a [Listed],
    pool: &str,
    agent: &str,
    wanted: &str,
) -> Result<(&'a Listed, Option<String>), JobsError> {
    let mine: Vec<&Listed> = jobs
        .iter()
        .filter(|j| j.pool == pool && j.agent == agent)
        .collect();
    if let Some(j) = mine.iter().find(|j| j.job.id == wanted) {
        return Ok((j, None));
    }
    let mut named: Vec<&Listed> = mine
        .iter()
        .copied()
        .filter(|j| j.job.name == wanted)
        .collect();
    named.sort_by_key(|j| (j.created_secs, j.job.id.clone()));
    match named.as_slice() {
        [] => {
            let mut sorted = mine.clone();
            sorted.sort_by_key(|j| (j.job.name.clone(), j.created_secs));
            Err(JobsError::NoSuchJob {
                pool: pool.to_string(),
                agent: agent.to_string(),
                wanted: wanted.to_string(),
                known: sorted
                    .iter()
                    .map(|j| format!("{} ({}, {})", j.job.name, j.job.id, j.job.state))
                    .collect(),
            })
        }
        [one] => Ok((one, None)),
        [.., newest] => {
            let note = format!(
                "{} jobs of agent `{agent}` are named `{wanted}`; showing the newest, {} \
                 (created {}); name another by its ID: {}",
                named.len(),
                newest.job.id,
                newest.job.created,
                named
                    .iter()
                    .map(|j| j.job.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            Ok((newest, Some(note)))
        }
    }
}

/// What `down` does with a pool's job containers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum JobFate {
    /// Left as it is (`--keep-jobs`, or already stopped without `--purge`).
    Keep,
    /// Stopped (its container and output stay, for `logs --job`).
    Stop,
    /// Stopped and removed with its output (`--purge`).
    Remove,
}

/// What `down` does with one job container: `--purge` removes every job (its output too);
/// otherwise running jobs are stopped unless `keep_jobs`, and stopped ones stay.
/// (`--keep-jobs --purge` is refused by the command line.)
pub(crate) fn fate(running: bool, keep_jobs: bool, purge: bool) -> JobFate {
    if purge {
        JobFate::Remove
    } else if running && !keep_jobs {
        JobFate::Stop
    } else {
        JobFate::Keep
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn container(
        labels_: &[(&str, &str)],
        state: ContainerSummaryStateEnum,
        status: &str,
    ) -> ContainerSummary {
        ContainerSummary {
            id: Some("c0ffee".into()),
            names: Some(vec!["/ninetrix-p-job-0123456789abcdef".into()]),
            labels: Some(
                labels_
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            state: Some(state),
            status: Some(status.into()),
            created: Some(1_700_000_000),
            ..ContainerSummary::default()
        }
    }

    fn job(id: &str, name: &str, created: i64, state: ContainerSummaryStateEnum) -> Listed {
        let mut c = container(
            &[
                (POOL, "p"),
                (AGENT, "a"),
                (ROLE, JOB_ROLE),
                (labels::ID, id),
                (labels::NAME, name),
            ],
            state,
            "Exited (3) 2 minutes ago",
        );
        c.created = Some(created);
        Listed::of(&c).unwrap()
    }

    #[test]
    fn a_job_container_is_read_with_its_state_exit_code_and_age() {
        let c = container(
            &[
                (POOL, "p"),
                (AGENT, "a"),
                (ROLE, JOB_ROLE),
                (labels::ID, "0123456789abcdef"),
                (labels::NAME, "build"),
                (labels::THREAD, "t1"),
            ],
            ContainerSummaryStateEnum::EXITED,
            "Exited (137) 5 minutes ago",
        );
        let j = Listed::of(&c).unwrap();
        assert_eq!(j.shown_name(), "job:build");
        assert_eq!(j.job.state, "exited");
        assert_eq!(j.job.exit_code, Some(137));
        assert_eq!(j.job.thread.as_deref(), Some("t1"));
        assert_eq!(j.job.created, "2023-11-14T22:13:20Z");
        assert_eq!(j.status, "Exited (137) 5 minutes ago");
        assert!(!j.running());
        let up = container(
            &[(ROLE, JOB_ROLE), (labels::ID, "0123456789abcdef")],
            ContainerSummaryStateEnum::RUNNING,
            "Up 3 seconds",
        );
        let j = Listed::of(&up).unwrap();
        assert_eq!(j.job.exit_code, None);
        assert_eq!(j.job.name, "0123456789abcdef", "unnamed: its ID");
        assert!(j.running());
        let replica = container(
            &[(POOL, "p"), (AGENT, "a")],
            ContainerSummaryStateEnum::RUNNING,
            "Up",
        );
        assert!(Listed::of(&replica).is_none());
        assert!(!is_job(&replica) && !is_broker(&replica));
    }

    #[test]
    fn logs_job_takes_an_id_or_the_newest_of_a_name_and_names_what_exists() {
        use ContainerSummaryStateEnum::{EXITED, RUNNING};
        let jobs = vec![
            job("00000000000000aa", "build", 100, EXITED),
            job("00000000000000bb", "build", 200, RUNNING),
            job("00000000000000cc", "test", 150, EXITED),
        ];
        let (j, note) = pick(&jobs, "p", "a", "00000000000000aa").unwrap();
        assert_eq!((j.job.id.as_str(), note), ("00000000000000aa", None));
        let (j, note) = pick(&jobs, "p", "a", "test").unwrap();
        assert_eq!((j.job.id.as_str(), note), ("00000000000000cc", None));
        let (j, note) = pick(&jobs, "p", "a", "build").unwrap();
        assert_eq!(j.job.id, "00000000000000bb", "the newest");
        let note = note.unwrap();
        assert!(
            note.starts_with("2 jobs of agent `a` are named `build`; showing the newest"),
            "{note}"
        );
        let err = pick(&jobs, "p", "a", "deploy").unwrap_err().to_string();
        assert_eq!(
            err,
            "pool `p` has no job `deploy` of agent `a`; its jobs: build (00000000000000aa, \
             exited), build (00000000000000bb, running), test (00000000000000cc, exited)"
        );
        let err = pick(&jobs, "p", "b", "build").unwrap_err().to_string();
        assert!(
            err.starts_with("pool `p` has no job `build` of agent `b`; it has no jobs"),
            "{err}"
        );
    }

    #[test]
    fn down_stops_running_jobs_keeps_them_on_request_and_purge_removes_all() {
        assert_eq!(fate(true, false, false), JobFate::Stop);
        assert_eq!(fate(true, true, false), JobFate::Keep);
        assert_eq!(fate(false, false, false), JobFate::Keep, "output kept");
        assert_eq!(fate(false, false, true), JobFate::Remove);
        assert_eq!(fate(true, false, true), JobFate::Remove);
    }

    #[test]
    fn a_restricted_runner_with_jobs_reaches_the_broker_directly() {
        let mut af = ninetrix_agentfile::parse(
            "agentfile.yaml",
            "agents:\n  a:\n    runtime: { provider: openai, model: gpt-4o }\n    \
             network: { egress: [\"*.github.com\"] }\n  b:\n    \
             runtime: { provider: scripted, script: [hi] }\n",
        )
        .unwrap()
        .agentfile;
        assert!(job_agents(&af).is_empty());
        let plain = direct_hosts(&af.agents[0], "p", "http://ninetrix-api:8080", true);
        assert_eq!(plain, ["ninetrix-api"]);
        with_job_tools(&mut af.agents[0]);
        assert_eq!(job_agents(&af), ["a"]);
        assert_eq!(
            direct_hosts(&af.agents[0], "p", "http://ninetrix-api:8080", true),
            ["ninetrix-api", "ninetrix-p-jobs"]
        );
    }

    /// Gives `spec` the job tools (as `tools: [jobs]` would).
    pub(crate) fn with_job_tools(spec: &mut AgentSpec) {
        for name in ninetrix_agentfile::tools::JOB_TOOLS {
            let builtin =
                ninetrix_agentfile::tools::builtin(name).expect("a job tool is a builtin");
            spec.tools
                .push(ninetrix_agentfile::ToolSpec::builtin(builtin));
        }
    }
}
