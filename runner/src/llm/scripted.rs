//! The `scripted` provider: a deterministic offline model. It answers a call with step
//! `k mod len` of the agentfile's script, where `k` is the number of assistant messages already in
//! the history, so a turn re-run after a crash gets the same responses.

use ninetrix_agentfile::ScriptStep;
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

/// The length of `value`'s JSON, counted as it is written (nothing is kept: a long history is
/// not copied into a string on every model round).
fn json_len(value: &impl serde::Serialize) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    serde_json::to_writer(&mut count, value).map_or(0, |()| count.0)
}
