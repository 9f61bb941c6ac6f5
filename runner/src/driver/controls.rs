//! The inbox seen while a turn runs: a task that long-polls the thread's inbox and keeps the
//! urgent messages (steers, interrupts, cancels) that arrived since the turn began, so the
//! driver can apply a steer before the next model round and stop the turn when an interrupt or
//! a cancel comes — abandoning the model call or the wait in flight, giving a running tool
//! `execution.interrupt_grace`. What each message means for the turn is decided by
//! [`crate::inbox::for_turn`] against the engine's state at the moment of use.

use std::time::Duration;

use ninetrix_proto::api::{CheckpointState, InboxMessage};
use ninetrix_proto::effects::Effect as EffectClass;
use ninetrix_proto::events::{self as ev, StoppedBy, TraceEvent, TurnStopping};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::Stop;
use crate::checkpoints::Checkpoints;
use crate::engine::{Effect, Input, PlannedCall};
use crate::health::Activity;
use crate::inbox::{self, ForTurn};
use crate::ledger::Decision;

/// How long one poll of the watcher waits.
const POLL: Duration = Duration::from_secs(30);

/// The urgent messages that arrived after the turn's cursor, kept up to date by a task.
pub(super) struct Controls {
    seen: watch::Receiver<Vec<InboxMessage>>,
    task: JoinHandle<()>,
}

impl Drop for Controls {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Controls {
    /// Starts watching the inbox after `after` (the turn's cursor), with what the runner read
    /// of it when it took the turn's message (so a control already there acts at the turn's
    /// first boundary, before the model is asked).
    pub(super) fn start<C: Checkpoints>(store: C, after: u64, read: Vec<InboxMessage>) -> Self {
        let after = read.last().map_or(after, |m| m.seq.max(after));
        let (tx, seen) = watch::channel(read.into_iter().filter(InboxMessage::urgent).collect());
        let task = tokio::spawn(watch_inbox(store, after, tx));
        Self { seen, task }
    }

    /// The urgent messages seen so far.
    pub(super) fn seen(&self) -> Vec<InboxMessage> {
        self.seen.borrow().clone()
    }

    /// A receiver to wait on while the driver is busy (it borrows nothing of the runner).
    pub(super) fn subscribe(&self) -> watch::Receiver<Vec<InboxMessage>> {
        self.seen.clone()
    }
}

/// Polls the inbox after `after` until the receiver side is gone, publishing every urgent
/// message seen. A failure (the thread purged, the runner fenced) ends the watch: the driver's
/// own next write finds out.
async fn watch_inbox<C: Checkpoints>(
    store: C,
    mut after: u64,
    tx: watch::Sender<Vec<InboxMessage>>,
) {
    loop {
        let messages = match store.inbox(after, POLL).await {
            Ok(m) => m,
            Err(e) => {
                tracing::debug!("the inbox watch of the running turn stopped: {e}");
                return;
            }
        };
        if let Some(last) = messages.last() {
            after = after.max(last.seq);
        }
        let urgent: Vec<InboxMessage> = messages.into_iter().filter(|m| m.urgent()).collect();
        if !urgent.is_empty() {
            tx.send_modify(|seen| seen.extend(urgent));
        }
        if tx.is_closed() {
            return;
        }
    }
}

/// Resolves once an interrupt or a cancel for the turn whose state is `state` has arrived
/// (never, without a watcher).
pub(super) async fn stop_arrives(
    seen: Option<watch::Receiver<Vec<InboxMessage>>>,
    state: CheckpointState,
) -> StoppedBy {
    let Some(mut seen) = seen else {
        return std::future::pending().await;
    };
    loop {
        if let Some(by) = inbox::stop_for(&seen.borrow_and_update(), &state) {
            return by;
        }
        if seen.changed().await.is_err() {
            return std::future::pending().await;
        }
    }
}

impl<C: Checkpoints> super::Runner<C> {
    /// The watch of the running turn's inbox (started when the turn first needs it; none
    /// between turns or without an API), and the state its messages are judged against.
    pub(super) fn watching(
        &mut self,
    ) -> (Option<watch::Receiver<Vec<InboxMessage>>>, CheckpointState) {
        if self.controls.is_none() && !self.engine.idle() && self.config.api.is_some() {
            let after = self.engine.state().inbox_cursor;
            let read = std::mem::take(&mut self.read_ahead);
            self.controls = Some(Controls::start(self.store.clone(), after, read));
        }
        let seen = self.controls.as_ref().map(Controls::subscribe);
        (seen, self.engine.state().clone())
    }

