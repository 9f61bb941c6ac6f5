//! Streamed replies from a real runner process: a watcher of the thread's event stream
//! (`deltas=true`) sees each model round's text as the model streams it, and it adds up to the
//! reply that is stored; none of it is stored. A runner killed before its final answer is stored
//! resumes the turn, and the resumed round streams again from its start, marked as a resumption
//! (a new epoch, `resumed`), so a watcher starts that round over instead of doubling it.

mod support;

use std::time::Duration;

use futures_util::StreamExt as _;
use ninetrix_client::Watched;
use ninetrix_proto::deltas::{Delta, RoundText};
use ninetrix_proto::events::{Decoded, TraceEvent};
use serde_json::json;
use support::{Gate, Hold, Runner, setup};

/// Reads the watch until the turn of inbox message 1 completes; the deltas seen and the reply.
async fn watch_turn(
    stream: &mut (
             impl futures_util::Stream<Item = Result<Watched, ninetrix_client::ClientError>> + Unpin
         ),
) -> (Vec<Delta>, String) {
    let mut deltas = Vec::new();
    loop {
        let item = tokio::time::timeout(Duration::from_secs(60), stream.next())
            .await
            .expect("the turn completes within 60 s")
            .expect("the stream stays open")
            .expect("the stream reads");
        match item {
            Watched::Delta(d) => deltas.push(d),
            Watched::Event(e) => {
                if let Decoded::Known(TraceEvent::TurnCompleted(done)) = e.decode()
                    && done.seq == 1
                {
                    return (deltas, done.reply);
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_sees_the_reply_stream_and_a_resumed_round_start_over() {
    let s = setup();
    let mut spec = support::appender_spec();
    spec["runtime"]["script"][1]["text"] = json!("All done, the line is in log.txt.");
    // The message first (it creates the thread), then the watch, then the runner.
    s.admin.send(s.thread, "append a line", "m1").await;
    let mut stream = Box::pin(s.admin.client.watch(s.thread, 0).await.unwrap());
    // The final answer never reaches the API: the runner is killed while it waits.
    let gate = Gate::start(&s.api.url).await;
    let held = gate.arm(Hold {
        method: "POST",
        path_contains: "/commit",
        body_contains: vec!["\"status\":\"idle\""],
        forward_first: false,
        lose_answer: false,
    });
    let mut first = Runner::start(&gate.url, s.thread, &spec, &s.workspace);
    tokio::time::timeout(Duration::from_secs(30), held)
        .await
        .expect("the runner sent its final answer");
    first.kill();
    let _second = Runner::start(&s.api.url, s.thread, &spec, &s.workspace);
    let (mut deltas, reply) = watch_turn(&mut stream).await;
    assert_eq!(reply, "All done, the line is in log.txt.");
    // Deltas are sent beside the commits, not before them (nothing waits on a watcher), so the
    // resumed round's last batch may arrive just after the turn's completion: read on for it.
    let first_epoch = deltas[0].batch.epoch;
    let resumed_seen = |deltas: &[Delta]| {
        deltas
            .iter()
            .any(|d| d.batch.round == 2 && d.batch.epoch > first_epoch)
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !resumed_seen(&deltas) {
        match tokio::time::timeout_at(deadline, stream.next()).await {
            Ok(Some(Ok(Watched::Delta(d)))) => deltas.push(d),
            Ok(Some(Ok(Watched::Event(_)))) => {}
            Ok(other) => panic!("the stream ended before the resumed round streamed: {other:?}"),
            Err(_) => break,
        }
    }

    // Round 1 ("Appending."), streamed once by epoch 1.
    let round1: String = deltas
        .iter()
        .filter(|d| d.batch.round == 1)
        .map(|d| d.batch.text.as_str())
        .collect();
    assert_eq!(round1, "Appending.");
    // Round 2 streamed again from its start by epoch 2, marked resumed. (Epoch 1 streamed it
    // too, but its last batch races the kill: deltas are best effort, so that is not asserted.)
    let resumed: Vec<&Delta> = deltas
        .iter()
        .filter(|d| d.batch.round == 2 && d.batch.epoch > first_epoch)
        .collect();
    assert!(
        !resumed.is_empty(),
        "the resumed round streamed: {deltas:?}"
    );
    assert!(resumed.iter().all(|d| d.batch.resumed));
    assert_eq!(resumed[0].batch.offset, 0, "from its start");
    // A watcher that applies them in order ends with the stored reply, not a doubled one.
    let mut text = RoundText::default();
    for d in &deltas {
        text.apply(&d.batch);
    }
    assert_eq!(text.text, reply);
    assert!(!text.gap);
    // Nothing of the stream is stored.
    let stored = s.admin.client.events_after(s.thread, 0).await.unwrap();
    assert!(stored.iter().all(|e| e.kind != "delta"));
}
