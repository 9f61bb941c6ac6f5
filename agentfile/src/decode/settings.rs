//! `execution`, `governance`, `env` and `secrets`: run settings, budgets (the run's, and those
//! beyond it that the checkpoint API keeps), and the rules that keep secret values out of the
//! agentfile.

use super::approval::ApprovalIn;
use super::*;
use ninetrix_proto::triggers::schedule::{ScheduleError, Spec};

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
                self.report(
                    &join(agent_path, "runtime.max_turns"),
                    loc,
                    Problem::MaxTurnsTwice,
                );
                return None;
            }
            (Some((n, _)), _) | (None, Some((n, _))) => n,
            (None, None) => defaults::MAX_TURNS,
        };
        let durability = e.durable();
        let replicas = e.replicas.map_or(1, |(n, _)| n);
        if !durability && replicas > 1 {
            let loc = e.replicas.map_or(agent_loc, |(_, l)| l);
            self.report(
                &join(&path, "replicas"),
                loc,
                Problem::BatchReplicas(replicas),
            );
            return None;
        }
        Some(Execution {
            durability,
            replicas,
            max_turns,
            task: e.task,
            resume: e.resume.unwrap_or(ResumeMode::Truncate),
            max_concurrent_sessions: e
                .max_concurrent_sessions
                .unwrap_or(defaults::MAX_CONCURRENT_SESSIONS),
            max_delegation_depth: e
                .max_delegation_depth
                .unwrap_or(defaults::MAX_DELEGATION_DEPTH),
            // A key of the agent itself (`transfer_timeout`), applied in `Cx::agent`.
            transfer_timeout_secs: defaults::TRANSFER_TIMEOUT_SECS,
            on_message_while_busy: e.on_message_while_busy.unwrap_or_default(),
            interrupt_grace_secs: e.interrupt_grace.unwrap_or(defaults::INTERRUPT_GRACE_SECS),
            snapshots: self.snapshots(e.snapshots.as_ref(), durability, agent_path),
        })
    }

    /// `governance:` at `path`; `shared` for the top-level one. `None` when it is not a
    /// mapping; keys with errors are left unset (and reported).
    pub(super) fn governance(
        &mut self,
        node: &Node,
        path: &str,
        shared: bool,
    ) -> Option<GovernanceIn> {
        let mut g = GovernanceIn {
            shared,
            ..GovernanceIn::default()
        };
        self.dispatch(node, path, &GOVERNANCE, &mut g)?;
        Some(g)
    }

    /// Agent `agent_path`'s governance: its own (`own`) with the top-level one's (`shared`)
    /// gaps filled key by key — an own `human_approval` replaces the shared one as a whole, and
    /// the pool's budget per day is always the top level's. The [`Governance`] has no
    /// `human_approval` yet: the one returned beside it is resolved against the agent's tools.
    pub(super) fn agent_governance(
        &mut self,
        mut own: GovernanceIn,
        shared: &GovernanceIn,
        agent_path: &str,
    ) -> (Governance, Option<ApprovalIn>) {
        let approval = match own.human_approval.take() {
            Some(mut approval) => {
                self.approval_servers(&mut approval);
                Some(approval)
            }
            None => shared.human_approval.clone(),
        };
        let defaults = Governance::default();
        let governance = Governance {
            max_budget_per_run: own.budget.or(shared.budget),
            max_budget_per_session: own.per_session.or(shared.per_session),
            max_budget_per_day: own.per_day.or(shared.per_day),
            max_pool_budget_per_day: shared.pool_per_day,
            timezone: own
                .timezone
                .as_ref()
                .or(shared.timezone.as_ref())
                .map_or(defaults.timezone, |(zone, _)| zone.clone()),
            on_budget_exceeded: own
                .on_exceeded
                .or(shared.on_exceeded)
                .map_or(defaults.on_budget_exceeded, |(action, _)| action),
            human_approval: None,
        };
        if governance.budgets().is_none() {
            self.unused_budget_settings(&own, &join(agent_path, "governance"));
        }
        (governance, approval)
    }

    /// Warns that `g`'s `on_budget_exceeded` and `timezone` (at `path`) apply to no budget.
    pub(super) fn unused_budget_settings(&mut self, g: &GovernanceIn, path: &str) {
        let keys = [
            ("on_budget_exceeded", g.on_exceeded.map(|(_, at)| at)),
            ("timezone", g.timezone.as_ref().map(|(_, at)| *at)),
        ];
        for (key, at) in keys {
            if let Some(at) = at {
                let problem = Problem::BudgetSettingUnused {
                    key,
                    shared: g.shared,
                };
                self.report(&join(path, key), at, problem);
            }
        }
    }

    /// A budget in US dollars at `f`: a number more than 0.
    fn budget(&mut self, f: &Field<'_>) -> Option<f64> {
        let b = self.number(f.value, &f.path)?;
        if b <= 0.0 {
            let problem = Problem::BudgetNotPositive {
                leaf: leaf(&f.path),
                found: b,
            };
            self.report(&f.path, f.value.loc, problem);
            return None;
        }
        Some(b)
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
                self.report(&p, k.loc, Problem::InvalidEnvName(&k.name));
                ok = false;
                continue;
            }
            if k.name.starts_with("AGENTFILE_") {
                self.report(&p, k.loc, Problem::ReservedEnv(&k.name));
                ok = false;
                continue;
            }
            let value = match &v.kind {
                Kind::Str(s) => s.clone(),
                Kind::Int(i) => i.to_string(),
                Kind::Float(f) => f.to_string(),
                Kind::Bool(b) => b.to_string(),
                _ => {
                    let found = v.kind.type_name();
                    self.report(
                        &p,
                        v.loc,
                        Problem::EnvValueType {
                            name: &k.name,
                            found,
                        },
                    );
                    ok = false;
                    continue;
                }
            };
            if names::looks_like_secret_value(&value)
                || (names::looks_like_secret_name(&k.name) && !value.is_empty())
            {
                let secret = if names::is_valid_secret_name(&k.name) {
                    k.name.clone()
                } else {
                    k.name.to_ascii_uppercase()
                };
                self.report(
                    &p,
                    v.loc,
                    Problem::SecretInEnv {
                        name: &k.name,
                        secret,
                    },
                );
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
                        self.report(&p, item.loc, Problem::SecretNotAName(item.kind.type_name()));
                        ok = false;
                        continue;
                    };
                    if names::is_valid_secret_name(name) {
                        if out.iter().any(|(n, _)| n == name) {
                            self.report(&p, item.loc, Problem::DuplicateSecret(name));
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
                let names = entries
                    .iter()
                    .map(|(k, _)| k.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ");
                self.report(path, first, Problem::SecretValuesListed(names));
                None
            }
            _ => {
                self.report(
                    path,
                    node.loc,
                    Problem::SecretsNotAList(node.kind.type_name()),
                );
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
            self.report(path, loc, Problem::SecretValueNotName);
        } else {
            let upper = name.to_ascii_uppercase().replace(['-', '.', ' '], "_");
            let example = names::is_valid_secret_name(&upper).then_some(upper);
            self.report(path, loc, Problem::InvalidSecretName { name, example });
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
                cx.report(&f.path, f.value.loc, Problem::EmptyTask);
                return None;
            }
            e.task = Some(task);
            Some(())
        }),
        ("max_concurrent_sessions", |cx, e, f| {
            e.max_concurrent_sessions = Some(cx.integer(f.value, &f.path, 1, 1000)?);
            Some(())
        }),
        ("max_delegation_depth", |cx, e, f| {
            let max = defaults::MAX_DELEGATION_DEPTH_LIMIT;
            e.max_delegation_depth = Some(cx.integer(f.value, &f.path, 1, max)?);
            Some(())
        }),
        ("on_message_while_busy", |cx, e, f| {
            let mode = cx.string(f.value, &f.path)?;
            match ninetrix_proto::api::MessageMode::parse(&mode) {
                Some(m) => e.on_message_while_busy = Some(m),
                None => {
                    cx.report(&f.path, f.value.loc, Problem::UnknownBusyMode(&mode));
                    return None;
                }
            }
            Some(())
        }),
        ("interrupt_grace", |cx, e, f| {
            e.interrupt_grace =
                Some(cx.duration(f.value, &f.path, DurationField::InterruptGrace)?);
            Some(())
        }),
        ("snapshots", |cx, e, f| {
            e.snapshots = Some(cx.snapshots_in(&f)?);
            Some(())
        }),
        ("resume", |cx, e, f| {
            let mode = cx.string(f.value, &f.path)?;
            e.resume = Some(match mode.as_str() {
                "truncate" => ResumeMode::Truncate,
                "complete" => ResumeMode::Complete,
                other => {
                    cx.report(&f.path, f.value.loc, Problem::UnknownResumeMode(other));
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

pub(super) const GOVERNANCE: Section<GovernanceIn> = Section {
    what: "governance",
    keys: &[
        ("max_budget_per_run", |cx, g, f| {
            g.budget = Some(cx.budget(&f)?);
            Some(())
        }),
        ("max_budget_per_session", |cx, g, f| {
            g.per_session = Some(cx.budget(&f)?);
            Some(())
        }),
        ("max_budget_per_day", |cx, g, f| {
            g.per_day = Some(cx.budget(&f)?);
            Some(())
        }),
        ("max_pool_budget_per_day", |cx, g, f| {
            if !g.shared {
                cx.report(&f.path, f.key.loc, Problem::PoolBudgetAtAgent);
                return None;
            }
            g.pool_per_day = Some(cx.budget(&f)?);
            Some(())
        }),
        ("timezone", |cx, g, f| {
            let zone = cx.string(f.value, &f.path)?;
            if let Err(err) = check_zone(&zone) {
                cx.report(&f.path, f.value.loc, Problem::Schedule(err));
                return None;
            }
            g.timezone = Some((zone, f.key.loc));
            Some(())
        }),
        ("on_budget_exceeded", |cx, g, f| {
            let text = cx.string(f.value, &f.path)?;
            let action = match text.as_str() {
                "stop" => OnBudgetExceeded::Stop,
                "ask_human" => OnBudgetExceeded::AskHuman,
                found => {
                    let closest = closest(found, &["stop", "ask_human"]);
                    let problem = Problem::UnknownBudgetAction { found, closest };
                    cx.report(&f.path, f.value.loc, problem);
                    return None;
                }
            };
            g.on_exceeded = Some((action, f.key.loc));
            Some(())
        }),
        ("human_approval", |cx, g, f| {
            let approval = cx.human_approval(f.value, &f.path, f.key.loc, g.shared);
            let ok = approval.valid;
            g.human_approval = Some(approval);
            ok.then_some(())
        }),
    ],
    unsupported: &["budget_warning_usd", "rate_limit"],
};

/// Whether `zone` is an IANA time zone, by the schedule rules' own check (chrono-tz; an
/// unknown name comes back with the closest known one).
fn check_zone(zone: &str) -> Result<(), ScheduleError> {
    Spec::cron("0 0 * * *", zone).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use crate::{BudgetPolicy, OnBudgetExceeded};

    const SCRIPTED: &str = "    runtime: { provider: scripted, script: [hi] }\n";

    /// Agents `a` (with `a_governance`, indented 6) and `b`, then `top` at the top level.
    fn pool(a_governance: &str, top: &str) -> String {
        format!("agents:\n  a:\n{SCRIPTED}    governance:\n{a_governance}  b:\n{SCRIPTED}{top}")
    }

    #[test]
    fn the_shared_budgets_fill_each_agents_gaps_key_by_key() {
        let p = valid(&pool(
            "      max_budget_per_day: 10\n      on_budget_exceeded: stop\n",
            "governance:\n  max_budget_per_run: 0.5\n  max_budget_per_session: 5\n  \
             max_budget_per_day: 50\n  max_pool_budget_per_day: 200\n  timezone: \
             Europe/Lisbon\n  on_budget_exceeded: ask_human\n",
        ));
        let a = &p.agentfile.agent("a").unwrap().governance;
        let b = &p.agentfile.agent("b").unwrap().governance;
        assert_eq!(
            a.budgets(),
            Some(BudgetPolicy {
                per_session_usd: Some(5.0),
                per_day_usd: Some(10.0),
                pool_per_day_usd: Some(200.0),
                timezone: "Europe/Lisbon".into(),
            })
        );
        assert_eq!(a.on_budget_exceeded, OnBudgetExceeded::Stop);
        assert_eq!(a.max_budget_per_run, Some(0.5));
        assert_eq!(b.max_budget_per_day, Some(50.0));
        assert_eq!(b.max_pool_budget_per_day, Some(200.0));
        assert_eq!(b.on_budget_exceeded, OnBudgetExceeded::AskHuman);
        assert!(p.warnings.diagnostics.is_empty(), "{:?}", p.warnings);
    }

    #[test]
    fn without_budgets_the_defaults_hold_and_the_spec_reads_back() {
        let p = valid(&pool("      max_budget_per_run: 1\n", ""));
        let a = p.agentfile.agent("a").unwrap();
        assert_eq!(a.governance.budgets(), None);
        assert_eq!(
            (
                a.governance.timezone.as_str(),
                a.governance.on_budget_exceeded
            ),
            ("UTC", OnBudgetExceeded::Stop)
        );
        let p = valid(&pool(
            "      max_budget_per_session: 2.5\n      timezone: America/New_York\n",
            "",
        ));
        let a = p.agentfile.agent("a").unwrap();
        let json = serde_json::to_string(a).unwrap();
        assert_eq!(&serde_json::from_str::<crate::AgentSpec>(&json).unwrap(), a);
    }

    #[test]
    fn the_pools_budget_belongs_to_the_top_level() {
        let d = assert_error(
            &pool("      max_pool_budget_per_day: 100\n", ""),
            "misplaced_key",
            (5, 7),
            "`max_pool_budget_per_day` is the pool's budget, not an agent's",
        );
        assert_eq!(d.path, "agents.a.governance.max_pool_budget_per_day");
        assert!(d.help.unwrap().contains("top-level `governance:`"));
    }

    #[test]
    fn bad_budget_values_are_located() {
        assert_error(
            &pool("      max_budget_per_day: 0\n", ""),
            "out_of_range",
            (5, 27),
            "`max_budget_per_day` must be more than 0, found 0",
        );
        assert_error(
            &pool(
                "      max_budget_per_run: 1\n",
                "governance:\n  max_budget_per_session: -1\n",
            ),
            "out_of_range",
            (9, 27),
            "`max_budget_per_session` must be more than 0, found -1",
        );
        let d = assert_error(
            &pool(
                "      max_budget_per_day: 5\n      timezone: Europe/Lisbom\n",
                "",
            ),
            "unknown_time_zone",
            (6, 17),
            "unknown time zone `Europe/Lisbom`",
        );
        assert!(
            d.help.unwrap().starts_with("did you mean `Europe/Lisbon`?"),
            "the closest zone is suggested"
        );
        let d = assert_error(
            &pool(
                "      max_budget_per_day: 5\n      on_budget_exceeded: ask-human\n",
                "",
            ),
            "invalid_value",
            (6, 27),
            "unknown `on_budget_exceeded` value `ask-human`",
        );
        assert!(d.help.unwrap().starts_with("did you mean `ask_human`?"));
        let d = assert_error(
            &format!("agents:\n  a:\n{SCRIPTED}    on_budget_exceeded: stop\n"),
            "unknown_key",
            (4, 5),
            "unknown key `on_budget_exceeded` in an agent",
        );
        assert_eq!(
            d.help.as_deref(),
            Some("`on_budget_exceeded` belongs under `governance`")
        );
    }

    #[test]
    fn settings_for_budgets_that_do_not_exist_are_warned_about() {
        // The run's budget is the runner's: it always stops.
        let w = one_warning(&pool(
            "      max_budget_per_run: 1\n      on_budget_exceeded: ask_human\n",
            "",
        ));
        assert_eq!(
            (w.kind.code(), w.path.as_str(), w.line, w.column),
            (
                "setting_unused",
                "agents.a.governance.on_budget_exceeded",
                6,
                7
            )
        );
        assert_eq!(
            w.message,
            "`on_budget_exceeded` has no effect: the agent has no budget beyond the run (per \
             session, per day or the pool's per day)"
        );
        // A shared one is said once, when no agent has a budget.
        let w = one_warning(&pool(
            "      max_budget_per_run: 1\n",
            "governance:\n  timezone: Asia/Tokyo\n",
        ));
        assert_eq!(
            (w.kind.code(), w.path.as_str(), w.line, w.column),
            ("setting_unused", "governance.timezone", 9, 3)
        );
        assert!(w.message.contains("no agent has a budget"), "{}", w.message);
        // Used by one agent: no warning.
        let p = valid(&pool(
            "      max_budget_per_day: 1\n",
            "governance:\n  timezone: Asia/Tokyo\n",
        ));
        assert!(p.warnings.diagnostics.is_empty(), "{:?}", p.warnings);
        assert_eq!(
            p.agentfile.agent("b").unwrap().governance.timezone,
            "Asia/Tokyo"
        );
    }
}
