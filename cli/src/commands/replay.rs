//! `ninetrix replay`: re-runs a conversation's recorded turns — a replica's (`--replica N`), a
//! session's (`--session KEY`) or a thread named by its ID (`--thread ID`) — against a candidate
//! agent (the agentfile `-f`, with `--model` and `--instructions` over it), in a scratch thread of
//! its own namespace, and reports each turn side by side with its recording.
//!
//! The API makes the replay's thread (`POST /v1/threads/{id}/replays`: the source's history up to
//! the turn before the first replayed one, shared, and the replayed turns' inputs in its inbox);
//! this command mints its runner token, fetches the recorded turns (the tool oracle) and runs the
//! runner in process in replay mode until the inbox is served, printing a line per turn as it
//! ends. Every tool call is answered from the recording (`ninetrix_proto::replay::answer`): a
//! differing write is never run, a differing read only with `--live-reads`, and nobody is asked.
//! The recorded thread is only read. The same command resumes the same replay (its key is a
//! digest of the candidate, the range and `--live-reads`); `--fresh` makes a new one.
//!
//! The decisions — the range ([`TurnRange`]), the candidate ([`candidate`], [`describe`]), the key
//! ([`replay_key`]) and the command that resumes ([`resume_command`]) — are pure functions, and so
//! is the report (`ninetrix_proto::replay::report`, rendered by `crate::ui::replay`); the effects
//! are at the edge ([`run`], [`replay_case`]), which `ninetrix eval` shares.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use ninetrix_agentfile::{AgentSpec, Agentfile};
use ninetrix_client::{ClientError, ErrorCode};
use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{
    MAX_CANDIDATE_CHARS, RecordedTurn, ReplayCreated, ReplayRequest, RunnerTokenRequest, TurnList,
};
use ninetrix_proto::replay::{ReplayReport, compare_turn, preview, report};
use ninetrix_runner::config::{ApiAccess, SecretValue};
use ninetrix_runner::replay::Replay;
use sha2::{Digest as _, Sha256};
use tokio_util::sync::CancellationToken;

use crate::backend::view::PoolView;
use crate::commands::invoke::shell_quote;
use crate::commands::reset::{
    Conversation, ConversationArgs, Located, agentfile_path, located_thread,
};
use crate::pool::local_api::Api;
use crate::ui::replay as render;

/// How often the replay's turns are read while its runner works.
const POLL: Duration = Duration::from_millis(300);
/// The exit code when Ctrl-C stopped the replay (128 + SIGINT, as shells report it).
pub(crate) const EXIT_STOPPED: u8 = 130;

/// Arguments of `ninetrix replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The recorded conversation (`-f` is also the candidate's agentfile).
    #[command(flatten)]
    pub conversation: ConversationArgs,
    /// The recorded turns replayed: `N..M` (both included), `N..`, `..M` or `N` [default: every
    /// turn that ended on the conversation's current branch]
    #[arg(long, value_name = "N..M", value_parser = parse_turns)]
    pub turns: Option<TurnRange>,
    /// The candidate's model, in place of the agent's `runtime.model`.
    #[arg(long, value_name = "MODEL")]
    pub model: Option<String>,
    /// A file whose text replaces the agent's `metadata.instructions`.
    #[arg(long, value_name = "FILE")]
    pub instructions: Option<PathBuf>,
    /// Run a read the recording does not have for real (a differing write is never run).
    #[arg(long)]
    pub live_reads: bool,
    /// Print the report as one JSON object (one record per turn, `divergent_turns`).
    #[arg(long)]
    pub json: bool,
    /// Exit 1 when more turns than this diverge (for CI).
    #[arg(long, value_name = "N")]
    pub max_divergent_turns: Option<u64>,
    /// Make a new replay rather than resume the one the same command made before.
    #[arg(long)]
    pub fresh: bool,
}

