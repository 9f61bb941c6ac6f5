//! The span state machine of one thread in one runner's life ([`Spans`]): it observes the
//! thread's trace events and returns the spans they finish. Pure: no clock, no I/O, no randomness
//! (see the module docs of `telemetry`).

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use ninetrix_proto::api::{ApprovalStatus, TurnAttempt};
use ninetrix_proto::events::{self as ev, ToolMode, TraceEvent};

use super::{
    Attr, Kind, LinkRecord, Observed, SpanRecord, Status, ThreadInfo, attempt_span_id, span_id,
    trace_id,
};

/// The attempt at a turn this runner works on.
#[derive(Clone, Debug)]
struct Attempt {
    turn_seq: u64,
    trace_id: [u8; 16],
    span_id: [u8; 8],
    start: DateTime<Utc>,
    resumed: bool,
    links: Vec<LinkRecord>,
    /// Child spans made so far (their IDs derive from the count).
    children: u64,
    dropped_ids: Vec<String>,
    approval_wait_ms: u64,
    handoff_wait_ms: u64,
    llm_retries: u64,
    commits: u64,
    budget_exceeded: bool,
    /// Messages that joined the turn as steers.
    steers: u64,
    max_turns_reached: bool,
    handed_over_by: Option<(String, String)>,
}

/// The span state machine of one thread in one runner's life. Pure: see the module docs.
#[derive(Clone, Debug)]
pub struct Spans {
    info: ThreadInfo,
    epoch: u64,
    boot_count: u64,
    restart_count: u64,
    interrupted: Option<TurnAttempt>,
    /// Call IDs dropped by the boot's repair, for the next attempt.
    repair: Option<Vec<String>>,
    /// Retries of the model call under way.
    retries: u64,
    /// The model call under way was answered by a fallback model (its `model_fallback`).
    fallback: Option<ev::ModelFallback>,
    /// How long the model call under way waited for a slot of its limiter (`model_waited`).
    slot_wait_ms: u64,
    approvals: HashMap<String, DateTime<Utc>>,
    /// Requests whose wait was reported (the driver sees a settled request again while others
    /// of the response are pending).
    settled: HashSet<String>,
    turn: Option<Attempt>,
}

/// The span status of a turn stopped on request.
fn stopped_text(by: &ev::StoppedBy) -> String {
    match by {
        ev::StoppedBy::Interrupted { seq } => format!("interrupted by message {seq}"),
        ev::StoppedBy::Cancelled { by, .. } => format!("cancelled by {by}"),
    }
}

impl Spans {
    /// The machine of `info`'s thread, served by the runner of `epoch`.
    pub fn new(info: ThreadInfo, epoch: u64) -> Spans {
        Spans {
            info,
            epoch,
            boot_count: 0,
            restart_count: 0,
            interrupted: None,
            repair: None,
            retries: 0,
            fallback: None,
            slot_wait_ms: 0,
            approvals: HashMap::new(),
            settled: HashSet::new(),
            turn: None,
        }
    }

    /// Takes what happened at `at`; returns the spans it finished.
    pub fn observe(&mut self, at: DateTime<Utc>, what: Observed<'_>) -> Vec<SpanRecord> {
        match what {
            Observed::Event(e) => self.event(at, e),
            Observed::Interrupted(attempt) => {
                self.interrupted = Some(attempt);
                Vec::new()
            }
            Observed::ApprovalSettled {
                id,
                kind,
                tool,
                status,
                requested_at,
            } => {
                if !self.settled.insert(id.clone()) {
                    return Vec::new();
                }
                let start = self.approvals.remove(&id).unwrap_or(requested_at).min(at);
                let wait_ms = (at - start).num_milliseconds().max(0) as u64;
                let Some(turn) = &mut self.turn else {
                    return Vec::new();
                };
                turn.approval_wait_ms += wait_ms;
                let mut record = child(
                    turn,
                    format!("await_approval {tool}"),
                    Kind::Internal,
                    start,
                    at,
                );
                record.span_id = span_id(&format!("ninetrix:approval:{id}"));
                record.attributes.extend([
                    ("ninetrix.approval.id", Attr::from(id)),
                    ("ninetrix.approval.kind", kind.as_str().into()),
                    ("ninetrix.approval.status", status.as_str().into()),
                    ("ninetrix.approval.wait_ms", wait_ms.into()),
                    ("gen_ai.tool.name", tool.into()),
                ]);
                if matches!(status, ApprovalStatus::Rejected | ApprovalStatus::Expired) {
                    record.status = Status::Error(format!("request {}", status.as_str()));
                }
                vec![record]
            }
            Observed::Fenced => match self.turn.take() {
                Some(turn) => {
                    let status = Status::Error(
                        "fenced: another runner claimed the thread; it goes on with the turn"
                            .into(),
                    );
                    vec![self.attempt_record(turn, at, status, true)]
                }
                None => Vec::new(),
            },
        }
    }

