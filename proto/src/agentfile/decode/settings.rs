//! `execution`, `governance`, `env` and `secrets`: run settings, limits, and the rules that keep
//! secret values out of the agentfile.

use super::*;

impl Cx {
    pub(super) fn execution_in(&mut self, node: &Node, path: &str) -> Option<ExecutionIn> {
        let mut e = ExecutionIn::default();
        self.dispatch(node, path, &EXECUTION, &mut e)?.then_some(e)
    }

    pub(super) fn execution(
        &mut self,
        e: ExecutionIn,
        runtime_max_turns: Option<(u32, Loc)>,
        agent_path: &str,
        agent_loc: Loc,
    ) -> Option<Execution> {
        let path = join(agent_path, "execution");
        let max_turns = match (e.max_turns, runtime_max_turns) {
            (Some((a, _)), Some((b, loc))) if a != b => {
                self.error(DiagnosticKind::DuplicateSetting, &join(agent_path, "runtime.max_turns"), loc, "`max_turns` is set both in `runtime` and in `execution` with different values")
                    .help = Some("keep `execution.max_turns` (ninetrix's place for it) and remove `runtime.max_turns`".into());
                return None;
            }
            (Some((n, _)), _) | (None, Some((n, _))) => n,
            (None, None) => defaults::MAX_TURNS,
        };
        let durability = e.durability.is_none_or(|(b, _)| b);
        let replicas = e.replicas.map_or(1, |(n, _)| n);
        if !durability && replicas > 1 {
            let loc = e.replicas.map_or(agent_loc, |(_, l)| l);
            self.error(DiagnosticKind::BatchReplicas, &join(&path, "replicas"), loc, format!("a batch agent (`durability: false`) runs once, so it cannot have {replicas} replicas"))
                .help = Some("remove `replicas`, or set `durability: true` for a warm pool".into());
            return None;
        }
        Some(Execution {
            durability,
            replicas,
            max_turns,
            task: e.task,
            resume: e.resume.unwrap_or(ResumeMode::Truncate),
        })
    }

    pub(super) fn governance(&mut self, node: &Node, path: &str) -> Option<f64> {
        let mut budget = None;
        self.dispatch(node, path, &GOVERNANCE, &mut budget)?;
        budget
    }

    pub(super) fn env(&mut self, node: &Node, path: &str) -> Option<BTreeMap<String, String>> {
        let Kind::Map(entries) = &node.kind else {
            self.type_error(path, node, "a mapping of names to values");
            return None;
        };
        let mut env = BTreeMap::new();
        let mut ok = true;
        for (k, v) in entries {
            let p = join(path, &k.name);
            if !names::is_valid_env_name(&k.name) {
                self.error(
                    DiagnosticKind::InvalidName,
                    &p,
                    k.loc,
                    format!("`{}` is not a valid environment variable name", k.name),
                )
                .help = Some("use letters, digits and `_`, not starting with a digit".into());
                ok = false;
                continue;
            }
            if k.name.starts_with("AGENTFILE_") {
                self.error(DiagnosticKind::ReservedEnv, &p, k.loc, format!("`{}` is set by ninetrix itself", k.name))
                    .help = Some("names starting with AGENTFILE_ are reserved for the runner; choose another name".into());
                ok = false;
                continue;
            }
            let value = match &v.kind {
                Kind::Str(s) => s.clone(),
                Kind::Int(i) => i.to_string(),
                Kind::Float(f) => f.to_string(),
                Kind::Bool(b) => b.to_string(),
                _ => {
                    self.error(
                        DiagnosticKind::WrongType,
                        &p,
                        v.loc,
                        format!(
                            "`{}` must be a string, number or boolean, found {}",
                            k.name,
                            v.kind.type_name()
                        ),
                    )
                    .help = Some("environment values are plain text; quote the value".into());
                    ok = false;
                    continue;
                }
            };
            if names::looks_like_secret_value(&value)
                || (names::looks_like_secret_name(&k.name) && !value.is_empty())
            {
                let d = self.warning(
                    DiagnosticKind::SecretInEnv,
                    &p,
                    v.loc,
                    format!("`{}` looks like a secret in plain `env:`", k.name),
                );
                d.help = Some(format!(
                    "env values end up in the container's configuration and the agentfile; move it to `secrets: [{}]` and provide the value on the host",
                    if names::is_valid_secret_name(&k.name) {
                        k.name.clone()
                    } else {
                        k.name.to_ascii_uppercase()
                    }
                ));
                d.redact = true;
            }
            env.insert(k.name.clone(), value);
        }
        ok.then_some(env)
    }

