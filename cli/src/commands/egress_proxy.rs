//! `ninetrix egress-proxy --listen ADDR --allow RULE… [--status-file PATH]`: the HTTP proxy
//! sidecar that is an agent's only way out of its `--internal` network (issue 39). It tunnels
//! `CONNECT` and forwards plain HTTP to the destinations the `--allow` rules name and refuses
//! (403), logs and counts everything else; see [`crate::egress`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use ninetrix_agentfile::egress::EgressRule;

/// `ninetrix egress-proxy` arguments.
#[derive(Args, Debug, Clone)]
pub struct EgressProxyArgs {
    /// Where to serve the proxy.
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:3128")]
    pub listen: SocketAddr,
    /// A destination the agent may reach (repeatable): `example.com`, `*.example.com`,
    /// `10.0.0.5`, `[::1]`, each optionally with `:PORT` or `:*` (without one: 443 and 80).
    /// None refuses everything.
    #[arg(long = "allow", value_name = "RULE", value_parser = parse_rule)]
    pub allow: Vec<EgressRule>,
    /// Where to keep the counts and the last refusals as JSON (replaced atomically at start
    /// and after each refusal).
    #[arg(long, value_name = "PATH")]
    pub status_file: Option<PathBuf>,
    /// Where to keep a health report like a runner's (every 5 s: the counts and the last
    /// refusal), which `ps` shows on the proxy's line.
    #[arg(long, value_name = "PATH")]
    pub health_file: Option<PathBuf>,
}

/// Clap's check of an `--allow` value: a bad rule is a usage error (exit 2) with its message.
fn parse_rule(text: &str) -> Result<EgressRule, ninetrix_agentfile::egress::EgressRuleError> {
    EgressRule::parse(text)
}

/// Serves until SIGINT/SIGTERM.
pub(crate) fn run(args: &EgressProxyArgs) -> anyhow::Result<ExitCode> {
    super::runner::init_logging("info");
    let args = args.clone();
    super::until_signal(|shutdown| async move {
        let listener = match tokio::net::TcpListener::bind(args.listen).await {
            Ok(listener) => listener,
            Err(e) => {
                eprintln!("error: cannot listen on {}: {e}", args.listen);
                return ExitCode::from(crate::EXIT_FAILURE);
            }
        };
        let rules: Vec<String> = args.allow.iter().map(ToString::to_string).collect();
        tracing::info!(
            listen = %args.listen,
            allow = %rules.join(" "),
            "egress proxy serving"
        );
        let health = args
            .health_file
            .map(|path| ninetrix_runner::health::Health::new(Some(path)));
        crate::egress::serve(
            listener,
            args.allow,
            args.status_file,
            health,
            shutdown.cancelled_owned(),
        )
        .await;
        ExitCode::SUCCESS
    })
}
