//! Anthropic's Messages API with SSE streaming: history translation (tool results as leading
//! `tool_result` blocks of a user message, thinking blocks sent back unchanged) and stream
//! assembly (`content_block_*` by index, `input_json_delta` concatenated and parsed at the end of
//! its block, the message complete only at `message_stop`).

use std::collections::BTreeMap;
use std::time::Duration;

use ninetrix_proto::{Block, Message, Role};
use serde_json::{Value, json};

use super::{Endpoint, LlmError, LlmRequest, RawTurn, Sampling, read_stream, send};
use crate::config::SecretValue;

pub(crate) struct Anthropic {
    http: reqwest::Client,
    url: String,
    key: Option<SecretValue>,
    model: String,
    max_tokens: u32,
    temperature: f64,
    idle: Duration,
    endpoint: Endpoint,
}

impl Anthropic {
    /// The Messages API at `endpoint` (its base URL, with or without `/v1`).
    pub(crate) fn new(
        http: reqwest::Client,
        endpoint: Endpoint,
        key: Option<SecretValue>,
        sampling: Sampling,
        idle: Duration,
    ) -> Self {
        let base = endpoint
            .base
            .trim_end_matches('/')
            .trim_end_matches("/v1")
            .to_string();
        Self {
            http,
            url: format!("{base}/v1/messages"),
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
            "messages": messages(req.history),
            "stream": true,
        });
        if let Some(system) = req.system {
            body["system"] = system.into();
        }
        if !req.tools.is_empty() {
            body["tools"] = req.tools.iter().map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters})).collect();
        }
        let mut request = self
            .http
            .post(&self.url)
            .header("anthropic-version", "2023-06-01")
            .json(&body);
        if let Some(key) = &self.key {
            request = request.header("x-api-key", key.expose());
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

/// Translates the history: consecutive tool messages become one user message whose content
/// starts with their `tool_result` blocks; a user message right after them, or after another
/// user message, joins that user message (roles alternate).
pub(crate) fn messages(history: &[Message]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    let mut results: Vec<Value> = Vec::new();
    let flush = |results: &mut Vec<Value>, out: &mut Vec<Value>| {
        if !results.is_empty() {
            out.push(json!({"role": "user", "content": std::mem::take(results)}));
        }
    };
    for m in history {
        match m.role {
            Role::Tool => {
                for b in &m.blocks {
                    if let Block::ToolResult {
                        call_id,
                        content,
                        is_error,
                    } = b
                    {
                        results.push(json!({"type": "tool_result", "tool_use_id": tool_id(call_id), "content": content, "is_error": is_error}));
                    }
                }
            }
            // A message after tool results or another user message (a steer that joined the
            // turn) goes in the same user message, after its blocks: roles alternate.
            Role::User | Role::System => {
                flush(&mut results, &mut out);
                let text = json!({"type": "text", "text": m.text_content()});
                match out.last_mut() {
                    Some(last) if last["role"] == "user" => {
                        if let Some(blocks) = last["content"].as_array_mut() {
                            blocks.push(text);
                        }
                    }
                    _ => out.push(json!({"role": "user", "content": [text]})),
                }
            }
            Role::Assistant => {
                flush(&mut results, &mut out);
                let content: Vec<Value> = m
                    .blocks
                    .iter()
                    .filter_map(|b| match b {
                        Block::Thinking { text, signature } => Some(json!({"type": "thinking", "thinking": text, "signature": signature.clone().unwrap_or_default()})),
                        Block::Text { text } if !text.is_empty() => Some(json!({"type": "text", "text": text})),
                        Block::ToolCall { id, name, args } => Some(json!({"type": "tool_use", "id": tool_id(id), "name": name, "input": args})),
                        _ => None,
                    })
                    .collect();
                out.push(json!({"role": "assistant", "content": content}));
            }
        }
    }
    flush(&mut results, &mut out);
    out
}

/// A tool call's ID as Anthropic accepts it (`^[a-zA-Z0-9_-]+$`): as it is when it already
/// fits (Anthropic's own `toolu_…`, OpenAI's `call_…`); otherwise — an ID another provider made,
/// such as an OpenAI-compatible server's `call.1:x`, met after a fallback — each other character
/// becomes `_` and a digest of the whole ID follows, so the same ID maps the same way in every
/// request (a call and its result still match) and two IDs never become one.
pub(crate) fn tool_id(id: &str) -> std::borrow::Cow<'_, str> {
    let fits = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    if !id.is_empty() && id.chars().all(fits) {
        return id.into();
    }
    let kept: String = id
        .chars()
        .take(40)
        .map(|c| if fits(c) { c } else { '_' })
        .collect();
    format!("{kept}_{}", super::id_digest(id)).into()
}

#[derive(Default)]
struct BlockBuilder {
    kind: String,
    text: String,
    json: String,
    signature: String,
    id: String,
    name: String,
}

#[derive(Default)]
pub(crate) struct Assembly {
    blocks: BTreeMap<u64, BlockBuilder>,
    done: Vec<(u64, Block)>,
    input_tokens: u64,
    output_tokens: u64,
    stop_reason: String,
    model: String,
    complete: bool,
    /// Where the text goes as it streams.
    stream: Option<super::TextSink>,
}

