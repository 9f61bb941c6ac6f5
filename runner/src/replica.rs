//! A runner that knows only its replica number (a Swarm task's `{{.Task.Slot}}`, or a StatefulSet
//! pod's ordinal + 1 from its name, `AGENTFILE_POD_NAME`): its thread and
//! runner token come from the checkpoint API, which keeps one thread per replica of a pool's
//! agent (`POST /v1/runners/pools/{pool}/agents/{agent}/replicas/{replica}`, with the agent
//! token). [`lookup`] decides from the environment whether that is needed (pure); [`resolve`]
//! asks, retrying while the API is unreachable, as every other call of the runner does.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use ninetrix_client::{Client, ClientError, Token};
use ninetrix_proto::api::ReplicaThread;
use tokio_util::sync::CancellationToken;

use crate::backoff::{self, GaveUp};
use crate::config::{ConfigError, SecretValue, secret_var};
use crate::launch::{Launch, Replica, SWARM_SLOT, var};

/// What the runner asks the API for when no thread is given.
#[derive(Clone, Debug)]
pub struct Lookup {
    /// The API's base URL.
    pub url: String,
    /// The pool.
    pub pool: String,
    /// The agent.
    pub agent: String,
    /// The replica number (1-based).
    pub replica: u32,
    /// The agent token.
    pub token: SecretValue,
}

/// Why the replica's thread could not be had.
#[derive(Debug, thiserror::Error)]
pub enum ReplicaError {
    /// The API refused (a wrong token, say): a restart would not help.
    #[error(
        "the checkpoint API refused to give replica {replica} of {pool}/{agent} its thread: {source}"
    )]
    Refused {
        /// The pool.
        pool: String,
        /// The agent.
        agent: String,
        /// The replica.
        replica: u32,
        /// The API's answer.
        source: ClientError,
    },
    /// The API stayed unreachable past the runner's patience.
    #[error("the checkpoint API is unreachable: {0} (gave up after the AGENTFILE_API_PATIENCE)")]
    Unreachable(ClientError),
    /// Shutdown was asked for while waiting for the API.
    #[error("stopped before the replica's thread was known")]
    Stopped,
}

/// Whether the thread must be asked for, and how: `None` when `AGENTFILE_THREAD_ID` is set (or
/// no `AGENTFILE_REPLICA` is: the configuration then reports the missing thread). Otherwise the
/// API URL, the pool and the agent token (environment or `secrets_dir/AGENTFILE_AGENT_TOKEN`)
/// are required; the agent is `AGENTFILE_AGENT`, else the spec's name.
pub fn lookup(
    vars: &HashMap<String, String>,
    secrets_dir: &Path,
) -> Result<Option<Lookup>, ConfigError> {
    if crate::config::get(vars, var::THREAD_ID).is_some() {
        return Ok(None);
    }
    let launch = Launch::from_vars(vars)?;
    let replica = match launch.replica {
        Some(Replica::Number(n)) if n >= 1 => n,
        Some(Replica::Number(n)) => {
            return Err(ConfigError::Invalid {
                name: var::REPLICA,
                why: format!("`{n}` is not a replica number (1 or more; Swarm's {SWARM_SLOT})"),
            });
        }
        // Only a backend writes these; what the runner reads is a number.
        Some(Replica::SwarmSlot | Replica::PodOrdinal) | None => return Ok(None),
    };
    let need = |name: &'static str, value: Option<String>| {
        value.ok_or(ConfigError::Invalid {
            name,
            why: format!(
                "it must be set when {} is not: the runner then asks the API for replica {}'s thread",
                var::THREAD_ID,
                var::REPLICA
            ),
        })
    };
    let url = need(var::API_URL, launch.api_url)?;
    let pool = need(var::POOL, launch.pool)?;
    let agent = match launch.agent {
        Some(agent) => agent,
        None => {
            let spec = need(var::AGENT_SPEC, launch.spec)?;
            serde_json::from_str::<serde_json::Value>(&spec)
                .ok()
                .and_then(|v| v["name"].as_str().map(str::to_string))
                .ok_or(ConfigError::Invalid {
                    name: var::AGENT_SPEC,
                    why: "not a resolved agent spec (no `name`)".into(),
                })?
        }
    };
    let token = secret_var(vars, secrets_dir, var::AGENT_TOKEN).ok_or(ConfigError::Invalid {
        name: var::AGENT_TOKEN,
        why: format!(
            "the agent token (environment or /run/secrets/{0}) is needed to ask the API for replica {1}'s thread",
            var::AGENT_TOKEN,
            var::REPLICA
        ),
    })?;
    Ok(Some(Lookup {
        url,
        pool,
        agent,
        replica,
        token: SecretValue::new(token),
    }))
}

/// The replica of a StatefulSet pod: its ordinal (the number after the last `-` of its name,
/// from 0) plus one.
pub use crate::launch::replica_of_pod;

