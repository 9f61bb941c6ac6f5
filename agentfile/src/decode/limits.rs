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

    /// `runtime.fallback:`, each entry resolved on its own; `None` when any is invalid
    /// (reported).
    pub(super) fn fallback_in(&mut self, node: &Node, path: &str) -> Option<Vec<FallbackIn>> {
        let Kind::Seq(items) = &node.kind else {
            let expected = "a list of models such as `- { provider: anthropic, model: \
                            claude-sonnet-4-6 }`";
            self.type_error(path, node, expected);
            return None;
        };
        let mut ok = true;
        if items.len() > MAX_FALLBACKS {
            self.report(path, node.loc, Problem::TooManyFallbacks(items.len()));
            ok = false;
        }
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            match self.fallback_entry(item, &format!("{path}[{i}]")) {
                Some(entry) => out.push(entry),
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    fn fallback_entry(&mut self, node: &Node, path: &str) -> Option<FallbackIn> {
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
            at: node.loc,
            path: path.to_string(),
        })
    }

    /// The agent's fallbacks: `written` (from `runtime.fallback`), none of which may be the
    /// primary model (`primary` at `model`) or an earlier fallback.
    pub(super) fn fallbacks(
        &mut self,
        written: Option<(Vec<FallbackIn>, Loc)>,
        primary: &Endpoint,
        model: &str,
    ) -> Option<Vec<FallbackModel>> {
        let Some((entries, _)) = written else {
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
                    .position(|e| same(e.model.provider, &e.model.model, e.model.base_url.as_ref()))
                    .map(|j| Some(j + 1))
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
