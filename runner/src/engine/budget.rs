//! Budgets beyond one run — the session's, the agent's day, the pool's day — kept by the
//! checkpoint API (docs/runner.md, "Limits, budgets and fallback"). The API refuses a model
//! call whose budget has no room ([`Input::OverBudget`](super::Input::OverBudget)); the call is
//! not made, and:
//! - with `on_budget_exceeded: stop` the turn ends with a reply naming the budget, the amounts
//!   and what to do next (a `budget_exceeded` event with its scope);
//! - with `ask_human` the turn asks a person, through the same requests as gated calls, to raise
//!   the budget by the agentfile's amount for it (kind `budget`, the raise on the request): the
//!   thread waits (`AwaitApprovals`); approved, the round is tried again (the API now counts the
//!   raise); rejected, expired or cancelled, the turn stops as with `stop`, saying why.
//!
//! A request to raise a budget answers no call, so it pins nothing: it is found by its key, a
//! ledger key of the turn (under a name no tool has, the n-th request of the turn), so a runner
//! restarted while it waits finds the same request among the turn's requests and waits again.

use ninetrix_proto::api::{
    Approval, ApprovalKind, ApprovalStatus, BudgetRaise, BudgetScope, BudgetSpent,
    OnBudgetExceeded, ThreadStatus,
};
use ninetrix_proto::events::{ApprovalExpired, BudgetExceeded, TraceEvent};
use serde_json::json;

use super::{ApprovalAsk, Effect, Engine, event, in_turn};
use crate::ledger;

/// The tool name of a request to raise a spent budget.
pub const BUDGET_TOOL: &str = "budget";

impl Engine {
    /// The API refused the round's call: `spent` has no room.
    pub(super) fn on_over_budget(&mut self, spent: BudgetSpent) -> Vec<Effect> {
        if !in_turn(self.state.status) {
            return Vec::new();
        }
        let mut out = vec![event(TraceEvent::BudgetExceeded(BudgetExceeded {
            budget_usd: spent.limit_usd,
            spent_usd: spent.spent_usd,
            scope: Some(spent.scope.clone()),
        }))];
        let amount = self.raise_amount(&spent.scope);
        match (self.cfg.on_budget_exceeded, amount) {
            // A replay asks nobody to raise a budget: it stops as `stop` would.
            (OnBudgetExceeded::AskHuman, Some(amount)) if !self.replaying() => {
                self.ask_for_raise(&spent, amount);
                out.extend(self.advance());
            }
            _ => {
                let reply = format!(
                    "{}. {}",
                    spent_text(&self.cfg.agent, &spent),
                    next_step(&spent.scope)
                );
                out.extend(self.budget_stop(&reply));
            }
        }
        out
    }

    /// The agentfile's amount for `scope`: what a person is asked to raise it by.
    fn raise_amount(&self, scope: &BudgetScope) -> Option<f64> {
        let policy = self.cfg.budgets.as_ref()?;
        let amount = match scope {
            BudgetScope::Session => policy.per_session_usd,
            BudgetScope::AgentDay { .. } => policy.per_day_usd,
            BudgetScope::PoolDay { .. } => policy.pool_per_day_usd,
        };
        amount.filter(|a| a.is_finite() && *a > 0.0)
    }

    /// The key of the turn's `n`-th request to raise a budget: a ledger key of the turn under
    /// a name no tool can have (tool names have no `:`), so it never meets a call's key.
    fn budget_key(&self, n: usize) -> String {
        ledger::key(
            self.cfg.thread,
            self.state.turn_seq,
            "ninetrix:budget",
            &json!({}),
            n,
        )
    }

    /// The current turn's latest request to raise a budget, its key and its record (`None`:
    /// riding on the next commit), and how many the turn has made.
    fn budget_request(&self) -> (usize, Option<(String, Option<Approval>)>) {
        let mut latest = None;
        let mut n = 0;
        loop {
            let key = self.budget_key(n);
            match self.requests.get(&key) {
                Some(record) => latest = Some((key, record.clone())),
                None => return (n, latest),
            }
            n += 1;
        }
    }

