//! The container of a job, as a pure value: what `POST /v1/jobs` asks Docker to create for a
//! caller's [`CreateJob`] — the agent's image and network, `/bin/sh -c <command>` in the
//! caller's workspace (the replica's volume at `/workspace`), the agent's job env and `HOME`,
//! the agent's `security:` hardening, limits, its labels (pool, agent, role and
//! `ninetrix_proto::jobs::labels`), no restart, rotated logs. Never a secret.

use std::collections::HashMap;

use bollard::models::{
    ContainerCreateBody, HostConfig, HostConfigLogConfig, Mount, MountType, RestartPolicy,
    RestartPolicyNameEnum,
};
use ninetrix_agentfile::defaults::MAX_JOB_TIMEOUT_SECS;
use ninetrix_proto::jobs::{CreateJob, JobId, MAX_NAME, labels};

use super::caller::{Caller, WORKSPACE};
use super::config::{AgentJobs, workspace_volume};
use super::error::BrokerError;
use crate::hardening;
use crate::objects;

/// Longest ledger key a job records.
const MAX_KEY: usize = 256;

/// The seconds a job may run: the request's, else the agent's default, at most 7 days.
pub(crate) fn timeout_secs(request: &CreateJob, jobs: &AgentJobs) -> Result<u64, BrokerError> {
    let secs = request.timeout_secs.unwrap_or(jobs.default_timeout_secs);
    if secs == 0 {
        return Err(BrokerError::Invalid(
            "timeout_secs must be at least 1 (leave it out for the agent's default)".into(),
        ));
    }
    Ok(secs.min(MAX_JOB_TIMEOUT_SECS))
}

/// Checks what a create names before anything is made.
pub(crate) fn check(request: &CreateJob) -> Result<(), BrokerError> {
    if request.key.is_empty() || request.key.len() > MAX_KEY {
        return Err(BrokerError::Invalid(format!(
            "key must have 1 to {MAX_KEY} bytes (the ledger key of the job_start call)"
        )));
    }
    if request.command.trim().is_empty() {
        return Err(BrokerError::Invalid(
            "command is empty; give the shell command the job runs".into(),
        ));
    }
    if request.command.contains('\0') || request.key.contains('\0') {
        return Err(BrokerError::Invalid(
            "command and key may not contain NUL characters".into(),
        ));
    }
    if let Some(name) = &request.name
        && (name.is_empty() || name.len() > MAX_NAME || name.chars().any(char::is_control))
    {
        return Err(BrokerError::Invalid(format!(
            "name must have 1 to {MAX_NAME} bytes and no control characters"
        )));
    }
    Ok(())
}

