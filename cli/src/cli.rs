//! The command-line grammar (clap derive). Flags follow Docker Compose and kubectl where the
//! concept is the same: `-f/--file` names the agentfile and `-p/--pool` the pool, both at the top
//! level (`ninetrix -f x.yaml logs -f`) and after every command where `-f` does not mean
//! `--follow`; on `logs` and `trace`, as in `docker compose logs -f` and `kubectl logs -f`, `-f`
//! follows and the agentfile is `--file` or the top-level `-f`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Seconds a stopping container gets to checkpoint and exit before SIGKILL (`-t/--timeout` of
/// `up`, `down` and `run`).
pub const DEFAULT_STOP_SECS: i32 = 30;

/// Run AI agents as Docker containers that survive crashes.
///
/// An agentfile (YAML) describes a pool of agents; `ninetrix up` runs each agent replica as a
/// container that checkpoints every step through the checkpoint API, so a crashed or restarted
/// agent resumes where it stopped.
#[derive(Debug, Parser)]
#[command(name = "ninetrix", version, propagate_version = true)]
pub struct Cli {
    /// The agentfile, for every command that reads one (also accepted after the command, except
    /// by `logs` and `trace`, where `-f` means --follow) [default: agentfile.yaml]
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// The pool, for every command that works on one (also accepted after the command).
    #[arg(short = 'p', long = "pool", value_name = "POOL", value_parser = pool_name)]
    pub pool: Option<String>,
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// Parses the process's arguments: clap's parse, then the top-level `-f`/`-p` handed to the
    /// command unless it was given its own, then the checks clap cannot express.
    pub fn parse_args() -> Result<Self, clap::Error> {
        Self::parse_from_args(std::env::args_os())
    }

    /// [`Cli::parse_args`] over the given arguments (the first is the program name).
    pub fn parse_from_args<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        use clap::{CommandFactory as _, FromArgMatches as _};
        let matches = Self::command().try_get_matches_from(args)?;
        let mut cli = Self::from_arg_matches(&matches)?;
        let given = |id: &str| {
            matches.subcommand().is_some_and(|(_, m)| {
                m.try_contains_id(id).unwrap_or(false)
                    && m.value_source(id) == Some(clap::parser::ValueSource::CommandLine)
            })
        };
        let (file_given, pool_given) = (given("file"), given("pool"));
        if let Some(file) = cli.file.clone().filter(|_| !file_given)
            && let Some(slot) = cli.command.file_mut()
        {
            *slot = file;
        }
        if let Some(pool) = cli.pool.clone().filter(|_| !pool_given)
            && let Some(slot) = cli.command.pool_mut()
        {
            *slot = Some(pool);
        }
        cli.command.check_stray()?;
        Ok(cli)
    }
}

impl Command {
    /// The command's agentfile, if it reads one.
    fn file_mut(&mut self) -> Option<&mut PathBuf> {
        match self {
            Command::Validate(a) => Some(&mut a.file),
            Command::Init(a) => Some(&mut a.file),
            Command::Build(a) => Some(&mut a.file),
            Command::Up(a) => Some(&mut a.file),
            Command::Down(a) => Some(&mut a.file),
            Command::Invoke(a) => Some(&mut a.file),
            Command::Trace(a) => Some(&mut a.file),
            Command::Logs(a) => Some(&mut a.file),
            Command::Run(a) => Some(&mut a.file),
            Command::Api(_) | Command::Ps(_) | Command::Runner => None,
        }
    }

    /// The command's pool, if it works on one.
    fn pool_mut(&mut self) -> Option<&mut Option<String>> {
        match self {
            Command::Validate(a) => Some(&mut a.pool),
            Command::Up(a) => Some(&mut a.pool),
            Command::Down(a) => Some(&mut a.pool),
            Command::Ps(a) => Some(&mut a.pool),
            Command::Invoke(a) => Some(&mut a.pool),
            Command::Trace(a) => Some(&mut a.pool),
            Command::Logs(a) => Some(&mut a.pool),
            Command::Run(a) => Some(&mut a.pool),
            Command::Init(_) | Command::Api(_) | Command::Build(_) | Command::Runner => None,
        }
    }

