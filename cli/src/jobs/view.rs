//! A job as a runner sees it ([`JobView`]), read from what Docker says of its container: pure.
//! [`Facts`] is the part of an inspect the view needs, so the rules — which Docker states are
//! which job state, Docker's zero time meaning "never", a timeout being an exit at or after the
//! deadline — are tested without Docker.

use std::collections::HashMap;

use bollard::models::{ContainerInspectResponse, ContainerStateStatusEnum};
use chrono::{DateTime, SecondsFormat, Utc};
use ninetrix_proto::jobs::{JobId, JobState, JobView, labels};

/// What an inspect of a job's container says, as plain data.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Facts {
    /// Its labels.
    pub labels: HashMap<String, String>,
    /// Its command (`/bin/sh -c <command>`).
    pub cmd: Vec<String>,
    /// Docker's state (`created`, `running`, `exited`, `dead`, …).
    pub status: String,
    /// The exit code Docker keeps.
    pub exit_code: Option<i64>,
    /// When it was created, as Docker says it.
    pub created: String,
    /// When it started (Docker's zero time: never).
    pub started_at: String,
    /// When it ended (Docker's zero time: never).
    pub finished_at: String,
    /// Whether the kernel killed it for memory.
    pub oom_killed: bool,
}

impl Facts {
    /// The facts of an inspect.
    pub(crate) fn of(inspect: &ContainerInspectResponse) -> Facts {
        let config = inspect.config.as_ref();
        let state = inspect.state.as_ref();
        Facts {
            labels: config.and_then(|c| c.labels.clone()).unwrap_or_default(),
            cmd: config.and_then(|c| c.cmd.clone()).unwrap_or_default(),
            status: state
                .and_then(|s| s.status)
                .unwrap_or(ContainerStateStatusEnum::EMPTY)
                .to_string(),
            exit_code: state.and_then(|s| s.exit_code),
            created: inspect
                .created
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default(),
            started_at: state.and_then(|s| s.started_at.clone()).unwrap_or_default(),
            finished_at: state
                .and_then(|s| s.finished_at.clone())
                .unwrap_or_default(),
            oom_killed: state.and_then(|s| s.oom_killed).unwrap_or(false),
        }
    }

    /// A label.
    pub(crate) fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key).map(String::as_str)
    }
}

/// The job state of a Docker state: never started is `created`; running, paused, restarting
/// and stopping are `running` (the process is there); exited, dead and removing are `exited`.
pub(crate) fn state(status: &str) -> JobState {
    match status {
        "created" | "" => JobState::Created,
        "running" | "paused" | "restarting" | "stopping" => JobState::Running,
        _ => JobState::Exited,
    }
}

/// A Docker time as RFC 3339 (UTC, seconds with their fraction as Docker gives it); `None` for
/// Docker's zero time (`0001-01-01T00:00:00Z`: never) or none at all.
pub(crate) fn time(text: &str) -> Option<String> {
    let at = parse(text)?;
    Some(at.to_rfc3339_opts(SecondsFormat::AutoSi, true))
}

fn parse(text: &str) -> Option<DateTime<Utc>> {
    let text = text.trim();
    if text.is_empty() || text.starts_with("0001-01-01") {
        return None;
    }
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .or_else(|_| text.parse::<DateTime<Utc>>())
        .ok()
}

