//! The runner's launch contract: the `AGENTFILE_*` variables a backend — one host
//! (`cli/src/pool/spec.rs`), Swarm (`cli/src/swarm/spec.rs`) or the Kubernetes renderer
//! (`cli/src/k8s/render.rs`) — gives a runner container, and the runner reads at boot
//! (`config`, `replica`). One type, written by [`Launch::to_vars`] and read by
//! [`Launch::from_vars`], so the backends and the runner cannot drift apart: each backend has a
//! round-trip test through this type.
//!
//! Not part of what a backend writes, but named here so every literal lives in one place: the
//! knobs a user may set on a runner process ([`var::TASK`], [`var::API_PATIENCE`], …) and the
//! secrets, which arrive as files under `/run/secrets` ([`var::RUNNER_TOKEN`],
//! [`var::AGENT_TOKEN`]).

use std::collections::HashMap;

use ninetrix_proto::ThreadId;
use ninetrix_proto::boots::Created;

/// A launch variable with a value the runner cannot use (the configuration's error, exit 2).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{name} is invalid: {why}")]
pub struct LaunchError {
    /// The variable.
    pub name: &'static str,
    /// Why.
    pub why: String,
}

/// The variable `name`, if set to something other than blanks.
fn get<'a>(vars: &'a HashMap<String, String>, name: &str) -> Option<&'a str> {
    vars.get(name)
        .map(String::as_str)
        .filter(|v| !v.trim().is_empty())
}

/// The variables' names.
pub mod var {
    /// The checkpoint API's base URL.
    pub const API_URL: &str = "AGENTFILE_API_URL";
    /// The thread the runner works on (absent: it asks the API for its replica's thread).
    pub const THREAD_ID: &str = "AGENTFILE_THREAD_ID";
    /// The pool (recorded at claim time; needed to ask for a replica's thread).
    pub const POOL: &str = "AGENTFILE_POOL";
    /// The agent's name (must match the spec's).
    pub const AGENT: &str = "AGENTFILE_AGENT";
    /// The replica number: 1 or more for a replica, 0 for a one-off `run`.
    pub const REPLICA: &str = "AGENTFILE_REPLICA";
    /// A StatefulSet pod's name (`<set>-<ordinal>`): the replica is the ordinal + 1.
    pub const POD_NAME: &str = "AGENTFILE_POD_NAME";
    /// The resolved agent spec, as JSON.
    pub const AGENT_SPEC: &str = "AGENTFILE_AGENT_SPEC";
    /// Where the file tools read and write.
    pub const WORKSPACE: &str = "AGENTFILE_WORKSPACE";
    /// The container: a new ID for each one a backend creates (a crash restart keeps it).
    pub const INSTANCE: &str = "AGENTFILE_INSTANCE";
    /// Why `ninetrix up` created the container (`new`, `recreate`).
    pub const CREATED: &str = "AGENTFILE_CREATED";
    /// Where the runner writes its health report.
    pub const HEALTH_FILE: &str = "AGENTFILE_HEALTH_FILE";
    /// A batch job's input, overriding `execution.task` (a user's knob).
    pub const TASK: &str = "AGENTFILE_TASK";
    /// Longest silence in a model's stream, in seconds (a user's knob).
    pub const STREAM_IDLE_TIMEOUT: &str = "AGENTFILE_STREAM_IDLE_TIMEOUT";
    /// How long an unreachable API is waited out, in seconds (a user's knob).
    pub const API_PATIENCE: &str = "AGENTFILE_API_PATIENCE";
    /// How many restarts a turn is resumed through (a user's knob).
    pub const TURN_RESTARTS: &str = "AGENTFILE_TURN_RESTARTS";
    /// The thread's runner token (a secret: environment or `/run/secrets/<name>`).
    pub const RUNNER_TOKEN: &str = "AGENTFILE_RUNNER_TOKEN";
    /// The agent token: asks for a replica's thread and serves sessions (a secret).
    pub const AGENT_TOKEN: &str = "AGENTFILE_AGENT_TOKEN";
    /// The pool's job broker (`http://…`), for an agent with the job tools.
    pub const JOBS_URL: &str = "AGENTFILE_JOBS_URL";
}

/// The workspace every backend mounts.
pub const WORKSPACE: &str = "/workspace";

