//! What the store refuses before it writes, as pure functions: keys, event batches, ledger
//! arguments, and appended messages — their shape, and (given the calls the stored history
//! leaves open) whether every tool result answers a call. Each failure is a
//! [`StoreError::Invalid`] whose message names the field, so a client can fix its request.

use ninetrix_proto::api::{ErrorCode, MAX_LIST_ITEMS, NewEvent};
use ninetrix_proto::message::{Block, Message, Role};

use super::{StoreError, StoreResult};

/// Longest ledger or dedupe key, in characters.
pub(crate) const MAX_KEY_LEN: usize = 128;
/// Longest event type, in characters.
pub(crate) const MAX_KIND_LEN: usize = 64;
/// Most events one request (`POST …/events` or a commit) may carry. A batch is written in one
/// transaction; on SQLite that holds the one writer, so an unbounded batch (250,000 events took
/// 8 s) would stall every other thread's checkpoint behind it. A runner sends a handful per
/// commit.
pub(crate) const MAX_EVENTS_PER_REQUEST: usize = 1000;

fn invalid(code: ErrorCode, message: String) -> StoreError {
    StoreError::Invalid { code, message }
}

/// A key (`field` names it: `key`, `dedupe_key`, `intents[2].key`) must have 1 to
/// [`MAX_KEY_LEN`] characters.
pub(crate) fn check_key(field: &str, key: &str) -> StoreResult<()> {
    if key.is_empty() || key.chars().count() > MAX_KEY_LEN {
        return Err(invalid(
            ErrorCode::InvalidKey,
            format!(
                "`{field}` must have 1 to {MAX_KEY_LEN} characters (it has {})",
                key.chars().count()
            ),
        ));
    }
    Ok(())
}

/// Whether `kind` is a well-formed event type: 1 to [`MAX_KIND_LEN`] of `a-z 0-9 _ . -`,
/// starting with a letter. Types are names (`turn_completed`), never free text: one with a line
/// break could not be sent as an SSE `event:` field.
pub(crate) fn event_kind_ok(kind: &str) -> bool {
    let mut chars = kind.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && kind.len() <= MAX_KIND_LEN
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_.-".contains(c))
}

/// A batch of events: at most [`MAX_EVENTS_PER_REQUEST`], each a well-formed type with an
/// object of data. `field` names the list (`events`).
/// A list of a request body within [`MAX_LIST_ITEMS`] (`422 too_many`, naming the field).
pub(crate) fn check_count(field: &str, len: usize) -> StoreResult<()> {
    if len > MAX_LIST_ITEMS {
        return Err(invalid(
            ErrorCode::TooMany,
            format!(
                "`{field}` has {len} items; a request carries at most {MAX_LIST_ITEMS}: send the rest in further requests"
            ),
        ));
    }
    Ok(())
}

pub(crate) fn check_events(field: &str, events: &[NewEvent]) -> StoreResult<()> {
    if events.len() > MAX_EVENTS_PER_REQUEST {
        return Err(invalid(
            ErrorCode::InvalidEvent,
            format!(
                "`{field}` has {} events; a request carries at most {MAX_EVENTS_PER_REQUEST}: send the rest in further requests",
                events.len()
            ),
        ));
    }
    for (i, e) in events.iter().enumerate() {
        if !event_kind_ok(&e.kind) {
            return Err(invalid(
                ErrorCode::InvalidEvent,
                format!(
                    "`{field}[{i}].type` must be 1 to {MAX_KIND_LEN} of a-z, 0-9, `_`, `.` and `-`, starting with a letter (e.g. `turn_completed`)"
                ),
            ));
        }
        if !e.data.is_object() {
            return Err(invalid(
                ErrorCode::InvalidEvent,
                format!("`{field}[{i}].data` must be a JSON object"),
            ));
        }
    }
    Ok(())
}

/// A tool call's arguments are a JSON object (what every provider sends and every tool takes).
pub(crate) fn check_args(field: &str, args: &serde_json::Value) -> StoreResult<()> {
    if args.is_object() {
        Ok(())
    } else {
        Err(invalid(
            ErrorCode::InvalidBody,
            format!("`{field}` must be a JSON object of arguments"),
        ))
    }
}

fn bad_history(message: String) -> StoreError {
    invalid(ErrorCode::InvalidHistory, message)
}

