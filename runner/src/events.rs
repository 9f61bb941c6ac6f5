//! Trace events: logged as one short line each, and stored by the API. Most ride on the turn's
//! commits: before each commit the driver takes what is queued ([`Events::take`]) and sends it in
//! the same transaction, so a turn's events cost no write of their own. What is left when the
//! runner goes quiet (100 ms without an event: boot, a slow model call) a background task sends in
//! batches. Emitting never waits on the API. While the API is unreachable the events wait in a
//! bounded buffer ([`MAX_PENDING`]; the oldest are dropped beyond it, and how many is logged once
//! the API answers) and are retried with backoff. Events are diagnostics; checkpoints are the
//! truth.

use std::collections::VecDeque;
use std::time::Duration;

use ninetrix_proto::api::{ApprovalKind, HandoffStatus, NewEvent};
use ninetrix_proto::events::TraceEvent;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::backoff;
use crate::checkpoints::{CheckpointError, Checkpoints};
use crate::telemetry::{Observed, ThreadSpans};

/// The most events kept while the API cannot take them (a few hours of a busy agent's retries).
pub const MAX_PENDING: usize = 2048;
/// The most events per request.
const BATCH: usize = 256;

enum Msg {
    Event(NewEvent),
    Flush(oneshot::Sender<()>),
    /// Lend the queued events (at most [`BATCH`]) to a commit; nothing is sent until
    /// [`Msg::Settle`].
    Take(oneshot::Sender<Vec<NewEvent>>),
    /// The commit is over: the events it did not store go back to the front of the queue.
    Settle(Vec<NewEvent>),
}

/// The event sink.
#[derive(Clone)]
pub struct Events {
    tx: mpsc::Sender<Msg>,
    /// The thread's OpenTelemetry spans, built from the events (when telemetry is on).
    spans: Option<ThreadSpans>,
}

impl Events {
    /// Starts the background sender to `store`, writing as `epoch`.
    pub fn start<C: Checkpoints>(store: C, epoch: u64) -> Events {
        let (tx, rx) = mpsc::channel(1024);
        tokio::spawn(send_loop(store, epoch, rx));
        Events { tx, spans: None }
    }

    /// The same sink, also turning every event into OpenTelemetry spans.
    pub fn with_spans(mut self, spans: ThreadSpans) -> Events {
        self.spans = Some(spans);
        self
    }

    /// Tells the spans what no event says (an interrupted attempt, a settled request, fencing).
    pub fn observe(&self, what: Observed<'_>) {
        if let Some(spans) = &self.spans {
            spans.observe(what);
        }
    }

    /// Logs the event and queues it for the store, stamped with the runner's own time (the API
    /// stores events in batches, later).
    pub fn emit(&self, event: TraceEvent) {
        log(&event);
        let now = chrono::Utc::now();
        if let Some(spans) = &self.spans {
            spans.observe_at(now, Observed::Event(&event));
        }
        let wire = event.to_new_event(now);
        if self.tx.try_send(Msg::Event(wire)).is_err() {
            tracing::warn!("event queue full; an event was dropped");
        }
    }

    /// Waits (up to `bound`) until everything queued so far was sent.
    pub async fn flush(&self, bound: Duration) {
        let (done, wait) = oneshot::channel();
        if self.tx.send(Msg::Flush(done)).await.is_ok() {
            let _ = tokio::time::timeout(bound, wait).await;
        }
    }

    /// Takes the events queued so far (oldest first, at most one batch) for a commit to store.
    /// Until [`Events::settle`] nothing else is sent, so no later event is stored before them.
    pub async fn take(&self) -> Vec<NewEvent> {
        let (give, taken) = oneshot::channel();
        if self.tx.send(Msg::Take(give)).await.is_err() {
            return Vec::new();
        }
        taken.await.unwrap_or_default()
    }

    /// Ends a [`Events::take`]: `unsent` (empty when the commit stored them) goes back to the
    /// front of the queue. Waits for room rather than drop it: until it arrives, nothing is sent.
    pub async fn settle(&self, unsent: Vec<NewEvent>) {
        // Fails only once the sender task is gone (the runtime is stopping).
        let _ = self.tx.send(Msg::Settle(unsent)).await;
    }

    /// Logs an event that is stored some other way (with a commit): the same line
    /// [`Events::emit`] would log.
    pub fn log_only(&self, event: &TraceEvent) {
        log(event);
        self.observe(Observed::Event(event));
    }
}

