//! Trace events: logged as one short line each, and sent to the API in batches by a background
//! task. Emitting never waits on the API: a full queue drops the event (with a warning), and a
//! failed batch is logged and dropped. Events are diagnostics; checkpoints are the truth.

use std::time::Duration;

use ninetrix_proto::api::NewEvent;
use ninetrix_proto::events::TraceEvent;
use tokio::sync::{mpsc, oneshot};

use crate::checkpoints::Checkpoints;

enum Msg {
    Event(NewEvent),
    Flush(oneshot::Sender<()>),
}

/// The event sink.
#[derive(Clone)]
pub struct Events {
    tx: mpsc::Sender<Msg>,
}

impl Events {
    /// Starts the background sender to `store`, writing as `epoch`.
    pub fn start<C: Checkpoints>(store: C, epoch: u64) -> Events {
        let (tx, rx) = mpsc::channel(1024);
        tokio::spawn(send_loop(store, epoch, rx));
        Events { tx }
    }

    /// Logs the event and queues it for the store, stamped with the runner's own time (the API
    /// stores events in batches, later).
    pub fn emit(&self, event: TraceEvent) {
        log(&event);
        let wire = event.to_new_event(chrono::Utc::now());
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
}

async fn send_loop<C: Checkpoints>(api: C, epoch: u64, mut rx: mpsc::Receiver<Msg>) {
    let mut batch: Vec<NewEvent> = Vec::new();
    let mut waiting: Vec<oneshot::Sender<()>> = Vec::new();
    loop {
        let msg = if batch.is_empty() {
            rx.recv().await
        } else {
            match tokio::time::timeout(Duration::from_millis(100), rx.recv()).await {
                Ok(m) => m,
                Err(_) => {
                    // Quiet for 100 ms: send what we have.
                    send(&api, epoch, &mut batch).await;
                    continue;
                }
            }
        };
        match msg {
            None => {
                send(&api, epoch, &mut batch).await;
                return;
            }
            Some(Msg::Event(e)) => {
                batch.push(e);
                if batch.len() < 64 {
                    continue;
                }
            }
            Some(Msg::Flush(done)) => waiting.push(done),
        }
        send(&api, epoch, &mut batch).await;
        for w in waiting.drain(..) {
            let _ = w.send(());
        }
    }
}

async fn send<C: Checkpoints>(api: &C, epoch: u64, batch: &mut Vec<NewEvent>) {
    if batch.is_empty() {
        return;
    }
    if let Err(e) = api.events(epoch, std::mem::take(batch)).await {
        tracing::warn!(error = %e, "trace events were not stored");
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
        TraceEvent::Checkpoint(c) => tracing::debug!("checkpoint version {}", c.version),
        TraceEvent::TurnCompleted(t) => {
            tracing::info!("turn {} completed (ok: {})", t.turn_seq, t.ok)
        }
        TraceEvent::BudgetExceeded(b) => tracing::warn!(
            "budget exceeded: spent ${} of ${}",
            b.spent_usd,
            b.budget_usd
        ),
        TraceEvent::MaxTurnsReached(m) => {
            tracing::warn!("stopped after {} model rounds", m.max_turns)
        }
        TraceEvent::Error(e) => tracing::error!("{}: {}", e.stage.as_str(), e.message),
    }
}
