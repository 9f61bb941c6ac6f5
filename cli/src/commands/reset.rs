//! `ninetrix reset`: start one conversation over. It purges one thread — a replica's (`--replica
//! N`) or a session's (`--session KEY`) — through the API's `DELETE /v1/threads/{id}`, and the next
//! turn starts on a fresh thread: a replica gets its new thread from the API's replica mapping
//! (the rule a Swarm or Kubernetes runner follows) and, on Docker, its container is recreated on
//! it through `up` for that replica alone (the pool file follows); a session's next message opens
//! a new thread under the same key. Nothing else of the pool is touched.
//!
//! A purge is final, so `reset` asks first on a terminal and, without one, refuses unless
//! `--yes` is given. The decisions — which thread ([`target`]), whether to ask ([`ask`]) and what
//! the question says ([`what`]) — are pure functions; the effects are at the edge ([`run`]).

use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use ninetrix_agentfile::Agentfile;
use ninetrix_proto::ThreadId;
use ninetrix_proto::api::ThreadLabels;

use crate::backend::view::PoolView;
use crate::cli::pool_name;
use crate::deploy::Only;
use crate::pool::local_api::Api;
use crate::pool::spec::DEFAULT_STOP_SECS;
use crate::ui::progress::Progress;

/// The conversation a command works on (`reset`, `compact`): an agent's replica or session, in a
/// pool named by `-p` or by its agentfile.
#[derive(Debug, Args)]
pub struct ConversationArgs {
    /// The agentfile of the pool [default: agentfile.yaml, else the one `up` recorded for the
    /// pool]
    #[arg(short, long, default_value = "agentfile.yaml", value_name = "FILE")]
    pub file: PathBuf,
    /// The pool [default: the agentfile's, else the only pool]
    #[arg(short, long, value_name = "POOL", value_parser = pool_name)]
    pub pool: Option<String>,
    /// The agent whose conversation it is.
    #[arg(long, value_name = "AGENT")]
    pub agent: String,
    /// The replica whose conversation it is [default: 1, when the agent has one replica]
    #[arg(long, value_name = "N", conflicts_with = "session")]
    pub replica: Option<u32>,
    /// The session (its key) whose conversation it is.
    #[arg(long, value_name = "KEY")]
    pub session: Option<String>,
    /// The thread (its ID) whose conversation it is, instead of --replica or --session: a
    /// thread of the agent, e.g. a fork's.
    #[arg(long, value_name = "ID", conflicts_with_all = ["replica", "session"])]
    pub thread: Option<ThreadId>,
}

/// A conversation found: the pool, the agentfile read, which conversation, and its thread.
pub(crate) struct Conversation {
    /// The pool.
    pub(crate) view: PoolView,
    /// The agentfile read (`-f`, else the one `up` recorded).
    pub(crate) file: PathBuf,
    /// A replica's or a session's.
    pub(crate) target: Target,
    /// Its thread.
    pub(crate) thread: ThreadId,
}

/// A conversation located through the API alone: enough for the commands that only talk to the
/// API (`fork`, `rewind`, `diff`).
pub(crate) struct Located {
    /// The API.
    pub(crate) api: Api,
    /// The pool, as the thread's labels (or the pool found) name it.
    pub(crate) pool: String,
    /// A replica's or a session's.
    pub(crate) target: Target,
    /// Its thread.
    pub(crate) thread: ThreadId,
}

impl ConversationArgs {
    /// Locates the conversation. With `--thread` only the API is needed (the thread's labels say
    /// whose it is; see [`PoolView::thread_api`]); otherwise as [`ConversationArgs::find`].
    pub(crate) async fn locate(&self) -> anyhow::Result<Located> {
        let Some(thread) = self.thread else {
            let c = self.find().await?;
            return Ok(Located {
                api: c.view.api,
                pool: c.view.name,
                target: c.target,
                thread: c.thread,
            });
        };
        let api = PoolView::thread_api(&self.file, self.pool.as_deref()).await?;
        located_thread(api, thread, &self.agent, self.pool.as_deref()).await
    }

