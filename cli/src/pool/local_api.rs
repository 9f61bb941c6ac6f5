//! The checkpoint API a pool uses: `AGENTFILE_API_URL` (+ `AGENTFILE_ADMIN_TOKEN`) if set, else
//! the local `ninetrix-api` container — the same image running `ninetrix api`, its SQLite file on
//! a named volume, published on 127.0.0.1, its secret and admin token generated once under
//! `$AGENTFILE_HOME/api/` (mode 0600, never printed) and uploaded as files, joined to each pool's
//! network under the alias `ninetrix-api`.

use std::collections::HashMap;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use bollard::Docker;
use bollard::models::{
    ContainerCreateBody, EndpointSettings, HealthConfig, HostConfig, Mount, MountType,
    NetworkConnectRequest, PortBinding, RestartPolicy, RestartPolicyNameEnum,
};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, LogsOptionsBuilder, RemoveContainerOptionsBuilder,
};
use futures_util::StreamExt as _;
use ninetrix_client::{Client, ClientError, Token};
use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{
    EnqueueRequest, EnqueueResponse, Event, RunnerTokenRequest, ThreadSummary,
};

use crate::docker::is_not_found;
use crate::pool::image::Image;

/// The API port inside containers.
const PORT: u16 = 8080;
/// The default host port of the local API.
pub(crate) const DEFAULT_HOST_PORT: u16 = 8787;

/// How the CLI and the containers reach the API.
#[derive(Clone)]
pub(crate) struct Api {
    /// From the host (the CLI).
    pub(crate) url: String,
    /// From the agent containers.
    pub(crate) container_url: String,
    /// The typed client, with the admin token.
    client: Client,
    /// Where the admin token came from, for the message when the API refuses it.
    token_source: String,
    /// The local container's name, when ninetrix runs the API.
    pub(crate) local: Option<String>,
}

/// The local API container's name (`NINETRIX_API_CONTAINER`, default `ninetrix-api`).
pub(crate) fn local_name() -> String {
    std::env::var("NINETRIX_API_CONTAINER")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "ninetrix-api".into())
}

/// The API URL containers get, known without starting anything (`up --dry-run` needs it for the
/// configuration digest): `AGENTFILE_API_URL` if set, else the local API's alias.
pub(crate) fn planned_container_url() -> String {
    std::env::var("AGENTFILE_API_URL")
        .ok()
        .filter(|u| !u.is_empty())
        .map_or_else(
            || format!("http://ninetrix-api:{PORT}"),
            |u| u.trim_end_matches('/').to_string(),
        )
}

/// Reads a secret file, creating it with 32 random bytes (base64url) on first use.
fn secret_file(path: &Path) -> anyhow::Result<String> {
    if let Ok(v) = std::fs::read_to_string(path) {
        return Ok(v.trim().to_string());
    }
    let dir = path.parent().context("secret path has a parent")?;
    std::fs::create_dir_all(dir)?;
    let mut raw = [0u8; 32];
    getrandom_fill(&mut raw)?;
    let value: String = raw.iter().map(|b| format!("{b:02x}")).collect();
    let mut f = std::fs::OpenOptions::new()
        .create_new(true)
        .write(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    f.write_all(value.as_bytes())?;
    f.sync_all()?;
    Ok(value)
}

fn getrandom_fill(buf: &mut [u8]) -> anyhow::Result<()> {
    getrandom::fill(buf).map_err(|e| anyhow::anyhow!("cannot read random bytes from the OS: {e}"))
}

/// A tar holding files under `run/secrets/`, mode 0400.
pub(crate) fn secrets_tar(files: &[(&str, &str)]) -> anyhow::Result<Vec<u8>> {
    let mut tar = tar::Builder::new(Vec::new());
    let mut dir = tar::Header::new_gnu();
    dir.set_entry_type(tar::EntryType::Directory);
    dir.set_mode(0o755);
    dir.set_size(0);
    dir.set_cksum();
    tar.append_data(&mut dir, "run/secrets/", std::io::empty())?;
    for (name, value) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(value.len() as u64);
        header.set_mode(0o400);
        header.set_cksum();
        tar.append_data(&mut header, format!("run/secrets/{name}"), value.as_bytes())?;
    }
    Ok(tar.into_inner()?)
}