/// Swarm's template for a task's slot, which Swarm fills in per task.
pub const SWARM_SLOT: &str = "{{.Task.Slot}}";

/// Which replica the runner is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Replica {
    /// This number (`AGENTFILE_REPLICA`): 1 or more for a replica, 0 for a one-off `run`.
    Number(u32),
    /// Swarm's task slot (`AGENTFILE_REPLICA={{.Task.Slot}}`), filled in by Swarm; read back as
    /// a number.
    SwarmSlot,
    /// A StatefulSet pod's ordinal + 1, from its name (`AGENTFILE_POD_NAME` from the downward
    /// API); read back as a number.
    PodOrdinal,
}

/// Which container the runner is in, so its boot events tell a crash restart (same container)
/// from a new container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Instance {
    /// This ID (`ninetrix up`: a new UUID per container it creates).
    Id(String),
    /// The pod's UID (the downward API): a container restarted in its pod keeps it, a new pod
    /// has another; read back as an ID.
    PodUid,
}

/// A variable's value as a backend writes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// This text (Swarm templates included: Swarm fills them in).
    Text(String),
    /// A field of the Kubernetes pod (`valueFrom.fieldRef.fieldPath`).
    PodField(&'static str),
}

/// One variable of the contract.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Var {
    /// Its name (one of [`var`]).
    pub name: &'static str,
    /// Its value.
    pub value: Value,
}

impl Var {
    /// `NAME=value`, as Docker and Swarm take environment; `None` for a pod field (only the
    /// Kubernetes renderer writes those).
    pub fn line(&self) -> Option<String> {
        match &self.value {
            Value::Text(v) => Some(format!("{}={v}", self.name)),
            Value::PodField(_) => None,
        }
    }
}

/// What a backend tells a runner container (everything but its secrets).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    /// The checkpoint API (`None`: a batch job that records nothing).
    pub api_url: Option<String>,
    /// The thread (`None`: the runner asks the API for its replica's thread).
    pub thread: Option<ThreadId>,
    /// The pool.
    pub pool: Option<String>,
    /// The agent's name.
    pub agent: Option<String>,
    /// Which replica.
    pub replica: Option<Replica>,
    /// The resolved agent spec, as JSON.
    pub spec: Option<String>,
    /// The workspace (the runner's default: [`WORKSPACE`]).
    pub workspace: Option<String>,
    /// Which container.
    pub instance: Option<Instance>,
    /// Why `ninetrix up` created the container.
    pub created: Option<Created>,
    /// Where the health report goes (the runner's default: `/run/ninetrix/health`).
    pub health_file: Option<String>,
    /// The pool's job broker, for an agent with the job tools (`None`: its job tools answer
    /// that this backend runs no jobs).
    pub jobs_url: Option<String>,
}

impl Launch {
    /// The variables, in the order every backend writes them (the agent's own `env:` and the
    /// host's telemetry variables go after them; `AGENTFILE_*` names are reserved, so nothing
    /// overrides these).
    pub fn to_vars(&self) -> Vec<Var> {
        let text = |name, v: &str| Var {
            name,
            value: Value::Text(v.to_string()),
        };
        let mut out = Vec::new();
        if let Some(pool) = &self.pool {
            out.push(text(var::POOL, pool));
        }
        if let Some(agent) = &self.agent {
            out.push(text(var::AGENT, agent));
        }
        if let Some(spec) = &self.spec {
            out.push(text(var::AGENT_SPEC, spec));
        }
        if let Some(w) = &self.workspace {
            out.push(text(var::WORKSPACE, w));
        }
        if let Some(h) = &self.health_file {
            out.push(text(var::HEALTH_FILE, h));
        }
        if let Some(url) = &self.api_url {
            out.push(text(var::API_URL, url));
        }
        if let Some(url) = &self.jobs_url {
            out.push(text(var::JOBS_URL, url));
        }
        match &self.replica {
            Some(Replica::Number(n)) => out.push(text(var::REPLICA, &n.to_string())),
            Some(Replica::SwarmSlot) => out.push(text(var::REPLICA, SWARM_SLOT)),
            Some(Replica::PodOrdinal) => out.push(Var {
                name: var::POD_NAME,
                value: Value::PodField("metadata.name"),
            }),
            None => {}
        }
        if let Some(thread) = &self.thread {
            out.push(text(var::THREAD_ID, &thread.to_string()));
        }
        match &self.instance {
            Some(Instance::Id(id)) => out.push(text(var::INSTANCE, id)),
            Some(Instance::PodUid) => out.push(Var {
                name: var::INSTANCE,
                value: Value::PodField("metadata.uid"),
            }),
            None => {}
        }
        if let Some(created) = self.created {
            out.push(text(var::CREATED, created.as_str()));
        }
        out
    }

