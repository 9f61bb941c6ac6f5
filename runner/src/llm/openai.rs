//! OpenAI's Chat Completions with SSE streaming, for OpenAI and every compatible server
//! (`base_url`): history translation (`role: tool` messages right after the assistant message,
//! arguments as a JSON string) and stream assembly (`tool_calls[].index` fragments concatenated,
//! complete at `finish_reason` + `[DONE]`).

use std::collections::BTreeMap;
use std::time::Duration;

use ninetrix_proto::{Block, Message, Role};
use serde_json::{Value, json};

use super::{Endpoint, LlmError, LlmRequest, RawTurn, Sampling, read_stream, send};
use crate::config::SecretValue;

pub(crate) struct OpenAi {
    http: reqwest::Client,
    url: String,
    key: Option<SecretValue>,
    model: String,
    max_tokens: u32,
    temperature: f64,
    idle: Duration,
    endpoint: Endpoint,
}

impl OpenAi {
    /// Chat Completions at `endpoint` (its base URL, up to `/chat/completions`).
    pub(crate) fn new(
        http: reqwest::Client,
        endpoint: Endpoint,
        key: Option<SecretValue>,
        sampling: Sampling,
        idle: Duration,
    ) -> Self {
        Self {
            http,
            url: format!("{}/chat/completions", endpoint.base.trim_end_matches('/')),
            key,
            model: endpoint.model.clone(),
            max_tokens: sampling.max_tokens,
            temperature: sampling.temperature,
            idle,
            endpoint,
        }
    }

    pub(crate) async fn complete(&self, req: &LlmRequest<'_>) -> Result<RawTurn, LlmError> {
        let mut body = json!({
            "model": self.model,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "messages": messages(req.system, req.history),
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        if !req.tools.is_empty() {
            body["tools"] = req
                .tools
                .iter()
                .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}))
                .collect();
        }
        let mut request = self.http.post(&self.url).json(&body);
        if let Some(key) = &self.key {
            request = request.bearer_auth(key.expose());
        }
        let resp = send(request, &self.endpoint).await?;
        let mut asm = Assembly {
            model: self.model.clone(),
            stream: req.stream.cloned(),
            ..Assembly::default()
        };
        read_stream(resp, self.idle, |event| asm.on(&event.data)).await?;
        asm.finish()
    }
}

/// Translates the history: the system prompt first; each tool result its own `role: tool`
/// message; thinking blocks are not representable here and are left out.
pub(crate) fn messages(system: Option<&str>, history: &[Message]) -> Vec<Value> {
    let mut out = Vec::new();
    if let Some(system) = system {
        out.push(json!({"role": "system", "content": system}));
    }
    for m in history {
        match m.role {
            Role::User | Role::System => {
                out.push(json!({"role": "user", "content": m.text_content()}))
            }
            Role::Tool => {
                for b in &m.blocks {
                    if let Block::ToolResult {
                        call_id,
                        content,
                        is_error,
                    } = b
                    {
                        let content = if *is_error {
                            format!("Error: {content}")
                        } else {
                            content.clone()
                        };
                        out.push(
                            json!({"role": "tool", "tool_call_id": tool_id(call_id), "content": content}),
                        );
                    }
                }
            }
            Role::Assistant => {
                let text = m.text_content();
                let calls: Vec<Value> = m
                    .blocks
                    .iter()
                    .filter_map(|b| match b {
                        Block::ToolCall { id, name, args } => Some(json!({"id": tool_id(id), "type": "function", "function": {"name": name, "arguments": args_text(args)}})),
                        _ => None,
                    })
                    .collect();
                let mut msg = json!({"role": "assistant", "content": if text.is_empty() { Value::Null } else { text.into() }});
                if !calls.is_empty() {
                    msg["tool_calls"] = calls.into();
                }
                out.push(msg);
            }
        }
    }
    out
}

/// The longest tool-call ID OpenAI accepts.
pub(crate) const MAX_TOOL_ID: usize = 40;

/// A tool call's ID as OpenAI accepts it: at most 40 characters. A longer one (another
/// provider's, met after a fallback) keeps its start and ends with a digest of the whole ID, so
/// a call and its result still match and two IDs never become one.
pub(crate) fn tool_id(id: &str) -> std::borrow::Cow<'_, str> {
    if !id.is_empty() && id.chars().count() <= MAX_TOOL_ID {
        return id.into();
    }
    let digest = super::id_digest(id);
    let kept: String = id.chars().take(MAX_TOOL_ID - digest.len() - 1).collect();
    format!("{kept}_{digest}").into()
}

