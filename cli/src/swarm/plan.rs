//! The decisions of `ninetrix up --swarm`, as a pure function (the one-host [`crate::pool::plan`]'s
//! Swarm twin): [`plan`] compares the services the agentfile wants with what the swarm has — the
//! pool's network, services and secrets, observed as plain data — and returns the Swarm actions
//! to take, each with its cause, in the order `up --swarm` takes them. It does no I/O, so every
//! rule is tested here without Docker; [`super::apply`] carries a plan out and `up --swarm
//! --dry-run` prints the same plan.
//!
//! The rules, in order:
//! - the pool's overlay network is created if missing;
//! - the API service, then each sidecar MCP server's service, then each agent's service is
//!   created if missing, else updated: Swarm replaces only the tasks whose spec changed, so an
//!   update is sent for every existing service, and its cause names what the plan can see change
//!   (`--force-recreate`, the replica or completion count, the kind of service, the image) or
//!   says it is sent again unchanged. The rest of a spec (secrets, environment) is only known once
//!   the secrets exist, so `apply` compares it when it sends it (its progress word);
//! - sidecar services of servers no longer declared are removed (a sidecar is the pool's, not a
//!   piece of user state);
//! - agent services of agents no longer in the agentfile are orphans: reported, or removed with
//!   `--remove-orphans`;
//! - last, the pool's secrets no service uses any more are removed (those the updates stop using
//!   too: `apply` lists them again after the updates).

use std::fmt;

/// How a service runs its tasks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Mode {
    /// A replicated service of this many tasks (the API, a sidecar, a durable agent).
    Replicated(u32),
    /// A replicated job of this many completions (a batch agent).
    Job(u32),
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mode::Replicated(n) => write!(f, "{n} replica(s)"),
            Mode::Job(n) => write!(f, "a job of {n}"),
        }
    }
}

/// What a service of the pool is for.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Role {
    /// The pool's checkpoint API.
    Api,
    /// The sidecar of this MCP server.
    Sidecar(String),
    /// This agent's runners.
    Agent(String),
}

/// One service the agentfile wants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Desired {
    /// Its Swarm name.
    pub(crate) name: String,
    /// What it is for.
    pub(crate) role: Role,
    /// Its image reference.
    pub(crate) image: String,
    /// Its tasks.
    pub(crate) mode: Mode,
}

/// What the agentfile wants of the swarm, in the order `up` makes it so.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Wanted {
    /// The overlay network's name.
    pub(crate) network: String,
    /// The API service, the sidecars' services, the agents' services, in this order.
    pub(crate) services: Vec<Desired>,
}

/// The component label of a pool's service, as `up` sets it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Component {
    /// `api`.
    Api,
    /// `mcp`: a sidecar MCP server.
    Mcp,
    /// `runner`: an agent.
    Runner,
    /// Anything else (or none).
    Other,
}

impl Component {
    /// The label's value, parsed once.
    pub(crate) fn parse(label: Option<&str>) -> Component {
        match label {
            Some("api") => Component::Api,
            Some("mcp") => Component::Mcp,
            Some("runner") => Component::Runner,
            _ => Component::Other,
        }
    }
}

/// One service the swarm has for the pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Service {
    /// Swarm's ID.
    pub(crate) id: String,
    /// Its name.
    pub(crate) name: String,
    /// Its component label.
    pub(crate) component: Component,
    /// Its agent label (agents' services), else empty.
    pub(crate) agent: String,
    /// Its image reference, as Swarm answers it.
    pub(crate) image: Option<String>,
    /// Its tasks, if Swarm said.
    pub(crate) mode: Option<Mode>,
    /// The IDs of the secrets it uses.
    pub(crate) secrets: Vec<String>,
}

/// What the swarm has of the pool.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Observed {
    /// The overlay network's ID, if it exists.
    pub(crate) network: Option<String>,
    /// The pool's services.
    pub(crate) services: Vec<Service>,
    /// The pool's secrets: name and ID.
    pub(crate) secrets: Vec<(String, String)>,
}

