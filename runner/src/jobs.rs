//! Background jobs from the runner's side: the client of the pool's job broker (one thread's
//! token, its thread and replica), the kill points of a `job_start`, and the pure rules of the
//! job tools — reading their arguments, finding the job a model names, and the texts the model
//! gets. The driver (`driver/jobs.rs`) runs the tools with these.
//!
//! A job is named by the ledger key of the `job_start` call that made it
//! ([`ninetrix_proto::jobs::JobId`]): the broker creates its container under that name, so a
//! retried create finds the job it made, and a runner that died anywhere in a `job_start` can
//! ask the broker what became of it instead of starting it again.

use std::time::Duration;

use ninetrix_proto::ThreadId;
use ninetrix_proto::jobs::{
    self as wire, CreateJob, JobError, JobId, JobOutput, JobState, JobView, MAX_NAME, OutputQuery,
    WaitJob,
};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::config::SecretValue;

/// The longest a request to the broker may take beyond the wait it asks for.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How a call to the broker failed.
#[derive(Debug, thiserror::Error)]
pub enum JobsError {
    /// The request never reached the broker: nothing happened.
    #[error("the job broker is unreachable: {0}")]
    NotSent(String),
    /// The request may have reached the broker, and no answer came.
    #[error("the job broker did not answer: {0}")]
    Lost(String),
    /// The broker refused it, saying why.
    #[error("{}", .0.message)]
    Refused(JobError),
}

/// The client of the pool's job broker for one thread.
#[derive(Clone, Debug)]
pub struct Broker {
    http: reqwest::Client,
    url: String,
    token: SecretValue,
    thread: ThreadId,
    replica: Option<u32>,
}

impl Broker {
    /// The broker at `url` (`AGENTFILE_JOBS_URL`), called with `token` for `thread`.
    pub fn new(
        http: reqwest::Client,
        url: &str,
        token: SecretValue,
        thread: ThreadId,
        replica: Option<u32>,
    ) -> Self {
        Self {
            http,
            url: url.trim_end_matches('/').to_string(),
            token,
            thread,
            replica,
        }
    }

    /// The thread whose jobs these are.
    pub fn thread(&self) -> ThreadId {
        self.thread
    }