    /// `NAME=value` lines for Docker and Swarm (which never write pod fields).
    pub fn to_lines(&self) -> Vec<String> {
        self.to_vars().iter().filter_map(Var::line).collect()
    }

    /// Reads the contract from a runner's environment, as the platform filled it in: a Swarm
    /// slot and a pod's ordinal arrive as [`Replica::Number`], a pod's UID as [`Instance::Id`].
    /// A blank variable counts as unset; a malformed one is a [`LaunchError`] naming it.
    pub fn from_vars(vars: &HashMap<String, String>) -> Result<Launch, LaunchError> {
        let trimmed = |name: &str| get(vars, name).map(str::trim);
        let api_url = match trimmed(var::API_URL) {
            None => None,
            Some(url) => {
                let url = url.trim_end_matches('/').to_string();
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(LaunchError {
                        name: var::API_URL,
                        why: format!("`{url}` is not an http(s) URL"),
                    });
                }
                Some(url)
            }
        };
        let thread = match trimmed(var::THREAD_ID) {
            None => None,
            Some(t) => Some(
                t.parse()
                    .map_err(|e: ninetrix_proto::ParseIdError| LaunchError {
                        name: var::THREAD_ID,
                        why: e.to_string(),
                    })?,
            ),
        };
        let replica = match (trimmed(var::REPLICA), trimmed(var::POD_NAME)) {
            (Some(r), _) => Some(Replica::Number(r.parse::<u32>().map_err(|_| {
                LaunchError {
                    name: var::REPLICA,
                    why: format!(
                        "`{r}` is not a replica number (1 or more; 0 for a run; Swarm's {SWARM_SLOT})"
                    ),
                }
            })?)),
            (None, Some(pod)) => Some(Replica::Number(replica_of_pod(pod).ok_or_else(|| {
                LaunchError {
                    name: var::POD_NAME,
                    why: format!(
                        "`{pod}` does not end in a StatefulSet ordinal (`<name>-<n>`); set {} instead",
                        var::REPLICA
                    ),
                }
            })?)),
            (None, None) => None,
        };
        let owned = |name: &str| trimmed(name).map(str::to_string);
        Ok(Launch {
            api_url,
            thread,
            pool: owned(var::POOL),
            agent: owned(var::AGENT),
            replica,
            // The spec as set (it is JSON; only its parser trims).
            spec: get_raw(vars, var::AGENT_SPEC),
            workspace: owned(var::WORKSPACE),
            instance: owned(var::INSTANCE).map(Instance::Id),
            created: trimmed(var::CREATED).map(Created::parse),
            health_file: owned(var::HEALTH_FILE),
            jobs_url: owned(var::JOBS_URL),
        })
    }
}

/// A variable as set (the spec is JSON; only its parser trims), unless blank.
fn get_raw(vars: &HashMap<String, String>, name: &str) -> Option<String> {
    get(vars, name).map(str::to_string)
}

/// The replica of a StatefulSet pod: its ordinal (the number after the last `-` of its name,
/// from 0) plus one.
pub fn replica_of_pod(name: &str) -> Option<u32> {
    let (_, ordinal) = name.rsplit_once('-')?;
    if ordinal.is_empty() || !ordinal.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    ordinal.parse::<u32>().ok()?.checked_add(1)
}

/// Test support for the backends' round-trip tests: the environment a platform hands the runner
/// from what a backend wrote, filling in what the platform fills in (Swarm's slot, a pod's name
/// and UID).
pub mod platform {
    use super::{SWARM_SLOT, Value, Var};
    use std::collections::HashMap;