/// Asks the API for the replica's thread, retrying transient failures with the API backoff until
/// it answers, `patience` (from the first failure) runs out, or `shutdown`.
pub async fn resolve(
    lookup: &Lookup,
    http: &reqwest::Client,
    patience: Option<Duration>,
    shutdown: &CancellationToken,
) -> Result<ReplicaThread, ReplicaError> {
    let client = Client::new(
        http.clone(),
        &lookup.url,
        Some(Token::new(lookup.token.expose())),
    );
    let on_retry = |e: &ClientError, delay: Duration| {
        tracing::warn!(reason = %e, retry_in_ms = delay.as_millis() as u64, "cannot ask the checkpoint API for this replica's thread yet; retrying");
    };
    let answer = backoff::patiently(
        backoff::API,
        patience,
        shutdown.cancelled(),
        ClientError::is_transient,
        on_retry,
        || client.replica_thread(&lookup.pool, &lookup.agent, lookup.replica),
    )
    .await;
    answer.map_err(|gave_up| match gave_up {
        GaveUp::Patience(e) => ReplicaError::Unreachable(e),
        GaveUp::Stopped(()) => ReplicaError::Stopped,
        GaveUp::Failed(source) => ReplicaError::Refused {
            pool: lookup.pool.clone(),
            agent: lookup.agent.clone(),
            replica: lookup.replica,
            source,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    const SPEC: &str = r#"{"name": "writer"}"#;

    #[test]
    fn a_given_thread_or_no_replica_needs_no_lookup() {
        let none = Path::new("/nonexistent");
        let given = vars(&[
            (
                "AGENTFILE_THREAD_ID",
                "01936f5e-7c1a-7d3e-9f4b-2a6c8e0d1f35",
            ),
            ("AGENTFILE_REPLICA", "2"),
        ]);
        assert!(lookup(&given, none).unwrap().is_none());
        assert!(lookup(&vars(&[]), none).unwrap().is_none());
    }

    #[test]
    fn a_replica_without_a_thread_asks_the_api() {
        let l = lookup(
            &vars(&[
                ("AGENTFILE_REPLICA", "3"),
                ("AGENTFILE_API_URL", "http://ninetrix-api:8080/"),
                ("AGENTFILE_POOL", "shop"),
                ("AGENTFILE_AGENT_SPEC", SPEC),
                ("AGENTFILE_AGENT_TOKEN", "nxs1.token"),
            ]),
            Path::new("/nonexistent"),
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            (l.url.as_str(), l.pool.as_str(), l.agent.as_str(), l.replica),
            ("http://ninetrix-api:8080", "shop", "writer", 3)
        );
        assert_eq!(l.token.expose(), "nxs1.token");
        assert!(
            !format!("{l:?}").contains("nxs1.token"),
            "the token never prints"
        );
    }

    #[test]
    fn the_agent_token_may_come_from_the_secret_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("AGENTFILE_AGENT_TOKEN"), "nxs1.file\n").unwrap();
        let l = lookup(
            &vars(&[
                ("AGENTFILE_REPLICA", "1"),
                ("AGENTFILE_API_URL", "http://api"),
                ("AGENTFILE_POOL", "shop"),
                ("AGENTFILE_AGENT", "writer"),
            ]),
            dir.path(),
        )
        .unwrap()
        .unwrap();
        assert_eq!(l.token.expose(), "nxs1.file");
    }

    #[test]
    fn a_statefulset_pod_is_its_ordinal_plus_one() {
        assert_eq!(replica_of_pod("ninetrix-shop-writer-0"), Some(1));
        assert_eq!(replica_of_pod("ninetrix-shop-writer-12"), Some(13));
        for bad in [
            "writer",
            "writer-",
            "writer-x1",
            "writer-+1",
            "writer-4294967295",
        ] {
            assert_eq!(replica_of_pod(bad), None, "{bad}");
        }
        let l = lookup(
            &vars(&[
                ("AGENTFILE_POD_NAME", "ninetrix-shop-writer-2"),
                ("AGENTFILE_API_URL", "http://api"),
                ("AGENTFILE_POOL", "shop"),
                ("AGENTFILE_AGENT", "writer"),
                ("AGENTFILE_AGENT_TOKEN", "t"),
            ]),
            Path::new("/nonexistent"),
        )
        .unwrap()
        .unwrap();
        assert_eq!(l.replica, 3);
        let err = lookup(
            &vars(&[
                ("AGENTFILE_POD_NAME", "writer"),
                ("AGENTFILE_API_URL", "http://api"),
            ]),
            Path::new("/nonexistent"),
        )
        .unwrap_err();
        assert!(err.to_string().contains("AGENTFILE_POD_NAME"), "{err}");
    }

    #[test]
    fn what_is_missing_is_named() {
        let base = [
            ("AGENTFILE_REPLICA", "1"),
            ("AGENTFILE_API_URL", "http://api"),
            ("AGENTFILE_POOL", "shop"),
            ("AGENTFILE_AGENT_SPEC", SPEC),
            ("AGENTFILE_AGENT_TOKEN", "t"),
        ];
        for (drop, named) in [
            ("AGENTFILE_API_URL", "AGENTFILE_API_URL"),
            ("AGENTFILE_POOL", "AGENTFILE_POOL"),
            ("AGENTFILE_AGENT_TOKEN", "AGENTFILE_AGENT_TOKEN"),
            ("AGENTFILE_AGENT_SPEC", "AGENTFILE_AGENT_SPEC"),
        ] {
            let pairs: Vec<_> = base.iter().copied().filter(|(k, _)| *k != drop).collect();
            let err = lookup(&vars(&pairs), Path::new("/nonexistent")).unwrap_err();
            assert!(err.to_string().contains(named), "{drop}: {err}");
        }
        for bad in ["0", "two", "-1"] {
            let mut pairs = base.to_vec();
            pairs[0] = ("AGENTFILE_REPLICA", bad);
            let err = lookup(&vars(&pairs), Path::new("/nonexistent")).unwrap_err();
            assert!(
                err.to_string().contains("AGENTFILE_REPLICA"),
                "{bad}: {err}"
            );
        }
    }
}