    /// Makes the request to raise the spent budget by `amount`, to ride on the next commit.
    fn ask_for_raise(&mut self, spent: &BudgetSpent, amount: f64) {
        let (n, _) = self.budget_request();
        let key = self.budget_key(n);
        let question = format!(
            "raise {} by ${amount:.2}?",
            spent.scope.text(&self.cfg.agent)
        );
        let args = json!({
            "question": question,
            "budget": spent.scope,
            "spent_usd": spent.spent_usd,
            "limit_usd": spent.limit_usd,
            "raise_usd": amount,
        });
        self.requests.insert(key.clone(), None);
        self.asks.push(ApprovalAsk {
            key,
            call_id: format!("ninetrix:budget:{n}"),
            turn_seq: self.state.turn_seq,
            kind: ApprovalKind::Budget,
            tool: BUDGET_TOOL.to_string(),
            args,
            timeout_secs: self.cfg.approval_timeout_secs,
            raise: Some(BudgetRaise {
                scope: spent.scope.clone(),
                amount_usd: amount,
            }),
        });
    }

    /// The next model round, unless a request to raise a spent budget holds it: pending, the
    /// turn waits (stored `waiting`, with the request); approved, the round goes (stored back
    /// `in_turn`); rejected, expired or cancelled, the turn stops.
    pub(super) fn round(&mut self) -> Vec<Effect> {
        let (_, Some((key, record))) = self.budget_request() else {
            return self.next_round();
        };
        let mut out = Vec::new();
        match record.as_ref().map(|r| r.status) {
            None | Some(ApprovalStatus::Pending) => {
                if self.state.status != ThreadStatus::Waiting || !self.asks.is_empty() {
                    self.state.status = ThreadStatus::Waiting;
                    out.push(self.commit());
                }
                out.push(Effect::AwaitApprovals {
                    turn_seq: self.state.turn_seq,
                    keys: vec![key],
                });
            }
            Some(ApprovalStatus::Approved) => {
                if self.state.status == ThreadStatus::Waiting {
                    self.state.status = ThreadStatus::InTurn;
                    out.push(self.commit());
                }
                out.extend(self.next_round());
            }
            Some(_) => {
                let Some(request) = record else {
                    return out;
                };
                if request.status == ApprovalStatus::Expired {
                    out.push(event(TraceEvent::ApprovalExpired(ApprovalExpired {
                        id: request.id,
                        kind: request.kind,
                        tool: request.tool.clone(),
                        expired_at: request.expires_at,
                    })));
                }
                let reply = refused_reply(&self.cfg.agent, &request);
                out.extend(self.budget_stop(&reply));
            }
        }
        out
    }

    /// Ends the turn a spent budget stopped. An input the model never answered goes with it,
    /// even if the request to raise the budget stored it: a failed turn leaves the
    /// conversation as it was.
    fn budget_stop(&mut self, reply: &str) -> Vec<Effect> {
        self.forget_input = true;
        self.stop_turn(reply, false, "budget_exceeded")
    }
}

/// `Stopped: agent writer's budget for 2026-11-28 is spent ($5.02 of $5.00,
/// governance.max_budget_per_day)`.
fn spent_text(agent: &str, spent: &BudgetSpent) -> String {
    let raised = if spent.raised_usd > 0.0 {
        format!(", ${:.2} of it raised by people", spent.raised_usd)
    } else {
        String::new()
    };
    format!(
        "Stopped: {} is spent (${:.2} of ${:.2}, {}{raised})",
        spent.scope.text(agent),
        spent.spent_usd,
        spent.limit_usd,
        spent.scope.key()
    )
}

/// What to do about a spent budget.
fn next_step(scope: &BudgetScope) -> &'static str {
    match scope {
        BudgetScope::Session => {
            "Start the conversation over with `ninetrix reset`, or raise it in the agentfile."
        }
        BudgetScope::AgentDay { .. } | BudgetScope::PoolDay { .. } => {
            "Raise it in the agentfile, or wait for the next day."
        }
    }
}

