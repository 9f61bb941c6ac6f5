//! `ninetrix k8s render`: a pool's Kubernetes manifests (issue 19). The objects come from
//! [`crate::k8s::render()`], a pure function; this writes them to stdout as one
//! multi-document stream, or one file per object under `-o DIR`, and prints to stderr the `kubectl create
//! secret` lines for the Secrets they refer to (names and keys only: no value is ever read or
//! written).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, Subcommand};

use crate::cli::pool_name;
use crate::k8s::{RenderOptions, check_names, not_rendered, render, secret_commands, to_documents};

/// The examples at the end of `ninetrix k8s render --help`.
pub(crate) const EXAMPLES: &str = "\
Examples:
  ninetrix k8s render > pool.yaml && kubectl apply -f pool.yaml
  ninetrix k8s render -p prod --namespace agents --image registry.example/ninetrix:0.1.0
  ninetrix k8s render --storage 5Gi -o k8s/      # one file per object

Each document is JSON (valid YAML). Secrets are referenced by name; create them with the
`kubectl create secret generic …` lines printed on stderr. See docs/kubernetes.md.";

/// Arguments of `ninetrix k8s`.
#[derive(Debug, Args)]
pub struct K8sArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: K8sCommand,
}

/// The `k8s` subcommands.
#[derive(Debug, Subcommand)]
pub enum K8sCommand {
    /// Write a pool's Kubernetes manifests: a StatefulSet per durable agent (one pod per
    /// replica), a Job per batch agent, the checkpoint API as a Deployment and Service.
    ///
    /// Nothing is sent to a cluster and no secret value is read: the manifests refer to Secrets
    /// by name, and the commands that create them are printed on stderr.
    #[command(after_long_help = EXAMPLES)]
    Render(RenderArgs),
}

/// Arguments of `ninetrix k8s render`.
#[derive(Debug, Args)]
pub struct RenderArgs {
    /// The agentfile.
    #[arg(short, long, default_value = "agentfile.yaml", value_name = "FILE")]
    pub file: PathBuf,
    /// The pool [default: the agentfile's `name:`, else its directory's name]
    #[arg(short, long, value_name = "POOL", value_parser = pool_name)]
    pub pool: Option<String>,
    /// The namespace written on every object [default: none, kubectl's current one]
    #[arg(long, value_name = "NS")]
    pub namespace: Option<String>,
    /// The ninetrix image for the runners and the API (push it to a registry the cluster can
    /// pull from) [default: ninetrix/runner:<version>]
    #[arg(long, value_name = "IMAGE")]
    pub image: Option<String>,
    /// The size of each durable replica's workspace volume claim (one per StatefulSet pod).
    #[arg(long, default_value = "1Gi", value_name = "SIZE")]
    pub storage: String,
    /// Write one file per object (`NN-<kind>-<name>.yaml`) into this directory instead of stdout.
    #[arg(short, long, value_name = "DIR")]
    pub output: Option<PathBuf>,
}

/// Runs `ninetrix k8s …`.
pub(crate) fn run(args: &K8sArgs) -> anyhow::Result<ExitCode> {
    match &args.command {
        K8sCommand::Render(a) => render_cmd(a),
    }
}

fn render_cmd(args: &RenderArgs) -> anyhow::Result<ExitCode> {
    let parsed = crate::pool::load(&args.file)?;
    let pool = crate::pool::resolve::pool_of(&parsed.agentfile, args.pool.as_deref(), &args.file)?;
    let opts = RenderOptions {
        namespace: args.namespace.clone(),
        image: args
            .image
            .clone()
            .unwrap_or_else(RenderOptions::default_image),
        storage: args.storage.clone(),
        telemetry: crate::pool::spec::Telemetry::from_host(),
    };
    check_names(&parsed.agentfile, &pool)
        .map_err(|e| anyhow::anyhow!("{}: {e}", args.file.display()))?;
    // A NetworkPolicy allows addresses, not host names: what `network.egress` says cannot be
    // rendered faithfully, and an agent that asked for an allow-list never runs without one.
    let restricted = ninetrix_agentfile::network::restricted_agents(&parsed.agentfile);
    if !restricted.is_empty() {
        anyhow::bail!(
            "{}: agent(s) {} set `network.egress`, which `k8s render` cannot express (a \
             NetworkPolicy allows addresses, not host names); nothing was rendered. Remove \
             `network.egress` and restrict egress with your cluster's egress gateway or a \
             FQDN-aware policy (Cilium, Calico), or run the pool on one host (`ninetrix up`)",
            args.file.display(),
            restricted.join(", ")
        );
    }
    // Background jobs are sibling containers made through one engine's socket, mounting their
    // replica's workspace volume: nothing a cluster gives a pod. An agent given the job tools
    // never runs without them.
    let with_jobs = crate::pool::jobs::job_agents(&parsed.agentfile);
    if !with_jobs.is_empty() {
        anyhow::bail!(
            "{}: agent(s) {} have the background-job tools (`job_start`, …), which `k8s render` \
             cannot run: background jobs need one Docker host for now; nothing was rendered. \
             Run the pool on one host (`ninetrix up`), or remove the job tools",
            args.file.display(),
            with_jobs.join(", ")
        );
    }
    let objects = render(&parsed.agentfile, &pool, &opts);
    for warning in not_rendered(&parsed.agentfile) {
        eprintln!("warning: {warning}");
    }
    match &args.output {
        None => print!("{}", to_documents(&objects)),
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            for (i, o) in objects.iter().enumerate() {
                let kind = o["kind"].as_str().unwrap_or("object").to_lowercase();
                let name = o["metadata"]["name"].as_str().unwrap_or("unnamed");
                let path = dir.join(format!("{:02}-{kind}-{name}.yaml", i + 1));
                std::fs::write(&path, to_documents(std::slice::from_ref(o)))
                    .with_context(|| format!("cannot write {}", path.display()))?;
            }
            eprintln!("wrote {} objects to {}", objects.len(), dir.display());
        }
    }
    eprintln!("# The Secrets the manifests refer to (fill in `…`; see docs/kubernetes.md):");
    for line in secret_commands(&parsed.agentfile, &pool, &opts) {
        eprintln!("{line}");
    }
    Ok(ExitCode::SUCCESS)
}