    /// Finds the conversation: the pool, its agentfile, the replica or session the arguments
    /// name, and its thread (a session's from the API; a replica's from the backend — on Swarm
    /// the API's replica mapping; `--thread`'s checked against the pool and the agent).
    pub(crate) async fn find(&self) -> anyhow::Result<Conversation> {
        let view = PoolView::open(&self.file, self.pool.as_deref()).await?;
        let pool = view.name.clone();
        let Some(file) = agentfile_path(&self.file, view.state.agentfile.as_deref()) else {
            anyhow::bail!(
                "{} does not exist{}: pass -f FILE, the agentfile of pool {pool}",
                self.file.display(),
                match &view.state.agentfile {
                    Some(p) => format!(" and neither does {}, which `up` recorded", p.display()),
                    None => String::new(),
                }
            );
        };
        let af = crate::pool::load(&file)?.agentfile;
        let agent = &self.agent;
        if let Some(thread) = self.thread {
            let Some(summary) = view.api.thread(thread).await? else {
                anyhow::bail!(
                    "thread {thread} does not exist in the checkpoint API of pool {pool}; \
                     `ninetrix sessions -p {pool}` lists its threads"
                );
            };
            let (_, target) = of_labels(thread, &summary.labels, agent, Some(&pool))?;
            return Ok(Conversation {
                view,
                file,
                target,
                thread,
            });
        }
        let target = target(&af, &pool, agent, self.replica, self.session.as_deref())?;
        let thread = match &target {
            Target::Session(key) => match view.api.find_session(&pool, agent, key).await? {
                Some(t) => t.thread_id,
                None => anyhow::bail!(
                    "agent `{agent}` has no session `{key}` in pool {pool}; `ninetrix sessions -p \
                     {pool}` lists them"
                ),
            },
            Target::Replica(n) => view.backend().replica_thread(&view, agent, *n).await?,
        };
        Ok(Conversation {
            view,
            file,
            target,
            thread,
        })
    }
}

/// Arguments of `ninetrix reset`.
#[derive(Debug, Args)]
pub struct ResetArgs {
    /// The conversation that starts over.
    #[command(flatten)]
    pub conversation: ConversationArgs,
    /// Reset without asking (needed when stdin is not a terminal).
    #[arg(short, long)]
    pub yes: bool,
    /// Seconds the replica's old container gets to exit before it is killed.
    #[arg(short = 't', long = "timeout", default_value_t = DEFAULT_STOP_SECS, value_name = "SECS")]
    pub timeout: i32,
    /// Seconds to wait for the replica's new runner to be ready.
    #[arg(long, default_value_t = 60, value_name = "S")]
    pub wait_timeout: u64,
}

/// Which conversation a command names (`reset`, `compact`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// A replica's own thread.
    Replica(u32),
    /// A session's thread, by its key.
    Session(String),
}

impl Target {
    /// Whose conversation it is, as messages name it: `writer-2`, ``session `k` of writer``.
    pub(crate) fn whose(&self, agent: &str) -> String {
        match self {
            Target::Replica(n) => format!("{agent}-{n}"),
            Target::Session(key) => format!("session `{key}` of {agent}"),
        }
    }
}

