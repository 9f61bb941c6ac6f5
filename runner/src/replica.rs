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
use crate::config::{ConfigError, SecretValue, get, secret_var};

/// A variable, trimmed (see [`get`]).
fn value<'a>(vars: &'a HashMap<String, String>, name: &str) -> Option<&'a str> {
    get(vars, name).map(str::trim)
}

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
    if value(vars, "AGENTFILE_THREAD_ID").is_some() {
        return Ok(None);
    }
    let replica = match (value(vars, "AGENTFILE_REPLICA"), value(vars, "AGENTFILE_POD_NAME")) {
        (Some(replica), _) => replica
            .parse::<u32>()
            .ok()
            .filter(|r| *r >= 1)
            .ok_or_else(|| ConfigError::Invalid {
                name: "AGENTFILE_REPLICA",
                why: format!(
                    "`{replica}` is not a replica number (1 or more; Swarm's {{{{.Task.Slot}}}})"
                ),
            })?,
        (None, Some(pod)) => replica_of_pod(pod).ok_or_else(|| ConfigError::Invalid {
            name: "AGENTFILE_POD_NAME",
            why: format!(
                "`{pod}` does not end in a StatefulSet ordinal (`<name>-<n>`); set AGENTFILE_REPLICA instead"
            ),
        })?,
        (None, None) => return Ok(None),
    };
    let need = |name: &'static str| {
        value(vars, name).ok_or(ConfigError::Invalid {
            name,
            why: "it must be set when AGENTFILE_THREAD_ID is not: the runner then asks the API for replica AGENTFILE_REPLICA's thread".into(),
        })
    };
    let url = need("AGENTFILE_API_URL")?.trim_end_matches('/').to_string();
    let pool = need("AGENTFILE_POOL")?.to_string();
    let agent = match value(vars, "AGENTFILE_AGENT") {
        Some(agent) => agent.to_string(),
        None => {
            let spec = need("AGENTFILE_AGENT_SPEC")?;
            serde_json::from_str::<serde_json::Value>(spec)
                .ok()
                .and_then(|v| v["name"].as_str().map(str::to_string))
                .ok_or(ConfigError::Invalid {
                    name: "AGENTFILE_AGENT_SPEC",
                    why: "not a resolved agent spec (no `name`)".into(),
                })?
        }
    };
    let token = secret_var(vars, secrets_dir, "AGENTFILE_AGENT_TOKEN")
        .ok_or(ConfigError::Invalid {
            name: "AGENTFILE_AGENT_TOKEN",
            why: "the agent token (environment or /run/secrets/AGENTFILE_AGENT_TOKEN) is needed to ask the API for replica AGENTFILE_REPLICA's thread".into(),
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
pub fn replica_of_pod(name: &str) -> Option<u32> {
    let (_, ordinal) = name.rsplit_once('-')?;
    if ordinal.is_empty() || !ordinal.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    ordinal.parse::<u32>().ok()?.checked_add(1)
}

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
