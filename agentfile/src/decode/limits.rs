//! Pool-wide model limits and fallbacks: an agent's `runtime.limits`, the top-level `limits:`
//! entries — matched by provider key ([`ProviderKey`]) to every model of the pool, primaries
//! and fallbacks, by [`apply_pool_limits`] — and `runtime.fallback`, the models tried in turn
//! when the ones before keep failing.

use super::endpoint::{Endpoint, ProviderKey};
use super::*;

/// The most `runtime.fallback` entries.
pub(super) const MAX_FALLBACKS: usize = 8;
/// The largest `max_in_flight` (as `ModelLimits` documents it).
const MAX_IN_FLIGHT: u32 = 100_000;
/// The largest `requests_per_minute`.
const MAX_REQUESTS_PER_MINUTE: u32 = 10_000_000;
/// The largest `tokens_per_minute`.
const MAX_TOKENS_PER_MINUTE: u64 = 10_000_000_000;

pub(super) const LIMITS: Section<ModelLimits> = Section {
    what: "limits",
    keys: &[
        ("max_in_flight", |cx, l, f| {
            l.max_in_flight = Some(cx.integer(f.value, &f.path, 1, MAX_IN_FLIGHT)?);
            Some(())
        }),
        ("requests_per_minute", |cx, l, f| {
            let n = cx.integer(f.value, &f.path, 1, MAX_REQUESTS_PER_MINUTE)?;
            l.requests_per_minute = Some(n);
            Some(())
        }),
        ("tokens_per_minute", |cx, l, f| {
            let n = cx.integer_u64(f.value, &f.path, 1, MAX_TOKENS_PER_MINUTE)?;
            l.tokens_per_minute = Some(n);
            Some(())
        }),
    ],
    unsupported: &[],
};

/// Reads one of [`LIMITS`]' keys into `limits` (a top-level entry takes the same keys).
fn limit(cx: &mut Cx, limits: &mut ModelLimits, f: Field<'_>) -> Option<()> {
    let handle = LIMITS.handler(&f.key.name)?;
    handle(cx, limits, f)
}

/// A top-level `limits:` entry as written.
#[derive(Default)]
pub(super) struct PoolLimitIn {
    provider: Option<(String, Loc)>,
    base_url: Option<String>,
    api_key_secret: Option<String>,
    limits: ModelLimits,
}

pub(super) const POOL_LIMIT: Section<PoolLimitIn> = Section {
    what: "a limits entry",
    keys: &[
        ("provider", |cx, e, f| {
            e.provider = Some((cx.string(f.value, &f.path)?, f.value.loc));
            Some(())
        }),
        ("base_url", |cx, e, f| {
            e.base_url = cx.base_url(&f)?;
            Some(())
        }),
        ("api_key_secret", |cx, e, f| {
            e.api_key_secret = Some(cx.api_key_secret(&f)?);
            Some(())
        }),
        ("max_in_flight", |cx, e, f| limit(cx, &mut e.limits, f)),
        ("requests_per_minute", |cx, e, f| {
            limit(cx, &mut e.limits, f)
        }),
        ("tokens_per_minute", |cx, e, f| limit(cx, &mut e.limits, f)),
    ],
    unsupported: &[],
};

/// A valid top-level `limits:` entry: the provider key it limits and its numbers.
pub(super) struct PoolLimit {
    pub(super) key: ProviderKey,
    pub(super) limits: ModelLimits,
    /// Where the entry is, and its path (`limits[0]`).
    at: Loc,
    path: String,
}

/// A `runtime.fallback` entry as written.
#[derive(Default)]
pub(super) struct FallbackKeys {
    provider: Option<(String, Loc)>,
    model: Option<String>,
    base_url: Option<String>,
    api_key_secret: Option<String>,
}

pub(super) const FALLBACK: Section<FallbackKeys> = Section {
    what: "a fallback",
    keys: &[
        ("provider", |cx, e, f| {
            e.provider = Some((cx.string(f.value, &f.path)?, f.value.loc));
            Some(())
        }),
        ("model", |cx, e, f| {
            let model = cx.string(f.value, &f.path)?;
            if model.trim().is_empty() {
                cx.report(&f.path, f.value.loc, Problem::EmptyModel);
                return None;
            }
            e.model = Some(model);
            Some(())
        }),
        ("base_url", |cx, e, f| {
            e.base_url = cx.base_url(&f)?;
            Some(())
        }),
        ("api_key_secret", |cx, e, f| {
            e.api_key_secret = Some(cx.api_key_secret(&f)?);
            Some(())
        }),
    ],
    unsupported: &[],
};

