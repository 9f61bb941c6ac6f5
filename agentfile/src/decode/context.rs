//! `runtime.context` and the public Ninetrix's `runtime.history_window_tokens`: decoded, checked
//! against each other and the model, and resolved into a [`ContextPolicy`].

use super::*;
use crate::context::{
    ContextPolicy, DEFAULT_COMPACT_AT, KeepRecent, MAX_WINDOW, MIN_WINDOW, Strategy, WindowSource,
};

/// `runtime.context:` as written.
#[derive(Default)]
pub(super) struct ContextIn {
    window: Option<(u32, Loc)>,
    compact_at: Option<f64>,
    keep_recent: Option<(KeepRecent, Loc)>,
    strategy: Option<(Strategy, Loc)>,
    model: Option<String>,
    ok: bool,
}

/// What is wrong with a context setting.
#[derive(Debug, PartialEq)]
pub(super) enum ContextProblem<'a> {
    /// `compact_at` outside (0.1, 0.95].
    CompactAt(f64),
    /// `keep_recent` without exactly one of `turns` and `tokens`.
    KeepRecentShape,
    /// An unknown strategy, and the closest known one.
    UnknownStrategy {
        found: &'a str,
        closest: Option<&'a str>,
    },
    /// `strategy: native`, which this runner does not do yet.
    NativeUnsupported,
    /// Both `history_window_tokens` and `runtime.context.window`.
    WindowTwice,
    /// A `runtime.context` for a model whose window ninetrix does not know, without `window`.
    NeedsWindow { model: &'a str },
    /// `keep_recent.tokens` that leaves nothing to compact: at least the threshold.
    KeepsEverything { keep: u32, threshold: u64 },
    /// An empty `model`.
    EmptyModel,
}

impl ContextProblem<'_> {
    /// The diagnostic kind (and so the wire code).
    pub(super) fn kind(&self) -> DiagnosticKind {
        use DiagnosticKind as K;
        match self {
            ContextProblem::CompactAt(_) | ContextProblem::KeepsEverything { .. } => K::OutOfRange,
            ContextProblem::KeepRecentShape | ContextProblem::UnknownStrategy { .. } => {
                K::InvalidValue
            }
            ContextProblem::NativeUnsupported => K::UnsupportedKey,
            ContextProblem::WindowTwice => K::DuplicateSetting,
            ContextProblem::NeedsWindow { .. } => K::MissingKey,
            ContextProblem::EmptyModel => K::EmptyValue,
        }
    }

    /// What is wrong.
    pub(super) fn message(&self) -> String {
        match self {
            ContextProblem::CompactAt(v) => {
                format!("`compact_at` must be more than 0.1 and at most 0.95, found {v}")
            }
            ContextProblem::KeepRecentShape => {
                "`keep_recent` must give exactly one of `turns` and `tokens`".into()
            }
            ContextProblem::UnknownStrategy { found, .. } => {
                format!("unknown `strategy` value `{found}`")
            }
            ContextProblem::NativeUnsupported => {
                "`strategy: native` (the provider's own compaction) is not supported yet".into()
            }
            ContextProblem::WindowTwice => "the context window is given twice \
                 (`runtime.history_window_tokens` and `runtime.context.window`)"
                .into(),
            ContextProblem::NeedsWindow { model } => {
                format!("ninetrix does not know the context window of model `{model}`")
            }
            ContextProblem::KeepsEverything { keep, threshold } => format!(
                "`keep_recent.tokens` ({keep}) must be less than the compaction threshold \
                 ({threshold} tokens = compact_at × window): nothing would be left to compact"
            ),
            ContextProblem::EmptyModel => "`model` is empty".into(),
        }
    }

    /// What to do.
    pub(super) fn help(&self) -> String {
        match self {
            ContextProblem::CompactAt(_) => format!(
                "give the share of the window at which to compact, e.g. `compact_at: {DEFAULT_COMPACT_AT}`"
            ),
            ContextProblem::KeepRecentShape => {
                "write `keep_recent: {turns: 2}` or `keep_recent: {tokens: 20000}`".into()
            }
            ContextProblem::UnknownStrategy { closest, .. } => {
                let mut help = "`strategy` is `summarize` (the default: a model writes a summary \
                                of the older turns), `clear_tool_results` (their tool results are \
                                replaced by a stub, no model call) or `native`"
                    .to_string();
                if let Some(c) = closest {
                    help.push_str(&format!("; did you mean `{c}`?"));
                }
                help
            }
            ContextProblem::NativeUnsupported => {
                "use `summarize` or `clear_tool_results`; either keeps the original messages in \
                 the store"
                    .into()
            }
            ContextProblem::WindowTwice => "keep one: `runtime.context.window` is the same \
                 setting (history_window_tokens is the public Ninetrix's name for it)"
                .into(),
            ContextProblem::NeedsWindow { .. } => {
                "give the model's window in tokens, e.g. `runtime.context.window: 128000`".into()
            }
            ContextProblem::KeepsEverything { .. } => {
                "keep fewer tokens, or raise `compact_at` or `window`".into()
            }
            ContextProblem::EmptyModel => {
                "name the model that writes summaries, or remove the key to use the agent's".into()
            }
        }
    }
}