/// Why a replay cannot start (nothing was made).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ReplayError {
    /// The range holds no turn that ended.
    #[error(
        "{whose} has no ended turn in {range}; the turns that ended on its current branch: \
         {ended} (pass --turns within them)"
    )]
    NoEndedTurn {
        whose: String,
        range: String,
        ended: String,
    },
    /// The candidate agentfile has no such agent.
    #[error("{file} has no agent `{agent}` (its agents: {known}); name one with --agent")]
    NoAgent {
        file: String,
        agent: String,
        known: String,
    },
    /// The instructions file cannot be read.
    #[error("cannot read the instructions file {path}: {why}; pass a readable text file")]
    Instructions { path: String, why: String },
    /// `--thread` with no candidate agentfile to be found.
    #[error(
        "no candidate agentfile: {file} does not exist and pool {pool} has no agentfile recorded \
         by `ninetrix up` on this host; pass the candidate with -f FILE"
    )]
    NoCandidate { file: String, pool: String },
}

/// A range of turns as `--turns` (or a suite's `turns:`) gives it; both ends included, either
/// open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TurnRange {
    /// The first turn (`None`: the first that ended).
    pub from: Option<u64>,
    /// The last turn (`None`: the last that ended).
    pub to: Option<u64>,
}

impl std::fmt::Display for TurnRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.from, self.to) {
            (Some(a), Some(b)) if a == b => write!(f, "turn {a}"),
            (Some(a), Some(b)) => write!(f, "turns {a}..{b}"),
            (Some(a), None) => write!(f, "turns {a}.."),
            (None, Some(b)) => write!(f, "turns ..{b}"),
            (None, None) => write!(f, "every turn"),
        }
    }
}

/// Parses `N..M`, `N..`, `..M` or `N` (turns from 1, `N` at most `M`).
pub(crate) fn parse_turns(s: &str) -> Result<TurnRange, String> {
    let bad = || format!("`{s}` is not a range of turns: write N..M, N.., ..M or N (turns from 1)");
    let num = |t: &str| -> Result<Option<u64>, String> {
        let t = t.trim();
        if t.is_empty() {
            return Ok(None);
        }
        match t.parse::<u64>() {
            Ok(0) | Err(_) => Err(bad()),
            Ok(n) => Ok(Some(n)),
        }
    };
    let range = match s.split_once("..") {
        Some((a, b)) => TurnRange {
            from: num(a)?,
            to: num(b.strip_prefix('=').unwrap_or(b))?,
        },
        None => {
            let n = num(s)?.ok_or_else(bad)?;
            TurnRange {
                from: Some(n),
                to: Some(n),
            }
        }
    };
    if let (Some(a), Some(b)) = (range.from, range.to)
        && a > b
    {
        return Err(format!(
            "`{s}` is empty: its first turn ({a}) is after its last ({b})"
        ));
    }
    Ok(range)
}

/// `1–4, 6, 9–10`: sorted turn numbers as runs.
pub(crate) fn runs(turns: &[u64]) -> String {
    if turns.is_empty() {
        return "none".into();
    }
    let mut parts: Vec<String> = Vec::new();
    let mut start = turns[0];
    let mut prev = turns[0];
    for &t in &turns[1..] {
        if t == prev + 1 {
            prev = t;
            continue;
        }
        parts.push(run_text(start, prev));
        start = t;
        prev = t;
    }
    parts.push(run_text(start, prev));
    parts.join(", ")
}

fn run_text(a: u64, b: u64) -> String {
    if a == b {
        a.to_string()
    } else {
        format!("{a}–{b}")
    }
}

/// The turns that ended on the current branch, sorted.
pub(crate) fn ended_turns(list: &TurnList) -> Vec<u64> {
    let mut ended: Vec<u64> = list
        .turns
        .iter()
        .filter(|t| t.live)
        .map(|t| t.turn_seq)
        .collect();
    ended.sort_unstable();
    ended.dedup();
    ended
}