    /// A safe boundary of the running turn: the effects that end it, if an interrupt or a
    /// cancel has arrived; else `None`, with the steers that arrived joined to it first when
    /// `steers` (before a model round — the only boundary where the model will read them).
    pub(super) fn at_boundary(&mut self, steers: bool) -> Option<Vec<Effect>> {
        self.watching();
        let seen = self.controls.as_ref()?.seen();
        for action in inbox::for_turn(&seen, self.engine.state()) {
            match action {
                ForTurn::Steer { seq, content } if steers => {
                    for effect in self.engine.apply(Input::Steer { seq, content }) {
                        if let Effect::Event(e) = effect {
                            self.events.emit(e);
                        }
                    }
                }
                ForTurn::Steer { .. } => {}
                ForTurn::Stop(by) => {
                    let input = self.stop_input(by, &[]);
                    return Some(self.engine.apply(input));
                }
            }
        }
        None
    }

    /// The interrupt or cancel for the running turn that has arrived, if one has.
    pub(super) fn stop_waiting(&mut self) -> Option<StoppedBy> {
        self.watching();
        let seen = self.controls.as_ref()?.seen();
        inbox::stop_for(&seen, self.engine.state())
    }

    /// Takes a stop for the running turn: says so (`turn_stopping`, and the health report's
    /// `stopping`) and gives the engine its input.
    pub(super) fn stop_input(&self, by: StoppedBy, running: &[String]) -> Input {
        let turn_seq = self.engine.state().turn_seq;
        tracing::debug!("stopping turn {turn_seq}");
        self.health.set(Activity::Stopping {
            turn: turn_seq,
            by: stopped_words(&by),
        });
        self.events.emit(TraceEvent::TurnStopping(TurnStopping {
            turn_seq,
            by: by.clone(),
            running: running.to_vec(),
        }));
        Input::Stop(by)
    }

    /// Runs a tool call; if the turn is stopped meanwhile, the call gets
    /// `execution.interrupt_grace` to finish, and is then stopped (answered as such; a `write`
    /// so stopped has its outcome unknown, which its answer records). The inputs to give the
    /// engine, in order.
    pub(super) async fn run_tool_stoppable(
        &mut self,
        call: PlannedCall,
    ) -> Result<Vec<Input>, Stop> {
        let (seen, state) = self.watching();
        let grace_secs = self.config.spec.execution.interrupt_grace_secs;
        let write =
            call.effect == EffectClass::Write && matches!(call.decision, Decision::Execute { .. });
        let stopped = ev::ToolCall {
            name: call.name.clone(),
            args: self.args_preview(&call.args),
            effect: call.effect,
            mode: if write {
                ev::ToolMode::OutcomeUnknown
            } else {
                call.decision.mode()
            },
            duration_ms: 0,
            ok: false,
            key: call.key.clone(),
            result: String::new(),
        };
        let call_id = call.call_id.clone();
        let (events, health) = (self.events.clone(), self.health.clone());
        let started = std::time::Instant::now();
        let (by, answered) = {
            let running = self.run_tool(call);
            tokio::pin!(running);
            let by = tokio::select! {
                r = &mut running => return Ok(vec![r?]),
                by = stop_arrives(seen, state.clone()) => by,
            };
            health.set(Activity::Stopping {
                turn: state.turn_seq,
                by: stopped_words(&by),
            });
            events.emit(TraceEvent::TurnStopping(TurnStopping {
                turn_seq: state.turn_seq,
                by: by.clone(),
                running: vec![stopped.name.clone()],
            }));
            let answered =
                match tokio::time::timeout(Duration::from_secs(grace_secs), &mut running).await {
                    Ok(r) => r?,
                    Err(_) => {
                        let content = crate::engine::stopped_while_running(write, grace_secs);
                        events.emit(TraceEvent::ToolCall(ev::ToolCall {
                            duration_ms: started.elapsed().as_millis() as u64,
                            result: crate::engine::preview(&content, 200),
                            ..stopped
                        }));
                        Input::Tool {
                            call_id,
                            content,
                            is_error: true,
                        }
                    }
                };
            (by, answered)
        };
        Ok(vec![Input::Stop(by), answered])
    }

    /// After a wait for people or collaborators that came back with something cancelled: the
    /// cancel (or interrupt) behind it, read from the inbox now (the watch may not have seen it
    /// yet), so the turn stops instead of going on without those answers.
    pub(super) async fn stop_behind(&mut self) -> Option<Input> {
        if self.engine.stopping().is_some() {
            return None;
        }
        let after = self.engine.state().inbox_cursor;
        let messages = self.store.inbox(after, Duration::ZERO).await.ok()?;
        let by = inbox::stop_for(&messages, self.engine.state())?;
        Some(self.stop_input(by, &[]))
    }
}

/// `interrupted by message N` or `cancelled by NAME`.
pub(super) fn stopped_words(by: &StoppedBy) -> String {
    match by {
        StoppedBy::Interrupted { seq } => format!("interrupted by message {seq}"),
        StoppedBy::Cancelled { by, .. } => format!("cancelled by {by}"),
    }
}