/// Why the conversation a command names (`reset`, `compact`) cannot be found.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ResetError {
    /// The agentfile has no such agent.
    #[error("pool `{pool}` has no agent `{agent}` (its agents: {known})")]
    NoAgent {
        pool: String,
        agent: String,
        known: String,
    },
    /// A batch agent has no lasting conversation.
    #[error(
        "agent `{agent}` is a batch job (`execution.durability: false`): each run starts on a new \
         thread, so it has no lasting conversation"
    )]
    Batch { agent: String },
    /// The agent runs several replicas and none was named.
    #[error(
        "agent `{agent}` runs {count} replicas: name one with --replica N (1 to {count}), or a \
         session with --session KEY"
    )]
    WhichReplica { agent: String, count: u32 },
    /// The agent has no such replica.
    #[error("agent `{agent}` has no replica {replica}: it runs {count} (--replica 1 to {count})")]
    NoReplica {
        agent: String,
        replica: u32,
        count: u32,
    },
    /// `--thread` names a thread that is not the agent's (in the pool named).
    #[error(
        "thread {thread} is {found}, not a thread of agent `{agent}`{}: name the agent it \
         belongs to with --agent (`ninetrix trace --thread-id {thread}` shows whose it is)",
        pool.as_ref().map(|p| format!(" in pool {p}")).unwrap_or_default()
    )]
    NotThe {
        thread: ThreadId,
        agent: String,
        pool: Option<String>,
        found: String,
    },
    /// No one was asked and `--yes` was not given.
    #[error(
        "`ninetrix reset` deletes {what} for good, and stdin is not a terminal to ask on: pass \
         --yes to reset"
    )]
    NotConfirmed { what: String },
}

/// Which thread `--replica`/`--session` name for an agent of the agentfile: a session of any
/// durable agent; a replica within the agent's count; neither, the only replica.
pub(crate) fn target(
    af: &Agentfile,
    pool: &str,
    agent: &str,
    replica: Option<u32>,
    session: Option<&str>,
) -> Result<Target, ResetError> {
    let Some(spec) = af.agents.iter().find(|a| a.name == agent) else {
        let known: Vec<&str> = af.agents.iter().map(|a| a.name.as_str()).collect();
        return Err(ResetError::NoAgent {
            pool: pool.to_string(),
            agent: agent.to_string(),
            known: known.join(", "),
        });
    };
    if !spec.execution.durability {
        return Err(ResetError::Batch {
            agent: agent.to_string(),
        });
    }
    let count = spec.execution.replicas;
    match (replica, session) {
        (_, Some(key)) => Ok(Target::Session(key.to_string())),
        (Some(n), None) if (1..=count).contains(&n) => Ok(Target::Replica(n)),
        (Some(n), None) => Err(ResetError::NoReplica {
            agent: agent.to_string(),
            replica: n,
            count,
        }),
        (None, None) if count == 1 => Ok(Target::Replica(1)),
        (None, None) => Err(ResetError::WhichReplica {
            agent: agent.to_string(),
            count,
        }),
    }
}

/// The conversation of thread `thread` in `api`: its pool and whose it is, from its labels
/// (refused when it is not `agent`'s, or not `pool`'s when one is named; see [`of_labels`]).
pub(crate) async fn located_thread(
    api: Api,
    thread: ThreadId,
    agent: &str,
    pool: Option<&str>,
) -> anyhow::Result<Located> {
    let labels = match api.thread(thread).await? {
        Some(t) => t.labels,
        None => anyhow::bail!(
            "thread {thread} does not exist in the checkpoint API at {}; `ninetrix sessions` \
             lists a pool's threads",
            api.url
        ),
    };
    let (pool, target) = of_labels(thread, &labels, agent, pool)?;
    Ok(Located {
        api,
        pool,
        target,
        thread,
    })
}

/// Whose thread `thread` is, from its labels: its pool and whether a replica's or a session's.
/// Refused when it is not `agent`'s, or not of the pool named (`pool`).
fn of_labels(
    thread: ThreadId,
    labels: &ThreadLabels,
    agent: &str,
    pool: Option<&str>,
) -> Result<(String, Target), ResetError> {
    let mismatch = |found: String| ResetError::NotThe {
        thread,
        agent: agent.to_string(),
        pool: pool.map(str::to_string),
        found,
    };
    let (Some(p), Some(a)) = (&labels.pool, &labels.agent) else {
        return Err(mismatch("a thread of no pool's agent".into()));
    };
    if a != agent || pool.is_some_and(|want| want != p) {
        return Err(mismatch(format!("agent `{a}`'s, in pool {p}")));
    }
    let target = match (&labels.session, labels.replica) {
        (Some(key), _) => Target::Session(key.clone()),
        (None, Some(n)) => Target::Replica(n),
        (None, None) => {
            return Err(mismatch(format!(
                "agent `{a}`'s, but of no replica or session"
            )));
        }
    };
    Ok((p.clone(), target))
}

