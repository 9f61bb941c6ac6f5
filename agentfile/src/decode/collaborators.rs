//! `collaborators` and `transfer_timeout`: who an agent may hand work to — the agents of the
//! same agentfile (by name) and remote A2A agents (`{name, a2a, …}`, read by `a2a`) — each
//! becoming one of its tools, `ask_<name>`, and how long such a call waits for the reply.
//!
//! A collaborator is checked against every agent of the file (its name, whether it is durable,
//! its metadata), wherever that agent is declared, so decoding happens in two steps:
//! 1. [`Cx::collaborators_in`] reads the list while the agent's keys are dispatched: types,
//!    `human`, names too long for a tool, repeats, a remote entry's keys.
//! 2. [`Cx::handoffs`] checks each entry against the [`Roster`] of the file's agents once every
//!    agent is read (the agent itself, unknown names, batch jobs on either side; a remote one
//!    named like an agent, or whose card the agent's network does not reach) and makes the
//!    `ask_<name>` tools; [`Cx::attach_handoffs`] adds them to the agent's tools, before the
//!    script and `human_approval.actions` are checked against those.

use super::a2a::{A2aProblem, RemoteIn};
use super::problem::CollaboratorGap;
use super::*;
use crate::security::Network;
use ninetrix_proto::handoffs;

/// The longest `about` a handoff tool gets, in characters (longer descriptions are cut).
const MAX_ABOUT_CHARS: usize = 300;

/// `collaborators:` as written, after the checks that need only the list.
#[derive(Clone, Debug)]
pub(super) struct CollaboratorsIn {
    /// Where the `collaborators` key is (or the agent's name, when it has none).
    at: Loc,
    /// The key's dotted path.
    path: String,
    /// Whether the list names anyone (even with errors).
    listed: bool,
    /// The entries that passed, in order.
    entries: Vec<CollaboratorIn>,
    /// Whether every entry did.
    valid: bool,
}

impl CollaboratorsIn {
    /// No `collaborators` key; `at` is the agent's name, `agent_path` its path.
    pub(super) fn none(at: Loc, agent_path: &str) -> Self {
        Self {
            at,
            path: join(agent_path, "collaborators"),
            listed: false,
            entries: Vec::new(),
            valid: true,
        }
    }

    /// Whether the agent lists any collaborator.
    pub(super) fn listed(&self) -> bool {
        self.listed
    }
}

/// One entry of `collaborators`.
#[derive(Clone, Debug)]
struct CollaboratorIn {
    name: String,
    loc: Loc,
    path: String,
    /// A remote A2A agent's entry (`None`: an agent of the file, by name).
    remote: Option<RemoteIn>,
}

/// What an agent's collaborators need to know of every agent of the file.
#[derive(Default)]
pub(super) struct Roster {
    members: Vec<Member>,
}

/// One agent, as its callers see it.
struct Member {
    name: String,
    /// Whether it is durable; `None` when its `execution` is invalid (reported already).
    durable: Option<bool>,
    /// What its callers' models are told about it.
    about: Option<String>,
}

impl Roster {
    /// Adds agent `name`: whether it is durable (`None`: unknown) and its metadata (`None`:
    /// invalid).
    pub(super) fn add(&mut self, name: &str, durable: Option<bool>, metadata: Option<&Metadata>) {
        self.members.push(Member {
            name: name.to_string(),
            durable,
            about: metadata.and_then(about),
        });
    }

    fn get(&self, name: &str) -> Option<&Member> {
        self.members.iter().find(|m| m.name == name)
    }
}

/// One collaborator that names another agent of the file: its tool, and where it is listed.
#[derive(Debug)]
pub(super) struct Handoff {
    tool: ToolSpec,
    loc: Loc,
    path: String,
}

impl Handoff {
    /// The collaborator's name.
    pub(super) fn agent(&self) -> &str {
        self.tool
            .handoff
            .as_ref()
            .map_or("", |target| target.agent.as_str())
    }

    /// Whether the collaborator is an agent of the pool (not a remote A2A agent).
    pub(super) fn local(&self) -> bool {
        self.tool.handoff.as_ref().is_some_and(|t| t.a2a.is_none())
    }
}

