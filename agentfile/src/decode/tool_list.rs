//! `tools`: builtin names, Ninetrix aliases, `mcp://` entries, effect overrides, verifiers, the
//! memory tool's `scope`, and the tool sources that are not supported yet.

use ninetrix_proto::api::MemoryScope;

use super::jobs::JobsProblem;
use super::mcp::{VERIFY, VerifyIn};
use super::*;

impl Cx {
    pub(super) fn tools(&mut self, node: &Node, path: &str) -> Option<Vec<ToolSpec>> {
        if let Kind::Str(s) = &node.kind
            && s == "all"
        {
            return Some(tools::BUILTINS.iter().map(ToolSpec::builtin).collect());
        }
        let Kind::Seq(items) = &node.kind else {
            self.type_error(path, node, "a list of tools (or `all`)");
            return None;
        };
        let mut out: Vec<ToolSpec> = Vec::new();
        // How the entry that gave each of `out` is written (`jobs` for `job_start`).
        let mut given_by: Vec<String> = Vec::new();
        // Verifiers are resolved once the whole list is known: (index in `out`, verify, where).
        let mut verifiers: Vec<(usize, VerifyIn, Loc, String)> = Vec::new();
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            let p = format!("{path}[{i}]");
            let mut tool = ToolIn::default();
            let (name, name_loc) = match &item.kind {
                Kind::Str(s) => (s.clone(), item.loc),
                Kind::Map(_) => {
                    let Some(field_ok) = self.dispatch(item, &p, &TOOL, &mut tool) else {
                        ok = false;
                        continue;
                    };
                    // Ninetrix's `{ name, source }`: `source` says what the tool is, `name`
                    // only labels it.
                    let Some((name, loc)) = tool.source.take().or(tool.name.take()) else {
                        if field_ok {
                            self.report(&join(&p, "name"), item.loc, Problem::MissingToolName);
                        }
                        ok = false;
                        continue;
                    };
                    if !field_ok {
                        ok = false;
                        continue;
                    }
                    (name, loc)
                }
                _ => {
                    self.type_error(&p, item, "a tool name or `{ name, effect }`");
                    ok = false;
                    continue;
                }
            };
            let secrets = tool.secrets.take();
            if let Some((_, at)) = &secrets
                && name.starts_with("mcp://")
            {
                self.report(&join(&p, "secrets"), *at, Problem::SecretsNotShell(&name));
                ok = false;
                continue;
            }
            let specs = if name.starts_with("mcp://") {
                if let Some((_, at)) = tool.scope.take() {
                    self.report(&join(&p, "scope"), at, Problem::ScopeNotMemory(&name));
                    ok = false;
                    continue;
                }
                let allow = std::mem::take(&mut tool.allow);
                match self.mcp_tool(&name, name_loc, &p, tool.effect, allow) {
                    Some(spec) => vec![spec],
                    None => {
                        ok = false;
                        continue;
                    }
                }
            } else {
                if !tool.allow.is_empty() {
                    self.report(&join(&p, "allow"), name_loc, Problem::AllowOnOneTool(&name));
                    ok = false;
                    continue;
                }
                let Some(resolved) = self.tool_names(&name, name_loc, &p) else {
                    ok = false;
                    continue;
                };
                if !self.job_entry_keys(&name, &resolved, &tool, secrets.as_ref(), &p) {
                    ok = false;
                    continue;
                }
                if let Some((_, at)) = &secrets
                    && !resolved.iter().all(|b| b.name == "shell")
                {
                    self.report(&join(&p, "secrets"), *at, Problem::SecretsNotShell(&name));
                    ok = false;
                    continue;
                }
                let scope = tool.scope.take();
                if let Some((_, at)) = &scope
                    && !resolved.iter().all(|b| b.name == tools::MEMORY)
                {
                    self.report(&join(&p, "scope"), *at, Problem::ScopeNotMemory(&name));
                    ok = false;
                    continue;
                }
                resolved
                    .into_iter()
                    .map(|b| ToolSpec {
                        effect: tool.effect.unwrap_or(b.effect),
                        effect_pinned: tool.effect.is_some(),
                        scope: scope.map(|(s, _)| s),
                        secrets: secrets.clone().map(|(s, _)| s).unwrap_or_default(),
                        ..ToolSpec::builtin(b)
                    })
                    .collect()
            };
            // One report per entry, however many of its tools are listed already.
            let mut duplicate = false;
            for spec in specs {
                if let Some(first) = out.iter().position(|t| t.name == spec.name) {
                    if !duplicate {
                        let problem = Problem::DuplicateTool {
                            name: &spec.name,
                            first: &given_by[first],
                            again: &name,
                        };
                        self.report(&p, name_loc, problem);
                    }
                    duplicate = true;
                    ok = false;
                    continue;
                }
                if let Some((v, at)) = tool.verify.take() {
                    verifiers.push((out.len(), v, at, join(&p, "verify")));
                }
                out.push(spec);
                given_by.push(name.clone());
            }
        }
        for (index, v, at, p) in verifiers {
            match self.verify(v, &out, at, &p) {
                Some(verify) => out[index].verify = Some(verify),
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    /// The keys an entry that gives job tools (`name`, resolved to `resolved`) may not have:
    /// `secrets` (jobs are given none), and on the `jobs` toolset `effect` and `verify` (its
    /// tools differ). `false` when it has one (reported).
    fn job_entry_keys(
        &mut self,
        name: &str,
        resolved: &[&tools::Builtin],
        tool: &ToolIn,
        secrets: Option<&(Vec<String>, Loc)>,
        path: &str,
    ) -> bool {
        let mut ok = true;
        if !resolved.iter().any(|b| tools::is_job_tool(b.name)) {
            return ok;
        }
        if let Some((_, at)) = secrets {
            let problem = Problem::Jobs(JobsProblem::Secrets(name));
            self.report(&join(path, "secrets"), *at, problem);
            ok = false;
        }
        if name.strip_prefix("builtin://").unwrap_or(name) == tools::JOBS_TOOLSET {
            let keys = [
                ("effect", tool.effect_at),
                ("verify", tool.verify.as_ref().map(|(_, at)| *at)),
            ];
            for (key, at) in keys {
                if let Some(at) = at {
                    let problem = Problem::Jobs(JobsProblem::ToolsetKey(key));
                    self.report(&join(path, key), at, problem);
                    ok = false;
                }
            }
        }
        ok
    }

    /// Resolves a tool name (ours, `builtin://x`, a toolset, or a Ninetrix alias) to builtins.
    pub(super) fn tool_names(
        &mut self,
        name: &str,
        loc: Loc,
        path: &str,
    ) -> Option<Vec<&'static tools::Builtin>> {
        let bare = name.strip_prefix("builtin://").unwrap_or(name);
        if let Some(b) = tools::builtin(bare) {
            return Some(vec![b]);
        }
        if let Some(ours) = tools::group(bare) {
            return Some(ours.iter().filter_map(|n| tools::builtin(n)).collect());
        }
        let gap = if let Some((scheme, _)) = name.split_once("://") {
            Some(ToolGap::Source(match scheme {
                "composio" => "Composio tools are",
                "hub" => "Ninetrix Hub tools are",
                "openapi" => "OpenAPI tools are",
                _ => "tool sources other than builtins are",
            }))
        } else if name.starts_with("./") || name.starts_with('/') {
            Some(ToolGap::LocalFile)
        } else if tools::NINETRIX_UNSUPPORTED.contains(&bare) {
            Some(ToolGap::NinetrixBuiltin(bare))
        } else {
            None
        };
        let problem = match gap {
            Some(gap) => Problem::UnsupportedTool { name, gap },
            None => {
                let all: Vec<&str> = tools::BUILTINS
                    .iter()
                    .map(|b| b.name)
                    .chain(tools::TOOLSETS.iter().map(|(n, _)| *n))
                    .chain(tools::NINETRIX_ALIASES.iter().map(|(n, _)| *n))
                    .collect();
                let closest = closest(bare, &all);
                Problem::UnknownTool { name, closest }
            }
        };
        self.report(path, loc, problem);
        None
    }
}

/// A tool written as `{ name, effect, allow, verify }`.
#[derive(Default)]
pub(super) struct ToolIn {
    /// The tool's name and where the name is.
    name: Option<(String, Loc)>,
    /// The effect that overrides the builtin's (or the MCP server's).
    effect: Option<Effect>,
    /// Where the `effect` key is.
    effect_at: Option<Loc>,
    /// `source:` (the public Ninetrix's key for what the tool is; `name` then only labels it).
    source: Option<(String, Loc)>,
    /// For `mcp://<server>`: only these of its tools (`allow:`, or Ninetrix's `actions:`).
    allow: Vec<String>,
    /// The verifier of a write, and where `verify:` is.
    verify: Option<(VerifyIn, Loc)>,
    /// For `memory`: whose memory (`scope:`), and where the value is.
    scope: Option<(MemoryScope, Loc)>,
    /// For `shell`: the secrets its processes get as environment variables (`secrets:`), and
    /// where the key is.
    secrets: Option<(Vec<String>, Loc)>,
}

/// `allow:` (and Ninetrix's `actions:`): which of an MCP server's tools.
fn allow(cx: &mut Cx, tool: &mut ToolIn, f: Field<'_>) -> Option<()> {
    let list = cx.string_list(f.value, &f.path)?;
    tool.allow = list.into_iter().map(|(s, _)| s).collect();
    Some(())
}

pub(super) const TOOL: Section<ToolIn> = Section {
    what: "a tool",
    keys: &[
        ("name", |cx, tool, f| {
            tool.name = Some((cx.string(f.value, &f.path)?, f.value.loc));
            Some(())
        }),
        ("effect", |cx, tool, f| {
            tool.effect = Some(cx.effect(f.value, &f.path)?);
            tool.effect_at = Some(f.key.loc);
            Some(())
        }),
        ("allow", allow),
        ("source", |cx, tool, f| {
            tool.source = Some((cx.string(f.value, &f.path)?, f.value.loc));
            Some(())
        }),
        ("actions", allow),
        ("scope", |cx, tool, f| {
            let text = cx.string(f.value, &f.path)?;
            let Some(scope) = MemoryScope::parse(&text) else {
                cx.report(&f.path, f.value.loc, Problem::UnknownMemoryScope(&text));
                return None;
            };
            tool.scope = Some((scope, f.value.loc));
            Some(())
        }),
        ("secrets", |cx, tool, f| {
            let names = cx.secrets(f.value, &f.path)?;
            tool.secrets = Some((names.into_iter().map(|(n, _)| n).collect(), f.key.loc));
            Some(())
        }),
        ("verify", |cx, tool, f| {
            let mut v = VerifyIn::default();
            if !cx.dispatch(f.value, &f.path, &VERIFY, &mut v)? {
                return None;
            }
            tool.verify = Some((v, f.key.loc));
            Some(())
        }),
    ],
    unsupported: &["auth", "dependencies", "base_url"],
};
