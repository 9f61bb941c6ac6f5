//! The `scripted` provider: a deterministic offline model. It answers a call with step
//! `k mod len` of the agentfile's script, where `k` is the number of assistant messages already in
//! the history, so a turn re-run after a crash gets the same responses.

use ninetrix_proto::agentfile::ScriptStep;
use ninetrix_proto::{Block, Message, Role};

use super::{LlmError, LlmRequest, RawTurn};

pub(crate) struct Scripted {
    script: Vec<ScriptStep>,
}

impl Scripted {
    pub(crate) fn new(script: Vec<ScriptStep>) -> Self {
        Self { script }
    }

    pub(crate) fn complete(&self, req: &LlmRequest<'_>) -> Result<RawTurn, LlmError> {
        if self.script.is_empty() {
            return Err(LlmError::Fatal(
                "the scripted provider has an empty script".into(),
            ));
        }
        let k = req
            .history
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .count();
        let step = &self.script[k % self.script.len()];
        let mut blocks = Vec::new();
        if let Some(text) = &step.text {
            blocks.push(Block::Text { text: text.clone() });
        }
        for (j, call) in step.tool_calls.iter().enumerate() {
            blocks.push(Block::ToolCall {
                id: format!("call_{k}_{j}"),
                name: call.name.clone(),
                args: call.args.clone(),
            });
        }
        let chars_in: usize = req
            .history
            .iter()
            .map(|m| serde_json::to_string(&m.blocks).map_or(0, |s| s.len()))
            .sum();
        let chars_out: usize = serde_json::to_string(&blocks).map_or(0, |s| s.len());
        let stop_reason = if step.tool_calls.is_empty() {
            "end_turn"
        } else {
            "tool_use"
        };
        Ok(RawTurn {
            message: Message::new(Role::Assistant, blocks),
            input_tokens: (chars_in / 4) as u64,
            output_tokens: (chars_out / 4) as u64,
            stop_reason: stop_reason.into(),
            model: "scripted".into(),
        })
    }
}
