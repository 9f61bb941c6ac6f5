//! What Swarm says about a pool's replicas: per agent and slot, the newest task (its node, state,
//! exit code and error), how many times the slot's task was replaced after a failure, and — for
//! a task on this node — its runner's health report. [`slot_facts`] turns a slot into the same
//! [`Facts`] a one-host container gives, so `ps` and `invoke` judge both alike ("gave up" is the
//! slot's task failed after its whole `max_attempts`).

use std::collections::{BTreeMap, HashMap};

use bollard::Docker;
use bollard::models::{ContainerStateStatusEnum, Task, TaskState};
use bollard::query_parameters::{ListNodesOptions, ListServicesOptions, ListTasksOptions};

use crate::objects::COMPONENT;
use crate::objects::SWARM_POOL;
use crate::objects::{AGENT, DURABLE};
use crate::pool::condition::Facts;
use crate::pool::health::{self, Seen};
use crate::pool::spec::{Liveness, MAX_RESTARTS};
use crate::swarm::spec::HEALTH_NAME;

/// One replica slot of an agent's service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SlotView {
    /// The agent.
    pub(crate) agent: String,
    /// The service's name.
    pub(crate) service: String,
    /// The slot (the replica number).
    pub(crate) slot: u32,
    /// A durable agent's service (a batch agent is a job).
    pub(crate) durable: bool,
    /// The node of the newest task (its hostname, else its ID).
    pub(crate) node: Option<String>,
    /// The newest task's state (`running`, `failed`, `starting`, …), if Swarm said.
    pub(crate) state: Option<TaskState>,
    /// Whether Swarm wants it running.
    pub(crate) desired_running: bool,
    /// Whether the slot is within the service's replicas (Swarm keeps such a slot filled: a
    /// task it shut down, for an update, is replaced).
    pub(crate) wanted: bool,
    /// Failed tasks replaced by a new one in this slot (Swarm keeps a few per slot).
    pub(crate) restarts: i64,
    /// The newest task's container exit code, once it stopped.
    pub(crate) exit_code: Option<i64>,
    /// Swarm's error for the newest task (`task: non-zero exit (1)`, …).
    pub(crate) error: Option<String>,
    /// The newest task's container ID.
    pub(crate) container_id: Option<String>,
    /// Its process's host PID, when it runs.
    pub(crate) pid: Option<i64>,
    /// When the newest task last changed state (Unix milliseconds).
    pub(crate) since_ms: Option<i64>,
    /// The runner's health report, when the task runs on this node.
    pub(crate) report: Option<Seen>,
    /// A sidecar MCP server's slot: Swarm restarts it whatever its exit and however often, so
    /// a task of it that stopped is always on its way back, never "gave up".
    pub(crate) always_restarted: bool,
}

impl SlotView {
    /// `ninetrix-<pool>-<agent>.<slot>`: the task's name as `docker service ps` shows it.
    pub(crate) fn task_name(&self) -> String {
        format!("{}.{}", self.service, self.slot)
    }

    /// [`SlotView::facts_at`] now.
    pub(crate) fn facts(&self) -> Facts {
        self.facts_at(chrono::Utc::now().timestamp_millis())
    }

    /// The same facts a one-host container gives at `now_ms`: running, "restarting" (a
    /// replacement task on its way after a failure), restarts, exit code, and the health its
    /// runner's report gives (a task on this node).
    pub(crate) fn facts_at(&self, now_ms: i64) -> Facts {
        let running = self.state == Some(TaskState::RUNNING);
        let on_its_way = self.desired_running
            && !running
            && matches!(
                self.state,
                Some(
                    TaskState::NEW
                        | TaskState::ALLOCATED
                        | TaskState::PENDING
                        | TaskState::ASSIGNED
                        | TaskState::ACCEPTED
                        | TaskState::PREPARING
                        | TaskState::READY
                        | TaskState::STARTING
                )
            );
        // A durable slot whose task just failed gets a new one while its budget lasts (Swarm's
        // `on-failure`, `max_attempts: 3`): it is restarting, not dead.
        // So is a slot whose task Swarm shut down (an update) while the slot is still wanted.
        let failed = matches!(self.state, Some(TaskState::FAILED | TaskState::REJECTED));
        let shut_down = self.state == Some(TaskState::SHUTDOWN) && self.wanted;
        let replacing = (self.always_restarted && !running && self.wanted)
            || (self.durable && ((failed && self.restarts < MAX_RESTARTS) || shut_down));
        let on_its_way = on_its_way || replacing;
        let mut facts = Facts {
            liveness: Liveness {
                running,
                // A task on its way (first start, update, replacement) will answer.
                restarting: on_its_way,
                restarts: self.restarts,
                exit_code: self.exit_code.or(running.then_some(0)),
            },
            state: Some(if on_its_way {
                ContainerStateStatusEnum::RESTARTING
            } else if running {
                ContainerStateStatusEnum::RUNNING
            } else {
                ContainerStateStatusEnum::EXITED
            }),
            durable: self.durable,
            oom_killed: false,
            health: None,
            health_output: None,
            last_error: self.error.clone().filter(|_| !running),
            started_ms: self.since_ms,
            api_complaint: None,
            context: None,
        };
        if let Some(seen) = &self.report
            && facts.wants_report()
        {
            facts.judge_report(seen, now_ms);
        }
        facts
    }
}