impl TurnRange {
    /// The range as the API takes it, over the turns that `ended` (sorted): open ends become the
    /// first or last that ended; a range with no ended turn is refused, naming those that did.
    pub(crate) fn resolve(&self, ended: &[u64], whose: &str) -> Result<(u64, u64), ReplayError> {
        let from = self.from.or(ended.first().copied()).unwrap_or(1);
        let to = self.to.or(ended.last().copied()).unwrap_or(from);
        if !ended.iter().any(|t| (from..=to).contains(t)) {
            return Err(ReplayError::NoEndedTurn {
                whose: whose.to_string(),
                range: self.to_string(),
                ended: runs(ended),
            });
        }
        Ok((from, to))
    }
}

/// The candidate agent: agent `agent` of `af` (read from `file`), its model replaced by `model`
/// and its instructions by `instructions` when given.
pub(crate) fn candidate(
    af: &Agentfile,
    file: &str,
    agent: &str,
    model: Option<&str>,
    instructions: Option<&str>,
) -> Result<AgentSpec, ReplayError> {
    let Some(spec) = af.agent(agent) else {
        let known: Vec<&str> = af.agents.iter().map(|a| a.name.as_str()).collect();
        return Err(ReplayError::NoAgent {
            file: file.to_string(),
            agent: agent.to_string(),
            known: known.join(", "),
        });
    };
    let mut spec = spec.clone();
    if let Some(m) = model {
        spec.runtime.model = m.to_string();
    }
    if let Some(text) = instructions {
        spec.metadata.instructions = Some(text.to_string());
    }
    Ok(spec)
}

/// What the turns are replayed against, for people (at most [`MAX_CANDIDATE_CHARS`]):
/// `agentfile candidate.yaml · model gpt-5 · instructions v2.md`.
pub(crate) fn describe(file: &str, model: &str, instructions: Option<&str>) -> String {
    let mut text = format!("agentfile {file} · model {model}");
    if let Some(i) = instructions {
        text.push_str(&format!(" · instructions {i}"));
    }
    preview(&text, MAX_CANDIDATE_CHARS - 1)
}

/// The replay's key: a digest of the candidate spec's JSON, the range and `live_reads` (plus
/// `nonce` for `--fresh`), so the same command finds the same replay and resumes it.
pub(crate) fn replay_key(
    spec: &AgentSpec,
    from: u64,
    to: u64,
    live_reads: bool,
    nonce: Option<&str>,
) -> String {
    let mut h = Sha256::new();
    h.update(serde_json::to_vec(spec).unwrap_or_default());
    h.update(format!("\n{from}..{to}\nlive_reads={live_reads}\n").as_bytes());
    if let Some(n) = nonce {
        h.update(n.as_bytes());
    }
    format!("replay-{}", hex(&h.finalize()))
}

/// Lower-case hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The command that resumes a replay: this one as typed, without `--fresh` (which would make a
/// new replay).
pub(crate) fn resume_command(argv: &[String]) -> String {
    let mut parts = vec!["ninetrix".to_string()];
    parts.extend(
        argv.iter()
            .skip(1)
            .filter(|a| a.as_str() != "--fresh")
            .map(|a| shell_quote(a)),
    );
    parts.join(" ")
}

/// What the replay says when the API refuses it (nothing was made); `None` for an error that is
/// not a refusal.
pub(crate) fn refusal(e: &ClientError, range: (u64, u64)) -> Option<String> {
    let ClientError::Api { code, message, .. } = e else {
        return None;
    };
    let what = match code {
        ErrorCode::NotFound => format!(
            "turns {}..{} cannot be replayed: {message}",
            range.0, range.1
        ),
        ErrorCode::SnapshotDropped => format!(
            "the files at the start of turn {} cannot be restored ({message}); replay from a \
             turn whose previous turn kept its snapshot",
            range.0
        ),
        ErrorCode::UnlabelledThread => format!(
            "the thread belongs to no pool's agent, so the replay has no agent to run ({message})"
        ),
        ErrorCode::KeyReused => format!(
            "the replay's key names a replay of another range or thread ({message}); pass \
             --fresh"
        ),
        _ => return None,
    };
    Some(format!("refused: {what}; nothing was replayed"))
}