pub(super) const CONTEXT: Section<ContextIn> = Section {
    what: "context",
    keys: &[
        ("window", |cx, c, f| {
            let w = cx.integer(f.value, &f.path, MIN_WINDOW, MAX_WINDOW)?;
            c.window = Some((w, f.value.loc));
            Some(())
        }),
        ("compact_at", |cx, c, f| {
            let v = cx.number(f.value, &f.path)?;
            if !(v > 0.1 && v <= 0.95) {
                cx.report(
                    &f.path,
                    f.value.loc,
                    Problem::Context(ContextProblem::CompactAt(v)),
                );
                return None;
            }
            c.compact_at = Some(v);
            Some(())
        }),
        ("keep_recent", |cx, c, f| {
            let mut keep = KeepIn::default();
            let ok = cx.dispatch(f.value, &f.path, &KEEP, &mut keep)?;
            if !ok {
                return None;
            }
            let keep = match (keep.turns, keep.tokens) {
                (Some(n), None) => KeepRecent::Turns(n),
                (None, Some(n)) => KeepRecent::Tokens(n),
                _ => {
                    cx.report(
                        &f.path,
                        f.value.loc,
                        Problem::Context(ContextProblem::KeepRecentShape),
                    );
                    return None;
                }
            };
            c.keep_recent = Some((keep, f.value.loc));
            Some(())
        }),
        ("strategy", |cx, c, f| {
            let text = cx.string(f.value, &f.path)?;
            let Some((_, strategy)) = Strategy::ALL.iter().find(|(name, _)| *name == text) else {
                let names: Vec<&str> = Strategy::ALL.iter().map(|(n, _)| *n).collect();
                let problem = ContextProblem::UnknownStrategy {
                    found: &text,
                    closest: closest(&text, &names),
                };
                cx.report(&f.path, f.value.loc, Problem::Context(problem));
                return None;
            };
            if *strategy == Strategy::Native {
                cx.report(
                    &f.path,
                    f.value.loc,
                    Problem::Context(ContextProblem::NativeUnsupported),
                );
                return None;
            }
            c.strategy = Some((*strategy, f.value.loc));
            Some(())
        }),
        ("model", |cx, c, f| {
            let m = cx.string(f.value, &f.path)?;
            if m.trim().is_empty() {
                cx.report(
                    &f.path,
                    f.value.loc,
                    Problem::Context(ContextProblem::EmptyModel),
                );
                return None;
            }
            c.model = Some(m);
            Some(())
        }),
    ],
    unsupported: &[],
};

/// `keep_recent:` as written.
#[derive(Default)]
pub(super) struct KeepIn {
    turns: Option<u32>,
    tokens: Option<u32>,
}

pub(super) const KEEP: Section<KeepIn> = Section {
    what: "keep_recent",
    keys: &[
        ("turns", |cx, k, f| {
            k.turns = Some(cx.integer(f.value, &f.path, 0, 10_000)?);
            Some(())
        }),
        ("tokens", |cx, k, f| {
            k.tokens = Some(cx.integer(f.value, &f.path, 0, MAX_WINDOW)?);
            Some(())
        }),
    ],
    unsupported: &[],
};

impl Cx {
    /// Decodes `runtime.context:`; `None` when it is not a mapping (reported).
    pub(super) fn context_in(&mut self, node: &Node, path: &str) -> Option<ContextIn> {
        let mut c = ContextIn::default();
        c.ok = self.dispatch(node, path, &CONTEXT, &mut c)?;
        Some(c)
    }

