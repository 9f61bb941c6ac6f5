//! What the engine's tests share: a config, inputs, and readers of effects and history.

use super::*;
use ninetrix_proto::api::{ApprovalStatus, ToolCallStatus};
use ninetrix_proto::effects::Effect as Class;
use serde_json::json;

pub(super) fn config() -> EngineConfig {
    EngineConfig {
        thread: ThreadId::new_v7(),
        epoch: 1,
        max_rounds: 5,
        budget: Some(0.10),
        resume: ResumeMode::Truncate,
        tools: vec![
            ToolSpec::builtin(tools::builtin("file_write").unwrap()),
            ToolSpec::builtin(tools::builtin("file_read").unwrap()),
        ],
        batch: false,
        approval: None,
        approval_timeout_secs: 3600,
        agent: "a".into(),
        max_delegation_depth: 4,
        transfer_timeout_secs: 300,
        context: Default::default(),
        budgets: None,
        on_budget_exceeded: Default::default(),
        replay: None,
    }
}

pub(super) fn llm(blocks: Vec<Block>, cost: f64) -> Input {
    Input::Llm(LlmTurn {
        message: Message::new(Role::Assistant, blocks),
        usage: CallUsage {
            input_tokens: 10,
            output_tokens: 5,
            cost_usd: cost,
        },
        model: "m".into(),
        stop_reason: "x".into(),
        latency_ms: 1,
    })
}

pub(super) fn answer(text: &str) -> Input {
    llm(vec![Block::Text { text: text.into() }], 0.0)
}

/// A `write` call: `file_write` in append mode.
pub(super) fn append_call(id: &str) -> Block {
    append_of(id, "x")
}

pub(super) fn append_of(id: &str, content: &str) -> Block {
    Block::ToolCall {
        id: id.into(),
        name: "file_write".into(),
        args: json!({"path": "log", "content": content, "mode": "append"}),
    }
}

/// A `read` call.
pub(super) fn read_call(id: &str) -> Block {
    Block::ToolCall {
        id: id.into(),
        name: "file_read".into(),
        args: json!({"path": "notes"}),
    }
}

pub(super) fn result(id: &str) -> Input {
    Input::Tool {
        call_id: id.into(),
        content: format!("result of {id}"),
        is_error: false,
    }
}

pub(super) fn message(seq: u64) -> Input {
    Input::Message {
        seq,
        content: "go".into(),
        handoff: None,
    }
}

pub(super) fn kinds(effects: &[Effect]) -> Vec<String> {
    effects
        .iter()
        .map(|e| match e {
            Effect::Commit(_) => "commit".into(),
            Effect::CallLlm => "call_llm".into(),
            Effect::RunTool(c) => format!("run:{}", c.name),
            Effect::Event(e) => format!("event:{}", e.kind()),
            Effect::TurnFinished { .. } => "finished".into(),
            Effect::AwaitApprovals { keys, .. } => format!("await:{}", keys.len()),
            Effect::Delegate { calls, .. } => format!("delegate:{}", calls.len()),
            Effect::Compact { plan, .. } => format!("compact:{}", plan.strategy.as_str()),
            Effect::FetchTurnPoint { to_turn } => format!("turn_point:{to_turn}"),
            Effect::RestoreWorkspace(_) => "restore".into(),
        })
        .collect()
}

pub(super) fn commits(effects: &[Effect]) -> Vec<&CommitPlan> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Commit(p) => Some(&**p),
            _ => None,
        })
        .collect()
}

pub(super) fn run_of(effects: &[Effect]) -> PlannedCall {
    match effects.last() {
        Some(Effect::RunTool(call)) => call.clone(),
        other => panic!("expected a tool run last, got {other:?}"),
    }
}