impl crate::health::OutageSink for Events {
    fn emit(&self, event: TraceEvent) {
        Events::emit(self, event);
    }
}

/// The events not stored yet.
struct Pending {
    queue: VecDeque<NewEvent>,
    /// Dropped because the buffer was full, since the last report.
    dropped: u64,
    failures: u32,
    /// No attempt before this (the API failed).
    retry_at: Option<Instant>,
}

impl Pending {
    fn push(&mut self, e: NewEvent) {
        if self.queue.len() >= MAX_PENDING {
            self.queue.pop_front();
            self.dropped += 1;
        }
        self.queue.push_back(e);
    }

    fn backing_off(&self) -> bool {
        self.retry_at.is_some_and(|t| t > Instant::now())
    }

    /// Sends everything queued, in batches; stops at the first transient failure (then waits
    /// the backoff before the next try).
    async fn send<C: Checkpoints>(&mut self, api: &C, epoch: u64) {
        while !self.queue.is_empty() {
            let n = self.queue.len().min(BATCH);
            let batch: Vec<NewEvent> = self.queue.iter().take(n).cloned().collect();
            match api.events(epoch, batch).await {
                Ok(()) => {
                    self.queue.drain(..n);
                    self.failures = 0;
                    self.retry_at = None;
                    if self.dropped > 0 {
                        tracing::warn!(
                            "{} trace event(s) were dropped while the checkpoint API was unreachable (the runner keeps at most {MAX_PENDING})",
                            self.dropped
                        );
                        self.dropped = 0;
                    }
                }
                Err(CheckpointError::Unreachable(why)) => {
                    self.failures += 1;
                    let wait = backoff::API
                        .delay(self.failures + 3, backoff::jitter())
                        .min(Duration::from_secs(30));
                    tracing::debug!(
                        "trace events wait for the checkpoint API ({why}); next try in {} ms",
                        wait.as_millis()
                    );
                    self.retry_at = Some(Instant::now() + wait);
                    return;
                }
                Err(e) => {
                    self.queue.drain(..n);
                    tracing::warn!(error = %e, "{n} trace event(s) were refused and not stored");
                }
            }
        }
    }
}

async fn send_loop<C: Checkpoints>(api: C, epoch: u64, mut rx: mpsc::Receiver<Msg>) {
    let mut pending = Pending {
        queue: VecDeque::new(),
        dropped: 0,
        failures: 0,
        retry_at: None,
    };
    let mut waiting: Vec<oneshot::Sender<()>> = Vec::new();
    // Events lent to a commit: nothing is sent until it settles.
    let mut lent = false;
    loop {
        // Quiet for 100 ms (or the backoff over): send what we have.
        let wait = match (pending.queue.is_empty() || lent, pending.retry_at) {
            (true, _) => None,
            (false, Some(at)) => Some(at.saturating_duration_since(Instant::now())),
            (false, None) => Some(Duration::from_millis(100)),
        };
        let msg = match wait {
            None => rx.recv().await,
            Some(d) => match tokio::time::timeout(d, rx.recv()).await {
                Ok(m) => m,
                Err(_) => {
                    pending.send(&api, epoch).await;
                    continue;
                }
            },
        };
        match msg {
            None => {
                pending.send(&api, epoch).await;
                return;
            }
            Some(Msg::Event(e)) => {
                pending.push(e);
                if pending.queue.len() < 64 || pending.backing_off() || lent {
                    continue;
                }
            }
            Some(Msg::Take(give)) => {
                let n = pending.queue.len().min(BATCH);
                let _ = give.send(pending.queue.drain(..n).collect());
                lent = true;
                continue;
            }
            Some(Msg::Settle(unsent)) => {
                for e in unsent.into_iter().rev() {
                    pending.queue.push_front(e);
                }
                lent = false;
                continue;
            }
            Some(Msg::Flush(done)) => waiting.push(done),
        }
        if !pending.backing_off() && !lent {
            pending.send(&api, epoch).await;
        }
        // A flush waits for one attempt, never for the API to come back.
        for w in waiting.drain(..) {
            let _ = w.send(());
        }
    }
}