/// A `runtime.fallback` entry resolved on its own (its provider, URL and key), before it is
/// compared with the primary model and the other fallbacks.
pub(super) struct FallbackIn {
    model: FallbackModel,
    /// Its number in the list, from 1.
    number: usize,
    /// Where the entry is, and its path (`agents.a.runtime.fallback[0]`).
    at: Loc,
    path: String,
}

/// Whether the mapping `node` has `key`.
fn has_key(node: &Node, key: &str) -> bool {
    matches!(&node.kind, Kind::Map(entries) if entries.iter().any(|(k, _)| k.name == key))
}

/// Whether the mapping `runtime` has a `fallback:` list with at least one entry (valid or not).
pub(super) fn fallback_written(runtime: &Node) -> bool {
    let Kind::Map(entries) = &runtime.kind else {
        return false;
    };
    entries.iter().any(|(k, v)| {
        k.name == "fallback" && matches!(&v.kind, Kind::Seq(items) if !items.is_empty())
    })
}

/// `provider model`, with its URL when it has one: `openai gpt-4o @ http://…`.
fn model_words(provider: Provider, model: &str, base_url: Option<&str>) -> String {
    match base_url {
        Some(url) => format!("{} {model} @ {url}", provider.as_str()),
        None => format!("{} {model}", provider.as_str()),
    }
}

impl Cx {
    /// `runtime.limits:`; `None` when it is invalid or sets no limit (reported).
    pub(super) fn limits_in(&mut self, node: &Node, path: &str) -> Option<ModelLimits> {
        let mut limits = ModelLimits::default();
        if !self.dispatch(node, path, &LIMITS, &mut limits)? {
            return None;
        }
        if matches!(&node.kind, Kind::Map(entries) if entries.is_empty()) {
            self.report(path, node.loc, Problem::EmptyLimits);
            return None;
        }
        // Keys that are all unknown are reported as such.
        limits.any().then_some(limits)
    }