/// One replay to run: the source, the range, the candidate.
pub(crate) struct Case<'a> {
    /// The recorded conversation.
    pub(crate) located: &'a Located,
    /// Its agent.
    pub(crate) agent: &'a str,
    /// Who it is, as messages name it.
    pub(crate) whose: String,
    /// The turns replayed.
    pub(crate) turns: TurnRange,
    /// The candidate agent.
    pub(crate) spec: &'a AgentSpec,
    /// The candidate, for people.
    pub(crate) candidate: &'a str,
    /// `--live-reads`.
    pub(crate) live_reads: bool,
    /// `--fresh`.
    pub(crate) fresh: bool,
}

/// How a replay ended.
pub(crate) enum Ended {
    /// Its runner served its inbox (or stopped early: the report says which turns are missing).
    Done(Box<ReplayReport>),
    /// Ctrl-C stopped it; the replay's thread is kept.
    Stopped(ThreadId),
    /// The API refused it: the line says why.
    Refused(String),
}

/// Runs one replay end to end: the range over the source's ended turns, the API's replay, its
/// runner token, the recorded turns, the runner in process (a progress line per turn on stderr),
/// then the report. The recorded thread is only read.
pub(crate) async fn replay_case(
    case: &Case<'_>,
    shutdown: &CancellationToken,
) -> anyhow::Result<Ended> {
    let api = &case.located.api;
    let client = api.client();
    let source = case.located.thread;
    let list = client
        .turns(source)
        .await
        .map_err(|e| api.explain(e, &format!("reading the turns of thread {source}")))?;
    let range = case.turns.resolve(&ended_turns(&list), &case.whose)?;
    let nonce = case.fresh.then(|| ThreadId::new_v7().to_string());
    let request = ReplayRequest {
        from_turn: range.0,
        to_turn: range.1,
        key: replay_key(
            case.spec,
            range.0,
            range.1,
            case.live_reads,
            nonce.as_deref(),
        ),
        candidate: case.candidate.to_string(),
    };
    let created: ReplayCreated = match client.replay(source, &request).await {
        Ok(c) => c,
        Err(e) => {
            if let Some(line) = refusal(&e, range) {
                return Ok(Ended::Refused(line));
            }
            return Err(api.explain(e, &format!("making a replay of thread {source}")));
        }
    };
    let replay = created.replay;
    eprintln!(
        "{} replay {replay} of {} ({} turn(s): {}) against {}",
        if created.existing { "resuming" } else { "made" },
        case.whose,
        created.turns.len(),
        runs(&created.turns),
        case.candidate
    );
    let mut recorded = Vec::with_capacity(created.turns.len());
    for &n in &created.turns {
        let turn = client
            .recorded_turn(source, n)
            .await
            .map_err(|e| api.explain(e, &format!("reading turn {n} of thread {source}")))?;
        recorded.push(turn);
    }
    let mut replayed = Vec::new();
    fetch_replayed(api, &created, &mut replayed).await?;
    print_progress(&recorded, &replayed, 0);
    if replayed.len() < recorded.len() {
        let config = runner_config(case, api, replay, recorded.clone()).await?;
        let mut runner = tokio::spawn(ninetrix_runner::replay::run_replay(
            config,
            shutdown.clone(),
        ));
        let exit = loop {
            tokio::select! {
                exit = &mut runner => break exit,
                () = tokio::time::sleep(POLL) => {
                    // A blip while polling only delays a progress line.
                    let from = replayed.len();
                    if fetch_replayed(api, &created, &mut replayed).await.is_ok() {
                        print_progress(&recorded, &replayed, from);
                    }
                }
            }
        };
        let exit = exit.context("the replay's runner task failed")?;
        let from = replayed.len();
        fetch_replayed(api, &created, &mut replayed).await?;
        print_progress(&recorded, &replayed, from);
        if shutdown.is_cancelled() && replayed.len() < recorded.len() {
            return Ok(Ended::Stopped(replay));
        }
        match exit {
            ninetrix_runner::Exit::Ok => {}
            ninetrix_runner::Exit::Config(why) => anyhow::bail!(
                "the replay's runner refused its configuration: {why} (replay thread {replay})"
            ),
            other => {
                let why = match other {
                    ninetrix_runner::Exit::Failure(why) | ninetrix_runner::Exit::Purged(why) => why,
                    _ => "a turn failed".to_string(),
                };
                eprintln!(
                    "the replay's runner stopped early ({why}); the report shows the turns it \
                     replayed (re-run the command to resume replay {replay})"
                );
            }
        }
    }
    Ok(Ended::Done(Box::new(report(
        source,
        replay,
        case.candidate,
        case.live_reads,
        &recorded,
        &replayed,
    ))))
}