    fn event(&mut self, at: DateTime<Utc>, e: &TraceEvent) -> Vec<SpanRecord> {
        match e {
            TraceEvent::Boot(b) => {
                self.boot_count = b.boot_count;
                self.restart_count = b.restart_count;
                Vec::new()
            }
            TraceEvent::Repair(r) => {
                let ids = r
                    .dropped
                    .iter()
                    .flat_map(|d| d.call_ids.iter().cloned())
                    .collect();
                self.repair = Some(ids);
                Vec::new()
            }
            TraceEvent::TurnStarted(t) => {
                let out = self.supersede(at);
                self.open(at, t.turn_seq, false, Vec::new());
                out
            }
            TraceEvent::TurnResumed(t) => self.resumed(at, t),
            TraceEvent::HandoffReceived(h) => {
                if let Some(turn) = &mut self.turn {
                    turn.handed_over_by = Some((h.from_agent.clone(), h.from_thread.to_string()));
                }
                Vec::new()
            }
            TraceEvent::LlmRetry(_) => {
                self.retries += 1;
                Vec::new()
            }
            TraceEvent::LlmCall(c) => self.chat(at, c),
            TraceEvent::ModelFallback(f) => {
                self.fallback = Some(f.clone());
                Vec::new()
            }
            TraceEvent::ModelWaited(w) => {
                self.slot_wait_ms += w.waited_ms;
                Vec::new()
            }
            // A summary's model call ends with its compaction: what it said is not the round's.
            TraceEvent::Compacted(_) | TraceEvent::CompactionSkipped(_) => {
                self.fallback = None;
                self.slot_wait_ms = 0;
                Vec::new()
            }
            TraceEvent::ToolCall(t) | TraceEvent::ToolReplayed(t) => self.tool(at, t),
            TraceEvent::UnknownTool(u) => self.unknown_tool(at, u),
            TraceEvent::ApprovalRequested(a) => {
                self.approvals.insert(a.id.to_string(), at);
                Vec::new()
            }
            TraceEvent::HandoffSettled(h) => self.handoff_wait(at, h),
            TraceEvent::Checkpoint(_) => {
                if let Some(turn) = &mut self.turn {
                    turn.commits += 1;
                }
                Vec::new()
            }
            TraceEvent::BudgetExceeded(_) => {
                if let Some(turn) = &mut self.turn {
                    turn.budget_exceeded = true;
                }
                Vec::new()
            }
            TraceEvent::MaxTurnsReached(_) => {
                if let Some(turn) = &mut self.turn {
                    turn.max_turns_reached = true;
                }
                Vec::new()
            }
            TraceEvent::TurnCompleted(done) => self.completed(at, done),
            TraceEvent::Steered(_) => {
                if let Some(turn) = &mut self.turn {
                    turn.steers += 1;
                }
                Vec::new()
            }
            // Nothing of a turn's shape: logged and stored, not spans.
            TraceEvent::Ready(_)
            | TraceEvent::TurnStopping(_)
            | TraceEvent::CancelMissed(_)
            | TraceEvent::JobStarted(_)
            | TraceEvent::JobFinished(_)
            | TraceEvent::JobReattached(_)
            | TraceEvent::Forked(_)
            | TraceEvent::ForkCreated(_)
            | TraceEvent::Rewound(_)
            | TraceEvent::RewindFailed(_)
            | TraceEvent::SnapshotTaken(_)
            | TraceEvent::SnapshotSkipped(_)
            | TraceEvent::WorkspaceRestored(_)
            | TraceEvent::ReplayStarted(_)
            | TraceEvent::ReplayAnswered(_)
            | TraceEvent::Resume(_)
            | TraceEvent::Outage(_)
            | TraceEvent::McpTools(_)
            | TraceEvent::McpServerDown(_)
            | TraceEvent::McpServerUp(_)
            | TraceEvent::ApprovalDecided(_)
            | TraceEvent::ApprovalExpired(_)
            | TraceEvent::ApprovalNotified(_)
            | TraceEvent::HandoffSent(_)
            | TraceEvent::HandoffRefused(_)
            | TraceEvent::HandoffReplied(_)
            | TraceEvent::Error(_) => Vec::new(),
        }
    }

    /// An interrupted turn taken up: the interrupted attempt reported (when another runner made it), and a new attempt linked to it.
    fn resumed(&mut self, at: DateTime<Utc>, t: &ev::TurnResumed) -> Vec<SpanRecord> {
        let mut out = self.supersede(at);
        let mut links = Vec::new();
        if let Some(prev) = self.interrupted.take()
            && prev.epoch != self.epoch
        {
            let record = self.interrupted_record(t.turn_seq, &prev, at);
            links.push(LinkRecord {
                trace_id: record.trace_id,
                span_id: record.span_id,
                attributes: vec![("ninetrix.link", "resumed_from".into())],
            });
            out.push(record);
        }
        self.open(at, t.turn_seq, true, links);
        out
    }