/// Switches of `up --swarm` that change decisions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Options {
    /// Replace every task of every service (`--force-recreate`).
    pub(crate) force_recreate: bool,
    /// Remove orphans instead of reporting them.
    pub(crate) remove_orphans: bool,
}

/// Why an existing service is updated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum UpdateCause {
    /// `--force-recreate`: every task is replaced.
    Forced,
    /// Its tasks change (the replica count, the completion count, or service ↔ job).
    Mode { from: Option<Mode>, to: Mode },
    /// Its image changes.
    Image { from: Option<String>, to: String },
    /// Nothing the plan can see: sent again, Swarm replaces only the tasks whose spec changed.
    Resent,
}

/// One Swarm action of a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    /// Create the pool's overlay network.
    CreateNetwork {
        /// Its name.
        name: String,
    },
    /// Create a service that is missing.
    Create {
        /// The service.
        service: Desired,
    },
    /// Update an existing service to its wanted spec.
    Update {
        /// The service.
        service: Desired,
        /// Why.
        cause: UpdateCause,
    },
    /// Remove the sidecar service of a server no longer declared.
    RemoveSidecar {
        /// Its name.
        name: String,
        /// Swarm's ID.
        id: String,
    },
    /// Remove an agent service whose agent is no longer in the agentfile (`--remove-orphans`).
    RemoveOrphan {
        /// Its name.
        name: String,
        /// The agent it runs.
        agent: String,
    },
    /// Name an orphan without removing it.
    ReportOrphan {
        /// Its name.
        name: String,
        /// The agent it runs.
        agent: String,
    },
    /// Remove the pool's secrets no service uses any more.
    PruneSecrets {
        /// The names of those unused now (the updates may leave more unused).
        unused: Vec<String>,
    },
}

impl Op {
    /// Whether the op changes the swarm in a way the plan can see (an update sent again
    /// unchanged, a reported orphan and a prune with nothing unused do not): what the
    /// convergence property checks.
    #[cfg(test)]
    pub(crate) fn changes(&self) -> bool {
        match self {
            Op::Update { cause, .. } => *cause != UpdateCause::Resent,
            Op::ReportOrphan { .. } => false,
            Op::PruneSecrets { unused } => !unused.is_empty(),
            Op::CreateNetwork { .. }
            | Op::Create { .. }
            | Op::RemoveSidecar { .. }
            | Op::RemoveOrphan { .. } => true,
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::CreateNetwork { name } => write!(f, "create network {name}: missing"),
            Op::Create { service } => write!(
                f,
                "create service {}: missing ({}, {})",
                service.name,
                role(&service.role),
                service.mode
            ),
            Op::Update { service, cause } => {
                write!(f, "update service {}: ", service.name)?;
                match cause {
                    UpdateCause::Forced => {
                        write!(f, "--force-recreate (every task is replaced)")
                    }
                    UpdateCause::Mode {
                        from: Some(from),
                        to,
                    } => {
                        write!(f, "{from} → {to}")
                    }
                    UpdateCause::Mode { from: None, to } => write!(f, "? → {to}"),
                    UpdateCause::Image { from, to } => {
                        write!(f, "image {} → {to}", from.as_deref().unwrap_or("?"))
                    }
                    UpdateCause::Resent => write!(
                        f,
                        "sent again (Swarm replaces only the tasks whose spec changed)"
                    ),
                }
            }
            Op::RemoveSidecar { name, .. } => {
                write!(f, "remove service {name}: a sidecar no longer declared")
            }
            Op::RemoveOrphan { name, agent } => write!(
                f,
                "remove service {name}: orphan (agent `{agent}` is no longer in the agentfile)"
            ),
            Op::ReportOrphan { name, agent } => write!(
                f,
                "keep service {name}: orphan (agent `{agent}` is no longer in the agentfile; --remove-orphans removes it)"
            ),
            Op::PruneSecrets { unused } if unused.is_empty() => {
                write!(f, "prune secrets: none unused now")
            }
            Op::PruneSecrets { unused } => {
                write!(f, "prune secrets: {} no service uses", unused.join(", "))
            }
        }
    }
}

