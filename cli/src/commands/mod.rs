//! One module per command. Each returns the process exit code, or an error for `main` to print.

mod api;
mod init;
mod runner;
mod validate;

use std::process::ExitCode;

use crate::cli::{BuildArgs, Cli, Command};

pub(crate) use api::agentfile_home;

fn block_on<F: std::future::Future<Output = anyhow::Result<ExitCode>>>(
    f: F,
) -> anyhow::Result<ExitCode> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(f)
}

async fn build(args: &BuildArgs) -> anyhow::Result<ExitCode> {
    use crate::orchestrate::image;
    let parsed = crate::orchestrate::load(&args.file)?;
    let docker = crate::orchestrate::docker::connect().await?;
    let binary = image::this_binary()?;
    let (img, built) = image::runner_image(&docker, &binary).await?;
    outln!("{} {}", img.tag, if built { "built" } else { "up to date" });
    for agent in &parsed.agentfile.agents {
        if let Some(base) = &agent.runtime.image {
            let img = image::agent_image(&docker, base, &binary).await?;
            outln!("{} (agent {})", img.tag, agent.name);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs the parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Validate(args) => validate::run(&args),
        Command::Init(args) => init::run(&args),
        Command::Api(args) => api::run(&args),
        Command::Runner => runner::run(),
        Command::Build(args) => block_on(build(&args)),
        Command::Up(args) => block_on(crate::orchestrate::up::run(&args)),
        Command::Down(args) => block_on(crate::orchestrate::down::run(&args)),
        Command::Ps(args) => block_on(crate::orchestrate::ps::run(&args)),
        Command::Invoke(args) => block_on(crate::orchestrate::diag::invoke(&args)),
        Command::Trace(args) => block_on(crate::orchestrate::diag::trace(&args)),
        Command::Logs(args) => block_on(crate::orchestrate::logs::run(&args)),
        Command::Run(args) => block_on(crate::orchestrate::run::run(&args)),
    }
}