    /// A model call: its `chat` span, with the retries before it, the wait for a slot of its
    /// limiter, and — answered by a fallback — the model that answered (its provider, its name)
    /// and the one it fell back from.
    fn chat(&mut self, at: DateTime<Utc>, c: &ev::LlmCall) -> Vec<SpanRecord> {
        let retries = std::mem::take(&mut self.retries);
        let fallback = self.fallback.take();
        let slot_wait_ms = std::mem::take(&mut self.slot_wait_ms);
        let Some(turn) = &mut self.turn else {
            return Vec::new();
        };
        turn.llm_retries += retries;
        let start = at - chrono::Duration::milliseconds(c.latency_ms as i64);
        // `provider/model` of the fallback that answered.
        let (provider, model) = match &fallback {
            Some(f) => {
                f.to.split_once('/')
                    .unwrap_or((f.to.as_str(), c.model.as_str()))
            }
            None => (self.info.provider.as_str(), self.info.model.as_str()),
        };
        let mut record = child(turn, format!("chat {model}"), Kind::Client, start, at);
        record.attributes.extend([
            ("gen_ai.operation.name", Attr::from("chat")),
            ("gen_ai.provider.name", provider.into()),
            ("gen_ai.request.model", model.into()),
            ("gen_ai.response.model", c.model.as_str().into()),
            (
                "gen_ai.response.finish_reasons",
                Attr::Strs(vec![c.stop_reason.clone()]),
            ),
            ("gen_ai.usage.input_tokens", c.input_tokens.into()),
            ("gen_ai.usage.output_tokens", c.output_tokens.into()),
            (
                "gen_ai.conversation.id",
                self.info.thread.to_string().into(),
            ),
            ("ninetrix.usage.cost_usd", c.cost_usd.into()),
            ("ninetrix.llm.tool_calls", c.tool_calls.into()),
            ("ninetrix.llm.retries", retries.into()),
            ("ninetrix.llm.fallback", fallback.is_some().into()),
        ]);
        if let Some(f) = &fallback {
            record
                .attributes
                .push(("ninetrix.llm.fallback_from", f.from.as_str().into()));
        }
        if slot_wait_ms > 0 {
            record
                .attributes
                .push(("ninetrix.llm.slot_wait_ms", slot_wait_ms.into()));
        }
        vec![record]
    }

    /// A tool call (run, replayed, verified or outcome unknown): its `execute_tool` span.
    fn tool(&mut self, at: DateTime<Utc>, t: &ev::ToolCall) -> Vec<SpanRecord> {
        let Some(turn) = &mut self.turn else {
            return Vec::new();
        };
        let start = at - chrono::Duration::milliseconds(t.duration_ms as i64);
        let mut record = child(
            turn,
            format!("execute_tool {}", t.name),
            Kind::Internal,
            start,
            at,
        );
        record.attributes.extend([
            ("gen_ai.operation.name", Attr::from("execute_tool")),
            ("gen_ai.tool.name", t.name.as_str().into()),
            ("ninetrix.tool.mode", t.mode.as_str().into()),
            ("ninetrix.tool.effect", t.effect.as_str().into()),
            ("ninetrix.ledger.key", t.key.as_str().into()),
        ]);
        if t.mode == ToolMode::OutcomeUnknown {
            record
                .attributes
                .push(("error.type", "outcome_unknown".into()));
            record.status = Status::Error(
                "outcome unknown: an earlier run of this write may or may not have happened".into(),
            );
        } else if !t.ok {
            record.attributes.push(("error.type", "tool_error".into()));
            record.status = Status::Error("the tool answered with an error".into());
        }
        vec![record]
    }

    /// A call to a tool the agent does not have: an `execute_tool` span that failed at once.
    fn unknown_tool(&mut self, at: DateTime<Utc>, u: &ev::UnknownTool) -> Vec<SpanRecord> {
        let Some(turn) = &mut self.turn else {
            return Vec::new();
        };
        let mut record = child(
            turn,
            format!("execute_tool {}", u.name),
            Kind::Internal,
            at,
            at,
        );
        record.attributes.extend([
            ("gen_ai.operation.name", Attr::from("execute_tool")),
            ("gen_ai.tool.name", u.name.as_str().into()),
            ("gen_ai.tool.call.id", u.call_id.as_str().into()),
            ("error.type", "unknown_tool".into()),
        ]);
        record.status = Status::Error("the agent has no tool of that name".into());
        vec![record]
    }

