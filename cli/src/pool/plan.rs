//! The decisions of `ninetrix up`, as a pure function (like Compose's `reconcile.go`):
//! [`plan`] compares what the agentfile wants with the containers Docker has and the pool state,
//! and returns the Docker actions to take, each with its cause. It does no I/O, so every rule is
//! tested here without Docker; `apply` carries a plan out and `up --dry-run` prints it.
//!
//! The rules:
//! - a replica with no container is created (its thread reused from the pool state if known);
//! - a container whose configuration digest differs is recreated, naming the parts that changed,
//!   with the same replica number and (durable agents) the same thread;
//! - a durable replica's container that serves another thread than the pool state's is recreated
//!   with the state's (`up` and `reset` replace a purged thread in the state: one rule for every
//!   backend, as the API's replica mapping replaces it for Swarm and Kubernetes);
//! - an unchanged running container is kept; an unchanged stopped durable one is started, which
//!   re-arms its restart budget (also after it gave up); an unchanged exited batch job is not
//!   re-run;
//! - replicas above the wanted count are removed, highest number first;
//! - containers of agents no longer in the agentfile are orphans: reported, or removed with
//!   `--remove-orphans`;
//! - `ninetrix run` containers and unlabelled ones are left alone (unless they are orphans).

use std::collections::BTreeMap;
use std::fmt;

use ninetrix_proto::ThreadId;

use crate::pool::spec::{Config, Liveness, Slot};
use crate::pool::state::PoolState;

/// What the agentfile wants of one agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Desired {
    /// The agent's name.
    pub(crate) agent: String,
    /// How many replicas.
    pub(crate) replicas: u32,
    /// Durable (restarted, keeps its thread) or batch (runs once per create, fresh thread).
    pub(crate) durable: bool,
    /// The configuration every replica should have.
    pub(crate) config: Config,
}

/// One container Docker has for the pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Observed {
    /// Docker's ID.
    pub(crate) id: String,
    /// The agent label.
    pub(crate) agent: String,
    /// Replica or run; `None` if the replica label is missing or unreadable.
    pub(crate) slot: Option<Slot>,
    /// The thread label.
    pub(crate) thread: Option<ThreadId>,
    /// The configuration digest it was created with; `None` if made by a ninetrix that did not
    /// record it by part.
    pub(crate) config: Option<Config>,
    /// The durable label.
    pub(crate) durable: bool,
    /// Never started (created, then the start failed or never came).
    pub(crate) never_started: bool,
    /// Its process.
    pub(crate) liveness: Liveness,
}

impl Observed {
    /// `<agent>-<n>`, the way ops name containers.
    fn display(&self) -> String {
        match self.slot {
            Some(Slot::Replica(n)) => format!("{}-{n}", self.agent),
            Some(Slot::Run) => format!("{}-run ({})", self.agent, short_id(&self.id)),
            None => format!("{} ({})", self.agent, short_id(&self.id)),
        }
    }
}

fn short_id(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

/// Switches of `up` that change decisions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Options {
    /// Recreate every replica container, even unchanged ones.
    pub(crate) force_recreate: bool,
    /// Remove orphans instead of reporting them.
    pub(crate) remove_orphans: bool,
}

/// Which thread a new container gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Thread {
    /// The replica's thread from the pool state (or its old container): a durable replica keeps
    /// its thread forever.
    Reuse(ThreadId),
    /// A new thread: a durable replica seen for the first time, or any batch run.
    Fresh,
}

/// Why a container is removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RemoveCause {
    /// Its replica number is above the wanted count.
    ScaledDown,
    /// Its agent is no longer in the agentfile (with `--remove-orphans`).
    Orphan,
    /// A second container claims the same replica.
    Duplicate,
}

/// Why a container is recreated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum RecreateCause {
    /// These parts of its configuration changed.
    Changed(Vec<String>),
    /// It was made by a ninetrix that did not record its configuration by part.
    Unknown,
    /// `--force-recreate`.
    Forced,
    /// It was created but never started.
    NeverStarted,
    /// The pool state gives the replica a new thread (its old one was purged).
    NewThread,
}