/// Arguments as OpenAI wants them: a JSON string. Arguments the model sent as invalid JSON are
/// kept as `{"_raw": "..."}` and sent back as the original text.
fn args_text(args: &Value) -> String {
    match args.get("_raw").and_then(Value::as_str) {
        Some(raw) if args.as_object().is_some_and(|o| o.len() == 1) => raw.to_string(),
        _ => args.to_string(),
    }
}

#[derive(Default)]
struct CallBuilder {
    id: String,
    name: String,
    args: String,
}

#[derive(Default)]
pub(crate) struct Assembly {
    text: String,
    calls: BTreeMap<u64, CallBuilder>,
    finish_reason: Option<String>,
    input_tokens: u64,
    output_tokens: u64,
    model: String,
    /// Where the text goes as it streams.
    stream: Option<super::TextSink>,
}

impl Assembly {
    /// Applies one event's data; returns true at `[DONE]`.
    pub(crate) fn on(&mut self, data: &str) -> Result<bool, LlmError> {
        if data.trim() == "[DONE]" {
            return Ok(true);
        }
        let v: Value = serde_json::from_str(data).map_err(|e| LlmError::Transient {
            message: format!("unreadable stream chunk: {e}"),
            retry_after: None,
            rate_limited: false,
        })?;
        if let Some(err) = v.get("error") {
            return Err(LlmError::Transient {
                message: format!("the stream reported an error: {err}"),
                retry_after: None,
                rate_limited: false,
            });
        }
        if let Some(m) = v["model"].as_str() {
            self.model = m.to_string();
        }
        if let Some(usage) = v.get("usage").filter(|u| u.is_object()) {
            self.input_tokens = usage["prompt_tokens"].as_u64().unwrap_or(self.input_tokens);
            self.output_tokens = usage["completion_tokens"]
                .as_u64()
                .unwrap_or(self.output_tokens);
        }
        for choice in v["choices"].as_array().into_iter().flatten() {
            let delta = &choice["delta"];
            if let Some(t) = delta["content"].as_str() {
                super::stream_text(self.stream.as_ref(), t);
                self.text.push_str(t);
            }
            for call in delta["tool_calls"].as_array().into_iter().flatten() {
                let b = self
                    .calls
                    .entry(call["index"].as_u64().unwrap_or(0))
                    .or_default();
                if let Some(id) = call["id"].as_str() {
                    b.id = id.to_string();
                }
                if let Some(name) = call["function"]["name"].as_str() {
                    b.name.push_str(name);
                }
                if let Some(args) = call["function"]["arguments"].as_str() {
                    b.args.push_str(args);
                }
            }
            if let Some(reason) = choice["finish_reason"].as_str() {
                self.finish_reason = Some(reason.to_string());
            }
        }
        Ok(false)
    }

    pub(crate) fn finish(self) -> Result<RawTurn, LlmError> {
        let Some(reason) = self.finish_reason else {
            return Err(LlmError::Transient {
                message: "the stream ended without a finish_reason".into(),
                retry_after: None,
                rate_limited: false,
            });
        };
        if reason == "length" && !self.calls.is_empty() {
            return Err(LlmError::Fatal("the response hit max_tokens in the middle of a tool call; raise runtime.max_tokens".into()));
        }
        let mut blocks = Vec::new();
        if !self.text.is_empty() {
            blocks.push(Block::Text { text: self.text });
        }
        for (i, c) in self.calls {
            let args = if c.args.trim().is_empty() {
                json!({})
            } else {
                // Arguments are an object; anything else (bad JSON, or JSON that is not an
                // object) is kept as its text and answered as bad arguments.
                match serde_json::from_str::<Value>(&c.args) {
                    Ok(args @ Value::Object(_)) => args,
                    _ => json!({"_raw": c.args}),
                }
            };
            let id = if c.id.is_empty() {
                format!("call_{i}")
            } else {
                c.id
            };
            blocks.push(Block::ToolCall {
                id,
                name: c.name,
                args,
            });
        }
        Ok(RawTurn {
            message: Message::new(Role::Assistant, blocks),
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
            stop_reason: reason,
            model: self.model,
        })
    }
}