/// A one-line description of an agent for the models of its callers: its `description`, else
/// "Role: {role}. Goal: {goal}." from whichever of the two are set, else `None`. White space is
/// collapsed to single spaces, and at most [`MAX_ABOUT_CHARS`] characters are kept.
pub(super) fn about(m: &Metadata) -> Option<String> {
    let line = |text: &Option<String>| {
        text.as_deref()
            .map(|t| t.split_whitespace().collect::<Vec<_>>().join(" "))
            .filter(|t| !t.is_empty())
    };
    let sentence = |text: String| {
        if text.ends_with(['.', '!', '?']) {
            text
        } else {
            format!("{text}.")
        }
    };
    let text = line(&m.description).or_else(|| {
        let parts: Vec<String> = [("Role", line(&m.role)), ("Goal", line(&m.goal))]
            .into_iter()
            .filter_map(|(label, text)| text.map(|t| format!("{label}: {}", sentence(t))))
            .collect();
        (!parts.is_empty()).then(|| parts.join(" "))
    })?;
    if text.chars().count() <= MAX_ABOUT_CHARS {
        return Some(text);
    }
    let cut: String = text.chars().take(MAX_ABOUT_CHARS - 1).collect();
    Some(format!("{}…", cut.trim_end()))
}

impl Cx {
    /// Step 1: `collaborators:` at `path` (its key at `at`): a list of agent names, each at most
    /// [`handoffs::MAX_AGENT_NAME_LEN`] characters, not `human`, listed once. Invalid entries
    /// are reported and left out; the others are kept, so step 2 still checks them.
    pub(super) fn collaborators_in(&mut self, node: &Node, path: &str, at: Loc) -> CollaboratorsIn {
        let mut c = CollaboratorsIn {
            at,
            path: path.to_string(),
            listed: false,
            entries: Vec::new(),
            valid: true,
        };
        let Kind::Seq(items) = &node.kind else {
            self.type_error(
                path,
                node,
                "a list of agent names and remote agents (`{ name, a2a }`)",
            );
            c.valid = false;
            return c;
        };
        c.listed = !items.is_empty();
        for (i, item) in items.iter().enumerate() {
            let p = format!("{path}[{i}]");
            let (name, loc, remote) = match &item.kind {
                Kind::Map(_) => match self.remote_collaborator(item, &p) {
                    Some(r) => {
                        let (name, at) = r.name.clone().unwrap_or_default();
                        (name, at, Some(r))
                    }
                    None => {
                        c.valid = false;
                        continue;
                    }
                },
                _ => match self.string(item, &p) {
                    Some(name) => (name, item.loc, None),
                    None => {
                        c.valid = false;
                        continue;
                    }
                },
            };
            let len = name.chars().count();
            let problem = if remote.is_some() && !names::is_valid_name(&name) {
                self.invalid_name(&join(&p, "name"), loc, &name, "collaborator name");
                c.valid = false;
                continue;
            } else if handoffs::tool_name(&name) == tools::ASK_HUMAN {
                Some(Problem::InvalidCollaborator {
                    name: &name,
                    why: CollaboratorGap::AskHuman,
                })
            } else if len > handoffs::MAX_AGENT_NAME_LEN {
                Some(Problem::InvalidCollaborator {
                    name: &name,
                    why: CollaboratorGap::TooLong(len),
                })
            } else if c.entries.iter().any(|e| e.name == name) {
                Some(Problem::DuplicateCollaborator(&name))
            } else {
                None
            };
            if let Some(problem) = problem {
                self.report(&p, loc, problem);
                c.valid = false;
                continue;
            }
            c.entries.push(CollaboratorIn {
                name,
                loc,
                path: p,
                remote,
            });
        }
        c
    }