/// One Docker action of a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    /// Build an image (only `--dry-run` plans this; a real `up` builds before planning).
    BuildImage {
        /// Its tag.
        tag: String,
    },
    /// Stop and remove a container.
    Remove {
        /// `<agent>-<n>`.
        name: String,
        /// Docker's ID.
        id: String,
        /// The agent.
        agent: String,
        /// The replica, if numbered.
        replica: Option<u32>,
        /// Why.
        cause: RemoveCause,
    },
    /// Start a stopped durable container.
    Start {
        /// The agent.
        agent: String,
        /// The replica.
        replica: u32,
        /// Docker's ID.
        id: String,
        /// Its thread.
        thread: Option<ThreadId>,
        /// Policy restarts it had used; `Some` when it gave up.
        gave_up_after: Option<i64>,
    },
    /// Create and start a replica that has no container.
    Create {
        /// The agent.
        agent: String,
        /// The replica.
        replica: u32,
        /// Its thread.
        thread: Thread,
    },
    /// Replace a replica's container.
    Recreate {
        /// The agent.
        agent: String,
        /// The replica.
        replica: u32,
        /// The container to remove first.
        old: String,
        /// Its thread.
        thread: Thread,
        /// Why.
        cause: RecreateCause,
    },
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::BuildImage { tag } => write!(f, "build {tag}: image would be built"),
            Op::Remove { name, cause, .. } => {
                let why = match cause {
                    RemoveCause::ScaledDown => "scaled down",
                    RemoveCause::Orphan => "orphan (its agent is not in the agentfile)",
                    RemoveCause::Duplicate => "duplicate of the same replica",
                };
                write!(f, "remove {name}: {why}")
            }
            Op::Start {
                agent,
                replica,
                gave_up_after,
                ..
            } => match gave_up_after {
                Some(n) => write!(
                    f,
                    "start {agent}-{replica}: gave up after {n} restarts; re-arms the restart budget"
                ),
                None => write!(
                    f,
                    "start {agent}-{replica}: stopped; re-arms the restart budget"
                ),
            },
            Op::Create { agent, replica, .. } => write!(f, "create {agent}-{replica}: missing"),
            Op::Recreate {
                agent,
                replica,
                cause,
                ..
            } => {
                write!(f, "recreate {agent}-{replica}: ")?;
                match cause {
                    RecreateCause::Changed(parts) => {
                        write!(f, "config changed ({})", parts.join(", "))
                    }
                    RecreateCause::Unknown => {
                        write!(f, "config changed (created by an older ninetrix)")
                    }
                    RecreateCause::Forced => write!(f, "--force-recreate"),
                    RecreateCause::NeverStarted => write!(f, "created but never started"),
                    RecreateCause::NewThread => {
                        write!(f, "a new thread (its old thread was purged)")
                    }
                }
            }
        }
    }
}

/// Something a plan leaves as it is, said so the user sees every container accounted for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Note {
    /// An unchanged container that stays.
    Keep {
        /// The agent.
        agent: String,
        /// The replica.
        replica: u32,
        /// Docker's ID.
        id: String,
        /// Its thread.
        thread: Option<ThreadId>,
        /// Running (or restarting), else an exited batch job that is not re-run.
        running: bool,
    },
    /// A container of an agent no longer in the agentfile, left in place.
    Orphan {
        /// `<agent>-<n>`.
        name: String,
    },
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Note::Keep {
                agent,
                replica,
                running: true,
                ..
            } => write!(f, "keep {agent}-{replica}: unchanged, running"),
            Note::Keep { agent, replica, .. } => write!(
                f,
                "keep {agent}-{replica}: unchanged, exited batch job (not re-run)"
            ),
            Note::Orphan { name } => write!(
                f,
                "orphan {name}: its agent is not in the agentfile (--remove-orphans removes it)"
            ),
        }
    }
}

/// The actions that bring the pool to the agentfile, and what stays as it is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Docker actions, in the order to take them: image builds, removals, then per agent and
    /// replica the starts, creations and recreations.
    pub(crate) ops: Vec<Op>,
    /// Containers left as they are.
    pub(crate) notes: Vec<Note>,
}

impl fmt::Display for Plan {
    /// One line per op with its cause, then one per note.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for op in &self.ops {
            writeln!(f, "{op}")?;
        }
        for note in &self.notes {
            writeln!(f, "{note}")?;
        }
        Ok(())
    }
}

impl Plan {
    /// The part of the plan for one replica (what `reset` applies): its op, if any, and its
    /// note; nothing of the pool's other containers.
    pub(crate) fn only(self, agent: &str, replica: u32) -> Plan {
        let ops = self
            .ops
            .into_iter()
            .filter(|op| match op {
                Op::BuildImage { .. } => false,
                Op::Remove {
                    agent: a,
                    replica: r,
                    ..
                } => a == agent && *r == Some(replica),
                Op::Start {
                    agent: a,
                    replica: r,
                    ..
                }
                | Op::Create {
                    agent: a,
                    replica: r,
                    ..
                }
                | Op::Recreate {
                    agent: a,
                    replica: r,
                    ..
                } => a == agent && *r == replica,
            })
            .collect();
        let notes = self
            .notes
            .into_iter()
            .filter(|n| {
                matches!(n, Note::Keep { agent: a, replica: r, .. } if a == agent && *r == replica)
            })
            .collect();
        Plan { ops, notes }
    }
}