/// What to do before purging.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ask {
    /// `--yes`: go on.
    Go,
    /// Ask on the terminal.
    Prompt,
    /// No terminal to ask on and no `--yes`: refuse.
    Refuse,
}

/// Whether to ask: `--yes` goes on; a terminal is asked; anything else is refused.
pub(crate) fn ask(yes: bool, terminal: bool) -> Ask {
    match (yes, terminal) {
        (true, _) => Ask::Go,
        (false, true) => Ask::Prompt,
        (false, false) => Ask::Refuse,
    }
}

/// What a reset deletes, as the question and the refusal name it.
pub(crate) fn what(pool: &str, agent: &str, target: &Target, thread: ThreadId) -> String {
    let whose = target.whose(agent);
    format!(
        "the conversation of {whose} in pool {pool} (thread {thread}: its history, tool ledger, \
         inbox and events)"
    )
}

/// Whether an answer to the question is a yes.
pub(crate) fn is_yes(answer: &str) -> bool {
    matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}

/// The agentfile a reset reads: `-f` (or ./agentfile.yaml) if it exists, else the one `up`
/// recorded for the pool.
pub(crate) fn agentfile_path(given: &Path, recorded: Option<&Path>) -> Option<PathBuf> {
    if given.exists() {
        return Some(given.to_path_buf());
    }
    recorded.filter(|p| p.exists()).map(Path::to_path_buf)
}

