//! `up`'s readiness wait: every (re)started durable runner must emit `ready` after its start.
//! Ready means claimed its thread and serving it: a runner resuming a long interrupted turn says
//! so at once (`Ready (resuming)`), `up` does not wait for that turn to end.

use std::time::{Duration, Instant};

use bollard::Docker;
use ninetrix_proto::events::{Decoded, TraceEvent};

use crate::pool::apply::Started;
use crate::pool::condition;
use crate::pool::local_api::Api;
use crate::ui::progress::Progress;

/// Waits until each started runner has emitted `ready` after its start; reports the ones that
/// exited, were OOM-killed, or are still restarting at the deadline.
pub(crate) async fn wait_ready(
    docker: &Docker,
    api: &Api,
    started: &[Started],
    timeout: Duration,
    progress: &Progress,
) -> anyhow::Result<usize> {
    let deadline = Instant::now() + timeout;
    // Each runner with the seq read so far: every poll reads only the events after it.
    let mut pending: Vec<(&Started, u64)> = started.iter().map(|s| (s, s.baseline)).collect();
    for (s, _) in &pending {
        progress.working("Container", &s.name, "Waiting");
    }
    let mut failures = 0;
    while !pending.is_empty() {
        let mut still = Vec::new();
        for (s, mut cursor) in pending {
            let events = api.events(s.thread, cursor).await?;
            cursor = events.last().map_or(cursor, |e| e.seq);
            if let Some(resuming) = events.iter().find_map(|e| ready(&e.decode())) {
                let status = if resuming {
                    "Ready (resuming its interrupted turn)"
                } else {
                    "Ready"
                };
                progress.step("Container", &s.name, status);
                continue;
            }
            let info = docker.inspect_container(&s.id, None).await?;
            let late = Instant::now() > deadline;
            // The runner's health report only to say why it is late (it costs an archive request).
            let facts = if late {
                condition::inspect_with_health(docker, &info).await?
            } else {
                condition::inspect(docker, &info).await?
            };
            let live = facts.liveness;
            if !live.running && !live.restarting {
                let mut why = if facts.oom_killed {
                    "OOM-killed".to_string()
                } else {
                    format!("exited with code {}", live.exit_code.unwrap_or(-1))
                };
                if let Some(error) = &facts.last_error {
                    why = format!("{why}: {error}");
                }
                progress.fail("Container", &s.name, &format!("not ready: {why}"));
                failures += 1;
                continue;
            }
            if late {
                let why = match (live.restarting, &facts.health_output) {
                    (true, _) => format!("still restarting (restart {})", live.restarts),
                    (false, Some(health)) => {
                        format!("running but not ready ({})", health.trim())
                    }
                    (false, None) => "running but not ready".into(),
                };
                progress.fail(
                    "Container",
                    &s.name,
                    &format!("not ready after {}s: {why}", timeout.as_secs()),
                );
                failures += 1;
                continue;
            }
            still.push((s, cursor));
        }
        pending = still;
        if !pending.is_empty() {
            progress.tick();
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(failures)
}

/// Whether an event says the runner is ready: `Some(resuming)` if it does. Every kind is named:
/// a new event kind must decide here whether it means ready.
fn ready(event: &Decoded) -> Option<bool> {
    match event {
        Decoded::Known(e) => match e {
            TraceEvent::Ready(r) => Some(r.resuming),
            TraceEvent::Boot(_)
            | TraceEvent::Repair(_)
            | TraceEvent::Resume(_)
            | TraceEvent::TurnStarted(_)
            | TraceEvent::TurnResumed(_)
            | TraceEvent::LlmCall(_)
            | TraceEvent::LlmRetry(_)
            | TraceEvent::Compacted(_)
            | TraceEvent::CompactionSkipped(_)
            | TraceEvent::Steered(_)
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
            | TraceEvent::Outage(_)
            | TraceEvent::ToolCall(_)
            | TraceEvent::ToolReplayed(_)
            | TraceEvent::UnknownTool(_)
            | TraceEvent::McpTools(_)
            | TraceEvent::McpServerDown(_)
            | TraceEvent::McpServerUp(_)
            | TraceEvent::Checkpoint(_)
            | TraceEvent::TurnCompleted(_)
            | TraceEvent::BudgetExceeded(_)
            | TraceEvent::ModelFallback(_)
            | TraceEvent::ModelWaited(_)
            | TraceEvent::MaxTurnsReached(_)
            | TraceEvent::ApprovalRequested(_)
            | TraceEvent::ApprovalDecided(_)
            | TraceEvent::ApprovalExpired(_)
            | TraceEvent::ApprovalNotified(_)
            | TraceEvent::HandoffSent(_)
            | TraceEvent::HandoffSettled(_)
            | TraceEvent::HandoffRefused(_)
            | TraceEvent::HandoffReceived(_)
            | TraceEvent::HandoffReplied(_)
            | TraceEvent::Error(_) => None,
        },
        Decoded::Unknown { .. } => None,
    }
}