/// The API named by `AGENTFILE_API_URL` (+ `AGENTFILE_ADMIN_TOKEN`), if set.
fn external() -> anyhow::Result<Option<Api>> {
    let Some(url) = std::env::var("AGENTFILE_API_URL")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        return Ok(None);
    };
    let admin = std::env::var("AGENTFILE_ADMIN_TOKEN").context("AGENTFILE_API_URL is set but AGENTFILE_ADMIN_TOKEN is not; set it to that API's admin token")?;
    let url = url.trim_end_matches('/').to_string();
    Ok(Some(Api::new(
        url.clone(),
        url,
        admin,
        "AGENTFILE_ADMIN_TOKEN (set it to the admin token of the API at AGENTFILE_API_URL)".into(),
        None,
    )))
}

/// Where the local API's admin token lives, in words.
fn local_token_source(path: &Path) -> String {
    format!(
        "{} (written by `ninetrix up` and given to the {} container when it was created; if that \
         container was created with another token, `ninetrix down --api` and `ninetrix up` \
         recreate it — its data is kept)",
        path.display(),
        local_name()
    )
}

impl Api {
    /// The API to use: external if `AGENTFILE_API_URL` is set, else the local container (started
    /// if needed, recreated when the image changed).
    pub(crate) async fn ensure(docker: &Docker, home: &Path, image: &Image) -> anyhow::Result<Api> {
        if let Some(api) = external()? {
            return Ok(api);
        }
        let name = local_name();
        let secret = secret_file(&home.join("api").join("secret"))?;
        let admin_path = home.join("api").join("admin-token");
        let admin = secret_file(&admin_path)?;
        let host_port = local_host_port()?;
        let existing = match docker.inspect_container(&name, None).await {
            Ok(c) => Some(c),
            Err(e) if is_not_found(&e) => None,
            Err(e) => return Err(e).context("cannot inspect the local API container"),
        };
        let reuse = existing
            .as_ref()
            .is_some_and(|c| c.image.as_deref() == Some(image.id.as_str()));
        if existing.is_some() && !reuse {
            docker
                .remove_container(
                    &name,
                    Some(RemoveContainerOptionsBuilder::default().force(true).build()),
                )
                .await
                .context("cannot replace the local API container")?;
        }
        if !reuse {
            let labels: HashMap<String, String> = [
                ("dev.ninetrix.role".to_string(), "api".to_string()),
                (
                    "dev.ninetrix.version".to_string(),
                    env!("CARGO_PKG_VERSION").to_string(),
                ),
            ]
            .into();
            let body = ContainerCreateBody {
                image: Some(image.tag.clone()),
                cmd: Some(
                    [
                        "api",
                        "--listen",
                        "0.0.0.0:8080",
                        "--database",
                        "sqlite:///data/ninetrix.db",
                        "--secret-file",
                        "/run/secrets/api-secret",
                        "--admin-token-file",
                        "/run/secrets/admin-token",
                    ]
                    .map(String::from)
                    .to_vec(),
                ),
                labels: Some(labels),
                exposed_ports: Some(vec![format!("{PORT}/tcp")]),
                // The runner image's check judges a runner's report; the API's is its readiness.
                healthcheck: Some(HealthConfig {
                    test: Some(
                        [
                            "CMD",
                            "/ninetrix",
                            "health",
                            "--url",
                            &format!("http://127.0.0.1:{PORT}/readyz"),
                        ]
                        .map(String::from)
                        .to_vec(),
                    ),
                    interval: Some(15_000_000_000),
                    timeout: Some(10_000_000_000),
                    start_period: Some(10_000_000_000),
                    retries: Some(1),
                    ..HealthConfig::default()
                }),
                stop_timeout: Some(10),
                host_config: Some(HostConfig {
                    init: Some(true),
                    restart_policy: Some(RestartPolicy {
                        name: Some(RestartPolicyNameEnum::UNLESS_STOPPED),
                        maximum_retry_count: None,
                    }),
                    port_bindings: Some(
                        [(
                            format!("{PORT}/tcp"),
                            Some(vec![PortBinding {
                                host_ip: Some("127.0.0.1".into()),
                                host_port: Some(host_port.to_string()),
                            }]),
                        )]
                        .into(),
                    ),
                    mounts: Some(vec![Mount {
                        target: Some("/data".into()),
                        source: Some(format!("{name}-data")),
                        typ: Some(MountType::VOLUME),
                        ..Mount::default()
                    }]),
                    ..HostConfig::default()
                }),
                ..ContainerCreateBody::default()
            };
            docker
                .create_container(
                    Some(CreateContainerOptionsBuilder::default().name(&name).build()),
                    body,
                )
                .await
                .with_context(|| format!("cannot create the local API container {name}"))?;
            let tar = secrets_tar(&[("api-secret", &secret), ("admin-token", &admin)])?;
            docker
                .upload_to_container(
                    &name,
                    Some(
                        bollard::query_parameters::UploadToContainerOptionsBuilder::default()
                            .path("/")
                            .build(),
                    ),
                    bollard::body_full(tar.into()),
                )
                .await
                .context("cannot upload the local API's secrets")?;
        }
        docker.start_container(&name, None).await.map_err(|e| anyhow::anyhow!("cannot start the local API container {name}: {e} (is port {host_port} in use? set NINETRIX_API_PORT)"))?;
        let inspected = docker.inspect_container(&name, None).await?;
        let port = inspected
            .network_settings
            .and_then(|n| n.ports)
            .and_then(|p| p.get(&format!("{PORT}/tcp")).cloned().flatten())
            .and_then(|b| b.first().and_then(|b| b.host_port.clone()))
            .context("the local API container has no published port")?;
        let api = Api::new(
            format!("http://127.0.0.1:{port}"),
            format!("http://ninetrix-api:{PORT}"),
            admin,
            local_token_source(&admin_path),
            Some(name),
        );
        api.wait_ready(docker, Duration::from_secs(30)).await?;
        Ok(api)
    }