    /// The agent's context policy: the model table's defaults, then `history_window_tokens`
    /// (`shorthand`), then `runtime.context` (`written`, and where its key is).
    pub(super) fn context_policy(
        &mut self,
        model: &str,
        written: Option<(ContextIn, Loc)>,
        shorthand: Option<(u32, Loc)>,
        runtime_path: &str,
    ) -> Option<ContextPolicy> {
        let mut policy = ContextPolicy::default_for(model);
        if let Some((w, _)) = shorthand {
            policy.window = Some(w);
            policy.window_source = Some(WindowSource::Shorthand);
        }
        let Some((c, at)) = written else {
            return Some(policy);
        };
        let path = join(runtime_path, "context");
        if !c.ok {
            return None;
        }
        if let Some((w, loc)) = c.window {
            if shorthand.is_some() {
                let p = join(&path, "window");
                self.report(&p, loc, Problem::Context(ContextProblem::WindowTwice));
                return None;
            }
            policy.window = Some(w);
            policy.window_source = Some(WindowSource::Agentfile);
        }
        if policy.window.is_none() {
            self.report(
                &path,
                at,
                Problem::Context(ContextProblem::NeedsWindow { model }),
            );
            return None;
        }
        if let Some(v) = c.compact_at {
            policy.compact_at = v;
        }
        if let Some((s, _)) = c.strategy {
            policy.strategy = s;
        }
        policy.model = c.model;
        if let Some((keep, loc)) = c.keep_recent {
            if let (KeepRecent::Tokens(n), Some(threshold)) = (keep, policy.threshold())
                && u64::from(n) >= threshold
            {
                let problem = ContextProblem::KeepsEverything { keep: n, threshold };
                self.report(&join(&path, "keep_recent"), loc, Problem::Context(problem));
                return None;
            }
            policy.keep_recent = keep;
        }
        Some(policy)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use crate::context::{KeepRecent, Strategy, WindowSource};

    fn agent(runtime: &str) -> String {
        format!("agents:\n  a:\n    runtime:\n{runtime}")
    }

    #[test]
    fn a_known_model_gets_its_window_and_the_defaults() {
        let p = valid(&agent("      model: claude-sonnet-4-6\n"));
        let c = &p.agentfile.agents[0].runtime.context;
        assert_eq!(
            (c.window, c.window_source, c.strategy, c.keep_recent),
            (
                Some(200_000),
                Some(WindowSource::ModelTable),
                Strategy::Summarize,
                KeepRecent::Turns(2)
            )
        );
    }

    #[test]
    fn every_setting_is_read() {
        let p = valid(&agent(
            "      provider: openai\n      model: my-local\n      base_url: http://127.0.0.1:9/v1\n      context:\n        window: 32000\n        compact_at: 0.6\n        keep_recent: { tokens: 4000 }\n        strategy: clear_tool_results\n        model: small-model\n",
        ));
        let c = &p.agentfile.agents[0].runtime.context;
        assert_eq!(c.window, Some(32_000));
        assert_eq!(c.compact_at, 0.6);
        assert_eq!(c.keep_recent, KeepRecent::Tokens(4000));
        assert_eq!(c.strategy, Strategy::ClearToolResults);
        assert_eq!(c.model.as_deref(), Some("small-model"));
        assert_eq!(c.threshold(), Some(19_200));
    }

    #[test]
    fn the_public_ninetrix_shorthand_sets_the_window() {
        let p = valid(&agent(
            "      provider: scripted\n      script: [hi]\n      history_window_tokens: 90000\n",
        ));
        let c = &p.agentfile.agents[0].runtime.context;
        assert_eq!(
            (c.window, c.window_source),
            (Some(90_000), Some(WindowSource::Shorthand))
        );
        assert!(
            c.describe().contains("history_window_tokens"),
            "{}",
            c.describe()
        );
    }

    #[test]
    fn bad_settings_are_errors_with_their_place() {
        assert_error(
            &agent(
                "      model: llama3\n      provider: openai\n      base_url: http://127.0.0.1:9/v1\n      context:\n        compact_at: 0.5\n",
            ),
            "missing_key",
            (7, 7),
            "ninetrix does not know the context window of model `llama3`",
        );
        assert_error(
            &agent("      context:\n        compact_at: 1.5\n"),
            "out_of_range",
            (5, 21),
            "`compact_at` must be more than 0.1 and at most 0.95, found 1.5",
        );
        assert_error(
            &agent("      context:\n        strategy: sumarize\n"),
            "invalid_value",
            (5, 19),
            "unknown `strategy` value `sumarize`",
        );
        let d = assert_error(
            &agent("      context:\n        strategy: native\n"),
            "unsupported_key",
            (5, 19),
            "`strategy: native` (the provider's own compaction) is not supported yet",
        );
        assert!(d.help.unwrap().contains("summarize"));
        assert_error(
            &agent("      context:\n        keep_recent: { turns: 2, tokens: 9 }\n"),
            "invalid_value",
            (5, 22),
            "`keep_recent` must give exactly one of `turns` and `tokens`",
        );
        assert_error(
            &agent("      history_window_tokens: 9000\n      context:\n        window: 9000\n"),
            "duplicate_setting",
            (6, 17),
            "the context window is given twice (`runtime.history_window_tokens` and `runtime.context.window`)",
        );
        assert_error(
            &agent(
                "      context:\n        window: 10000\n        keep_recent: { tokens: 9000 }\n",
            ),
            "out_of_range",
            (6, 22),
            "`keep_recent.tokens` (9000) must be less than the compaction threshold (8000 tokens = compact_at × window): nothing would be left to compact",
        );
    }
}
