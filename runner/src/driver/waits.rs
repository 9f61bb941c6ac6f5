//! Waits at no cost: for people to settle the turn's requests (notifying each pending one), and
//! for collaborators to answer the calls handed to them.

use std::time::{Duration, Instant};

use ninetrix_proto::api::{
    Approval, ApprovalKind, ApprovalStatus, Handoff, HandoffRequest, HandoffStatus,
};
use ninetrix_proto::events::{self as ev, TraceEvent};
use tokio_util::sync::CancellationToken;

use crate::checkpoints::{CheckpointError, Checkpoints};
use crate::engine::{Delegated, Delegation, Input};
use crate::health::Activity;
use crate::notify::{Commands, Notification};
use crate::telemetry::Observed;

use super::{POLL, Runner, Stop};

impl<C: Checkpoints> Runner<C> {
    /// Waits, at no CPU cost (the API's long-poll), until one more of the turn's requests is
    /// settled or none of `keys` is pending; notifies each pending request this runner has not
    /// notified yet, and says in its health what it waits for.
    pub(super) async fn await_approvals(
        &mut self,
        turn_seq: u64,
        keys: &[String],
    ) -> Result<Input, Stop> {
        let before = self.health.activity();
        let mut settled = None;
        let approvals = loop {
            let known = settled.unwrap_or(0);
            let wait = if settled.is_some() {
                POLL
            } else {
                Duration::ZERO
            };
            let next = tokio::select! {
                r = self.store.approvals(turn_seq, known, wait) => r,
                () = self.shutdown.cancelled() => return Err(Stop::Shutdown),
            };
            let approvals = next.map_err(|e| match e {
                CheckpointError::NoApi(why) => Stop::Failure(why),
                e => e.into(),
            })?;
            let ours: Vec<&Approval> = approvals.iter().filter(|a| keys.contains(&a.key)).collect();
            if let Some(missing) = keys.iter().find(|k| !ours.iter().any(|a| &a.key == *k)) {
                return Err(Stop::Failure(format!(
                    "the request to a person for call {missing} is not stored; restarting to reload the turn"
                )));
            }
            for a in &approvals {
                if a.status.is_settled()
                    && let Some(stop) = self.notified.remove(&a.id)
                {
                    stop.cancel();
                }
            }
            for a in ours.iter().filter(|a| a.status.is_settled()) {
                self.events.observe(Observed::ApprovalSettled {
                    id: a.id.to_string(),
                    kind: a.kind,
                    tool: a.tool.clone(),
                    status: a.status,
                    requested_at: a.requested_at,
                });
            }
            let pending: Vec<&Approval> = ours
                .iter()
                .copied()
                .filter(|a| a.status == ApprovalStatus::Pending)
                .collect();
            for a in &pending {
                self.notify(a);
            }
            let count = approvals.iter().filter(|a| a.status.is_settled()).count() as u64;
            if pending.is_empty() || settled.is_some_and(|s| count > s) {
                break approvals;
            }
            if settled.is_none() {
                self.health.set(Activity::Waiting {
                    approvals: pending.iter().map(|a| a.id).collect(),
                });
                self.events.flush(Duration::from_secs(2)).await;
            }
            settled = Some(count);
        };
        self.health.set(before);
        let ours_cancelled = approvals
            .iter()
            .any(|a| keys.contains(&a.key) && a.status == ApprovalStatus::Cancelled);
        if ours_cancelled && let Some(stop) = self.stop_behind().await {
            return Ok(stop);
        }
        Ok(Input::Approvals(approvals))
    }