/// Prints a progress line for each replayed turn from index `from` on.
fn print_progress(recorded: &[RecordedTurn], replayed: &[RecordedTurn], from: usize) {
    for (i, r) in replayed.iter().enumerate().skip(from) {
        if let Some(rec) = recorded.get(i) {
            let t = compare_turn(rec, Some(r));
            eprintln!("{}", render::progress_line(i + 1, recorded.len(), &t));
        }
    }
}

/// Adds to `replayed` (the turns the replay's runner ended so far, in order: its own turns after
/// `base_turn`, the source's turn it starts from) the ones that ended since, each as recorded:
/// one request for the turn list, and one per new turn (an ended turn does not change, so none is
/// fetched twice).
async fn fetch_replayed(
    api: &Api,
    replay: &ReplayCreated,
    replayed: &mut Vec<RecordedTurn>,
) -> anyhow::Result<()> {
    let (base_turn, replay) = (replay.base_turn, replay.replay);
    let client = api.client();
    let list = client
        .turns(replay)
        .await
        .map_err(|e| api.explain(e, &format!("reading the turns of replay {replay}")))?;
    let mut own: Vec<u64> = list
        .turns
        .iter()
        .filter(|t| t.live && t.thread_id == replay && t.turn_seq > base_turn)
        .map(|t| t.turn_seq)
        .filter(|n| !replayed.iter().any(|r| r.turn_seq == *n))
        .collect();
    own.sort_unstable();
    for n in own {
        replayed.push(
            client
                .recorded_turn(replay, n)
                .await
                .map_err(|e| api.explain(e, &format!("reading turn {n} of replay {replay}")))?,
        );
    }
    Ok(())
}

/// `$AGENTFILE_HOME/replays/<replay>/`: the replay's workspace (`workspace/`) and health file.
fn replay_dir(replay: ThreadId) -> anyhow::Result<PathBuf> {
    Ok(crate::home::agentfile_home()?
        .join("replays")
        .join(replay.to_string()))
}

/// The runner's configuration for the replay's thread: the candidate spec, the API with a
/// runner token minted for the replay (its pool and agent, no replica), the provider's secrets
/// from this process's environment, and the recorded turns to answer from.
async fn runner_config(
    case: &Case<'_>,
    api: &Api,
    replay: ThreadId,
    recorded: Vec<RecordedTurn>,
) -> anyhow::Result<ninetrix_runner::Config> {
    let pool = &case.located.pool;
    let minted = api
        .client()
        .mint_runner_token(&RunnerTokenRequest {
            thread_id: replay,
            pool: Some(pool.clone()),
            agent: Some(case.agent.to_string()),
            replica: None,
        })
        .await
        .map_err(|e| api.explain(e, &format!("minting the runner token of replay {replay}")))?;
    let dir = replay_dir(replay)?;
    let workspace = dir.join("workspace");
    std::fs::create_dir_all(&workspace).with_context(|| {
        format!(
            "cannot create the replay's workspace {}",
            workspace.display()
        )
    })?;
    let host = crate::pool::spec::host_secrets(case.spec)?;
    let secrets: HashMap<String, SecretValue> = case
        .spec
        .secrets
        .iter()
        .filter_map(|name| Some((name.clone(), SecretValue::new(host.get(name)?.clone()))))
        .collect();
    Ok(ninetrix_runner::Config {
        spec: case.spec.clone(),
        thread_id: replay,
        api: Some(ApiAccess {
            url: api.url.clone(),
            token: SecretValue::new(minted.token),
        }),
        pool: Some(pool.clone()),
        replica: None,
        workspace,
        task: None,
        secrets,
        stream_idle_timeout: Duration::from_secs(120),
        api_patience: None,
        turn_restarts: ninetrix_runner::engine::TURN_RESTARTS,
        health_file: dir.join("health"),
        agent_token: None,
        session: None,
        instance: None,
        created: None,
        telemetry: None,
        jobs_url: None,
        replay: Some(Arc::new(Replay {
            recorded,
            live_reads: case.live_reads,
        })),
    })
}

