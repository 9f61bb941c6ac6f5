//! Background jobs as they cross HTTP between a runner and its pool's job broker: what a job
//! is called (its ID is derived from the ledger key of the `job_start` call that made it, so a
//! retried create finds the job it already made), the requests and answers of the broker's
//! routes, and the labels a job container carries.
//!
//! The broker (`ninetrix job-broker`, one per pool on one host) is the only part of a pool that
//! talks to Docker for a runner; the runner never holds the Docker socket. A runner calls it with
//! its own bearer token (the checkpoint API's runner or session token) and the thread the token
//! is for ([`THREAD_HEADER`]); the broker asks the API who that is, so a runner can only see and
//! start jobs of its own thread, in its own agent's image and workspace.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::ThreadId;

/// The header naming the thread whose token a request to the broker carries.
pub const THREAD_HEADER: &str = "x-ninetrix-thread";

/// The header naming the replica that serves the thread (a session's thread moves between
/// replicas; its jobs mount the workspace of the replica that started them).
pub const REPLICA_HEADER: &str = "x-ninetrix-replica";

/// Labels every job container carries (besides the pool's `dev.ninetrix.pool` and
/// `dev.ninetrix.agent`).
pub mod labels {
    /// The job's ID ([`super::JobId`]).
    pub const ID: &str = "dev.ninetrix.job";
    /// The name the model gave it (or its ID).
    pub const NAME: &str = "dev.ninetrix.job.name";
    /// The thread that started it.
    pub const THREAD: &str = "dev.ninetrix.job.thread";
    /// The turn it was started in.
    pub const TURN: &str = "dev.ninetrix.job.turn";
    /// The ledger key of the `job_start` call.
    pub const CALL: &str = "dev.ninetrix.job.call";
    /// When the broker kills it: Unix seconds.
    pub const DEADLINE: &str = "dev.ninetrix.job.deadline";
    /// The replica whose workspace it mounts.
    pub const REPLICA: &str = "dev.ninetrix.job.replica";
}

/// A job's ID: the first 16 hex digits of SHA-256 over its thread and the ledger key of the call
/// that started it. One call is one job, whoever retries it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct JobId(String);

impl JobId {
    /// The job of `key` in `thread`.
    pub fn of(thread: ThreadId, key: &str) -> Self {
        let mut hash = Sha256::new();
        hash.update(thread.to_string().as_bytes());
        hash.update([0]);
        hash.update(key.as_bytes());
        let digest = hash.finalize();
        Self(
            digest[..8]
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>(),
        )
    }

    /// The ID as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The container the job runs in.
    pub fn container(&self, pool: &str) -> String {
        format!("ninetrix-{pool}-job-{}", self.0)
    }
}

impl std::fmt::Display for JobId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A string that is not a job ID (16 lowercase hex digits).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("`{0}` is not a job ID (16 hex digits)")]
pub struct ParseJobIdError(pub String);

impl TryFrom<String> for JobId {
    type Error = ParseJobIdError;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        if s.len() == 16
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            Ok(Self(s))
        } else {
            Err(ParseJobIdError(s))
        }
    }
}

impl std::str::FromStr for JobId {
    type Err = ParseJobIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::try_from(s.to_string())
    }
}

impl From<JobId> for String {
    fn from(id: JobId) -> Self {
        id.0
    }
}

/// `POST /v1/jobs`: make the container of a `job_start` call (not started). Idempotent: the
/// container is named from the job's ID, so a second create answers the job that exists.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateJob {
    /// The ledger key of the `job_start` call.
    pub key: String,
    /// The name the model gave it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The command, run with `/bin/sh -c` in the workspace.
    pub command: String,
    /// The longest it may run, in seconds (the agent's `runtime.jobs.default_timeout` when
    /// absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
    /// The turn that started it.
    pub turn: u64,
}

/// Where a job is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Its container exists and was never started.
    Created,
    /// It runs.
    Running,
    /// It ended (`exit_code`).
    Exited,
}

