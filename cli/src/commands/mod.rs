//! One module per command, each owning its arguments (clap `Args`) and its `run`, which returns
//! the process exit code or an error for `main` to print. The Docker side lives in `crate::pool`
//! and `crate::docker`, rendering in `crate::ui`.

pub mod a2a;
pub mod api;
pub mod approvals;
pub mod build;
pub mod cancel;
pub mod compact;
pub mod diff;
pub mod down;
pub mod egress_proxy;
pub mod eval;
pub mod fork;
pub mod health;
pub mod init;
pub mod invoke;
pub mod job_broker;
pub mod k8s;
pub mod logs;
pub mod mcp_bridge;
pub mod memory;
pub mod ps;
pub mod replay;
pub mod reset;
pub mod rewind;
pub mod run;
pub mod runner;
pub mod sessions;
pub mod trace;
pub mod triggers;
pub mod up;
pub mod validate;

use std::process::ExitCode;

use crate::cli::{Cli, Command};

fn block_on<F: std::future::Future<Output = anyhow::Result<ExitCode>>>(
    f: F,
) -> anyhow::Result<ExitCode> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(f)
}

/// Runs `work` on a small runtime with a token that SIGINT/SIGTERM cancels (the long-running
/// in-container commands: `runner`, `mcp-bridge`, `egress-proxy`, `job-broker`; and `replay` and
/// `eval`, which run a runner in process).
fn until_signal<T, F: std::future::Future<Output = T>>(
    work: impl FnOnce(tokio_util::sync::CancellationToken) -> F,
) -> anyhow::Result<T> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    Ok(runtime.block_on(async move {
        let shutdown = tokio_util::sync::CancellationToken::new();
        let on_signal = shutdown.clone();
        tokio::spawn(async move {
            ninetrix_api::shutdown_signal().await;
            tracing::info!("stop requested: finishing the current step");
            on_signal.cancel();
        });
        work(shutdown).await
    }))
}

/// Runs a future that yields a plain value on a small runtime.
fn block_on_value<T, F: std::future::Future<Output = T>>(f: F) -> anyhow::Result<T> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(f))
}

/// Runs the parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Validate(args) => validate::run(&args),
        Command::Init(args) => init::run(&args),
        Command::Api(args) => api::run(&args),
        Command::Runner => runner::run(),
        Command::Health(args) => health::run(&args),
        Command::McpBridge(args) => mcp_bridge::run(&args),
        Command::EgressProxy(args) => egress_proxy::run(&args),
        Command::JobBroker(args) => job_broker::run(&args),
        Command::Build(args) => block_on(build::run(&args)),
        Command::Up(args) => block_on(up::run(&args)),
        Command::Down(args) => block_on(down::run(&args)),
        Command::Ps(args) => block_on(ps::run(&args)),
        Command::Reset(args) => block_on(reset::run(&args)),
        Command::Compact(args) => block_on(compact::run(&args)),
        Command::Cancel(args) => block_on(cancel::run(&args)),
        Command::Fork(args) => block_on(fork::run(&args)),
        Command::Rewind(args) => block_on(rewind::run(&args)),
        Command::Diff(args) => block_on(diff::run(&args)),
        Command::Replay(args) => replay::run(&args),
        Command::Eval(args) => eval::run(&args),
        Command::Invoke(args) => block_on(invoke::run(&args)),
        Command::Trace(args) => block_on(trace::run(&args)),
        Command::Sessions(args) => block_on(sessions::run(&args)),
        Command::Memory(args) => block_on(memory::run(&args)),
        Command::Triggers(args) => block_on(triggers::run(&args)),
        Command::Logs(args) => block_on(logs::run(&args)),
        Command::Run(args) => block_on(run::run(&args)),
        Command::K8s(args) => k8s::run(&args),
        Command::Approvals(args) => block_on(approvals::run(&args)),
        Command::A2a(args) => block_on(a2a::run(&args)),
        Command::Approve(args) => block_on(approvals::approve(&args)),
        Command::Deny(args) => block_on(approvals::deny(&args)),
        Command::Answer(args) => block_on(approvals::answer(&args)),
    }
}