    async fn send<T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&impl serde::Serialize>,
        wait: Duration,
    ) -> Result<T, JobsError> {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.url))
            .bearer_auth(self.token.expose())
            .header(wire::THREAD_HEADER, self.thread.to_string())
            .timeout(REQUEST_TIMEOUT + wait);
        if let Some(replica) = self.replica {
            request = request.header(wire::REPLICA_HEADER, replica.to_string());
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.map_err(|e| {
            if e.is_connect() {
                JobsError::NotSent(e.to_string())
            } else {
                JobsError::Lost(e.to_string())
            }
        })?;
        let status = response.status();
        let bytes = response
            .bytes()
            .await
            .map_err(|e| JobsError::Lost(e.to_string()))?;
        if status.is_success() {
            return serde_json::from_slice(&bytes).map_err(|e| {
                JobsError::Lost(format!("the broker's answer ({status}) is unreadable: {e}"))
            });
        }
        match serde_json::from_slice::<JobError>(&bytes) {
            Ok(refusal) => Err(JobsError::Refused(refusal)),
            Err(_) => Err(JobsError::Lost(format!(
                "the broker answered {status}: {}",
                String::from_utf8_lossy(&bytes)
                    .chars()
                    .take(300)
                    .collect::<String>()
            ))),
        }
    }

    /// Makes the job's container (not started); answers the existing job for a key already used.
    pub async fn create(&self, job: &CreateJob) -> Result<JobView, JobsError> {
        self.send(reqwest::Method::POST, "/v1/jobs", Some(job), Duration::ZERO)
            .await
    }

    /// Starts the job (a started one is answered as it is).
    pub async fn start(&self, id: &JobId) -> Result<JobView, JobsError> {
        self.send(
            reqwest::Method::POST,
            &format!("/v1/jobs/{id}/start"),
            None::<&()>,
            Duration::ZERO,
        )
        .await
    }

    /// The job, or `None` when no container of it exists.
    pub async fn get(&self, id: &JobId) -> Result<Option<JobView>, JobsError> {
        match self
            .send(
                reqwest::Method::GET,
                &format!("/v1/jobs/{id}"),
                None::<&()>,
                Duration::ZERO,
            )
            .await
        {
            Ok(view) => Ok(Some(view)),
            Err(JobsError::Refused(JobError {
                code: wire::JobErrorCode::NotFound,
                ..
            })) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The thread's jobs, oldest first.
    pub async fn list(&self) -> Result<Vec<JobView>, JobsError> {
        self.send(
            reqwest::Method::GET,
            "/v1/jobs",
            None::<&()>,
            Duration::ZERO,
        )
        .await
    }

    /// A piece of the job's output.
    pub async fn output(&self, id: &JobId, query: &OutputQuery) -> Result<JobOutput, JobsError> {
        let mut path = format!("/v1/jobs/{id}/output");
        let mut sep = '?';
        for (name, value) in [("tail", query.tail), ("since", query.since)] {
            if let Some(v) = value {
                path.push_str(&format!("{sep}{name}={v}"));
                sep = '&';
            }
        }
        self.send(reqwest::Method::GET, &path, None::<&()>, Duration::ZERO)
            .await
    }

    /// Waits for the job to end, at most `secs` (one request: at most [`wire::MAX_WAIT_SECS`]).
    pub async fn wait_once(&self, id: &JobId, secs: u64) -> Result<JobView, JobsError> {
        let secs = secs.min(wire::MAX_WAIT_SECS);
        self.send(
            reqwest::Method::POST,
            &format!("/v1/jobs/{id}/wait"),
            Some(&WaitJob { timeout_secs: secs }),
            Duration::from_secs(secs),
        )
        .await
    }

    /// Stops the job (SIGTERM, then SIGKILL after 10 s).
    pub async fn kill(&self, id: &JobId) -> Result<JobView, JobsError> {
        self.send(
            reqwest::Method::POST,
            &format!("/v1/jobs/{id}/kill"),
            None::<&()>,
            Duration::from_secs(15),
        )
        .await
    }
}

/// The points of a `job_start` where a test may kill the runner (`NINETRIX_RUNNER_CRASH_AT`):
/// after the call's intent is committed and before the container is created, between its create
/// and its start, and after its start before the outcome is recorded.
pub mod faults {
    use std::path::Path;

    /// The environment variable that names the kill point.
    pub const CRASH_AT_ENV: &str = "NINETRIX_RUNNER_CRASH_AT";

    /// Before the broker creates the container.
    pub const BEFORE_CREATE: &str = "job_before_create";
    /// After the create, before the start.
    pub const BEFORE_START: &str = "job_before_start";
    /// After the start, before the outcome is committed.
    pub const AFTER_START: &str = "job_after_start";

    /// Aborts the process (as SIGKILL would leave it) at `point` if it is the armed one, once per
    /// workspace: a marker file there (`.ninetrix/crashed-at-<point>`) keeps the restarted runner
    /// from dying at it again. Unset —
    /// always, outside tests — it costs one lookup.
    pub fn crash(point: &str, workspace: &Path) {
        if std::env::var(CRASH_AT_ENV).ok().as_deref() != Some(point) {
            return;
        }
        // Inside `.ninetrix/`, which snapshots never hold and restores never touch: a rewind
        // that restores the workspace keeps it.
        let dir = workspace.join(ninetrix_proto::snapshots::RESERVED_DIR);
        let marker = dir.join(format!("crashed-at-{point}"));
        if marker.exists() {
            return;
        }
        let _ = std::fs::create_dir_all(&dir);
        let _ = std::fs::write(&marker, b"");
        eprintln!("{CRASH_AT_ENV}={point}: aborting at the kill point");
        std::process::abort();
    }
}

/// Most characters of a job's command kept in a trace event.
pub const COMMAND_PREVIEW: usize = 200;

/// `job_start`'s arguments, read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartArgs {
    /// The command.
    pub command: String,
    /// Its name.
    pub name: Option<String>,
    /// Its timeout in seconds, if given.
    pub timeout_secs: Option<u64>,
}

/// Reads `job_start`'s arguments: a command; an optional name (letters, digits, `-`, `_`, `.`;
/// at most 64); an optional timeout (seconds, or a duration such as `"90s"`, `"10m"`, `"2h"`).
pub fn start_args(args: &Value) -> Result<StartArgs, String> {
    let command = match args.get("command").and_then(Value::as_str) {
        Some(c) if !c.trim().is_empty() => c.to_string(),
        _ => return Err("missing `command` (the shell command the job runs)".into()),
    };
    let name = match args.get("name") {
        None | Some(Value::Null) => None,
        Some(Value::String(n)) => {
            if n.is_empty()
                || n.len() > MAX_NAME
                || !n
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            {
                return Err(format!(
                    "`name` {n:?} is not a job name: use 1 to {MAX_NAME} letters, digits, `-`, `_` or `.`"
                ));
            }
            Some(n.clone())
        }
        Some(other) => return Err(format!("`name` must be a string, not {other}")),
    };
    let timeout_secs = match args.get("timeout") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => match n.as_f64() {
            Some(s) if s.is_finite() && s >= 1.0 => Some(s.ceil() as u64),
            _ => {
                return Err(format!(
                    "`timeout` {n} is not a number of seconds (1 or more)"
                ));
            }
        },
        Some(Value::String(s)) => match ninetrix_agentfile::units::parse_duration(s) {
            Some(secs) if secs >= 1 => Some(secs),
            _ => {
                return Err(format!(
                    "`timeout` {s:?} is not a duration: write seconds (600) or e.g. \"90s\", \"10m\", \"2h\""
                ));
            }
        },
        Some(other) => {
            return Err(format!(
                "`timeout` must be seconds or a duration, not {other}"
            ));
        }
    };
    Ok(StartArgs {
        command,
        name,
        timeout_secs,
    })
}