    /// The top-level `limits:` list: its valid entries, one per provider key (a second entry
    /// for a key is reported).
    pub(super) fn pool_limits(&mut self, node: &Node, path: &str) -> Vec<PoolLimit> {
        let Kind::Seq(items) = &node.kind else {
            let expected = "a list of entries such as `- { provider: openai, max_in_flight: 8 }`";
            self.type_error(path, node, expected);
            return Vec::new();
        };
        let mut out: Vec<PoolLimit> = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let Some(entry) = self.pool_limit(item, &format!("{path}[{i}]")) else {
                continue;
            };
            if let Some(first) = out.iter().find(|e| e.key == entry.key) {
                let problem = Problem::DuplicatePoolLimit {
                    key: entry.key.clone(),
                    first_line: first.at.line,
                };
                self.report(&entry.path, entry.at, problem);
                continue;
            }
            out.push(entry);
        }
        out
    }

    fn pool_limit(&mut self, node: &Node, path: &str) -> Option<PoolLimit> {
        let mut e = PoolLimitIn::default();
        let ok = self.dispatch(node, path, &POOL_LIMIT, &mut e)?;
        if !has_key(node, "provider") {
            self.report(
                &join(path, "provider"),
                node.loc,
                Problem::PoolLimitNoProvider,
            );
            return None;
        }
        let (name, loc) = e.provider?;
        let resolved = self.provider(&name, loc, path)?;
        if !ok {
            return None;
        }
        if !e.limits.any() {
            self.report(path, node.loc, Problem::PoolLimitNoNumber);
            return None;
        }
        let endpoint = resolved.endpoint(e.base_url, e.api_key_secret);
        Some(PoolLimit {
            key: ProviderKey::of(&endpoint),
            limits: e.limits,
            at: node.loc,
            path: path.to_string(),
        })
    }

    /// `runtime.fallback:` (its key at `at`), each entry resolved on its own: the valid
    /// entries, and whether they are all there is (`false`: something is reported). `None`
    /// when it is not a list.
    pub(super) fn fallback_in(
        &mut self,
        node: &Node,
        path: &str,
        at: Loc,
    ) -> Option<(Vec<FallbackIn>, bool)> {
        let Kind::Seq(items) = &node.kind else {
            let expected = "a list of models such as `- { provider: anthropic, model: \
                            claude-sonnet-4-6 }`";
            self.type_error(path, node, expected);
            return None;
        };
        let mut ok = true;
        if items.len() > MAX_FALLBACKS {
            self.report(path, at, Problem::TooManyFallbacks(items.len()));
            ok = false;
        }
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            match self.fallback_entry(item, &format!("{path}[{i}]"), i + 1) {
                Some(entry) => out.push(entry),
                None => ok = false,
            }
        }
        Some((out, ok))
    }

    fn fallback_entry(&mut self, node: &Node, path: &str, number: usize) -> Option<FallbackIn> {
        let mut e = FallbackKeys::default();
        let ok = self.dispatch(node, path, &FALLBACK, &mut e)?;
        let mut complete = true;
        for key in ["provider", "model"] {
            if !has_key(node, key) {
                self.report(&join(path, key), node.loc, Problem::FallbackMissing(key));
                complete = false;
            }
        }
        let (name, loc) = e.provider?;
        let resolved = self.provider(&name, loc, path)?;
        if resolved.provider == Provider::Scripted {
            self.report(&join(path, "provider"), loc, Problem::FallbackScripted);
            return None;
        }
        if !(ok && complete) {
            return None;
        }
        let endpoint = resolved.endpoint(e.base_url, e.api_key_secret);
        Some(FallbackIn {
            model: FallbackModel {
                provider: endpoint.provider,
                via: endpoint.via,
                model: e.model?,
                base_url: endpoint.base_url,
                api_key_secret: endpoint.key_secret,
                limits: ModelLimits::default(),
            },
            number,
            at: node.loc,
            path: path.to_string(),
        })
    }

    /// The agent's fallbacks: `written` (from `runtime.fallback`), none of which may be the
    /// primary model (`primary` at `model`) or an earlier fallback.
    pub(super) fn fallbacks(
        &mut self,
        written: Option<Vec<FallbackIn>>,
        primary: &Endpoint,
        model: &str,
    ) -> Option<Vec<FallbackModel>> {
        let Some(entries) = written else {
            return Some(Vec::new());
        };
        let mut ok = true;
        for (i, entry) in entries.iter().enumerate() {
            let f = &entry.model;
            let same = |provider: Provider, m: &str, url: Option<&String>| {
                provider == f.provider && m == f.model && url == f.base_url.as_ref()
            };
            let earlier = if same(primary.provider, model, primary.base_url.as_ref()) {
                Some(None)
            } else {
                entries[..i]
                    .iter()
                    .find(|e| same(e.model.provider, &e.model.model, e.model.base_url.as_ref()))
                    .map(|e| Some(e.number))
            };
            if let Some(earlier) = earlier {
                let model = model_words(f.provider, &f.model, f.base_url.as_deref());
                let problem = Problem::FallbackRepeats { model, earlier };
                self.report(&entry.path, entry.at, problem);
                ok = false;
            }
        }
        ok.then(|| entries.into_iter().map(|e| e.model).collect())
    }

    /// Fills every model's limits from the top-level `entries` ([`apply_pool_limits`]) and
    /// reports what they leave: entries no model uses, and agents whose own `runtime.limits`
    /// another model on the same key contradicts. `complete`: every agent resolved (otherwise
    /// an entry may look unused only because its agent has errors, so that is not said).
    pub(super) fn apply_limits(
        &mut self,
        entries: &[PoolLimit],
        agents: &mut [AgentSpec],
        complete: bool,
    ) {
        let own = std::mem::take(&mut self.own_limits);
        let pairs: Vec<(ProviderKey, ModelLimits)> = entries
            .iter()
            .map(|e| (e.key.clone(), e.limits.clone()))
            .collect();
        let applied = apply_pool_limits(&pairs, agents, |agent| {
            own.contains_key(&format!("agents.{agent}"))
        });
        if complete {
            for (entry, used) in entries.iter().zip(&applied.used) {
                if !used {
                    let problem = Problem::PoolLimitUnused(entry.key.clone());
                    self.report(&entry.path, entry.at, problem);
                }
            }
        }
        for c in applied.conflicts {
            let agent = &agents[c.agent].name;
            let runtime = format!("agents.{agent}");
            let Some(at) = own.get(&runtime) else {
                continue;
            };
            let problem = Problem::LimitsConflict {
                agent,
                other: c.other,
                key: c.key,
            };
            self.report(&join(&runtime, "runtime.limits"), *at, problem);
        }
    }
}

