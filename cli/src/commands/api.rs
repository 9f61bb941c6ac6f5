//! `ninetrix api`: serve the checkpoint API until SIGTERM or Ctrl-C.

use std::path::Path;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Args;
use ninetrix_api::{AuthConfig, Config, Secret, Server};
use ninetrix_telemetry::Telemetry;

/// Arguments of `ninetrix api`.
#[derive(Debug, Args)]
pub struct ApiArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "ADDR")]
    pub listen: std::net::SocketAddr,
    /// `sqlite:///path/to/file.db` or `postgres://user@host/db` [default: sqlite under
    /// $AGENTFILE_HOME/api/]
    #[arg(long, env = "DATABASE_URL", hide_env_values = true, value_name = "URL")]
    pub database: Option<String>,
    /// File holding the database URL (a Docker or Kubernetes secret: the URL's password stays
    /// out of the environment and the command line).
    #[arg(long, value_name = "FILE", conflicts_with = "database")]
    pub database_file: Option<PathBuf>,
    /// File holding the secret that signs runner tokens (or set NINETRIX_API_SECRET).
    #[arg(long, value_name = "FILE")]
    pub secret_file: Option<PathBuf>,
    /// File holding the admin token (or set NINETRIX_ADMIN_TOKEN).
    #[arg(long, value_name = "FILE")]
    pub admin_token_file: Option<PathBuf>,
    /// Run without authentication, for local development only (loopback addresses only).
    #[arg(long)]
    pub insecure_dev: bool,
    /// Largest request body in bytes.
    #[arg(long, default_value_t = 8 * 1024 * 1024, value_name = "BYTES")]
    pub body_limit: usize,
    /// Longest long-poll (inbox, requests to people, handoffs, session work), in seconds: 1 to
    /// 3600.
    #[arg(long, default_value_t = 60, value_name = "SECS",
        value_parser = clap::value_parser!(u64).range(1..=ninetrix_proto::api::MAX_WAIT_SECS))]
    pub max_wait: u64,
    /// Seconds from the first byte of a request head to its end; a slower head closes the
    /// connection.
    #[arg(long, default_value_t = secs(ninetrix_api::server::DEFAULT_HEADER_TIMEOUT), value_name = "SECS", value_parser = at_least_one)]
    pub header_timeout: u64,
    /// Seconds a request body may send nothing before the request is answered 408.
    #[arg(long, default_value_t = secs(ninetrix_api::server::DEFAULT_BODY_TIMEOUT), value_name = "SECS", value_parser = at_least_one)]
    pub body_timeout: u64,
    /// Seconds a connection with no request in flight stays open (long-polls and event streams
    /// are requests in flight: never cut).
    #[arg(long, default_value_t = secs(ninetrix_api::server::DEFAULT_IDLE_TIMEOUT), value_name = "SECS", value_parser = at_least_one)]
    pub idle_timeout: u64,
    /// Connections served at once; past it new ones wait until one ends.
    #[arg(long, default_value_t = ninetrix_api::server::DEFAULT_MAX_CONNECTIONS, value_name = "N", value_parser = max_connections)]
    pub max_connections: usize,
    /// Seconds in-flight requests get to finish after SIGTERM before the connections still open
    /// are closed.
    #[arg(long, default_value_t = secs(ninetrix_api::server::DEFAULT_SHUTDOWN_GRACE), value_name = "SECS", value_parser = at_least_one)]
    pub shutdown_grace: u64,
    /// Seconds a whole webhook body (`POST /v1/hooks/…`) may take to arrive after its head;
    /// later, it is answered 408 and the connection closed.
    #[arg(long, default_value_t = secs(ninetrix_api::server::DEFAULT_HOOK_BODY_TIMEOUT), value_name = "SECS", value_parser = at_least_one)]
    pub hook_body_timeout: u64,
    /// Webhook deliveries one source address may have in flight at once; more are answered
    /// 429 `too_many_in_flight` at once.
    #[arg(long, default_value_t = ninetrix_api::server::DEFAULT_HOOK_REQUESTS_PER_PEER, value_name = "N", value_parser = max_connections)]
    pub hook_requests_per_peer: usize,
    /// Seconds a model lease (a permit of a pool-wide model limit) lasts unless its runner
    /// renews it: 1 to 3600. A killed runner's model-call slots come back within it.
    #[arg(long, default_value_t = secs(ninetrix_api::server::DEFAULT_MODEL_LEASE_TTL), value_name = "SECS",
        value_parser = clap::value_parser!(u64).range(1..=ninetrix_api::server::MAX_MODEL_LEASE_TTL.as_secs()))]
    pub model_lease_ttl: u64,
    /// What callers outside reach this API by (e.g. `https://agents.example.com`): the base of
    /// the URLs A2A agent cards give. Without it, `http://` and the request's `Host`.
    #[arg(long, env = "NINETRIX_PUBLIC_URL", hide_env_values = true, value_name = "URL", value_parser = public_url)]
    pub public_url: Option<String>,
}

