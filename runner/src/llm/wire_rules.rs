//! The providers' rules for a request's messages, as their APIs enforce them (test-only): a
//! history the runner produces must translate into messages both accept. Anthropic: roles
//! alternate, starting with `user`; an assistant's `tool_use` blocks are answered by
//! `tool_result` blocks at the start of the very next (user) message, and nowhere else.
//! OpenAI: an assistant message with `tool_calls` is followed at once by one `tool` message per
//! call, and a `tool` message answers a call of the assistant message before it.

use std::collections::HashSet;

use ninetrix_proto::Message;
use serde_json::Value;

/// Whether both providers accept `history` as a request's messages (the reason, if not).
pub(crate) fn accepted(history: &[Message]) -> Result<(), String> {
    anthropic(&super::anthropic::messages(history)).map_err(|e| format!("anthropic: {e}"))?;
    openai(&super::openai::messages(None, history)).map_err(|e| format!("openai: {e}"))
}

fn anthropic(messages: &[Value]) -> Result<(), String> {
    let mut open: HashSet<String> = HashSet::new();
    for (i, m) in messages.iter().enumerate() {
        let role = m["role"].as_str().unwrap_or_default();
        let want = if i % 2 == 0 { "user" } else { "assistant" };
        if role != want {
            return Err(format!(
                "message {i} is `{role}`, expected `{want}` (roles alternate)"
            ));
        }
        let blocks = m["content"].as_array().cloned().unwrap_or_default();
        if role == "user" {
            let mut leading = true;
            for b in &blocks {
                match b["type"].as_str() {
                    Some("tool_result") => {
                        let id = b["tool_use_id"].as_str().unwrap_or_default();
                        if !leading || !open.remove(id) {
                            return Err(format!(
                                "message {i}: tool_result {id} answers no open tool_use"
                            ));
                        }
                    }
                    _ => leading = false,
                }
            }
            if !open.is_empty() {
                return Err(format!("message {i}: tool_use {open:?} unanswered"));
            }
        } else {
            if !open.is_empty() {
                return Err(format!("message {i}: tool_use {open:?} unanswered"));
            }
            open = blocks
                .iter()
                .filter(|b| b["type"] == "tool_use")
                .filter_map(|b| b["id"].as_str().map(str::to_string))
                .collect();
        }
    }
    if !open.is_empty() {
        return Err(format!("tool_use {open:?} unanswered at the end"));
    }
    Ok(())
}

fn openai(messages: &[Value]) -> Result<(), String> {
    let mut open: HashSet<String> = HashSet::new();
    for (i, m) in messages.iter().enumerate() {
        match m["role"].as_str().unwrap_or_default() {
            "tool" => {
                let id = m["tool_call_id"].as_str().unwrap_or_default();
                if !open.remove(id) {
                    return Err(format!(
                        "message {i}: tool message {id} answers no open call"
                    ));
                }
            }
            role => {
                if !open.is_empty() {
                    return Err(format!("message {i} (`{role}`): calls {open:?} unanswered"));
                }
                open = m["tool_calls"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|c| c["id"].as_str().map(str::to_string))
                    .collect();
            }
        }
    }
    if !open.is_empty() {
        return Err(format!("calls {open:?} unanswered at the end"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ninetrix_proto::{Block, Role};

    #[test]
    fn the_rules_refuse_what_the_providers_refuse() {
        let call = Message {
            role: Role::Assistant,
            blocks: vec![Block::ToolCall {
                id: "c1".into(),
                name: "sleep".into(),
                args: serde_json::json!({}),
            }],
            ..Message::text(Role::Assistant, "")
        };
        let user = Message::text(Role::User, "hi");
        assert!(
            accepted(&[user.clone(), call.clone()]).is_err(),
            "a dangling call"
        );
        let answered = crate::history::tool_result("c1", "ok".into(), false);
        assert!(accepted(&[user.clone(), call.clone(), answered.clone()]).is_ok());
        assert!(
            accepted(&[user.clone(), call, answered, user.clone()]).is_ok(),
            "a user message after the results joins their message"
        );
        assert!(
            accepted(&[user.clone(), user.clone()]).is_ok(),
            "two user messages in a row are one"
        );
        assert!(accepted(&[Message::text(Role::Assistant, "x")]).is_err());
    }
}