    /// Step 2: agent `agent`'s collaborators, checked against the file's agents: each must be
    /// another agent, and both it and `agent` durable; a remote one must not be named like an
    /// agent, and its card must be within the agent's `network` (when it is valid). Returns the
    /// handoffs of the entries that name another agent (also those refused for durability, so
    /// the agent's tools do not get a second, misleading error about them) or a remote one, and
    /// whether every entry passed.
    pub(super) fn handoffs(
        &mut self,
        agent: &str,
        c: &CollaboratorsIn,
        roster: &Roster,
        network: Option<&Network>,
    ) -> (Vec<Handoff>, bool) {
        let mut ok = c.valid;
        if c.listed && roster.get(agent).and_then(|m| m.durable) == Some(false) {
            let problem = Problem::BatchCollaborator {
                agent,
                collaborator: None,
            };
            self.report(&c.path, c.at, problem);
            ok = false;
        }
        let mut out = Vec::new();
        for entry in &c.entries {
            let name = entry.name.as_str();
            if let Some(remote) = &entry.remote {
                match self.remote_handoff(entry, remote, roster, network) {
                    Some(h) => out.push(h),
                    None => ok = false,
                }
                continue;
            }
            if name == agent {
                let problem = Problem::InvalidCollaborator {
                    name,
                    why: CollaboratorGap::Itself,
                };
                self.report(&entry.path, entry.loc, problem);
                ok = false;
                continue;
            }
            let Some(member) = roster.get(name) else {
                let others: Vec<&str> = roster
                    .members
                    .iter()
                    .map(|m| m.name.as_str())
                    .filter(|n| *n != agent)
                    .collect();
                let problem = Problem::UnknownCollaborator {
                    name,
                    agent,
                    closest: closest(name, &others),
                    others: others.clone(),
                };
                self.report(&entry.path, entry.loc, problem);
                ok = false;
                continue;
            };
            if member.durable == Some(false) {
                let problem = Problem::BatchCollaborator {
                    agent,
                    collaborator: Some(name),
                };
                self.report(&entry.path, entry.loc, problem);
                ok = false;
            }
            out.push(Handoff {
                tool: ToolSpec::handoff(name, member.about.clone()),
                loc: entry.loc,
                path: entry.path.clone(),
            });
        }
        (out, ok)
    }

    /// The `ask_<name>` tool of remote collaborator `entry`, unless it is named like an agent
    /// of the file or its card is outside the agent's `network` (reported).
    fn remote_handoff(
        &mut self,
        entry: &CollaboratorIn,
        remote: &RemoteIn,
        roster: &Roster,
        network: Option<&Network>,
    ) -> Option<Handoff> {
        let name = entry.name.as_str();
        let name_path = join(&entry.path, "name");
        if roster.get(name).is_some() {
            let problem = Problem::A2a(A2aProblem::NameIsAgent(name));
            self.report(&name_path, entry.loc, problem);
            return None;
        }
        let target = remote.remote()?;
        if let (Some(network), Some((_, at))) = (network, &remote.card) {
            let place = (join(&entry.path, "a2a"), *at);
            if !self.card_reachable(network, name, &target.card, (&place.0, place.1)) {
                return None;
            }
        }
        Some(Handoff {
            tool: ToolSpec::a2a(name, remote.about.clone(), target),
            loc: entry.loc,
            path: name_path,
        })
    }

    /// Appends the handoffs' tools to the agent's `tools`, in order. A tool the agent already
    /// has by that name is an error. Returns whether there was none.
    pub(super) fn attach_handoffs(
        &mut self,
        tools: &mut Vec<ToolSpec>,
        list: Vec<Handoff>,
    ) -> bool {
        let mut ok = true;
        for h in list {
            if tools.iter().any(|t| t.offers(&h.tool.name)) {
                let problem = Problem::HandoffToolTaken {
                    collaborator: h.agent(),
                    tool: h.tool.name.clone(),
                };
                self.report(&h.path, h.loc, problem);
                ok = false;
                continue;
            }
            tools.push(h.tool);
        }
        ok
    }

