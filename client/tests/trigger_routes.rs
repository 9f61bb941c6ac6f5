//! The trigger methods against a scripted HTTP server: each sends the method, path (names
//! percent-encoded), query and body its route expects, reads the typed answer, and hands an error
//! answer back with its code. (The routes' behaviour is the API's own tests' business.)

use std::sync::{Arc, Mutex};

use ninetrix_client::{Client, ErrorCode, Token, http_client};
use ninetrix_proto::api::{
    FireRequest, TriggerOutcome, TriggerRegistration, TriggerSet, TriggerSource,
};
use ninetrix_proto::triggers::{
    ScheduleTrigger, TriggerKind, TriggerSession, TriggerSpec, schedule::CatchUp, schedule::Overlap,
};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};

/// One request the server saw.
#[derive(Clone, Debug, PartialEq)]
struct Seen {
    method: String,
    target: String,
    authorization: Option<String>,
    body: Option<Value>,
}

/// A server that answers the scripted (status, body) pairs in order and records each request.
async fn scripted(answers: Vec<(u16, Value)>) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        for (status, answer) in answers {
            let (socket, _) = listener.accept().await.unwrap();
            let mut reader = BufReader::new(socket);
            let mut line = String::new();
            reader.read_line(&mut line).await.unwrap();
            let mut parts = line.split_whitespace();
            let method = parts.next().unwrap_or_default().to_string();
            let target = parts.next().unwrap_or_default().to_string();
            let (mut length, mut authorization) = (0usize, None);
            loop {
                let mut header = String::new();
                reader.read_line(&mut header).await.unwrap();
                let header = header.trim_end();
                if header.is_empty() {
                    break;
                }
                let (name, value) = header.split_once(':').unwrap();
                match name.to_ascii_lowercase().as_str() {
                    "content-length" => length = value.trim().parse().unwrap(),
                    "authorization" => authorization = Some(value.trim().to_string()),
                    _ => {}
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).await.unwrap();
            log.lock().unwrap().push(Seen {
                method,
                target,
                authorization,
                body: (!body.is_empty()).then(|| serde_json::from_slice(&body).unwrap()),
            });
            let text = answer.to_string();
            let reply = format!(
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
                text.len()
            );
            let mut socket = reader.into_inner();
            socket.write_all(reply.as_bytes()).await.unwrap();
            socket.shutdown().await.unwrap();
        }
    });
    (url, seen)
}

fn nightly() -> TriggerSpec {
    TriggerSpec {
        name: "nightly".into(),
        agent: "writer".into(),
        session: TriggerSession::default_for("nightly"),
        kind: TriggerKind::Schedule(ScheduleTrigger {
            cron: Some("0 9 * * 1-5".into()),
            every_secs: None,
            timezone: "Europe/Lisbon".into(),
            message: "Write the daily report".into(),
            overlap: Overlap::Skip,
            catch_up: CatchUp::Last,
            catch_up_window_secs: 3_600,
        }),
    }
}

fn event(seq: u64, source: &str) -> Value {
    json!({
        "seq": seq,
        "at": "2026-03-02T09:00:01Z",
        "source": source,
        "outcome": "fired",
        "session": "trigger:nightly",
        "thread_id": "01936f5e-0000-7000-8000-000000000001",
        "inbox_seq": 4
    })
}

#[tokio::test]
async fn each_trigger_method_sends_its_route_and_reads_its_answer() {
    let spec = nightly();
    let trigger = json!({
        "pool": "shop",
        "spec": serde_json::to_value(&spec).unwrap(),
        "next_fire_at": "2026-03-03T09:00:00Z",
        "buffered_at": null,
        "last": event(3, "schedule"),
        "created_at": "2026-03-01T00:00:00Z",
        "updated_at": "2026-03-01T00:00:00Z"
    });
    let (url, seen) = scripted(vec![
        (
            200,
            json!({"created": ["nightly"], "updated": [], "unchanged": [], "removed": ["old"]}),
        ),
        (200, json!([trigger])),
        (200, json!([])),
        (200, json!([event(1, "schedule"), event(2, "manual")])),
        (201, event(3, "manual")),
    ])
    .await;
    let client = Client::new(http_client(), &url, Some(Token::new("admin-token")));

    let set = TriggerSet {
        triggers: vec![TriggerRegistration {
            spec: spec.clone(),
            secret: None,
        }],
    };
    let applied = client.put_triggers("shop", &set).await.unwrap();
    assert_eq!(
        (applied.created, applied.removed),
        (vec!["nightly".to_string()], vec!["old".to_string()])
    );
    let listed = client
        .triggers(Some("shop"), Some("nightly"))
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].spec, spec);
    assert_eq!(
        listed[0].last.as_ref().map(|e| e.outcome),
        Some(TriggerOutcome::Fired)
    );
    assert!(client.triggers(None, None).await.unwrap().is_empty());
    let history = client
        .trigger_history("shop", "night ly/x", Some(10), Some(5))
        .await
        .unwrap();
    assert_eq!(
        history
            .iter()
            .map(|e| (e.seq, e.source))
            .collect::<Vec<_>>(),
        [(1, TriggerSource::Schedule), (2, TriggerSource::Manual)]
    );
    let fired = client
        .fire_trigger(
            "shop",
            "nightly",
            &FireRequest {
                body: Some(json!({"issue": {"title": "x"}})),
            },
        )
        .await
        .unwrap();
    assert_eq!((fired.seq, fired.inbox_seq), (3, Some(4)));

    let seen = seen.lock().unwrap().clone();
    let routes: Vec<(&str, &str)> = seen
        .iter()
        .map(|s| (s.method.as_str(), s.target.as_str()))
        .collect();
    assert_eq!(
        routes,
        [
            ("PUT", "/v1/pools/shop/triggers"),
            ("GET", "/v1/triggers?pool=shop&name=nightly"),
            ("GET", "/v1/triggers"),
            (
                "GET",
                "/v1/pools/shop/triggers/night%20ly%2Fx/history?limit=5&before=10"
            ),
            ("POST", "/v1/pools/shop/triggers/nightly/fire"),
        ]
    );
    assert!(
        seen.iter()
            .all(|s| s.authorization.as_deref() == Some("Bearer admin-token")),
        "every trigger route is called with the admin token"
    );
    assert_eq!(seen[0].body, Some(serde_json::to_value(&set).unwrap()));
    assert_eq!(
        seen[4].body,
        Some(json!({"body": {"issue": {"title": "x"}}}))
    );
}

#[tokio::test]
async fn refusals_of_the_trigger_routes_keep_their_code_and_message() {
    let (url, _) = scripted(vec![
        (
            404,
            json!({"code": "not_found", "message": "pool shop has no trigger nightly"}),
        ),
        (
            422,
            json!({"code": "template_failed", "message": "`issue.title` is not in the body"}),
        ),
    ])
    .await;
    let client = Client::new(http_client(), &url, Some(Token::new("admin-token")));
    let err = client
        .trigger_history("shop", "nightly", None, None)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(&ErrorCode::NotFound));
    let err = client
        .fire_trigger("shop", "gh", &FireRequest::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(&ErrorCode::TemplateFailed));
    assert!(
        err.to_string().contains("`issue.title` is not in the body"),
        "{err}"
    );
}
