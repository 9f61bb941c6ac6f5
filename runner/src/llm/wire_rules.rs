//! The providers' rules for a request's messages, as their APIs enforce them (test-only): a
//! history the runner produces must translate into messages both accept. Anthropic: roles
//! alternate, starting with `user`; an assistant's `tool_use` blocks are answered by
//! `tool_result` blocks at the start of the very next (user) message, and nowhere else.
//! A `tool_use` ID matches `^[a-zA-Z0-9_-]+$`.
//! OpenAI: an assistant message with `tool_calls` is followed at once by one `tool` message per
//! call, and a `tool` message answers a call of the assistant message before it; a call's ID
//! has 1 to 40 characters.

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
            let fits = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
            if let Some(bad) = open
                .iter()
                .find(|id| id.is_empty() || !id.chars().all(fits))
            {
                return Err(format!(
                    "message {i}: tool_use id {bad:?} does not match ^[a-zA-Z0-9_-]+$"
                ));
            }
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
                let max = super::openai::MAX_TOOL_ID;
                if let Some(bad) = open
                    .iter()
                    .find(|id| id.is_empty() || id.chars().count() > max)
                {
                    return Err(format!(
                        "message {i}: tool call id {bad:?} is not 1 to {max} characters"
                    ));
                }
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
        // Raw IDs the adapters would have to rewrite are refused by the rules themselves.
        let raw = |id: &str| {
            serde_json::json!([
                {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                {"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "x", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "ok"}]},
            ])
        };
        let messages = |v: serde_json::Value| v.as_array().cloned().unwrap();
        assert!(anthropic(&messages(raw("toolu_01A-b"))).is_ok());
        assert!(anthropic(&messages(raw("call.1:x"))).is_err());
        assert!(anthropic(&messages(raw(""))).is_err());
    }

    /// A history made by one provider, sent to the other after a fallback: every ID the first
    /// one made — OpenAI's `call_…`, an OpenAI-compatible server's IDs with dots and colons, a
    /// long one, the `call_N` the runner gives a call that came without an ID — is accepted by
    /// both, a call and its result still match, and distinct IDs stay distinct.
    #[test]
    fn a_history_from_one_provider_passes_the_others_rules() {
        let ids = [
            "call_AbC123xyz",
            "call.1:search/web",
            "chatcmpl-tool-3f9a",
            "call_0",
            "call.1:search_web",
            &"x".repeat(64),
            "toolu_01XFDUDYJgAACzvnptvVoYEL",
        ];
        let mut history = vec![Message::text(Role::User, "find it")];
        for (n, id) in ids.iter().enumerate() {
            history.push(Message::new(
                Role::Assistant,
                vec![
                    Block::Text {
                        text: format!("round {n}"),
                    },
                    Block::ToolCall {
                        id: id.to_string(),
                        name: "file_read".into(),
                        args: serde_json::json!({"path": "a"}),
                    },
                ],
            ));
            history.push(crate::history::tool_result(id, "ok".into(), false));
        }
        history.push(Message::text(Role::Assistant, "found"));
        accepted(&history).unwrap();
        let sent: Vec<String> = super::super::anthropic::messages(&history)
            .iter()
            .filter(|m| m["role"] == "assistant")
            .filter_map(|m| m["content"][1]["id"].as_str().map(str::to_string))
            .collect();
        assert_eq!(sent.len(), ids.len());
        let distinct: HashSet<&String> = sent.iter().collect();
        assert_eq!(distinct.len(), ids.len(), "{sent:?}");
        assert_eq!(sent[0], "call_AbC123xyz", "a fitting ID is kept as it is");
        assert_eq!(
            super::super::anthropic::tool_id("call.1:search/web"),
            super::super::anthropic::tool_id("call.1:search/web"),
            "the same ID maps the same way in every request"
        );
    }
}
