//! `ninetrix memory`: a pool's agent memories — the files under `/memories` its agents' `memory`
//! tool keeps in the checkpoint API. `ls` lists them (every agent, or one; the agent's own memory
//! and its sessions'), `cat` prints one file, `rm` deletes files or directories.
//!
//! The API is the one `approvals` uses (`AGENTFILE_API_URL` + `AGENTFILE_ADMIN_TOKEN` if set, else
//! this home's local API where its container publishes it now); nothing here starts a container.
//! Rendering is a pure function of the files and the time ([`render`]).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::bail;
use chrono::{DateTime, Utc};
use clap::{Args, Subcommand};
use ninetrix_client::{ClientError, ErrorCode, MemoryOf, MemoryQuery};
use ninetrix_proto::api::{MEMORY_ROOT, MemoryFile, MemoryScope, memory_path};

use crate::cli::pool_name;
use crate::pool::local_api::Api;

/// Arguments of `ninetrix memory`.
#[derive(Debug, Args)]
pub struct MemoryArgs {
    /// The agentfile (for the pool name).
    #[arg(
        short,
        long,
        default_value = "agentfile.yaml",
        value_name = "FILE",
        global = true
    )]
    pub file: PathBuf,
    /// The pool [default: the agentfile's, else the only pool]
    #[arg(short, long, value_name = "POOL", value_parser = pool_name, global = true)]
    pub pool: Option<String>,
    /// What to do.
    #[command(subcommand)]
    pub command: MemoryCommand,
}

/// The subcommands of `ninetrix memory`.
#[derive(Debug, Subcommand)]
pub enum MemoryCommand {
    /// List memory files: agent, scope, session, path, size, last write.
    Ls(LsArgs),
    /// Print one memory file.
    Cat(CatArgs),
    /// Delete memory files, or directories with everything under them.
    Rm(RmArgs),
}

/// Arguments of `ninetrix memory ls`.
#[derive(Debug, Args)]
pub struct LsArgs {
    /// Only this agent's memory.
    #[arg(long, value_name = "AGENT")]
    pub agent: Option<String>,
    /// Only this session's memory (a replica's own thread: its thread ID).
    #[arg(long, value_name = "KEY")]
    pub session: Option<String>,
    /// The files as a JSON array.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `ninetrix memory cat`.
#[derive(Debug, Args)]
pub struct CatArgs {
    /// The file: `/memories/…` (a path without the leading `/memories/` is taken under it).
    #[arg(value_name = "PATH")]
    pub path: String,
    /// Whose memory: the agent.
    #[arg(long, value_name = "AGENT")]
    pub agent: String,
    /// A session's memory instead of the agent's (a replica's own thread: its thread ID).
    #[arg(long, value_name = "KEY")]
    pub session: Option<String>,
}

/// Arguments of `ninetrix memory rm`.
#[derive(Debug, Args)]
pub struct RmArgs {
    /// Files or directories: `/memories/…` (a path without the leading `/memories/` is taken
    /// under it).
    #[arg(value_name = "PATH", required = true)]
    pub paths: Vec<String>,
    /// Whose memory: the agent.
    #[arg(long, value_name = "AGENT")]
    pub agent: String,
    /// A session's memory instead of the agent's (a replica's own thread: its thread ID).
    #[arg(long, value_name = "KEY")]
    pub session: Option<String>,
}

/// Runs `ninetrix memory`.
pub(crate) async fn run(args: &MemoryArgs) -> anyhow::Result<ExitCode> {
    let pool = crate::pool::resolve::pool_name(&args.file, args.pool.as_deref())?;
    let home = crate::home::agentfile_home()?;
    let api = Api::any(&home).await.map_err(|e| {
        anyhow::anyhow!(
            "{e:#}; or set AGENTFILE_API_URL and AGENTFILE_ADMIN_TOKEN to use an API elsewhere"
        )
    })?;
    match &args.command {
        MemoryCommand::Ls(ls) => list(&api, &pool, ls).await,
        MemoryCommand::Cat(cat) => print(&api, &pool, cat).await,
        MemoryCommand::Rm(rm) => remove(&api, &pool, rm).await,
    }
}

/// A path as given on the command line, made a memory path: `notes.md` is
/// `/memories/notes.md`; anything else must be one.
pub(crate) fn path_arg(given: &str) -> anyhow::Result<String> {
    let full = if given.starts_with('/') {
        given.to_string()
    } else {
        format!("{MEMORY_ROOT}/{given}")
    };
    memory_path(&full).map_err(|e| anyhow::anyhow!("{}", e.0.trim_start_matches("Error: ")))
}

/// Who a memory is, for messages.
fn whose(memory: &MemoryOf) -> String {
    match &memory.session {
        None => format!("agent {}'s memory in pool {}", memory.agent, memory.pool),
        Some(key) => format!(
            "the memory of session {key:?} of agent {} in pool {}",
            memory.agent, memory.pool
        ),
    }
}

/// Files fetched per page.
const PAGE: usize = 1000;

async fn list(api: &Api, pool: &str, args: &LsArgs) -> anyhow::Result<ExitCode> {
    let mut files: Vec<MemoryFile> = Vec::new();
    loop {
        let query = MemoryQuery {
            pool: pool.to_string(),
            agent: args.agent.clone(),
            scope: args.session.as_ref().map(|_| MemoryScope::Session),
            session: args.session.clone(),
            offset: Some(u32::try_from(files.len()).unwrap_or(u32::MAX)),
        };
        let page = api
            .client()
            .list_memories(&query)
            .await
            .map_err(|e| api.explain(e, &format!("listing the memories of pool {pool}")))?;
        let full = page.len() >= PAGE;
        files.extend(page);
        if !full {
            break;
        }
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&files)?);
        return Ok(ExitCode::SUCCESS);
    }
    if files.is_empty() {
        let whose = match (&args.agent, &args.session) {
            (Some(a), Some(k)) => format!(" of session {k:?} of agent {a}"),
            (Some(a), None) => format!(" of agent {a}"),
            (None, Some(k)) => format!(" of session {k:?}"),
            (None, None) => String::new(),
        };
        eprintln!(
            "no memory files{whose} in pool {pool} (agents with the `memory` tool write them)"
        );
        return Ok(ExitCode::SUCCESS);
    }
    crate::output::text(&render(&files, Utc::now()));
    Ok(ExitCode::SUCCESS)
}

