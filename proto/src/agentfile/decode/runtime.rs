//! `runtime`: provider resolution, model, sampling, container resources, and the `scripted`
//! provider's script (checked against the agent's tools).

use super::*;

impl Cx {
    /// Decodes `runtime:`; also returns Ninetrix's `runtime.max_turns`, which belongs to execution.
    pub(super) fn runtime(
        &mut self,
        entry: Option<(&Key, &Node)>,
        agent_path: &str,
        agent_loc: Loc,
        tools: Option<&[ToolSpec]>,
    ) -> Option<(Runtime, Option<(u32, Loc)>)> {
        let path = join(agent_path, "runtime");
        let (fields, at) = match entry {
            Some((k, v)) => (self.fields(v, &path, &RUNTIME)?, k.loc),
            None => (Vec::new(), agent_loc),
        };
        let mut ok = true;
        let mut provider_name: Option<(String, Loc)> = None;
        let mut model: Option<(String, Loc)> = None;
        let mut base_url = None;
        let mut api_key_secret = None;
        let mut temperature = defaults::TEMPERATURE;
        let mut max_tokens = defaults::MAX_TOKENS;
        let mut tool_timeout = defaults::TOOL_TIMEOUT_SECS;
        let mut image: Option<(String, &'static str)> = None;
        let mut resources = Resources::default();
        let mut script: Option<(Vec<ScriptStep>, Loc, &Node)> = None;
        let mut max_turns = None;
        for (k, v) in fields {
            let p = join(&path, &k.name);
            match k.name.as_str() {
                "provider" => match self.string(v, &p) {
                    Some(s) => provider_name = Some((s, v.loc)),
                    None => ok = false,
                },
                "model" => match self.string(v, &p) {
                    Some(s) => model = Some((s, v.loc)),
                    None => ok = false,
                },
                "base_url" => match self.opt_string(v, &p) {
                    Some(url)
                        if !(url.starts_with("http://") || url.starts_with("https://"))
                            || url.len() < 10 =>
                    {
                        self.error("invalid_url", &p, v.loc, format!("`base_url` must be an http:// or https:// URL, found \"{url}\""))
                            .help = Some("for a model server on this machine use http://host.docker.internal:<port>/v1".into());
                        ok = false;
                    }
                    Some(url) => base_url = Some(url.trim_end_matches('/').to_string()),
                    None => ok &= matches!(v.kind, Kind::Null),
                },
                "api_key_secret" => match self.string(v, &p) {
                    Some(s) if names::is_valid_secret_name(&s) => api_key_secret = Some(s),
                    Some(s) => {
                        self.secret_name_error(&p, v.loc, &s);
                        ok = false;
                    }
                    None => ok = false,
                },
                "temperature" => {
                    match self.number(v, &p) {
                        Some(t) if (0.0..=2.0).contains(&t) => temperature = t,
                        Some(t) => {
                            self.error("out_of_range", &p, v.loc, format!("`temperature` must be between 0 and 2, found {t}"))
                            .help = Some("0 is the most deterministic, 2 the most random; most agents use 0–1".into());
                            ok = false;
                        }
                        None => ok = false,
                    }
                }
                "max_tokens" => match self.integer(v, &p, 1, 1_000_000) {
                    Some(n) => max_tokens = n,
                    None => ok = false,
                },
                "tool_timeout" => match self.integer(v, &p, 1, 86_400) {
                    Some(n) => tool_timeout = n,
                    None => ok = false,
                },
                "image" => match self.opt_string(v, &p) {
                    Some(s) => image = Some((s, "runtime.image")),
                    None => ok &= matches!(v.kind, Kind::Null),
                },
                "resources" => match self.resources(v, &p, &mut image) {
                    Some(r) => resources = r,
                    None => ok = false,
                },
                "script" => match self.script(v, &p) {
                    Some(s) => script = Some((s, k.loc, v)),
                    None => ok = false,
                },
                "max_turns" => match self.integer(v, &p, 1, 1000) {
                    Some(n) => max_turns = Some((n, v.loc)),
                    None => ok = false,
                },
                _ => {}
            }
        }

        let (name, name_loc) = provider_name
            .clone()
            .unwrap_or_else(|| (defaults::PROVIDER.to_string(), at));
        let mut via = None;
        let (provider, default_secret) = match providers::resolve(&name) {
            Some(Resolution::Native {
                provider,
                key_secret,
            }) => (Some(provider), key_secret),
            Some(Resolution::OpenaiCompatible {
                base_url: url,
                key_secret,
            }) => {
                via = Some(name.clone());
                if base_url.is_none() {
                    base_url = Some(url.to_string());
                }
                (Some(Provider::Openai), Some(key_secret))
            }
            Some(Resolution::Rejected(why)) => {
                self.error(
                    "unsupported_provider",
                    &join(&path, "provider"),
                    name_loc,
                    format!("provider `{name}` cannot be used directly"),
                )
                .help = Some(why.to_string());
                (None, None)
            }
            None => {
                let known = providers::known_names();
                let help = match closest(&name, &known) {
                    Some(s) => format!("did you mean `{s}`? Providers: {}", known.join(", ")),
                    None => format!("providers: {}", known.join(", ")),
                };
                self.error(
                    "unknown_provider",
                    &join(&path, "provider"),
                    name_loc,
                    format!("unknown provider `{name}`"),
                )
                .help = Some(help);
                (None, None)
            }
        };
        let provider = provider?;
        // A custom base_url with the plain openai provider is usually a local server with no key.
        let key_secret = api_key_secret.or_else(|| {
            let local_openai = provider == Provider::Openai && via.is_none() && base_url.is_some();
            (!local_openai)
                .then(|| default_secret.map(str::to_string))
                .flatten()
        });

        let model = match (provider, model) {
            (Provider::Scripted, None) => "scripted".to_string(),
            (Provider::Anthropic, None) if provider_name.is_none() => {
                defaults::ANTHROPIC_MODEL.to_string()
            }
            (_, None) => {
                self.error(
                    "missing_key",
                    &join(&path, "model"),
                    at,
                    format!("`runtime.model` is required for provider `{name}`"),
                )
                .help = Some(
                    "name the model, e.g. `model: claude-sonnet-4-6` or `model: gpt-4o-mini`"
                        .into(),
                );
                return None;
            }
            (_, Some((m, loc))) if m.trim().is_empty() => {
                self.error(
                    "empty_value",
                    &join(&path, "model"),
                    loc,
                    "`model` is empty",
                )
                .help = Some(
                    "name the model, e.g. `model: claude-sonnet-4-6` or `model: gpt-4o-mini`"
                        .into(),
                );
                return None;
            }
            (_, Some((m, _))) => m,
        };

        let script_steps = match (provider, script) {
            (Provider::Scripted, None) => {
                self.error(
                    "missing_key",
                    &join(&path, "script"),
                    at,
                    "provider `scripted` needs `runtime.script`",
                )
                .help = Some(
                    "list the model's responses, e.g. `script: [{ text: \"Hello!\" }]`".into(),
                );
                return None;
            }
            (Provider::Scripted, Some((steps, loc, _))) if steps.is_empty() => {
                self.error(
                    "empty_value",
                    &join(&path, "script"),
                    loc,
                    "`script` is empty",
                )
                .help = Some(
                    "list at least one response, e.g. `script: [{ text: \"Hello!\" }]`".into(),
                );
                return None;
            }
            (Provider::Scripted, Some((steps, _, node))) => {
                self.script_tools(&steps, node, &join(&path, "script"), tools);
                steps
            }
            (_, Some((_, loc, _))) => {
                self.error(
                    "script_not_scripted",
                    &join(&path, "script"),
                    loc,
                    format!("`script` is only used by provider `scripted`, not `{name}`"),
                )
                .help = Some(
                    "remove `script`, or set `provider: scripted` to run the agent offline".into(),
                );
                return None;
            }
            (_, None) => Vec::new(),
        };
        if !ok {
            return None;
        }
        Some((
            Runtime {
                provider,
                via,
                model,
                base_url,
                api_key_secret: key_secret,
                temperature,
                max_tokens,
                tool_timeout_secs: tool_timeout,
                image: image.map(|(s, _)| s),
                resources,
                script: script_steps,
            },
            max_turns,
        ))
    }

    pub(super) fn resources(
        &mut self,
        node: &Node,
        path: &str,
        image: &mut Option<(String, &'static str)>,
    ) -> Option<Resources> {
        let fields = self.fields(node, path, &RESOURCES)?;
        let mut r = Resources::default();
        let mut ok = true;
        for (k, v) in fields {
            let p = join(path, &k.name);
            match k.name.as_str() {
                "cpu" => match self.number(v, &p) {
                    Some(c) if c > 0.0 && c <= 1024.0 => r.cpu = Some(c),
                    Some(c) => {
                        self.error(
                            "out_of_range",
                            &p,
                            v.loc,
                            format!("`cpu` must be more than 0, found {c}"),
                        )
                        .help = Some("give CPUs as a number, e.g. `cpu: 0.5` or `cpu: 2`".into());
                        ok = false;
                    }
                    None => ok = false,
                },
                "memory" => {
                    let text = match &v.kind {
                        Kind::Str(s) => Some(s.clone()),
                        Kind::Int(i) => Some(i.to_string()),
                        _ => None,
                    };
                    match text.as_deref().map(|t| (t, units::parse_memory(t))) {
                        Some((_, Some(bytes))) if bytes >= units::MIN_MEMORY_BYTES => {
                            r.memory_bytes = Some(bytes)
                        }
                        Some((t, Some(_))) => {
                            self.error(
                                "out_of_range",
                                &p,
                                v.loc,
                                format!("memory `{t}` is below Docker's minimum of 6Mi"),
                            )
                            .help = Some(
                                "give at least `6Mi`; agents usually need `128Mi` or more".into(),
                            );
                            ok = false;
                        }
                        Some((t, None)) => {
                            self.error("invalid_memory", &p, v.loc, format!("`{t}` is not a memory size"))
                                .help = Some("write a number with a unit: `512Mi`, `1Gi`, `2g` (units are powers of 1024)".into());
                            ok = false;
                        }
                        None => {
                            self.type_error(&p, v, "a memory size such as \"512Mi\"");
                            ok = false;
                        }
                    }
                }
                "base_image" => match self.opt_string(v, &p) {
                    Some(s) => {
                        if image.is_some() {
                            self.error("duplicate_setting", &p, k.loc, "the base image is given twice (`runtime.image` and `runtime.resources.base_image`)")
                                .help = Some("keep `runtime.image` and remove `resources.base_image`".into());
                            ok = false;
                        } else {
                            *image = Some((s, "runtime.resources.base_image"));
                        }
                    }
                    None => ok &= matches!(v.kind, Kind::Null),
                },
                _ => {}
            }
        }
        ok.then_some(r)
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
        let fields = self.fields(node, path, &SCRIPT_STEP)?;
        let mut step = ScriptStep {
            text: None,
            tool_calls: Vec::new(),
        };
        let mut ok = true;
        for (k, v) in fields {
            let p = join(path, &k.name);
            match k.name.as_str() {
                "text" => match self.string(v, &p) {
                    Some(t) => step.text = Some(t),
                    None => ok = false,
                },
                _ => {
                    let Kind::Seq(calls) = &v.kind else {
                        self.type_error(&p, v, "a list of tool calls");
                        ok = false;
                        continue;
                    };
                    for (i, call) in calls.iter().enumerate() {
                        match self.tool_call(call, &format!("{p}[{i}]")) {
                            Some(c) => step.tool_calls.push(c),
                            None => ok = false,
                        }
                    }
                }
            }
        }
        if ok && step.text.is_none() && step.tool_calls.is_empty() {
            self.error("empty_value", path, node.loc, "a script step needs `text` or `tool_calls`")
                .help = Some("e.g. `- text: \"Done.\"` or `- tool_calls: [{ name: file_read, args: { path: notes.md } }]`".into());
            return None;
        }
        ok.then_some(step)
    }

    pub(super) fn tool_call(&mut self, node: &Node, path: &str) -> Option<ScriptedToolCall> {
        let fields = self.fields(node, path, &TOOL_CALL)?;
        let mut name = None;
        let mut args = Some(serde_json::Value::Object(Default::default()));
        for (k, v) in fields {
            let p = join(path, &k.name);
            match k.name.as_str() {
                "name" => name = self.string(v, &p),
                _ => {
                    args = match &v.kind {
                        Kind::Map(_) => self.json(v, &p),
                        Kind::Null => Some(serde_json::Value::Object(Default::default())),
                        _ => {
                            self.type_error(&p, v, "a mapping of arguments");
                            None
                        }
                    }
                }
            }
        }
        if name.is_none() && !self.diags.iter().any(|d| d.path.starts_with(path)) {
            self.error(
                "missing_key",
                &join(path, "name"),
                node.loc,
                "a scripted tool call needs `name`",
            )
            .help = Some("e.g. `{ name: file_read, args: { path: notes.md } }`".into());
        }
        Some(ScriptedToolCall {
            name: name?,
            args: args?,
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
                    self.error(
                        "wrong_type",
                        path,
                        node.loc,
                        "tool arguments cannot hold NaN or infinity",
                    );
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
                if tools.iter().any(|t| t.name == call.name) {
                    continue;
                }
                let loc = find_call_name(item, j).unwrap_or(item.loc);
                let declared: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
                let help = if declared.is_empty() {
                    format!("add `{}` to the agent's `tools:`", call.name)
                } else {
                    format!(
                        "add `{}` to the agent's `tools:` (it has: {})",
                        call.name,
                        declared.join(", ")
                    )
                };
                self.error(
                    "undeclared_tool",
                    &format!("{path}[{i}].tool_calls[{j}].name"),
                    loc,
                    format!(
                        "the script calls `{}`, which is not one of the agent's tools",
                        call.name
                    ),
                )
                .help = Some(help);
            }
        }
        if let Some(last) = steps.last()
            && !last.tool_calls.is_empty()
        {
            self.warning("script_ends_with_tool_call", path, items.last().map_or(node.loc, |n| n.loc), "the script's last step calls tools, so its turns never end with a reply from it")
                .help = Some("end the script with a text-only step (the final answer); the script repeats from the start after its last step".into());
        }
    }
}
