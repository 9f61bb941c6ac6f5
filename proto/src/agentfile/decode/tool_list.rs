//! `tools`: builtin names, Ninetrix aliases, effect overrides, and the tool sources that are
//! not supported yet.

use super::*;

impl Cx {
    pub(super) fn tools(&mut self, node: &Node, path: &str) -> Option<Vec<ToolSpec>> {
        if let Kind::Str(s) = &node.kind
            && s == "all"
        {
            return Some(
                tools::BUILTINS
                    .iter()
                    .map(|b| ToolSpec {
                        name: b.name.into(),
                        effect: b.effect,
                        effect_pinned: false,
                    })
                    .collect(),
            );
        }
        let Kind::Seq(items) = &node.kind else {
            self.type_error(path, node, "a list of tools (or `all`)");
            return None;
        };
        let mut out: Vec<ToolSpec> = Vec::new();
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            let p = format!("{path}[{i}]");
            let (name, name_loc, effect) = match &item.kind {
                Kind::Str(s) => (s.clone(), item.loc, None),
                Kind::Map(_) => {
                    let mut tool = ToolIn::default();
                    let Some(field_ok) = self.dispatch(item, &p, &TOOL, &mut tool) else {
                        ok = false;
                        continue;
                    };
                    let Some((name, loc)) = tool.name else {
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
                    (name, loc, tool.effect)
                }
                _ => {
                    self.type_error(&p, item, "a tool name or `{ name, effect }`");
                    ok = false;
                    continue;
                }
            };
            let Some(resolved) = self.tool_names(&name, name_loc, &p) else {
                ok = false;
                continue;
            };
            for builtin in resolved {
                if out.iter().any(|t| t.name == builtin.name) {
                    self.report(&p, name_loc, Problem::DuplicateTool(builtin.name));
                    ok = false;
                    continue;
                }
                out.push(ToolSpec {
                    name: builtin.name.to_string(),
                    effect: effect.unwrap_or(builtin.effect),
                    effect_pinned: effect.is_some(),
                });
            }
        }
        ok.then_some(out)
    }

    /// Resolves a tool name (ours, `builtin://x`, or a Ninetrix alias) to builtins.
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
        if let Some((_, ours)) = tools::NINETRIX_ALIASES.iter().find(|(n, _)| *n == bare) {
            return Some(ours.iter().filter_map(|n| tools::builtin(n)).collect());
        }
        let gap = if let Some((scheme, _)) = name.split_once("://") {
            Some(ToolGap::Source(match scheme {
                "mcp" => "MCP servers are",
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

/// A tool written as `{ name, effect }`.
#[derive(Default)]
pub(super) struct ToolIn {
    /// The tool's name and where the name is.
    name: Option<(String, Loc)>,
    /// The effect that overrides the builtin's.
    effect: Option<Effect>,
}

pub(super) const TOOL: Section<ToolIn> = Section {
    what: "a tool",
    keys: &[
        ("name", |cx, tool, f| {
            tool.name = Some((cx.string(f.value, &f.path)?, f.value.loc));
            Some(())
        }),
        ("effect", |cx, tool, f| {
            let text = cx.string(f.value, &f.path)?;
            let Some(effect) = Effect::parse(&text) else {
                cx.report(&f.path, f.value.loc, Problem::UnknownEffect(&text));
                return None;
            };
            tool.effect = Some(effect);
            Some(())
        }),
    ],
    unsupported: &["source", "actions", "auth", "dependencies", "base_url"],
};