/// Drives a turn to its end, answering every call with its result and every model round
/// from `responses`; returns every effect.
pub(super) fn drive(e: &mut Engine, first: Vec<Effect>, responses: Vec<Input>) -> Vec<Effect> {
    let mut all = first.clone();
    let mut next = first;
    let mut responses = responses.into_iter();
    loop {
        let input = match next.last() {
            Some(Effect::CallLlm) => responses.next().expect("a response for every round"),
            Some(Effect::RunTool(call)) => result(&call.call_id),
            _ => return all,
        };
        next = e.apply(input);
        all.extend(next.clone());
    }
}

pub(super) fn stored(e: &Engine) -> Restored {
    Restored {
        history: e.history().to_vec(),
        state: e.state().clone(),
        ledger: Vec::new(),
        approvals: Vec::new(),
        give_up: None,
        stop: None,
    }
}

pub(super) fn record(call: &PlannedCall, status: ToolCallStatus, epoch: u64) -> ToolCallRecord {
    ToolCallRecord {
        key: call.key.clone(),
        turn_seq: call.turn_seq,
        tool: call.name.clone(),
        args: call.args.clone(),
        effect: call.effect,
        status,
        result: (status != ToolCallStatus::Intent).then(|| "recorded".to_string()),
        intent_epoch: epoch,
        completed_epoch: (status != ToolCallStatus::Intent).then_some(epoch),
        created_at: chrono::Utc::now(),
        completed_at: None,
    }
}

pub(super) fn second_boot(cfg: EngineConfig) -> Engine {
    Engine::new(EngineConfig { epoch: 2, ..cfg })
}

// Requests to people.

/// The config with every `write` gated.
pub(super) fn gated() -> EngineConfig {
    EngineConfig {
        approval: Some(HumanApproval {
            enabled: true,
            actions: Vec::new(),
            effects: vec![Class::Write],
            timeout_secs: 3600,
            notify_url: None,
            notify_secret: None,
        }),
        tools: vec![
            ToolSpec::builtin(tools::builtin("file_write").unwrap()),
            ToolSpec::builtin(tools::builtin("file_read").unwrap()),
            ToolSpec::builtin(tools::builtin("ask_human").unwrap()),
        ],
        ..config()
    }
}

/// The stored record of `ask`, settled as `status`.
pub(super) fn settled(ask: &ApprovalAsk, status: ApprovalStatus) -> Approval {
    let now = chrono::Utc::now();
    Approval {
        id: ninetrix_proto::ApprovalId::new_v7(),
        thread_id: ThreadId::new_v7(),
        labels: Default::default(),
        epoch: 1,
        turn_seq: ask.turn_seq,
        key: ask.key.clone(),
        call_id: ask.call_id.clone(),
        kind: ask.kind,
        tool: ask.tool.clone(),
        args: ask.args.clone(),
        args_hash: "h".into(),
        status,
        requested_at: now,
        expires_at: now + chrono::Duration::seconds(60),
        decided_at: status.is_settled().then_some(now),
        decided_by: status.is_settled().then(|| "alice".to_string()),
        reason: (status == ApprovalStatus::Rejected).then(|| "not today".to_string()),
        answer: (status == ApprovalStatus::Answered).then(|| "blue".to_string()),
        raise: None,
    }
}

pub(super) fn ask_of(effects: &[Effect]) -> Vec<ApprovalAsk> {
    commits(effects)
        .iter()
        .flat_map(|p| p.approvals.clone())
        .collect()
}

pub(super) fn question(id: &str) -> Block {
    Block::ToolCall {
        id: id.into(),
        name: "ask_human".into(),
        args: json!({"question": "which colour?"}),
    }
}

pub(super) fn results(e: &Engine) -> Vec<(String, bool)> {
    e.history()
        .iter()
        .flat_map(|m| m.blocks.iter())
        .filter_map(|b| match b {
            Block::ToolResult {
                content, is_error, ..
            } => Some((content.clone(), *is_error)),
            _ => None,
        })
        .collect()
}

/// No assistant message of `e`'s history says `what`.
pub(super) fn model_never_reads(e: &Engine, what: &str) {
    for m in e.history() {
        assert!(
            !(m.role == Role::Assistant && m.text_content().contains(what)),
            "the failure is in the history as the model's words: {m:?}"
        );
    }
}