    pub(super) fn secrets(&mut self, node: &Node, path: &str) -> Option<Vec<(String, Loc)>> {
        match &node.kind {
            Kind::Seq(items) => {
                let mut out: Vec<(String, Loc)> = Vec::new();
                let mut ok = true;
                for (i, item) in items.iter().enumerate() {
                    let p = format!("{path}[{i}]");
                    let Kind::Str(name) = &item.kind else {
                        self.error(
                            DiagnosticKind::WrongType,
                            &p,
                            item.loc,
                            format!("a secret must be a name, found {}", item.kind.type_name()),
                        )
                        .help =
                            Some("list secret names, e.g. `secrets: [ANTHROPIC_API_KEY]`".into());
                        ok = false;
                        continue;
                    };
                    if names::is_valid_secret_name(name) {
                        if out.iter().any(|(n, _)| n == name) {
                            self.error(
                                DiagnosticKind::DuplicateSecret,
                                &p,
                                item.loc,
                                format!("secret `{name}` is listed twice"),
                            );
                            ok = false;
                        } else {
                            out.push((name.clone(), item.loc));
                        }
                    } else {
                        self.secret_name_error(&p, item.loc, name);
                        ok = false;
                    }
                }
                ok.then_some(out)
            }
            Kind::Map(entries) => {
                let first = entries.first().map_or(node.loc, |(_, v)| v.loc);
                let d = self.error(
                    DiagnosticKind::SecretValue,
                    path,
                    first,
                    "`secrets` lists secret names, not values",
                );
                d.help = Some(format!(
                    "never put secret values in the agentfile; write `secrets: [{}]` and provide the values on the host (environment or a secrets file)",
                    entries
                        .iter()
                        .map(|(k, _)| k.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
                d.redact = true;
                None
            }
            _ => {
                self.error(
                    DiagnosticKind::WrongType,
                    path,
                    node.loc,
                    format!(
                        "`secrets` must be a list of names, found {}",
                        node.kind.type_name()
                    ),
                )
                .help = Some("e.g. `secrets: [ANTHROPIC_API_KEY]`".into());
                None
            }
        }
    }

    pub(super) fn secret_name_error(&mut self, path: &str, loc: Loc, name: &str) {
        let looks_secret = names::looks_like_secret_value(name)
            || (name.len() >= 24
                && !name.contains(' ')
                && name.chars().any(|c| c.is_ascii_digit())
                && name.chars().any(|c| c.is_ascii_lowercase()));
        if looks_secret {
            let d = self.error(
                DiagnosticKind::SecretValue,
                path,
                loc,
                "this looks like a secret value, not a secret name",
            );
            d.help = Some("never put secret values in the agentfile; list the secret's name (e.g. `ANTHROPIC_API_KEY`) and provide its value on the host".into());
            d.redact = true;
        } else {
            let upper = name.to_ascii_uppercase().replace(['-', '.', ' '], "_");
            let hint = if names::is_valid_secret_name(&upper) {
                format!(", e.g. `{upper}`")
            } else {
                String::new()
            };
            self.error(
                DiagnosticKind::InvalidName,
                path,
                loc,
                format!("`{name}` is not a valid secret name"),
            )
            .help = Some(format!(
                "secret names use upper-case letters, digits and `_`{hint}"
            ));
        }
    }
}

pub(super) const EXECUTION: Section<ExecutionIn> = Section {
    what: "execution",
    keys: &[
        ("durability", |cx, e, f| {
            e.durability = Some((cx.boolean(f.value, &f.path)?, f.value.loc));
            Some(())
        }),
        ("replicas", |cx, e, f| {
            let n = cx.integer(f.value, &f.path, 1, defaults::MAX_REPLICAS)?;
            e.replicas = Some((n, f.value.loc));
            Some(())
        }),
        ("max_turns", |cx, e, f| {
            e.max_turns = Some((cx.integer(f.value, &f.path, 1, 1000)?, f.value.loc));
            Some(())
        }),
        ("task", |cx, e, f| {
            if matches!(f.value.kind, Kind::Null) {
                return Some(());
            }
            let task = cx.string(f.value, &f.path)?;
            if task.trim().is_empty() {
                cx.error(
                    DiagnosticKind::EmptyValue,
                    &f.path,
                    f.value.loc,
                    "`task` is empty",
                )
                .help = Some("give the batch job's input, or remove `task`".into());
                return None;
            }
            e.task = Some(task);
            Some(())
        }),
        ("resume", |cx, e, f| {
            let mode = cx.string(f.value, &f.path)?;
            e.resume = Some(match mode.as_str() {
                "truncate" => ResumeMode::Truncate,
                "complete" => ResumeMode::Complete,
                other => {
                    cx.error(DiagnosticKind::InvalidValue, &f.path, f.value.loc, format!("unknown resume mode `{other}`"))
                        .help = Some("`truncate` re-runs an interrupted turn from its input; `complete` finishes its pending tool calls".into());
                    return None;
                }
            });
            Some(())
        }),
    ],
    unsupported: &[
        "mode",
        "verify_steps",
        "max_steps",
        "on_step_failure",
        "verifier",
        "thinking",
    ],
};

/// `governance:`'s state is the budget per run, when one is given and valid.
pub(super) const GOVERNANCE: Section<Option<f64>> = Section {
    what: "governance",
    keys: &[("max_budget_per_run", |cx, budget, f| {
        let b = cx.number(f.value, &f.path)?;
        if b <= 0.0 {
            cx.error(DiagnosticKind::OutOfRange, &f.path, f.value.loc, format!("`max_budget_per_run` must be more than 0, found {b}"))
                .help = Some("give a budget in US dollars, e.g. `max_budget_per_run: 1.00`, or remove it for no limit".into());
            return None;
        }
        *budget = Some(b);
        Some(())
    })],
    unsupported: &["budget_warning_usd", "human_approval", "rate_limit"],
};