    /// An agent's `transfer_timeout`: a duration from 1 second to 7 days.
    pub(super) fn transfer_timeout(&mut self, node: &Node, path: &str) -> Option<u64> {
        self.duration(node, path, DurationField::TransferTimeout)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{assert_error, errors, errors_at, valid};
    use super::*;
    use crate::schema::{ApprovalAction, HandoffTarget};

    const SCRIPTED: &str = "runtime: { provider: scripted, script: [hi] }";

    /// A file whose agent `lead` (line 3) has the given keys, one per line from line 4 at
    /// column 5, followed by agents `researcher` and `writer`.
    ///
    /// ```text
    /// 1 agents:
    /// 2   lead:
    /// 3     runtime: …
    /// 4     <first line>
    /// ```
    fn lead(lines: &str) -> String {
        let body: String = lines.lines().map(|l| format!("    {l}\n")).collect();
        format!(
            "agents:\n  lead:\n    {SCRIPTED}\n{body}  researcher:\n    {SCRIPTED}\n    \
             metadata: {{ description: Finds sources. }}\n  writer:\n    {SCRIPTED}\n    \
             metadata: {{ role: technical writer, goal: clear prose }}\n"
        )
    }

    #[test]
    fn collaborators_become_handoff_tools_in_order() {
        let text =
            lead("tools: [file_read]\ncollaborators: [writer, researcher]\ntransfer_timeout: 15m");
        let parsed = valid(&text);
        assert!(parsed.warnings.diagnostics.is_empty());
        let a = parsed.agentfile.agent("lead").unwrap();
        assert_eq!(a.collaborators, ["writer", "researcher"]);
        let names: Vec<&str> = a.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["file_read", "ask_writer", "ask_researcher"]);
        assert_eq!(
            a.tools[1],
            ToolSpec::handoff(
                "writer",
                Some("Role: technical writer. Goal: clear prose.".into())
            )
        );
        assert_eq!(
            a.tools[2].handoff,
            Some(HandoffTarget {
                agent: "researcher".into(),
                about: Some("Finds sources.".into()),
                a2a: None,
            })
        );
        assert_eq!(
            (a.tools[2].effect, a.tools[2].effect_pinned),
            (Effect::Write, true)
        );
        assert!(a.offers("ask_researcher"));
        assert_eq!(a.execution.transfer_timeout_secs, 900);
        assert_eq!(
            a.execution.max_delegation_depth,
            defaults::MAX_DELEGATION_DEPTH
        );
        // The others have none, and the defaults.
        let w = parsed.agentfile.agent("writer").unwrap();
        assert!(w.collaborators.is_empty());
        assert_eq!(
            w.execution.transfer_timeout_secs,
            defaults::TRANSFER_TIMEOUT_SECS
        );
        // The spec round-trips through the JSON the runner gets.
        let json = serde_json::to_string(a).unwrap();
        let back: AgentSpec = serde_json::from_str(&json).unwrap();
        assert_eq!(&back, a);
    }

    #[test]
    fn about_is_the_description_else_role_and_goal() {
        let m = |description: Option<&str>, role: Option<&str>, goal: Option<&str>| Metadata {
            description: description.map(String::from),
            role: role.map(String::from),
            goal: goal.map(String::from),
            ..Metadata::default()
        };
        assert_eq!(
            about(&m(Some("Finds\n  sources.\n"), Some("r"), None)).as_deref(),
            Some("Finds sources.")
        );
        assert_eq!(
            about(&m(None, Some("researcher"), Some("find facts"))).as_deref(),
            Some("Role: researcher. Goal: find facts.")
        );
        assert_eq!(
            about(&m(None, Some("researcher"), None)).as_deref(),
            Some("Role: researcher.")
        );
        assert_eq!(
            about(&m(Some("  "), None, Some("Be right!"))).as_deref(),
            Some("Goal: Be right!")
        );
        assert_eq!(about(&m(None, None, None)), None);
        let long = about(&m(Some(&"word ".repeat(100)), None, None)).unwrap();
        assert_eq!(long.chars().count(), MAX_ABOUT_CHARS);
        assert!(long.ends_with("word…"), "{long}");
        // A collaborator without any of them: no `about`.
        let text = "agents:\n  a:\n    collaborators: [b]\n  b: {}\n";
        let af = valid(text).agentfile;
        assert_eq!(af.agents[0].tools, [ToolSpec::handoff("b", None)]);
    }