    /// Hands each call's task to its collaborator and waits until every one has its answer:
    /// the pool's collaborators through the API ([`Self::hand_over`]), remote A2A agents
    /// directly (`driver/a2a.rs`), all at the same time, with the health saying whom it waits
    /// for.
    pub(super) async fn delegate(
        &mut self,
        turn_seq: u64,
        calls: Vec<Delegation>,
    ) -> Result<Input, Stop> {
        let before = self.health.activity();
        self.health.set(Activity::Delegating {
            agents: calls.iter().map(|d| d.agent.clone()).collect(),
        });
        let (remote, local): (Vec<Delegation>, Vec<Delegation>) =
            calls.into_iter().partition(|d| d.remote.is_some());
        let asker = super::a2a::Remote {
            client: self.a2a.clone(),
            events: self.events.clone(),
            secrets: self.config.secrets.clone(),
            workspace: self.config.workspace.clone(),
            shutdown: self.shutdown.clone(),
        };
        let (remote_answers, local_answers) =
            tokio::join!(asker.ask_all(&remote), self.hand_over(turn_seq, local));
        self.health.set(before);
        let (mut answers, cancelled) = local_answers?;
        answers.extend(remote_answers?);
        if cancelled && let Some(stop) = self.stop_behind().await {
            return Ok(stop);
        }
        Ok(Input::Delegated(answers))
    }

    /// Hands each call's task to its collaborator of the pool through the API (a call that
    /// already did — before a restart — gets the handoff it made: it re-attaches) and waits, at
    /// no CPU cost, until every one has its answer: the reply, the collaborator's failure, or
    /// the end of the wait. All the calls' handoffs are filed before the wait, so the
    /// collaborators work at the same time. Also says whether one of them was cancelled.
    async fn hand_over(
        &mut self,
        turn_seq: u64,
        calls: Vec<Delegation>,
    ) -> Result<(Vec<Delegated>, bool), Stop> {
        let started = Instant::now();
        let mut answers: Vec<Delegated> = Vec::new();
        let mut waiting: Vec<(Delegation, String)> = Vec::new();
        for d in calls {
            let request = HandoffRequest {
                epoch: self.epoch,
                turn_seq,
                key: d.call.key.clone(),
                call_id: d.call.call_id.clone(),
                agent: d.agent.clone(),
                task: d.task.clone(),
                context: d.context.clone(),
                via: d.chain[..d.chain.len().saturating_sub(1)].to_vec(),
                timeout_secs: d.timeout_secs,
                budget_usd: d.budget_usd,
            };
            let filed = tokio::select! {
                r = self.store.open_handoff(&request) => r,
                () = self.shutdown.cancelled() => return Err(Stop::Shutdown),
            };
            match filed {
                Ok(h) => {
                    self.events.emit(TraceEvent::HandoffSent(ev::HandoffSent {
                        delivery_key: h.delivery_key.clone(),
                        tool: d.call.name.clone(),
                        agent: h.agent.clone(),
                        session: h.session.clone(),
                        thread_id: Some(h.target_thread_id),
                        a2a: None,
                        task: crate::engine::preview(&d.task, 200),
                        depth: d.chain.len() as u32,
                        reattached: h.epoch != self.epoch,
                    }));
                    waiting.push((d, h.delivery_key));
                }
                // Not a collaborator (as `up` recorded it), or no API: the call fails, naming why.
                Err(CheckpointError::Refused(e)) => {
                    answers.push(Delegated {
                        call_id: d.call.call_id.clone(),
                        content: format!(
                            "Not done: the task could not be handed to `{}`: {}",
                            d.agent,
                            crate::checkpoints::api_failure_text(&e)
                        ),
                        is_error: true,
                        cost_usd: 0.0,
                    });
                }
                Err(CheckpointError::NoApi(why)) => answers.push(Delegated {
                    call_id: d.call.call_id.clone(),
                    content: format!("Not done: {why}."),
                    is_error: true,
                    cost_usd: 0.0,
                }),
                Err(e) => return Err(e.into()),
            }
        }
        if !waiting.is_empty() {
            self.events.flush(Duration::from_secs(2)).await;
        }
        let mut settled = 0;
        let mut cancelled = false;
        while !waiting.is_empty() {
            let next = tokio::select! {
                r = self.store.handoffs(turn_seq, settled, POLL) => r,
                () = self.shutdown.cancelled() => return Err(Stop::Shutdown),
            };
            let handoffs = next?;
            settled = handoffs.iter().filter(|h| h.status.is_settled()).count() as u64;
            let mut still = Vec::new();
            for (d, key) in waiting {
                let Some(h) = handoffs.iter().find(|h| h.delivery_key == key) else {
                    return Err(Stop::Failure(format!(
                        "the handoff of call {} to `{}` is not stored; restarting to reload the turn",
                        d.call.key, d.agent
                    )));
                };
                if h.status == HandoffStatus::Pending {
                    still.push((d, key));
                    continue;
                }
                cancelled |= h.status == HandoffStatus::Cancelled;
                let answer = handoff_answer(h);
                self.events
                    .emit(TraceEvent::HandoffSettled(ev::HandoffSettled {
                        delivery_key: key,
                        agent: h.agent.clone(),
                        thread_id: Some(h.target_thread_id),
                        a2a: None,
                        status: h.status,
                        reply: self.result_preview(&answer.0),
                        cost_usd: h.cost_usd,
                        waited_ms: started.elapsed().as_millis() as u64,
                    }));
                answers.push(Delegated {
                    call_id: d.call.call_id.clone(),
                    content: answer.0,
                    is_error: answer.1,
                    cost_usd: h.cost_usd,
                });
            }
            waiting = still;
        }
        Ok((answers, cancelled))
    }

