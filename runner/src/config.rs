//! The runner's configuration: only environment variables (docs/design.md §3) and secrets from
//! `/run/secrets/<NAME>` or the environment. Anything missing or malformed is a [`ConfigError`]
//! that names the variable; the process exits 2.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ninetrix_agentfile::AgentSpec;
use ninetrix_proto::ThreadId;

use crate::launch::{Instance, Launch, Replica, var};

/// The directory of a replica's workspace that holds the workspaces of the sessions it serves
/// (`sessions/<thread>`): never part of the replica's own thread's snapshots.
pub const SESSIONS_DIR: &str = "sessions";

/// A configuration error: exit code 2.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A required variable is not set.
    #[error(
        "{0} is not set; the runner needs it (ninetrix sets it in the container; set it yourself when running `ninetrix runner` as a process)"
    )]
    Missing(&'static str),
    /// A variable has a bad value.
    #[error("{name} is invalid: {why}")]
    Invalid {
        /// The variable.
        name: &'static str,
        /// Why.
        why: String,
    },
    /// A secret the agent needs was found nowhere.
    #[error(
        "secret {0} was found neither in /run/secrets/{0} nor in the environment; provide it on the host (`ninetrix up` mounts it)"
    )]
    MissingSecret(String),
    /// A launch variable has a bad value.
    #[error(transparent)]
    Launch(#[from] crate::launch::LaunchError),
    /// The agentfile asks for a tool this image cannot run.
    #[error("{0}")]
    Unsupported(String),
}

/// A secret value that never prints.
#[derive(Clone)]
pub struct SecretValue(String);

impl SecretValue {
    /// Wraps a secret value (a token the API handed over).
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value, for the one place that sends it (an HTTP header).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Where the checkpoint API is and how to reach it.
#[derive(Clone, Debug)]
pub struct ApiAccess {
    /// Base URL, e.g. `http://ninetrix-api:8080`.
    pub url: String,
    /// The runner token of this thread.
    pub token: SecretValue,
}

/// Everything the runner needs.
#[derive(Clone, Debug)]
pub struct Config {
    /// The agent's resolved spec.
    pub spec: AgentSpec,
    /// The thread.
    pub thread_id: ThreadId,
    /// The checkpoint API; optional only for batch agents (then nothing is persisted).
    pub api: Option<ApiAccess>,
    /// Labels recorded at claim time.
    pub pool: Option<String>,
    /// The replica number.
    pub replica: Option<u32>,
    /// Where file tools may read and write.
    pub workspace: PathBuf,
    /// A batch job's input, overriding `execution.task` (`AGENTFILE_TASK`).
    pub task: Option<String>,
    /// Secrets by name (values never printed).
    pub secrets: HashMap<String, SecretValue>,
    /// Longest silence in a model's response stream before the call is abandoned and retried.
    pub stream_idle_timeout: Duration,
    /// How long the runner keeps retrying while the API is unreachable before exiting 1
    /// (`AGENTFILE_API_PATIENCE`, opt-in); `None`: it waits out any outage.
    pub api_patience: Option<Duration>,
    /// How many restarts a turn is resumed through before it is given up
    /// (`AGENTFILE_TURN_RESTARTS`, default [`crate::engine::TURN_RESTARTS`]).
    pub turn_restarts: u64,
    /// Where the runner writes its health report (`AGENTFILE_HEALTH_FILE`, default
    /// `/run/ninetrix/health`), read by `ninetrix health`.
    pub health_file: PathBuf,
    /// The agent token (`AGENTFILE_AGENT_TOKEN`, or the secret file `ninetrix up` provides):
    /// with it the replica also serves the agent's sessions it owns.
    pub agent_token: Option<SecretValue>,
    /// The session this runner serves, when it serves a session's thread (set by the replica for
    /// each session it takes; never from the environment).
    pub session: Option<String>,
    /// The container (`AGENTFILE_INSTANCE`: a new ID for each container `ninetrix up` creates)
    /// and why `up` created it (`AGENTFILE_CREATED`), recorded in the `boot` event so `trace`
    /// tells a crash restart from a recreate or a pool back after `down`.
    pub instance: Option<String>,
    /// Why `ninetrix up` created this container (`AGENTFILE_CREATED`).
    pub created: Option<ninetrix_proto::boots::Created>,
    /// Where the thread's OpenTelemetry spans go (set by `ninetrix runner` when an OTLP endpoint
    /// is configured; never from the environment here). `None`: no spans are built.
    pub telemetry: Option<crate::telemetry::Exporter>,
    /// The pool's job broker (`AGENTFILE_JOBS_URL`), for an agent with the job tools; `None`:
    /// its job tools answer that this pool runs no jobs.
    pub jobs_url: Option<String>,
    /// For a replay's scratch thread (set by `ninetrix replay`, never from the environment): the
    /// recorded turns its tool calls are answered from. `None`: an ordinary thread.
    pub replay: Option<std::sync::Arc<crate::recording::Replay>>,
}

/// Reads the configuration from the process environment and `/run/secrets`.
pub fn from_env() -> Result<Config, ConfigError> {
    let vars: HashMap<String, String> = std::env::vars().collect();
    from_vars(&vars, Path::new("/run/secrets"))
}

/// The variable `name`, if set to something other than blanks (as set: a task's text keeps its
/// spaces).
pub(crate) fn get<'a>(vars: &'a HashMap<String, String>, name: &str) -> Option<&'a str> {
    vars.get(name)
        .map(String::as_str)
        .filter(|v| !v.trim().is_empty())
}