    /// A settled handoff: its `await_handoff` span, and the wait added to the turn.
    fn handoff_wait(&mut self, at: DateTime<Utc>, h: &ev::HandoffSettled) -> Vec<SpanRecord> {
        let Some(turn) = &mut self.turn else {
            return Vec::new();
        };
        turn.handoff_wait_ms += h.waited_ms;
        let start = at - chrono::Duration::milliseconds(h.waited_ms as i64);
        let mut record = child(
            turn,
            format!("await_handoff {}", h.agent),
            Kind::Internal,
            start,
            at,
        );
        record.attributes.extend([
            ("gen_ai.agent.name", Attr::from(h.agent.as_str())),
            ("ninetrix.handoff.status", h.status.as_str().into()),
            ("ninetrix.handoff.wait_ms", h.waited_ms.into()),
            ("ninetrix.usage.cost_usd", h.cost_usd.into()),
        ]);
        if let Some(thread) = h.thread_id {
            let thread = ("ninetrix.handoff.thread_id", thread.to_string().into());
            record.attributes.push(thread);
        }
        if let Some(a2a) = &h.a2a {
            record
                .attributes
                .push(("ninetrix.a2a.card", a2a.card.as_str().into()));
            if let Some(task) = &a2a.task_id {
                record
                    .attributes
                    .push(("ninetrix.a2a.task_id", task.as_str().into()));
            }
        }
        if h.status != ninetrix_proto::api::HandoffStatus::Replied {
            record.status = Status::Error(format!("handoff {}", h.status.as_str()));
        }
        vec![record]
    }

    /// The turn's end: its attempt span, with why it failed.
    fn completed(&mut self, at: DateTime<Utc>, done: &ev::TurnCompleted) -> Vec<SpanRecord> {
        let Some(turn) = self.turn.take() else {
            return Vec::new();
        };
        let error_type = if done.ok {
            None
        } else if let Some(by) = &done.stopped_by {
            Some(by.word())
        } else if turn.budget_exceeded {
            Some("budget_exceeded")
        } else if turn.max_turns_reached {
            Some("max_turns_reached")
        } else {
            Some("turn_failed")
        };
        let status = match (error_type, &done.stopped_by) {
            (None, _) => Status::Ok,
            (Some(_), Some(by)) => Status::Error(stopped_text(by)),
            (Some(t), None) => Status::Error(format!("the turn failed ({t})")),
        };
        let steers = turn.steers;
        let mut record = self.attempt_record(turn, at, status, false);
        if steers > 0 {
            record
                .attributes
                .push(("ninetrix.turn.steers", steers.into()));
        }
        if let Some(by) = &done.stopped_by {
            record
                .attributes
                .push(("ninetrix.turn.stopped_by", by.word().into()));
            record
                .attributes
                .push(("ninetrix.turn.stopped_by.seq", by.seq().into()));
            if let ev::StoppedBy::Cancelled { by, .. } = by {
                record
                    .attributes
                    .push(("ninetrix.turn.cancelled_by", by.clone().into()));
            }
        }
        record.attributes.extend([
            ("gen_ai.usage.input_tokens", done.usage.input_tokens.into()),
            (
                "gen_ai.usage.output_tokens",
                done.usage.output_tokens.into(),
            ),
            ("ninetrix.usage.cost_usd", done.usage.cost_usd.into()),
        ]);
        if let Some(t) = error_type {
            record.attributes.push(("error.type", t.into()));
        }
        vec![record]
    }

    /// A turn started while another was open (never expected): the open one ends here.
    fn supersede(&mut self, at: DateTime<Utc>) -> Vec<SpanRecord> {
        match self.turn.take() {
            Some(turn) => vec![self.attempt_record(
                turn,
                at,
                Status::Error("superseded: another turn started before this one ended".into()),
                false,
            )],
            None => Vec::new(),
        }
    }

    fn open(&mut self, at: DateTime<Utc>, turn_seq: u64, resumed: bool, links: Vec<LinkRecord>) {
        self.turn = Some(Attempt {
            turn_seq,
            trace_id: trace_id(self.info.thread, turn_seq),
            span_id: attempt_span_id(self.info.thread, turn_seq, self.epoch),
            start: at,
            resumed,
            links,
            children: 0,
            dropped_ids: self.repair.take().unwrap_or_default(),
            approval_wait_ms: 0,
            handoff_wait_ms: 0,
            llm_retries: 0,
            commits: 0,
            budget_exceeded: false,
            steers: 0,
            max_turns_reached: false,
            handed_over_by: None,
        });
    }

    /// The `invoke_agent` span of an attempt, with what every one carries.
    fn base(&self, turn_seq: u64, epoch: u64, start: DateTime<Utc>) -> SpanRecord {
        let info = &self.info;
        let mut attributes = vec![
            ("gen_ai.operation.name", Attr::from("invoke_agent")),
            ("gen_ai.agent.name", info.agent.as_str().into()),
            ("gen_ai.provider.name", info.provider.as_str().into()),
            ("gen_ai.request.model", info.model.as_str().into()),
            ("gen_ai.conversation.id", info.thread.to_string().into()),
            ("ninetrix.thread_id", info.thread.to_string().into()),
            ("ninetrix.turn_seq", turn_seq.into()),
            ("ninetrix.epoch", epoch.into()),
        ];
        if let Some(session) = &info.session {
            attributes.push(("ninetrix.session", session.as_str().into()));
        }
        if let Some(pool) = &info.pool {
            attributes.push(("ninetrix.pool", pool.as_str().into()));
        }
        if let Some(replica) = info.replica {
            attributes.push(("ninetrix.replica", replica.into()));
        }
        SpanRecord {
            name: format!("invoke_agent {}", info.agent),
            kind: Kind::Internal,
            trace_id: trace_id(info.thread, turn_seq),
            span_id: attempt_span_id(info.thread, turn_seq, epoch),
            parent: None,
            start,
            end: start,
            attributes,
            links: Vec::new(),
            status: Status::Unset,
        }
    }