/// The shape of each appended message, as every provider requires it: at least one block; tool
/// calls and thinking only from the assistant, each call ID once per message; tool results only
/// in tool messages, which carry nothing else; no message ID twice in the batch. (Whether a
/// result answers a call needs the stored history: [`check_results`].)
pub(crate) fn check_messages(append: &[Message]) -> StoreResult<()> {
    let mut ids = std::collections::HashSet::with_capacity(append.len());
    for (i, m) in append.iter().enumerate() {
        if !ids.insert(m.id) {
            return Err(bad_history(format!(
                "`append[{i}].id` {} appears twice in `append`: every message has its own ID",
                m.id
            )));
        }
        if m.blocks.is_empty() {
            return Err(bad_history(format!(
                "`append[{i}].blocks` is empty: a message has at least one block"
            )));
        }
        let mut calls = std::collections::HashSet::new();
        for (j, b) in m.blocks.iter().enumerate() {
            let kind = block_kind(b);
            let allowed = match b {
                Block::Text { .. } => m.role != Role::Tool,
                Block::ToolCall { .. } | Block::Thinking { .. } => m.role == Role::Assistant,
                Block::ToolResult { .. } => m.role == Role::Tool,
                Block::Compaction(_) => m.role == Role::System && m.blocks.len() == 1,
            };
            if !allowed {
                return Err(bad_history(format!(
                    "`append[{i}].blocks[{j}]` is a `{kind}` block in a `{}` message: tool calls and thinking come from the assistant, tool results only in `tool` messages, which carry nothing else, and a compaction alone in a `system` message",
                    m.role.as_str()
                )));
            }
            if let Block::ToolCall { id, args, .. } = b {
                if !calls.insert(id.as_str()) {
                    return Err(bad_history(format!(
                        "`append[{i}].blocks[{j}].id` `{id}`: the message calls that ID twice"
                    )));
                }
                check_args(&format!("append[{i}].blocks[{j}].args"), args)?;
            }
        }
    }
    Ok(())
}

fn block_kind(b: &Block) -> &'static str {
    match b {
        Block::Text { .. } => "text",
        Block::ToolCall { .. } => "tool_call",
        Block::ToolResult { .. } => "tool_result",
        Block::Thinking { .. } => "thinking",
        Block::Compaction(_) => "compaction",
    }
}

/// The tool calls a history leaves waiting for their results at its end: the calls of its last
/// assistant message that no tool message after it answers (none when a user or system message
/// came after it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct OpenCalls(Vec<String>);

impl OpenCalls {
    /// The calls open after `messages` when `self` were open before them.
    fn after<'a>(mut self, messages: impl IntoIterator<Item = &'a Message>) -> Self {
        for m in messages {
            match m.role {
                Role::Assistant => {
                    self.0 = m
                        .blocks
                        .iter()
                        .filter_map(|b| match b {
                            Block::ToolCall { id, .. } => Some(id.clone()),
                            _ => None,
                        })
                        .collect();
                }
                Role::Tool => self.0.retain(|id| !answers(m, id)),
                Role::User | Role::System => self.0.clear(),
            }
        }
        self
    }

    /// What the stored `tail` leaves open: the live messages from the last one that is not a
    /// tool message to the end, in order ([`needs_tail`] says when it is needed).
    pub(crate) fn of_tail(tail: &[Message]) -> Self {
        OpenCalls::default().after(tail)
    }
}

fn answers(m: &Message, call: &str) -> bool {
    m.blocks
        .iter()
        .any(|b| matches!(b, Block::ToolResult { call_id, .. } if call_id == call))
}

/// Whether checking `append` needs the calls the stored history leaves open: only when it starts
/// with tool results (anything else resets what is open).
pub(crate) fn needs_tail(append: &[Message]) -> bool {
    append.first().is_some_and(|m| m.role == Role::Tool)
}