    /// Sends the notification of a pending request once per runner life (a restarted runner
    /// sends it again: delivery is at least once, deduped by the request's ID).
    pub(super) fn notify(&mut self, a: &Approval) {
        let Some(notifier) = &self.notifier else {
            return;
        };
        if self.notified.contains_key(&a.id) {
            return;
        }
        let stop = CancellationToken::new();
        self.notified.insert(a.id, stop.clone());
        notifier.send(
            Notification {
                event: "approval_requested",
                id: a.id,
                kind: a.kind.as_str(),
                thread_id: a.thread_id.to_string(),
                pool: a.labels.pool.clone(),
                agent: self.config.spec.name.clone(),
                replica: a.labels.replica,
                turn_seq: a.turn_seq,
                tool: a.tool.clone(),
                args: a.args.clone(),
                args_hash: a.args_hash.clone(),
                requested_at: a
                    .requested_at
                    .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                timeout_secs: (a.expires_at - a.requested_at).num_seconds().max(0) as u64,
                decide: Commands::for_request(a.id, a.kind == ApprovalKind::Question),
            },
            stop,
        );
    }
}

/// What a settled handoff answers its call with: the reply, or why there is none (naming the
/// collaborator, its session and thread, so the model — and whoever reads the trace — knows where
/// to look).
fn handoff_answer(h: &Handoff) -> (String, bool) {
    let waited = (h.expires_at - h.created_at).num_seconds().max(0) as u64;
    match h.status {
        HandoffStatus::Replied => (h.reply.clone().unwrap_or_default(), false),
        HandoffStatus::Failed => (
            format!(
                "Not done: `{}` stopped without finishing the task (session {}, thread {}): {}",
                h.agent,
                h.session,
                h.target_thread_id,
                h.reply.as_deref().unwrap_or("no reason given")
            ),
            true,
        ),
        HandoffStatus::Cancelled => (
            format!(
                "Not done: the handoff to `{}` was cancelled (session {}, thread {}); its turn on the task was cancelled too.",
                h.agent, h.session, h.target_thread_id
            ),
            true,
        ),
        HandoffStatus::TimedOut | HandoffStatus::Pending => (
            format!(
                "Not done: `{}` did not reply within {} (transfer_timeout; session {}, thread {}). It may be down, crash-looping or still working: its later reply will not reach this call. Try again later, or do the work another way.",
                h.agent,
                ninetrix_agentfile::units::format_duration(waited),
                h.session,
                h.target_thread_id
            ),
            true,
        ),
    }
}