/// One short line per event: what happened, in words.
fn log(event: &TraceEvent) {
    match event {
        TraceEvent::Boot(b) => tracing::info!(
            "boot: epoch {} (boot {}), repaired: {}",
            b.epoch,
            b.boot_count,
            b.repaired
        ),
        TraceEvent::Ready(r) if r.resuming => {
            tracing::info!("ready (resuming the interrupted turn)")
        }
        TraceEvent::Ready(_) => tracing::info!("ready"),
        TraceEvent::Repair(r) => tracing::info!(
            "repaired history: cut to {} messages, dropped {}",
            r.truncate_to,
            r.dropped.len()
        ),
        TraceEvent::Resume(r) => tracing::info!(
            "resuming the interrupted message: {} tool call(s) still to run ({})",
            r.pending_calls.len(),
            r.pending_calls.join(", ")
        ),
        TraceEvent::TurnStarted(t) => {
            tracing::info!("turn {} started (inbox seq {})", t.turn_seq, t.seq)
        }
        TraceEvent::TurnResumed(t) => tracing::info!(
            "turn {} resumed after a restart (inbox seq {})",
            t.turn_seq,
            t.seq
        ),
        TraceEvent::LlmCall(c) => tracing::info!(
            "model {} answered in {} ms: {} tokens in, {} out, stop {}",
            c.model,
            c.latency_ms,
            c.input_tokens,
            c.output_tokens,
            c.stop_reason
        ),
        TraceEvent::LlmRetry(r) => tracing::warn!(
            "model call failed ({}): {}; retrying in {} ms",
            r.attempt_text(),
            r.reason,
            r.retry_in_ms
        ),
        TraceEvent::Outage(o) => tracing::info!("{}; it answers again", o.text()),
        TraceEvent::ToolCall(t) | TraceEvent::ToolReplayed(t) => tracing::info!(
            "tool {} {} in {} ms (ok: {})",
            t.name,
            t.mode.as_str(),
            t.duration_ms,
            t.ok
        ),
        TraceEvent::UnknownTool(u) => tracing::warn!(
            "the model called `{}`, which this agent does not have (tools: {}); answered with an error",
            u.name,
            u.available.join(", ")
        ),
        TraceEvent::McpTools(m) => {
            tracing::info!("MCP server `{}` offers: {}", m.server, m.tool_list());
            if !m.missing.is_empty() {
                tracing::warn!(
                    "MCP server `{}` does not offer {} (named in the agentfile)",
                    m.server,
                    m.missing.join(", ")
                );
            }
        }
        TraceEvent::McpServerDown(d) => tracing::warn!(
            "MCP server `{}` is down: {}; its tools answer with an error until it is back",
            d.server,
            d.reason
        ),
        TraceEvent::McpServerUp(u) => tracing::info!(
            "MCP server `{}` is back after {:.1} s",
            u.server,
            u.down_ms as f64 / 1000.0
        ),
        TraceEvent::Checkpoint(c) => tracing::debug!("checkpoint version {}", c.version),
        TraceEvent::Steered(s) => tracing::info!(
            "message {} joined turn {} (steer): {}",
            s.seq,
            s.turn_seq,
            s.input
        ),
        TraceEvent::TurnStopping(s) => tracing::info!(
            "turn {} is stopping: {}{}",
            s.turn_seq,
            match &s.by {
                ninetrix_proto::events::StoppedBy::Interrupted { seq } =>
                    format!("interrupted by message {seq}"),
                ninetrix_proto::events::StoppedBy::Cancelled { by, .. } =>
                    format!("cancelled by {by}"),
            },
            if s.running.is_empty() {
                String::new()
            } else {
                format!("; waiting for {} to finish", s.running.join(", "))
            }
        ),
        TraceEvent::CancelMissed(c) => tracing::info!(
            "cancel {} by {} found no turn running (turn {} had ended)",
            c.seq,
            c.by,
            c.last_turn
        ),
        TraceEvent::JobStarted(j) => {
            tracing::info!("job {} ({}) started: {}", j.name, j.job, j.command)
        }
        TraceEvent::JobFinished(j) => tracing::info!(
            "job {} ({}) ended{}{}",
            j.name,
            j.job,
            j.exit_code
                .map(|c| format!(" with code {c}"))
                .unwrap_or_default(),
            if j.timed_out { " at its timeout" } else { "" }
        ),
        TraceEvent::JobReattached(j) => {
            tracing::info!("re-attached to job {} ({}): {}", j.name, j.job, j.state)
        }
        TraceEvent::ReplayStarted(r) => tracing::info!(
            "replaying turns {}..{} of thread {} ({} turns) against {}",
            r.from_turn,
            r.to_turn,
            r.source,
            r.turns,
            r.candidate
        ),
        TraceEvent::ReplayAnswered(r) => {
            tracing::info!("replay: {}({}) {}", r.name, r.args, r.verdict.as_str())
        }
        TraceEvent::Forked(f) => tracing::info!(
            "forked from thread {} at turn {} ({} messages{})",
            f.parent,
            f.at_turn,
            f.history_len,
            if f.undone > 0 {
                format!("; {} effects of the parent not undone", f.undone)
            } else {
                String::new()
            }
        ),
        TraceEvent::ForkCreated(f) => tracing::info!(
            "thread {} (session {}) forked from turn {}",
            f.thread_id,
            f.session,
            f.at_turn
        ),
        TraceEvent::Rewound(r) => tracing::info!(
            "rewound from turn {} to turn {}: {} messages left on a branch, {} files written, {} removed{}",
            r.from_turn,
            r.to_turn,
            r.left_messages,
            r.files_written,
            r.files_removed,
            if r.undone > 0 {
                format!("; {} effects not undone", r.undone)
            } else {
                String::new()
            }
        ),
        TraceEvent::RewindFailed(r) => {
            tracing::warn!("rewind to turn {} not done: {}", r.to_turn, r.why)
        }
        TraceEvent::SnapshotTaken(s) => tracing::info!(
            "turn {} snapshot {}: {} files, {} bytes ({} objects, {} bytes new) in {} ms",
            s.turn_seq,
            s.snapshot.root.short(),
            s.snapshot.files,
            s.snapshot.bytes,
            s.uploaded_objects,
            s.uploaded_bytes,
            s.ms
        ),
        TraceEvent::SnapshotSkipped(s) => {
            tracing::warn!(
                "turn {} has no snapshot of its files: {}",
                s.turn_seq,
                s.why
            )
        }
        TraceEvent::WorkspaceRestored(w) => tracing::info!(
            "workspace restored to snapshot {}: {} files written, {} removed",
            w.snapshot.root.short(),
            w.files_written,
            w.files_removed
        ),
        TraceEvent::Compacted(c) => tracing::info!(
            "compacted turns {}–{} by {} ({}): {} → {} tokens",
            c.turns[0],
            c.turns[1],
            c.strategy.as_str(),
            c.reason.as_str(),
            c.tokens_before,
            c.tokens_after
        ),
        TraceEvent::CompactionSkipped(c) => {
            tracing::warn!("compaction due ({}) not made: {}", c.reason.as_str(), c.why)
        }
        TraceEvent::TurnCompleted(t) if t.ok => {
            tracing::info!("turn {} completed", t.turn_seq)
        }
        TraceEvent::TurnCompleted(t) if t.stopped_by.is_some() => {
            tracing::info!("turn {} ended: {}", t.turn_seq, t.reply)
        }
        // A failed turn's reply says why (once: no separate error event repeats it).
        TraceEvent::TurnCompleted(t) => {
            tracing::warn!("turn {} failed: {}", t.turn_seq, t.reply)
        }
        TraceEvent::BudgetExceeded(b) => tracing::warn!(
            "budget exceeded: spent ${} of ${} ({})",
            b.spent_usd,
            b.budget_usd,
            budget_words(b.scope.as_ref())
        ),
        TraceEvent::ModelFallback(f) => tracing::warn!(
            "model call answered by the fallback {} ({} failed: {})",
            f.to,
            f.from,
            f.reason
        ),
        TraceEvent::ModelWaited(w) => tracing::info!(
            "waited {:.1} s for a model slot: {}",
            w.waited_ms as f64 / 1000.0,
            w.wait.text(&w.provider)
        ),
        TraceEvent::MaxTurnsReached(m) => {
            tracing::warn!("stopped after {} model rounds", m.max_turns)
        }
        TraceEvent::ApprovalRequested(a) => tracing::info!(
            "waiting for approval {} ({} `{}`: {}); decide with `ninetrix {} {}`",
            a.id,
            a.kind.as_str(),
            a.tool,
            a.args,
            if a.kind == ApprovalKind::Question {
                "answer"
            } else {
                "approve"
            },
            a.id
        ),
        TraceEvent::ApprovalDecided(a) => {
            tracing::info!("request {} ({}) {}", a.id, a.tool, a.text())
        }
        TraceEvent::ApprovalExpired(a) => tracing::warn!(
            "request {} ({}) expired undecided; the call does not run",
            a.id,
            a.tool
        ),
        TraceEvent::ApprovalNotified(n) if n.ok => {
            tracing::info!("notified request {} (attempt {})", n.id, n.attempt)
        }
        TraceEvent::ApprovalNotified(n) => tracing::warn!(
            "notifying request {} failed (attempt {}): {}{}",
            n.id,
            n.attempt,
            n.error.as_deref().unwrap_or("unknown error"),
            n.retry_in_ms
                .map(|ms| format!("; retrying in {ms} ms"))
                .unwrap_or_else(|| "; giving up".into())
        ),
        TraceEvent::HandoffSent(h) => match (&h.a2a, h.thread_id) {
            (Some(a2a), _) => tracing::info!(
                "sent a task to the remote A2A agent `{}` ({}, task {}, depth {}); following it: {}",
                h.agent,
                a2a.card,
                a2a.task_id.as_deref().unwrap_or("?"),
                h.depth,
                h.task
            ),
            (None, thread) => tracing::info!(
                "{} task to `{}` (session {}, thread {}, depth {}); waiting for its reply: {}",
                if h.reattached {
                    "re-attached to the"
                } else {
                    "handed a"
                },
                h.agent,
                h.session,
                thread.map(|t| t.to_string()).unwrap_or_default(),
                h.depth,
                h.task
            ),
        },
        TraceEvent::HandoffSettled(h) if h.status == HandoffStatus::Replied => tracing::info!(
            "`{}` replied after {} ms (spent ${:.4}): {}",
            h.agent,
            h.waited_ms,
            h.cost_usd,
            h.reply
        ),
        TraceEvent::HandoffSettled(h) => tracing::warn!(
            "the handoff to `{}` ended {} after {} ms: {}",
            h.agent,
            h.status.as_str(),
            h.waited_ms,
            h.reply
        ),
        TraceEvent::HandoffRefused(h) => tracing::warn!(
            "not handing work to `{}`: the chain {} is deeper than max_delegation_depth {}",
            h.agent,
            ninetrix_proto::handoffs::chain_text(&h.chain),
            h.max_depth
        ),
        TraceEvent::HandoffReceived(h) => tracing::info!(
            "task from `{}` (thread {}, chain {})",
            h.from_agent,
            h.from_thread,
            ninetrix_proto::handoffs::chain_text(&h.chain)
        ),
        TraceEvent::HandoffReplied(h) => tracing::info!(
            "replied to `{}` (thread {}): {} (spent ${:.4})",
            h.to_agent,
            h.to_thread,
            if h.ok { "done" } else { "not done" },
            h.cost_usd
        ),
        TraceEvent::Error(e) => tracing::error!("{}: {}", e.stage.as_str(), e.message),
    }
}

