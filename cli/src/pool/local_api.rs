//! The checkpoint API a pool uses: `AGENTFILE_API_URL` (+ `AGENTFILE_ADMIN_TOKEN`) if set, else
//! the local API container of this `$AGENTFILE_HOME` — the same image running `ninetrix api`, its
//! SQLite file on a named volume, published on 127.0.0.1, its secret and admin token generated
//! once under `$AGENTFILE_HOME/api/` (mode 0600, never printed) and uploaded as files, joined to
//! each pool's network under the alias `ninetrix-api`.
//!
//! One local API per home: the container is named after the home (`ninetrix-api` for the default
//! `~/.agentfile`, `ninetrix-api-<8 hex of sha256(home)>` for any other; `NINETRIX_API_CONTAINER`
//! overrides) and labelled with it (`dev.ninetrix.home`), so a second home never talks to the
//! first one's API with the wrong token. Its address is read from the container every time (the
//! published port), never remembered, so a restart that moves the port heals itself.

use std::collections::HashMap;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use bollard::Docker;
use bollard::models::{
    ContainerCreateBody, ContainerInspectResponse, HealthConfig, HostConfig, Mount, MountType,
    PortBinding, RestartPolicy, RestartPolicyNameEnum,
};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, LogsOptionsBuilder, RemoveContainerOptionsBuilder,
};
use futures_util::StreamExt as _;
use ninetrix_client::{Client, ClientError, ThreadQuery, Token};
use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{
    EnqueueRequest, EnqueueResponse, Event, RunnerTokenRequest, ThreadSummary, Trigger, TriggerSet,
    TriggersApplied,
};

use crate::docker::is_not_found;
use crate::hardening;
use crate::objects::api_container_name;
use crate::objects::{HOME, TELEMETRY};
use crate::pool::image::Image;
use ninetrix_agentfile::security::{Security, User};

/// The API port inside containers.
const PORT: u16 = 8080;
/// The default host port of the local API (the default home's).
pub(crate) const DEFAULT_HOST_PORT: u16 = 8787;
/// The local API's Docker healthcheck: the image has no shell, so the binary answers it.
const HEALTH_TEST: [&str; 5] = [
    "CMD",
    "/ninetrix",
    "health",
    "--url",
    "http://127.0.0.1:8080/readyz",
];

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

/// A home as the label and the derived name see it: absolute, without a trailing slash.
fn home_key(home: &Path) -> String {
    let abs = std::path::absolute(home).unwrap_or_else(|_| home.to_path_buf());
    let s = abs.to_string_lossy().to_string();
    match s.trim_end_matches('/') {
        "" => "/".to_string(),
        t => t.to_string(),
    }
}

/// Whether `home` is the default home (`~/.agentfile`).
fn is_default_home(home: &Path) -> bool {
    std::env::var_os("HOME")
        .is_some_and(|h| home_key(&PathBuf::from(h).join(".agentfile")) == home_key(home))
}

/// The local API container's name: `NINETRIX_API_CONTAINER`, else [`crate::objects::api_container_name`].
pub(crate) fn local_name(home: &Path) -> String {
    std::env::var("NINETRIX_API_CONTAINER")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| api_container_name(&home_key(home), is_default_home(home)))
}

/// The local API's data volume: `<container name>-data`.
pub(crate) fn data_volume(home: &Path) -> String {
    format!("{}-data", local_name(home))
}

/// What `up` does with the local API container it finds under its name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum LocalAction {
    /// None exists: create it.
    Create,
    /// It is ours and runs this image: keep it (start it if stopped).
    Reuse,
    /// It is ours (or unlabelled, from an older ninetrix) but must be recreated; its data volume
    /// is kept. The reason is for the progress line.
    Recreate(&'static str),
    /// It belongs to another home: refuse, naming it.
    Refuse {
        /// The other home.
        other_home: String,
    },
}

/// What Docker has under the local API's name: its home label, image ID and telemetry label.
pub(crate) type Found<'a> = (Option<&'a str>, Option<&'a str>, Option<&'a str>);

