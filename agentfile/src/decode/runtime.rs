//! `runtime`: the model (provider resolution is `endpoint`'s), sampling, container resources,
//! and the `scripted` provider's script (checked against the agent's tools); its `limits` and
//! `fallback` are read by `limits`.

use super::context::ContextIn;
use super::limits::{self, FallbackIn};
use super::*;
use crate::context::{MAX_WINDOW, MIN_WINDOW};

/// `runtime:` as written, after each key's own checks and before provider resolution.
pub(super) struct RuntimeIn {
    /// Where a missing key is reported: the `runtime` key, or the agent when there is none.
    at: Loc,
    provider: Option<(String, Loc)>,
    model: Option<(String, Loc)>,
    base_url: Option<String>,
    api_key_secret: Option<String>,
    temperature: f64,
    max_tokens: u32,
    tool_timeout: u32,
    image: Option<String>,
    resources: Resources,
    /// `resources.base_image` and where its key is; it becomes the image unless
    /// `runtime.image` is also given.
    base_image: Option<(String, Loc)>,
    /// The steps, where the `script` key is, and its value (for locating tool calls).
    script: Option<(Vec<ScriptStep>, Loc, Node)>,
    /// Ninetrix's `runtime.max_turns`, which belongs to execution.
    max_turns: Option<(u32, Loc)>,
    /// `runtime.context`, and where its key is.
    context: Option<(ContextIn, Loc)>,
    /// The public Ninetrix's `runtime.history_window_tokens`, and where its value is.
    history_window_tokens: Option<(u32, Loc)>,
    /// `runtime.limits`, and where its key is.
    limits: Option<(ModelLimits, Loc)>,
    /// `runtime.fallback`'s entries, each resolved on its own.
    fallback: Option<Vec<FallbackIn>>,
    /// `runtime.fallback_after` in seconds, and where its key is.
    fallback_after: Option<(u64, Loc)>,
    /// `runtime.isolation`: the container runtime, `None` for the engine's default.
    isolation: Option<String>,
    /// `runtime.jobs`, and where its key is.
    jobs: Option<(crate::Jobs, Loc)>,
    /// Every key decoded without error.
    ok: bool,
}

impl RuntimeIn {
    /// A runtime with no keys set: every default.
    pub(super) fn new(at: Loc) -> Self {
        Self {
            at,
            provider: None,
            model: None,
            base_url: None,
            api_key_secret: None,
            temperature: defaults::TEMPERATURE,
            max_tokens: defaults::MAX_TOKENS,
            tool_timeout: defaults::TOOL_TIMEOUT_SECS,
            image: None,
            resources: Resources::default(),
            base_image: None,
            script: None,
            max_turns: None,
            context: None,
            history_window_tokens: None,
            limits: None,
            fallback: None,
            fallback_after: None,
            isolation: None,
            jobs: None,
            ok: true,
        }
    }
}

