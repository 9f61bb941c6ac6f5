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
//! ledger key of the turn (tool [`BUDGET_TOOL`], the n-th request of the turn), so a runner
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
            (OnBudgetExceeded::AskHuman, Some(amount)) => {
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

    /// The key of the turn's `n`-th request to raise a budget.
    fn budget_key(&self, n: usize) -> String {
        ledger::key(
            self.cfg.thread,
            self.state.turn_seq,
            BUDGET_TOOL,
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
