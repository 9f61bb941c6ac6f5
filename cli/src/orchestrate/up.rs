//! `ninetrix up`: validate, build the image, ensure the API and the network, then reconcile the
//! pool's containers like Compose — keep unchanged ones (starting them if stopped, which re-arms
//! the restart budget), recreate changed ones with the same replica number and thread ID, create
//! missing ones, remove excess replicas (highest first), report orphans — wait for every durable
//! runner to be `ready`, and write the pool state.

use std::collections::{BTreeMap, HashMap};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use bollard::Docker;
use bollard::models::NetworkCreateRequest;
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, RemoveContainerOptionsBuilder, StopContainerOptionsBuilder,
    UploadToContainerOptionsBuilder,
};
use futures_util::StreamExt as _;
use ninetrix_proto::ThreadId;
use ninetrix_proto::agentfile::AgentSpec;
use serde_json::json;

use super::api::{Api, secrets_tar};
use super::docker::is_not_found;
use super::image::{self, Image};
use super::spec::{self, Replica};
use super::{label, name, pool_containers, state};
use crate::cli::UpArgs;

/// How progress is shown: redrawn in place on a terminal (like Compose), one line per step when
/// piped, or JSON lines with `--json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Json,
    Plain,
    Live,
}

/// One row of the live view: the latest status of one object.
#[derive(Debug, Clone, PartialEq)]
struct Row {
    kind: String,
    name: String,
    status: String,
    state: RowState,
    elapsed: Duration,
}

/// Whether a row is still moving, done, or failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RowState {
    Working,
    Done,
    Failed,
}

/// Progress output: one line per step (plain or JSON), or on a terminal a block of rows redrawn
/// in place under a `[+] Running done/total` header.
pub(crate) struct Progress {
    mode: Mode,
    started: Instant,
    /// Live mode only: the rows being redrawn.
    live: std::sync::Mutex<Live>,
}

impl Progress {
    /// Picks the mode: JSON when asked, live when stdout is a terminal (and `TERM` is not
    /// `dumb`), plain lines otherwise.
    pub(crate) fn new(json: bool) -> Self {
        use std::io::IsTerminal as _;
        let mode = if json {
            Mode::Json
        } else if std::io::stdout().is_terminal()
            && std::env::var("TERM").map_or(true, |t| t != "dumb")
        {
            Mode::Live
        } else {
            Mode::Plain
        };
        Self {
            mode,
            started: Instant::now(),
            live: std::sync::Mutex::new(Live::default()),
        }
    }

    /// A step that is under way (shown only in the live view; plain and JSON output report
    /// outcomes).
    pub(crate) fn working(&self, kind: &str, name: &str, status: &str) {
        if self.mode == Mode::Live {
            self.redraw(kind, name, status, RowState::Working);
        }
    }

    /// A step that finished.
    pub(crate) fn step(&self, kind: &str, name: &str, status: &str) {
        match self.mode {
            Mode::Json => println!(
                "{}",
                json!({"type": kind, "name": name, "status": status, "elapsed_ms": self.started.elapsed().as_millis() as u64})
            ),
            Mode::Plain => println!(
                " ✔ {kind:<9} {name:<40} {status:<12} {:.1}s",
                self.started.elapsed().as_secs_f64()
            ),
            Mode::Live => self.redraw(kind, name, status, RowState::Done),
        }
    }

    /// A step that failed.
    pub(crate) fn fail(&self, kind: &str, name: &str, status: &str) {
        match self.mode {
            Mode::Json => println!(
                "{}",
                json!({"type": kind, "name": name, "status": status, "error": true, "elapsed_ms": self.started.elapsed().as_millis() as u64})
            ),
            Mode::Plain => println!(" ✘ {kind:<9} {name:<40} {status}"),
            Mode::Live => self.redraw(kind, name, status, RowState::Failed),
        }
    }

    /// Live mode: refreshes the elapsed time of rows still under way (called while polling).
    pub(crate) fn tick(&self) {
        if self.mode != Mode::Live {
            return;
        }
        let mut guard = self.live.lock().unwrap_or_else(|e| e.into_inner());
        let now = self.started.elapsed();
        let mut moving = false;
        for r in guard
            .rows
            .iter_mut()
            .filter(|r| r.state == RowState::Working)
        {
            r.elapsed = now;
            moving = true;
        }
        if moving {
            paint(&mut guard);
        }
    }

