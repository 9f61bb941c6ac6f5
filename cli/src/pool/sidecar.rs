//! MCP sidecars (issue 13): an `mcp_servers` entry with `image:` + `command:` runs as one
//! container per pool, `ninetrix-<pool>-mcp-<server>`, on the pool network under the alias
//! `mcp-<server>`: the image is the server's image plus this binary, whose `ninetrix mcp-bridge`
//! serves the stdio server over streamable HTTP (restarting it when it dies; Docker restarts the
//! bridge unless it was stopped). `up` reconciles sidecars like agents — created, kept, recreated
//! when their configuration digest changes, removed when their server is no longer declared —
//! before the agents that use them; `down`, `ps` and `logs` find them by the pool label.
//!
//! [`plan`] is the pure decision; [`observe`] and [`apply`] are the Docker I/O around it.

use std::collections::{BTreeMap, HashMap};

use anyhow::Context as _;
use bollard::Docker;
use bollard::models::{
    ContainerCreateBody, EndpointSettings, HealthConfig, HostConfig, NetworkingConfig,
    RestartPolicy, RestartPolicyNameEnum,
};
use bollard::query_parameters::CreateContainerOptionsBuilder;
use ninetrix_agentfile::Agentfile;
use ninetrix_agentfile::mcp::{self, McpTransport};
use sha2::{Digest, Sha256};

use crate::docker::{label, stop_and_remove};
use crate::hardening;
use crate::objects::MCP_SERVER;
use crate::objects::sidecar_container_name;
use crate::objects::{AGENT, DURABLE, HASH, POOL, VERSION};
use crate::pool::engine::{pool_containers, upload_secrets};
use crate::pool::image::Image;
use crate::pool::spec::{MissingSecret, host_values};
use crate::ui::progress::Progress;
use ninetrix_agentfile::security::Security;

/// What `ps` and `logs` show as a sidecar's agent: `mcp:<server>` (no agent name has a colon).
pub(crate) fn agent_label(server: &str) -> String {
    format!("mcp:{server}")
}

/// The sidecar's healthcheck command (on one host and on Swarm): the bridge's own health
/// endpoint, asked by this binary (the image has no shell and no curl).
pub(crate) fn health_test() -> Vec<String> {
    vec![
        "CMD".into(),
        "/ninetrix".into(),
        "health".into(),
        "--url".into(),
        format!("http://127.0.0.1:{}/health", mcp::SIDECAR_PORT),
    ]
}

/// A sidecar the agentfile wants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Wanted {
    /// The server's name.
    pub(crate) server: String,
    /// The server's own image (`image:`), which the sidecar image is built from.
    pub(crate) base: String,
    /// The server's command line.
    pub(crate) command: Vec<String>,
    /// Plain settings.
    pub(crate) env: BTreeMap<String, String>,
    /// Secret names (the values are uploaded to `/run/secrets`, and passed to the server process
    /// only, by `mcp-bridge --secret`).
    pub(crate) secrets: Vec<String>,
    /// How its container is confined.
    pub(crate) security: Security,
}

impl Wanted {
    /// The sidecars of an agentfile, in server name order.
    pub(crate) fn of(af: &Agentfile) -> Vec<Wanted> {
        af.mcp_servers
            .iter()
            .filter_map(|(name, server)| match &server.transport {
                McpTransport::Sidecar {
                    image,
                    command,
                    env,
                    secrets,
                    security,
                } => Some(Wanted {
                    server: name.clone(),
                    base: image.clone(),
                    command: command.clone(),
                    env: env.clone(),
                    secrets: secrets.clone(),
                    security: security.clone(),
                }),
                _ => None,
            })
            .collect()
    }

    /// The bridge's arguments (the image's entrypoint is the binary).
    pub(crate) fn cmd(&self) -> Vec<String> {
        let mut cmd = vec![
            "mcp-bridge".to_string(),
            "--listen".to_string(),
            format!("0.0.0.0:{}", mcp::SIDECAR_PORT),
        ];
        for s in &self.secrets {
            cmd.push("--secret".into());
            cmd.push(s.clone());
        }
        cmd.push("--".into());
        cmd.extend(self.command.iter().cloned());
        cmd
    }

