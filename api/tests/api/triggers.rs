//! Triggers: registration reconciled like containers; schedules fired by the store's tick at
//! chosen times — a missed fire caught up once after an outage, overlap skip while the previous
//! fire's turn runs, a DST jump in a real zone, two API replicas racing every tick with each
//! scheduled time firing once — and webhooks over HTTP: good, bad and stale signatures,
//! repeated delivery ids, one session per chat id, the size and rate limits.

use base64::Engine as _;
use chrono::{DateTime, TimeZone, Utc};
use hmac::{Hmac, KeyInit, Mac};
use ninetrix_api::store::{Store, StoreOptions, ThreadFilter};
use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{
    InboxMessage, TriggerOutcome, TriggerReason, TriggerRegistration, TriggerSet,
};
use ninetrix_proto::triggers::schedule::{CatchUp, Overlap};
use ninetrix_proto::triggers::{
    ScheduleTrigger, SignatureScheme, TriggerKind, TriggerSession, TriggerSpec, WebhookTrigger,
};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{Backend, TestApi, TestDb, both_backends};

const SECRET: &str = "It's a Secret to Everybody";

fn at(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(y, mo, d, h, mi, s).unwrap()
}

fn no_crash(_: &str) {}

fn schedule(
    name: &str,
    cron: Option<&str>,
    every: Option<u64>,
    tz: &str,
    overlap: Overlap,
) -> TriggerRegistration {
    TriggerRegistration {
        spec: TriggerSpec {
            name: name.into(),
            agent: "a".into(),
            session: TriggerSession::default_for(name),
            kind: TriggerKind::Schedule(ScheduleTrigger {
                cron: cron.map(str::to_string),
                every_secs: every,
                timezone: tz.into(),
                message: format!("{name} fired"),
                overlap,
                catch_up: CatchUp::Last,
                catch_up_window_secs: 3600,
            }),
        },
        secret: None,
    }
}

fn webhook(
    name: &str,
    session: TriggerSession,
    signature: SignatureScheme,
    rate: u32,
) -> TriggerRegistration {
    TriggerRegistration {
        spec: TriggerSpec {
            name: name.into(),
            agent: "a".into(),
            session,
            kind: TriggerKind::Webhook(WebhookTrigger {
                path: name.into(),
                message: "{{ message.text }}".into(),
                secret: "HOOK_SECRET".into(),
                signature,
                tolerance_secs: 300,
                rate_limit_per_minute: rate,
                max_body_bytes: 4096,
            }),
        },
        secret: Some(SECRET.into()),
    }
}

async fn open(db: &TestDb) -> Store {
    Store::open(&db.url, &StoreOptions::default())
        .await
        .unwrap()
}

/// The messages of session `key` of agent `a` in pool `p`.
async fn session_inbox(store: &Store, key: &str) -> Vec<InboxMessage> {
    let threads = store
        .list_threads(ThreadFilter {
            pool: Some("p".into()),
            agent: Some("a".into()),
            sessions: true,
            session: Some(key.into()),
            limit: 10,
            ..ThreadFilter::default()
        })
        .await
        .unwrap();
    match threads.first() {
        Some(t) => store.inbox_after(t.thread_id, 0, 1000).await.unwrap(),
        None => Vec::new(),
    }
}

fn keys(messages: &[InboxMessage]) -> Vec<String> {
    messages
        .iter()
        .map(|m| m.dedupe_key.clone().unwrap_or_default())
        .collect()
}