/// Every tool result in `append` answers an open call — of the assistant message before it in
/// `append`, or (`open`) of the stored history — and each call is answered once.
pub(crate) fn check_results(open: OpenCalls, append: &[Message]) -> StoreResult<()> {
    let mut open = open;
    for (i, m) in append.iter().enumerate() {
        if m.role == Role::Tool {
            for (j, b) in m.blocks.iter().enumerate() {
                let Block::ToolResult { call_id, .. } = b else {
                    continue;
                };
                match open.0.iter().position(|id| id == call_id) {
                    Some(at) => {
                        open.0.remove(at);
                    }
                    None => {
                        return Err(bad_history(format!(
                            "`append[{i}].blocks[{j}].call_id` `{call_id}` answers no open call: a tool result follows the assistant message that made the call, once"
                        )));
                    }
                }
            }
        } else {
            open = open.after(std::iter::once(m));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(id: &str) -> Block {
        Block::ToolCall {
            id: id.into(),
            name: "t".into(),
            args: json!({}),
        }
    }
    fn result(id: &str) -> Block {
        Block::ToolResult {
            call_id: id.into(),
            content: "ok".into(),
            is_error: false,
        }
    }
    fn msg(role: Role, blocks: Vec<Block>) -> Message {
        Message::new(role, blocks)
    }
    fn code(r: StoreResult<()>) -> ErrorCode {
        match r {
            Err(StoreError::Invalid { code, .. }) => code,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn keys_name_their_field() {
        assert!(check_key("key", "k").is_ok());
        assert!(check_key("key", &"é".repeat(MAX_KEY_LEN)).is_ok());
        let Err(StoreError::Invalid { code, message }) = check_key("dedupe_key", "") else {
            panic!()
        };
        assert_eq!(code, ErrorCode::InvalidKey);
        assert!(message.contains("`dedupe_key`"), "{message}");
        assert!(check_key("key", &"x".repeat(MAX_KEY_LEN + 1)).is_err());
    }

    #[test]
    fn event_types_are_names_and_data_is_an_object() {
        for ok in ["boot", "turn_completed", "x.y-z9"] {
            assert!(event_kind_ok(ok), "{ok}");
        }
        for bad in [
            "",
            "a\nb",
            "a\rb",
            "Boot",
            "9x",
            "a b",
            "é",
            &"a".repeat(65),
        ] {
            assert!(!event_kind_ok(bad), "{bad:?}");
        }
        let e = |kind: &str, data| NewEvent {
            kind: kind.into(),
            data,
        };
        assert!(check_events("events", &[e("boot", json!({}))]).is_ok());
        assert_eq!(
            code(check_events("events", &[e("boot", json!(5))])),
            ErrorCode::InvalidEvent
        );
        assert_eq!(
            code(check_events("events", &[e("a\nb", json!({}))])),
            ErrorCode::InvalidEvent
        );
        let many = vec![e("boot", json!({})); MAX_EVENTS_PER_REQUEST + 1];
        assert_eq!(code(check_events("events", &many)), ErrorCode::InvalidEvent);
        assert!(check_events("events", &many[1..]).is_ok());
    }

    #[test]
    fn messages_have_the_shape_providers_accept() {
        let ok = [
            msg(Role::User, vec![Block::Text { text: "hi".into() }]),
            msg(Role::Assistant, vec![call("a"), call("b")]),
            msg(Role::Tool, vec![result("a"), result("b")]),
        ];
        assert!(check_messages(&ok).is_ok());
        let cases = [
            vec![msg(Role::User, vec![])],
            vec![msg(Role::Tool, vec![Block::Text { text: "x".into() }])],
            vec![msg(Role::User, vec![result("a")])],
            vec![msg(Role::User, vec![call("a")])],
            vec![msg(Role::Assistant, vec![call("a"), call("a")])],
        ];
        for bad in cases {
            assert_eq!(
                code(check_messages(&bad)),
                ErrorCode::InvalidHistory,
                "{bad:?}"
            );
        }
        let m = msg(Role::User, vec![Block::Text { text: "x".into() }]);
        assert_eq!(
            code(check_messages(&[m.clone(), m])),
            ErrorCode::InvalidHistory
        );
        let mut non_object = msg(Role::Assistant, vec![call("a")]);
        non_object.blocks[0] = Block::ToolCall {
            id: "a".into(),
            name: "t".into(),
            args: json!([1]),
        };
        assert_eq!(code(check_messages(&[non_object])), ErrorCode::InvalidBody);
    }

    #[test]
    fn results_answer_an_open_call_once() {
        let asked = msg(Role::Assistant, vec![call("a"), call("b")]);
        let answer = |ids: &[&str]| msg(Role::Tool, ids.iter().map(|i| result(i)).collect());
        // In one batch.
        assert!(check_results(OpenCalls::default(), &[asked.clone(), answer(&["a", "b"])]).is_ok());
        // After the stored history: one answered already.
        let open = OpenCalls::of_tail(&[asked.clone(), answer(&["a"])]);
        assert_eq!(open, OpenCalls(vec!["b".into()]));
        assert!(check_results(open.clone(), &[answer(&["b"])]).is_ok());
        for bad in [answer(&["a"]), answer(&["c"]), answer(&["b", "b"])] {
            assert_eq!(
                code(check_results(open.clone(), std::slice::from_ref(&bad))),
                ErrorCode::InvalidHistory
            );
        }
        // A user message closes what was open.
        let user = msg(Role::User, vec![Block::Text { text: "x".into() }]);
        assert_eq!(
            code(check_results(open, &[user.clone(), answer(&["b"])])),
            ErrorCode::InvalidHistory
        );
        assert_eq!(OpenCalls::of_tail(&[asked, user]), OpenCalls::default());
        assert!(needs_tail(&[answer(&["a"])]));
        assert!(!needs_tail(&[msg(Role::Assistant, vec![call("z")])]));
    }
}