/// The tasks' state word.
fn state_of(t: &Task) -> Option<TaskState> {
    t.status.as_ref().and_then(|s| s.state)
}

/// When Swarm created the task, in nanoseconds (RFC 3339 strings with a varying number of
/// fraction digits do not sort as text).
pub(crate) fn created_ns(t: &Task) -> i64 {
    t.created_at
        .as_ref()
        .and_then(|d| chrono::DateTime::parse_from_rfc3339(&d.to_string()).ok())
        .and_then(|d| d.timestamp_nanos_opt())
        .unwrap_or(0)
}

/// The exit code in Swarm's error `task: non-zero exit (137)`.
fn exit_in(err: &str) -> Option<i64> {
    let (_, rest) = err.split_once("non-zero exit (")?;
    rest.split(')').next()?.parse().ok()
}

/// Reduces one slot's tasks (any order) to its view, given the agent's service facts; `None` for
/// no task.
pub(crate) fn slot_view(
    agent: &str,
    service: &str,
    durable: bool,
    slot: u32,
    tasks: &[Task],
    nodes: &HashMap<String, String>,
) -> Option<SlotView> {
    let mut sorted: Vec<&Task> = tasks.iter().collect();
    sorted.sort_by_key(|t| (created_ns(t), t.version.as_ref().and_then(|v| v.index)));
    let newest = *sorted.last()?;
    let failed = |t: &Task| matches!(state_of(t), Some(TaskState::FAILED | TaskState::REJECTED));
    let failures = sorted.iter().filter(|t| failed(t)).count() as i64;
    let newest_failed = failed(newest);
    let status = newest.status.clone().unwrap_or_default();
    let container = status.container_status.clone().unwrap_or_default();
    Some(SlotView {
        agent: agent.to_string(),
        service: service.to_string(),
        slot,
        durable,
        node: newest
            .node_id
            .as_ref()
            .map(|id| nodes.get(id).cloned().unwrap_or_else(|| id.clone())),
        state: state_of(newest),
        wanted: true,
        // A replacement waits out the restart delay with desired state `ready`.
        desired_running: matches!(
            newest.desired_state,
            Some(TaskState::RUNNING | TaskState::READY)
        ),
        restarts: if newest_failed {
            failures - 1
        } else {
            failures
        }
        .max(0),
        exit_code: container
            .exit_code
            .filter(|c| *c >= 0)
            .or_else(|| status.err.as_deref().and_then(exit_in))
            .filter(|_| state_of(newest) != Some(TaskState::RUNNING)),
        error: status.err.filter(|e| !e.is_empty()),
        container_id: container.container_id.filter(|c| !c.is_empty()),
        pid: container.pid.filter(|p| *p > 0),
        since_ms: status
            .timestamp
            .as_ref()
            .map(|t| t.to_string())
            .and_then(|t| {
                chrono::DateTime::parse_from_rfc3339(&t)
                    .ok()
                    .map(|t| t.timestamp_millis())
            }),
        report: None,
        always_restarted: false,
    })
}

/// An agent's service as the commands need it.
pub(crate) struct AgentServiceView {
    /// The service ID.
    pub(crate) id: String,
    /// Its name.
    pub(crate) name: String,
    /// The agent.
    pub(crate) agent: String,
    /// A durable agent's (a batch agent's is a job).
    pub(crate) durable: bool,
    /// Its replicas (0 for a job).
    pub(crate) replicas: i64,
    /// A sidecar MCP server's service (agent `mcp:<server>`), not a runner's.
    pub(crate) sidecar: bool,
}