    fn attempt_record(
        &self,
        turn: Attempt,
        end: DateTime<Utc>,
        status: Status,
        fenced: bool,
    ) -> SpanRecord {
        let mut record = self.base(turn.turn_seq, self.epoch, turn.start);
        record.end = end.max(turn.start);
        record.status = status;
        record.links = turn.links;
        record.attributes.extend([
            ("ninetrix.boot_count", Attr::from(self.boot_count)),
            ("ninetrix.restart_count", self.restart_count.into()),
            ("ninetrix.resumed", turn.resumed.into()),
            ("ninetrix.fenced", fenced.into()),
            ("ninetrix.commits", turn.commits.into()),
            ("ninetrix.llm.retries", turn.llm_retries.into()),
        ]);
        if !turn.dropped_ids.is_empty() {
            record
                .attributes
                .push(("ninetrix.repair.dropped_ids", Attr::Strs(turn.dropped_ids)));
        }
        if turn.approval_wait_ms > 0 {
            record
                .attributes
                .push(("ninetrix.approval.wait_ms", turn.approval_wait_ms.into()));
        }
        if turn.handoff_wait_ms > 0 {
            record
                .attributes
                .push(("ninetrix.handoff.wait_ms", turn.handoff_wait_ms.into()));
        }
        if let Some((agent, thread)) = turn.handed_over_by {
            record.attributes.extend([
                ("ninetrix.handoff.from_agent", Attr::from(agent)),
                ("ninetrix.handoff.from_thread", thread.into()),
            ]);
        }
        record
    }

    /// The span of an attempt a runner began and never ended (it was killed or stopped), ended
    /// now by the runner that resumes the turn.
    fn interrupted_record(
        &self,
        turn_seq: u64,
        prev: &TurnAttempt,
        now: DateTime<Utc>,
    ) -> SpanRecord {
        let mut record = self.base(turn_seq, prev.epoch, prev.started_at.min(now));
        record.end = now;
        record.status =
            Status::Error("interrupted: the runner stopped before the turn ended".into());
        record
            .attributes
            .push(("ninetrix.interrupted", true.into()));
        record
    }
}

/// A child span of the attempt, its ID derived from the attempt's and a count.
fn child(
    turn: &mut Attempt,
    name: String,
    kind: Kind,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
) -> SpanRecord {
    turn.children += 1;
    let mut parent_hex = String::with_capacity(16);
    for b in turn.span_id {
        parent_hex.push_str(&format!("{b:02x}"));
    }
    SpanRecord {
        name,
        kind,
        trace_id: turn.trace_id,
        span_id: span_id(&format!("ninetrix:span:{parent_hex}:{}", turn.children)),
        parent: Some(turn.span_id),
        start: start.max(turn.start).min(end),
        end,
        attributes: Vec::new(),
        links: Vec::new(),
        status: Status::Unset,
    }
}