/// The reply of a turn whose request to raise a budget was not approved: the budget (from the
/// request's arguments, so a restarted runner says the same) and what became of the request.
fn refused_reply(agent: &str, request: &Approval) -> String {
    let args = &request.args;
    let scope = serde_json::from_value::<BudgetScope>(args["budget"].clone())
        .ok()
        .or_else(|| request.raise.as_ref().map(|r| r.scope.clone()))
        .unwrap_or(BudgetScope::Session);
    let amount = args["raise_usd"]
        .as_f64()
        .or_else(|| request.raise.as_ref().map(|r| r.amount_usd))
        .unwrap_or(0.0);
    let spent = BudgetSpent {
        scope: scope.clone(),
        limit_usd: args["limit_usd"].as_f64().unwrap_or(0.0),
        spent_usd: args["spent_usd"].as_f64().unwrap_or(0.0),
        raised_usd: 0.0,
    };
    let by = request.decided_by.as_deref().unwrap_or("a person");
    let reason = request
        .reason
        .as_deref()
        .map(|r| format!(": {r}"))
        .unwrap_or_default();
    let what = match request.status {
        ApprovalStatus::Rejected => {
            format!(
                "{by} rejected raising it by ${amount:.2} (request {}){reason}",
                request.id
            )
        }
        ApprovalStatus::Expired => format!(
            "nobody approved raising it by ${amount:.2} before request {} expired at {}",
            request.id,
            request
                .expires_at
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        ),
        ApprovalStatus::Cancelled => format!(
            "the request to raise it by ${amount:.2} ({}) was cancelled{reason}",
            request.id
        ),
        other => format!("request {} ended `{}`", request.id, other.as_str()),
    };
    format!(
        "{}; {what}. {}",
        spent_text(agent, &spent),
        next_step(&scope)
    )
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::super::*;
    use ninetrix_proto::api::{ApprovalStatus, BudgetPolicy, BudgetScope};
    use ninetrix_proto::events::{BudgetExceeded, StoppedBy};

    fn budgeted(on: OnBudgetExceeded) -> EngineConfig {
        EngineConfig {
            budgets: Some(BudgetPolicy {
                per_session_usd: Some(2.0),
                per_day_usd: Some(5.0),
                pool_per_day_usd: None,
                timezone: "UTC".into(),
            }),
            on_budget_exceeded: on,
            ..config()
        }
    }

    fn day_spent() -> Input {
        Input::OverBudget(BudgetSpent {
            scope: BudgetScope::AgentDay {
                day: "2026-11-28".into(),
            },
            limit_usd: 5.0,
            spent_usd: 5.02,
            raised_usd: 0.0,
        })
    }

    fn reply_of(out: &[Effect]) -> (String, bool) {
        match out.last() {
            Some(Effect::TurnFinished { reply, ok, .. }) => (reply.clone(), *ok),
            other => panic!("the turn did not end: {other:?}"),
        }
    }

    fn exceeded(out: &[Effect]) -> BudgetExceeded {
        out.iter()
            .find_map(|e| match e {
                Effect::Event(TraceEvent::BudgetExceeded(b)) => Some(b.clone()),
                _ => None,
            })
            .expect("a budget_exceeded event")
    }

    #[test]
    fn stop_ends_the_turn_with_a_reply_naming_the_budget_and_leaves_the_conversation_as_it_was() {
        let mut e = Engine::new(budgeted(OnBudgetExceeded::Stop));
        e.apply(message(1));
        e.apply(answer("first"));
        let before = e.history().to_vec();
        e.apply(message(2));
        let out = e.apply(day_spent());
        assert_eq!(
            kinds(&out),
            [
                "event:budget_exceeded",
                "commit",
                "event:turn_completed",
                "finished"
            ]
        );
        let b = exceeded(&out);
        assert_eq!((b.budget_usd, b.spent_usd), (5.0, 5.02));
        assert_eq!(
            b.scope,
            Some(BudgetScope::AgentDay {
                day: "2026-11-28".into()
            })
        );
        assert_eq!(
            reply_of(&out),
            (
                "Stopped: agent a's budget for 2026-11-28 is spent ($5.02 of $5.00, \
                 governance.max_budget_per_day). Raise it in the agentfile, or wait for the next day."
                    .to_string(),
                false
            )
        );
        let plan = commits(&out)[0];
        assert!(plan.append.is_empty(), "the input is not stored: {plan:?}");
        assert!(plan.state.taken(2), "the message is answered once");
        assert_eq!(e.history(), before.as_slice());
        model_never_reads(&e, "Stopped");
    }

    #[test]
    fn a_spent_session_budget_says_how_to_start_over() {
        let mut e = Engine::new(budgeted(OnBudgetExceeded::Stop));
        e.apply(message(1));
        let out = e.apply(Input::OverBudget(BudgetSpent {
            scope: BudgetScope::Session,
            limit_usd: 4.0,
            spent_usd: 4.5,
            raised_usd: 2.0,
        }));
        let (reply, ok) = reply_of(&out);
        assert!(!ok);
        assert_eq!(
            reply,
            "Stopped: this session's budget is spent ($4.50 of $4.00, \
             governance.max_budget_per_session, $2.00 of it raised by people). Start the \
             conversation over with `ninetrix reset`, or raise it in the agentfile."
        );
    }

    #[test]
    fn ask_human_files_a_budget_request_and_an_approval_tries_the_round_again() {
        let mut e = Engine::new(budgeted(OnBudgetExceeded::AskHuman));
        e.apply(message(1));
        let out = e.apply(day_spent());
        assert_eq!(
            kinds(&out),
            ["event:budget_exceeded", "commit", "await:1"],
            "the turn waits: not a failed turn"
        );
        let plan = commits(&out)[0];
        assert_eq!(plan.state.status, ThreadStatus::Waiting);
        assert_eq!(
            plan.append.len(),
            1,
            "the input rides on the request's commit"
        );
        let asks = ask_of(&out);
        assert_eq!(asks.len(), 1);
        let ask = &asks[0];
        assert_eq!(
            (ask.kind, ask.tool.as_str(), ask.timeout_secs),
            (ApprovalKind::Budget, BUDGET_TOOL, 3600)
        );
        assert_eq!(
            ask.raise,
            Some(BudgetRaise {
                scope: BudgetScope::AgentDay {
                    day: "2026-11-28".into()
                },
                amount_usd: 5.0
            }),
            "raised by the agentfile's amount for that budget"
        );
        assert_eq!(
            ask.args["question"],
            "raise agent a's budget for 2026-11-28 by $5.00?"
        );
        assert_eq!(
            (
                ask.args["spent_usd"].as_f64(),
                ask.args["limit_usd"].as_f64()
            ),
            (Some(5.02), Some(5.0))
        );
        assert!(!e.idle(), "a waiting turn is still a turn");
        // Approved: the waiting is stored over, and the round is tried again.
        let out = e.apply(Input::Approvals(vec![settled(
            ask,
            ApprovalStatus::Approved,
        )]));
        assert_eq!(kinds(&out), ["commit", "call_llm"]);
        assert_eq!(commits(&out)[0].state.status, ThreadStatus::InTurn);
        let out = e.apply(answer("done"));
        assert_eq!(reply_of(&out), ("done".to_string(), true));
        assert!(crate::history::validate(e.history()).is_ok());
    }

    #[test]
    fn a_second_refusal_after_a_raise_asks_again_under_a_new_key() {
        let mut e = Engine::new(budgeted(OnBudgetExceeded::AskHuman));
        e.apply(message(1));
        let first = ask_of(&e.apply(day_spent()))[0].clone();
        e.apply(Input::Approvals(vec![settled(
            &first,
            ApprovalStatus::Approved,
        )]));
        let out = e.apply(llm(vec![read_call("r")], 0.0));
        assert_eq!(
            kinds(&out).last().map(String::as_str),
            Some("run:file_read")
        );
        e.apply(result("r"));
        let out = e.apply(day_spent());
        let second = ask_of(&out);
        assert_eq!(second.len(), 1);
        assert_ne!(second[0].key, first.key);
        assert_ne!(second[0].call_id, first.call_id);
        assert_eq!(kinds(&out), ["event:budget_exceeded", "commit", "await:1"]);
    }

    #[test]
    fn a_rejected_raise_stops_the_turn_saying_who_and_why() {
        let mut e = Engine::new(budgeted(OnBudgetExceeded::AskHuman));
        e.apply(message(1));
        let ask = ask_of(&e.apply(day_spent()))[0].clone();
        let out = e.apply(Input::Approvals(vec![settled(
            &ask,
            ApprovalStatus::Rejected,
        )]));
        assert_eq!(kinds(&out), ["commit", "event:turn_completed", "finished"]);
        let (reply, ok) = reply_of(&out);
        assert!(!ok);
        assert!(
            reply.starts_with(
                "Stopped: agent a's budget for 2026-11-28 is spent ($5.02 of $5.00, \
                 governance.max_budget_per_day); alice rejected raising it by $5.00 (request "
            ),
            "{reply}"
        );
        assert!(
            reply.ends_with(": not today. Raise it in the agentfile, or wait for the next day."),
            "{reply}"
        );
        // The input the request's commit stored is cut again: the model never answered it.
        let plan = commits(&out)[0];
        assert_eq!((plan.truncate_to, plan.append.len()), (Some(0), 0));
        assert_eq!(plan.state.status, ThreadStatus::Idle);
        assert!(e.history().is_empty());
        assert!(e.idle());
    }

    #[test]
    fn a_crash_while_waiting_waits_again_for_the_same_request() {
        let cfg = budgeted(OnBudgetExceeded::AskHuman);
        let mut first = Engine::new(cfg.clone());
        first.apply(message(1));
        let ask = ask_of(&first.apply(day_spent()))[0].clone();
        let mut restored = stored(&first);
        restored.approvals = vec![settled(&ask, ApprovalStatus::Pending)];
        let mut second = second_boot(cfg.clone());
        let out = second.apply(Input::Restored(Some(restored.clone())));
        assert_eq!(
            kinds(&out),
            ["event:turn_resumed", "await:1"],
            "no repair, no commit, no second request"
        );
        let Some(Effect::AwaitApprovals { keys, .. }) = out.last() else {
            panic!()
        };
        assert_eq!(keys, std::slice::from_ref(&ask.key));
        // Decided while no runner held the thread: the next boot goes on at once.
        restored.approvals = vec![settled(&ask, ApprovalStatus::Approved)];
        let mut third = Engine::new(EngineConfig {
            epoch: 3,
            ..cfg.clone()
        });
        let out = third.apply(Input::Restored(Some(restored.clone())));
        assert_eq!(kinds(&out), ["event:turn_resumed", "commit", "call_llm"]);
        // Expired meanwhile: the turn stops, saying so.
        restored.approvals = vec![settled(&ask, ApprovalStatus::Expired)];
        let mut fourth = Engine::new(EngineConfig { epoch: 4, ..cfg });
        let out = fourth.apply(Input::Restored(Some(restored)));
        assert_eq!(
            kinds(&out),
            [
                "event:turn_resumed",
                "event:approval_expired",
                "commit",
                "event:turn_completed",
                "finished"
            ]
        );
        let (reply, _) = reply_of(&out);
        assert!(
            reply.contains("nobody approved raising it by $5.00"),
            "{reply}"
        );
    }

    #[test]
    fn a_cancel_while_waiting_ends_the_turn_as_for_a_gated_call() {
        let mut e = Engine::new(budgeted(OnBudgetExceeded::AskHuman));
        e.apply(message(1));
        e.apply(day_spent());
        let out = e.apply(Input::Stop(StoppedBy::Cancelled {
            seq: 2,
            by: "ana".into(),
        }));
        let (reply, ok) = reply_of(&out);
        assert_eq!((reply.as_str(), ok), ("Cancelled by ana.", false));
        assert!(e.idle());
        assert!(crate::history::validate(e.history()).is_ok());
    }

    #[test]
    fn without_an_amount_to_raise_ask_human_stops() {
        let mut e = Engine::new(EngineConfig {
            budgets: None,
            ..budgeted(OnBudgetExceeded::AskHuman)
        });
        e.apply(message(1));
        let out = e.apply(day_spent());
        assert!(ask_of(&out).is_empty());
        assert!(!reply_of(&out).1);
    }
}