pub(super) const RUNTIME: Section<RuntimeIn> = Section {
    what: "runtime",
    keys: &[
        ("provider", |cx, r, f| {
            r.provider = Some((cx.string(f.value, &f.path)?, f.value.loc));
            Some(())
        }),
        ("model", |cx, r, f| {
            r.model = Some((cx.string(f.value, &f.path)?, f.value.loc));
            Some(())
        }),
        ("base_url", |cx, r, f| {
            r.base_url = cx.base_url(&f)?;
            Some(())
        }),
        ("api_key_secret", |cx, r, f| {
            r.api_key_secret = Some(cx.api_key_secret(&f)?);
            Some(())
        }),
        ("temperature", |cx, r, f| {
            let t = cx.number(f.value, &f.path)?;
            if !(0.0..=2.0).contains(&t) {
                cx.report(&f.path, f.value.loc, Problem::Temperature(t));
                return None;
            }
            r.temperature = t;
            Some(())
        }),
        ("max_tokens", |cx, r, f| {
            r.max_tokens = cx.integer(f.value, &f.path, 1, 1_000_000)?;
            Some(())
        }),
        ("tool_timeout", |cx, r, f| {
            r.tool_timeout = cx.integer(f.value, &f.path, 1, 86_400)?;
            Some(())
        }),
        ("image", |cx, r, f| {
            r.image = cx.nullable_string(&f)?;
            Some(())
        }),
        ("resources", |cx, r, f| {
            let mut res = ResourcesIn::default();
            let ok = cx.dispatch(f.value, &f.path, &RESOURCES, &mut res)?;
            r.resources = res.resources;
            // Kept even when another resource is invalid, so a second base image is reported.
            r.base_image = res.base_image;
            ok.then_some(())
        }),
        ("script", |cx, r, f| {
            let steps = cx.script(f.value, &f.path)?;
            r.script = Some((steps, f.key.loc, f.value.clone()));
            Some(())
        }),
        ("max_turns", |cx, r, f| {
            r.max_turns = Some((cx.integer(f.value, &f.path, 1, 1000)?, f.value.loc));
            Some(())
        }),
        ("context", |cx, r, f| {
            r.context = Some((cx.context_in(f.value, &f.path)?, f.key.loc));
            Some(())
        }),
        ("history_window_tokens", |cx, r, f| {
            let w = cx.integer(f.value, &f.path, MIN_WINDOW, MAX_WINDOW)?;
            r.history_window_tokens = Some((w, f.value.loc));
            Some(())
        }),
        ("limits", |cx, r, f| {
            r.limits = Some((cx.limits_in(f.value, &f.path)?, f.key.loc));
            Some(())
        }),
        ("fallback", |cx, r, f| {
            let (entries, ok) = cx.fallback_in(f.value, &f.path, f.key.loc)?;
            // The valid entries are still compared with the primary model and each other.
            r.fallback = Some(entries);
            ok.then_some(())
        }),
        ("fallback_after", |cx, r, f| {
            let secs = cx.duration(f.value, &f.path, DurationField::FallbackAfter)?;
            r.fallback_after = Some((secs, f.key.loc));
            Some(())
        }),
        ("isolation", |cx, r, f| {
            r.isolation = cx.isolation(&f)?;
            Some(())
        }),
        ("jobs", |cx, r, f| {
            r.jobs = Some((cx.jobs(f.value, &f.path)?, f.key.loc));
            Some(())
        }),
    ],
    unsupported: &[],
};

/// `runtime.resources:` as written.
#[derive(Default)]
pub(super) struct ResourcesIn {
    resources: Resources,
    /// `base_image` and where its key is.
    base_image: Option<(String, Loc)>,
}

pub(super) const RESOURCES: Section<ResourcesIn> = Section {
    what: "resources",
    keys: &[
        ("cpu", |cx, r, f| {
            r.resources.cpu = Some(cx.cpu(&f)?);
            Some(())
        }),
        ("memory", |cx, r, f| {
            r.resources.memory_bytes = Some(cx.memory(&f)?);
            Some(())
        }),
        ("base_image", |cx, r, f| {
            r.base_image = cx.nullable_string(&f)?.map(|s| (s, f.key.loc));
            Some(())
        }),
    ],
    unsupported: &["storage", "warm_pool"],
};

/// A `scripted` response as written.
pub(super) struct StepIn {
    text: Option<String>,
    tool_calls: Vec<ScriptedToolCall>,
}

pub(super) const SCRIPT_STEP: Section<StepIn> = Section {
    what: "a script step",
    keys: &[
        ("text", |cx, step, f| {
            step.text = Some(cx.string(f.value, &f.path)?);
            Some(())
        }),
        ("tool_calls", |cx, step, f| {
            let Kind::Seq(calls) = &f.value.kind else {
                cx.type_error(&f.path, f.value, "a list of tool calls");
                return None;
            };
            let mut ok = true;
            for (i, call) in calls.iter().enumerate() {
                match cx.tool_call(call, &format!("{}[{i}]", f.path)) {
                    Some(c) => step.tool_calls.push(c),
                    None => ok = false,
                }
            }
            ok.then_some(())
        }),
    ],
    unsupported: &[],
};

