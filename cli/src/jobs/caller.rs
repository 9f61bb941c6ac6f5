//! Who a request is from, decided from the labels the checkpoint API gives the caller's thread
//! (never from what the request states) and the broker's configuration: pure. A caller is a
//! thread of an agent of this pool with the job tools, on one replica whose workspace its jobs
//! mount — a replica's thread its own replica, a session's thread the replica serving it
//! (`REPLICA_HEADER`), its jobs working in the session's own directory.

use ninetrix_proto::ThreadId;
use ninetrix_proto::api::ThreadLabels;

use super::config::BrokerConfig;
use super::error::BrokerError;

/// Where a job's workspace volume is mounted.
pub(crate) const WORKSPACE: &str = "/workspace";

/// A request's authorised caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Caller {
    /// Its thread.
    pub thread: ThreadId,
    /// Its agent (one of the configuration's).
    pub agent: String,
    /// The replica whose workspace its jobs mount.
    pub replica: u32,
    /// Where its jobs run: `/workspace`, or a session's `/workspace/sessions/<thread>`.
    pub workdir: String,
}

/// Decides who `thread` (whose labels the API gave) is to this broker; `replica_header` is the
/// request's [`ninetrix_proto::jobs::REPLICA_HEADER`], read only for a session's thread.
pub(crate) fn authorise(
    config: &BrokerConfig,
    thread: ThreadId,
    labels: &ThreadLabels,
    replica_header: Option<&str>,
) -> Result<Caller, BrokerError> {
    let pool = &config.pool;
    if labels.pool.as_deref() != Some(pool.as_str()) {
        return Err(BrokerError::Forbidden(format!(
            "thread {thread} is not of pool {pool} (its pool: {}); this broker starts jobs only \
             for pool {pool}'s agents",
            labels.pool.as_deref().unwrap_or("none")
        )));
    }
    let Some(agent) = labels.agent.as_deref() else {
        return Err(BrokerError::Forbidden(format!(
            "thread {thread} has no agent; only agents with job tools may start jobs"
        )));
    };
    let Some(jobs) = config.agents.get(agent) else {
        return Err(BrokerError::Forbidden(format!(
            "agent {agent} has no job tools in pool {pool}; give it `job_start` in the \
             agentfile and run `ninetrix up` again"
        )));
    };
    let (replica, workdir) = if labels.session.is_some() {
        let Some(text) = replica_header else {
            return Err(BrokerError::Invalid(format!(
                "a session's request needs the {} header (the replica serving it)",
                ninetrix_proto::jobs::REPLICA_HEADER
            )));
        };
        let replica = text
            .trim()
            .parse::<u32>()
            .ok()
            .filter(|r| (1..=jobs.replicas).contains(r))
            .ok_or_else(|| {
                BrokerError::Invalid(format!(
                    "{} {text:?} is not a replica of agent {agent} (1 to {})",
                    ninetrix_proto::jobs::REPLICA_HEADER,
                    jobs.replicas
                ))
            })?;
        (replica, format!("{WORKSPACE}/sessions/{thread}"))
    } else {
        let replica = labels
            .replica
            .filter(|r| (1..=jobs.replicas).contains(r))
            .ok_or_else(|| {
                BrokerError::Forbidden(format!(
                    "thread {thread} is not the thread of a replica of agent {agent} (replica \
                     {}; the agent runs {})",
                    labels
                        .replica
                        .map_or_else(|| "none".to_string(), |r| r.to_string()),
                    jobs.replicas
                ))
            })?;
        (replica, WORKSPACE.to_string())
    };
    Ok(Caller {
        thread,
        agent: agent.to_string(),
        replica,
        workdir,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::jobs::config::AgentJobs;

    pub(crate) fn config() -> BrokerConfig {
        BrokerConfig {
            pool: "p".into(),
            agents: [(
                "coder".to_string(),
                AgentJobs {
                    image: "img".into(),
                    network: "ninetrix-p".into(),
                    env: vec![],
                    max_concurrent: 2,
                    default_timeout_secs: 60,
                    cpus: None,
                    memory_bytes: None,
                    replicas: 2,
                    security: Default::default(),
                    isolation: None,
                },
            )]
            .into(),
        }
    }

    fn labels(
        pool: &str,
        agent: &str,
        replica: Option<u32>,
        session: Option<&str>,
    ) -> ThreadLabels {
        ThreadLabels {
            pool: Some(pool.into()),
            agent: Some(agent.into()),
            replica,
            session: session.map(str::to_string),
        }
    }

    #[test]
    fn a_replica_thread_works_in_its_replicas_workspace() {
        let t = ThreadId::new_v7();
        let c = authorise(
            &config(),
            t,
            &labels("p", "coder", Some(2), None),
            Some("1"),
        )
        .unwrap();
        assert_eq!(
            (c.agent.as_str(), c.replica, c.workdir.as_str()),
            ("coder", 2, "/workspace")
        );
    }

    #[test]
    fn a_session_thread_works_in_its_own_directory_of_the_serving_replica() {
        let t = ThreadId::new_v7();
        let l = labels("p", "coder", None, Some("k"));
        let c = authorise(&config(), t, &l, Some("2")).unwrap();
        assert_eq!(c.replica, 2);
        assert_eq!(c.workdir, format!("/workspace/sessions/{t}"));
        for bad in [None, Some("0"), Some("3"), Some("x")] {
            let e = authorise(&config(), t, &l, bad).unwrap_err();
            assert!(matches!(e, BrokerError::Invalid(_)), "{bad:?}: {e}");
            assert!(e.to_string().contains("x-ninetrix-replica"), "{e}");
        }
    }

    #[test]
    fn other_pools_agents_without_jobs_and_strangers_are_forbidden() {
        let t = ThreadId::new_v7();
        let e = authorise(&config(), t, &labels("q", "coder", Some(1), None), None).unwrap_err();
        assert!(matches!(e, BrokerError::Forbidden(_)));
        assert!(e.to_string().contains("not of pool p"), "{e}");
        let e = authorise(&config(), t, &labels("p", "writer", Some(1), None), None).unwrap_err();
        assert_eq!(
            e.to_string().split(';').next().unwrap(),
            "agent writer has no job tools in pool p"
        );
        let e = authorise(&config(), t, &labels("p", "coder", Some(3), None), None).unwrap_err();
        assert!(matches!(e, BrokerError::Forbidden(_)), "{e}");
        let e = authorise(&config(), t, &labels("p", "coder", None, None), None).unwrap_err();
        assert!(matches!(e, BrokerError::Forbidden(_)), "{e}");
        let e = authorise(&config(), t, &ThreadLabels::default(), None).unwrap_err();
        assert!(matches!(e, BrokerError::Forbidden(_)), "{e}");
    }
}