    /// What the platform knows about the container it starts.
    #[derive(Clone, Debug, Default)]
    pub struct Filled<'a> {
        /// Swarm's `{{.Task.Slot}}`.
        pub slot: Option<u32>,
        /// The pod's `metadata.name`.
        pub pod_name: Option<&'a str>,
        /// The pod's `metadata.uid`.
        pub pod_uid: Option<&'a str>,
    }

    /// The environment the runner sees.
    pub fn environment(vars: &[Var], filled: &Filled) -> HashMap<String, String> {
        vars.iter()
            .filter_map(|v| {
                let value = match &v.value {
                    Value::Text(t) if t == SWARM_SLOT => filled.slot?.to_string(),
                    Value::Text(t) => t.clone(),
                    Value::PodField("metadata.name") => filled.pod_name?.to_string(),
                    Value::PodField("metadata.uid") => filled.pod_uid?.to_string(),
                    Value::PodField(_) => return None,
                };
                Some((v.name.to_string(), value))
            })
            .collect()
    }

    /// `NAME=value` lines (Docker's and Swarm's environment) as the runner sees them; later
    /// lines win, as in Docker.
    pub fn from_lines(lines: &[String]) -> HashMap<String, String> {
        lines
            .iter()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::platform::{Filled, environment};
    use super::*;

    fn full() -> Launch {
        Launch {
            api_url: Some("http://ninetrix-api:8080".into()),
            thread: Some(ThreadId::new_v7()),
            pool: Some("shop".into()),
            agent: Some("writer".into()),
            replica: Some(Replica::Number(2)),
            spec: Some(r#"{"name":"writer"}"#.into()),
            workspace: Some(WORKSPACE.into()),
            instance: Some(Instance::Id("0195-a".into())),
            created: Some(Created::Recreate),
            health_file: Some("/run/ninetrix/pool/x".into()),
            jobs_url: Some("http://ninetrix-p-jobs:7480".into()),
        }
    }

    #[test]
    fn what_a_backend_writes_the_runner_reads_back() {
        let launch = full();
        let env = environment(&launch.to_vars(), &Filled::default());
        assert_eq!(Launch::from_vars(&env).unwrap(), launch);
        let empty = Launch::from_vars(&HashMap::new()).unwrap();
        assert_eq!(empty.to_vars(), vec![]);
    }

    #[test]
    fn what_the_platform_fills_in_arrives_as_values() {
        let swarm = Launch {
            replica: Some(Replica::SwarmSlot),
            ..full()
        };
        let lines = swarm.to_lines();
        assert!(lines.contains(&"AGENTFILE_REPLICA={{.Task.Slot}}".to_string()));
        let env = environment(
            &swarm.to_vars(),
            &Filled {
                slot: Some(3),
                ..Filled::default()
            },
        );
        assert_eq!(
            Launch::from_vars(&env).unwrap().replica,
            Some(Replica::Number(3))
        );
        let pod = Launch {
            replica: Some(Replica::PodOrdinal),
            instance: Some(Instance::PodUid),
            ..full()
        };
        // A pod's fields are no `NAME=value` line.
        assert!(pod.to_lines().iter().all(|l| !l.starts_with(var::POD_NAME)));
        let env = environment(
            &pod.to_vars(),
            &Filled {
                pod_name: Some("shop-writer-0"),
                pod_uid: Some("uid-1"),
                ..Filled::default()
            },
        );
        let read = Launch::from_vars(&env).unwrap();
        assert_eq!(read.replica, Some(Replica::Number(1)));
        assert_eq!(read.instance, Some(Instance::Id("uid-1".into())));
    }

    #[test]
    fn malformed_values_are_named() {
        for (name, bad) in [
            (var::API_URL, "ftp://x"),
            (var::THREAD_ID, "nope"),
            (var::REPLICA, "two"),
            (var::POD_NAME, "writer"),
        ] {
            let env = HashMap::from([(name.to_string(), bad.to_string())]);
            let err = Launch::from_vars(&env).unwrap_err().to_string();
            assert!(err.contains(name), "{name}: {err}");
        }
        // Blank is unset.
        let env = HashMap::from([(var::REPLICA.to_string(), "  ".to_string())]);
        assert_eq!(Launch::from_vars(&env).unwrap().replica, None);
    }

    #[test]
    fn a_pods_replica_is_its_ordinal_plus_one() {
        assert_eq!(replica_of_pod("shop-writer-0"), Some(1));
        assert_eq!(replica_of_pod("a-b-12"), Some(13));
        for bad in [
            "writer",
            "writer-",
            "writer-x1",
            "writer-+1",
            "writer-4294967295",
        ] {
            assert_eq!(replica_of_pod(bad), None, "{bad}");
        }
    }
}
