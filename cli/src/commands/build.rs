//! `ninetrix build`: the runner image (FROM scratch + this binary) and any per-agent images,
//! built offline through the Engine API.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

/// Arguments of `ninetrix build`.
#[derive(Debug, Args)]
pub struct BuildArgs {
    /// The agentfile.
    #[arg(short, long, default_value = "agentfile.yaml", value_name = "FILE")]
    pub file: PathBuf,
}

/// Runs `ninetrix build`.
pub(crate) async fn run(args: &BuildArgs) -> anyhow::Result<ExitCode> {
    use crate::pool::image;
    let parsed = crate::pool::load(&args.file)?;
    let docker = crate::docker::connect().await?;
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