async fn schedule_missed_while_down_is_caught_up_once(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = open(&db).await;
    let t0 = at(2026, 1, 1, 10, 1, 0);
    let set = TriggerSet {
        triggers: vec![schedule("report", None, Some(600), "UTC", Overlap::Skip)],
    };
    let applied = store.put_triggers("p".into(), set, t0).await.unwrap();
    assert_eq!(applied.created, ["report"]);
    // On time at 10:10; then the API is down from 10:11 to 10:55 (10:20–10:50 missed).
    assert_eq!(
        store
            .fire_due(at(2026, 1, 1, 10, 10, 2), no_crash)
            .await
            .unwrap()
            .len(),
        1
    );
    // Its turn runs and ends before the outage.
    runner_at(&store, "trigger:report", 1, "idle").await;
    assert!(
        store
            .fire_due(at(2026, 1, 1, 10, 11, 0), no_crash)
            .await
            .unwrap()
            .is_empty()
    );
    let fired = store
        .fire_due(at(2026, 1, 1, 10, 55, 0), no_crash)
        .await
        .unwrap();
    assert_eq!(fired.len(), 1, "one catch-up fire");
    assert_eq!(fired[0].scheduled_at, Some(at(2026, 1, 1, 10, 50, 0)));
    // The same instant again (a second replica, a retried tick) fires nothing more.
    assert!(
        store
            .fire_due(at(2026, 1, 1, 10, 55, 0), no_crash)
            .await
            .unwrap()
            .is_empty()
    );
    let inbox = session_inbox(&store, "trigger:report").await;
    assert_eq!(
        keys(&inbox),
        [
            "schedule:report:2026-01-01T10:10:00Z",
            "schedule:report:2026-01-01T10:50:00Z"
        ]
    );
    assert_eq!(inbox[0].content, "report fired");
    let history = store
        .trigger_history("p".into(), "report".into(), None, 100)
        .await
        .unwrap()
        .unwrap();
    let outcomes: Vec<_> = history.iter().map(|e| (e.outcome, e.reason)).collect();
    assert_eq!(
        outcomes,
        [
            (TriggerOutcome::Fired, None),
            (TriggerOutcome::Skipped, Some(TriggerReason::OnlyLast)),
            (TriggerOutcome::Skipped, Some(TriggerReason::OnlyLast)),
            (TriggerOutcome::Skipped, Some(TriggerReason::OnlyLast)),
            (TriggerOutcome::CaughtUp, None),
        ]
    );
    let listed = store.list_triggers(Some("p".into()), None).await.unwrap();
    assert_eq!(listed[0].next_fire_at, Some(at(2026, 1, 1, 11, 0, 0)));
    assert_eq!(
        listed[0].last.as_ref().map(|e| e.outcome),
        Some(TriggerOutcome::CaughtUp)
    );
    store.close().await;
}

/// Claims the session thread and commits its state: the runner took message `cursor` and is
/// `status`.
async fn runner_at(store: &Store, key: &str, cursor: u64, status: &str) {
    let thread = store
        .list_threads(ThreadFilter {
            session: Some(key.into()),
            sessions: true,
            limit: 1,
            ..ThreadFilter::default()
        })
        .await
        .unwrap()[0]
        .clone();
    let (claim, _) = store
        .claim(
            thread.thread_id,
            Default::default(),
            ninetrix_api::labels::Stating::Claim,
        )
        .await
        .unwrap();
    let request: ninetrix_proto::api::CheckpointRequest = serde_json::from_value(json!({
        "epoch": claim.epoch, "parent_version": thread.version, "append": [],
        "state": {"turn_seq": cursor, "turn_start_history_len": 0, "status": status, "inbox_cursor": cursor}
    }))
    .unwrap();
    store
        .append_checkpoint(thread.thread_id, request)
        .await
        .unwrap();
}

async fn overlap_skip_while_the_previous_turn_runs(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = open(&db).await;
    let set = TriggerSet {
        triggers: vec![schedule("poll", None, Some(60), "UTC", Overlap::Skip)],
    };
    store
        .put_triggers("p".into(), set, at(2026, 1, 1, 9, 59, 30))
        .await
        .unwrap();
    assert_eq!(
        store
            .fire_due(at(2026, 1, 1, 10, 0, 0), no_crash)
            .await
            .unwrap()
            .len(),
        1
    );
    // Not taken yet at 10:01: the turn counts as running.
    assert!(
        store
            .fire_due(at(2026, 1, 1, 10, 1, 0), no_crash)
            .await
            .unwrap()
            .is_empty()
    );
    // Taken, turn in progress at 10:02: skipped again.
    runner_at(&store, "trigger:poll", 1, "in_turn").await;
    assert!(
        store
            .fire_due(at(2026, 1, 1, 10, 2, 0), no_crash)
            .await
            .unwrap()
            .is_empty()
    );
    // The turn ended: 10:03 fires.
    runner_at(&store, "trigger:poll", 1, "idle").await;
    assert_eq!(
        store
            .fire_due(at(2026, 1, 1, 10, 3, 0), no_crash)
            .await
            .unwrap()
            .len(),
        1
    );
    let history = store
        .trigger_history("p".into(), "poll".into(), None, 100)
        .await
        .unwrap()
        .unwrap();
    let outcomes: Vec<_> = history
        .iter()
        .map(|e| (e.outcome, e.reason, e.scheduled_at))
        .collect();
    assert_eq!(
        outcomes,
        [
            (TriggerOutcome::Fired, None, Some(at(2026, 1, 1, 10, 0, 0))),
            (
                TriggerOutcome::Skipped,
                Some(TriggerReason::Overlap),
                Some(at(2026, 1, 1, 10, 1, 0))
            ),
            (
                TriggerOutcome::Skipped,
                Some(TriggerReason::Overlap),
                Some(at(2026, 1, 1, 10, 2, 0))
            ),
            (TriggerOutcome::Fired, None, Some(at(2026, 1, 1, 10, 3, 0))),
        ]
    );
    assert_eq!(session_inbox(&store, "trigger:poll").await.len(), 2);
    store.close().await;
}