    /// `logs -f FILE` / `trace -f FILE`: `-f` follows there, so a file after it is a mistake
    /// that deserves to be explained rather than reported as an unexpected argument.
    fn check_stray(&self) -> Result<(), clap::Error> {
        let (name, stray) = match self {
            Command::Logs(a) => ("logs", a.stray.as_deref()),
            Command::Trace(a) => ("trace", a.stray.as_deref()),
            _ => return Ok(()),
        };
        let Some(stray) = stray else {
            return Ok(());
        };
        use clap::CommandFactory as _;
        let looks_like_file = stray.ends_with(".yaml")
            || stray.ends_with(".yml")
            || std::path::Path::new(stray).is_file();
        let message = if looks_like_file {
            format!(
                "`-f` means --follow for `ninetrix {name}` (as in `docker compose logs -f` and \
                 `kubectl logs -f`), so `{stray}` is not read as the agentfile.\n\n  \
                 To name the agentfile: `ninetrix -f {stray} {name}` or `ninetrix {name} --file {stray}`"
            )
        } else {
            format!("unexpected argument '{stray}' found")
        };
        Err(Cli::command()
            .find_subcommand_mut(name)
            .map(|c| c.clone())
            .unwrap_or_else(Cli::command)
            .error(clap::error::ErrorKind::UnknownArgument, message))
    }
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check an agentfile and summarise its pool, or report every error with its location.
    Validate(ValidateArgs),
    /// Write a commented starter agentfile.
    Init(InitArgs),
    /// Serve the checkpoint API (threads, checkpoints, tool ledger, inbox, events).
    Api(ApiArgs),
    /// Build the runner image (FROM scratch + this binary) and any per-agent images, offline.
    Build(BuildArgs),
    /// Start or update a pool: one container per agent replica, reconciled like Compose.
    Up(UpArgs),
    /// Stop and remove a pool's containers and network (pool state and threads are kept).
    Down(DownArgs),
    /// List the pools' containers with status, restarts and exit codes.
    Ps(PsArgs),
    /// Send a message to an agent's inbox and (by default) wait for its reply.
    Invoke(InvokeArgs),
    /// Show a thread's story: boots, repairs, turns, model and tool calls.
    Trace(TraceArgs),
    /// Show the pool's container logs, merged by time.
    Logs(LogsArgs),
    /// Run one agent once as a batch container and stream its output.
    Run(RunArgs),
    /// The in-container agent runtime, configured by AGENTFILE_* environment variables.
    #[command(hide = true)]
    Runner,
}

/// Arguments of `ninetrix build`.
#[derive(Debug, Args)]
pub struct BuildArgs {
    /// The agentfile.
    #[arg(short, long, default_value = "agentfile.yaml", value_name = "FILE")]
    pub file: PathBuf,
}