    /// Updates (or adds) the row for `kind name` and repaints the live block.
    fn redraw(&self, kind: &str, name: &str, status: &str, state: RowState) {
        let mut guard = self.live.lock().unwrap_or_else(|e| e.into_inner());
        let elapsed = self.started.elapsed();
        upsert(&mut guard.rows, kind, name, status, state, elapsed);
        paint(&mut guard);
    }
}

/// The live view's state.
#[derive(Debug, Default)]
struct Live {
    /// Rows still redrawn in place.
    rows: Vec<Row>,
    /// Rows already printed for good above the block.
    committed: usize,
    /// How many lines the last paint printed (the cursor moves back over them).
    printed: usize,
}

/// At most this many rows are redrawn (fewer on a short terminal); finished rows above them are
/// printed for good.
const MAX_LIVE_ROWS: usize = 20;

/// Moves the cursor back over the previously printed block, clears to the end of the screen,
/// commits rows that must not be redrawn, and prints the new block.
///
/// Redrawing only works if every line of the block is exactly one terminal line, so lines in the
/// block are cut to the terminal's width and the block never outgrows its height. Failed rows
/// are committed at once (their full reason stays readable however long it is), and finished
/// leading rows are committed once the block is full.
fn paint(live: &mut Live) {
    use std::io::Write as _;
    let (width, height) = terminal_size::terminal_size()
        .map_or((80, 24), |(w, h)| (usize::from(w.0), usize::from(h.0)));
    let max_rows = MAX_LIVE_ROWS.min(height.saturating_sub(2)).max(1);
    let mut out = std::io::stdout().lock();
    if live.printed > 0 {
        let _ = write!(out, "\x1b[{}A\x1b[J", live.printed);
    }
    for row in commit(live, max_rows) {
        let _ = out.write_all(line(&row).as_bytes());
    }
    let block = render(&live.rows, live.committed, width.saturating_sub(1).max(20));
    let _ = out.write_all(block.as_bytes());
    let _ = out.flush();
    live.printed = block.lines().count();
}

/// Takes out of the live block the rows to print for good: every failed row, then finished
/// leading rows while the block has more than `max_rows`.
fn commit(live: &mut Live, max_rows: usize) -> Vec<Row> {
    let (failed, rest): (Vec<Row>, Vec<Row>) = std::mem::take(&mut live.rows)
        .into_iter()
        .partition(|r| r.state == RowState::Failed);
    live.rows = rest;
    let mut out = failed;
    while live.rows.len() > max_rows && live.rows[0].state != RowState::Working {
        out.push(live.rows.remove(0));
    }
    live.committed += out.len();
    out
}

/// Replaces the row for `kind name`, or appends one.
fn upsert(
    rows: &mut Vec<Row>,
    kind: &str,
    name: &str,
    status: &str,
    state: RowState,
    at: Duration,
) {
    let row = Row {
        kind: kind.to_string(),
        name: name.to_string(),
        status: status.to_string(),
        state,
        elapsed: at,
    };
    match rows.iter_mut().find(|r| r.kind == kind && r.name == name) {
        Some(r) => *r = row,
        None => rows.push(row),
    }
}

/// The live block: a `[+] Running done/total` header (counting `committed` rows already printed
/// above it) and one line per row, each cut to `width` characters.
fn render(rows: &[Row], committed: usize, width: usize) -> String {
    let done = committed + rows.iter().filter(|r| r.state != RowState::Working).count();
    let mut s = format!("[+] Running {done}/{}\n", committed + rows.len());
    for r in rows {
        let full = line(r);
        let text = full.trim_end_matches('\n');
        if text.chars().count() > width {
            s.extend(text.chars().take(width.saturating_sub(1)));
            s.push_str("…\n");
        } else {
            s.push_str(&full);
        }
    }
    s
}

/// One row as a line: mark, kind, name, status, elapsed seconds.
fn line(r: &Row) -> String {
    let mark = match r.state {
        RowState::Working => "⠿",
        RowState::Done => "✔",
        RowState::Failed => "✘",
    };
    format!(
        " {mark} {:<9} {:<40} {:<12} {:.1}s\n",
        r.kind,
        r.name,
        r.status,
        r.elapsed.as_secs_f64()
    )
}

/// Reads the agent's secrets on the host (environment); a missing one stops `up` before anything
/// starts.
fn host_secrets(spec: &AgentSpec) -> anyhow::Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for name in &spec.secrets {
        match std::env::var(name) {
            Ok(v) if !v.is_empty() => {
                out.insert(name.clone(), v);
            }
            _ => bail!(
                "secret {name} (needed by agent `{}`) is not set on this host; export {name}=… and run `ninetrix up` again (nothing was started)",
                spec.name
            ),
        }
    }
    Ok(out)
}