/// The container of job `id` of `caller`, which the broker kills at `deadline` (Unix seconds).
pub(crate) fn body(
    pool: &str,
    jobs: &AgentJobs,
    caller: &Caller,
    id: &JobId,
    request: &CreateJob,
    deadline: i64,
) -> ContainerCreateBody {
    let labels: HashMap<String, String> = [
        (objects::POOL, pool.to_string()),
        (objects::AGENT, caller.agent.clone()),
        (objects::ROLE, objects::JOB_ROLE.to_string()),
        (objects::VERSION, objects::VERSION_VALUE.to_string()),
        (labels::ID, id.to_string()),
        (
            labels::NAME,
            request.name.clone().unwrap_or_else(|| id.to_string()),
        ),
        (labels::THREAD, caller.thread.to_string()),
        (labels::TURN, request.turn.to_string()),
        (labels::CALL, request.key.clone()),
        (labels::DEADLINE, deadline.to_string()),
        (labels::REPLICA, caller.replica.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let mut env = jobs.env.clone();
    env.retain(|e| !e.starts_with("HOME="));
    env.push(format!("HOME={}", hardening::HOME));
    let mut host_config = HostConfig {
        network_mode: Some(jobs.network.clone()),
        restart_policy: Some(RestartPolicy {
            name: Some(RestartPolicyNameEnum::NO),
            maximum_retry_count: None,
        }),
        memory: jobs
            .memory_bytes
            .map(|b| i64::try_from(b).unwrap_or(i64::MAX)),
        nano_cpus: jobs.cpus.map(|c| (c * 1e9) as i64),
        log_config: Some(HostConfigLogConfig {
            typ: Some("json-file".into()),
            config: Some(
                [("max-size", "16m"), ("max-file", "2")]
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
        }),
        mounts: Some(vec![Mount {
            target: Some(WORKSPACE.into()),
            source: Some(workspace_volume(pool, &caller.agent, caller.replica)),
            typ: Some(MountType::VOLUME),
            ..Mount::default()
        }]),
        init: Some(true),
        ..HostConfig::default()
    };
    hardening::apply(
        &mut host_config,
        &jobs.security,
        jobs.isolation.as_deref(),
        (objects::POOL, pool),
    );
    ContainerCreateBody {
        image: Some(jobs.image.clone()),
        cmd: Some(vec!["/bin/sh".into(), "-c".into(), request.command.clone()]),
        entrypoint: Some(vec![]),
        working_dir: Some(caller.workdir.clone()),
        user: Some(hardening::user(&jobs.security)),
        env: Some(env),
        labels: Some(labels),
        host_config: Some(host_config),
        ..ContainerCreateBody::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::caller::tests::config;
    use ninetrix_proto::ThreadId;

    fn request() -> CreateJob {
        CreateJob {
            key: "t3:call_1".into(),
            name: None,
            command: "make test".into(),
            timeout_secs: None,
            turn: 3,
        }
    }

    #[test]
    fn a_job_runs_hardened_in_its_replicas_workspace_with_its_labels() {
        let mut config = config();
        let jobs = config.agents.get_mut("coder").unwrap();
        jobs.env = vec![
            "HTTPS_PROXY=http://egress-proxy:3128".into(),
            "HOME=/root".into(),
        ];
        jobs.memory_bytes = Some(512 << 20);
        jobs.cpus = Some(1.5);
        let jobs = &config.agents["coder"];
        let thread = ThreadId::new_v7();
        let caller = Caller {
            thread,
            agent: "coder".into(),
            replica: 2,
            workdir: "/workspace".into(),
        };
        let id = JobId::of(thread, "t3:call_1");
        let b = body("p", jobs, &caller, &id, &request(), 1_800_000_000);
        assert_eq!(b.image.as_deref(), Some("img"));
        assert_eq!(b.cmd.as_deref().unwrap(), ["/bin/sh", "-c", "make test"]);
        assert_eq!(b.working_dir.as_deref(), Some("/workspace"));
        assert_eq!(b.user.as_deref(), Some("65532:65532"));
        assert_eq!(
            b.env.as_deref().unwrap(),
            ["HTTPS_PROXY=http://egress-proxy:3128", "HOME=/tmp"]
        );
        let l = b.labels.as_ref().unwrap();
        assert_eq!(l[objects::POOL], "p");
        assert_eq!(l[objects::AGENT], "coder");
        assert_eq!(l[objects::ROLE], objects::JOB_ROLE);
        assert_eq!(l[labels::ID], id.to_string());
        assert_eq!(l[labels::NAME], id.to_string());
        assert_eq!(l[labels::THREAD], thread.to_string());
        assert_eq!(l[labels::TURN], "3");
        assert_eq!(l[labels::CALL], "t3:call_1");
        assert_eq!(l[labels::DEADLINE], "1800000000");
        assert_eq!(l[labels::REPLICA], "2");
        let hc = b.host_config.as_ref().unwrap();
        assert_eq!(hc.network_mode.as_deref(), Some("ninetrix-p"));
        assert_eq!(
            hc.restart_policy.as_ref().unwrap().name,
            Some(RestartPolicyNameEnum::NO)
        );
        assert_eq!(
            (hc.memory, hc.nano_cpus),
            (Some(512 << 20), Some(1_500_000_000))
        );
        assert_eq!(hc.cap_drop.as_deref(), Some(&["ALL".to_string()][..]));
        assert_eq!(hc.readonly_rootfs, Some(true));
        let log = hc.log_config.as_ref().unwrap();
        assert_eq!(log.typ.as_deref(), Some("json-file"));
        assert_eq!(log.config.as_ref().unwrap()["max-file"], "2");
        let mounts = hc.mounts.as_ref().unwrap();
        assert_eq!(mounts[0].target.as_deref(), Some("/workspace"));
        assert_eq!(
            mounts[0].source.as_deref(),
            Some("ninetrix-p-coder-2-workspace")
        );
        assert_eq!(mounts.len(), 2, "and /run/secrets, empty");
    }

    #[test]
    fn timeouts_default_and_are_capped_and_bad_requests_are_named() {
        let jobs = &config().agents["coder"];
        assert_eq!(timeout_secs(&request(), jobs).unwrap(), 60);
        let mut r = request();
        r.timeout_secs = Some(30 * 86_400);
        assert_eq!(timeout_secs(&r, jobs).unwrap(), MAX_JOB_TIMEOUT_SECS);
        r.timeout_secs = Some(0);
        assert!(timeout_secs(&r, jobs).is_err());
        assert!(check(&request()).is_ok());
        let mut r = request();
        r.command = "  ".into();
        assert!(check(&r).unwrap_err().to_string().contains("command"));
        let mut r = request();
        r.key = String::new();
        assert!(check(&r).unwrap_err().to_string().contains("key"));
        let mut r = request();
        r.name = Some("a\nb".into());
        assert!(check(&r).unwrap_err().to_string().contains("name"));
    }
}