/// Which budget a `budget_exceeded` names: the agentfile key that sets it, and the day of a
/// day's budget.
pub fn budget_words(scope: Option<&ninetrix_proto::api::BudgetScope>) -> String {
    use ninetrix_proto::api::BudgetScope;
    match scope {
        None => "governance.max_budget_per_run".into(),
        Some(scope @ BudgetScope::Session) => scope.key().into(),
        Some(scope @ (BudgetScope::AgentDay { day } | BudgetScope::PoolDay { day })) => {
            format!("{}, {day}", scope.key())
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use ninetrix_proto::api::{
        ClaimRequest, ClaimResponse, CommitRequest, CommitResponse, InboxMessage, ThreadState,
        ToolCallRecord,
    };

    use super::*;

    #[test]
    fn a_budget_exceeded_names_the_key_that_sets_the_budget_and_its_day() {
        use ninetrix_proto::api::BudgetScope;
        assert_eq!(budget_words(None), "governance.max_budget_per_run");
        assert_eq!(
            budget_words(Some(&BudgetScope::Session)),
            "governance.max_budget_per_session"
        );
        assert_eq!(
            budget_words(Some(&BudgetScope::PoolDay {
                day: "2026-11-28".into()
            })),
            "governance.max_pool_budget_per_day, 2026-11-28"
        );
    }

    /// A store that only records the event batches sent to it.
    #[derive(Clone, Default)]
    struct Recorder(Arc<Mutex<Vec<String>>>);

    impl Recorder {
        fn stored(&self) -> Vec<String> {
            self.0.lock().unwrap().clone()
        }
    }

    impl Checkpoints for Recorder {
        async fn claim(&self, _: &ClaimRequest) -> Result<ClaimResponse, CheckpointError> {
            unreachable!("the event sender only sends events")
        }
        async fn latest(&self) -> Result<Option<ThreadState>, CheckpointError> {
            unreachable!("the event sender only sends events")
        }
        async fn commit(&self, _: &CommitRequest) -> Result<CommitResponse, CheckpointError> {
            unreachable!("the event sender only sends events")
        }
        async fn turn_ledger(&self, _: u64) -> Result<Vec<ToolCallRecord>, CheckpointError> {
            unreachable!("the event sender only sends events")
        }
        async fn approvals(
            &self,
            _: u64,
            _: u64,
            _: Duration,
        ) -> Result<Vec<ninetrix_proto::api::Approval>, CheckpointError> {
            unreachable!("the event sender only sends events")
        }
        async fn open_handoff(
            &self,
            _: &ninetrix_proto::api::HandoffRequest,
        ) -> Result<ninetrix_proto::api::Handoff, CheckpointError> {
            unreachable!("the event sender only sends events")
        }
        async fn handoffs(
            &self,
            _: u64,
            _: u64,
            _: Duration,
        ) -> Result<Vec<ninetrix_proto::api::Handoff>, CheckpointError> {
            unreachable!("the event sender only sends events")
        }
        async fn inbox(&self, _: u64, _: Duration) -> Result<Vec<InboxMessage>, CheckpointError> {
            unreachable!("the event sender only sends events")
        }
        async fn turn_point(
            &self,
            _: u64,
        ) -> Result<ninetrix_proto::api::TurnPoint, CheckpointError> {
            unreachable!("the event sender only sends events")
        }
        async fn missing_objects(
            &self,
            _: Vec<ninetrix_proto::snapshots::ObjectId>,
        ) -> Result<Vec<ninetrix_proto::snapshots::ObjectId>, CheckpointError> {
            unreachable!("the event sender only sends events")
        }
        async fn put_object(
            &self,
            _: &ninetrix_proto::snapshots::ObjectId,
            _: ninetrix_proto::snapshots::ObjectKind,
            _: Vec<u8>,
        ) -> Result<(), CheckpointError> {
            unreachable!("the event sender only sends events")
        }
        async fn get_object(
            &self,
            _: &ninetrix_proto::snapshots::ObjectId,
        ) -> Result<Vec<u8>, CheckpointError> {
            unreachable!("the event sender only sends events")
        }
        async fn events(&self, _: u64, events: Vec<NewEvent>) -> Result<(), CheckpointError> {
            let mut stored = self.0.lock().unwrap();
            stored.extend(events.iter().map(numbered));
            Ok(())
        }
    }

    fn event(n: u64) -> TraceEvent {
        TraceEvent::Checkpoint(ninetrix_proto::events::Checkpoint {
            version: n,
            history_len: n,
        })
    }

    fn numbered(e: &NewEvent) -> String {
        e.data["version"].to_string()
    }

    #[tokio::test]
    async fn events_lent_to_a_commit_keep_their_place_in_the_order() {
        let store = Recorder::default();
        let events = Events::start(store.clone(), 1);
        events.emit(event(1));
        events.emit(event(2));
        let taken = events.take().await;
        assert_eq!(taken.iter().map(numbered).collect::<Vec<_>>(), ["1", "2"]);
        // While lent, nothing later is sent (it would be stored before them).
        events.emit(event(3));
        events.flush(Duration::from_secs(5)).await;
        assert!(store.stored().is_empty(), "{:?}", store.stored());
        // The commit failed: they go back in front of what came since.
        events.settle(taken).await;
        events.flush(Duration::from_secs(5)).await;
        assert_eq!(store.stored(), ["1", "2", "3"]);
        // A commit that stored them: nothing comes back, later events are sent.
        events.emit(event(4));
        let taken = events.take().await;
        assert_eq!(taken.iter().map(numbered).collect::<Vec<_>>(), ["4"]);
        events.settle(Vec::new()).await;
        events.flush(Duration::from_secs(5)).await;
        assert_eq!(
            store.stored(),
            ["1", "2", "3"],
            "event 4 was stored by its commit"
        );
    }
}
