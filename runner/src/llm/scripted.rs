//! The `scripted` provider: a deterministic offline model. It answers a call with step
//! `k mod len` of the agentfile's script, where `k` is the number of assistant messages already in
//! the history (those compacted out of the view included), so a turn re-run after a crash gets
//! the same responses. A compaction's summary it writes from the inputs it is given.

use ninetrix_agentfile::ScriptStep;
use ninetrix_proto::{Block, Message, Role};

use super::{LlmError, LlmRequest, Purpose, RawTurn};
use crate::context::json_len;

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
        let hidden = match req.purpose {
            Purpose::Summary => return Ok(summary(req)),
            Purpose::Round { hidden_rounds } => hidden_rounds,
        };
        let k = hidden
            + req
                .history
                .iter()
                .filter(|m| m.role == Role::Assistant)
                .count();
        let step = &self.script[k % self.script.len()];
        let mut blocks = Vec::new();
        if let Some(text) = &step.text {
            // Streamed a word at a time, as a provider would stream it.
            for piece in text.split_inclusive(' ') {
                super::stream_text(req.stream, piece);
            }
            blocks.push(Block::Text { text: text.clone() });
        }
        for (j, call) in step.tool_calls.iter().enumerate() {
            blocks.push(Block::ToolCall {
                id: format!("call_{k}_{j}"),
                name: call.name.clone(),
                args: call.args.clone(),
            });
        }
        let chars_in: usize = req.history.iter().map(|m| json_len(&m.blocks)).sum();
        let chars_out = json_len(&blocks);
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

/// A summary for a compaction, written without a model: how many messages it covers and the
/// start of each input in them (the last 20), so it is the same on every boot.
fn summary(req: &LlmRequest<'_>) -> RawTurn {
    let inputs: Vec<String> = req
        .history
        .iter()
        .filter(|m| m.role == Role::User)
        .map(|m| crate::engine::preview(&m.text_content(), 60))
        .collect();
    let shown = &inputs[inputs.len().saturating_sub(21)..inputs.len().saturating_sub(1)];
    let text = format!(
        "Scripted summary of {} messages. The user asked: {}.",
        req.history.len().saturating_sub(1),
        shown.join("; ")
    );
    let chars_in: usize = req.history.iter().map(|m| json_len(&m.blocks)).sum();
    RawTurn {
        input_tokens: (chars_in / 4) as u64,
        output_tokens: (text.len() / 4) as u64,
        message: Message::text(Role::Assistant, text),
        stop_reason: "end_turn".into(),
        model: "scripted".into(),
    }
}
