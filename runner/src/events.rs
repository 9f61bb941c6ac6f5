//! Trace events: logged as one short line each, and sent to the API in batches by a background
//! task. Emitting never waits on the API: a full queue drops the event (with a warning), and a
//! failed batch is logged and dropped. Events are diagnostics; checkpoints are the truth.

use std::time::Duration;

use ninetrix_proto::api::NewEvent;
use tokio::sync::{mpsc, oneshot};

use crate::client::ApiClient;

enum Msg {
    Event(NewEvent),
    Flush(oneshot::Sender<()>),
}

/// The event sink.
#[derive(Clone)]
pub struct Events {
    tx: Option<mpsc::Sender<Msg>>,
}

impl Events {
    /// Starts the sender (none without an API).
    pub fn start(api: Option<ApiClient>, epoch: u64) -> Events {
        let Some(api) = api else {
            return Events { tx: None };
        };
        let (tx, rx) = mpsc::channel(1024);
        tokio::spawn(send_loop(api, epoch, rx));
        Events { tx: Some(tx) }
    }

    /// Logs the event and queues it for the API. Each event carries the runner's own time
    /// (`data.at`), since the API stores them in batches.
    pub fn emit(&self, mut event: NewEvent) {
        if let serde_json::Value::Object(map) = &mut event.data {
            map.entry("at").or_insert_with(|| {
                chrono::Utc::now()
                    .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
                    .into()
            });
        }
        log(&event);
        if let Some(tx) = &self.tx
            && tx.try_send(Msg::Event(event)).is_err()
        {
            tracing::warn!("event queue full; an event was dropped");
        }
    }

    /// Waits (up to `bound`) until everything queued so far was sent.
    pub async fn flush(&self, bound: Duration) {
        let Some(tx) = &self.tx else { return };
        let (done, wait) = oneshot::channel();
        if tx.send(Msg::Flush(done)).await.is_ok() {
            let _ = tokio::time::timeout(bound, wait).await;
        }
    }
}

async fn send_loop(api: ApiClient, epoch: u64, mut rx: mpsc::Receiver<Msg>) {
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

async fn send(api: &ApiClient, epoch: u64, batch: &mut Vec<NewEvent>) {
    if batch.is_empty() {
        return;
    }
    if let Err(e) = api.events(epoch, std::mem::take(batch)).await {
        tracing::warn!(error = %e, "trace events were not stored");
    }
}

/// One short line per event: what happened, in words.
fn log(e: &NewEvent) {
    let d = &e.data;
    let s = |k: &str| {
        d[k].as_str()
            .map(str::to_string)
            .unwrap_or_else(|| d[k].to_string())
    };
    match e.kind.as_str() {
        "boot" => tracing::info!(
            "boot: epoch {} (boot {}), repaired: {}",
            s("epoch"),
            s("boot_count"),
            s("repaired")
        ),
        "ready" => tracing::info!("ready"),
        "turn_started" => tracing::info!("turn {} started (inbox seq {})", s("turn_seq"), s("seq")),
        "turn_resumed" => tracing::info!(
            "turn {} resumed after a restart (inbox seq {})",
            s("turn_seq"),
            s("seq")
        ),
        "llm_call" => tracing::info!(
            "model {} answered in {} ms: {} tokens in, {} out, stop {}",
            s("model"),
            s("latency_ms"),
            s("input_tokens"),
            s("output_tokens"),
            s("stop_reason")
        ),
        "tool_call" => tracing::info!(
            "tool {} {} in {} ms (ok: {})",
            s("name"),
            s("mode"),
            s("duration_ms"),
            s("ok")
        ),
        "checkpoint" => tracing::debug!("checkpoint version {}", s("version")),
        "repair" => tracing::info!(
            "repaired history: cut to {} messages, dropped {}",
            s("truncate_to"),
            d["dropped"].as_array().map_or(0, Vec::len)
        ),
        "turn_completed" => tracing::info!("turn {} completed (ok: {})", s("turn_seq"), s("ok")),
        "budget_exceeded" => tracing::warn!(
            "budget exceeded: spent ${} of ${}",
            s("spent_usd"),
            s("budget_usd")
        ),
        "max_turns_reached" => tracing::warn!("stopped after {} model rounds", s("max_turns")),
        "error" => tracing::error!("{}: {}", s("stage"), s("message")),
        other => tracing::info!("{other}: {d}"),
    }
}