/// Parses `--public-url`: an `http://` or `https://` URL, without a trailing `/`.
fn public_url(value: &str) -> Result<String, String> {
    let trimmed = value.trim().trim_end_matches('/');
    let host = trimmed
        .strip_prefix("https://")
        .or_else(|| trimmed.strip_prefix("http://"));
    match host {
        Some(h) if !h.is_empty() && !h.contains(char::is_whitespace) => Ok(trimmed.to_string()),
        _ => Err(format!(
            "`{value}` is not an http:// or https:// URL (e.g. https://agents.example.com)"
        )),
    }
}

/// Whole seconds of a default duration, for a flag's default.
const fn secs(d: Duration) -> u64 {
    d.as_secs()
}

/// Longest timeout a flag takes: a day (a longer one is a typo, and keeps every deadline far
/// from the clock's range).
const MAX_TIMEOUT_SECS: u64 = 24 * 60 * 60;

/// Parses a number of seconds of a timeout: 1 to a day.
fn at_least_one(value: &str) -> Result<u64, String> {
    let secs: u64 = value
        .parse()
        .map_err(|_| format!("`{value}` is not a whole number of seconds"))?;
    match secs {
        0 => Err("0 would turn the timeout off or fire at once; give at least 1".into()),
        s if s > MAX_TIMEOUT_SECS => Err(format!("at most {MAX_TIMEOUT_SECS} (a day)")),
        s => Ok(s),
    }
}

/// Parses `--max-connections`: 1 to what the server's semaphore can count.
fn max_connections(value: &str) -> Result<usize, String> {
    let n: usize = value
        .parse()
        .map_err(|_| format!("`{value}` is not a whole number"))?;
    let most = tokio::sync::Semaphore::MAX_PERMITS;
    match n {
        0 => Err("0 would serve no connection; give at least 1".into()),
        n if n > most => Err(format!("at most {most}")),
        n => Ok(n),
    }
}

/// Shortest secret or admin token accepted.
const MIN_SECRET_LEN: usize = 16;

/// Runs `ninetrix api`.
pub(crate) fn run(args: &ApiArgs) -> anyhow::Result<ExitCode> {
    init_logging();
    let auth = auth(args)?;
    let database_url = match (&args.database, &args.database_file) {
        (_, Some(path)) => database_from_file(path)?,
        (Some(url), None) => url.clone(),
        (None, None) => default_database()?,
    };
    let mut config = Config::new(database_url.clone(), auth);
    config.listen = args.listen;
    config.body_limit = args.body_limit;
    config.max_wait = Duration::from_secs(args.max_wait);
    config.header_timeout = Duration::from_secs(args.header_timeout);
    config.body_timeout = Duration::from_secs(args.body_timeout);
    config.idle_timeout = Duration::from_secs(args.idle_timeout);
    config.max_connections = args.max_connections;
    config.shutdown_grace = Duration::from_secs(args.shutdown_grace);
    config.hook_body_timeout = Duration::from_secs(args.hook_body_timeout);
    config.hook_requests_per_peer = args.hook_requests_per_peer;
    config.model_lease_ttl = Duration::from_secs(args.model_lease_ttl);
    config.public_url = args.public_url.clone();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    // The exporter's batch task runs on the runtime. A bad OTEL_* variable stops the start.
    let telemetry = {
        let _entered = runtime.enter();
        Telemetry::from_env(SERVICE_NAME, Vec::new())
            .context("cannot set up OpenTelemetry export")?
    };
    if let Some(telemetry) = &telemetry {
        config.telemetry = Some(telemetry.tracer(SERVICE_NAME));
        tracing::info!("exporting OpenTelemetry traces to {}", telemetry.endpoint());
    }
    let served = runtime.block_on(async move {
        let server = Server::bind(config).await?;
        let addr = server.local_addr()?;
        tracing::info!(
            address = %addr,
            backend = server.backend(),
            database = %describe(&database_url),
            "ninetrix api listening on http://{addr}"
        );
        server.run(ninetrix_api::shutdown_signal()).await?;
        tracing::info!("ninetrix api stopped");
        anyhow::Ok(())
    });
    // Send the spans still queued (the runtime's workers export them), then stop.
    if let Some(telemetry) = telemetry {
        telemetry.shutdown(TELEMETRY_FLUSH);
    }
    served?;
    Ok(ExitCode::SUCCESS)
}