/// The decision, from what Docker has under the name and the telemetry settings `up` sees now
/// (their digest, empty for none).
pub(crate) fn local_action(
    found: Option<Found<'_>>,
    home_key: &str,
    image_id: &str,
    telemetry: &str,
) -> LocalAction {
    match found {
        None => LocalAction::Create,
        Some((Some(other), _, _)) if other != home_key => LocalAction::Refuse {
            other_home: other.to_string(),
        },
        Some((None, _, _)) => LocalAction::Recreate("made by an older ninetrix (no home label)"),
        Some((Some(_), image, _)) if image != Some(image_id) => {
            LocalAction::Recreate("the ninetrix binary changed")
        }
        Some((Some(_), _, had)) if had.unwrap_or("") != telemetry => {
            LocalAction::Recreate("the OTEL_* settings changed")
        }
        Some(_) => LocalAction::Reuse,
    }
}

/// The refusal when the container under the chosen name belongs to another home.
fn other_home_error(name: &str, other: &str, home: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "the local API container {name} belongs to AGENTFILE_HOME {other}, not to {home}; use \
         that home (AGENTFILE_HOME={other}), or give this home its own API with \
         NINETRIX_API_CONTAINER=<another name> and NINETRIX_API_PORT=<a free port, or 0>"
    )
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

/// Reads a secret file, creating it with 32 random bytes (hex) on first use. Creation is atomic
/// (a complete temp file hard-linked into place), so two commands starting at once in one home
/// agree on the value and never read a half-written file.
pub(crate) fn secret_file(path: &Path) -> anyhow::Result<String> {
    if let Ok(v) = std::fs::read_to_string(path) {
        return Ok(v.trim().to_string());
    }
    let dir = path.parent().context("secret path has a parent")?;
    std::fs::create_dir_all(dir)?;
    let mut raw = [0u8; 32];
    getrandom_fill(&mut raw)?;
    let value: String = raw.iter().map(|b| format!("{b:02x}")).collect();
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("cannot create {}", tmp.display()))?;
    f.write_all(value.as_bytes())?;
    f.sync_all()?;
    let linked = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(value),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            Ok(std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?
                .trim()
                .to_string())
        }
        Err(e) => Err(e).with_context(|| format!("cannot create {}", path.display())),
    }
}

fn getrandom_fill(buf: &mut [u8]) -> anyhow::Result<()> {
    getrandom::fill(buf).map_err(|e| anyhow::anyhow!("cannot read random bytes from the OS: {e}"))
}