    /// The configuration digest: image ID, command, settings and secret values (hashed).
    pub(crate) fn digest(&self, image_id: &str, secrets: &BTreeMap<String, String>) -> String {
        let mut h = Sha256::new();
        h.update(image_id.as_bytes());
        h.update([0]);
        for part in self.cmd() {
            h.update(part.as_bytes());
            h.update([0]);
        }
        for (k, v) in &self.env {
            h.update(k.as_bytes());
            h.update([1]);
            h.update(v.as_bytes());
            h.update([0]);
        }
        for (k, v) in secrets {
            h.update(k.as_bytes());
            h.update([2]);
            h.update(Sha256::digest(v.as_bytes()));
        }
        h.update(
            serde_json::to_string(&self.security)
                .unwrap_or_default()
                .as_bytes(),
        );
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The host's values of its secrets; the first one missing is an error naming the server.
    pub(crate) fn host_secrets(&self) -> Result<BTreeMap<String, String>, MissingSecret> {
        host_values(&self.secrets, &format!("MCP server `{}`", self.server))
    }

    fn body(&self, pool: &str, network: &str, image: &str, digest: &str) -> ContainerCreateBody {
        let labels: HashMap<String, String> = [
            (POOL, pool.to_string()),
            (AGENT, agent_label(&self.server)),
            (MCP_SERVER, self.server.clone()),
            (DURABLE, "true".to_string()),
            (HASH, digest.to_string()),
            (VERSION, crate::objects::VERSION_VALUE.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let mut env: Vec<String> = vec![format!("HOME={}", hardening::HOME)];
        env.extend(self.env.iter().map(|(k, v)| format!("{k}={v}")));
        let mut host_config = HostConfig {
            init: Some(true),
            restart_policy: Some(RestartPolicy {
                name: Some(RestartPolicyNameEnum::UNLESS_STOPPED),
                maximum_retry_count: None,
            }),
            network_mode: Some(network.to_string()),
            ..HostConfig::default()
        };
        hardening::apply(&mut host_config, &self.security, None, (POOL, pool));
        ContainerCreateBody {
            image: Some(image.to_string()),
            cmd: Some(self.cmd()),
            hostname: Some(mcp::sidecar_host(&self.server)),
            user: Some(hardening::user(&self.security)),
            env: Some(env),
            labels: Some(labels),
            host_config: Some(host_config),
            // The bridge's own health endpoint: `ps` shows the sidecar healthy while its server
            // process runs.
            healthcheck: Some(HealthConfig {
                test: Some(health_test()),
                interval: Some(15_000_000_000),
                timeout: Some(10_000_000_000),
                start_period: Some(30_000_000_000),
                retries: Some(2),
                ..HealthConfig::default()
            }),
            networking_config: Some(NetworkingConfig {
                endpoints_config: Some(
                    [(
                        network.to_string(),
                        EndpointSettings {
                            aliases: Some(vec![mcp::sidecar_host(&self.server)]),
                            ..EndpointSettings::default()
                        },
                    )]
                    .into(),
                ),
            }),
            ..ContainerCreateBody::default()
        }
    }
}

/// A sidecar Docker has for the pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Seen {
    /// The server it serves.
    pub(crate) server: String,
    /// Docker's ID.
    pub(crate) id: String,
    /// Its configuration digest.
    pub(crate) digest: Option<String>,
    /// Whether it runs (or is being restarted by Docker).
    pub(crate) running: bool,
}

/// One step of reconciling sidecars.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    /// Create and start the sidecar of this server.
    Create(String),
    /// Its configuration changed (or `--force-recreate`): replace it.
    Recreate {
        /// The server.
        server: String,
        /// The old container.
        id: String,
    },
    /// Unchanged but stopped: start it.
    Start {
        /// The server.
        server: String,
        /// The container.
        id: String,
    },
    /// Unchanged and running.
    Keep(String),
    /// Its server is no longer declared (or a second sidecar of one server): remove it. A
    /// sidecar holds no state of its own.
    Remove {
        /// The server.
        server: String,
        /// The container.
        id: String,
    },
}

impl std::fmt::Display for Action {
    /// One `up --dry-run` line, in the style of the agents' plan.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Action::Create(server) => write!(f, "create {}: missing", agent_label(server)),
            Action::Recreate { server, .. } => write!(
                f,
                "recreate {}: config changed (image, command, env or secret values)",
                agent_label(server)
            ),
            Action::Start { server, .. } => write!(f, "start {}: stopped", agent_label(server)),
            Action::Keep(server) => write!(f, "keep {}: up to date", agent_label(server)),
            Action::Remove { server, .. } => write!(
                f,
                "remove {}: its server is not in the agentfile",
                agent_label(server)
            ),
        }
    }
}