impl JobState {
    /// How `ps` and the tools say it.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Created => "created",
            JobState::Running => "running",
            JobState::Exited => "exited",
        }
    }
}

/// A job as the broker sees it in Docker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobView {
    /// Its ID.
    pub id: JobId,
    /// Its name (the model's, else its ID).
    pub name: String,
    /// The ledger key of the call that started it.
    pub key: String,
    /// The command.
    pub command: String,
    /// Where it is.
    pub state: JobState,
    /// Its exit code, once it exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    /// When it was created (RFC 3339).
    pub created_at: String,
    /// When it started (RFC 3339), once it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// When it ended (RFC 3339), once it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    /// When the broker kills it (RFC 3339).
    pub deadline: String,
    /// Whether it ended because its deadline passed.
    #[serde(default)]
    pub timed_out: bool,
    /// Whether the kernel killed it for memory.
    #[serde(default)]
    pub oom_killed: bool,
}

/// `GET /v1/jobs/{id}/output`: a job's output (stdout and stderr interleaved, as Docker keeps
/// them), by line.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputQuery {
    /// Only the last this many lines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tail: Option<u64>,
    /// Only the lines after the first `since` (the `next` of an earlier answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<u64>,
}

/// A piece of a job's output.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobOutput {
    /// The job, as it was when the output was read.
    pub job: JobView,
    /// The lines, joined (at most [`MAX_OUTPUT`] bytes: the last ones).
    pub text: String,
    /// The line number of the first line in `text` (0-based).
    pub from: u64,
    /// The number of lines so far: `since` for the next read.
    pub next: u64,
    /// Whether lines at the start were left out to fit [`MAX_OUTPUT`].
    pub cut: bool,
}

/// The longest job name (the model's `name`), in bytes.
pub const MAX_NAME: usize = 64;

/// Most bytes of output one answer carries.
pub const MAX_OUTPUT: usize = 64 * 1024;

/// `POST /v1/jobs/{id}/wait`: wait for a job to end, at most `timeout_secs`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitJob {
    /// The longest to wait (capped by the broker at [`MAX_WAIT_SECS`]; the runner waits in
    /// pieces).
    pub timeout_secs: u64,
}

/// The longest one wait request blocks.
pub const MAX_WAIT_SECS: u64 = 60;

/// Why the broker refused a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(rename_all = "snake_case")]
pub enum JobErrorCode {
    /// No bearer token, or one the checkpoint API refused.
    #[error("unauthorized")]
    Unauthorized,
    /// The caller's thread is not an agent of this pool with jobs.
    #[error("forbidden")]
    Forbidden,
    /// No such job of this thread.
    #[error("not_found")]
    NotFound,
    /// The agent runs `runtime.jobs.max_concurrent` jobs already.
    #[error("too_many_jobs")]
    TooManyJobs,
    /// A request the broker cannot read.
    #[error("invalid")]
    Invalid,
    /// Docker or the checkpoint API failed.
    #[error("unavailable")]
    Unavailable,
}

/// The body of every refusal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobError {
    /// What kind.
    pub code: JobErrorCode,
    /// What happened and what to do.
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_call_is_one_job_and_ids_round_trip() {
        let thread = ThreadId::new_v7();
        let a = JobId::of(thread, "t3:call_1");
        assert_eq!(a, JobId::of(thread, "t3:call_1"));
        assert_ne!(a, JobId::of(thread, "t3:call_2"));
        assert_ne!(a, JobId::of(ThreadId::new_v7(), "t3:call_1"));
        assert_eq!(a.as_str().len(), 16);
        assert_eq!(a.as_str().parse::<JobId>().unwrap(), a);
        assert_eq!(a.container("p"), format!("ninetrix-p-job-{a}"));
        assert!("ABCDEF0123456789".parse::<JobId>().is_err());
        assert!("abc".parse::<JobId>().is_err());
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(serde_json::from_str::<JobId>(&json).unwrap(), a);
        assert!(serde_json::from_str::<JobId>("\"nope\"").is_err());
    }
}