/// The source conversation and the candidate's agentfile: `-f` when it exists, else the one `up`
/// recorded for the pool (with `--thread` and no pool state here, `-f` is needed).
pub(crate) async fn source_and_file(c: &ConversationArgs) -> anyhow::Result<(Located, PathBuf)> {
    if c.thread.is_none() {
        let Conversation {
            view,
            file,
            target,
            thread,
        } = c.find().await?;
        let located = Located {
            api: view.api,
            pool: view.name,
            target,
            thread,
        };
        return Ok((located, file));
    }
    let located = locate_thread(c).await?;
    let home = crate::home::agentfile_home()?;
    let state = crate::pool::state::read(&home, &located.pool)?;
    let Some(file) = agentfile_path(&c.file, state.agentfile.as_deref()) else {
        return Err(ReplayError::NoCandidate {
            file: c.file.display().to_string(),
            pool: located.pool.clone(),
        }
        .into());
    };
    Ok((located, file))
}

/// The API for a thread named by its ID: the pool's (`-p`, or the agentfile's when its pool has
/// state here), else `AGENTFILE_API_URL` or this home's local API, so `--thread` with a candidate
/// agentfile of a pool that never ran here needs only the API (the thread's labels then say
/// whether it is that pool's: [`locate_thread`]).
pub(crate) async fn thread_api(file: &Path, pool: Option<&str>) -> anyhow::Result<Api> {
    match PoolView::thread_api(file, pool).await {
        Ok(api) => Ok(api),
        Err(e) => Api::any(&crate::home::agentfile_home()?)
            .await
            .map_err(|_| e),
    }
}

/// The conversation `--thread` names, through [`thread_api`]: its pool and whose it is, from
/// its labels (refused when it is not the agent's).
pub(crate) async fn locate_thread(c: &ConversationArgs) -> anyhow::Result<Located> {
    let Some(thread) = c.thread else {
        return c.locate().await;
    };
    let api = thread_api(&c.file, c.pool.as_deref()).await?;
    located_thread(api, thread, &c.agent, c.pool.as_deref()).await
}

/// Reads an instructions file (its text replaces the agent's instructions).
pub(crate) fn read_instructions(path: &Path) -> Result<String, ReplayError> {
    std::fs::read_to_string(path).map_err(|e| ReplayError::Instructions {
        path: path.display().to_string(),
        why: e.to_string(),
    })
}

/// A file's name as people read it (its file name, else the path).
pub(crate) fn short_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_else(|| path.display().to_string())
}

/// Runs `ninetrix replay` (Ctrl-C stops the runner cleanly; the same command resumes).
pub(crate) fn run(args: &ReplayArgs) -> anyhow::Result<ExitCode> {
    super::runner::init_logging("warn");
    super::until_signal(|shutdown| async move { replay(args, shutdown).await })?
}