/// A scripted tool call as written. Each part is `None` when it is invalid.
pub(super) struct CallIn {
    name: Option<String>,
    args: Option<serde_json::Value>,
}

pub(super) const TOOL_CALL: Section<CallIn> = Section {
    what: "a scripted tool call",
    keys: &[
        ("name", |cx, call, f| {
            call.name = cx.string(f.value, &f.path);
            Some(())
        }),
        ("args", |cx, call, f| {
            call.args = match &f.value.kind {
                Kind::Map(_) => cx.json(f.value, &f.path),
                Kind::Null => Some(serde_json::Value::Object(Default::default())),
                _ => {
                    cx.type_error(&f.path, f.value, "a mapping of arguments");
                    None
                }
            };
            Some(())
        }),
    ],
    unsupported: &[],
};

impl RuntimeIn {
    /// Where the `runtime.jobs` key is, when it is given.
    pub(super) fn jobs_at(&self) -> Option<Loc> {
        self.jobs.as_ref().map(|(_, at)| *at)
    }
}

impl Cx {
    /// Decodes `runtime:`'s keys; [`Cx::runtime`] resolves them once the agent's tools are known.
    /// `at` is where the `runtime` key is.
    pub(super) fn runtime_in(&mut self, node: &Node, path: &str, at: Loc) -> Option<RuntimeIn> {
        let mut r = RuntimeIn::new(at);
        r.ok = self.dispatch(node, path, &RUNTIME, &mut r)?;
        if let Some((_, at)) = r.fallback_after
            && !limits::fallback_written(node)
        {
            let path = join(path, "fallback_after");
            self.report(&path, at, Problem::FallbackAfterUnused);
        }
        if let Some((base_image, loc)) = r.base_image.take() {
            if r.image.is_some() {
                self.report(
                    &join(path, "resources.base_image"),
                    loc,
                    Problem::BaseImageTwice,
                );
                r.ok = false;
            } else {
                r.image = Some(base_image);
            }
        }
        Some(r)
    }

    /// Resolves a decoded `runtime:` into the agent's [`Runtime`]; also returns Ninetrix's
    /// `runtime.max_turns`, which belongs to execution.
    pub(super) fn runtime(
        &mut self,
        r: RuntimeIn,
        agent_path: &str,
        tools: Option<&[ToolSpec]>,
    ) -> Option<(Runtime, Option<(u32, Loc)>)> {
        let path = join(agent_path, "runtime");
        let (name, name_loc) = r
            .provider
            .clone()
            .unwrap_or_else(|| (defaults::PROVIDER.to_string(), r.at));
        let endpoint = self
            .provider(&name, name_loc, &path)?
            .endpoint(r.base_url.clone(), r.api_key_secret.clone());
        let provider = endpoint.provider;
        let model = self.model(provider, &r, &name, &path)?;
        let script = self.script_steps(provider, r.script, &name, r.at, &path, tools)?;
        let context = self.context_policy(&model, r.context, r.history_window_tokens, &path)?;
        let fallback = self.fallbacks(r.fallback, &endpoint, &model)?;
        if !r.ok {
            return None;
        }
        let limits = match r.limits {
            Some((limits, at)) => {
                self.own_limits.insert(agent_path.to_string(), at);
                limits
            }
            None => ModelLimits::default(),
        };
        Some((
            Runtime {
                provider,
                via: endpoint.via,
                model,
                base_url: endpoint.base_url,
                api_key_secret: endpoint.key_secret,
                temperature: r.temperature,
                max_tokens: r.max_tokens,
                tool_timeout_secs: r.tool_timeout,
                image: r.image,
                resources: r.resources,
                script,
                context,
                limits,
                fallback,
                fallback_after_secs: r
                    .fallback_after
                    .map_or(defaults::FALLBACK_AFTER_SECS, |(secs, _)| secs),
                isolation: r.isolation,
                jobs: r.jobs.map(|(jobs, _)| jobs).unwrap_or_default(),
            },
            r.max_turns,
        ))
    }

