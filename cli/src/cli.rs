//! The command-line grammar (clap derive). Flags follow Docker Compose and kubectl where the
//! concept is the same: `-f/--file` names the agentfile and `-p/--pool` the pool, both at the top
//! level (`ninetrix -f x.yaml logs -f`) and after every command where `-f` does not mean
//! `--follow`; on `logs` and `trace`, as in `docker compose logs -f` and `kubectl logs -f`, `-f`
//! follows and the agentfile is `--file` or the top-level `-f`.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::commands::{
    api::ApiArgs,
    approvals::{AnswerArgs, ApprovalsArgs, ApprovalsCommand, ApproveArgs, DenyArgs},
    build::BuildArgs,
    down::DownArgs,
    init::InitArgs,
    invoke::InvokeArgs,
    logs::LogsArgs,
    ps::PsArgs,
    run::RunArgs,
    trace::TraceArgs,
    up::UpArgs,
    validate::ValidateArgs,
};

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
        cli.command.check_approvals_token()?;
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
            Command::Reset(a) => Some(&mut a.conversation.file),
            Command::Compact(a) => Some(&mut a.conversation.file),
            Command::Cancel(a) => Some(&mut a.conversation.file),
            Command::Fork(a) => Some(&mut a.conversation.file),
            Command::Rewind(a) => Some(&mut a.conversation.file),
            Command::Diff(a) => Some(&mut a.conversation.file),
            Command::Replay(a) => Some(&mut a.conversation.file),
            Command::Invoke(a) => Some(&mut a.file),
            Command::Trace(a) => Some(&mut a.file),
            Command::Logs(a) => Some(&mut a.file),
            Command::Run(a) => Some(&mut a.file),
            Command::Approvals(a) => Some(&mut a.file),
            Command::Sessions(a) => Some(&mut a.file),
            Command::Memory(a) => Some(&mut a.file),
            Command::Triggers(a) => Some(&mut a.file),
            Command::Api(_)
            | Command::A2a(_)
            | Command::Eval(_)
            | Command::K8s(_)
            | Command::Ps(_)
            | Command::Approve(_)
            | Command::Deny(_)
            | Command::Answer(_)
            | Command::Runner
            | Command::Health(_)
            | Command::McpBridge(_)
            | Command::EgressProxy(_)
            | Command::JobBroker(_) => None,
        }
    }

    /// The command's pool, if it works on one.
    fn pool_mut(&mut self) -> Option<&mut Option<String>> {
        match self {
            Command::Validate(a) => Some(&mut a.pool),
            Command::Up(a) => Some(&mut a.pool),
            Command::Down(a) => Some(&mut a.pool),
            Command::Reset(a) => Some(&mut a.conversation.pool),
            Command::Compact(a) => Some(&mut a.conversation.pool),
            Command::Cancel(a) => Some(&mut a.conversation.pool),
            Command::Fork(a) => Some(&mut a.conversation.pool),
            Command::Rewind(a) => Some(&mut a.conversation.pool),
            Command::Diff(a) => Some(&mut a.conversation.pool),
            Command::Replay(a) => Some(&mut a.conversation.pool),
            Command::Eval(a) => Some(&mut a.pool),
            Command::Ps(a) => Some(&mut a.pool),
            Command::Invoke(a) => Some(&mut a.pool),
            Command::Trace(a) => Some(&mut a.pool),
            Command::Logs(a) => Some(&mut a.pool),
            Command::Run(a) => Some(&mut a.pool),
            Command::Approvals(a) => Some(&mut a.pool),
            Command::Sessions(a) => Some(&mut a.pool),
            Command::Memory(a) => Some(&mut a.pool),
            Command::Triggers(a) => Some(&mut a.pool),
            Command::A2a(a) => match &mut a.command {
                crate::commands::a2a::A2aCommand::Token(t) => Some(&mut t.pool),
            },
            Command::Init(_)
            | Command::Api(_)
            | Command::K8s(_)
            | Command::Build(_)
            | Command::Approve(_)
            | Command::Deny(_)
            | Command::Answer(_)
            | Command::Runner
            | Command::Health(_)
            | Command::McpBridge(_)
            | Command::EgressProxy(_)
            | Command::JobBroker(_) => None,
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

    /// `approvals token`: an approver token is for one pool, named with `-p` (after the command
    /// or at the top level, so clap cannot require it itself), never guessed from a directory;
    /// and the listing's flags mean nothing to it.
    fn check_approvals_token(&self) -> Result<(), clap::Error> {
        let Command::Approvals(a) = self else {
            return Ok(());
        };
        let Some(ApprovalsCommand::Token(token)) = &a.command else {
            return Ok(());
        };
        let (kind, message) = if token.pool.is_none() && a.pool.is_none() {
            (
                clap::error::ErrorKind::MissingRequiredArgument,
                "an approver token is for one pool: name it with -p POOL \
                 (`ninetrix approvals token -p POOL --name NAME`)",
            )
        } else if a.agent.is_some() || a.all || a.json {
            (
                clap::error::ErrorKind::ArgumentConflict,
                "--agent, --all and --json are for the listing (`ninetrix approvals`), not for \
                 `ninetrix approvals token`",
            )
        } else {
            return Ok(());
        };
        use clap::CommandFactory as _;
        let mut command = Cli::command()
            .find_subcommand_mut("approvals")
            .and_then(|c| c.find_subcommand_mut("token"))
            .map(|c| c.clone().bin_name("ninetrix approvals token"))
            .unwrap_or_else(Cli::command);
        Err(command.error(kind, message))
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
    /// Start one conversation over: delete a replica's or a session's thread; its next turn
    /// starts on a new thread.
    ///
    /// The thread's history, tool ledger, inbox and events are deleted for good (the API's
    /// `DELETE /v1/threads/{id}`), so `reset` asks first (`--yes` skips the question; without a
    /// terminal it is required). A replica takes its new thread from the API's replica mapping and
    /// its container is recreated on it, as `ninetrix up` does for that replica alone; a session's
    /// next message opens a new thread under the same key. The pool's other threads are kept.
    Reset(crate::commands::reset::ResetArgs),
    /// Compact a replica's or a session's conversation now, as its agent's `runtime.context`
    /// says.
    ///
    /// The request is queued in the thread's inbox and carried out by its runner between turns,
    /// once: the turns before the kept ones are summarized (or their tool results cleared) in
    /// what the model sees; the stored history keeps every message. Waits for the runner's
    /// answer unless `--no-wait`.
    Compact(crate::commands::compact::CompactArgs),
    /// Stop the turn a replica's or a session's conversation is in: it ends `cancelled`.
    ///
    /// The cancel is stored in the thread's inbox (the API's `POST /v1/threads/{id}/cancel`) and
    /// taken by its runner before messages queued ahead of it: the model call in flight is
    /// abandoned, tools that run get `execution.interrupt_grace` to finish, calls not run are not
    /// run, and the turn's pending approvals and handoffs are cancelled. The history keeps what
    /// the turn did. Waits until the turn has stopped unless `--no-wait`; exit 124 if it has not
    /// within `--timeout`. A cancel that finds no turn running stops nothing.
    Cancel(crate::commands::cancel::CancelArgs),
    /// Fork a conversation at the end of a turn: a new session of the same agent that continues
    /// from there, the original untouched.
    ///
    /// The fork's history is the parent's up to the end of turn `--at-turn` (shared in the store,
    /// not copied); its runner restores that turn's workspace snapshot before its first turn (no
    /// snapshot: it starts with an empty workspace). What the parent did outside its workspace
    /// after that turn (a `write` or `idempotent` tool call) is not undone: the fork lists it, and
    /// its model reads a note naming it. With --thread only the API is needed
    /// (AGENTFILE_API_URL and AGENTFILE_ADMIN_TOKEN, or this home's local API).
    Fork(crate::commands::fork::ForkArgs),
    /// Go back: a conversation continues from the end of an earlier turn.
    ///
    /// The turns after it stay in the store on the branch the rewind leaves (a rewind to one of
    /// them comes back); the workspace's files are restored to that turn's snapshot (none: they
    /// are left as they are); effects outside the workspace are not undone. Asks first (`--yes`
    /// skips the question; without a terminal it is required). Refused while a turn runs or
    /// messages wait (exit 75: `ninetrix cancel` stops a turn). The rewind is queued in the
    /// thread's inbox and carried out by its runner between turns; waits for it unless
    /// `--no-wait`, and says `queued` when the runner has not taken it in time.
    Rewind(crate::commands::rewind::RewindArgs),
    /// Show the files a turn changed in the workspace: added, modified, removed, with sizes.
    ///
    /// Compares the turn's workspace snapshot with the one of the nearest earlier turn of its
    /// history that has one. A turn without a snapshot (dropped after
    /// `execution.snapshots.keep_turns`, or never taken) says why.
    Diff(crate::commands::diff::DiffArgs),
    /// Replay a conversation's recorded turns against a candidate agent, with no side effects,
    /// and report where it diverges.
    ///
    /// The turns' user messages are sent again, in order, to the candidate — the agent of the
    /// agentfile `-f` (else the one `up` recorded), with `--model` and `--instructions` over it —
    /// in a scratch thread of its own namespace that starts from the conversation's history
    /// before the first replayed turn; the runner runs in this process. Tool calls are answered
    /// from the recording: the same call gets the recorded result; a differing `read` runs only
    /// with `--live-reads`; anything else is not run (the model gets an error saying so).
    /// Approvals and questions take the recorded decisions; nobody is asked. The recorded thread
    /// is only read. Re-running the same command resumes the same replay (`--fresh`: a new one).
    /// Exit 1 when `--max-divergent-turns` is passed; 130 when stopped (the command resumes).
    /// With --thread only the API is needed (AGENTFILE_API_URL and AGENTFILE_ADMIN_TOKEN).
    #[command(mut_arg("file", |a| a.help(
        "The candidate agentfile, also the pool's [default: agentfile.yaml, else the one `up` \
         recorded for the pool]"
    )))]
    Replay(crate::commands::replay::ReplayArgs),
    /// Replay an eval suite's conversations against a candidate and check the answers.
    ///
    /// SUITE.yaml names the candidate agentfile, the conversations (sessions, replicas or
    /// threads, and ranges of their turns) and optional checks per turn (calls made, answer
    /// contents, cost); the threads marked into the suite in the console are replayed too. Each
    /// case runs as `ninetrix replay` does; the run is stored with the suite (the console shows
    /// its table). Exit 1 when a case fails, 2 when the suite file is invalid. docs/replay.md
    /// has the format.
    Eval(crate::commands::eval::EvalArgs),
    /// Send a message to an agent's inbox and (by default) wait for its reply.
    Invoke(InvokeArgs),
    /// Show a thread's story: boots, repairs, turns, model and tool calls.
    Trace(TraceArgs),
    /// List a pool's sessions: key, thread, owning replica, status, last activity.
    Sessions(crate::commands::sessions::SessionsArgs),
    /// List, print or delete a pool's agent memories (the `memory` tool's files).
    ///
    /// An agent with the `memory` tool keeps files under `/memories` in the checkpoint API: its
    /// own memory, shared by every session and replica (scope `agent`), or one per session (scope
    /// `session`; a replica's own thread keeps its under its thread ID). They outlive
    /// conversations; `ninetrix down --purge` deletes them.
    Memory(crate::commands::memory::MemoryArgs),
    /// List a pool's schedules and webhooks; fire one now or show its history.
    ///
    /// `ninetrix up` registers the agentfile's `triggers:` with the checkpoint API, which fires
    /// them: a schedule on its clock (cron or interval), a webhook when a signed delivery comes to
    /// its URL (the RULE column). Each fire puts a message in a session of the agent — the same
    /// one every time, or a new one per fire (SESSION `new`) — where it waits until a replica
    /// takes it. `ninetrix down` removes the pool's triggers. Times are UTC.
    #[command(after_long_help = crate::commands::triggers::EXAMPLES)]
    Triggers(crate::commands::triggers::TriggersArgs),
    /// Show the pool's container logs, merged by time.
    Logs(LogsArgs),
    /// Run one agent once as a batch container and stream its output.
    Run(RunArgs),
    /// List a pool's pending requests to people: approvals of gated tool calls and questions.
    Approvals(ApprovalsArgs),
    /// Approve a pending request: the gated tool call runs.
    Approve(ApproveArgs),
    /// Reject a pending request with a reason: the call does not run; the agent is told why.
    Deny(DenyArgs),
    /// Answer an agent's question (`ask_human`).
    Answer(AnswerArgs),
    /// A2A: mint the tokens partners' A2A clients call a pool's agents with (`a2a token`).
    A2a(crate::commands::a2a::A2aArgs),
    /// The in-container agent runtime, configured by AGENTFILE_* environment variables.
    #[command(hide = true)]
    Runner,
    /// A health check (the local API's healthcheck, or a runner's report): one line saying why,
    /// exit 0 healthy / 1 not.
    #[command(hide = true)]
    Health(crate::commands::health::HealthArgs),
    /// Write a pool's Kubernetes manifests (`k8s render`).
    K8s(crate::commands::k8s::K8sArgs),
    /// Serve a stdio MCP server over streamable HTTP, restarting it when it dies.
    McpBridge(crate::commands::mcp_bridge::McpBridgeArgs),
    /// The egress proxy sidecar: CONNECT and plain HTTP to the allowed destinations only.
    #[command(hide = true)]
    EgressProxy(crate::commands::egress_proxy::EgressProxyArgs),
    /// The pool's job broker: runs background jobs in sibling containers for the runners.
    #[command(hide = true)]
    JobBroker(crate::commands::job_broker::JobBrokerArgs),
}

/// Clap's check of a `-p/--pool` value.
pub(crate) fn pool_name(value: &str) -> Result<String, String> {
    if ninetrix_agentfile::names::is_valid_name(value) {
        Ok(value.to_string())
    } else {
        Err(format!(
            "pool names use lower-case letters, digits, `-` and `_`, start with a letter or digit, \
             and have at most {} characters",
            ninetrix_agentfile::names::MAX_NAME_LEN
        ))
    }
}