async fn a_dst_jump_in_a_real_zone_fires_once(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = open(&db).await;
    // 02:30 every day in New York; 2026-03-08 springs from 02:00 to 03:00.
    let set = TriggerSet {
        triggers: vec![schedule(
            "nightly",
            Some("30 2 * * *"),
            None,
            "America/New_York",
            Overlap::Allow,
        )],
    };
    store
        .put_triggers("p".into(), set, at(2026, 3, 7, 12, 0, 0))
        .await
        .unwrap();
    let mut now = at(2026, 3, 7, 12, 0, 0);
    while now < at(2026, 3, 9, 12, 0, 0) {
        now += chrono::TimeDelta::minutes(15);
        store.fire_due(now, no_crash).await.unwrap();
    }
    assert_eq!(
        keys(&session_inbox(&store, "trigger:nightly").await),
        // 03:00 EDT on the day of the jump, then 02:30 EDT.
        [
            "schedule:nightly:2026-03-08T07:00:00Z",
            "schedule:nightly:2026-03-09T06:30:00Z"
        ]
    );
    store.close().await;
}

async fn registration_is_reconciled_and_secrets_stay_in(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let set = json!({"triggers": [
        serde_json::to_value(schedule("daily", Some("0 9 * * 1-5"), None, "Europe/Lisbon", Overlap::Skip)).unwrap(),
        serde_json::to_value(webhook("gh", TriggerSession::Key("issue-{{ issue.number }}".into()), SignatureScheme::Github, 60)).unwrap(),
    ]});
    let (status, body) = api
        .admin(Method::PUT, "/v1/pools/p/triggers", Some(set.clone()))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["created"], json!(["daily", "gh"]));
    let (_, again) = api
        .admin(Method::PUT, "/v1/pools/p/triggers", Some(set.clone()))
        .await;
    assert_eq!(again["unchanged"], json!(["daily", "gh"]));
    // A new secret is a change; a missing trigger is removed.
    let mut changed = set.clone();
    changed["triggers"][1]["secret"] = "another secret".into();
    changed["triggers"].as_array_mut().unwrap().remove(0);
    let (_, body) = api
        .admin(Method::PUT, "/v1/pools/p/triggers", Some(changed))
        .await;
    assert_eq!(
        (body["updated"].clone(), body["removed"].clone()),
        (json!(["gh"]), json!(["daily"]))
    );
    let (status, listed) = api.admin(Method::GET, "/v1/triggers?pool=p", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert_eq!(listed[0]["hook_path"], "/v1/hooks/p/gh");
    let text = listed.to_string();
    assert!(
        !text.contains("another secret") && !text.contains(SECRET),
        "{text}"
    );
    assert!(text.contains("HOOK_SECRET"), "the secret's name is shown");
    // A bad registration changes nothing and names the trigger.
    let bad = json!({"triggers": [serde_json::to_value(schedule("bad", Some("61 * * * *"), None, "UTC", Overlap::Skip)).unwrap()]});
    let (status, body) = api
        .admin(Method::PUT, "/v1/pools/p/triggers", Some(bad))
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_trigger"))
    );
    assert!(
        body["message"].as_str().unwrap().contains("trigger `bad`"),
        "{body}"
    );
    let (_, listed) = api.admin(Method::GET, "/v1/triggers?pool=p", None).await;
    assert_eq!(listed.as_array().unwrap().len(), 1);
    // Unknown trigger: 404 for its history and for fire.
    let (status, _) = api
        .admin(Method::GET, "/v1/pools/p/triggers/nope/history", None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = api
        .admin(
            Method::POST,
            "/v1/pools/p/triggers/nope/fire",
            Some(json!({})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    api.stop().await;
}

fn github_signature(body: &[u8]) -> String {
    let mut mac = <Hmac<sha2::Sha256> as KeyInit>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(body);
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256={hex}")
}

fn standard_signature(id: &str, timestamp: i64, body: &[u8]) -> String {
    let mut mac = <Hmac<sha2::Sha256> as KeyInit>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body);
    format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
    )
}