// ---------------------------------------------------------------------------------------------
// Export.

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::*;
    use ninetrix_proto::ThreadId;
    use ninetrix_proto::api::ApprovalKind;
    #[test]
    fn a_round_answered_by_a_fallback_says_which_model_answered() {
        let mut s = machine(1);
        feed(&mut s, 0, started(1));
        let waited = feed(
            &mut s,
            100,
            TraceEvent::ModelWaited(ev::ModelWaited {
                provider: "anthropic".into(),
                waited_ms: 1_500,
                wait: ninetrix_proto::api::SlotWait::InFlight {
                    in_flight: 8,
                    max_in_flight: 8,
                },
            }),
        );
        assert!(waited.is_empty());
        feed(
            &mut s,
            900,
            TraceEvent::ModelFallback(ev::ModelFallback {
                from: "anthropic/claude-x".into(),
                to: "openai/gpt-5-mini".into(),
                reason: "connection refused".into(),
            }),
        );
        let chat = feed(&mut s, 1000, llm("end_turn", 100));
        let c = &chat[0];
        assert_eq!(c.name, "chat gpt-5-mini");
        assert_eq!(str_attr(c, "gen_ai.provider.name"), Some("openai"));
        assert_eq!(str_attr(c, "gen_ai.request.model"), Some("gpt-5-mini"));
        assert_eq!(bool_attr(c, "ninetrix.llm.fallback"), Some(true));
        assert_eq!(
            str_attr(c, "ninetrix.llm.fallback_from"),
            Some("anthropic/claude-x")
        );
        assert_eq!(int_attr(c, "ninetrix.llm.slot_wait_ms"), Some(1_500));
        // The next round, answered by the primary, is the primary's again.
        let chat = feed(&mut s, 2000, llm("end_turn", 100));
        let c = &chat[0];
        assert_eq!(c.name, "chat claude-x");
        assert_eq!(str_attr(c, "gen_ai.provider.name"), Some("anthropic"));
        assert_eq!(bool_attr(c, "ninetrix.llm.fallback"), Some(false));
        assert_eq!(int_attr(c, "ninetrix.llm.slot_wait_ms"), None);
    }

    #[test]
    fn a_turn_with_two_model_rounds_and_a_tool_call() {
        let mut s = machine(3);
        assert!(feed(&mut s, 0, boot(3, 3)).is_empty());
        assert!(feed(&mut s, 10, started(4)).is_empty());
        let chat1 = feed(&mut s, 1010, llm("tool_use", 900));
        assert!(
            feed(
                &mut s,
                1020,
                TraceEvent::Checkpoint(ev::Checkpoint {
                    version: 9,
                    history_len: 3
                })
            )
            .is_empty()
        );
        let call = feed(
            &mut s,
            1100,
            TraceEvent::ToolCall(tool(ToolMode::Executed, true)),
        );
        let chat2 = feed(&mut s, 2100, llm("end_turn", 500));
        let turn = feed(&mut s, 2200, completed(4, true));
        let all: Vec<SpanRecord> = [&chat1, &call, &chat2, &turn]
            .into_iter()
            .flatten()
            .cloned()
            .collect();
        assert_eq!(all.len(), 4);
        no_contents(&all);

        let agent = &turn[0];
        assert_eq!(agent.name, "invoke_agent helper");
        assert_eq!(agent.kind, Kind::Internal);
        assert_eq!(agent.trace_id, trace_id(thread(), 4));
        assert_eq!(agent.span_id, attempt_span_id(thread(), 4, 3));
        assert_eq!(agent.parent, None);
        assert_eq!((agent.start, agent.end), (t(10), t(2200)));
        assert_eq!(agent.status, Status::Ok);
        assert_eq!(
            str_attr(agent, "gen_ai.operation.name"),
            Some("invoke_agent")
        );
        assert_eq!(str_attr(agent, "gen_ai.agent.name"), Some("helper"));
        assert_eq!(
            str_attr(agent, "ninetrix.thread_id"),
            Some(thread().to_string().as_str())
        );
        assert_eq!(str_attr(agent, "ninetrix.session"), Some("k1"));
        assert_eq!(str_attr(agent, "ninetrix.pool"), Some("p"));
        assert_eq!(int_attr(agent, "ninetrix.replica"), Some(2));
        assert_eq!(int_attr(agent, "ninetrix.epoch"), Some(3));
        assert_eq!(int_attr(agent, "ninetrix.boot_count"), Some(3));
        assert_eq!(int_attr(agent, "ninetrix.turn_seq"), Some(4));
        assert_eq!(int_attr(agent, "ninetrix.commits"), Some(1));
        assert_eq!(bool_attr(agent, "ninetrix.resumed"), Some(false));
        assert_eq!(bool_attr(agent, "ninetrix.fenced"), Some(false));
        assert_eq!(agent.attr("ninetrix.usage.cost_usd"), Some(&Attr::F64(1.0)));
        assert_eq!(int_attr(agent, "gen_ai.usage.input_tokens"), Some(200));
        assert!(agent.links.is_empty());

        let c = &chat1[0];
        assert_eq!(c.name, "chat claude-x");
        assert_eq!(c.kind, Kind::Client);
        assert_eq!(c.trace_id, agent.trace_id);
        assert_eq!(c.parent, Some(agent.span_id));
        assert_eq!((c.start, c.end), (t(110), t(1010)));
        assert_eq!(str_attr(c, "gen_ai.operation.name"), Some("chat"));
        assert_eq!(str_attr(c, "gen_ai.provider.name"), Some("anthropic"));
        assert_eq!(str_attr(c, "gen_ai.request.model"), Some("claude-x"));
        assert_eq!(str_attr(c, "gen_ai.response.model"), Some("claude-x-2026"));
        assert_eq!(
            c.attr("gen_ai.response.finish_reasons"),
            Some(&Attr::Strs(vec!["tool_use".into()]))
        );
        assert_eq!(int_attr(c, "gen_ai.usage.input_tokens"), Some(100));
        assert_eq!(int_attr(c, "gen_ai.usage.output_tokens"), Some(20));
        assert_ne!(chat1[0].span_id, chat2[0].span_id);

        let x = &call[0];
        assert_eq!(x.name, "execute_tool file_write");
        assert_eq!(x.parent, Some(agent.span_id));
        assert_eq!((x.start, x.end), (t(1070), t(1100)));
        assert_eq!(str_attr(x, "gen_ai.tool.name"), Some("file_write"));
        assert_eq!(str_attr(x, "ninetrix.tool.mode"), Some("executed"));
        assert_eq!(str_attr(x, "ninetrix.tool.effect"), Some("write"));
        assert_eq!(str_attr(x, "ninetrix.ledger.key"), Some("k-1"));
        assert_eq!(x.status, Status::Unset);
    }

    #[test]
    fn replayed_and_outcome_unknown_calls_say_so() {
        let mut s = machine(2);
        feed(&mut s, 0, started(1));
        let replayed = feed(
            &mut s,
            40,
            TraceEvent::ToolReplayed(tool(ToolMode::Replayed, true)),
        );
        assert_eq!(
            str_attr(&replayed[0], "ninetrix.tool.mode"),
            Some("replayed")
        );
        assert_eq!(replayed[0].status, Status::Unset);
        let unknown = feed(
            &mut s,
            80,
            TraceEvent::ToolCall(tool(ToolMode::OutcomeUnknown, false)),
        );
        assert_eq!(
            str_attr(&unknown[0], "ninetrix.tool.mode"),
            Some("outcome_unknown")
        );
        assert_eq!(str_attr(&unknown[0], "error.type"), Some("outcome_unknown"));
        assert!(matches!(&unknown[0].status, Status::Error(d) if d.starts_with("outcome unknown")));
        let failed = feed(
            &mut s,
            90,
            TraceEvent::ToolCall(tool(ToolMode::ReExecuted, false)),
        );
        assert_eq!(
            str_attr(&failed[0], "ninetrix.tool.mode"),
            Some("re-executed")
        );
        assert_eq!(str_attr(&failed[0], "error.type"), Some("tool_error"));
        // Three children, three IDs.
        let ids: HashSet<[u8; 8]> = [&replayed[0], &unknown[0], &failed[0]]
            .iter()
            .map(|r| r.span_id)
            .collect();
        assert_eq!(ids.len(), 3);
    }

    #[test]
    fn a_resumed_turn_reports_the_interrupted_attempt_and_links_to_it() {
        // Epoch 1 began turn 2 at t(-5000) and died; epoch 2 repairs and resumes it.
        let mut s = machine(2);
        feed(&mut s, 0, boot(2, 2));
        let none = s.observe(
            t(1),
            Observed::Interrupted(TurnAttempt {
                epoch: 1,
                started_at: t(-5000),
                turn_boot: 0,
            }),
        );
        assert!(none.is_empty());
        feed(
            &mut s,
            2,
            TraceEvent::Repair(ev::Repair {
                truncate_to: 3,
                dropped: vec![ev::DroppedMessage {
                    index: 3,
                    role: Role::Assistant,
                    call_ids: vec!["toolu_1".into(), "toolu_2".into()],
                    reason: "interrupted".into(),
                }],
                mode: "truncate".into(),
            }),
        );
        let resumed = feed(
            &mut s,
            10,
            TraceEvent::TurnResumed(ev::TurnResumed {
                turn_seq: 2,
                seq: 2,
            }),
        );
        assert_eq!(
            resumed.len(),
            1,
            "the interrupted attempt is reported at once"
        );
        let old = &resumed[0];
        assert_eq!(old.name, "invoke_agent helper");
        assert_eq!(old.trace_id, trace_id(thread(), 2));
        assert_eq!(old.span_id, attempt_span_id(thread(), 2, 1));
        assert_eq!((old.start, old.end), (t(-5000), t(10)));
        assert_eq!(
            old.status,
            Status::Error("interrupted: the runner stopped before the turn ended".into())
        );
        assert_eq!(bool_attr(old, "ninetrix.interrupted"), Some(true));
        assert_eq!(int_attr(old, "ninetrix.epoch"), Some(1));

        let chat = feed(&mut s, 500, llm("end_turn", 100));
        let done = feed(&mut s, 600, completed(2, true));
        let new = &done[0];
        assert_eq!(new.trace_id, old.trace_id, "one trace for every attempt");
        assert_eq!(new.span_id, attempt_span_id(thread(), 2, 2));
        assert_eq!(chat[0].parent, Some(new.span_id));
        assert_eq!(bool_attr(new, "ninetrix.resumed"), Some(true));
        assert_eq!(int_attr(new, "ninetrix.restart_count"), Some(1));
        assert_eq!(
            new.attr("ninetrix.repair.dropped_ids"),
            Some(&Attr::Strs(vec!["toolu_1".into(), "toolu_2".into()]))
        );
        assert_eq!(new.links.len(), 1);
        assert_eq!(new.links[0].trace_id, old.trace_id);
        assert_eq!(new.links[0].span_id, old.span_id);
        assert_eq!(
            new.links[0].attributes,
            vec![("ninetrix.link", Attr::from("resumed_from"))]
        );
        assert_eq!(new.attr("ninetrix.interrupted"), None);
    }

    #[test]
    fn a_fenced_runner_ends_its_attempt_as_fenced() {
        let mut s = machine(5);
        feed(&mut s, 0, started(7));
        let fenced = s.observe(t(300), Observed::Fenced);
        assert_eq!(fenced.len(), 1);
        assert_eq!(bool_attr(&fenced[0], "ninetrix.fenced"), Some(true));
        assert!(matches!(&fenced[0].status, Status::Error(d) if d.starts_with("fenced")));
        assert_eq!(fenced[0].end, t(300));
        // Nothing is open any more.
        assert!(s.observe(t(400), Observed::Fenced).is_empty());
        assert!(feed(&mut s, 500, completed(7, true)).is_empty());
    }

    #[test]
    fn approval_and_handoff_waits_are_spans_and_totals() {
        let mut s = machine(1);
        feed(&mut s, 0, started(1));
        let id = ninetrix_proto::ApprovalId::new_v7();
        feed(
            &mut s,
            1000,
            TraceEvent::ApprovalRequested(ev::ApprovalRequested {
                id,
                kind: ApprovalKind::Approval,
                tool: "shell".into(),
                args: "secret args".into(),
                timeout_secs: 60,
            }),
        );
        let settled = |s: &mut Spans, at| {
            s.observe(
                t(at),
                Observed::ApprovalSettled {
                    id: id.to_string(),
                    kind: ApprovalKind::Approval,
                    tool: "shell".into(),
                    status: ApprovalStatus::Approved,
                    requested_at: t(900),
                },
            )
        };
        let wait = settled(&mut s, 6000);
        assert_eq!(wait.len(), 1);
        assert_eq!(wait[0].name, "await_approval shell");
        assert_eq!((wait[0].start, wait[0].end), (t(1000), t(6000)));
        assert_eq!(int_attr(&wait[0], "ninetrix.approval.wait_ms"), Some(5000));
        assert_eq!(
            str_attr(&wait[0], "ninetrix.approval.status"),
            Some("approved")
        );
        assert!(settled(&mut s, 7000).is_empty(), "reported once");

        let collaborator: ThreadId = "0190a000-0000-7000-8000-000000000002".parse().unwrap();
        let handoff = feed(
            &mut s,
            10_000,
            TraceEvent::HandoffSettled(ev::HandoffSettled {
                delivery_key: "handoff:k".into(),
                agent: "researcher".into(),
                thread_id: Some(collaborator),
                a2a: None,
                status: HandoffStatus::Replied,
                reply: "secret reply".into(),
                cost_usd: 0.25,
                waited_ms: 3000,
            }),
        );
        assert_eq!(handoff[0].name, "await_handoff researcher");
        assert_eq!(handoff[0].start, t(7000));
        assert_eq!(
            int_attr(&handoff[0], "ninetrix.handoff.wait_ms"),
            Some(3000)
        );
        let done = feed(&mut s, 11_000, completed(1, true));
        assert_eq!(int_attr(&done[0], "ninetrix.approval.wait_ms"), Some(5000));
        assert_eq!(int_attr(&done[0], "ninetrix.handoff.wait_ms"), Some(3000));
        no_contents(&[wait, handoff, done].concat());
    }

    #[test]
    fn a_failed_turn_says_why_without_its_reply() {
        let mut s = machine(1);
        feed(&mut s, 0, started(1));
        feed(
            &mut s,
            10,
            TraceEvent::BudgetExceeded(ev::BudgetExceeded {
                scope: None,
                budget_usd: 0.1,
                spent_usd: 0.2,
            }),
        );
        let done = feed(&mut s, 20, completed(1, false));
        assert_eq!(str_attr(&done[0], "error.type"), Some("budget_exceeded"));
        assert!(matches!(&done[0].status, Status::Error(d) if !d.contains("secret")));
    }

    #[test]
    fn a_stopped_turn_says_what_stopped_it_and_how_often_it_was_steered() {
        let mut s = machine(1);
        feed(&mut s, 0, started(1));
        feed(
            &mut s,
            5,
            TraceEvent::Steered(ev::Steered {
                turn_seq: 1,
                seq: 2,
                input: "secret steer".into(),
            }),
        );
        let TraceEvent::TurnCompleted(mut done) = completed(1, false) else {
            unreachable!()
        };
        done.stopped_by = Some(ev::StoppedBy::Cancelled {
            seq: 3,
            by: "ana".into(),
        });
        let spans = feed(&mut s, 20, TraceEvent::TurnCompleted(done));
        assert_eq!(str_attr(&spans[0], "error.type"), Some("cancelled"));
        assert_eq!(
            str_attr(&spans[0], "ninetrix.turn.stopped_by"),
            Some("cancelled")
        );
        assert_eq!(
            str_attr(&spans[0], "ninetrix.turn.cancelled_by"),
            Some("ana")
        );
        assert_eq!(int_attr(&spans[0], "ninetrix.turn.stopped_by.seq"), Some(3));
        assert_eq!(int_attr(&spans[0], "ninetrix.turn.steers"), Some(1));
        assert!(matches!(&spans[0].status, Status::Error(d) if d == "cancelled by ana"));
        no_contents(&spans);
    }
}