/// Runs `ninetrix reset`.
pub(crate) async fn run(args: &ResetArgs) -> anyhow::Result<ExitCode> {
    let Conversation {
        view,
        file,
        target,
        thread,
    } = args.conversation.find().await?;
    let pool = view.name.clone();
    let agent = &args.conversation.agent;
    let deleted = what(&pool, agent, &target, thread);
    match ask(args.yes, std::io::stdin().is_terminal()) {
        Ask::Go => {}
        Ask::Refuse => return Err(ResetError::NotConfirmed { what: deleted }.into()),
        Ask::Prompt => {
            eprint!("Delete {deleted} and start it over? [y/N] ");
            let _ = std::io::stderr().flush();
            let mut answer = String::new();
            std::io::stdin().lock().read_line(&mut answer)?;
            if !is_yes(&answer) {
                eprintln!("nothing was reset");
                return Ok(ExitCode::from(crate::EXIT_FAILURE));
            }
        }
    }
    view.api.purge(thread).await?;
    let progress = Progress::new(false);
    progress.step("Thread", &thread.to_string(), "Deleted");
    match target {
        Target::Session(key) => {
            outln!("session `{key}` of {agent} starts over: its next message opens a new thread");
            Ok(ExitCode::SUCCESS)
        }
        Target::Replica(n) => {
            let only = Only {
                agent: agent.clone(),
                replica: n,
            };
            view.backend()
                .restart_replica(&file, &pool, &only, args.timeout, args.wait_timeout)
                .await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agentfile() -> Agentfile {
        let yaml = "name: shop
agents:
  writer:
    runtime: { provider: scripted, script: [hi] }
    execution: { replicas: 3 }
  solo:
    runtime: { provider: scripted, script: [hi] }
  job:
    runtime: { provider: scripted, script: [hi] }
    execution: { durability: false, task: go }
";
        ninetrix_agentfile::parse("agentfile.yaml", yaml)
            .expect("valid")
            .agentfile
    }

    #[test]
    fn the_thread_to_reset_is_named_by_replica_or_session_and_the_only_replica_is_the_default() {
        let af = agentfile();
        let t = |agent: &str, replica, session| target(&af, "shop", agent, replica, session);
        assert_eq!(t("writer", Some(2), None), Ok(Target::Replica(2)));
        assert_eq!(t("solo", None, None), Ok(Target::Replica(1)));
        assert_eq!(
            t("writer", None, Some("customer-7")),
            Ok(Target::Session("customer-7".into()))
        );
        let err = |r: Result<Target, ResetError>| r.unwrap_err().to_string();
        assert_eq!(
            err(t("writer", None, None)),
            "agent `writer` runs 3 replicas: name one with --replica N (1 to 3), or a session \
             with --session KEY"
        );
        assert_eq!(
            err(t("writer", Some(4), None)),
            "agent `writer` has no replica 4: it runs 3 (--replica 1 to 3)"
        );
        assert_eq!(
            err(t("writer", Some(0), None)),
            "agent `writer` has no replica 0: it runs 3 (--replica 1 to 3)"
        );
        assert_eq!(
            err(t("editor", None, None)),
            "pool `shop` has no agent `editor` (its agents: writer, solo, job)"
        );
        assert!(
            err(t("job", None, None)).contains("is a batch job"),
            "{}",
            err(t("job", None, None))
        );
    }

    #[test]
    fn a_thread_named_by_id_is_the_agents_replica_or_session_or_refused() {
        let thread = ThreadId::from(uuid::Uuid::from_u128(9));
        let labels = |agent: &str, replica, session: Option<&str>| ThreadLabels {
            pool: Some("shop".into()),
            agent: Some(agent.into()),
            replica,
            session: session.map(str::to_string),
        };
        assert_eq!(
            of_labels(thread, &labels("writer", Some(2), None), "writer", None),
            Ok(("shop".into(), Target::Replica(2)))
        );
        assert_eq!(
            of_labels(
                thread,
                &labels("writer", Some(1), Some("fork-0193abcd")),
                "writer",
                Some("shop")
            ),
            Ok(("shop".into(), Target::Session("fork-0193abcd".into())))
        );
        let err = of_labels(thread, &labels("editor", Some(1), None), "writer", None)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            format!(
                "thread {thread} is agent `editor`'s, in pool shop, not a thread of agent \
                 `writer`: name the agent it belongs to with --agent (`ninetrix trace \
                 --thread-id {thread}` shows whose it is)"
            )
        );
        let err = of_labels(
            thread,
            &labels("writer", Some(1), None),
            "writer",
            Some("other"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("not a thread of agent `writer` in pool other"),
            "{err}"
        );
        let bare = ThreadLabels::default();
        assert!(of_labels(thread, &bare, "writer", None).is_err());
    }

    #[test]
    fn a_reset_asks_on_a_terminal_refuses_without_one_and_yes_skips_the_question() {
        assert_eq!(ask(true, false), Ask::Go);
        assert_eq!(ask(true, true), Ask::Go);
        assert_eq!(ask(false, true), Ask::Prompt);
        assert_eq!(ask(false, false), Ask::Refuse);
        for yes in ["y", "Y\n", " yes ", "YES"] {
            assert!(is_yes(yes), "{yes:?}");
        }
        for no in ["", "\n", "n", "no", "yess", "sure"] {
            assert!(!is_yes(no), "{no:?}");
        }
        let thread = ThreadId::from(uuid::Uuid::from_u128(7));
        let refused = ResetError::NotConfirmed {
            what: what("shop", "writer", &Target::Replica(2), thread),
        };
        insta::assert_snapshot!("reset_refused_without_a_terminal", refused.to_string());
        insta::assert_snapshot!(
            "reset_question_of_a_session",
            what(
                "shop",
                "writer",
                &Target::Session("customer-7".into()),
                thread
            )
        );
    }

    #[test]
    fn the_agentfile_is_the_given_one_else_the_one_up_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let recorded = dir.path().join("recorded.yaml");
        let here = dir.path().join("agentfile.yaml");
        assert_eq!(agentfile_path(&here, Some(&recorded)), None);
        std::fs::write(&recorded, "x").unwrap();
        assert_eq!(
            agentfile_path(&here, Some(&recorded)),
            Some(recorded.clone())
        );
        std::fs::write(&here, "x").unwrap();
        assert_eq!(agentfile_path(&here, Some(&recorded)), Some(here.clone()));
        assert_eq!(agentfile_path(&here, None), Some(here));
    }
}