    /// The model: given, or the provider's default (`scripted`, or Anthropic's when no provider
    /// is named).
    fn model(
        &mut self,
        provider: Provider,
        r: &RuntimeIn,
        name: &str,
        path: &str,
    ) -> Option<String> {
        let path = join(path, "model");
        match (provider, &r.model) {
            (Provider::Scripted, None) => Some("scripted".to_string()),
            (Provider::Anthropic, None) if r.provider.is_none() => {
                Some(defaults::ANTHROPIC_MODEL.to_string())
            }
            (_, None) => {
                self.report(&path, r.at, Problem::MissingModel { provider: name });
                None
            }
            (_, Some((m, loc))) if m.trim().is_empty() => {
                self.report(&path, *loc, Problem::EmptyModel);
                None
            }
            (_, Some((m, _))) => Some(m.clone()),
        }
    }

    /// The script: required and non-empty for provider `scripted` (and its tool calls must be
    /// the agent's tools), refused for every other provider.
    fn script_steps(
        &mut self,
        provider: Provider,
        script: Option<(Vec<ScriptStep>, Loc, Node)>,
        name: &str,
        at: Loc,
        path: &str,
        tools: Option<&[ToolSpec]>,
    ) -> Option<Vec<ScriptStep>> {
        let path = join(path, "script");
        match (provider, script) {
            (Provider::Scripted, None) => {
                self.report(&path, at, Problem::MissingScript);
                None
            }
            (Provider::Scripted, Some((steps, loc, _))) if steps.is_empty() => {
                self.report(&path, loc, Problem::EmptyScript);
                None
            }
            (Provider::Scripted, Some((steps, _, node))) => {
                self.script_tools(&steps, &node, &path, tools);
                Some(steps)
            }
            (_, Some((_, loc, _))) => {
                self.report(&path, loc, Problem::ScriptNotScripted { provider: name });
                None
            }
            (_, None) => Some(Vec::new()),
        }
    }

    /// A number of CPUs: more than 0, at most 1,024.
    pub(super) fn cpu(&mut self, f: &Field<'_>) -> Option<f64> {
        let c = self.number(f.value, &f.path)?;
        if !(c > 0.0 && c <= 1024.0) {
            self.report(&f.path, f.value.loc, Problem::Cpu(c));
            return None;
        }
        Some(c)
    }

    /// A memory size such as `512Mi` (or a number of bytes), at least Docker's minimum.
    pub(super) fn memory(&mut self, f: &Field<'_>) -> Option<u64> {
        let (p, v) = (&f.path, f.value);
        let text = match &v.kind {
            Kind::Str(s) => s.clone(),
            Kind::Int(i) => i.to_string(),
            _ => {
                self.type_error(p, v, "a memory size such as \"512Mi\"");
                return None;
            }
        };
        match units::parse_memory(&text) {
            Some(bytes) if bytes >= units::MIN_MEMORY_BYTES => Some(bytes),
            Some(_) => {
                self.report(p, v.loc, Problem::MemoryTooSmall(&text));
                None
            }
            None => {
                self.report(p, v.loc, Problem::NotAMemorySize(&text));
                None
            }
        }
    }