/// Decides what `up` does. `unbuilt` lists images that do not exist yet (only `--dry-run` has
/// any); `state` gives the threads of replicas seen before.
pub(crate) fn plan(
    desired: &[Desired],
    observed: &[Observed],
    state: &PoolState,
    unbuilt: &[String],
    options: Options,
) -> Plan {
    let mut out = Plan {
        ops: unbuilt
            .iter()
            .map(|tag| Op::BuildImage { tag: tag.clone() })
            .collect(),
        notes: Vec::new(),
    };
    // Orphans: agents no longer in the file (any slot).
    for c in observed {
        if desired.iter().any(|d| d.agent == c.agent) {
            continue;
        }
        if options.remove_orphans {
            out.ops.push(remove(c, RemoveCause::Orphan));
        } else {
            out.notes.push(Note::Orphan { name: c.display() });
        }
    }
    for want in desired {
        // The agent's numbered replicas, by number; a second claimant of a number is a duplicate.
        let mut by_replica: BTreeMap<u32, &Observed> = BTreeMap::new();
        let mut duplicates = Vec::new();
        for c in observed.iter().filter(|c| c.agent == want.agent) {
            if let Some(Slot::Replica(n)) = c.slot {
                match by_replica.get(&n) {
                    // Keep the one that runs; remove the other.
                    Some(first) if !first.liveness.running && c.liveness.running => {
                        duplicates.push(*first);
                        by_replica.insert(n, c);
                    }
                    Some(_) => duplicates.push(c),
                    None => {
                        by_replica.insert(n, c);
                    }
                }
            }
        }
        for c in duplicates {
            out.ops.push(remove(c, RemoveCause::Duplicate));
        }
        // Excess replicas, highest numbers first.
        for (_, c) in by_replica.range(want.replicas.saturating_add(1)..).rev() {
            out.ops.push(remove(c, RemoveCause::ScaledDown));
        }
        for replica in 1..=want.replicas {
            out.ops.extend(replica_op(
                want,
                replica,
                by_replica.get(&replica).copied(),
                state,
                options,
                &mut out.notes,
            ));
        }
    }
    out
}

fn remove(c: &Observed, cause: RemoveCause) -> Op {
    Op::Remove {
        name: c.display(),
        id: c.id.clone(),
        agent: c.agent.clone(),
        replica: match c.slot {
            Some(Slot::Replica(n)) => Some(n),
            _ => None,
        },
        cause,
    }
}

/// The thread of a new container for a replica: a batch job gets a fresh one per run; a durable
/// replica keeps the one in the pool state, else its old container's.
fn thread(want: &Desired, replica: u32, old: Option<&Observed>, state: &PoolState) -> Thread {
    if !want.durable {
        return Thread::Fresh;
    }
    state
        .agents
        .get(&want.agent)
        .and_then(|r| r.get(&replica))
        .map(|r| r.thread_id)
        .or_else(|| old.and_then(|c| c.thread))
        .map_or(Thread::Fresh, Thread::Reuse)
}

/// The op for one wanted replica (or a note when it stays as it is).
fn replica_op(
    want: &Desired,
    replica: u32,
    current: Option<&Observed>,
    state: &PoolState,
    options: Options,
    notes: &mut Vec<Note>,
) -> Option<Op> {
    let Some(c) = current else {
        return Some(Op::Create {
            agent: want.agent.clone(),
            replica,
            thread: thread(want, replica, None, state),
        });
    };
    let state_thread = state
        .agents
        .get(&want.agent)
        .and_then(|r| r.get(&replica))
        .map(|r| r.thread_id);
    let new_thread =
        want.durable && matches!((state_thread, c.thread), (Some(s), Some(t)) if s != t);
    let cause = if new_thread {
        Some(RecreateCause::NewThread)
    } else if options.force_recreate {
        Some(RecreateCause::Forced)
    } else {
        match &c.config {
            None => Some(RecreateCause::Unknown),
            Some(have) => {
                let changed = want.config.changed(have);
                if !changed.is_empty() {
                    Some(RecreateCause::Changed(changed))
                } else if c.never_started {
                    Some(RecreateCause::NeverStarted)
                } else {
                    None
                }
            }
        }
    };
    if let Some(cause) = cause {
        return Some(Op::Recreate {
            agent: want.agent.clone(),
            replica,
            old: c.id.clone(),
            thread: thread(want, replica, Some(c), state),
            cause,
        });
    }
    let running = c.liveness.running || c.liveness.restarting;
    if running || !want.durable {
        notes.push(Note::Keep {
            agent: want.agent.clone(),
            replica,
            id: c.id.clone(),
            thread: c.thread,
            running,
        });
        return None;
    }
    Some(Op::Start {
        agent: want.agent.clone(),
        replica,
        id: c.id.clone(),
        thread: c.thread,
        gave_up_after: c.liveness.gave_up(c.durable).then_some(c.liveness.restarts),
    })
}

#[cfg(test)]
mod tests;