/// The agents' services of `pool` (only `agent`'s when given), and its sidecar MCP servers'
/// (agent `mcp:<server>`), as `ps` and `logs` show them on one host.
pub(crate) async fn agent_services(
    docker: &Docker,
    pool: &str,
    agent: Option<&str>,
) -> anyhow::Result<Vec<AgentServiceView>> {
    let mut labels = vec![format!("{SWARM_POOL}={pool}")];
    if let Some(agent) = agent {
        labels.push(format!("{AGENT}={agent}"));
    }
    let services = docker
        .list_services(Some(ListServicesOptions {
            filters: Some([("label".to_string(), labels)].into()),
            ..ListServicesOptions::default()
        }))
        .await?;
    Ok(services
        .into_iter()
        .filter_map(|service| {
            let (id, spec) = (service.id?, service.spec?);
            let labels = spec.labels.unwrap_or_default();
            let sidecar = match labels.get(COMPONENT).map(String::as_str) {
                Some("runner") => false,
                Some("mcp") => true,
                _ => return None,
            };
            Some(AgentServiceView {
                sidecar,
                id,
                name: spec.name.unwrap_or_default(),
                agent: labels.get(AGENT).cloned().unwrap_or_default(),
                durable: labels.get(DURABLE).is_some_and(|d| d == "true"),
                replicas: spec
                    .mode
                    .and_then(|m| m.replicated)
                    .and_then(|r| r.replicas)
                    .unwrap_or(0),
            })
        })
        .collect())
}

/// Every slot of every agent of `pool` (or only `agent`'s), in agent then slot order, with the
/// health of the containers on this node.
pub(crate) async fn slots(
    docker: &Docker,
    pool: &str,
    agent: Option<&str>,
) -> anyhow::Result<Vec<SlotView>> {
    let services = agent_services(docker, pool, agent).await?;
    let nodes: HashMap<String, String> = docker
        .list_nodes(None::<ListNodesOptions>)
        .await
        .unwrap_or_default()
        .into_iter()
        .filter_map(|n| {
            Some((
                n.id?,
                n.description.and_then(|d| d.hostname).unwrap_or_default(),
            ))
        })
        .collect();
    let mut out = Vec::new();
    for service in services {
        let AgentServiceView {
            id,
            name,
            agent,
            durable,
            replicas,
            sidecar,
        } = service;
        let tasks = docker
            .list_tasks(Some(ListTasksOptions {
                filters: Some([("service".to_string(), vec![id])].into()),
            }))
            .await?;
        // A job's tasks have no slot: each is its own run, numbered in order of creation.
        let mut by_slot: BTreeMap<u32, Vec<Task>> = BTreeMap::new();
        let mut runs: Vec<Task> = Vec::new();
        for t in tasks {
            match t
                .slot
                .and_then(|s| u32::try_from(s).ok())
                .filter(|s| *s > 0)
            {
                Some(slot) => by_slot.entry(slot).or_default().push(t),
                None => runs.push(t),
            }
        }
        runs.sort_by_key(created_ns);
        for (i, t) in runs.into_iter().enumerate() {
            by_slot.insert(u32::try_from(i + 1).unwrap_or(u32::MAX), vec![t]);
        }
        for (slot, tasks) in by_slot {
            if let Some(mut view) = slot_view(&agent, &name, durable, slot, &tasks, &nodes) {
                view.wanted = i64::from(slot) <= replicas;
                view.always_restarted = sidecar;
                // A runner's task on this node: its report, read from its container.
                if !sidecar
                    && view.state == Some(TaskState::RUNNING)
                    && let Some(id) = &view.container_id
                    && docker.inspect_container(id, None).await.is_ok()
                {
                    view.report = Some(health::read_one(docker, id, HEALTH_NAME).await);
                }
                out.push(view);
            }
        }
    }
    out.sort_by(|a, b| (&a.agent, a.slot).cmp(&(&b.agent, b.slot)));
    Ok(out)
}