/// Unix seconds as RFC 3339.
pub(crate) fn unix(secs: i64) -> String {
    DateTime::<Utc>::from_timestamp(secs, 0)
        .unwrap_or_default()
        .to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// The job's deadline (Unix seconds), from its label.
pub(crate) fn deadline(facts: &Facts) -> Option<i64> {
    facts.label(labels::DEADLINE)?.parse().ok()
}

/// The view of a job's container; `None` when it is not a job (no job ID label).
pub(crate) fn view(facts: &Facts) -> Option<JobView> {
    let id: JobId = facts.label(labels::ID)?.parse().ok()?;
    let state = state(&facts.status);
    let finished_at = match state {
        JobState::Exited => time(&facts.finished_at),
        _ => None,
    };
    let deadline = deadline(facts);
    let timed_out = match (&finished_at, deadline) {
        (Some(_), Some(deadline)) => {
            parse(&facts.finished_at).is_some_and(|t| t.timestamp() >= deadline)
        }
        _ => false,
    };
    // The command is the third word of `/bin/sh -c <command>`.
    let command = match facts.cmd.as_slice() {
        [_, _, command, ..] => command.clone(),
        other => other.join(" "),
    };
    Some(JobView {
        name: facts
            .label(labels::NAME)
            .map_or_else(|| id.to_string(), str::to_string),
        id,
        key: facts.label(labels::CALL).unwrap_or_default().to_string(),
        command,
        state,
        exit_code: (state == JobState::Exited)
            .then_some(facts.exit_code)
            .flatten(),
        created_at: time(&facts.created).unwrap_or_default(),
        started_at: time(&facts.started_at),
        finished_at,
        deadline: deadline.map(unix).unwrap_or_default(),
        timed_out,
        oom_killed: facts.oom_killed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ZERO: &str = "0001-01-01T00:00:00Z";

    fn facts(status: &str, started: &str, finished: &str, exit: i64) -> Facts {
        Facts {
            labels: [
                (labels::ID, "0123456789abcdef"),
                (labels::CALL, "t1:call_1"),
                (labels::DEADLINE, "1767225600"), // 2026-01-01T00:00:00Z
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            cmd: vec!["/bin/sh".into(), "-c".into(), "make test".into()],
            status: status.into(),
            exit_code: Some(exit),
            created: "2025-12-31T23:00:00.123456789Z".into(),
            started_at: started.into(),
            finished_at: finished.into(),
            oom_killed: false,
        }
    }

    #[test]
    fn docker_states_are_job_states() {
        for (docker, job) in [
            ("created", JobState::Created),
            ("", JobState::Created),
            ("running", JobState::Running),
            ("paused", JobState::Running),
            ("restarting", JobState::Running),
            ("exited", JobState::Exited),
            ("dead", JobState::Exited),
            ("removing", JobState::Exited),
        ] {
            assert_eq!(state(docker), job, "{docker}");
        }
    }

    #[test]
    fn a_created_job_has_not_started_and_no_exit_code() {
        let v = view(&facts("created", ZERO, ZERO, 0)).unwrap();
        assert_eq!(v.state, JobState::Created);
        assert_eq!(
            (v.started_at, v.finished_at, v.exit_code),
            (None, None, None)
        );
        assert_eq!(v.name, "0123456789abcdef", "no name: the ID");
        assert_eq!(v.key, "t1:call_1");
        assert_eq!(v.command, "make test");
        assert_eq!(v.created_at, "2025-12-31T23:00:00.123456789Z");
        assert_eq!(v.deadline, "2026-01-01T00:00:00Z");
        assert!(!v.timed_out);
    }

    #[test]
    fn an_exit_before_the_deadline_is_not_a_timeout_and_one_at_or_after_it_is() {
        let v = view(&facts(
            "exited",
            "2025-12-31T23:00:01Z",
            "2025-12-31T23:10:00Z",
            2,
        ))
        .unwrap();
        assert_eq!((v.state, v.exit_code), (JobState::Exited, Some(2)));
        assert_eq!(v.finished_at.as_deref(), Some("2025-12-31T23:10:00Z"));
        assert!(!v.timed_out);
        let v = view(&facts(
            "exited",
            "2025-12-31T23:00:01Z",
            "2026-01-01T00:00:10.5+00:00",
            143,
        ))
        .unwrap();
        assert!(v.timed_out);
        assert_eq!(v.finished_at.as_deref(), Some("2026-01-01T00:00:10.500Z"));
        // Running past the deadline is not yet a timeout: the reaper stops it first.
        let v = view(&facts("running", "2025-12-31T23:00:01Z", ZERO, 0)).unwrap();
        assert_eq!(
            (v.state, v.exit_code, v.timed_out),
            (JobState::Running, None, false)
        );
    }

    #[test]
    fn a_named_job_keeps_its_name_and_a_container_without_a_job_id_is_no_job() {
        let mut f = facts("running", "2025-12-31T23:00:01Z", ZERO, 0);
        f.labels.insert(labels::NAME.into(), "tests".into());
        assert_eq!(view(&f).unwrap().name, "tests");
        f.labels.remove(labels::ID);
        assert!(view(&f).is_none());
        assert_eq!(time(ZERO), None);
        assert_eq!(time(""), None);
    }
}