/// What a role's service is, for the plan's text.
fn role(role: &Role) -> String {
    match role {
        Role::Api => "the checkpoint API".into(),
        Role::Sidecar(server) => format!("MCP server `{server}`"),
        Role::Agent(agent) => format!("agent `{agent}`"),
    }
}

/// A plan: the ops in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Plan {
    /// What to do, in order.
    pub(crate) ops: Vec<Op>,
}

impl Plan {
    /// Whether any op changes the swarm (see [`Op::changes`]).
    #[cfg(test)]
    pub(crate) fn changes(&self) -> bool {
        self.ops.iter().any(Op::changes)
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for op in &self.ops {
            writeln!(f, "{op}")?;
        }
        Ok(())
    }
}

/// An image reference without the digest Swarm pins a registry image to (`x:1@sha256:…`).
fn unpinned(image: &str) -> &str {
    image.split_once('@').map_or(image, |(r, _)| r)
}

/// The plan (see the module's doc).
pub(crate) fn plan(wanted: &Wanted, observed: &Observed, options: Options) -> Plan {
    let mut ops = Vec::new();
    if observed.network.is_none() {
        ops.push(Op::CreateNetwork {
            name: wanted.network.clone(),
        });
    }
    let by_name = |name: &str| observed.services.iter().find(|s| s.name == name);
    let push_service = |ops: &mut Vec<Op>, want: &Desired| {
        let Some(have) = by_name(&want.name) else {
            ops.push(Op::Create {
                service: want.clone(),
            });
            return;
        };
        let cause = if options.force_recreate {
            UpdateCause::Forced
        } else if have.mode != Some(want.mode) {
            UpdateCause::Mode {
                from: have.mode,
                to: want.mode,
            }
        } else if have.image.as_deref().map(unpinned) != Some(unpinned(&want.image)) {
            UpdateCause::Image {
                from: have.image.clone(),
                to: want.image.clone(),
            }
        } else {
            UpdateCause::Resent
        };
        ops.push(Op::Update {
            service: want.clone(),
            cause,
        });
    };
    let (agents, others): (Vec<&Desired>, Vec<&Desired>) = wanted
        .services
        .iter()
        .partition(|d| matches!(d.role, Role::Agent(_)));
    for want in &others {
        push_service(&mut ops, want);
    }
    let mut removed = Vec::new();
    for have in observed
        .services
        .iter()
        .filter(|s| s.component == Component::Mcp)
    {
        let declared = wanted
            .services
            .iter()
            .any(|d| d.name == have.name && matches!(d.role, Role::Sidecar(_)));
        if !declared {
            removed.push(have.id.clone());
            ops.push(Op::RemoveSidecar {
                name: have.name.clone(),
                id: have.id.clone(),
            });
        }
    }
    for want in &agents {
        push_service(&mut ops, want);
    }
    for have in observed
        .services
        .iter()
        .filter(|s| s.component == Component::Runner)
    {
        let in_agentfile = wanted
            .services
            .iter()
            .any(|d| d.role == Role::Agent(have.agent.clone()));
        if in_agentfile {
            continue;
        }
        let (name, agent) = (have.name.clone(), have.agent.clone());
        if options.remove_orphans {
            removed.push(have.id.clone());
            ops.push(Op::RemoveOrphan { name, agent });
        } else {
            ops.push(Op::ReportOrphan { name, agent });
        }
    }
    // Secrets used by the services that stay (an update may change theirs: `apply` looks again).
    let used: Vec<&String> = observed
        .services
        .iter()
        .filter(|s| !removed.contains(&s.id))
        .flat_map(|s| &s.secrets)
        .collect();
    let unused = observed
        .secrets
        .iter()
        .filter(|(_, id)| !used.contains(&id))
        .map(|(name, _)| name.clone())
        .collect();
    ops.push(Op::PruneSecrets { unused });
    Plan { ops }
}

#[cfg(test)]
mod tests;