/// One slot's view, if the agent's service has a task in it.
pub(crate) async fn slot(
    docker: &Docker,
    pool: &str,
    agent: &str,
    slot: u32,
) -> anyhow::Result<Option<SlotView>> {
    Ok(slots(docker, pool, Some(agent))
        .await?
        .into_iter()
        .find(|s| s.slot == slot))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bollard::models::{ContainerStatus, ObjectVersion, TaskStatus};

    fn task(n: u64, state: TaskState, desired: TaskState, exit: Option<i64>) -> Task {
        Task {
            version: Some(ObjectVersion { index: Some(n) }),
            node_id: Some("n1".into()),
            desired_state: Some(desired),
            status: Some(TaskStatus {
                state: Some(state),
                container_status: Some(ContainerStatus {
                    container_id: Some(format!("c{n}")),
                    exit_code: exit,
                    ..ContainerStatus::default()
                }),
                err: exit
                    .filter(|c| *c != 0)
                    .map(|c| format!("task: non-zero exit ({c})")),
                ..TaskStatus::default()
            }),
            ..Task::default()
        }
    }

    fn view(tasks: &[Task]) -> SlotView {
        let nodes = [("n1".to_string(), "host-a".to_string())].into();
        slot_view("writer", "ninetrix-p-writer", true, 2, tasks, &nodes).unwrap()
    }

    #[test]
    fn a_replaced_task_counts_as_a_restart_and_the_newest_task_speaks_for_the_slot() {
        let v = view(&[
            task(1, TaskState::FAILED, TaskState::SHUTDOWN, Some(137)),
            task(2, TaskState::RUNNING, TaskState::RUNNING, None),
        ]);
        assert_eq!((v.restarts, v.state), (1, Some(TaskState::RUNNING)));
        assert_eq!(v.node.as_deref(), Some("host-a"));
        assert_eq!(v.task_name(), "ninetrix-p-writer.2");
        assert!(v.facts().liveness.running);
    }

    #[test]
    fn a_sidecar_that_failed_again_and_again_is_restarting_not_given_up() {
        let failed = |n| task(n, TaskState::FAILED, TaskState::SHUTDOWN, Some(1));
        let mut v = view(&[failed(1), failed(2), failed(3), failed(4), failed(5)]);
        v.always_restarted = true;
        let facts = v.facts();
        assert!(
            facts.liveness.restarting,
            "Swarm restarts it whatever its exit"
        );
        assert!(!facts.liveness.gave_up(true));
        assert_eq!(facts.state, Some(ContainerStateStatusEnum::RESTARTING));
    }

    #[test]
    fn a_slot_that_failed_after_its_whole_budget_gave_up() {
        let failed = |n| task(n, TaskState::FAILED, TaskState::SHUTDOWN, Some(1));
        let v = view(&[failed(1), failed(2), failed(3), failed(4)]);
        assert_eq!(v.restarts, 3);
        assert!(v.facts().liveness.gave_up(true));
        let v = view(&[failed(1), failed(2)]);
        assert!(!v.facts().liveness.gave_up(true), "budget left");
    }

    #[test]
    fn a_task_that_just_failed_with_budget_left_is_restarting_not_dead() {
        let mut killed = task(1, TaskState::FAILED, TaskState::SHUTDOWN, None);
        killed.status.as_mut().unwrap().err = Some("task: non-zero exit (137)".into());
        let v = view(&[killed]);
        assert_eq!(v.exit_code, Some(137), "read from Swarm's error");
        let facts = v.facts();
        assert!(facts.liveness.restarting, "Swarm replaces it");
        assert_eq!(exit_in("task: non-zero exit (2)"), Some(2));
        assert_eq!(exit_in("starting container failed"), None);
    }

    #[test]
    fn a_replacement_on_its_way_is_restarting() {
        let v = view(&[
            task(1, TaskState::FAILED, TaskState::SHUTDOWN, Some(137)),
            task(2, TaskState::PREPARING, TaskState::RUNNING, None),
        ]);
        let facts = v.facts();
        assert!(facts.liveness.restarting && !facts.liveness.running);
        assert_eq!(facts.state, Some(ContainerStateStatusEnum::RESTARTING));
    }

    #[test]
    fn a_replacement_waiting_out_the_restart_delay_is_restarting() {
        let v = view(&[
            task(1, TaskState::FAILED, TaskState::SHUTDOWN, Some(137)),
            task(2, TaskState::READY, TaskState::READY, None),
        ]);
        assert!(v.facts().liveness.restarting);
    }

    #[test]
    fn a_wanted_slot_whose_task_was_shut_down_for_an_update_is_restarting() {
        let mut v = view(&[task(1, TaskState::SHUTDOWN, TaskState::SHUTDOWN, Some(0))]);
        assert!(v.facts().liveness.restarting);
        v.wanted = false;
        assert!(!v.facts().liveness.restarting, "scaled away");
        let done = view(&[task(1, TaskState::COMPLETE, TaskState::SHUTDOWN, Some(0))]);
        assert!(
            !done.facts().liveness.restarting,
            "a runner that stopped by itself (fenced) is not replaced"
        );
    }

    #[test]
    fn a_task_stopped_by_an_update_is_not_a_failure() {
        let v = view(&[
            task(1, TaskState::SHUTDOWN, TaskState::SHUTDOWN, Some(0)),
            task(2, TaskState::RUNNING, TaskState::RUNNING, None),
        ]);
        assert_eq!(v.restarts, 0);
    }
}