    /// The API a pool already uses: `AGENTFILE_API_URL` if set, else the local API at the URL the
    /// pool state recorded, with the admin token from `$AGENTFILE_HOME/api/`.
    pub(crate) fn existing(home: &Path, state_url: Option<&str>) -> anyhow::Result<Api> {
        if let Some(api) = external()? {
            return Ok(api);
        }
        let url = state_url
            .context("the pool has no API recorded; run `ninetrix up` first")?
            .to_string();
        let admin_path = home.join("api").join("admin-token");
        let admin = std::fs::read_to_string(&admin_path).with_context(|| {
            format!(
                "cannot read the admin token {}; run `ninetrix up` first",
                admin_path.display()
            )
        })?;
        Ok(Api::new(
            url,
            format!("http://ninetrix-api:{PORT}"),
            admin.trim().to_string(),
            local_token_source(&admin_path),
            Some(local_name()),
        ))
    }

    /// The API at the URL `AGENTFILE_API_URL` names, or the local API at its default port,
    /// without any pool (`trace --thread-id` needs only the API).
    pub(crate) fn any(home: &Path) -> anyhow::Result<Api> {
        Api::existing(
            home,
            Some(&format!("http://127.0.0.1:{}", local_host_port()?)),
        )
    }

    fn new(
        url: String,
        container_url: String,
        admin: String,
        token_source: String,
        local: Option<String>,
    ) -> Api {
        let client = Client::new(
            ninetrix_client::http_client(),
            &url,
            Some(Token::new(admin)),
        );
        Api {
            url,
            container_url,
            client,
            token_source,
            local,
        }
    }

    /// Turns a failed call into an error that says what to do: a refused token names where the
    /// token comes from; an unreachable API names its URL (the client's message does).
    fn explain(&self, e: ClientError, doing: &str) -> anyhow::Error {
        if e.is_auth() {
            let code = e.code().map(ToString::to_string).unwrap_or_default();
            return anyhow::anyhow!(
                "the checkpoint API at {} refused the admin token while {doing} ({code}); the \
                 token comes from {}",
                self.url,
                self.token_source
            );
        }
        anyhow::Error::new(e).context(format!("while {doing}"))
    }