    #[test]
    fn collaborators_may_be_declared_later_and_form_cycles() {
        let text = "agents:\n  a:\n    collaborators: [b]\n  b:\n    collaborators: [a]\n";
        let af = valid(text).agentfile;
        assert_eq!(af.agent("a").unwrap().collaborators, ["b"]);
        assert_eq!(af.agent("b").unwrap().collaborators, ["a"]);
        assert!(af.agent("b").unwrap().offers("ask_a"));
    }

    #[test]
    fn an_empty_list_is_no_collaborators() {
        let text = lead("collaborators: []");
        let a = valid(&text).agentfile.agents.remove(0);
        assert!(a.collaborators.is_empty());
        assert!(a.tools.is_empty());
    }

    #[test]
    fn unknown_collaborators_get_a_suggestion() {
        let d = assert_error(
            &lead("collaborators: [writer, reseacher]"),
            "unknown_collaborator",
            (4, 29),
            "`reseacher` in agent `lead`'s `collaborators` is not an agent of this agentfile",
        );
        assert_eq!(d.path, "agents.lead.collaborators[1]");
        assert_eq!(
            d.help.unwrap(),
            "did you mean `researcher`? The other agents are: researcher, writer; a \
             collaborator is another agent of the same agentfile: declare it under `agents:`, \
             or remove it from `collaborators`"
        );
        let d = assert_error(
            "agents:\n  a:\n    collaborators: [zzz]\n",
            "unknown_collaborator",
            (3, 21),
            "`zzz` in agent `a`'s `collaborators` is not an agent of this agentfile",
        );
        assert!(d.help.unwrap().starts_with("it is the only agent; "));
    }

    #[test]
    fn itself_human_long_names_and_repeats_are_refused() {
        let d = assert_error(
            &lead("collaborators: [lead]"),
            "invalid_collaborator",
            (4, 21),
            "agent `lead` lists itself in `collaborators`",
        );
        assert!(d.help.unwrap().starts_with("remove it"));
        let text = lead("collaborators: [human]").replace("  writer:", "  human: {}\n  writer:");
        let d = assert_error(
            &text,
            "invalid_collaborator",
            (4, 21),
            "`human` cannot be a collaborator: its tool would be `ask_human`, the builtin that \
             asks a person",
        );
        assert!(d.help.unwrap().contains("`ask_human` tool"));
        let long = "a".repeat(61);
        let d = assert_error(
            &lead(&format!("collaborators: [{long}]")),
            "invalid_collaborator",
            (4, 21),
            &format!(
                "collaborator `{long}` has 61 characters, too long for its tool name \
                 `ask_<agent>` (at most 60 characters)"
            ),
        );
        assert!(d.help.unwrap().contains("at most 60 characters"));
        // 60 is the limit of the tool name; no agent can have such a name, so it is unknown.
        assert_eq!(
            errors(&lead(&format!("collaborators: [{}]", "a".repeat(60))))[0]
                .kind
                .code(),
            "unknown_collaborator"
        );
        assert_error(
            &lead("collaborators:\n  - writer\n  - researcher\n  - writer"),
            "duplicate_collaborator",
            (7, 9),
            "collaborator `writer` is listed twice",
        );
    }

    #[test]
    fn both_sides_of_a_handoff_must_be_durable() {
        let d = assert_error(
            &lead("collaborators: [writer]\nexecution: { durability: false }"),
            "batch_collaborator",
            (4, 5),
            "agent `lead` is a batch job (`execution.durability: false`), so it cannot hand \
             work to collaborators",
        );
        assert_eq!(d.path, "agents.lead.collaborators");
        assert!(d.help.unwrap().contains("caller's turn waits"));
        let text = lead("collaborators: [researcher, writer]").replace(
            "clear prose }\n",
            "clear prose }\n    execution: { durability: false }\n",
        );
        let d = assert_error(
            &text,
            "batch_collaborator",
            (4, 33),
            "collaborator `writer` is a batch job (`execution.durability: false`), so it cannot \
             take handed-off work",
        );
        assert_eq!(d.path, "agents.lead.collaborators[1]");
        assert!(
            d.help
                .unwrap()
                .contains("`execution.durability: true` on `writer`")
        );
        // The shared `execution` decides too, and an agent's own overrides it.
        let text = "execution: { durability: false }\nagents:\n  a:\n    collaborators: [b]\n    \
                    execution: { durability: true }\n  b: {}\n";
        assert_error(
            text,
            "batch_collaborator",
            (4, 21),
            "collaborator `b` is a batch job (`execution.durability: false`), so it cannot take \
             handed-off work",
        );
    }