impl Assembly {
    /// Applies one event's data; returns true at the terminal event.
    pub(crate) fn on(&mut self, data: &str) -> Result<bool, LlmError> {
        let v: Value = serde_json::from_str(data).map_err(|e| LlmError::Transient {
            message: format!("unreadable stream event: {e}"),
            retry_after: None,
            rate_limited: false,
        })?;
        let index = v["index"].as_u64().unwrap_or(0);
        match v["type"].as_str().unwrap_or("") {
            "message_start" => {
                self.input_tokens = v["message"]["usage"]["input_tokens"].as_u64().unwrap_or(0);
                self.output_tokens = v["message"]["usage"]["output_tokens"].as_u64().unwrap_or(0);
                if let Some(m) = v["message"]["model"].as_str() {
                    self.model = m.to_string();
                }
            }
            "content_block_start" => {
                let cb = &v["content_block"];
                let b = BlockBuilder {
                    kind: cb["type"].as_str().unwrap_or("").to_string(),
                    id: cb["id"].as_str().unwrap_or("").to_string(),
                    name: cb["name"].as_str().unwrap_or("").to_string(),
                    text: cb["text"]
                        .as_str()
                        .or_else(|| cb["thinking"].as_str())
                        .unwrap_or("")
                        .to_string(),
                    ..BlockBuilder::default()
                };
                self.blocks.insert(index, b);
            }
            "content_block_delta" => {
                let Some(b) = self.blocks.get_mut(&index) else {
                    return Ok(false);
                };
                let d = &v["delta"];
                match d["type"].as_str().unwrap_or("") {
                    "text_delta" => {
                        let text = d["text"].as_str().unwrap_or("");
                        super::stream_text(self.stream.as_ref(), text);
                        b.text.push_str(text);
                    }
                    "input_json_delta" => b.json.push_str(d["partial_json"].as_str().unwrap_or("")),
                    "thinking_delta" => b.text.push_str(d["thinking"].as_str().unwrap_or("")),
                    "signature_delta" => {
                        b.signature.push_str(d["signature"].as_str().unwrap_or(""))
                    }
                    _ => {}
                }
            }
            "content_block_stop" => {
                if let Some(b) = self.blocks.remove(&index) {
                    let block = match b.kind.as_str() {
                        "text" => Block::Text { text: b.text },
                        "thinking" => Block::Thinking {
                            text: b.text,
                            signature: (!b.signature.is_empty()).then_some(b.signature),
                        },
                        "tool_use" => {
                            let args = if b.json.trim().is_empty() {
                                json!({})
                            } else {
                                match serde_json::from_str::<serde_json::Value>(&b.json) {
                                    Ok(args @ serde_json::Value::Object(_)) => args,
                                    Ok(_) => {
                                        return Err(LlmError::Transient {
                                            message: "tool_use input is not a JSON object".into(),
                                            retry_after: None,
                                            rate_limited: false,
                                        });
                                    }
                                    Err(e) => {
                                        return Err(LlmError::Transient {
                                            message: format!(
                                                "tool_use input is not valid JSON: {e}"
                                            ),
                                            retry_after: None,
                                            rate_limited: false,
                                        });
                                    }
                                }
                            };
                            Block::ToolCall {
                                id: b.id,
                                name: b.name,
                                args,
                            }
                        }
                        _ => return Ok(false),
                    };
                    self.done.push((index, block));
                }
            }
            "message_delta" => {
                if let Some(r) = v["delta"]["stop_reason"].as_str() {
                    self.stop_reason = r.to_string();
                }
                if let Some(o) = v["usage"]["output_tokens"].as_u64() {
                    self.output_tokens = o;
                }
                if let Some(i) = v["usage"]["input_tokens"].as_u64() {
                    self.input_tokens = i;
                }
            }
            "message_stop" => {
                self.complete = true;
                return Ok(true);
            }
            "error" => {
                let kind = v["error"]["type"].as_str().unwrap_or("error").to_string();
                let message = format!("{kind}: {}", v["error"]["message"].as_str().unwrap_or(""));
                return Err(
                    if matches!(
                        kind.as_str(),
                        "overloaded_error" | "api_error" | "rate_limit_error"
                    ) {
                        LlmError::Transient {
                            rate_limited: kind != "api_error",
                            message,
                            retry_after: None,
                        }
                    } else {
                        LlmError::Fatal(message)
                    },
                );
            }
            _ => {}
        }
        Ok(false)
    }

    pub(crate) fn finish(mut self) -> Result<RawTurn, LlmError> {
        if !self.complete {
            return Err(LlmError::Transient {
                message: "the stream ended before message_stop".into(),
                retry_after: None,
                rate_limited: false,
            });
        }
        if self.stop_reason == "max_tokens"
            && self
                .done
                .iter()
                .any(|(_, b)| matches!(b, Block::ToolCall { .. }))
        {
            return Err(LlmError::Fatal("the response hit max_tokens in the middle of a tool call; raise runtime.max_tokens".into()));
        }
        self.done.sort_by_key(|(i, _)| *i);
        Ok(RawTurn {
            message: Message::new(
                Role::Assistant,
                self.done.into_iter().map(|(_, b)| b).collect(),
            ),
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
            stop_reason: self.stop_reason,
            model: self.model,
        })
    }
}