/// Posts a delivery with these headers; returns the status, `Retry-After` and the JSON body.
async fn deliver(
    api: &TestApi,
    path: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> (StatusCode, Option<String>, Value) {
    let mut req = api
        .client
        .post(format!("{}/v1/hooks/p/{path}", api.url))
        .header("content-type", "application/json")
        .body(body.to_vec());
    for (k, v) in headers {
        req = req.header(*k, v);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status();
    let retry = resp
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    let value = resp.json::<Value>().await.unwrap_or(Value::Null);
    (status, retry, value)
}

async fn register(api: &TestApi, triggers: Vec<TriggerRegistration>) {
    let (status, body) = api
        .admin(
            Method::PUT,
            "/v1/pools/p/triggers",
            Some(serde_json::to_value(TriggerSet { triggers }).unwrap()),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

async fn history(api: &TestApi, name: &str) -> Vec<(String, Option<String>)> {
    let (status, body) = api
        .admin(
            Method::GET,
            format!("/v1/pools/p/triggers/{name}/history"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body.as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["outcome"].as_str().unwrap().to_string(),
                e["reason"].as_str().map(str::to_string),
            )
        })
        .collect()
}

async fn github_webhooks_good_bad_and_repeated(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let session = TriggerSession::Key("chat-{{ message.chat.id }}".into());
    register(
        &api,
        vec![webhook("gh", session, SignatureScheme::Github, 1000)],
    )
    .await;
    let body = br#"{"message": {"text": "hello", "chat": {"id": 7}}}"#;
    let good = |id: &str| {
        vec![
            ("x-hub-signature-256", github_signature(body)),
            ("x-github-delivery", id.to_string()),
        ]
    };
    let (status, _, accepted) = deliver(&api, "gh", &good("d-1"), body).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    assert_eq!(
        (
            accepted["outcome"].as_str(),
            accepted["session"].as_str(),
            accepted["seq"].as_u64()
        ),
        (Some("fired"), Some("chat-7"), Some(1))
    );
    // GitHub redelivers with the same id: stored once.
    let (status, _, again) = deliver(&api, "gh", &good("d-1"), body).await;
    assert_eq!(
        (status, again["outcome"].as_str(), again["seq"].as_u64()),
        (StatusCode::OK, Some("deduplicated"), Some(1))
    );
    // A signature over another body, and none at all: 401, recorded.
    let forged = vec![
        ("x-hub-signature-256", github_signature(b"{}")),
        ("x-github-delivery", "d-2".to_string()),
    ];
    let (status, _, err) = deliver(&api, "gh", &forged, body).await;
    assert_eq!(
        (status, err["code"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("bad_signature"))
    );
    assert!(!err["message"].as_str().unwrap().contains(SECRET));
    let (status, _, _) = deliver(&api, "gh", &[], body).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    // A refusal is recorded under the delivery id the request claims, for its sender to find.
    let (_, recorded) = api
        .admin(Method::GET, "/v1/pools/p/triggers/gh/history", None)
        .await;
    assert_eq!(recorded[2]["delivery_id"], "d-2", "{recorded}");
    // A body without the field the template reads: 422, recorded with the path.
    let other = br#"{"message": {"chat": {"id": 7}}}"#;
    let headers = vec![
        ("x-hub-signature-256", github_signature(other)),
        ("x-github-delivery", "d-3".to_string()),
    ];
    let (status, _, err) = deliver(&api, "gh", &headers, other).await;
    assert_eq!(
        (status, err["code"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("template_failed"))
    );
    assert!(
        err["message"].as_str().unwrap().contains("message.text"),
        "{err}"
    );
    // Too large: 413 before anything else.
    let big = vec![b' '; 5000];
    let (status, _, _) = deliver(&api, "gh", &good("d-4"), &big).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    // No such webhook.
    let (status, _, _) = deliver(&api, "nope", &good("d-5"), body).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // Refusals of deliveries that did not prove they hold the secret are sampled: the first of
    // the minute is recorded, the unsigned and the oversized one only counted. A signed
    // delivery's refusal (the template) is recorded each time.
    assert_eq!(
        history(&api, "gh").await,
        [
            ("fired".to_string(), None),
            ("deduplicated".to_string(), None),
            ("rejected".to_string(), Some("bad_signature".to_string())),
            ("rejected".to_string(), Some("template".to_string())),
        ]
    );
    api.stop().await;
}

async fn standard_webhooks_one_session_per_chat_and_stale_timestamps(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let session = TriggerSession::Key("chat-{{ message.chat.id }}".into());
    register(
        &api,
        vec![webhook(
            "tg",
            session,
            SignatureScheme::StandardWebhooks,
            1000,
        )],
    )
    .await;
    let now = Utc::now().timestamp();
    for (i, chat) in [1, 2, 1].into_iter().enumerate() {
        let body = format!(r#"{{"message": {{"text": "m{i}", "chat": {{"id": {chat}}}}}}}"#);
        let id = format!("msg_{i}");
        let headers = vec![
            ("webhook-id", id.clone()),
            ("webhook-timestamp", now.to_string()),
            (
                "webhook-signature",
                standard_signature(&id, now, body.as_bytes()),
            ),
        ];
        let (status, _, accepted) = deliver(&api, "tg", &headers, body.as_bytes()).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
        assert_eq!(accepted["session"], format!("chat-{chat}"));
    }
    let (_, sessions) = api
        .admin(Method::GET, "/v1/sessions?pool=p&agent=a", None)
        .await;
    let mut keys: Vec<(String, u64)> = sessions
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["session"].as_str().unwrap().to_string(),
                s["inbox_seq"].as_u64().unwrap(),
            )
        })
        .collect();
    keys.sort();
    assert_eq!(keys, [("chat-1".to_string(), 2), ("chat-2".to_string(), 1)]);
    // Signed ten minutes ago (tolerance 5 min): stale, even with a good signature.
    let old = Utc::now().timestamp() - 600;
    let body = br#"{"message": {"text": "late", "chat": {"id": 1}}}"#;
    let headers = vec![
        ("webhook-id", "msg_old".to_string()),
        ("webhook-timestamp", old.to_string()),
        (
            "webhook-signature",
            standard_signature("msg_old", old, body),
        ),
    ];
    let (status, _, err) = deliver(&api, "tg", &headers, body).await;
    assert_eq!(
        (status, err["code"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("bad_signature"))
    );
    // Ten minutes and the test's own run time (a loaded machine took over a second between
    // signing and the check: "601 seconds").
    let message = err["message"].as_str().unwrap();
    let seconds: i64 = message
        .split(" seconds in the past")
        .next()
        .and_then(|head| head.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no age in {err}"));
    assert!((600..=660).contains(&seconds), "{err}");
    assert_eq!(
        history(&api, "tg").await.last().unwrap().1.as_deref(),
        Some("stale_timestamp")
    );
    api.stop().await;
}

async fn over_the_rate_limit_is_429_with_retry_after(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    register(
        &api,
        vec![webhook(
            "slow",
            TriggerSession::New,
            SignatureScheme::Github,
            2,
        )],
    )
    .await;
    let mut statuses = Vec::new();
    for i in 0..4 {
        // Each a body of its own: the same body again is a duplicate (GitHub replays).
        let body = format!(r#"{{"message": {{"text": "x{i}"}}}}"#);
        let body = body.as_bytes();
        let headers = vec![
            ("x-hub-signature-256", github_signature(body)),
            ("x-github-delivery", format!("r-{i}")),
        ];
        let (status, retry, _) = deliver(&api, "slow", &headers, body).await;
        statuses.push((status, retry.is_some()));
    }
    assert_eq!(
        statuses,
        [
            (StatusCode::ACCEPTED, false),
            (StatusCode::ACCEPTED, false),
            (StatusCode::TOO_MANY_REQUESTS, true),
            (StatusCode::TOO_MANY_REQUESTS, true),
        ]
    );
    // `session: new`: each delivery in a session of its own, named by its delivery id.
    let (_, sessions) = api
        .admin(Method::GET, "/v1/sessions?pool=p&agent=a", None)
        .await;
    let mut keys: Vec<&str> = sessions
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session"].as_str().unwrap())
        .collect();
    keys.sort();
    assert_eq!(keys, ["trigger:slow:r-0", "trigger:slow:r-1"]);
    // One rejection recorded for the burst.
    let h = history(&api, "slow").await;
    assert_eq!(
        h.iter().filter(|(o, _)| o == "rejected").count(),
        1,
        "{h:?}"
    );
    api.stop().await;
}

async fn fire_now_puts_the_message_in_the_session(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    register(
        &api,
        vec![
            schedule("daily", Some("0 0 1 1 *"), None, "UTC", Overlap::Skip),
            webhook(
                "gh",
                TriggerSession::Key("chat-{{ message.chat.id }}".into()),
                SignatureScheme::Github,
                60,
            ),
        ],
    )
    .await;
    let (status, event) = api
        .admin(
            Method::POST,
            "/v1/pools/p/triggers/daily/fire",
            Some(json!({})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{event}");
    assert_eq!(
        (
            event["source"].as_str(),
            event["outcome"].as_str(),
            event["session"].as_str(),
            event["inbox_seq"].as_u64()
        ),
        (
            Some("manual"),
            Some("fired"),
            Some("trigger:daily"),
            Some(1)
        )
    );
    let thread: ThreadId = event["thread_id"].as_str().unwrap().parse().unwrap();
    let (_, inbox) = api
        .admin(Method::GET, format!("/v1/threads/{thread}"), None)
        .await;
    assert_eq!(inbox["inbox_seq"], 1);
    let (status, event) = api
        .admin(
            Method::POST,
            "/v1/pools/p/triggers/gh/fire",
            Some(json!({"body": {"message": {"text": "hi", "chat": {"id": 3}}}})),
        )
        .await;
    assert_eq!(
        (status, event["session"].as_str()),
        (StatusCode::CREATED, Some("chat-3"))
    );
    let (status, err) = api
        .admin(
            Method::POST,
            "/v1/pools/p/triggers/gh/fire",
            Some(json!({})),
        )
        .await;
    assert_eq!(
        (status, err["code"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("template_failed"))
    );
    api.stop().await;
}

async fn one_tick_fires_every_due_schedule_past_a_page(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = open(&db).await;
    let triggers = (0..150)
        .map(|i| schedule(&format!("s{i}"), None, Some(60), "UTC", Overlap::Skip))
        .collect();
    store
        .put_triggers(
            "p".into(),
            TriggerSet { triggers },
            at(2026, 1, 1, 9, 59, 30),
        )
        .await
        .unwrap();
    let fired = store
        .fire_due(at(2026, 1, 1, 10, 0, 0), no_crash)
        .await
        .unwrap();
    assert_eq!(fired.len(), 150, "one tick, three pages");
    assert!(
        store
            .fire_due(at(2026, 1, 1, 10, 0, 0), no_crash)
            .await
            .unwrap()
            .is_empty()
    );
    store.close().await;
}

fn signed(body: &[u8], id: Option<&str>) -> Vec<(&'static str, String)> {
    let mut headers = vec![("x-hub-signature-256", github_signature(body))];
    if let Some(id) = id {
        headers.push(("x-github-delivery", id.to_string()));
    }
    headers
}

async fn history_json(api: &TestApi, name: &str) -> Vec<Value> {
    let (status, body) = api
        .admin(
            Method::GET,
            format!("/v1/pools/p/triggers/{name}/history"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body.as_array().unwrap().clone()
}

/// Issue 33 item 2: unsigned and wrongly signed deliveries spend no rate-limit token and cost
/// no history row each — the first of the minute is recorded, standing for itself.
async fn junk_spends_no_token_and_no_row_each(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    register(
        &api,
        vec![webhook(
            "gh",
            TriggerSession::New,
            SignatureScheme::Github,
            2,
        )],
    )
    .await;
    let body = br#"{"message": {"text": "hi"}}"#;
    let wrong = vec![("x-hub-signature-256", format!("sha256={}", "0".repeat(64)))];
    for i in 0..20 {
        let headers = if i % 2 == 0 { vec![] } else { wrong.clone() };
        let (status, retry, err) = deliver(&api, "gh", &headers, body).await;
        assert_eq!(
            (status, err["code"].as_str(), retry),
            (StatusCode::UNAUTHORIZED, Some("bad_signature"), None),
            "junk {i}"
        );
    }
    let (status, _, accepted) = deliver(&api, "gh", &signed(body, Some("d-1")), body).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    let h = history_json(&api, "gh").await;
    let rejected: Vec<&Value> = h.iter().filter(|e| e["outcome"] == "rejected").collect();
    assert_eq!(rejected.len(), 1, "{h:?}");
    assert_eq!(rejected[0]["refusals"], 1);
    assert_eq!(rejected[0]["reason"], "missing_signature");
    api.stop().await;
}

/// Issue 33 item 5: replays, delivery ids, dedupe per trigger, Content-Type, big numbers.
async fn deliveries_are_deduplicated_per_trigger_and_by_github_body(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let mut numbered = webhook(
        "num",
        TriggerSession::Key("n-{{ message.n }}".into()),
        SignatureScheme::Github,
        1000,
    );
    if let TriggerKind::Webhook(w) = &mut numbered.spec.kind {
        w.message = "{{ message.n }}".into();
    }
    register(
        &api,
        vec![
            webhook(
                "chat",
                TriggerSession::Key("chat-{{ message.chat }}".into()),
                SignatureScheme::Github,
                1000,
            ),
            webhook("new", TriggerSession::New, SignatureScheme::Github, 1000),
            numbered,
        ],
    )
    .await;
    // The same body under a new delivery id, and without one: a duplicate (GitHub's id is not
    // signed, so a replay can carry any).
    let body = br#"{"message": {"text": "a", "chat": 1}}"#;
    let (status, _, first) = deliver(&api, "chat", &signed(body, Some("g-1")), body).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{first}");
    for id in [Some("g-2"), None] {
        let (status, _, again) = deliver(&api, "chat", &signed(body, id), body).await;
        assert_eq!(
            (status, again["outcome"].as_str(), again["seq"].as_u64()),
            (StatusCode::OK, Some("deduplicated"), Some(1)),
            "{id:?}"
        );
    }
    let h = history_json(&api, "chat").await;
    assert_eq!(h.last().unwrap()["reason"], "same_body", "{h:?}");
    // One delivery id is one delivery for the trigger, whatever session its body names.
    let other = br#"{"message": {"text": "b", "chat": 2}}"#;
    let (status, _, again) = deliver(&api, "chat", &signed(other, Some("g-1")), other).await;
    assert_eq!(
        (status, again["session"].as_str()),
        (StatusCode::OK, Some("chat-1"))
    );
    // `session: new` names the session by the delivery id: one with a tab or of 150 characters
    // is refused, and no session is opened.
    for id in ["a\tb".to_string(), "x".repeat(150)] {
        let body = format!(r#"{{"message": {{"text": "{}"}}}}"#, id.len());
        let (status, _, err) = deliver(
            &api,
            "new",
            &signed(body.as_bytes(), Some(&id)),
            body.as_bytes(),
        )
        .await;
        assert_eq!(
            (status, err["code"].as_str()),
            (StatusCode::UNAUTHORIZED, Some("bad_signature")),
            "{err}"
        );
        assert!(
            err["message"]
                .as_str()
                .unwrap()
                .contains("X-GitHub-Delivery"),
            "{err}"
        );
    }
    let (_, sessions) = api
        .admin(Method::GET, "/v1/sessions?pool=p&agent=a", None)
        .await;
    assert!(
        sessions
            .as_array()
            .unwrap()
            .iter()
            .all(|s| !s["session"].as_str().unwrap().starts_with("trigger:new")),
        "{sessions}"
    );
    // Not JSON by its Content-Type: 415, before the body is read.
    let plain = br#"{"message": {"text": "c", "chat": 3}}"#;
    let resp = api
        .client
        .post(format!("{}/v1/hooks/p/chat", api.url))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("x-hub-signature-256", github_signature(plain))
        .body(plain.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let err: Value = resp.json().await.unwrap();
    assert_eq!(err["code"], "unsupported_media_type", "{err}");
    // A number past 2^64 renders as its sender wrote it.
    let big = br#"{"message": {"n": 12345678901234567890123}}"#;
    let (status, _, accepted) = deliver(&api, "num", &signed(big, Some("n-1")), big).await;
    assert_eq!(
        (status, accepted["session"].as_str()),
        (StatusCode::ACCEPTED, Some("n-12345678901234567890123"))
    );
    api.stop().await;
}

/// Issue 33 item 5: a refusal whose detail holds U+0000 or a megabyte key is recorded (on
/// Postgres too), clipped, and the answer does not echo the megabyte.
async fn refusal_details_are_recorded_clipped_and_without_nul(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let mut reg = webhook("gh", TriggerSession::New, SignatureScheme::Github, 1000);
    if let TriggerKind::Webhook(w) = &mut reg.spec.kind {
        w.max_body_bytes = 2 << 20;
    }
    register(&api, vec![reg]).await;
    let nul = br#"{"a\u0000b": 1}"#.to_vec();
    let huge = serde_json::to_vec(&json!({ "k".repeat(1_000_000): 1 })).unwrap();
    for (i, body) in [nul, huge].iter().enumerate() {
        let id = format!("t-{i}");
        let (status, _, err) = deliver(&api, "gh", &signed(body, Some(&id)), body).await;
        assert_eq!(
            (status, err["code"].as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("template_failed"))
        );
        assert!(
            err.to_string().len() < 2000,
            "{} bytes",
            err.to_string().len()
        );
    }
    let h = history_json(&api, "gh").await;
    assert_eq!(h.len(), 2, "{h:?}");
    for e in &h {
        assert_eq!(e["reason"], "template");
        let detail = e["detail"].as_str().unwrap();
        assert!(
            !detail.contains('\0') && detail.chars().count() <= 1000,
            "{detail:.300}"
        );
    }
    api.stop().await;
}

/// Issue 33 item 5: what the agentfile refuses, the registration refuses too; and a `max_body`
/// above the server's body limit.
async fn registrations_the_agentfile_refuses_are_refused(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let mut big = webhook("big", TriggerSession::New, SignatureScheme::Github, 10);
    if let TriggerKind::Webhook(w) = &mut big.spec.kind {
        w.max_body_bytes = 9 << 20;
    }
    let mut template = webhook("tpl", TriggerSession::New, SignatureScheme::Github, 10);
    if let TriggerKind::Webhook(w) = &mut template.spec.kind {
        w.message = "x".repeat(200 << 10);
    }
    let both = schedule("both", Some("0 9 * * *"), Some(60), "UTC", Overlap::Skip);
    let zoned = schedule("zoned", None, Some(60), "Europe/Lisbon", Overlap::Skip);
    for (reg, needle) in [
        (big, "max_body"),
        (template, "longer"),
        (both, "not both"),
        (zoned, "timezone"),
    ] {
        let (status, err) = api
            .admin(
                Method::PUT,
                "/v1/pools/p/triggers",
                Some(
                    serde_json::to_value(TriggerSet {
                        triggers: vec![reg],
                    })
                    .unwrap(),
                ),
            )
            .await;
        assert_eq!(
            (status, err["code"].as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_trigger")),
            "{err}"
        );
        assert!(err["message"].as_str().unwrap().contains(needle), "{err}");
    }
    api.stop().await;
}

/// Issue 33 item 2: a source address has at most `hook_requests_per_peer` deliveries in flight,
/// and a body that trickles is cut at the hook body deadline.
async fn a_trickling_sender_is_capped_and_cut(backend: Backend) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let Some(api) = TestApi::start_with(backend, |c| {
        c.hook_requests_per_peer = 1;
        c.hook_body_timeout = std::time::Duration::from_secs(1);
    })
    .await
    else {
        return;
    };
    register(
        &api,
        vec![webhook(
            "gh",
            TriggerSession::New,
            SignatureScheme::Github,
            1000,
        )],
    )
    .await;
    let addr = api.url.trim_start_matches("http://").to_string();
    let head = format!(
        "POST /v1/hooks/p/gh HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         content-length: 100\r\nx-hub-signature-256: sha256={}\r\n\r\n{{",
        "0".repeat(64)
    );
    // Two senders from one address trickle bodies: whichever is let in first holds the only
    // place until its body deadline, so the other is refused at once.
    let mut answers = Vec::new();
    let mut streams = Vec::new();
    for _ in 0..2 {
        let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
        stream.write_all(head.as_bytes()).await.unwrap();
        streams.push(stream);
    }
    for mut stream in streams {
        let mut answer = Vec::new();
        let read = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            stream.read_to_end(&mut answer),
        )
        .await;
        assert!(read.is_ok(), "not answered and closed within 10 s");
        answers.push(String::from_utf8_lossy(&answer).into_owned());
    }
    answers.sort();
    assert!(answers[0].starts_with("HTTP/1.1 408"), "{answers:?}");
    assert!(answers[0].contains("request_timeout"), "{answers:?}");
    assert!(answers[1].starts_with("HTTP/1.1 429"), "{answers:?}");
    assert!(answers[1].contains("too_many_in_flight"), "{answers:?}");
    assert!(answers[1].contains("retry-after: 1"), "{answers:?}");
    // Its place is back: a signed delivery goes.
    let body = br#"{"message": {"text": "y"}}"#;
    let (status, _, accepted) = deliver(&api, "gh", &signed(body, Some("p-2")), body).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    api.stop().await;
}

both_backends!(
    junk_spends_no_token_and_no_row_each,
    deliveries_are_deduplicated_per_trigger_and_by_github_body,
    refusal_details_are_recorded_clipped_and_without_nul,
    registrations_the_agentfile_refuses_are_refused,
    a_trickling_sender_is_capped_and_cut,
    one_tick_fires_every_due_schedule_past_a_page,
    schedule_missed_while_down_is_caught_up_once,
    overlap_skip_while_the_previous_turn_runs,
    a_dst_jump_in_a_real_zone_fires_once,
    registration_is_reconciled_and_secrets_stay_in,
    github_webhooks_good_bad_and_repeated,
    standard_webhooks_one_session_per_chat_and_stale_timestamps,
    over_the_rate_limit_is_429_with_retry_after,
    fire_now_puts_the_message_in_the_session,
);

/// Two API replicas on one Postgres database tick at the same instants at the same time: each
/// scheduled time fires exactly once, whichever replica wins it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_on_postgres_fire_each_scheduled_time_once() {
    let Some(db) = TestDb::new(Backend::Postgres).await else {
        return;
    };
    let (a, b) = (open(&db).await, open(&db).await);
    let start = at(2026, 1, 1, 10, 0, 0);
    let triggers = (0..8)
        .map(|i| {
            let mut t = schedule(&format!("t{i}"), None, Some(10), "UTC", Overlap::Allow);
            if let TriggerKind::Schedule(s) = &mut t.spec.kind {
                s.catch_up = CatchUp::All;
            }
            t
        })
        .collect();
    a.put_triggers("p".into(), TriggerSet { triggers }, start)
        .await
        .unwrap();
    let mut fired = 0;
    // 60 ticks a second apart: every 10 s, eight triggers are due at once.
    for s in 1..=60 {
        let now = start + chrono::TimeDelta::seconds(s);
        let (x, y) = tokio::join!(a.fire_due(now, no_crash), b.fire_due(now, no_crash));
        fired += x.unwrap().len() + y.unwrap().len();
    }
    assert_eq!(fired, 8 * 6, "8 triggers × 6 instants, each once");
    for i in 0..8 {
        let inbox = session_inbox(&a, &format!("trigger:t{i}")).await;
        let expected: Vec<String> = (1..=6)
            .map(|k| {
                format!(
                    "schedule:t{i}:{}",
                    (start + chrono::TimeDelta::seconds(10 * k))
                        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                )
            })
            .collect();
        assert_eq!(keys(&inbox), expected);
    }
    a.close().await;
    b.close().await;
}