    pub(super) fn script(&mut self, node: &Node, path: &str) -> Option<Vec<ScriptStep>> {
        let Kind::Seq(items) = &node.kind else {
            self.type_error(path, node, "a list of responses");
            return None;
        };
        let mut steps = Vec::new();
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            let p = format!("{path}[{i}]");
            let step = if let Kind::Str(text) = &item.kind {
                Some(ScriptStep {
                    text: Some(text.clone()),
                    tool_calls: Vec::new(),
                })
            } else {
                self.script_step(item, &p)
            };
            match step {
                Some(s) => steps.push(s),
                None => ok = false,
            }
        }
        ok.then_some(steps)
    }

    pub(super) fn script_step(&mut self, node: &Node, path: &str) -> Option<ScriptStep> {
        let mut step = StepIn {
            text: None,
            tool_calls: Vec::new(),
        };
        if !self.dispatch(node, path, &SCRIPT_STEP, &mut step)? {
            return None;
        }
        if step.text.is_none() && step.tool_calls.is_empty() {
            self.report(path, node.loc, Problem::EmptyScriptStep);
            return None;
        }
        Some(ScriptStep {
            text: step.text,
            tool_calls: step.tool_calls,
        })
    }

    pub(super) fn tool_call(&mut self, node: &Node, path: &str) -> Option<ScriptedToolCall> {
        let mut call = CallIn {
            name: None,
            args: Some(serde_json::Value::Object(Default::default())),
        };
        self.dispatch(node, path, &TOOL_CALL, &mut call)?;
        if call.name.is_none() && !self.diags.iter().any(|d| d.path.starts_with(path)) {
            self.report(&join(path, "name"), node.loc, Problem::MissingCallName);
        }
        Some(ScriptedToolCall {
            name: call.name?,
            args: call.args?,
        })
    }

    /// Converts a node to JSON (for tool arguments).
    pub(super) fn json(&mut self, node: &Node, path: &str) -> Option<serde_json::Value> {
        use serde_json::Value;
        Some(match &node.kind {
            Kind::Null => Value::Null,
            Kind::Bool(b) => Value::Bool(*b),
            Kind::Int(i) => Value::from(*i),
            Kind::Float(f) => match serde_json::Number::from_f64(*f) {
                Some(n) => Value::Number(n),
                None => {
                    self.report(path, node.loc, Problem::NonFiniteArgument);
                    return None;
                }
            },
            Kind::Str(s) => Value::String(s.clone()),
            Kind::Seq(items) => {
                let mut out = Vec::new();
                for (i, item) in items.iter().enumerate() {
                    out.push(self.json(item, &format!("{path}[{i}]"))?);
                }
                Value::Array(out)
            }
            Kind::Map(entries) => {
                let mut out = serde_json::Map::new();
                for (k, v) in entries {
                    out.insert(k.name.clone(), self.json(v, &join(path, &k.name))?);
                }
                Value::Object(out)
            }
        })
    }

    /// Every tool a script calls must be one of the agent's tools.
    pub(super) fn script_tools(
        &mut self,
        steps: &[ScriptStep],
        node: &Node,
        path: &str,
        tools: Option<&[ToolSpec]>,
    ) {
        let Some(tools) = tools else { return };
        let Kind::Seq(items) = &node.kind else { return };
        for (i, (step, item)) in steps.iter().zip(items).enumerate() {
            for (j, call) in step.tool_calls.iter().enumerate() {
                if tools.iter().any(|t| t.offers(&call.name)) {
                    continue;
                }
                let loc = find_call_name(item, j).unwrap_or(item.loc);
                let declared = tools.iter().map(|t| t.name.as_str()).collect();
                let problem = Problem::UndeclaredTool {
                    name: &call.name,
                    declared,
                };
                self.report(&format!("{path}[{i}].tool_calls[{j}].name"), loc, problem);
            }
        }
        if let Some(last) = steps.last()
            && !last.tool_calls.is_empty()
        {
            let loc = items.last().map_or(node.loc, |n| n.loc);
            self.report(path, loc, Problem::ScriptEndsWithToolCall);
        }
    }
}