/// A secret the runner may get either way: the variable `name`, else the file
/// `secrets_dir/<name>` (as `ninetrix up` and Swarm provide it), trimmed; `None` if neither
/// holds anything.
pub(crate) fn secret_var(
    vars: &HashMap<String, String>,
    secrets_dir: &Path,
    name: &str,
) -> Option<String> {
    get(vars, name).map(|v| v.trim().to_string()).or_else(|| {
        std::fs::read_to_string(secrets_dir.join(name))
            .ok()
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty())
    })
}

fn seconds(
    vars: &HashMap<String, String>,
    name: &'static str,
    default: u64,
) -> Result<Duration, ConfigError> {
    match get(vars, name) {
        None => Ok(Duration::from_secs(default)),
        Some(v) => v
            .trim()
            .parse::<u64>()
            .map(Duration::from_secs)
            .map_err(|_| ConfigError::Invalid {
                name,
                why: format!("`{v}` is not a number of seconds"),
            }),
    }
}

/// `AGENTFILE_API_PATIENCE`: how long the runner waits out an unreachable API before exiting 1
/// (`None`, the default: for as long as it takes).
pub fn api_patience(vars: &HashMap<String, String>) -> Result<Option<Duration>, ConfigError> {
    match get(vars, var::API_PATIENCE) {
        None => Ok(None),
        Some(_) => seconds(vars, var::API_PATIENCE, 0).map(Some),
    }
}

/// Reads the configuration from the given variables and secrets directory.
pub fn from_vars(
    vars: &HashMap<String, String>,
    secrets_dir: &Path,
) -> Result<Config, ConfigError> {
    let launch = Launch::from_vars(vars)?;
    let spec_json = launch.spec.ok_or(ConfigError::Missing(var::AGENT_SPEC))?;
    let spec: AgentSpec = serde_json::from_str(&spec_json).map_err(|e| ConfigError::Invalid {
        name: var::AGENT_SPEC,
        why: format!("not a resolved agent spec: {e}"),
    })?;
    let thread_id = launch.thread.ok_or(ConfigError::Missing(var::THREAD_ID))?;
    // The tokens come from the environment or, as `ninetrix up` provides them, secret files.
    let token = secret_var(vars, secrets_dir, var::RUNNER_TOKEN);
    let agent_token = secret_var(vars, secrets_dir, var::AGENT_TOKEN).map(SecretValue);
    let api = match (launch.api_url, token) {
        (Some(url), Some(token)) => Some(ApiAccess {
            url,
            token: SecretValue(token.trim().to_string()),
        }),
        (Some(_), None) => return Err(ConfigError::Missing(var::RUNNER_TOKEN)),
        (None, _) if spec.execution.durability => {
            return Err(ConfigError::Missing(var::API_URL));
        }
        (None, _) => None,
    };
    if let Some(agent) = &launch.agent
        && *agent != spec.name
    {
        return Err(ConfigError::Invalid {
            name: var::AGENT,
            why: format!("`{agent}` does not match the spec's agent `{}`", spec.name),
        });
    }
    let replica = match launch.replica {
        Some(Replica::Number(n)) => Some(n),
        // Only a backend writes these; what the runner reads is a number.
        Some(Replica::SwarmSlot | Replica::PodOrdinal) | None => None,
    };
    let mut secrets = HashMap::new();
    for name in &spec.secrets {
        let from_file = std::fs::read_to_string(secrets_dir.join(name))
            .ok()
            .map(|v| v.trim_end_matches(['\n', '\r']).to_string());
        match from_file
            .or_else(|| vars.get(name).cloned())
            .filter(|v| !v.is_empty())
        {
            Some(value) => {
                secrets.insert(name.clone(), SecretValue(value));
            }
            None => return Err(ConfigError::MissingSecret(name.clone())),
        }
    }
    if spec.tools.iter().any(|t| t.name == "shell") && !Path::new("/bin/sh").exists() {
        return Err(ConfigError::Unsupported(format!(
            "agent `{}` lists the `shell` tool, but this image has no /bin/sh; set `runtime.image` to a base image with a shell, or remove `shell` from its tools",
            spec.name
        )));
    }
    Ok(Config {
        thread_id,
        api,
        pool: launch.pool,
        replica,
        workspace: PathBuf::from(
            launch
                .workspace
                .as_deref()
                .unwrap_or(crate::launch::WORKSPACE),
        ),
        task: get(vars, var::TASK).map(str::to_string),
        stream_idle_timeout: seconds(vars, var::STREAM_IDLE_TIMEOUT, 120)?,
        api_patience: api_patience(vars)?,
        turn_restarts: match get(vars, var::TURN_RESTARTS) {
            None => crate::engine::TURN_RESTARTS,
            Some(v) => v.trim().parse().map_err(|_| ConfigError::Invalid {
                name: var::TURN_RESTARTS,
                why: format!("`{v}` is not a whole number of restarts"),
            })?,
        },
        health_file: PathBuf::from(
            launch
                .health_file
                .as_deref()
                .unwrap_or(crate::health::DEFAULT_PATH),
        ),
        secrets,
        spec,
        agent_token,
        session: None,
        // Read back from the environment, an instance is always an ID.
        instance: launch.instance.and_then(|i| match i {
            Instance::Id(id) => Some(id),
            Instance::PodUid => None,
        }),
        created: launch.created,
        telemetry: None,
        jobs_url: launch.jobs_url,
        replay: None,
    })
}