pub(crate) async fn ensure_network(docker: &Docker, pool: &str) -> anyhow::Result<String> {
    let net = spec::network_name(pool);
    match docker.inspect_network(&net, None).await {
        Ok(_) => return Ok(net),
        Err(e) if is_not_found(&e) => {}
        Err(e) => return Err(e).context("cannot inspect the pool network"),
    }
    let labels: HashMap<String, String> = [(spec::POOL.to_string(), pool.to_string())].into();
    docker
        .create_network(NetworkCreateRequest {
            name: net.clone(),
            driver: Some("bridge".into()),
            labels: Some(labels),
            ..NetworkCreateRequest::default()
        })
        .await
        .with_context(|| format!("cannot create network {net}"))?;
    Ok(net)
}

pub(crate) async fn remove(docker: &Docker, id: &str, stop_secs: i32) -> anyhow::Result<()> {
    let _ = docker
        .stop_container(
            id,
            Some(StopContainerOptionsBuilder::default().t(stop_secs).build()),
        )
        .await;
    match docker
        .remove_container(
            id,
            Some(RemoveContainerOptionsBuilder::default().force(true).build()),
        )
        .await
    {
        Ok(()) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(e).with_context(|| format!("cannot remove container {id}")),
    }
}

/// A container `up` started and waits for.
struct Started {
    name: String,
    id: String,
    thread: ThreadId,
    baseline: u64,
}

/// A container to create (replacing `old` if set).
struct Job<'a> {
    agent: &'a AgentSpec,
    replica: u32,
    name: String,
    thread: ThreadId,
    hash: String,
    image: String,
    old: Option<String>,
}

/// Creates one replica container: remove the old one, mint the runner token, create, upload the
/// secrets, start. Returns the job, the container ID and the thread's event seq before the start.
async fn create<'j>(
    docker: &Docker,
    api: &Api,
    pool: &str,
    job: &'j Job<'j>,
    secrets: &BTreeMap<String, String>,
) -> anyhow::Result<(&'j Job<'j>, String, u64)> {
    if let Some(old) = &job.old {
        remove(docker, old, 30).await?;
    }
    let token = api
        .runner_token(job.thread, pool, &job.agent.name, job.replica)
        .await?;
    let body = Replica {
        pool,
        spec: job.agent,
        replica: job.replica,
        thread: job.thread,
        image: &job.image,
        api_url: &api.container_url,
        hash: &job.hash,
    }
    .body();
    let cname = &job.name;
    let created = docker.create_container(Some(CreateContainerOptionsBuilder::default().name(cname).build()), body).await.map_err(|e| match e {
        bollard::errors::Error::DockerResponseServerError { status_code: 409, .. } => {
            anyhow::anyhow!("the container name {cname} is already in use by a container ninetrix does not manage; remove or rename it")
        }
        e => anyhow::anyhow!("cannot create {cname}: {e}"),
    })?;
    upload_secrets(docker, &created.id, secrets, &token)
        .await
        .with_context(|| format!("cannot upload the secrets of {cname}"))?;
    let baseline = api.event_seq(job.thread).await?;
    docker
        .start_container(&created.id, None)
        .await
        .with_context(|| format!("cannot start {cname}"))?;
    Ok((job, created.id, baseline))
}

/// Uploads an agent's secrets and its runner token to `/run/secrets/` (0400) of a created,
/// not yet started container.
pub(crate) async fn upload_secrets(
    docker: &Docker,
    id: &str,
    secrets: &BTreeMap<String, String>,
    token: &str,
) -> anyhow::Result<()> {
    let mut files: Vec<(&str, &str)> = secrets
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    files.push(("AGENTFILE_RUNNER_TOKEN", token));
    docker
        .upload_to_container(
            id,
            Some(UploadToContainerOptionsBuilder::default().path("/").build()),
            bollard::body_full(secrets_tar(&files)?.into()),
        )
        .await?;
    Ok(())
}