async fn replay(args: &ReplayArgs, shutdown: CancellationToken) -> anyhow::Result<ExitCode> {
    let (located, file) = source_and_file(&args.conversation).await?;
    let agent = &args.conversation.agent;
    let af = crate::pool::load(&file)?.agentfile;
    let instructions = args
        .instructions
        .as_deref()
        .map(read_instructions)
        .transpose()?;
    let spec = candidate(
        &af,
        &file.display().to_string(),
        agent,
        args.model.as_deref(),
        instructions.as_deref(),
    )?;
    let described = describe(
        &short_name(&file),
        &spec.runtime.model,
        args.instructions.as_deref().map(short_name).as_deref(),
    );
    let whose = located.target.whose(agent);
    let case = Case {
        located: &located,
        agent,
        whose: whose.clone(),
        turns: args.turns.unwrap_or(TurnRange {
            from: None,
            to: None,
        }),
        spec: &spec,
        candidate: &described,
        live_reads: args.live_reads,
        fresh: args.fresh,
    };
    let report = match replay_case(&case, &shutdown).await? {
        Ended::Done(r) => r,
        Ended::Refused(line) => {
            eprintln!("{line}");
            return Ok(ExitCode::from(crate::EXIT_FAILURE));
        }
        Ended::Stopped(replay) => {
            let argv: Vec<String> = std::env::args().collect();
            eprintln!(
                "stopped: replay {replay} is kept; to resume it, run the same command:\n  {}",
                resume_command(&argv)
            );
            return Ok(ExitCode::from(EXIT_STOPPED));
        }
    };
    if args.json {
        outln!("{}", serde_json::to_string(&report)?);
    } else {
        for line in render::report_lines(&whose, &report) {
            outln!("{line}");
        }
    }
    if let Some(max) = args.max_divergent_turns
        && report.divergent_turns > max
    {
        eprintln!(
            "{} divergent turn(s), more than --max-divergent-turns {max}",
            report.divergent_turns
        );
        return Ok(ExitCode::from(crate::EXIT_FAILURE));
    }
    // A replay whose runner stopped early is not a result: say so, and fail (the same command
    // resumes it).
    let done = report
        .turns
        .iter()
        .filter(|t| t.replay_turn.is_some())
        .count();
    if done < report.turns.len() {
        let argv: Vec<String> = std::env::args().collect();
        eprintln!(
            "replay {} stopped after {done} of {} turn(s); to finish it, run the same command:\n  {}",
            report.replay,
            report.turns.len(),
            resume_command(&argv)
        );
        return Ok(ExitCode::from(crate::EXIT_FAILURE));
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(from: Option<u64>, to: Option<u64>) -> TurnRange {
        TurnRange { from, to }
    }

    #[test]
    fn turn_ranges_are_n_to_m_open_at_either_end_or_one_turn() {
        assert_eq!(parse_turns("2..5"), Ok(range(Some(2), Some(5))));
        assert_eq!(parse_turns("2..=5"), Ok(range(Some(2), Some(5))));
        assert_eq!(parse_turns("3.."), Ok(range(Some(3), None)));
        assert_eq!(parse_turns("..4"), Ok(range(None, Some(4))));
        assert_eq!(parse_turns("7"), Ok(range(Some(7), Some(7))));
        assert_eq!(parse_turns(".."), Ok(range(None, None)));
        for bad in ["", "0", "0..3", "a..b", "2...5", "-1", "1..x"] {
            let e = parse_turns(bad).unwrap_err();
            assert!(e.contains("write N..M, N.., ..M or N"), "{bad}: {e}");
        }
        assert_eq!(
            parse_turns("5..2").unwrap_err(),
            "`5..2` is empty: its first turn (5) is after its last (2)"
        );
        assert_eq!(range(Some(2), Some(5)).to_string(), "turns 2..5");
        assert_eq!(range(Some(2), Some(2)).to_string(), "turn 2");
    }

    #[test]
    fn a_range_resolves_over_the_ended_turns_or_names_them() {
        let ended = [1, 2, 3, 4, 6];
        assert_eq!(range(None, None).resolve(&ended, "w"), Ok((1, 6)));
        assert_eq!(range(Some(3), None).resolve(&ended, "w"), Ok((3, 6)));
        assert_eq!(range(None, Some(2)).resolve(&ended, "w"), Ok((1, 2)));
        assert_eq!(range(Some(5), Some(9)).resolve(&ended, "w"), Ok((5, 9)));
        let err = range(Some(7), Some(9))
            .resolve(&ended, "writer-1")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "writer-1 has no ended turn in turns 7..9; the turns that ended on its current \
             branch: 1–4, 6 (pass --turns within them)"
        );
        assert!(
            range(None, None)
                .resolve(&[], "w")
                .unwrap_err()
                .to_string()
                .contains("branch: none")
        );
        assert_eq!(runs(&[1, 3, 4, 5, 9]), "1, 3–5, 9");
    }

    fn agentfile() -> Agentfile {
        let yaml = "name: shop
agents:
  writer:
    metadata: { instructions: be brief }
    runtime: { provider: scripted, script: [hi] }
  editor:
    runtime: { provider: scripted, script: [hi] }
";
        ninetrix_agentfile::parse("agentfile.yaml", yaml)
            .expect("valid")
            .agentfile
    }

    #[test]
    fn the_candidate_takes_the_model_and_instructions_given_and_its_description_says_so() {
        let af = agentfile();
        let plain = candidate(&af, "c.yaml", "writer", None, None).unwrap();
        assert_eq!(plain.metadata.instructions.as_deref(), Some("be brief"));
        let spec = candidate(&af, "c.yaml", "writer", Some("gpt-5"), Some("be thorough")).unwrap();
        assert_eq!(spec.runtime.model, "gpt-5");
        assert_eq!(spec.metadata.instructions.as_deref(), Some("be thorough"));
        assert_eq!(
            candidate(&af, "c.yaml", "critic", None, None)
                .unwrap_err()
                .to_string(),
            "c.yaml has no agent `critic` (its agents: writer, editor); name one with --agent"
        );
        assert_eq!(
            describe("candidate.yaml", "gpt-5", Some("v2.md")),
            "agentfile candidate.yaml · model gpt-5 · instructions v2.md"
        );
        assert_eq!(describe("a.yaml", "m", None), "agentfile a.yaml · model m");
        let long = describe(&"x".repeat(300), "m", None);
        assert!(long.chars().count() <= MAX_CANDIDATE_CHARS, "{long}");
        assert!(long.ends_with('…'));
        let e = read_instructions(Path::new("/nonexistent/v2.md")).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("cannot read the instructions file /nonexistent/v2.md:"),
            "{e}"
        );
    }

    #[test]
    fn the_key_is_the_same_for_the_same_candidate_range_and_reads_and_fresh_changes_it() {
        let af = agentfile();
        let spec = candidate(&af, "c", "writer", None, None).unwrap();
        let other = candidate(&af, "c", "writer", Some("gpt-5"), None).unwrap();
        let k = replay_key(&spec, 1, 4, false, None);
        assert!(k.starts_with("replay-") && k.len() == 7 + 64, "{k}");
        assert!(k.len() <= 128);
        assert_eq!(k, replay_key(&spec, 1, 4, false, None));
        for different in [
            replay_key(&other, 1, 4, false, None),
            replay_key(&spec, 1, 5, false, None),
            replay_key(&spec, 1, 4, true, None),
            replay_key(&spec, 1, 4, false, Some("n")),
        ] {
            assert_ne!(k, different);
        }
    }

    #[test]
    fn the_resume_command_is_this_one_without_fresh() {
        let argv: Vec<String> = [
            "/usr/bin/ninetrix",
            "replay",
            "--agent",
            "writer",
            "--fresh",
            "--instructions",
            "my prompt.md",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            resume_command(&argv),
            "ninetrix replay --agent writer --instructions 'my prompt.md'"
        );
    }

    #[test]
    fn refusals_name_the_cause_and_say_nothing_was_replayed() {
        let api = |code, message: &str| ClientError::Api {
            status: 409,
            code,
            message: message.into(),
            running: None,
        };
        assert_eq!(
            refusal(&api(ErrorCode::NotFound, "turn 9 did not end"), (9, 9)).unwrap(),
            "refused: turns 9..9 cannot be replayed: turn 9 did not end; nothing was replayed"
        );
        assert!(
            refusal(&api(ErrorCode::KeyReused, "x"), (1, 2))
                .unwrap()
                .contains("--fresh")
        );
        assert_eq!(refusal(&api(ErrorCode::Internal, "x"), (1, 2)), None);
    }
}