    async fn wait_ready(&self, docker: &Docker, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        let probe = self.client.clone().with_timeout(Duration::from_secs(2));
        loop {
            if probe.readyz().await.is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                let mut tail = String::new();
                if let Some(name) = &self.local {
                    let mut logs = docker.logs(
                        name,
                        Some(
                            LogsOptionsBuilder::default()
                                .stdout(true)
                                .stderr(true)
                                .tail("20")
                                .build(),
                        ),
                    );
                    while let Some(Ok(line)) = logs.next().await {
                        tail.push_str(&line.to_string());
                    }
                }
                bail!(
                    "the checkpoint API at {} was not ready within {}s; its last log lines:\n{tail}",
                    self.url,
                    timeout.as_secs()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Joins the local API to a pool's network under the alias `ninetrix-api`.
    pub(crate) async fn join(&self, docker: &Docker, network: &str) -> anyhow::Result<()> {
        let Some(name) = &self.local else {
            return Ok(());
        };
        let request = NetworkConnectRequest {
            container: name.clone(),
            endpoint_config: Some(EndpointSettings {
                aliases: Some(vec!["ninetrix-api".into()]),
                ..EndpointSettings::default()
            }),
        };
        match docker.connect_network(network, request).await {
            Ok(()) => Ok(()),
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 403 | 409,
                ..
            }) => Ok(()),
            Err(bollard::errors::Error::DockerResponseServerError { message, .. })
                if message.contains("already exists") =>
            {
                Ok(())
            }
            Err(e) => {
                Err(e).with_context(|| format!("cannot connect the API to network {network}"))
            }
        }
    }

    /// Mints the runner token of a thread (recording its labels).
    pub(crate) async fn runner_token(
        &self,
        thread: ThreadId,
        pool: &str,
        agent: &str,
        replica: u32,
    ) -> anyhow::Result<String> {
        let request = RunnerTokenRequest {
            thread_id: thread,
            pool: Some(pool.to_string()),
            agent: Some(agent.to_string()),
            replica: Some(replica),
        };
        let minted = self.client.mint_runner_token(&request).await.map_err(|e| {
            self.explain(e, &format!("minting the runner token of {agent}-{replica}"))
        })?;
        Ok(minted.token)
    }

    /// A thread's summary; `None` if the API has no such thread.
    pub(crate) async fn thread(&self, thread: ThreadId) -> anyhow::Result<Option<ThreadSummary>> {
        self.client
            .thread(thread)
            .await
            .map_err(|e| self.explain(e, &format!("reading thread {thread}")))
    }

    /// The thread's last event seq (0 for a thread the API does not have yet).
    pub(crate) async fn event_seq(&self, thread: ThreadId) -> anyhow::Result<u64> {
        Ok(self.thread(thread).await?.map_or(0, |t| t.event_seq))
    }

    /// Every event of a thread after a seq.
    pub(crate) async fn events(&self, thread: ThreadId, after: u64) -> anyhow::Result<Vec<Event>> {
        self.client
            .events_after(thread, after)
            .await
            .map_err(|e| self.explain(e, &format!("reading the events of thread {thread}")))
    }

    /// Puts a message in a thread's inbox.
    pub(crate) async fn enqueue(
        &self,
        thread: ThreadId,
        request: &EnqueueRequest,
    ) -> anyhow::Result<EnqueueResponse> {
        self.client
            .enqueue(thread, request)
            .await
            .map_err(|e| self.explain(e, &format!("queueing a message for thread {thread}")))
    }

    /// Deletes a thread's data (a thread the API does not have is already gone).
    pub(crate) async fn purge(&self, thread: ThreadId) -> anyhow::Result<()> {
        self.client
            .purge(thread)
            .await
            .map(drop)
            .map_err(|e| self.explain(e, &format!("purging thread {thread}")))
    }
}

/// The local API's host port: `NINETRIX_API_PORT`, else the default.
fn local_host_port() -> anyhow::Result<u16> {
    match std::env::var("NINETRIX_API_PORT") {
        Ok(p) => p
            .parse()
            .with_context(|| format!("NINETRIX_API_PORT `{p}` is not a port number")),
        Err(_) => Ok(DEFAULT_HOST_PORT),
    }
}