    #[test]
    fn every_problem_is_reported_in_one_pass() {
        let text = lead("collaborators: [lead, human, writer, writer, nobody, 7]\ntools: [shel]");
        assert_eq!(
            errors_at(&text),
            [
                ("invalid_collaborator", 4, 21),
                ("invalid_collaborator", 4, 27),
                ("duplicate_collaborator", 4, 42),
                ("unknown_collaborator", 4, 50),
                ("wrong_type", 4, 58),
                ("unknown_tool", 5, 13),
            ]
        );
    }

    #[test]
    fn wrong_types() {
        assert_error(
            &lead("collaborators: writer"),
            "wrong_type",
            (4, 20),
            "`collaborators` must be a list of agent names and remote agents (`{ name, a2a }`), \
             found the string \"writer\"",
        );
        assert_error(
            &lead("collaborators: [[writer]]"),
            "wrong_type",
            (4, 21),
            "`collaborators[0]` must be a string, found a list",
        );
    }

    #[test]
    fn a_tool_of_the_same_name_is_a_conflict() {
        let mut cx = Cx::default();
        let mut roster = Roster::default();
        roster.add("a", Some(true), None);
        roster.add("b", Some(true), Some(&Metadata::default()));
        let c = CollaboratorsIn {
            at: Loc::START,
            path: "agents.a.collaborators".into(),
            listed: true,
            entries: vec![CollaboratorIn {
                name: "b".into(),
                loc: Loc {
                    line: 3,
                    column: 21,
                    len: 1,
                },
                path: "agents.a.collaborators[0]".into(),
                remote: None,
            }],
            valid: true,
        };
        let (list, ok) = cx.handoffs("a", &c, &roster, None);
        assert!(ok && cx.diags.is_empty());
        let mut tools = vec![ToolSpec {
            name: "ask_b".into(),
            ..ToolSpec::builtin(tools::builtin("shell").unwrap())
        }];
        assert!(!cx.attach_handoffs(&mut tools, list));
        assert_eq!(tools.len(), 1);
        let d = &cx.diags[0];
        assert_eq!(
            (d.kind.code(), d.line, d.column, d.path.as_str()),
            ("duplicate_tool", 3, 21, "agents.a.collaborators[0]")
        );
        assert_eq!(
            d.message,
            "collaborator `b`'s tool `ask_b` has the name of a tool the agent already has"
        );
        assert!(d.help.is_some());
    }

    #[test]
    fn scripts_and_approval_gates_may_name_handoff_tools() {
        let text = "agents:\n  a:\n    runtime:\n      provider: scripted\n      script:\n        \
                    - tool_calls: [{ name: ask_b, args: { task: sum 2 and 2 } }]\n        - \
                    done\n    collaborators: [b]\n    governance:\n      human_approval: { \
                    actions: [ask_b] }\n  b: {}\n";
        let a = valid(text).agentfile.agents.remove(0);
        assert_eq!(
            a.governance.human_approval.unwrap().actions,
            [ApprovalAction::Tool("ask_b".into())]
        );
        // A gate on a collaborator the agent does not have names the ones it has.
        let text = "agents:\n  a:\n    collaborators: [b]\n    governance:\n      \
                    human_approval: { actions: [ask_c] }\n  b: {}\n  c: {}\n";
        let d = assert_error(
            text,
            "undeclared_tool",
            (5, 35),
            "`ask_c` in `human_approval.actions` is not one of agent `a`'s tools",
        );
        assert!(d.help.unwrap().contains("has these tools: ask_b"));
    }