/// A tar of secret files by name, to upload into `/run/secrets`.
pub(crate) fn secrets_tar(files: &[(&str, &str)]) -> anyhow::Result<Vec<u8>> {
    let mut tar = tar::Builder::new(Vec::new());
    for (name, value) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(value.len() as u64);
        // Docker gives extracted files to the container's root; readable by the container's
        // (non-root) user. Tool processes cannot reach them: the runner's tool sandbox hides
        // the directory (runner/src/tools/sandbox.rs), and no other container mounts it.
        header.set_mode(0o444);
        header.set_cksum();
        tar.append_data(&mut header, name, value.as_bytes())?;
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
fn local_token_source(path: &Path, name: &str) -> String {
    format!(
        "{} (written by `ninetrix up` and given to the {name} container when it was created; if \
         that container was created with another token, `ninetrix down --api` and `ninetrix up` \
         recreate it — its data is kept)",
        path.display(),
    )
}

/// The host port the local API container publishes, from `docker inspect`.
fn published_port(c: &ContainerInspectResponse) -> Option<String> {
    c.network_settings
        .as_ref()
        .and_then(|n| n.ports.as_ref())
        .and_then(|p| p.get(&format!("{PORT}/tcp")).cloned().flatten())
        .and_then(|b| b.first().and_then(|b| b.host_port.clone()))
        .filter(|p| !p.is_empty() && p != "0")
}

/// The lock that serialises creating the local API of one home (two `up`s of different pools at
/// once would otherwise both create it); released when dropped.
fn api_lock(home: &Path) -> anyhow::Result<std::fs::File> {
    let dir = home.join("api");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let path = dir.join("lock");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    f.lock()
        .with_context(|| format!("cannot lock {}", path.display()))?;
    Ok(f)
}

impl Api {
    /// The API to use: external if `AGENTFILE_API_URL` is set, else this home's local container
    /// (created or started if needed, recreated when the binary changed or when an older
    /// ninetrix made it; refused when it belongs to another home).
    pub(crate) async fn ensure(docker: &Docker, home: &Path, image: &Image) -> anyhow::Result<Api> {
        if let Some(api) = external()? {
            return Ok(api);
        }
        let _lock = api_lock(home)?;
        let name = local_name(home);
        let key = home_key(home);
        let secret = secret_file(&home.join("api").join("secret"))?;
        let admin_path = home.join("api").join("admin-token");
        let admin = secret_file(&admin_path)?;
        let host_port = local_host_port(home)?;
        let existing = match docker.inspect_container(&name, None).await {
            Ok(c) => Some(c),
            Err(e) if is_not_found(&e) => None,
            Err(e) => return Err(e).context("cannot inspect the local API container"),
        };
        // The API exports its spans like the runners when `up` sees OTEL_* settings: the same
        // variables, the headers as secret files.
        let telemetry = crate::pool::spec::Telemetry::from_host();
        let telemetry_digest = telemetry.digest().unwrap_or_default();
        let found = existing.as_ref().map(|c| {
            let labels = c.config.as_ref().and_then(|c| c.labels.as_ref());
            (
                labels.and_then(|l| l.get(HOME)).map(String::as_str),
                c.image.as_deref(),
                labels.and_then(|l| l.get(TELEMETRY)).map(String::as_str),
            )
        });
        let action = local_action(found, &key, &image.id, &telemetry_digest);
        match &action {
            LocalAction::Refuse { other_home } => {
                return Err(other_home_error(&name, other_home, &key));
            }
            LocalAction::Recreate(_) => {
                docker
                    .remove_container(
                        &name,
                        Some(
                            RemoveContainerOptionsBuilder::default()
                                .force(true)
                                .v(true)
                                .build(),
                        ),
                    )
                    .await
                    .context("cannot replace the local API container")?;
            }
            LocalAction::Create | LocalAction::Reuse => {}
        }
        if action != LocalAction::Reuse {
            let mut body = local_body(image, &name, &key, host_port);
            body.env = Some(
                telemetry
                    .env
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect(),
            );
            if let Some(labels) = body.labels.as_mut() {
                labels.insert(TELEMETRY.to_string(), telemetry_digest.clone());
            }
            docker
                .create_container(
                    Some(CreateContainerOptionsBuilder::default().name(&name).build()),
                    body,
                )
                .await
                .with_context(|| format!("cannot create the local API container {name}"))?;
            let mut files = vec![
                ("api-secret", secret.as_str()),
                ("admin-token", admin.as_str()),
            ];
            files.extend(
                telemetry
                    .secrets
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str())),
            );
            let tar = secrets_tar(&files)?;
            docker
                .upload_to_container(
                    &name,
                    Some(
                        bollard::query_parameters::UploadToContainerOptionsBuilder::default()
                            .path(crate::hardening::SECRETS_DIR)
                            .build(),
                    ),
                    bollard::body_full(tar.into()),
                )
                .await
                .context("cannot upload the local API's secrets")?;
        }
        docker.start_container(&name, None).await.map_err(|e| anyhow::anyhow!("cannot start the local API container {name}: {e} (is port {host_port} in use? set NINETRIX_API_PORT)"))?;
        let inspected = docker.inspect_container(&name, None).await?;
        let port =
            published_port(&inspected).context("the local API container has no published port")?;
        let api = Api::new(
            format!("http://127.0.0.1:{port}"),
            format!("http://ninetrix-api:{PORT}"),
            admin,
            local_token_source(&admin_path, &name),
            Some(name),
        );
        api.wait_ready(docker, Duration::from_secs(30)).await?;
        Ok(api)
    }

    /// The API a pool already uses: `AGENTFILE_API_URL` if set, else this home's local API at the
    /// port its container publishes *now* (read from Docker every time: a restart on port 0
    /// moves it), with the admin token from `$AGENTFILE_HOME/api/`. Starts nothing: a missing or
    /// stopped container is an error saying `ninetrix up` starts it. Docker is only asked for
    /// the local API.
    pub(crate) async fn existing(home: &Path) -> anyhow::Result<Api> {
        if let Some(api) = external()? {
            return Ok(api);
        }
        let docker = crate::docker::connect().await?;
        let name = local_name(home);
        let key = home_key(home);
        let c = match docker.inspect_container(&name, None).await {
            Ok(c) => c,
            Err(e) if is_not_found(&e) => bail!(
                "the local checkpoint API container {name} (of AGENTFILE_HOME {key}) does not \
                 exist; `ninetrix up` starts it"
            ),
            Err(e) => return Err(e).context("cannot inspect the local API container"),
        };
        let labelled = c
            .config
            .as_ref()
            .and_then(|c| c.labels.as_ref())
            .and_then(|l| l.get(HOME));
        if let Some(other) = labelled.filter(|o| **o != key) {
            return Err(other_home_error(&name, other, &key));
        }
        let state = c.state.clone().unwrap_or_default();
        if !state.running.unwrap_or(false) || state.restarting.unwrap_or(false) {
            let status = state
                .status
                .map_or_else(|| "not running".to_string(), |s| s.to_string());
            bail!(
                "the local checkpoint API container {name} is not running ({status}); \
                 `ninetrix up` starts it"
            );
        }
        let port = published_port(&c).with_context(|| {
            format!("the local API container {name} publishes no port; `ninetrix up` recreates it")
        })?;
        let admin_path = home.join("api").join("admin-token");
        let admin = std::fs::read_to_string(&admin_path).with_context(|| {
            format!(
                "cannot read the admin token {}; run `ninetrix up` first",
                admin_path.display()
            )
        })?;
        Ok(Api::new(
            format!("http://127.0.0.1:{port}"),
            format!("http://ninetrix-api:{PORT}"),
            admin.trim().to_string(),
            local_token_source(&admin_path, &name),
            Some(name),
        ))
    }

    /// The API without any pool (`trace --thread-id` needs only the API): `AGENTFILE_API_URL`,
    /// else this home's local API wherever it is published now.
    pub(crate) async fn any(home: &Path) -> anyhow::Result<Api> {
        Api::existing(home).await
    }

    /// A pool's API on Swarm: reached from this host at `url`, from the pool's tasks at
    /// `http://ninetrix-api:8080`, with this home's admin token (read from `admin_path`).
    pub(crate) fn on_swarm(url: String, admin: String, admin_path: &Path, service: &str) -> Api {
        Api::new(
            url,
            format!("http://ninetrix-api:{PORT}"),
            admin,
            format!(
                "{} (given to the {service} service as a Swarm secret by `ninetrix up --swarm`)",
                admin_path.display()
            ),
            None,
        )
    }

    /// Waits until the API answers `/readyz` (for `timeout` at most).
    pub(crate) async fn ready(&self, docker: &Docker, timeout: Duration) -> anyhow::Result<()> {
        self.wait_ready(docker, timeout).await
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

    /// The typed client, with the admin token.
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// Turns a failed call into an error that says what to do: a refused token names where the
    /// token comes from; an unreachable API names its URL (the client's message does).
    pub(crate) fn explain(&self, e: ClientError, doing: &str) -> anyhow::Error {
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
        match &self.local {
            Some(name) => {
                crate::docker::connect_network(docker, network, name, "ninetrix-api").await
            }
            None => Ok(()),
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

    /// The thread the API's replica mapping keeps for replica `replica` of the agent (what a
    /// Swarm or Kubernetes runner asks for): made on first use, and a new one in place of a
    /// purged thread.
    pub(crate) async fn replica_thread(
        &self,
        pool: &str,
        agent: &str,
        replica: u32,
    ) -> anyhow::Result<ThreadId> {
        self.client
            .replica_thread(pool, agent, replica)
            .await
            .map(|t| t.thread_id)
            .map_err(|e| self.explain(e, &format!("asking for the thread of {agent}-{replica}")))
    }

    /// Whether the API purged this thread (`false` also when it never had it: a mint makes it).
    pub(crate) async fn is_purged(&self, thread: ThreadId) -> anyhow::Result<bool> {
        match self.client.thread(thread).await {
            Ok(_) => Ok(false),
            Err(e) if e.code() == Some(&ninetrix_client::ErrorCode::Purged) => Ok(true),
            Err(e) => Err(self.explain(e, &format!("reading thread {thread}"))),
        }
    }

    /// The thread of session `key` of the agent (created on first use).
    pub(crate) async fn open_session(
        &self,
        pool: &str,
        agent: &str,
        key: &str,
    ) -> anyhow::Result<ThreadId> {
        self.client
            .open_session(pool, agent, key)
            .await
            .map(|t| t.thread_id)
            .map_err(|e| self.explain(e, &format!("opening session `{key}` of {agent}")))
    }

    /// The thread of session `key` of the agent, if it was ever opened (opens none).
    pub(crate) async fn find_session(
        &self,
        pool: &str,
        agent: &str,
        key: &str,
    ) -> anyhow::Result<Option<ThreadSummary>> {
        let query = ninetrix_client::ThreadQuery {
            pool: Some(pool.to_string()),
            agent: Some(agent.to_string()),
            ..Default::default()
        };
        let found = self
            .client
            .list_sessions(&query, Some(key))
            .await
            .map_err(|e| self.explain(e, &format!("finding session `{key}` of {agent}")))?;
        Ok(found.into_iter().next())
    }

    /// The sessions of a pool (of one agent, when given), one page from `offset`.
    /// What each thread of `pool` has spent on its model calls (USD, ever), by thread ID: every
    /// thread the API records for the pool, 1,000 a page.
    pub(crate) async fn spend_by_thread(
        &self,
        pool: &str,
    ) -> anyhow::Result<std::collections::BTreeMap<String, f64>> {
        let mut spend = std::collections::BTreeMap::new();
        loop {
            let query = ninetrix_client::ThreadQuery {
                pool: Some(pool.to_string()),
                limit: Some(1000),
                offset: Some(u32::try_from(spend.len()).unwrap_or(u32::MAX)),
                ..Default::default()
            };
            let page = self
                .client
                .list_threads(&query)
                .await
                .map_err(|e| self.explain(e, &format!("listing the threads of pool {pool}")))?;
            let full = page.len() >= 1000;
            spend.extend(
                page.into_iter()
                    .map(|t| (t.thread_id.to_string(), t.spent_usd)),
            );
            if !full {
                return Ok(spend);
            }
        }
    }

    pub(crate) async fn sessions(
        &self,
        pool: &str,
        agent: Option<&str>,
        offset: u32,
    ) -> anyhow::Result<Vec<ThreadSummary>> {
        let query = ninetrix_client::ThreadQuery {
            pool: Some(pool.to_string()),
            agent: agent.map(str::to_string),
            limit: Some(1000),
            offset: Some(offset),
            ..Default::default()
        };
        self.client
            .list_sessions(&query, None)
            .await
            .map_err(|e| self.explain(e, &format!("listing the sessions of pool {pool}")))
    }

    /// Records how many replicas a durable agent runs — what its sessions are spread over —,
    /// the agents it may hand work to, and what its A2A card says (`card`).
    pub(crate) async fn set_replicas(
        &self,
        pool: &str,
        agent: &str,
        replicas: u32,
        collaborators: &[String],
        card: Option<&ninetrix_proto::api::AgentCardInfo>,
    ) -> anyhow::Result<()> {
        self.client
            .set_replicas(pool, agent, replicas, collaborators, card)
            .await
            .map_err(|e| self.explain(e, &format!("recording the replica count of {agent}")))
    }

    /// Registers the pool's whole set of triggers (an empty set removes them all). An API without
    /// the trigger routes (older than this ninetrix) has none to remove, so an empty set is no
    /// change there; a set with triggers is refused, saying why.
    pub(crate) async fn set_triggers(
        &self,
        pool: &str,
        set: &TriggerSet,
    ) -> anyhow::Result<TriggersApplied> {
        match self.client.put_triggers(pool, set).await {
            Ok(applied) => Ok(applied),
            Err(e) if lacks_trigger_routes(&e) && set.triggers.is_empty() => {
                Ok(TriggersApplied::default())
            }
            Err(e) if lacks_trigger_routes(&e) => bail!(
                "the checkpoint API at {} has no trigger routes ({e}): it is older than this \
                 ninetrix; upgrade it, or remove `triggers:` from the agentfile",
                self.url
            ),
            Err(e) => Err(self.explain(e, &format!("registering the triggers of pool {pool}"))),
        }
    }

    /// The triggers the API holds for a pool, by name. An API without the trigger routes has
    /// none.
    pub(crate) async fn triggers(&self, pool: &str) -> anyhow::Result<Vec<Trigger>> {
        match self.client.triggers(Some(pool), None).await {
            Ok(triggers) => Ok(triggers),
            Err(e) if lacks_trigger_routes(&e) => Ok(Vec::new()),
            Err(e) => Err(self.explain(e, &format!("listing the triggers of pool {pool}"))),
        }
    }

    /// Mints the agent token a durable agent's replicas find their sessions' work with.
    pub(crate) async fn agent_token(&self, pool: &str, agent: &str) -> anyhow::Result<String> {
        let minted = self
            .client
            .mint_agent_token(pool, agent)
            .await
            .map_err(|e| self.explain(e, &format!("minting the agent token of {agent}")))?;
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

    /// A thread's events after a seq as they are stored, and between them the reply text the
    /// model streams (deltas), until the stream ends.
    pub(crate) async fn watch(
        &self,
        thread: ThreadId,
        after: u64,
    ) -> anyhow::Result<
        impl futures_util::Stream<Item = Result<ninetrix_client::Watched, ninetrix_client::ClientError>>
        + Send
        + use<>,
    > {
        self.client
            .watch(thread, after)
            .await
            .map_err(|e| self.explain(e, &format!("following the events of thread {thread}")))
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

    /// Cancels a thread's running turn (the cancel is stored in its inbox first).
    pub(crate) async fn cancel(
        &self,
        thread: ThreadId,
        request: &ninetrix_proto::api::CancelRequest,
    ) -> anyhow::Result<ninetrix_proto::api::CancelResponse> {
        self.client
            .cancel(thread, request)
            .await
            .map_err(|e| self.explain(e, &format!("cancelling the turn of thread {thread}")))
    }

    /// One page of the threads the API records for a pool (labels from the claim or the runner
    /// token), from `offset`.
    pub(crate) async fn pool_threads(
        &self,
        pool: &str,
        offset: u32,
    ) -> anyhow::Result<Vec<ThreadSummary>> {
        let query = ThreadQuery {
            pool: Some(pool.to_string()),
            offset: Some(offset),
            ..ThreadQuery::default()
        };
        self.client
            .list_threads(&query)
            .await
            .map_err(|e| self.explain(e, &format!("listing the threads of pool {pool}")))
    }

    /// Deletes every memory of the pool (the `memory` tool's files, every agent, scope and
    /// session) in one transaction; how many files. An API from before memories (no such route)
    /// has none to delete.
    pub(crate) async fn purge_memories(&self, pool: &str) -> anyhow::Result<u64> {
        match self.client.purge_memories(pool, None).await {
            Ok(n) => Ok(n),
            Err(e) if lacks_trigger_routes(&e) => Ok(0),
            Err(e) => Err(self.explain(e, &format!("deleting the memories of pool {pool}"))),
        }
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

/// Whether the API answered as one without the trigger routes does: the router's own 404 (`no
/// route for …`) or 405, not a 404 of a route that exists.
pub(crate) fn lacks_trigger_routes(e: &ClientError) -> bool {
    match e {
        ClientError::Api {
            status: 405,
            code: ninetrix_client::ErrorCode::MethodNotAllowed,
            ..
        } => true,
        ClientError::Api {
            status: 404,
            message,
            ..
        } => message.starts_with("no route for"),
        _ => false,
    }
}

/// The local API's host port: `NINETRIX_API_PORT` if set; else 8787 for the default home and
/// an ephemeral port (0: Docker picks a free one) for any other, so two homes never collide.
fn local_host_port(home: &Path) -> anyhow::Result<u16> {
    match std::env::var("NINETRIX_API_PORT") {
        Ok(p) if !p.is_empty() => p
            .parse()
            .with_context(|| format!("NINETRIX_API_PORT `{p}` is not a port number")),
        _ if is_default_home(home) => Ok(DEFAULT_HOST_PORT),
        _ => Ok(0),
    }
}

/// The local API container's create body: `ninetrix api` on the data volume, published on
/// 127.0.0.1, labelled with its home, restarted unless stopped, with a healthcheck the binary
/// answers (`ninetrix health`).
fn local_body(image: &Image, name: &str, home_key: &str, host_port: u16) -> ContainerCreateBody {
    let labels: HashMap<String, String> = [
        (crate::objects::ROLE.to_string(), "api".to_string()),
        (HOME.to_string(), home_key.to_string()),
        (
            crate::objects::VERSION.to_string(),
            crate::objects::VERSION_VALUE.to_string(),
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
        stop_timeout: Some(10),
        healthcheck: Some(HealthConfig {
            test: Some(HEALTH_TEST.map(String::from).to_vec()),
            interval: Some(10_000_000_000),
            timeout: Some(3_000_000_000),
            retries: Some(3),
            start_period: Some(10_000_000_000),
            ..HealthConfig::default()
        }),
        ..ContainerCreateBody::default()
    };
    let mut host_config = HostConfig {
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
    };
    // Hardened like the pool's containers but as uid 0: data volumes of earlier versions are
    // root's, and root without capabilities still writes its own files (and nothing else).
    let security = Security {
        user: User { uid: 0, gid: 0 },
        ..Security::default()
    };
    hardening::apply(&mut host_config, &security, None, (HOME, home_key));
    ContainerCreateBody {
        user: Some(hardening::user(&security)),
        host_config: Some(host_config),
        ..body
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_routers_own_refusals_mean_an_api_without_triggers() {
        let api = |status, code, message: &str| ClientError::Api {
            status,
            code,
            message: message.into(),
            running: None,
        };
        use ninetrix_client::ErrorCode;
        assert!(lacks_trigger_routes(&api(
            404,
            ErrorCode::NotFound,
            "no route for PUT /v1/pools/shop/triggers"
        )));
        assert!(lacks_trigger_routes(&api(
            405,
            ErrorCode::MethodNotAllowed,
            "PUT is not allowed on /v1/pools/shop/triggers"
        )));
        assert!(!lacks_trigger_routes(&api(
            404,
            ErrorCode::NotFound,
            "pool shop has no trigger nightly"
        )));
        assert!(!lacks_trigger_routes(&api(
            422,
            ErrorCode::InvalidTrigger,
            "no route for"
        )));
    }

    #[test]
    fn the_default_home_gets_the_plain_name_and_others_a_name_of_their_own() {
        assert_eq!(api_container_name("/root/.agentfile", true), "ninetrix-api");
        let a = api_container_name("/tmp/a/home", false);
        let b = api_container_name("/tmp/b/home", false);
        assert!(a.starts_with("ninetrix-api-") && a.len() == "ninetrix-api-".len() + 8);
        assert_ne!(a, b);
        assert_eq!(
            a,
            api_container_name("/tmp/a/home", false),
            "stable for one home"
        );
        assert_eq!(home_key(Path::new("/tmp/a/home/")), "/tmp/a/home");
    }

    #[test]
    fn a_container_of_another_home_is_refused_and_an_unlabelled_one_recreated() {
        let home = "/h/one";
        assert_eq!(local_action(None, home, "img", ""), LocalAction::Create);
        assert_eq!(
            local_action(Some((Some(home), Some("img"), None)), home, "img", ""),
            LocalAction::Reuse
        );
        assert!(matches!(
            local_action(Some((Some(home), Some("old"), None)), home, "img", ""),
            LocalAction::Recreate(_)
        ));
        assert!(matches!(
            local_action(Some((None, Some("img"), None)), home, "img", ""),
            LocalAction::Recreate(_)
        ));
        assert_eq!(
            local_action(Some((Some("/h/two"), Some("img"), None)), home, "img", ""),
            LocalAction::Refuse {
                other_home: "/h/two".into()
            }
        );
        // OTEL_* settings set, changed or removed: recreated (its data volume is kept).
        assert_eq!(
            local_action(Some((Some(home), Some("img"), None)), home, "img", "abc"),
            LocalAction::Recreate("the OTEL_* settings changed")
        );
        assert_eq!(
            local_action(
                Some((Some(home), Some("img"), Some("abc"))),
                home,
                "img",
                "abc"
            ),
            LocalAction::Reuse
        );
        assert!(matches!(
            local_action(
                Some((Some(home), Some("img"), Some("abc"))),
                home,
                "img",
                ""
            ),
            LocalAction::Recreate(_)
        ));
        let message = other_home_error("ninetrix-api", "/h/two", home).to_string();
        assert!(message.contains("/h/two") && message.contains("NINETRIX_API_CONTAINER"));
    }

    #[test]
    fn the_create_body_carries_the_home_label_and_the_healthcheck() {
        let image = Image {
            tag: "ninetrix/runner:x".into(),
            id: "sha256:1".into(),
        };
        let body = local_body(&image, "ninetrix-api-1", "/h/one", 0);
        assert_eq!(body.labels.as_ref().unwrap()[HOME], "/h/one");
        assert_eq!(
            body.healthcheck.unwrap().test.unwrap(),
            HEALTH_TEST.map(String::from).to_vec()
        );
        let host = body.host_config.unwrap();
        assert_eq!(
            host.mounts.unwrap()[0].source.as_deref(),
            Some("ninetrix-api-1-data")
        );
    }
}