impl Action {
    /// The server the action is about.
    pub(crate) fn server(&self) -> &str {
        match self {
            Action::Create(s)
            | Action::Recreate { server: s, .. }
            | Action::Start { server: s, .. }
            | Action::Keep(s)
            | Action::Remove { server: s, .. } => s,
        }
    }
}

/// Reconciles sidecars: `wanted` with their digests against what Docker has. Pure.
pub(crate) fn plan(wanted: &[(String, String)], seen: &[Seen], force: bool) -> Vec<Action> {
    let mut actions = Vec::new();
    let mut used: Vec<&str> = Vec::new();
    for (server, digest) in wanted {
        match seen.iter().find(|s| &s.server == server) {
            None => actions.push(Action::Create(server.clone())),
            Some(s) => {
                used.push(&s.id);
                if force || s.digest.as_deref() != Some(digest.as_str()) {
                    actions.push(Action::Recreate {
                        server: server.clone(),
                        id: s.id.clone(),
                    });
                } else if s.running {
                    actions.push(Action::Keep(server.clone()));
                } else {
                    actions.push(Action::Start {
                        server: server.clone(),
                        id: s.id.clone(),
                    });
                }
            }
        }
    }
    for s in seen {
        if !used.contains(&s.id.as_str()) {
            actions.push(Action::Remove {
                server: s.server.clone(),
                id: s.id.clone(),
            });
        }
    }
    actions
}

/// The pool's sidecars.
pub(crate) async fn observe(docker: &Docker, pool: &str) -> anyhow::Result<Vec<Seen>> {
    Ok(pool_containers(docker, Some(pool))
        .await?
        .iter()
        .filter_map(|c| {
            let server = label(c, MCP_SERVER)?.to_string();
            Some(Seen {
                server,
                id: c.id.clone().unwrap_or_default(),
                digest: label(c, HASH).map(str::to_string),
                running: matches!(
                    c.state,
                    Some(
                        bollard::models::ContainerSummaryStateEnum::RUNNING
                            | bollard::models::ContainerSummaryStateEnum::RESTARTING
                    )
                ),
            })
        })
        .collect())
}

/// Whether a listed container is a sidecar — an MCP server's or an egress proxy
/// (pool/egress.rs) — which agents' reconciling leaves out.
pub(crate) fn is_sidecar(c: &bollard::models::ContainerSummary) -> bool {
    label(c, MCP_SERVER).is_some() || label(c, crate::objects::EGRESS).is_some()
}

/// Everything `up` needs to reconcile the pool's sidecars.
pub(crate) struct Sidecars<'a> {
    /// The engine.
    pub(crate) docker: &'a Docker,
    /// The pool.
    pub(crate) pool: &'a str,
    /// The pool network's ID.
    pub(crate) network: &'a str,
    /// Seconds a replaced sidecar gets to stop.
    pub(crate) stop_timeout: i32,
}