/// The `job` argument of a tool that acts on one job.
pub fn job_arg(args: &Value) -> Result<&str, String> {
    match args.get("job").and_then(Value::as_str) {
        Some(j) if !j.trim().is_empty() => Ok(j.trim()),
        _ => Err("missing `job` (a job's name or ID, as job_start answered)".into()),
    }
}

/// The job `wanted` names among `jobs` (the thread's, oldest first): its ID, else the newest job
/// of that name.
pub fn find<'a>(jobs: &'a [JobView], wanted: &str) -> Result<&'a JobView, String> {
    if let Some(job) = jobs.iter().find(|j| j.id.as_str() == wanted) {
        return Ok(job);
    }
    if let Some(job) = jobs.iter().rev().find(|j| j.name == wanted) {
        return Ok(job);
    }
    if jobs.is_empty() {
        return Err(no_such_job(wanted));
    }
    let names: Vec<String> = jobs
        .iter()
        .map(|j| format!("{} ({})", j.name, j.id))
        .collect();
    Err(format!(
        "{} This conversation's jobs: {}.",
        no_such_job(wanted),
        names.join(", ")
    ))
}

/// What a tool answers for a job `wanted` the broker does not have.
pub fn no_such_job(wanted: &str) -> String {
    format!(
        "no job `{wanted}` exists now. If it was started, its container has been removed \
         (`ninetrix down --purge`, or by hand): what became of it is unknown, and nothing starts \
         it again."
    )
}

/// What a tool answers for a job `wanted` that no longer exists but this runner saw: the
/// broker's answer `why`, then the job as it was last seen — its outcome is unknown.
pub fn vanished_text(why: &str, last: &JobView) -> String {
    format!("{why}\nLast seen by this runner: {}", summary(last))
}

/// A job as the model reads it.
pub fn summary(job: &JobView) -> Value {
    let mut out = json!({
        "job": job.id,
        "name": job.name,
        "state": job.state.as_str(),
        "command": job.command,
        "created_at": job.created_at,
        "deadline": job.deadline,
    });
    if let Some(at) = &job.started_at {
        out["started_at"] = json!(at);
    }
    if let Some(code) = job.exit_code {
        out["exit_code"] = json!(code);
    }
    if let Some(at) = &job.finished_at {
        out["finished_at"] = json!(at);
    }
    if job.timed_out {
        out["timed_out"] = json!(true);
    }
    if job.oom_killed {
        out["oom_killed"] = json!(true);
    }
    out
}

/// What `job_start` answers once its job is running.
pub fn started_text(job: &JobView) -> String {
    let mut out = summary(job);
    out["note"] = json!(
        "The job runs in a container of its own and goes on if this conversation's runner restarts. Read it with job_status, job_output or job_wait; stop it with job_kill."
    );
    out.to_string()
}

/// What `job_start` answers when the runner died after recording it and no container of it
/// exists: it never ran (or it was removed since), and it is not started again.
pub fn not_run_text(id: &JobId) -> String {
    format!(
        "job_start was interrupted: the runner stopped after recording this call, and no job {id} \
         exists — it was never created (the runner stopped before creating it) or it was removed \
         since. It was not started again. Call job_start again if the work is still needed."
    )
}

/// What `job_output` answers: a line about the job and the lines read, then the output.
pub fn output_text(out: &JobOutput) -> String {
    let job = &out.job;
    let state = match (job.state, job.exit_code) {
        (JobState::Exited, Some(code)) => format!("exited with code {code}"),
        (state, _) => state.as_str().to_string(),
    };
    let lines = if out.next == out.from {
        "no new lines".to_string()
    } else {
        format!("lines {}–{} of {}", out.from + 1, out.next, out.next)
    };
    let cut = if out.cut {
        " (earlier lines left out: ask with `since` or `tail`)"
    } else {
        ""
    };
    format!(
        "[job {} ({}): {state}; {lines}{cut}; next read: since={}]\n{}",
        job.name, job.id, out.next, out.text
    )
}

