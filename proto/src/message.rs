//! The provider-neutral message model (docs/design.md §5).
//!
//! A thread's history is a list of [`Message`]s made of typed [`Block`]s. Providers translate to
//! and from this model (Anthropic puts tool results in a user message and needs thinking blocks
//! back unchanged; OpenAI uses `role: tool` messages); storage and the API only ever see this form.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::context::Compaction;

use crate::ids::MessageId;

/// Who wrote a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Instructions for the model.
    System,
    /// Input to the agent (an inbox message, a task).
    User,
    /// The model's response.
    Assistant,
    /// Results of tool calls.
    Tool,
}

impl Role {
    /// The wire name (`system`, `user`, `assistant`, `tool`).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// One typed piece of a message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Block {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// A request by the model to call a tool.
    ToolCall {
        /// The provider's call ID (changes when a turn is re-run; never a ledger key).
        id: String,
        /// The tool's name.
        name: String,
        /// The arguments, as JSON.
        #[cfg_attr(feature = "openapi", schema(value_type = Object))]
        args: serde_json::Value,
    },
    /// The result of a tool call.
    ToolResult {
        /// The `id` of the [`Block::ToolCall`] this answers.
        call_id: String,
        /// The result, as text.
        content: String,
        /// Whether the tool failed (the model sees the error text).
        #[serde(default)]
        is_error: bool,
    },
    /// The model's reasoning, sent back to the provider unchanged.
    Thinking {
        /// The reasoning text.
        text: String,
        /// The provider's signature over it, when it gives one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
    /// A compaction of the history before it (alone in a `system` message): the model sees
    /// its summary instead of the messages it covers. Never sent to a provider as it is.
    Compaction(Compaction),
}

/// One message of a thread's history.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Message {
    /// The message's identity.
    #[cfg_attr(feature = "openapi", schema(value_type = uuid::Uuid))]
    pub id: MessageId,
    /// Who wrote it.
    pub role: Role,
    /// Its content: at least one block.
    #[cfg_attr(feature = "openapi", schema(min_items = 1))]
    pub blocks: Vec<Block>,
    /// When it was created.
    pub created_at: DateTime<Utc>,
}

impl Message {
    /// A new message with a fresh ID, created now.
    pub fn new(role: Role, blocks: Vec<Block>) -> Self {
        Self {
            id: MessageId::new_v7(),
            role,
            blocks,
            created_at: Utc::now(),
        }
    }

    /// A message holding one text block.
    pub fn text(role: Role, text: impl Into<String>) -> Self {
        Self::new(role, vec![Block::Text { text: text.into() }])
    }

    /// The concatenated text blocks of the message.
    pub fn text_content(&self) -> String {
        self.blocks
            .iter()
            .filter_map(|b| match b {
                Block::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("")
    }

    /// The IDs of the tool calls this message makes, in order.
    pub fn tool_call_ids(&self) -> impl Iterator<Item = &str> {
        self.blocks.iter().filter_map(|b| match b {
            Block::ToolCall { id, .. } => Some(id.as_str()),
            _ => None,
        })
    }

    /// The compaction this message records, if it is one (a `system` message holding a
    /// [`Block::Compaction`]).
    pub fn compaction(&self) -> Option<&Compaction> {
        match (self.role, self.blocks.as_slice()) {
            (Role::System, [Block::Compaction(c)]) => Some(c),
            _ => None,
        }
    }

    /// The call IDs this message answers with tool results, in order.
    pub fn tool_result_ids(&self) -> impl Iterator<Item = &str> {
        self.blocks.iter().filter_map(|b| match b {
            Block::ToolResult { call_id, .. } => Some(call_id.as_str()),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn blocks_serialise_with_a_type_tag() {
        let msg = Message::new(
            Role::Assistant,
            vec![
                Block::Thinking {
                    text: "plan".into(),
                    signature: Some("sig".into()),
                },
                Block::Text {
                    text: "Let me look.".into(),
                },
                Block::ToolCall {
                    id: "toolu_1".into(),
                    name: "file_read".into(),
                    args: json!({"path": "notes.md"}),
                },
            ],
        );
        let value = serde_json::to_value(&msg).unwrap();
        assert_eq!(value["role"], "assistant");
        assert_eq!(value["blocks"][0]["type"], "thinking");
        assert_eq!(value["blocks"][2]["type"], "tool_call");
        assert_eq!(value["blocks"][2]["args"]["path"], "notes.md");
        let back: Message = serde_json::from_value(value).unwrap();
        assert_eq!(back, msg);
        assert_eq!(back.tool_call_ids().collect::<Vec<_>>(), ["toolu_1"]);
        assert_eq!(back.text_content(), "Let me look.");
    }

    #[test]
    fn tool_results_default_to_success_and_unknown_fields_are_rejected() {
        let block: Block =
            serde_json::from_value(json!({"type": "tool_result", "call_id": "c", "content": "ok"}))
                .unwrap();
        assert_eq!(
            block,
            Block::ToolResult {
                call_id: "c".into(),
                content: "ok".into(),
                is_error: false
            }
        );
        let err = serde_json::from_value::<Block>(json!({"type": "text", "text": "x", "extra": 1}))
            .unwrap_err();
        assert!(err.to_string().contains("unknown field `extra`"), "{err}");
    }

    #[test]
    fn a_compaction_block_is_tagged_and_strict() {
        let c = json!({"type": "compaction", "strategy": "clear_tool_results",
            "reason": "overflow", "from": 0, "to": 4, "turns": [1, 2], "tokens_before": 10,
            "tokens_after": 5, "cleared": 2, "at_version": 7});
        let block: Block = serde_json::from_value(c.clone()).unwrap();
        let msg = Message::new(Role::System, vec![block]);
        assert_eq!(msg.compaction().map(|c| c.to), Some(4));
        assert_eq!(serde_json::to_value(&msg.blocks[0]).unwrap(), c);
        let mut bad = c;
        bad["extra"] = 1.into();
        assert!(serde_json::from_value::<Block>(bad).is_err());
        assert!(Message::text(Role::System, "x").compaction().is_none());
    }
}
