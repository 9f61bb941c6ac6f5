//! A2A in the agentfile (docs/a2a.md): a `collaborators` entry that is a remote A2A agent
//! (`{name, a2a, secret?, about?}`, read here; checked against the file's agents and made into
//! an `ask_<name>` tool by `collaborators`), the check of its card's host against a restricted
//! `network:`, and an agent's `skills:` (what its A2A card lists), with their problems.

use super::*;
use crate::schema::{A2aRemote, SkillInfo};
use crate::security::Network;
use ninetrix_proto::api::{
    CARD_NAME_CHARS, CARD_TEXT_CHARS, MAX_SKILLS, SKILL_EXAMPLES, SKILL_ID_CHARS, SKILL_TAGS,
    is_skill_id,
};

/// A problem with a remote collaborator or `skills:`.
#[derive(Debug)]
pub(super) enum A2aProblem<'a> {
    /// A remote collaborator without `key` (`name` or `a2a`).
    Missing(&'static str),
    /// An `a2a` that is not an absolute http(s) URL with a host.
    CardUrl(&'a str),
    /// An `a2a` URL with credentials before the host (never repeated in the message).
    CardUrlCredentials,
    /// A remote collaborator named like an agent of the agentfile.
    NameIsAgent(&'a str),
    /// Remote collaborator `name`'s card host (`host:port`) is not allowed by the agent's
    /// restricted `network.egress`.
    HostNotAllowed { name: &'a str, host: String },
    /// A skill `id` that is not `[a-z0-9][a-z0-9_-]*` of at most 64 characters.
    SkillId(&'a str),
    /// A skill `id` listed twice.
    DuplicateSkill(&'a str),
    /// A skill without `key` (`id` or `name`).
    SkillMissing(&'static str),
    /// A skill text (`leaf`) longer than `max` characters (it has `len`), or empty.
    SkillText {
        leaf: &'a str,
        len: usize,
        max: usize,
    },
    /// More than `max` entries in a list (`leaf`: `skills`, `tags`, `examples`).
    TooMany { leaf: &'a str, max: usize },
}

impl A2aProblem<'_> {
    /// The diagnostic kind (and so the wire code).
    pub(super) fn kind(&self) -> DiagnosticKind {
        use DiagnosticKind as K;
        match self {
            A2aProblem::Missing(_) | A2aProblem::SkillMissing(_) => K::MissingKey,
            A2aProblem::CardUrl(_) => K::InvalidUrl,
            A2aProblem::CardUrlCredentials => K::SecretValue,
            A2aProblem::NameIsAgent(_) => K::InvalidCollaborator,
            A2aProblem::HostNotAllowed { .. } => K::EgressNotAllowed,
            A2aProblem::SkillId(_) => K::InvalidName,
            A2aProblem::DuplicateSkill(_) => K::DuplicateSetting,
            A2aProblem::SkillText { .. } | A2aProblem::TooMany { .. } => K::OutOfRange,
        }
    }

    /// Whether the offending span may be a secret (a URL with credentials).
    pub(super) fn redact(&self) -> bool {
        matches!(self, A2aProblem::CardUrlCredentials)
    }

    /// What is wrong.
    pub(super) fn message(&self) -> String {
        match self {
            A2aProblem::Missing(key) => format!("a remote A2A collaborator needs `{key}`"),
            A2aProblem::CardUrl(url) => format!(
                "`a2a` must be the http:// or https:// URL of the remote agent's card, with a \
                 host, found \"{url}\""
            ),
            A2aProblem::CardUrlCredentials => {
                "`a2a` holds credentials (`user:password@` before the host)".into()
            }
            A2aProblem::NameIsAgent(name) => {
                format!("remote collaborator `{name}` has the name of an agent of this agentfile")
            }
            A2aProblem::HostNotAllowed { name, host } => format!(
                "collaborator `{name}`'s card is on `{host}`, which the agent's `network.egress` \
                 does not allow"
            ),
            A2aProblem::SkillId(id) => format!(
                "`{id}` is not a valid skill id: lower-case letters, digits, `_` and `-`, \
                 starting with a letter or digit, at most {SKILL_ID_CHARS} characters"
            ),
            A2aProblem::DuplicateSkill(id) => format!("skill `{id}` is listed twice"),
            A2aProblem::SkillMissing(key) => format!("a skill needs `{key}`"),
            A2aProblem::SkillText { leaf, len: 0, .. } => format!("`{leaf}` is empty"),
            A2aProblem::SkillText { leaf, len, max } => {
                format!("`{leaf}` has {len} characters; at most {max} fit on an A2A card")
            }
            A2aProblem::TooMany { leaf, max } => {
                format!("`{leaf}` has more than {max} entries, the most an A2A card takes")
            }
        }
    }

    /// What to do.
    pub(super) fn help(&self) -> String {
        match self {
            A2aProblem::Missing("name") => "give it the name its tool is called by, e.g. `name: \
                crm` (the model calls `ask_crm`)"
                .into(),
            A2aProblem::Missing(_) => "give the URL of its agent card, e.g. `a2a: \
                https://crm.example.com/.well-known/agent-card.json`"
                .into(),
            A2aProblem::CardUrl(_) => "e.g. `a2a: \
                https://crm.example.com/.well-known/agent-card.json`: the card says where the \
                agent's endpoint is"
                .into(),
            A2aProblem::CardUrlCredentials => "never put credentials in the agentfile: name a \
                secret with `secret: CRM_A2A_TOKEN`, whose value is sent as `Authorization: \
                Bearer`"
                .into(),
            A2aProblem::NameIsAgent(name) => format!(
                "list the agent of this file by its name alone (`- {name}`), or give the remote \
                 agent another name"
            ),
            A2aProblem::HostNotAllowed { host, .. } => format!(
                "add `{host}` to the agent's `network.egress` (and the host of the endpoint its \
                 card names, when it is another), or remove the collaborator"
            ),
            A2aProblem::SkillId(_) => "e.g. `id: summarise`; the id is how callers name the \
                skill, unique within the agent"
                .into(),
            A2aProblem::DuplicateSkill(_) => "give each skill of the agent its own `id`".into(),
            A2aProblem::SkillMissing("id") => "give it an id, e.g. `id: summarise`".into(),
            A2aProblem::SkillMissing(_) => {
                "give it a name for people, e.g. `name: Summarise a topic`".into()
            }
            A2aProblem::SkillText { max, .. } => {
                format!("write 1 to {max} characters; a card is read by other agents' makers")
            }
            A2aProblem::TooMany { max, .. } => {
                format!("keep the {max} that matter most (docs/a2a.md)")
            }
        }
    }
}

/// A remote A2A collaborator entry as written: its name, card, secret and `about`, and where
/// its `a2a` is (for the network's check).
#[derive(Clone, Debug, Default)]
pub(super) struct RemoteIn {
    pub(super) name: Option<(String, Loc)>,
    pub(super) card: Option<(String, Loc)>,
    pub(super) secret: Option<String>,
    pub(super) about: Option<String>,
}

impl RemoteIn {
    /// The remote agent the entry names.
    pub(super) fn remote(&self) -> Option<A2aRemote> {
        Some(A2aRemote {
            card: self.card.as_ref()?.0.clone(),
            secret: self.secret.clone(),
        })
    }
}

pub(super) const REMOTE: Section<RemoteIn> = Section {
    what: "a remote collaborator",
    keys: &[
        ("name", |cx, r, f| {
            r.name = Some((cx.string(f.value, &f.path)?, f.value.loc));
            Some(())
        }),
        ("a2a", |cx, r, f| {
            let url = cx.string(f.value, &f.path)?;
            let problem = match approval::check_http_url(&url) {
                approval::UrlCheck::Ok => {
                    r.card = Some((url, f.value.loc));
                    return Some(());
                }
                approval::UrlCheck::Credentials => A2aProblem::CardUrlCredentials,
                approval::UrlCheck::Invalid => A2aProblem::CardUrl(&url),
            };
            cx.report(&f.path, f.value.loc, Problem::A2a(problem));
            None
        }),
        ("secret", |cx, r, f| {
            let name = cx.string(f.value, &f.path)?;
            if !names::is_valid_secret_name(&name) {
                cx.secret_name_error(&f.path, f.value.loc, &name);
                return None;
            }
            r.secret = Some(name);
            Some(())
        }),
        ("about", |cx, r, f| {
            let text = cx.string(f.value, &f.path)?;
            let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
            r.about = (!text.is_empty()).then_some(text);
            Some(())
        }),
    ],
    unsupported: &[],
};

/// One skill as written.
#[derive(Default)]
pub(super) struct SkillIn {
    id: Option<String>,
    name: Option<String>,
    skill: SkillInfo,
}

pub(super) const SKILL: Section<SkillIn> = Section {
    what: "a skill",
    keys: &[
        ("id", |cx, s, f| {
            let id = cx.string(f.value, &f.path)?;
            if !is_skill_id(&id) {
                cx.report(&f.path, f.value.loc, Problem::A2a(A2aProblem::SkillId(&id)));
                return None;
            }
            s.id = Some(id);
            Some(())
        }),
        ("name", |cx, s, f| {
            s.name = Some(cx.skill_text(&f, CARD_NAME_CHARS, false)?);
            Some(())
        }),
        ("description", |cx, s, f| {
            s.skill.description = cx.skill_text(&f, CARD_TEXT_CHARS, true)?;
            Some(())
        }),
        ("tags", |cx, s, f| {
            s.skill.tags = cx.skill_list(&f, SKILL_TAGS)?;
            Some(())
        }),
        ("examples", |cx, s, f| {
            s.skill.examples = cx.skill_list(&f, SKILL_EXAMPLES)?;
            Some(())
        }),
    ],
    unsupported: &[],
};

impl Cx {
    /// A remote collaborator entry (a mapping at `path`); `None` when it has errors (reported).
    pub(super) fn remote_collaborator(&mut self, node: &Node, path: &str) -> Option<RemoteIn> {
        let mut r = RemoteIn::default();
        let ok = self.dispatch(node, path, &REMOTE, &mut r)?;
        for (key, absent) in [("name", r.name.is_none()), ("a2a", r.card.is_none())] {
            // A key present but invalid is reported already.
            if absent && !has_key(node, key) {
                self.report(path, node.loc, Problem::A2a(A2aProblem::Missing(key)));
            }
        }
        (ok && r.name.is_some() && r.card.is_some()).then_some(r)
    }

    /// Whether `network` lets the agent reach remote collaborator `name`'s card (at `at`,
    /// `path`); reports it when not.
    pub(super) fn card_reachable(
        &mut self,
        network: &Network,
        name: &str,
        card: &str,
        (path, at): (&str, Loc),
    ) -> bool {
        if crate::network::egress_allows(network, card) {
            return true;
        }
        let host = crate::network::url_host_port(card)
            .map_or_else(|| card.to_string(), |(h, p)| format!("{h}:{p}"));
        let problem = A2aProblem::HostNotAllowed { name, host };
        self.report(path, at, Problem::A2a(problem));
        false
    }

    /// An agent's `skills:` (a list of `{id, name, description?, tags?, examples?}`); `None`
    /// when any has errors (reported).
    pub(super) fn skills(&mut self, node: &Node, path: &str) -> Option<Vec<SkillInfo>> {
        let Kind::Seq(items) = &node.kind else {
            self.type_error(path, node, "a list of skills");
            return None;
        };
        let mut ok = true;
        if items.len() > MAX_SKILLS {
            let problem = A2aProblem::TooMany {
                leaf: "skills",
                max: MAX_SKILLS,
            };
            self.report(path, node.loc, Problem::A2a(problem));
            ok = false;
        }
        let mut out: Vec<SkillInfo> = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let p = format!("{path}[{i}]");
            let mut s = SkillIn::default();
            let Some(item_ok) = self.dispatch(item, &p, &SKILL, &mut s) else {
                ok = false;
                continue;
            };
            for (key, absent) in [("id", s.id.is_none()), ("name", s.name.is_none())] {
                if absent && !has_key(item, key) {
                    self.report(&p, item.loc, Problem::A2a(A2aProblem::SkillMissing(key)));
                    ok = false;
                }
            }
            let (Some(id), Some(name), true) = (s.id, s.name, item_ok) else {
                ok = false;
                continue;
            };
            if out.iter().any(|o| o.id == id) {
                let at = key_value_loc(item, "id").unwrap_or(item.loc);
                let problem = A2aProblem::DuplicateSkill(&id);
                self.report(&join(&p, "id"), at, Problem::A2a(problem));
                ok = false;
                continue;
            }
            out.push(SkillInfo {
                id,
                name,
                ..s.skill
            });
        }
        ok.then_some(out)
    }

    /// A skill's text at `f`: at most `max` characters, and not empty unless `may_be_empty`.
    fn skill_text(&mut self, f: &Field<'_>, max: usize, may_be_empty: bool) -> Option<String> {
        let text = self.string(f.value, &f.path)?;
        let len = text.trim().chars().count();
        if (len == 0 && !may_be_empty) || len > max {
            let problem = A2aProblem::SkillText {
                leaf: leaf(&f.path),
                len,
                max,
            };
            self.report(&f.path, f.value.loc, Problem::A2a(problem));
            return None;
        }
        Some(text.trim().to_string())
    }

    /// A skill's list of texts at `f`: at most `most.0` entries of 1 to `most.1` characters.
    fn skill_list(&mut self, f: &Field<'_>, most: (usize, usize)) -> Option<Vec<String>> {
        let list = self.string_list(f.value, &f.path)?;
        let leaf_name = leaf(&f.path);
        let mut ok = true;
        if list.len() > most.0 {
            let problem = A2aProblem::TooMany {
                leaf: leaf_name,
                max: most.0,
            };
            self.report(&f.path, f.value.loc, Problem::A2a(problem));
            ok = false;
        }
        for (i, (text, loc)) in list.iter().enumerate() {
            let len = text.trim().chars().count();
            if len == 0 || len > most.1 {
                let problem = A2aProblem::SkillText {
                    leaf: leaf_name,
                    len,
                    max: most.1,
                };
                self.report(&format!("{}[{i}]", f.path), *loc, Problem::A2a(problem));
                ok = false;
            }
        }
        ok.then(|| {
            list.into_iter()
                .map(|(t, _)| t.trim().to_string())
                .collect()
        })
    }
}

/// Whether mapping `node` has `key`.
fn has_key(node: &Node, key: &str) -> bool {
    matches!(&node.kind, Kind::Map(entries) if entries.iter().any(|(k, _)| k.name == key))
}

/// Where the value of `key` in mapping `node` is.
fn key_value_loc(node: &Node, key: &str) -> Option<Loc> {
    let Kind::Map(entries) = &node.kind else {
        return None;
    };
    entries
        .iter()
        .find(|(k, _)| k.name == key)
        .map(|(_, v)| v.loc)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{assert_error, errors_at, valid};
    use crate::schema::{A2aRemote, AgentSpec, SkillInfo, ToolSpec};
    use crate::tools::Effect;

    const CARD: &str = "https://crm.example.com/.well-known/agent-card.json";

    /// A file whose agent `lead` (line 2) has the given lines from line 3 (at column 5), and an
    /// agent `writer` after it.
    fn lead(lines: &str) -> String {
        let body: String = lines.lines().map(|l| format!("    {l}\n")).collect();
        format!("agents:\n  lead:\n{body}  writer: {{}}\n")
    }

    fn agent(text: &str) -> AgentSpec {
        valid(text).agentfile.agents.remove(0)
    }

    #[test]
    fn a_remote_collaborator_is_an_ask_tool_with_its_card_and_secret() {
        let a = agent(&lead(&format!(
            "collaborators:\n  - writer\n  - name: crm\n    a2a: {CARD}\n    secret: \
             CRM_A2A_TOKEN\n    about: \"Looks up\n      customers\"\ntransfer_timeout: 10m"
        )));
        assert_eq!(a.collaborators, ["writer"], "the pool's agents only");
        let names: Vec<&str> = a.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["ask_writer", "ask_crm"]);
        let remote = A2aRemote {
            card: CARD.into(),
            secret: Some("CRM_A2A_TOKEN".into()),
        };
        assert_eq!(
            a.tools[1],
            ToolSpec::a2a("crm", Some("Looks up customers".into()), remote.clone())
        );
        assert_eq!(
            (a.tools[1].effect, a.tools[1].effect_pinned),
            (Effect::Write, true)
        );
        assert!(a.secrets.contains(&"CRM_A2A_TOKEN".to_string()));
        assert_eq!(a.execution.transfer_timeout_secs, 600);
        assert_eq!(
            a.a2a_collaborators().collect::<Vec<_>>(),
            [("crm", &remote)]
        );
        let json = serde_json::to_string(&a).unwrap();
        assert!(!json.contains("\"a2a\":null"), "{json}");
        assert_eq!(serde_json::from_str::<AgentSpec>(&json).unwrap(), a);
        // Remote only: `transfer_timeout` has an effect, no warning; no secret, no `about`.
        let parsed = valid(&lead(&format!(
            "collaborators: [{{ name: crm, a2a: \"{CARD}\" }}]\ntransfer_timeout: 1m"
        )));
        assert!(parsed.warnings.diagnostics.is_empty());
        let a = &parsed.agentfile.agents[0];
        assert!(a.collaborators.is_empty());
        assert_eq!(a.tools[0].handoff.as_ref().unwrap().about, None);
        assert_eq!(
            a.a2a_collaborators().next().unwrap().1.secret,
            None,
            "no secret unless named"
        );
    }

    #[test]
    fn a_remote_entry_needs_a_name_and_an_http_card_url() {
        assert_error(
            &lead("collaborators: [{ name: crm }]"),
            "missing_key",
            (3, 21),
            "a remote A2A collaborator needs `a2a`",
        );
        assert_error(
            &lead(&format!("collaborators: [{{ a2a: \"{CARD}\" }}]")),
            "missing_key",
            (3, 21),
            "a remote A2A collaborator needs `name`",
        );
        let d = assert_error(
            &lead("collaborators: [{ name: crm, a2a: \"ftp://crm.example.com/card\" }]"),
            "invalid_url",
            (3, 39),
            "`a2a` must be the http:// or https:// URL of the remote agent's card, with a host, \
             found \"ftp://crm.example.com/card\"",
        );
        assert_eq!(d.path, "agents.lead.collaborators[0].a2a");
        assert_error(
            &lead("collaborators: [{ name: crm, a2a: /card.json }]"),
            "invalid_url",
            (3, 39),
            "`a2a` must be the http:// or https:// URL of the remote agent's card, with a host, \
             found \"/card.json\"",
        );
        let d = assert_error(
            &lead("collaborators: [{ name: crm, a2a: \"https://u:hunter2@crm.example.com/c\" }]"),
            "secret_value",
            (3, 39),
            "`a2a` holds credentials (`user:password@` before the host)",
        );
        assert!(d.redact && !d.message.contains("hunter2"));
        assert!(d.help.unwrap().contains("secret: CRM_A2A_TOKEN"));
    }

    #[test]
    fn a_remote_name_is_a_valid_unused_name_and_keys_are_checked() {
        let entry = |name: &str| {
            lead(&format!(
                "collaborators: [{{ name: {name}, a2a: \"{CARD}\" }}]"
            ))
        };
        let d = assert_error(
            &entry("Crm"),
            "invalid_name",
            (3, 29),
            "`Crm` is not a valid collaborator name",
        );
        assert_eq!(d.path, "agents.lead.collaborators[0].name");
        let d = assert_error(
            &entry("writer"),
            "invalid_collaborator",
            (3, 29),
            "remote collaborator `writer` has the name of an agent of this agentfile",
        );
        assert!(d.help.unwrap().contains("(`- writer`)"));
        assert_error(
            &entry("human"),
            "invalid_collaborator",
            (3, 29),
            "`human` cannot be a collaborator: its tool would be `ask_human`, the builtin that \
             asks a person",
        );
        assert_error(
            &lead(&format!(
                "collaborators:\n  - writer\n  - {{ name: writer2, a2a: \"{CARD}\" }}\n  - {{ \
                 name: writer2, a2a: \"{CARD}\" }}"
            )),
            "duplicate_collaborator",
            (6, 17),
            "collaborator `writer2` is listed twice",
        );
        let d = assert_error(
            &lead(&format!(
                "collaborators: [{{ name: crm, a2a: \"{CARD}\", secrets: [X] }}]"
            )),
            "unknown_key",
            (3, 94),
            "unknown key `secrets` in a remote collaborator",
        );
        assert_eq!(d.help.unwrap(), "did you mean `secret`?");
        assert_error(
            &lead(&format!(
                "collaborators: [{{ name: crm, a2a: \"{CARD}\", secret: crm-token }}]"
            )),
            "invalid_name",
            (3, 102),
            "`crm-token` is not a valid secret name",
        );
    }

    #[test]
    fn under_restricted_egress_the_card_host_must_be_allowed() {
        let text = |egress: &str| {
            lead(&format!(
                "collaborators: [{{ name: crm, a2a: \"{CARD}\" }}]\nnetwork: {{ egress: \
                 [{egress}] }}"
            ))
        };
        let d = assert_error(
            &text("api.github.com"),
            "egress_not_allowed",
            (3, 39),
            "collaborator `crm`'s card is on `crm.example.com:443`, which the agent's \
             `network.egress` does not allow",
        );
        assert_eq!(d.path, "agents.lead.collaborators[0].a2a");
        assert!(
            d.help
                .unwrap()
                .starts_with("add `crm.example.com:443` to the agent's `network.egress`")
        );
        for allowed in [
            "crm.example.com",
            "\"*.example.com\"",
            "\"crm.example.com:443\"",
        ] {
            assert_eq!(agent(&text(allowed)).tools.len(), 1, "{allowed}");
        }
    }

    #[test]
    fn skills_are_listed_on_the_spec_in_order() {
        let a = agent(&lead(
            "skills:\n  - id: summarise\n    name: Summarise a topic\n    description: Reads \
             and cites\n    tags: [research]\n    examples: [\"Summarise A2A\"]\n  - { id: \
             look_up-2, name: Look up }",
        ));
        assert_eq!(
            a.skills,
            [
                SkillInfo {
                    id: "summarise".into(),
                    name: "Summarise a topic".into(),
                    description: "Reads and cites".into(),
                    tags: vec!["research".into()],
                    examples: vec!["Summarise A2A".into()],
                },
                SkillInfo {
                    id: "look_up-2".into(),
                    name: "Look up".into(),
                    ..SkillInfo::default()
                },
            ]
        );
    }

    #[test]
    fn skills_are_checked_as_the_card_takes_them() {
        let d = assert_error(
            &lead("skills: [{ id: Sum, name: S }]"),
            "invalid_name",
            (3, 20),
            "`Sum` is not a valid skill id: lower-case letters, digits, `_` and `-`, starting \
             with a letter or digit, at most 64 characters",
        );
        assert_eq!(d.path, "agents.lead.skills[0].id");
        assert_error(
            &lead(&format!("skills: [{{ id: {}, name: S }}]", "a".repeat(65))),
            "invalid_name",
            (3, 20),
            &format!(
                "`{}` is not a valid skill id: lower-case letters, digits, `_` and `-`, \
                 starting with a letter or digit, at most 64 characters",
                "a".repeat(65)
            ),
        );
        assert_error(
            &lead("skills:\n  - { id: s, name: S }\n  - { id: s, name: T }"),
            "duplicate_setting",
            (5, 15),
            "skill `s` is listed twice",
        );
        assert_error(
            &lead("skills: [{ id: s }]"),
            "missing_key",
            (3, 14),
            "a skill needs `name`",
        );
        assert_error(
            &lead("skills: [{ id: s, name: \" \" }]"),
            "out_of_range",
            (3, 29),
            "`name` is empty",
        );
        assert_error(
            &lead(&format!("skills: [{{ id: s, name: {} }}]", "n".repeat(201))),
            "out_of_range",
            (3, 29),
            "`name` has 201 characters; at most 200 fit on an A2A card",
        );
        let tags = vec!["t"; 17].join(", ");
        assert_error(
            &lead(&format!("skills: [{{ id: s, name: S, tags: [{tags}] }}]")),
            "out_of_range",
            (3, 38),
            "`tags` has more than 16 entries, the most an A2A card takes",
        );
        assert_error(
            &lead(&format!(
                "skills: [{{ id: s, name: S, examples: [\"{}\"] }}]",
                "e".repeat(1001)
            )),
            "out_of_range",
            (3, 43),
            "`examples` has 1001 characters; at most 1000 fit on an A2A card",
        );
        let many: Vec<String> = (0..33)
            .map(|i| format!("{{ id: s{i}, name: S }}"))
            .collect();
        assert_error(
            &lead(&format!("skills: [{}]", many.join(", "))),
            "out_of_range",
            (3, 13),
            "`skills` has more than 32 entries, the most an A2A card takes",
        );
        assert_eq!(
            errors_at(&lead("skills: [{ id: s, name: S, tag: [x] }]")),
            [("unknown_key", 3, 32)]
        );
    }

    #[test]
    fn the_card_info_is_the_metadata_and_skills_or_one_skill_named_after_the_agent() {
        let a = agent(&lead("metadata: { name: Lead, goal: \"Run   the team\" }"));
        let card = a.card_info();
        assert_eq!(card.display_name.as_deref(), Some("Lead"));
        assert_eq!(card.description.as_deref(), Some("Run   the team"));
        assert_eq!(
            card.skills,
            [SkillInfo {
                id: "lead".into(),
                name: "Lead".into(),
                description: "Run   the team".into(),
                ..SkillInfo::default()
            }]
        );
        // The description wins over the goal; the skills listed replace the default.
        let a = agent(&lead(
            "metadata: { description: Leads, goal: g }\nskills: [{ id: x, name: X }]",
        ));
        let card = a.card_info();
        assert_eq!(
            (card.display_name, card.description.as_deref()),
            (None, Some("Leads"))
        );
        assert_eq!(card.skills.len(), 1);
        assert_eq!(card.skills[0].id, "x");
        // Nothing: the agent's key names its one skill; long texts are cut to the API's limits.
        let bare = agent("agents:\n  bare: {}\n").card_info();
        assert_eq!(
            (bare.skills[0].id.as_str(), bare.skills[0].name.as_str()),
            ("bare", "bare")
        );
        let long = agent(&lead(&format!("metadata: {{ name: {} }}", "n".repeat(300))));
        assert_eq!(long.card_info().display_name.unwrap().chars().count(), 200);
    }
}