/// The OpenTelemetry service name when `OTEL_SERVICE_NAME` does not say (and the tracer's scope).
const SERVICE_NAME: &str = "ninetrix-api";

/// How long the spans still queued at exit get to reach the collector.
const TELEMETRY_FLUSH: Duration = Duration::from_secs(5);

/// Logs to stderr: `RUST_LOG` filters (default info), `NINETRIX_LOG_FORMAT=json` for JSON lines.
pub(crate) fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    let _ = if std::env::var("NINETRIX_LOG_FORMAT").as_deref() == Ok("json") {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

fn auth(args: &ApiArgs) -> anyhow::Result<AuthConfig> {
    let secret = read_secret(
        args.secret_file.as_deref(),
        "NINETRIX_API_SECRET",
        "--secret-file",
    )?;
    let admin = read_secret(
        args.admin_token_file.as_deref(),
        "NINETRIX_ADMIN_TOKEN",
        "--admin-token-file",
    )?;
    match (secret, admin, args.insecure_dev) {
        (None, None, true) => {
            tracing::warn!(
                "--insecure-dev: authentication is OFF; every request is treated as admin"
            );
            Ok(AuthConfig::InsecureDev)
        }
        (_, _, true) => {
            bail!("--insecure-dev cannot be combined with a secret or an admin token; drop one")
        }
        (Some(secret), Some(admin_token), false) => Ok(AuthConfig::Tokens {
            secret,
            admin_token,
        }),
        (None, _, false) => bail!(
            "refusing to start without a secret: pass --secret-file FILE or set NINETRIX_API_SECRET \
             (at least {MIN_SECRET_LEN} characters, e.g. `head -c 32 /dev/urandom | base64`), \
             or --insecure-dev for local development without authentication"
        ),
        (Some(_), None, false) => bail!(
            "refusing to start without an admin token: pass --admin-token-file FILE or set NINETRIX_ADMIN_TOKEN \
             (at least {MIN_SECRET_LEN} characters)"
        ),
    }
}

/// Reads a secret from a file or an environment variable; never prints it.
fn read_secret(file: Option<&Path>, env: &str, flag: &str) -> anyhow::Result<Option<Secret>> {
    let value = match file {
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {flag} {}", path.display()))?
            .trim()
            .to_string(),
        None => match std::env::var(env) {
            Ok(v) => v.trim().to_string(),
            Err(_) => return Ok(None),
        },
    };
    let source = file.map_or_else(|| env.to_string(), |p| p.display().to_string());
    if value.chars().count() < MIN_SECRET_LEN {
        bail!(
            "the value from {source} is shorter than {MIN_SECRET_LEN} characters; use a longer random value"
        );
    }
    Ok(Some(Secret::new(value.into_bytes())))
}

/// The database URL in `path` (surrounding whitespace trimmed); never printed, as it may hold a
/// password.
fn database_from_file(path: &Path) -> anyhow::Result<String> {
    let url = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read --database-file {}", path.display()))?
        .trim()
        .to_string();
    if url.is_empty() {
        bail!(
            "--database-file {} is empty; it must hold a URL such as postgres://user:password@host/db",
            path.display()
        );
    }
    Ok(url)
}

fn default_database() -> anyhow::Result<String> {
    let home = crate::home::agentfile_home()?;
    let dir = home.join("api");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(format!("sqlite://{}", dir.join("ninetrix.db").display()))
}

/// The database URL without credentials, for logs.
fn describe(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) if scheme.starts_with("postgres") => {
            let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
            let host = host.split('?').next().unwrap_or(host);
            format!("{scheme}://{host}")
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::{at_least_one, describe, max_connections};

    #[test]
    fn timeouts_and_the_connection_cap_refuse_zero_and_nonsense() {
        assert_eq!(at_least_one("2"), Ok(2));
        assert!(at_least_one("0").unwrap_err().contains("at least 1"));
        assert!(at_least_one("-1").is_err());
        assert!(at_least_one("1.5").is_err());
        assert!(at_least_one("86401").unwrap_err().contains("a day"));
        assert_eq!(max_connections("2"), Ok(2));
        assert!(max_connections("0").unwrap_err().contains("at least 1"));
        assert!(max_connections(&usize::MAX.to_string()).is_err());
    }

    #[test]
    fn database_urls_are_logged_without_credentials() {
        assert_eq!(
            describe("postgres://bob:hunter2@db:5432/ninetrix?sslmode=disable"),
            "postgres://db:5432/ninetrix"
        );
        assert_eq!(describe("sqlite:///var/lib/n.db"), "sqlite:///var/lib/n.db");
    }
}