/// What `job_wait` answers: the job, and whether it ended within the wait.
pub fn waited_text(job: &JobView, waited_secs: u64) -> String {
    let mut out = summary(job);
    if job.state != JobState::Exited {
        out["note"] = json!(format!(
            "still {} after waiting {waited_secs} s; wait again, or read its output so far with job_output",
            job.state.as_str()
        ));
    }
    out.to_string()
}

/// The arguments of `job_output`, read.
pub fn output_query(args: &Value) -> Result<OutputQuery, String> {
    let number = |name: &str| match args.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| format!("`{name}` must be a whole number of lines, not {v}")),
    };
    Ok(OutputQuery {
        tail: number("tail")?,
        since: number("since")?,
    })
}

/// The seconds `job_wait` waits: its `timeout` (seconds, default the most it may), at most
/// `most` (the tool timeout less a margin for the answer).
pub fn wait_secs(args: &Value, most: u64) -> Result<u64, String> {
    match args.get("timeout") {
        None | Some(Value::Null) => Ok(most),
        Some(v) => match v.as_f64() {
            Some(s) if s.is_finite() && s >= 0.0 => Ok((s.ceil() as u64).min(most)),
            _ => Err(format!("`timeout` must be a number of seconds, not {v}")),
        },
    }
}

/// A job named `name` in `state` (`make`, created at midnight), for tests.
#[cfg(test)]
pub(crate) fn sample(id: &str, name: &str, state: JobState) -> JobView {
    JobView {
        id: id.parse().unwrap(),
        name: name.into(),
        key: "k".into(),
        command: "make".into(),
        state,
        exit_code: (state == JobState::Exited).then_some(0),
        created_at: "2026-11-28T00:00:00Z".into(),
        started_at: None,
        finished_at: None,
        deadline: "2026-11-28T01:00:00Z".into(),
        timed_out: false,
        oom_killed: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(id: &str, name: &str) -> JobView {
        sample(id, name, JobState::Running)
    }

    #[test]
    fn start_arguments_are_checked_and_durations_read() {
        let ok = start_args(&json!({"command": "make", "name": "build-1", "timeout": "10m"}));
        assert_eq!(
            ok.unwrap(),
            StartArgs {
                command: "make".into(),
                name: Some("build-1".into()),
                timeout_secs: Some(600)
            }
        );
        assert_eq!(
            start_args(&json!({"command": "x", "timeout": 1.5}))
                .unwrap()
                .timeout_secs,
            Some(2)
        );
        assert!(start_args(&json!({})).unwrap_err().contains("command"));
        assert!(
            start_args(&json!({"command": "x", "name": "a b"}))
                .unwrap_err()
                .contains("not a job name")
        );
        assert!(
            start_args(&json!({"command": "x", "timeout": "soon"}))
                .unwrap_err()
                .contains("not a duration")
        );
        assert!(start_args(&json!({"command": "x", "timeout": 0})).is_err());
    }

    #[test]
    fn a_job_is_found_by_id_else_the_newest_of_its_name() {
        let jobs = vec![
            view("00000000000000a1", "build"),
            view("00000000000000a2", "build"),
            view("00000000000000a3", "test"),
        ];
        assert_eq!(find(&jobs, "00000000000000a1").unwrap().name, "build");
        assert_eq!(
            find(&jobs, "build").unwrap().id.as_str(),
            "00000000000000a2"
        );
        let err = find(&jobs, "deploy").unwrap_err();
        assert!(err.contains("build (00000000000000a2)"), "{err}");
        assert!(
            find(&[], "x")
                .unwrap_err()
                .contains("nothing starts it again")
        );
        let last = vanished_text("no job `build`", &jobs[1]);
        assert!(last.contains("Last seen by this runner") && last.contains("00000000000000a2"));
    }

    #[test]
    fn output_says_where_the_next_read_starts() {
        let mut job = view("00000000000000a1", "build");
        job.state = JobState::Exited;
        job.exit_code = Some(3);
        let text = output_text(&JobOutput {
            job,
            text: "a\nb\n".into(),
            from: 4,
            next: 6,
            cut: false,
        });
        assert!(
            text.starts_with("[job build (00000000000000a1): exited with code 3; lines 5–6 of 6; next read: since=6]"),
            "{text}"
        );
    }

    #[test]
    fn waits_are_capped_and_previews_cut_at_a_character() {
        assert_eq!(wait_secs(&json!({}), 100).unwrap(), 100);
        assert_eq!(wait_secs(&json!({"timeout": 500}), 100).unwrap(), 100);
        assert_eq!(wait_secs(&json!({"timeout": 5}), 100).unwrap(), 5);
        assert!(wait_secs(&json!({"timeout": "x"}), 100).is_err());
        assert_eq!(
            output_query(&json!({"tail": 5})).unwrap(),
            OutputQuery {
                tail: Some(5),
                since: None
            }
        );
        assert!(output_query(&json!({"since": -1})).is_err());
    }
}