impl Sidecars<'_> {
    /// Reconciles the pool's sidecars with `wanted` (their images built, their secrets read).
    pub(crate) async fn apply(
        &self,
        wanted: &[(Wanted, Image, BTreeMap<String, String>)],
        force: bool,
        progress: &Progress,
    ) -> anyhow::Result<()> {
        let digests: Vec<(String, String)> = wanted
            .iter()
            .map(|(w, img, secrets)| (w.server.clone(), w.digest(&img.id, secrets)))
            .collect();
        let seen = observe(self.docker, self.pool).await?;
        for action in plan(&digests, &seen, force) {
            let name = sidecar_container_name(self.pool, action.server());
            match &action {
                Action::Keep(_) => progress.step("Sidecar", &name, "Running"),
                Action::Start { id, .. } => {
                    self.docker
                        .start_container(id, None)
                        .await
                        .with_context(|| format!("cannot start {name}"))?;
                    progress.step("Sidecar", &name, "Started");
                }
                Action::Remove { id, .. } => {
                    stop_and_remove(self.docker, id, self.stop_timeout).await?;
                    progress.step("Sidecar", &name, "Removed (its server is not declared)");
                }
                Action::Create(_) | Action::Recreate { .. } => {
                    if let Action::Recreate { id, .. } = &action {
                        stop_and_remove(self.docker, id, self.stop_timeout).await?;
                    }
                    let i = wanted
                        .iter()
                        .position(|(w, _, _)| w.server == action.server())
                        .expect("planned from wanted");
                    let (w, img, secrets) = &wanted[i];
                    self.create(w, &img.tag, &digests[i].1, secrets).await?;
                    let done = if matches!(action, Action::Create(_)) {
                        "Started"
                    } else {
                        "Recreated"
                    };
                    progress.step("Sidecar", &name, done);
                }
            }
        }
        Ok(())
    }

    async fn create(
        &self,
        w: &Wanted,
        image: &str,
        digest: &str,
        secrets: &BTreeMap<String, String>,
    ) -> anyhow::Result<()> {
        let name = sidecar_container_name(self.pool, &w.server);
        let options = CreateContainerOptionsBuilder::default().name(&name).build();
        let created = self
            .docker
            .create_container(
                Some(options),
                w.body(self.pool, self.network, image, digest),
            )
            .await
            .with_context(|| format!("cannot create {name}"))?;
        if !secrets.is_empty() {
            upload_secrets(self.docker, &created.id, secrets, None)
                .await
                .with_context(|| format!("cannot give {name} its secrets"))?;
        }
        self.docker
            .start_container(&created.id, None)
            .await
            .with_context(|| format!("cannot start {name}"))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(server: &str, id: &str, digest: &str, running: bool) -> Seen {
        Seen {
            server: server.into(),
            id: id.into(),
            digest: Some(digest.into()),
            running,
        }
    }

    #[test]
    fn sidecars_are_created_kept_recreated_started_and_removed() {
        let wanted = vec![
            ("new".to_string(), "d1".to_string()),
            ("same".to_string(), "d2".to_string()),
            ("changed".to_string(), "d3".to_string()),
            ("stopped".to_string(), "d4".to_string()),
        ];
        let observed = vec![
            seen("same", "a", "d2", true),
            seen("changed", "b", "old", true),
            seen("stopped", "c", "d4", false),
            seen("gone", "d", "d9", true),
        ];
        assert_eq!(
            plan(&wanted, &observed, false),
            [
                Action::Create("new".into()),
                Action::Keep("same".into()),
                Action::Recreate {
                    server: "changed".into(),
                    id: "b".into()
                },
                Action::Start {
                    server: "stopped".into(),
                    id: "c".into()
                },
                Action::Remove {
                    server: "gone".into(),
                    id: "d".into()
                },
            ]
        );
        // --force-recreate replaces even an unchanged one.
        assert_eq!(
            plan(&wanted[1..2], &observed[..1], true),
            [Action::Recreate {
                server: "same".into(),
                id: "a".into()
            }]
        );
    }

    #[test]
    fn dry_run_lines_name_the_sidecar_and_why() {
        assert_eq!(
            Action::Create("time".into()).to_string(),
            "create mcp:time: missing"
        );
        assert_eq!(
            Action::Remove {
                server: "old".into(),
                id: "x".into()
            }
            .to_string(),
            "remove mcp:old: its server is not in the agentfile"
        );
    }

    #[test]
    fn the_digest_sees_secret_values_without_holding_them() {
        let w = Wanted {
            server: "s".into(),
            base: "img".into(),
            command: vec!["srv".into()],
            env: BTreeMap::new(),
            secrets: vec!["TOKEN".into()],
            security: Security::default(),
        };
        let a = w.digest(
            "sha256:1",
            &[("TOKEN".to_string(), "one".to_string())].into(),
        );
        let b = w.digest(
            "sha256:1",
            &[("TOKEN".to_string(), "two".to_string())].into(),
        );
        assert_ne!(a, b);
        assert!(!a.contains("one"));
        assert_eq!(
            w.cmd(),
            [
                "mcp-bridge",
                "--listen",
                "0.0.0.0:8931",
                "--secret",
                "TOKEN",
                "--",
                "srv"
            ]
        );
    }
}