async fn print(api: &Api, pool: &str, args: &CatArgs) -> anyhow::Result<ExitCode> {
    let path = path_arg(&args.path)?;
    let memory = MemoryOf {
        pool: pool.to_string(),
        agent: args.agent.clone(),
        session: args.session.clone(),
    };
    let file = api
        .client()
        .memory_file(&memory, &path)
        .await
        .map_err(|e| api.explain(e, &format!("reading {path}")))?;
    let Some(file) = file else {
        bail!(
            "no memory file {path} in {}; `ninetrix memory ls -p {pool} --agent {}` lists them",
            whose(&memory),
            memory.agent
        );
    };
    crate::output::text(&file.content);
    Ok(ExitCode::SUCCESS)
}

async fn remove(api: &Api, pool: &str, args: &RmArgs) -> anyhow::Result<ExitCode> {
    let paths: Vec<String> = args
        .paths
        .iter()
        .map(|p| path_arg(p))
        .collect::<anyhow::Result<_>>()?;
    let memory = MemoryOf {
        pool: pool.to_string(),
        agent: args.agent.clone(),
        session: args.session.clone(),
    };
    let mut failed = false;
    for path in paths {
        match api.client().delete_memory_file(&memory, &path).await {
            Ok(n) => eprintln!("Deleted {path} ({n} file{})", if n == 1 { "" } else { "s" }),
            Err(ClientError::Api {
                code: ErrorCode::NotFound,
                ..
            }) => {
                eprintln!("error: nothing at {path} in {}", whose(&memory));
                failed = true;
            }
            Err(e) => return Err(api.explain(e, &format!("deleting {path}"))),
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// `du -h`'s way of writing a size.
fn size(bytes: u64) -> String {
    match bytes {
        b if b < 1024 => format!("{b}B"),
        b if b < 1024 * 1024 => format!("{:.1}K", b as f64 / 1024.0),
        b => format!("{:.1}M", b as f64 / (1024.0 * 1024.0)),
    }
}

/// `45s`, `12m`, `5h`, `3d`.
fn ago(d: chrono::TimeDelta) -> String {
    match d.num_seconds().max(0) {
        s if s < 60 => format!("{s}s"),
        s if s < 3_600 => format!("{}m", s / 60),
        s if s < 86_400 => format!("{}h", s / 3_600),
        s => format!("{}d", s / 86_400),
    }
}

/// The table: AGENT, SCOPE, SESSION (`-` for the agent's own memory), PATH, SIZE, UPDATED.
pub(crate) fn render(files: &[MemoryFile], now: DateTime<Utc>) -> String {
    let rows: Vec<[String; 6]> = files
        .iter()
        .map(|f| {
            [
                f.agent.clone(),
                f.scope.as_str().to_string(),
                f.session.clone().unwrap_or_else(|| "-".into()),
                f.path.clone(),
                size(f.size),
                format!("{} ago", ago(now - f.updated_at)),
            ]
        })
        .collect();
    crate::ui::table::table(
        ["AGENT", "SCOPE", "SESSION", "PATH", "SIZE", "UPDATED"],
        &rows,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(agent: &str, session: Option<&str>, path: &str, size: u64, secs: i64) -> MemoryFile {
        let now: DateTime<Utc> = "2026-11-24T12:00:00Z".parse().unwrap();
        MemoryFile {
            pool: "shop".into(),
            agent: agent.into(),
            scope: if session.is_some() {
                MemoryScope::Session
            } else {
                MemoryScope::Agent
            },
            session: session.map(str::to_string),
            path: path.into(),
            size,
            updated_at: now - chrono::Duration::seconds(secs),
        }
    }

    #[test]
    fn each_file_shows_whose_it_is_its_size_and_age() {
        let now: DateTime<Utc> = "2026-11-24T12:00:00Z".parse().unwrap();
        let text = render(
            &[
                file("bot", None, "/memories/notes.md", 2048, 90),
                file("bot", Some("alice"), "/memories/prefs.md", 12, 7200),
            ],
            now,
        );
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("AGENT  SCOPE"), "{text}");
        assert!(
            lines[1].contains("agent") && lines[1].contains("/memories/notes.md"),
            "{text}"
        );
        assert!(
            lines[1].contains("2.0K") && lines[1].ends_with("1m ago"),
            "{text}"
        );
        assert!(
            lines[2].contains("session") && lines[2].contains("alice") && lines[2].contains("12B"),
            "{text}"
        );
        assert!(lines[2].ends_with("2h ago"), "{text}");
    }

    #[test]
    fn paths_are_taken_under_memories_or_refused_with_why() {
        assert_eq!(path_arg("notes.md").unwrap(), "/memories/notes.md");
        assert_eq!(path_arg("/memories/a/").unwrap(), "/memories/a");
        let e = path_arg("/etc/passwd").unwrap_err().to_string();
        assert!(e.contains("not under /memories"), "{e}");
        let e = path_arg("../x").unwrap_err().to_string();
        assert!(e.contains("`..`"), "{e}");
    }
}