/// Arguments of `ninetrix up`.
#[derive(Debug, Args)]
pub struct UpArgs {
    /// The agentfile.
    #[arg(short, long, default_value = "agentfile.yaml", value_name = "FILE")]
    pub file: PathBuf,
    /// The pool name, overriding the agentfile's `name:`.
    #[arg(short, long, value_name = "POOL", value_parser = pool_name)]
    pub pool: Option<String>,
    /// Recreate every container, even unchanged ones.
    #[arg(long)]
    pub force_recreate: bool,
    /// Remove containers of agents that are no longer in the agentfile.
    #[arg(long)]
    pub remove_orphans: bool,
    /// Print the plan (one line per Docker action, with its cause) and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Seconds a replaced or removed container gets to checkpoint and exit before it is killed.
    #[arg(short = 't', long = "timeout", default_value_t = DEFAULT_STOP_SECS, value_name = "SECS")]
    pub timeout: i32,
    /// Seconds to wait for every durable runner to be ready.
    #[arg(long, default_value_t = 60, value_name = "S")]
    pub wait_timeout: u64,
    /// Progress as JSON lines.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `ninetrix down`.
#[derive(Debug, Args)]
pub struct DownArgs {
    /// The agentfile (for the pool name).
    #[arg(short, long, default_value = "agentfile.yaml", value_name = "FILE")]
    pub file: PathBuf,
    /// The pool.
    #[arg(short, long, value_name = "POOL", value_parser = pool_name)]
    pub pool: Option<String>,
    /// Seconds each runner gets to checkpoint and exit before it is killed.
    #[arg(short = 't', long = "timeout", default_value_t = DEFAULT_STOP_SECS, value_name = "SECS")]
    pub timeout: i32,
    /// Also delete the pool state, the threads' data in the API and the workspace volumes.
    #[arg(long)]
    pub purge: bool,
    /// Also remove the local API container (it serves every pool).
    #[arg(long)]
    pub api: bool,
}

/// Arguments of `ninetrix ps`.
#[derive(Debug, Args)]
pub struct PsArgs {
    /// Only this pool.
    #[arg(short, long, value_name = "POOL", value_parser = pool_name)]
    pub pool: Option<String>,
    /// Include stopped containers.
    #[arg(short, long)]
    pub all: bool,
    /// As JSON.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `ninetrix invoke`.
#[derive(Debug, Args)]
pub struct InvokeArgs {
    /// The agentfile (for the pool name).
    #[arg(short, long, default_value = "agentfile.yaml", value_name = "FILE")]
    pub file: PathBuf,
    /// The pool.
    #[arg(short, long, value_name = "POOL", value_parser = pool_name)]
    pub pool: Option<String>,
    /// The agent.
    #[arg(long, value_name = "AGENT")]
    pub agent: String,
    /// The replica.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub replica: u32,
    /// The message.
    #[arg(short, long, value_name = "MSG")]
    pub message: String,
    /// A dedupe key: sending again with the same key adds no second message.
    #[arg(long, value_name = "KEY")]
    pub id: Option<String>,
    /// Return once the message is queued (default: wait for the reply).
    #[arg(long, conflicts_with = "wait")]
    pub no_wait: bool,
    /// Wait for the reply (the default).
    #[arg(long)]
    pub wait: bool,
    /// Seconds to wait for the reply (then exit 124; the message stays queued).
    #[arg(long, default_value_t = 300, value_name = "S")]
    pub timeout: u64,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `ninetrix trace`.
#[derive(Debug, Args)]
pub struct TraceArgs {
    /// The agentfile (for the pool name); `-f` follows here, so name it with --file or
    /// `ninetrix -f FILE trace`.
    #[arg(long = "file", default_value = "agentfile.yaml", value_name = "FILE")]
    pub file: PathBuf,
    /// The pool.
    #[arg(short, long, value_name = "POOL", value_parser = pool_name)]
    pub pool: Option<String>,
    /// The thread.
    #[arg(long, value_name = "ID", conflicts_with = "agent")]
    pub thread_id: Option<String>,
    /// The agent (with --replica).
    #[arg(long, value_name = "AGENT")]
    pub agent: Option<String>,
    /// The replica.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub replica: u32,
    /// Keep printing new events.
    #[arg(short, long)]
    pub follow: bool,
    /// A stray argument, kept only to explain `trace -f FILE`.
    #[arg(hide = true, value_name = "STRAY")]
    pub stray: Option<String>,
    /// The events as JSON lines.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `ninetrix logs`.
#[derive(Debug, Args)]
pub struct LogsArgs {
    /// The agentfile (for the pool name); `-f` follows here, so name it with --file or
    /// `ninetrix -f FILE logs`.
    #[arg(long = "file", value_name = "FILE", default_value = "agentfile.yaml")]
    pub file: PathBuf,
    /// The pool.
    #[arg(short, long, value_name = "POOL", value_parser = pool_name)]
    pub pool: Option<String>,
    /// Only this agent's containers.
    #[arg(long, value_name = "AGENT")]
    pub agent: Option<String>,
    /// Keep following, across restarts.
    #[arg(short, long)]
    pub follow: bool,
    /// A stray argument, kept only to explain `logs -f FILE`.
    #[arg(hide = true, value_name = "STRAY")]
    pub stray: Option<String>,
    /// Only lines since this time (RFC 3339) or for this long (10m, 2h).
    #[arg(long, value_name = "T")]
    pub since: Option<String>,
    /// Lines per container from the end (`all` for everything).
    #[arg(long, default_value = "all", value_name = "N")]
    pub tail: String,
    /// Show timestamps.
    #[arg(short, long)]
    pub timestamps: bool,
    /// No colours.
    #[arg(long)]
    pub no_color: bool,
    /// One JSON object per line.
    #[arg(long)]
    pub json: bool,
}

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
    /// Longest inbox long-poll, in seconds.
    #[arg(long, default_value_t = 60, value_name = "SECS")]
    pub max_wait: u64,
}

/// Arguments of `ninetrix validate`.
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// The agentfile.
    #[arg(short, long, default_value = "agentfile.yaml", value_name = "FILE")]
    pub file: PathBuf,
    /// The pool name, overriding the agentfile's `name:`.
    #[arg(short, long, value_name = "POOL", value_parser = pool_name)]
    pub pool: Option<String>,
    /// Print the result as JSON on stdout (the resolved agents, or the errors).
    #[arg(long)]
    pub json: bool,
}

/// The providers `init` can write a starter for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum InitProvider {
    /// An offline, scripted model: runs with no API key.
    Scripted,
    /// Anthropic's Claude (needs ANTHROPIC_API_KEY).
    Anthropic,
    /// OpenAI (needs OPENAI_API_KEY).
    Openai,
    /// A local Ollama server on the host, through the OpenAI protocol.
    Ollama,
}

/// Arguments of `ninetrix init`.
#[derive(Debug, Args)]
pub struct InitArgs {
    /// Where to write the agentfile.
    #[arg(short, long, default_value = "agentfile.yaml", value_name = "FILE")]
    pub file: PathBuf,
    /// The pool name (default: derived from the directory name).
    #[arg(short, long, value_name = "NAME", value_parser = pool_name)]
    pub name: Option<String>,
    /// The starter agent's provider.
    #[arg(long, value_enum, default_value_t = InitProvider::Scripted)]
    pub provider: InitProvider,
    /// Overwrite the file if it exists.
    #[arg(long)]
    pub force: bool,
}

fn pool_name(value: &str) -> Result<String, String> {
    if ninetrix_proto::agentfile::names::is_valid_name(value) {
        Ok(value.to_string())
    } else {
        Err(format!(
            "pool names use lower-case letters, digits, `-` and `_`, start with a letter or digit, \
             and have at most {} characters",
            ninetrix_proto::agentfile::names::MAX_NAME_LEN
        ))
    }
}