/// Runs `ninetrix up`.
pub(crate) async fn run(args: &UpArgs) -> anyhow::Result<ExitCode> {
    let parsed = super::load(&args.file)?;
    let af = parsed.agentfile;
    let pool = af
        .pool_name(args.pool.as_deref(), &args.file)
        .context("cannot derive a pool name: set `name:` in the agentfile or pass -p POOL")?;
    // Secrets first: nothing starts if one is missing.
    let mut secrets = BTreeMap::new();
    for agent in &af.agents {
        secrets.insert(agent.name.clone(), host_secrets(agent)?);
    }
    let progress = Progress::new(args.json);
    let docker = super::docker::connect().await?;
    let home = super::home()?;
    let binary = image::this_binary()?;
    let (runner_image, built) = image::runner_image(&docker, &binary).await?;
    progress.step(
        "Image",
        &runner_image.tag,
        if built { "Built" } else { "Up to date" },
    );
    let mut images: HashMap<String, Image> = HashMap::new();
    for agent in &af.agents {
        let img = match &agent.runtime.image {
            Some(base) => image::agent_image(&docker, base, &binary).await?,
            None => runner_image.clone(),
        };
        images.insert(agent.name.clone(), img);
    }
    let http = reqwest::Client::new();
    let api = Api::ensure(&docker, &home, &runner_image, http).await?;
    progress.step("API", api.local.as_deref().unwrap_or(&api.url), "Ready");
    let network = ensure_network(&docker, &pool).await?;
    api.join(&docker, &network).await?;
    progress.step("Network", &network, "Ready");

    let mut locked = state::lock(&home, &pool)?;
    locked.state.agentfile = std::path::absolute(&args.file).ok();
    locked.state.agentfile_hash = std::fs::read(&args.file).ok().map(|b| {
        use sha2::Digest as _;
        sha2::Sha256::digest(b)
            .iter()
            .map(|x| format!("{x:02x}"))
            .collect()
    });
    locked.state.api_url = Some(api.url.clone());
    let existing = pool_containers(&docker, Some(&pool)).await?;
    let mut started: Vec<Started> = Vec::new();
    let mut jobs: Vec<Job<'_>> = Vec::new();

    // Orphans: agents no longer in the file.
    for c in &existing {
        let agent = label(c, spec::AGENT).unwrap_or_default();
        if af.agent(agent).is_none() {
            let n = name(c);
            if args.remove_orphans {
                remove(&docker, c.id.as_deref().unwrap_or_default(), 10).await?;
                locked.state.agents.remove(agent);
                progress.step("Container", &n, "Removed (orphan)");
            } else {
                progress.fail(
                    "Container",
                    &n,
                    "Orphan: its agent is not in the agentfile (remove it with --remove-orphans)",
                );
            }
        }
    }

    for agent in &af.agents {
        let img = &images[&agent.name];
        let wanted = agent.execution.replicas;
        // Excess replicas, highest numbers first.
        let mut extra: Vec<(u32, &bollard::models::ContainerSummary)> = existing
            .iter()
            .filter(|c| label(c, spec::AGENT) == Some(&agent.name))
            .filter_map(|c| {
                label(c, spec::REPLICA)
                    .and_then(|r| r.parse().ok())
                    .map(|r: u32| (r, c))
            })
            .filter(|(r, _)| *r > wanted)
            .collect();
        extra.sort_by_key(|(r, _)| std::cmp::Reverse(*r));
        for (r, c) in extra {
            remove(&docker, c.id.as_deref().unwrap_or_default(), 30).await?;
            if let Some(replicas) = locked.state.agents.get_mut(&agent.name) {
                replicas.remove(&r);
            }
            progress.step("Container", &name(c), "Removed");
        }
        for replica in 1..=wanted {
            let cname = spec::container_name(&pool, &agent.name, replica);
            let current = existing.iter().find(|c| {
                label(c, spec::AGENT) == Some(&agent.name)
                    && label(c, spec::REPLICA) == Some(&replica.to_string())
            });
            let agent_secrets = &secrets[&agent.name];
            let hash = spec::config_hash(agent, &img.id, &api.container_url, agent_secrets);
            if let Some(c) = current
                && label(c, spec::HASH) == Some(hash.as_str())
                && !args.force_recreate
            {
                let id = c.id.clone().unwrap_or_default();
                let running = matches!(
                    c.state,
                    Some(
                        bollard::models::ContainerSummaryStateEnum::RUNNING
                            | bollard::models::ContainerSummaryStateEnum::RESTARTING
                    )
                );
                if running || !agent.execution.durability {
                    progress.step(
                        "Container",
                        &cname,
                        if running {
                            "Running"
                        } else {
                            "Exited (batch: not re-run)"
                        },
                    );
                } else {
                    let thread: ThreadId = label(c, spec::THREAD)
                        .and_then(|t| t.parse().ok())
                        .context("a pool container has no thread label")?;
                    let baseline = api.event_seq(thread).await?;
                    docker
                        .start_container(&id, None)
                        .await
                        .with_context(|| format!("cannot start {cname}"))?;
                    progress.step("Container", &cname, "Started");
                    started.push(Started {
                        name: cname.clone(),
                        id,
                        thread,
                        baseline,
                    });
                }
                continue;
            }
            // A durable replica keeps its thread forever; a batch job gets a fresh one per run.
            let thread = if agent.execution.durability {
                locked.state.thread_for(&agent.name, replica)
            } else {
                let t = ThreadId::new_v7();
                let fresh = state::ReplicaState {
                    thread_id: t,
                    container_id: None,
                    config_hash: None,
                };
                locked
                    .state
                    .agents
                    .entry(agent.name.clone())
                    .or_default()
                    .insert(replica, fresh);
                t
            };
            jobs.push(Job {
                agent,
                replica,
                name: cname,
                thread,
                hash,
                image: img.tag.clone(),
                old: current.and_then(|c| c.id.clone()),
            });
        }
        // Keep the state's container IDs current for kept containers too.
        for c in existing
            .iter()
            .filter(|c| label(c, spec::AGENT) == Some(&agent.name))
        {
            if let (Some(r), Some(id)) = (
                label(c, spec::REPLICA).and_then(|r| r.parse::<u32>().ok()),
                &c.id,
            ) && let Some(entry) = locked
                .state
                .agents
                .get_mut(&agent.name)
                .and_then(|m| m.get_mut(&r))
                && entry.container_id.is_none()
            {
                entry.container_id = Some(id.clone());
                entry.config_hash = label(c, spec::HASH).map(str::to_string);
            }
        }
    }
    // Record every thread before its container exists, so none is ever lost; then create and
    // start the containers, several at a time.
    locked.save()?;
    for job in &jobs {
        let doing = if job.old.is_some() {
            "Recreating"
        } else {
            "Creating"
        };
        progress.working("Container", &job.name, doing);
    }
    let creations = futures_util::stream::iter(
        jobs.iter()
            .map(|job| create(&docker, &api, &pool, job, &secrets[&job.agent.name])),
    )
    .buffer_unordered(8)
    .collect::<Vec<_>>()
    .await;
    for outcome in creations {
        let (job, id, baseline) = outcome?;
        let entry = locked
            .state
            .agents
            .entry(job.agent.name.clone())
            .or_default()
            .entry(job.replica)
            .or_insert(state::ReplicaState {
                thread_id: job.thread,
                container_id: None,
                config_hash: None,
            });
        entry.container_id = Some(id.clone());
        entry.config_hash = Some(job.hash.clone());
        progress.step(
            "Container",
            &job.name,
            if job.old.is_some() {
                "Recreated"
            } else {
                "Created"
            },
        );
        if job.agent.execution.durability {
            started.push(Started {
                name: job.name.clone(),
                id,
                thread: job.thread,
                baseline,
            });
        }
    }
    locked.save()?;

    let failures = wait_ready(
        &docker,
        &api,
        &started,
        Duration::from_secs(args.wait_timeout),
        &progress,
    )
    .await?;
    if failures > 0 {
        eprintln!(
            "{failures} runner(s) did not become ready; see `ninetrix ps -p {pool} -a` and the containers' logs"
        );
        return Ok(ExitCode::from(crate::EXIT_FAILURE));
    }
    if !args.json {
        println!(
            "pool {pool} is up: {} container(s); `ninetrix ps -p {pool}` lists them",
            af.agents.iter().map(|a| a.execution.replicas).sum::<u32>()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Waits until each started runner has emitted `ready` after its start; reports the ones that
/// exited, were OOM-killed, or are still restarting at the deadline.
async fn wait_ready(
    docker: &Docker,
    api: &Api,
    started: &[Started],
    timeout: Duration,
    progress: &Progress,
) -> anyhow::Result<usize> {
    let deadline = Instant::now() + timeout;
    let mut pending: Vec<&Started> = started.iter().collect();
    for s in &pending {
        progress.working("Container", &s.name, "Waiting");
    }
    let mut failures = 0;
    while !pending.is_empty() {
        let mut still = Vec::new();
        for s in pending {
            let ready = api
                .events(s.thread, s.baseline)
                .await?
                .iter()
                .any(|e| e["type"] == "ready");
            if ready {
                progress.step("Container", &s.name, "Ready");
                continue;
            }
            let info = docker.inspect_container(&s.id, None).await?;
            let st = info.state.unwrap_or_default();
            if !st.running.unwrap_or(false) && !st.restarting.unwrap_or(false) {
                let why = if st.oom_killed.unwrap_or(false) {
                    "OOM-killed".to_string()
                } else {
                    format!("exited with code {}", st.exit_code.unwrap_or(-1))
                };
                progress.fail("Container", &s.name, &format!("not ready: {why}"));
                failures += 1;
                continue;
            }
            if Instant::now() > deadline {
                let why = if st.restarting.unwrap_or(false) {
                    format!(
                        "still restarting (restart {})",
                        info.restart_count.unwrap_or(0)
                    )
                } else {
                    "running but not ready".into()
                };
                progress.fail(
                    "Container",
                    &s.name,
                    &format!("not ready after {}s: {why}", timeout.as_secs()),
                );
                failures += 1;
                continue;
            }
            still.push(s);
        }
        pending = still;
        if !pending.is_empty() {
            progress.tick();
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(failures)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_rows_update_in_place_and_count_finished_ones() {
        let mut rows = Vec::new();
        let t = Duration::from_millis(1500);
        upsert(
            &mut rows,
            "API",
            "http://127.0.0.1:1",
            "Ready",
            RowState::Done,
            t,
        );
        upsert(
            &mut rows,
            "Container",
            "p-a-1",
            "Creating",
            RowState::Working,
            t,
        );
        upsert(
            &mut rows,
            "Container",
            "p-b-1",
            "Creating",
            RowState::Working,
            t,
        );
        assert!(render(&rows, 0, 200).starts_with("[+] Running 1/3\n"));
        upsert(&mut rows, "Container", "p-a-1", "Ready", RowState::Done, t);
        upsert(
            &mut rows,
            "Container",
            "p-b-1",
            "not ready: exited with code 1",
            RowState::Failed,
            t,
        );
        let block = render(&rows, 0, 200);
        assert_eq!(rows.len(), 3, "a row is replaced, not appended");
        let lines: Vec<&str> = block.lines().collect();
        assert_eq!(lines[0], "[+] Running 3/3");
        assert!(lines[2].starts_with(" ✔ Container p-a-1") && lines[2].contains("Ready"));
        assert!(lines[2].ends_with("1.5s"));
        assert!(
            lines[3].starts_with(" ✘ Container p-b-1") && lines[3].contains("exited with code 1")
        );
        // Cut to the terminal width so the cursor can move back over the block.
        let narrow = render(&rows, 0, 30);
        assert!(narrow.lines().all(|l| l.chars().count() <= 30), "{narrow}");
        assert!(narrow.lines().nth(1).is_some_and(|l| l.ends_with('…')));
    }

    #[test]
    fn failed_rows_and_overflow_are_committed_and_still_counted() {
        let t = Duration::ZERO;
        let mut live = Live::default();
        for i in 0..5 {
            upsert(
                &mut live.rows,
                "Container",
                &format!("c{i}"),
                "Created",
                RowState::Done,
                t,
            );
        }
        upsert(
            &mut live.rows,
            "Container",
            "c5",
            "Waiting",
            RowState::Working,
            t,
        );
        upsert(
            &mut live.rows,
            "Container",
            "c6",
            "Waiting",
            RowState::Working,
            t,
        );
        upsert(
            &mut live.rows,
            "Container",
            "c2",
            "not ready: OOM-killed",
            RowState::Failed,
            t,
        );
        let out = commit(&mut live, 3);
        let names: Vec<&str> = out.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            ["c2", "c0", "c1", "c3"],
            "failed first, then oldest finished"
        );
        assert_eq!(live.rows.len(), 3);
        assert_eq!(live.committed, 4);
        assert!(render(&live.rows, live.committed, 200).starts_with("[+] Running 5/7\n"));
        // A working row at the top is never committed, even when the block is full.
        let mut stuck = Live::default();
        upsert(
            &mut stuck.rows,
            "Container",
            "w",
            "Waiting",
            RowState::Working,
            t,
        );
        upsert(
            &mut stuck.rows,
            "Container",
            "d",
            "Ready",
            RowState::Done,
            t,
        );
        assert!(commit(&mut stuck, 1).is_empty());
    }
}