    #[test]
    fn transfer_timeout_units_and_range() {
        for (written, secs) in [
            ("30s", 30),
            ("15m", 900),
            ("2h", 7200),
            ("1d", 86_400),
            ("7d", 604_800),
            ("45", 45),
            ("\"45\"", 45),
            ("1", 1),
        ] {
            let text = lead(&format!(
                "collaborators: [writer]\ntransfer_timeout: {written}"
            ));
            let a = valid(&text).agentfile.agents.remove(0);
            assert_eq!(a.execution.transfer_timeout_secs, secs, "{written}");
        }
        let timeout = |v: &str| lead(&format!("collaborators: [writer]\ntransfer_timeout: {v}"));
        assert_error(
            &timeout("soon"),
            "invalid_value",
            (5, 23),
            "`transfer_timeout` must be a duration such as `30s`, `15m`, `24h` or `7d`, found \
             \"soon\"",
        );
        let d = assert_error(
            &timeout("8d"),
            "out_of_range",
            (5, 23),
            "`transfer_timeout` must be from 1 second to 7 days, found \"8d\"",
        );
        assert!(d.help.unwrap().contains("the default is `5m`"));
        assert_error(
            &timeout("0"),
            "out_of_range",
            (5, 23),
            "`transfer_timeout` must be from 1 second to 7 days, found 0",
        );
        assert_error(
            &timeout("604801"),
            "out_of_range",
            (5, 23),
            "`transfer_timeout` must be from 1 second to 7 days, found 604801",
        );
        assert_error(
            &timeout("1.5"),
            "wrong_type",
            (5, 23),
            "`transfer_timeout` must be a duration such as `5m`, or whole seconds, found the \
             number 1.5",
        );
        // Misplaced under `execution`: pointed at the agent.
        let d = assert_error(
            &lead("execution: { transfer_timeout: 5m }"),
            "unknown_key",
            (4, 18),
            "unknown key `transfer_timeout` in execution",
        );
        assert_eq!(
            d.help.unwrap(),
            "`transfer_timeout` belongs under `the agent`"
        );
    }

    #[test]
    fn transfer_timeout_without_collaborators_is_a_warning() {
        for lines in [
            "transfer_timeout: 5m",
            "collaborators: []\ntransfer_timeout: 5m",
        ] {
            let parsed = valid(&lead(lines));
            let w = &parsed.warnings.diagnostics;
            assert_eq!(w.len(), 1, "{w:?}");
            let line = if lines.starts_with("transfer") { 4 } else { 5 };
            assert_eq!(
                (
                    w[0].severity,
                    w[0].kind.code(),
                    w[0].line,
                    w[0].column,
                    w[0].message.as_str()
                ),
                (
                    Severity::Warning,
                    "transfer_timeout_unused",
                    line,
                    5,
                    "`transfer_timeout` has no effect: agent `lead` has no collaborators"
                )
            );
            assert!(w[0].help.as_deref().unwrap().contains("collaborators"));
            let a = &parsed.agentfile.agents[0];
            assert_eq!(a.execution.transfer_timeout_secs, 300);
        }
    }

    #[test]
    fn max_delegation_depth_is_an_execution_setting_shared_or_own() {
        let text = "execution: { max_delegation_depth: 2 }\nagents:\n  a:\n    collaborators: \
                    [b]\n  b:\n    execution: { max_delegation_depth: 32 }\n";
        let af = valid(text).agentfile;
        assert_eq!(af.agent("a").unwrap().execution.max_delegation_depth, 2);
        assert_eq!(af.agent("b").unwrap().execution.max_delegation_depth, 32);
        for (value, message) in [
            (
                "0",
                "`max_delegation_depth` must be between 1 and 32, found 0",
            ),
            (
                "33",
                "`max_delegation_depth` must be between 1 and 32, found 33",
            ),
        ] {
            let d = assert_error(
                &lead(&format!("execution:\n  max_delegation_depth: {value}")),
                "out_of_range",
                (5, 29),
                message,
            );
            assert_eq!(d.path, "agents.lead.execution.max_delegation_depth");
        }
        assert_error(
            &format!("execution: {{ max_delegation_depth: deep }}\n{}", lead("")),
            "wrong_type",
            (1, 36),
            "`max_delegation_depth` must be a whole number, found the string \"deep\"",
        );
    }
}
