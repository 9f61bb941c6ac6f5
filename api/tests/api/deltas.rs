//! Streamed replies: a runner's deltas reach the watchers of its thread's event stream that ask
//! for them (`deltas=true`), between the stored events and without an `id:`, and nobody else;
//! nothing of them is stored.

use std::time::Duration;

use futures_util::StreamExt as _;
use ninetrix_client::{Client, Token, Watched};
use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{EventsRequest, NewEvent};
use ninetrix_proto::deltas::DeltaBatch;
use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::support::{ADMIN, Backend, TestApi};

fn batch(epoch: u64, offset: u64, text: &str) -> DeltaBatch {
    DeltaBatch {
        epoch,
        turn_seq: 1,
        round: 1,
        resumed: false,
        offset,
        text: text.into(),
    }
}

fn event(epoch: u64) -> EventsRequest {
    EventsRequest {
        epoch,
        events: vec![NewEvent {
            kind: "boot".into(),
            data: json!({}),
        }],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deltas_reach_the_watchers_that_ask_and_are_never_stored() {
    let api = TestApi::start(Backend::Sqlite).await.unwrap();
    let thread = ThreadId::new_v7();
    let token = api.runner_token(thread).await;
    let epoch = api.claim(thread, &token).await;
    let http = ninetrix_client::http_client();
    let admin = Client::new(http.clone(), &api.url, Some(Token::new(ADMIN)));
    let runner = Client::new(http, &api.url, Some(Token::new(token.clone())));
    let mut watching = Box::pin(admin.watch(thread, 0).await.unwrap());
    let mut plain = Box::pin(admin.event_stream(thread, 0).await.unwrap());
    let limit = Duration::from_secs(10);
    runner
        .publish_deltas(thread, &batch(epoch, 0, "Hel"), limit)
        .await
        .unwrap();
    runner
        .publish_deltas(thread, &batch(epoch, 3, "lo"), limit)
        .await
        .unwrap();
    runner
        .append_events(thread, &event(epoch), limit)
        .await
        .unwrap();
    let mut got = Vec::new();
    while got.len() < 3 {
        let item = tokio::time::timeout(limit, watching.next())
            .await
            .expect("the watcher gets the deltas and the event")
            .unwrap()
            .unwrap();
        got.push(item);
    }
    let texts: Vec<String> = got
        .iter()
        .filter_map(|w| match w {
            Watched::Delta(d) => Some(d.batch.text.clone()),
            Watched::Event(_) => None,
        })
        .collect();
    assert_eq!(texts, ["Hel", "lo"]);
    assert!(
        got.iter()
            .any(|w| matches!(w, Watched::Event(e) if e.kind == "boot"))
    );
    if let Watched::Delta(d) = &got[0] {
        assert_eq!((d.thread_id, d.batch.epoch), (thread, epoch));
    }
    // A stream that did not ask sees the event only (a delta would not parse as an event).
    let first = tokio::time::timeout(limit, plain.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(first.kind, "boot");
    // Nothing of the deltas is stored.
    let stored = admin.events_after(thread, 0).await.unwrap();
    assert_eq!(stored.len(), 1);
    // Too much text in one batch.
    let (status, body) = api
        .call(
            Method::POST,
            format!("/v1/runners/threads/{thread}/deltas"),
            Some(&token),
            Some(serde_json::to_value(batch(epoch, 5, &"x".repeat(70_000))).unwrap()),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    api.stop().await;
}