/// What the top-level `limits:` entries did to the pool's models.
#[derive(Debug, PartialEq)]
pub(super) struct Applied {
    /// For each entry, whether a model of the pool uses its provider key.
    pub(super) used: Vec<bool>,
    /// Agents whose own `runtime.limits` differ from another model's on the same key.
    pub(super) conflicts: Vec<Conflict>,
}

/// An agent's own `runtime.limits` contradicted by another model on the same provider key.
#[derive(Debug, PartialEq)]
pub(super) struct Conflict {
    /// The agent (its index).
    pub(super) agent: usize,
    /// The other model, in words: "agent `b`'s model", "its own fallback 1".
    pub(super) other: String,
    /// The key.
    pub(super) key: ProviderKey,
}

/// Gives each model of `agents` the limits of the entry for its provider key — every fallback,
/// and each primary model except those of the agents `own` names (their `runtime.limits`
/// wins) — and finds the conflicts the checkpoint API would otherwise settle silently: it keeps
/// one set of limits per key for the pool, the latest caller's.
pub(super) fn apply_pool_limits(
    entries: &[(ProviderKey, ModelLimits)],
    agents: &mut [AgentSpec],
    own: impl Fn(&str) -> bool,
) -> Applied {
    let mut used = vec![false; entries.len()];
    let mut entry_for = |key: &ProviderKey| {
        let i = entries.iter().position(|(k, _)| k == key)?;
        used[i] = true;
        Some(entries[i].1.clone())
    };
    for agent in agents.iter_mut() {
        let has_own = own(&agent.name);
        let r = &mut agent.runtime;
        let entry = entry_for(&ProviderKey::of_runtime(r));
        if !has_own && let Some(limits) = entry {
            r.limits = limits;
        }
        for f in &mut r.fallback {
            if let Some(limits) = entry_for(&ProviderKey::of_fallback(f)) {
                f.limits = limits;
            }
        }
    }
    // Every model: (agent, fallback number or none, key, limits).
    let models: Vec<(usize, Option<usize>, ProviderKey, &ModelLimits)> =
        agents
            .iter()
            .enumerate()
            .flat_map(|(i, a)| {
                let primary = (
                    i,
                    None,
                    ProviderKey::of_runtime(&a.runtime),
                    &a.runtime.limits,
                );
                let fallbacks =
                    a.runtime.fallback.iter().enumerate().map(move |(j, f)| {
                        (i, Some(j + 1), ProviderKey::of_fallback(f), &f.limits)
                    });
                std::iter::once(primary).chain(fallbacks)
            })
            .collect();
    let mut conflicts = Vec::new();
    for (i, agent) in agents.iter().enumerate() {
        if !own(&agent.name) {
            continue;
        }
        let key = ProviderKey::of_runtime(&agent.runtime);
        let other = models.iter().find(|(j, fallback, k, limits)| {
            (*j != i || fallback.is_some()) && *k == key && **limits != agent.runtime.limits
        });
        if let Some((j, fallback, _, _)) = other {
            let other = match (fallback, *j == i) {
                (Some(n), true) => format!("its own fallback {n}"),
                (Some(n), false) => format!("agent `{}`'s fallback {n}", agents[*j].name),
                (None, _) => format!("agent `{}`'s model", agents[*j].name),
            };
            conflicts.push(Conflict {
                agent: i,
                other,
                key,
            });
        }
    }
    Applied { used, conflicts }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    /// Agent `a` with `runtime` (indented 6) and nothing else.
    fn agent(runtime: &str) -> String {
        format!("agents:\n  a:\n    runtime:\n{runtime}")
    }

    const OPENAI: &str = "      provider: openai\n      model: gpt-4o\n";

    #[test]
    fn runtime_limits_are_read_up_to_their_largest_values() {
        let p = valid(&agent(&format!(
            "{OPENAI}      limits: {{ max_in_flight: 100000, requests_per_minute: 10000000, \
             tokens_per_minute: 10000000000 }}\n"
        )));
        let l = &p.agentfile.agents[0].runtime.limits;
        assert_eq!(
            (l.max_in_flight, l.requests_per_minute, l.tokens_per_minute),
            (Some(100_000), Some(10_000_000), Some(10_000_000_000))
        );
        let p = valid(&agent(&format!(
            "{OPENAI}      limits:\n        max_in_flight: 8\n"
        )));
        let l = &p.agentfile.agents[0].runtime.limits;
        assert_eq!(
            (l.max_in_flight, l.requests_per_minute, l.tokens_per_minute),
            (Some(8), None, None)
        );
    }

    #[test]
    fn runtime_limits_out_of_range_empty_or_misspelt_are_errors() {
        assert_error(
            &agent(&format!(
                "{OPENAI}      limits:\n        max_in_flight: 0\n"
            )),
            "out_of_range",
            (7, 24),
            "`max_in_flight` must be between 1 and 100000, found 0",
        );
        assert_error(
            &agent(&format!(
                "{OPENAI}      limits:\n        requests_per_minute: -5\n"
            )),
            "out_of_range",
            (7, 30),
            "`requests_per_minute` must be between 1 and 10000000, found -5",
        );
        assert_error(
            &agent(&format!(
                "{OPENAI}      limits:\n        tokens_per_minute: 10000000001\n"
            )),
            "out_of_range",
            (7, 28),
            "`tokens_per_minute` must be between 1 and 10000000000, found 10000000001",
        );
        assert_error(
            &agent(&format!(
                "{OPENAI}      limits:\n        max_in_flight: 2.5\n"
            )),
            "wrong_type",
            (7, 24),
            "`max_in_flight` must be a whole number, found the number 2.5",
        );
        let d = assert_error(
            &agent(&format!("{OPENAI}      limits: {{}}\n")),
            "empty_value",
            (6, 15),
            "`limits` sets no limit",
        );
        let help = d.help.unwrap();
        for key in ["max_in_flight", "requests_per_minute", "tokens_per_minute"] {
            assert!(help.contains(key), "{help}");
        }
        // A misspelt key is that one error, with the key it meant.
        let d = assert_error(
            &agent(&format!("{OPENAI}      limits:\n        max_inflight: 8\n")),
            "unknown_key",
            (7, 9),
            "unknown key `max_inflight` in limits",
        );
        assert_eq!(d.help.as_deref(), Some("did you mean `max_in_flight`?"));
    }

    /// Two agents on OpenAI's key, one on Groq's through `openai` with Groq's URL and key, one
    /// falling back from Anthropic to Groq (by its name); then the top-level `limits:`.
    const POOL: &str = "agents:
  a:
    runtime: { provider: openai, model: gpt-4o }
  b:
    runtime: { provider: openai, model: gpt-4o-mini }
  c:
    runtime:
      provider: openai
      model: llama-3.3-70b-versatile
      base_url: https://api.groq.com/openai/v1/
      api_key_secret: GROQ_API_KEY
  d:
    runtime:
      model: claude-sonnet-4-6
      fallback:
        - { provider: groq, model: llama-3.3-70b-versatile }
        - { provider: openai, model: gpt-4o, api_key_secret: OTHER_OPENAI_KEY }
limits:
  - { provider: openai, max_in_flight: 8, requests_per_minute: 600 }
  - provider: groq
    tokens_per_minute: 100000
";

    #[test]
    fn top_level_limits_reach_every_model_on_their_provider_key() {
        let p = valid(POOL);
        let af = &p.agentfile;
        let openai = ModelLimits {
            max_in_flight: Some(8),
            requests_per_minute: Some(600),
            tokens_per_minute: None,
        };
        let groq = ModelLimits {
            tokens_per_minute: Some(100_000),
            ..ModelLimits::default()
        };
        assert_eq!(af.agent("a").unwrap().runtime.limits, openai);
        assert_eq!(af.agent("b").unwrap().runtime.limits, openai);
        // `openai` with Groq's URL and key is the `groq` entry's key.
        assert_eq!(af.agent("c").unwrap().runtime.limits, groq);
        let d = &af.agent("d").unwrap().runtime;
        assert_eq!(d.limits, ModelLimits::default(), "no entry for Anthropic");
        assert_eq!(d.fallback[0].limits, groq);
        // Another OpenAI key is another limiter.
        assert_eq!(d.fallback[1].limits, ModelLimits::default());
        assert!(p.warnings.diagnostics.is_empty(), "{:?}", p.warnings);
    }

    #[test]
    fn an_agents_own_limits_win_for_its_primary_model_and_a_conflict_is_said() {
        let text = POOL.replace(
            "    runtime: { provider: openai, model: gpt-4o }\n",
            "    runtime: { provider: openai, model: gpt-4o, limits: { max_in_flight: 2 } }\n",
        );
        let p = valid(&text);
        let a = &p.agentfile.agent("a").unwrap().runtime.limits;
        assert_eq!((a.max_in_flight, a.requests_per_minute), (Some(2), None));
        let w = one_warning(&text);
        assert_eq!(
            (w.kind.code(), w.path.as_str(), w.line, w.column),
            ("limits_conflict", "agents.a.runtime.limits", 3, 49)
        );
        assert_eq!(
            w.message,
            "agent `a`'s `runtime.limits` differ from those of agent `b`'s model, on the same \
             provider key (`openai` at its default URL with key `OPENAI_API_KEY`)"
        );
        // The same numbers are no conflict.
        let same = POOL.replace(
            "    runtime: { provider: openai, model: gpt-4o }\n",
            "    runtime: { provider: openai, model: gpt-4o, limits: { max_in_flight: 8, \
             requests_per_minute: 600 } }\n",
        );
        assert!(valid(&same).warnings.diagnostics.is_empty());
    }

    #[test]
    fn a_second_entry_for_a_key_is_an_error_and_an_unused_one_a_warning() {
        // The default secret written out is the same key.
        let text = POOL.replace(
            "limits:\n",
            "limits:\n  - { provider: openai, api_key_secret: OPENAI_API_KEY, max_in_flight: 1 }\n",
        );
        let errors = errors(&text);
        assert_eq!(errors.len(), 1, "{errors:#?}");
        assert_eq!(
            (errors[0].kind.code(), errors[0].path.as_str()),
            ("duplicate_setting", "limits[1]")
        );
        assert_eq!((errors[0].line, errors[0].column), (20, 5));
        assert_eq!(
            errors[0].message,
            "this `limits` entry is for the provider key of the entry on line 19 (`openai` at \
             its default URL with key `OPENAI_API_KEY`)"
        );
        let unused = format!(
            "{POOL}  - {{ provider: anthropic, api_key_secret: SPARE_KEY, max_in_flight: 3 }}\n"
        );
        let w = one_warning(&unused);
        assert_eq!(
            (w.kind.code(), w.path.as_str(), w.line, w.column),
            ("setting_unused", "limits[2]", 22, 5)
        );
        assert_eq!(
            w.message,
            "this `limits` entry limits nothing: no model of the pool uses `anthropic` at its \
             default URL with key `SPARE_KEY`"
        );
    }

    #[test]
    fn bad_top_level_entries_are_located() {
        let pool = |entries: &str| format!("{}limits:\n{entries}", agent(OPENAI));
        assert_error(
            &pool("  - { max_in_flight: 3 }\n"),
            "missing_key",
            (7, 5),
            "a `limits` entry needs `provider`",
        );
        assert_error(
            &pool("  - { provider: openai }\n"),
            "missing_key",
            (7, 5),
            "this `limits` entry sets no limit",
        );
        let d = assert_error(
            &pool("  - { provider: opnai, max_in_flight: 3 }\n"),
            "unknown_provider",
            (7, 17),
            "unknown provider `opnai`",
        );
        assert!(d.help.unwrap().contains("did you mean `openai`?"));
        assert_error(
            &pool(
                "  - { provider: openai, max_in_flight: 3, api_key_secret: sk-abcdefghijklmnopqrstuvwx }\n",
            ),
            "secret_value",
            (7, 59),
            "this looks like a secret value, not a secret name",
        );
        assert_error(
            &pool("  provider: openai\n"),
            "wrong_type",
            (7, 3),
            "`limits` must be a list of entries such as `- { provider: openai, max_in_flight: \
             8 }`, found a mapping",
        );
    }

    #[test]
    fn fallbacks_resolve_like_the_runtime_and_their_keys_become_secrets() {
        let p = valid(&agent(&format!(
            "{OPENAI}      fallback_after: 2m\n      fallback:\n        - provider: anthropic\n          model: claude-sonnet-4-6\n        - {{ provider: groq, model: llama-3.3-70b-versatile }}\n        - {{ provider: openai, model: local, base_url: http://host.docker.internal:11434/v1 }}\n"
        )));
        let a = &p.agentfile.agents[0];
        let f = &a.runtime.fallback;
        assert_eq!(a.runtime.fallback_after_secs, 120);
        assert_eq!(
            (
                f[0].provider,
                f[0].api_key_secret.as_deref(),
                f[0].base_url.as_deref()
            ),
            (Provider::Anthropic, Some("ANTHROPIC_API_KEY"), None)
        );
        assert_eq!(
            (f[1].provider, f[1].via.as_deref(), f[1].base_url.as_deref()),
            (
                Provider::Openai,
                Some("groq"),
                Some("https://api.groq.com/openai/v1")
            )
        );
        assert_eq!(f[1].api_key_secret.as_deref(), Some("GROQ_API_KEY"));
        assert_eq!(f[2].api_key_secret, None, "a local server has no key");
        assert_eq!(
            a.secrets,
            ["OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GROQ_API_KEY"]
        );
        // Without `fallback_after`: 30 s.
        let p = valid(&agent(&format!(
            "{OPENAI}      fallback: [{{ provider: anthropic, model: claude-haiku-4-5 }}]\n"
        )));
        assert_eq!(p.agentfile.agents[0].runtime.fallback_after_secs, 30);
    }

    #[test]
    fn bad_fallbacks_are_located() {
        let with = |entries: &str| agent(&format!("{OPENAI}      fallback:\n{entries}"));
        let d = assert_error(
            &with("        - { provider: scripted, model: x }\n"),
            "unsupported_provider",
            (7, 23),
            "provider `scripted` cannot be a fallback",
        );
        assert!(d.help.unwrap().contains("runtime.script"));
        assert_error(
            &with("        - { provider: openai, model: gpt-4o }\n"),
            "duplicate_setting",
            (7, 11),
            "this fallback is the agent's own model (openai gpt-4o)",
        );
        assert_error(
            &with(
                "        - { provider: anthropic, model: claude-sonnet-4-6 }\n        - { provider: anthropic, model: claude-sonnet-4-6, api_key_secret: OTHER }\n",
            ),
            "duplicate_setting",
            (8, 11),
            "this fallback is the same model as fallback 1 (anthropic claude-sonnet-4-6)",
        );
        // A broken entry does not hide a repeat after it, and the repeat is numbered as written.
        let text = with(
            "        - { provider: scripted, model: x }\n        - { provider: anthropic, model: m }\n        - { provider: anthropic, model: m }\n        - { provider: openai, model: gpt-4o }\n",
        );
        let found: Vec<(&str, u32, String)> = errors(&text)
            .iter()
            .map(|d| (d.kind.code(), d.line, d.message.clone()))
            .collect();
        assert_eq!(
            found,
            [
                (
                    "unsupported_provider",
                    7,
                    "provider `scripted` cannot be a fallback".to_string()
                ),
                (
                    "duplicate_setting",
                    9,
                    "this fallback is the same model as fallback 2 (anthropic m)".to_string()
                ),
                (
                    "duplicate_setting",
                    10,
                    "this fallback is the agent's own model (openai gpt-4o)".to_string()
                ),
            ]
        );
        // Another URL is another model.
        valid(&with(
            "        - { provider: openai, model: gpt-4o, base_url: https://proxy.example.com/v1 }\n",
        ));
        assert_error(
            &with("        - { provider: anthropic }\n"),
            "missing_key",
            (7, 11),
            "a fallback needs `model`",
        );
        assert_error(
            &with("        - { model: claude-sonnet-4-6 }\n"),
            "missing_key",
            (7, 11),
            "a fallback needs `provider`",
        );
        assert_error(
            &with("        - { provider: anthropic, model: \" \" }\n"),
            "empty_value",
            (7, 41),
            "`model` is empty",
        );
        assert_error(
            &with("        - { provider: anthropic, model: m, base_url: api.example.com }\n"),
            "invalid_url",
            (7, 54),
            "`base_url` must be an http:// or https:// URL, found \"api.example.com\"",
        );
        let nine: String = (0..9)
            .map(|i| format!("        - {{ provider: anthropic, model: m{i} }}\n"))
            .collect();
        assert_error(
            &with(&nine),
            "out_of_range",
            (6, 7),
            "`fallback` has 9 entries; at most 8 are tried",
        );
        let eight: String = (0..8)
            .map(|i| format!("        - {{ provider: anthropic, model: m{i} }}\n"))
            .collect();
        assert_eq!(
            valid(&with(&eight)).agentfile.agents[0]
                .runtime
                .fallback
                .len(),
            8
        );
    }

    #[test]
    fn fallback_after_is_a_duration_of_1_second_to_1_hour_and_needs_a_fallback() {
        let with = |after: &str| {
            agent(&format!(
                "{OPENAI}      fallback_after: {after}\n      fallback: [{{ provider: anthropic, model: m }}]\n"
            ))
        };
        assert_eq!(
            valid(&with("1h")).agentfile.agents[0]
                .runtime
                .fallback_after_secs,
            3600
        );
        assert_eq!(
            valid(&with("1")).agentfile.agents[0]
                .runtime
                .fallback_after_secs,
            1
        );
        let d = assert_error(
            &with("2h"),
            "out_of_range",
            (6, 23),
            "`fallback_after` must be from 1 second to 1 hour, found \"2h\"",
        );
        assert!(d.help.unwrap().contains("fallback_after: 2m"));
        assert_error(
            &with("soon"),
            "invalid_value",
            (6, 23),
            "`fallback_after` must be a duration such as `30s`, `15m`, `24h` or `7d`, found \"soon\"",
        );
        let w = one_warning(&agent(&format!("{OPENAI}      fallback_after: 10s\n")));
        assert_eq!(
            (w.kind.code(), w.path.as_str(), w.line, w.column),
            ("setting_unused", "agents.a.runtime.fallback_after", 6, 7)
        );
        assert_eq!(
            w.message,
            "`fallback_after` has no effect: the runtime has no `fallback`"
        );
        // An empty list is no fallback either.
        one_warning(&agent(&format!(
            "{OPENAI}      fallback_after: 10s\n      fallback: []\n"
        )));
    }

    #[test]
    fn misplaced_keys_point_under_runtime() {
        let d = assert_error(
            &format!("{}    fallback: []\n", agent(OPENAI)),
            "unknown_key",
            (6, 5),
            "unknown key `fallback` in an agent",
        );
        assert_eq!(
            d.help.as_deref(),
            Some("`fallback` belongs under `runtime`")
        );
        let d = assert_error(
            &agent(&format!("{OPENAI}      max_in_flight: 3\n")),
            "unknown_key",
            (6, 7),
            "unknown key `max_in_flight` in runtime",
        );
        assert_eq!(
            d.help.as_deref(),
            Some("`max_in_flight` belongs under `runtime.limits`")
        );
    }

    #[test]
    fn the_pure_matching_fills_only_what_it_should() {
        let mut agents = valid(POOL).agentfile.agents;
        for a in &mut agents {
            a.runtime.limits = ModelLimits::default();
            for f in &mut a.runtime.fallback {
                f.limits = ModelLimits::default();
            }
        }
        let one = ModelLimits {
            max_in_flight: Some(1),
            ..ModelLimits::default()
        };
        let anthropic = ProviderKey::of_runtime(&agents[3].runtime);
        let applied = apply_pool_limits(&[(anthropic, one.clone())], &mut agents, |a| a == "b");
        assert_eq!(applied.used, [true]);
        assert_eq!(applied.conflicts, []);
        assert_eq!(agents[3].runtime.limits, one);
        assert!(agents[..3].iter().all(|a| !a.runtime.limits.any()));
        // Agent `a` keeps its own limits on OpenAI's key; `b` states none there.
        agents[0].runtime.limits = one.clone();
        let openai = ProviderKey::of_runtime(&agents[0].runtime);
        let applied = apply_pool_limits(&[], &mut agents, |a| a == "a");
        assert_eq!(applied.used, Vec::<bool>::new());
        assert_eq!(
            applied.conflicts,
            [Conflict {
                agent: 0,
                other: "agent `b`'s model".into(),
                key: openai,
            }]
        );
    }

    #[test]
    fn the_spec_with_limits_and_fallbacks_reads_back_from_its_json() {
        let p = valid(POOL);
        for a in &p.agentfile.agents {
            let json = serde_json::to_string(a).unwrap();
            let back: AgentSpec = serde_json::from_str(&json).unwrap();
            assert_eq!(&back, a, "{json}");
        }
        let json = serde_json::to_value(p.agentfile.agent("d").unwrap()).unwrap();
        assert_eq!(
            json["runtime"]["fallback"][0],
            serde_json::json!({
                "provider": "openai",
                "via": "groq",
                "model": "llama-3.3-70b-versatile",
                "base_url": "https://api.groq.com/openai/v1",
                "api_key_secret": "GROQ_API_KEY",
                "limits": { "tokens_per_minute": 100000 }
            })
        );
        assert_eq!(json["runtime"]["fallback_after_secs"], 30);
    }
}
