//! `ninetrix run`: one agent as a one-shot batch container (restart `no`, a fresh thread, the
//! message or `execution.task` as its input), its output streamed, its exit code returned.
//! Ctrl-C stops it cleanly (SIGTERM: the runner checkpoints and exits).

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use bollard::container::LogOutput;
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, LogsOptionsBuilder, RemoveContainerOptionsBuilder,
    StopContainerOptionsBuilder,
};
use clap::Args;
use futures_util::StreamExt as _;
use ninetrix_proto::ThreadId;

use crate::cli::pool_name;
use crate::pool::image;
use crate::pool::local_api::Api;
use crate::pool::spec::DEFAULT_STOP_SECS;
use crate::pool::spec::{self, Config, Replica, Slot};

/// Arguments of `ninetrix run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The agentfile.
    #[arg(short, long, default_value = "agentfile.yaml", value_name = "FILE")]
    pub file: PathBuf,
    /// The pool.
    #[arg(short, long, value_name = "POOL", value_parser = pool_name)]
    pub pool: Option<String>,
    /// The agent.
    #[arg(long, value_name = "AGENT")]
    pub agent: String,
    /// The input (default: the agent's execution.task).
    #[arg(short, long, value_name = "MSG")]
    pub message: Option<String>,
    /// Remove the container when it exits.
    #[arg(long)]
    pub rm: bool,
    /// Seconds the job gets to checkpoint and exit on Ctrl-C before it is killed.
    #[arg(short = 't', long = "timeout", default_value_t = DEFAULT_STOP_SECS, value_name = "SECS")]
    pub timeout: i32,
}

/// Runs `ninetrix run`.
pub(crate) async fn run(args: &RunArgs) -> anyhow::Result<ExitCode> {
    let parsed = crate::pool::load(&args.file)?;
    let af = parsed.agentfile;
    let pool = crate::pool::resolve::pool_of(&af, args.pool.as_deref(), &args.file)?;
    let Some(agent) = af.agent(&args.agent) else {
        let known: Vec<&str> = af.agents.iter().map(|a| a.name.as_str()).collect();
        bail!(
            "the agentfile has no agent `{}` (it has: {})",
            args.agent,
            known.join(", ")
        );
    };
    let mut spec = agent.clone();
    spec.execution.durability = false;
    spec.execution.replicas = 1;
    if let Some(m) = &args.message {
        spec.execution.task = Some(m.clone());
    }
    if spec.execution.task.is_none() {
        bail!(
            "agent `{}` has no execution.task; pass the input with -m MSG",
            agent.name
        );
    }
    let secrets = spec::host_secrets(&spec)?;
    let docker = crate::docker::connect().await?;
    crate::pool::runtimes::check(&docker, [&spec]).await?;
    let home = crate::home::agentfile_home()?;
    let binary = image::this_binary()?;
    let (runner_image, _) = image::runner_image(&docker, &binary).await?;
    let img = match &spec.runtime.image {
        Some(base) => image::agent_image(&docker, base, &binary).await?,
        None => runner_image.clone(),
    };
    let api = Api::ensure(&docker, &home, &runner_image).await?;
    // The pool lock, held while the network is found or created (as `up` does), then released:
    // a run adds no replica to the pool state.
    let network = {
        let _locked = crate::pool::state::lock(&home, &pool)?;
        crate::pool::engine::ensure_network(&docker, &pool, api.local.as_deref()).await?
    };
    for repair in &network.repairs {
        eprintln!("network {}: {repair}", network.name);
    }
    api.join(&docker, &network.id).await?;
    // A restricted agent runs behind its proxy, as its replicas do (the pool's, kept by `up`,
    // or one made now).
    let site = crate::pool::egress::Site {
        docker: &docker,
        pool: &pool,
        pool_network: &network.id,
        api: &api,
        image: &runner_image,
    };
    let progress = crate::ui::progress::Progress::new(false);
    let egress = crate::pool::egress::ensure(&site, &[&spec], false, &progress).await?;

    let thread = ThreadId::new_v7();
    let token = api.runner_token(thread, &pool, &spec.name, 0).await?;
    let config = Config::of(&spec, &img.id, &api.container_url, &secrets);
    let replica = Replica {
        pool: &pool,
        spec: &spec,
        slot: Slot::Run,
        thread,
        image: &img.tag,
        api_url: &api.container_url,
        network: &network.id,
        config: &config,
        created: ninetrix_proto::boots::Created::New,
        egress: egress
            .get(&spec.name)
            .map(|network| crate::pool::egress_env::Link {
                network,
                api_local: api.local.is_some(),
            }),
    };
    let name = replica.name();
    let body = replica.body();
    let created = docker
        .create_container(
            Some(CreateContainerOptionsBuilder::default().name(&name).build()),
            body,
        )
        .await
        .with_context(|| format!("cannot create {name}"))?;
    crate::pool::engine::upload_secrets(&docker, &created.id, &secrets, Some(&token))
        .await
        .context("cannot upload the run's secrets")?;
    // Its workspace is an anonymous volume (pool/spec.rs), removed with it.
    eprintln!("running {} as {name} (thread {thread})", spec.name);
    docker
        .start_container(&created.id, None)
        .await
        .with_context(|| format!("cannot start {name}"))?;

    let mut logs = docker.logs(
        &created.id,
        Some(
            LogsOptionsBuilder::default()
                .stdout(true)
                .stderr(true)
                .follow(true)
                .build(),
        ),
    );
    let mut interrupted = false;
    loop {
        tokio::select! {
            frame = logs.next() => match frame {
                Some(Ok(LogOutput::StdOut { message } | LogOutput::Console { message })) => {
                    // Best effort: a closed stdout must not hide the job's exit code.
                    let mut out = std::io::stdout();
                    let _ = out.write_all(&message);
                    let _ = out.flush();
                }
                Some(Ok(LogOutput::StdErr { message })) => {
                    let _ = std::io::stderr().write_all(&message);
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => break,
            },
            _ = tokio::signal::ctrl_c(), if !interrupted => {
                interrupted = true;
                eprintln!("stopping {name}…");
                let _ = docker.stop_container(&created.id, Some(StopContainerOptionsBuilder::default().t(args.timeout).build())).await;
            }
        }
    }
    let code = docker
        .inspect_container(&created.id, None)
        .await
        .ok()
        .and_then(|i| i.state)
        .and_then(|s| s.exit_code)
        .unwrap_or(1);
    if args.rm {
        let _ = docker
            .remove_container(
                &created.id,
                Some(
                    RemoveContainerOptionsBuilder::default()
                        .force(true)
                        .v(true)
                        .build(),
                ),
            )
            .await;
    }
    Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
}
