//! Triggers across crashes of the real `ninetrix api` process: killed at each kill point of a
//! schedule's fire and of a webhook delivery (before and after the commit), every scheduled time
//! and every delivery lands once; killed and restarted "an hour later" (the scheduler's clock
//! moved forward), the missed fire is caught up once.

use std::os::unix::process::ExitStatusExt as _;
use std::time::{Duration, Instant};

use ninetrix_e2e::{ApiProcess, github_signature};
use serde_json::{Value, json};

const SECRET: &str = "process-test-secret";

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

async fn call(url: &str, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut req = http().request(method, format!("{url}{path}"));
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

fn every(name: &str, secs: u64, catch_up: &str) -> Value {
    json!({"spec": {"name": name, "agent": "a", "session": {"key": format!("trigger:{name}")},
        "kind": {"type": "schedule", "every_secs": secs, "timezone": "UTC", "message": format!("{name} fired"),
                 "overlap": "allow", "catch_up": catch_up, "catch_up_window_secs": 3600}}})
}

fn hook(name: &str) -> Value {
    json!({"spec": {"name": name, "agent": "a", "session": "new",
        "kind": {"type": "webhook", "path": name, "message": "{{ text }}", "secret": "S",
                 "signature": "github", "tolerance_secs": 300, "rate_limit_per_minute": 600,
                 "max_body_bytes": 65536}},
        "secret": SECRET})
}

async fn register(url: &str, triggers: Vec<Value>) {
    let (status, body) = call(
        url,
        reqwest::Method::PUT,
        "/v1/pools/p/triggers",
        Some(json!({"triggers": triggers})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
}

async fn history(url: &str, name: &str) -> Vec<Value> {
    let (status, body) = call(
        url,
        reqwest::Method::GET,
        &format!("/v1/pools/p/triggers/{name}/history?limit=1000"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body.as_array().unwrap().clone()
}

/// The dedupe keys of the messages in session `key` of agent `a`.
async fn inbox_keys(url: &str, key: &str) -> Vec<String> {
    let (_, sessions) = call(
        url,
        reqwest::Method::GET,
        &format!("/v1/sessions?pool=p&agent=a&key={key}"),
        None,
    )
    .await;
    let Some(thread) = sessions
        .as_array()
        .and_then(|s| s.first())
        .and_then(|s| s["thread_id"].as_str())
    else {
        return Vec::new();
    };
    let (status, inbox) = call(
        url,
        reqwest::Method::GET,
        &format!("/v1/runners/threads/{thread}/inbox?after=0"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{inbox}");
    inbox
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["dedupe_key"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Polls `check` every 50 ms until it returns `Some`, up to `limit`.
async fn eventually<T, F: std::future::Future<Output = Option<T>>>(
    limit: Duration,
    what: &str,
    mut check: impl FnMut() -> F,
) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "{what} did not happen within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn aborted(api: &mut ApiProcess) {
    let status = api
        .wait_exit(Duration::from_secs(30))
        .expect("the API reached its kill point and aborted");
    assert_eq!(
        status.signal(),
        Some(6),
        "killed by SIGABRT at the kill point: {status:?}"
    );
}

/// Each scheduled time's key: `schedule:<name>:<RFC 3339>`, parsed back to a Unix second.
fn instants(keys: &[String]) -> Vec<i64> {
    keys.iter()
        .map(|k| {
            let t = k.splitn(3, ':').nth(2).expect("schedule:<name>:<time>");
            chrono::DateTime::parse_from_rfc3339(t).unwrap().timestamp()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fire_killed_before_or_after_its_commit_lands_once() {
    for point in ["trigger_fire_before_commit", "trigger_fire_after_commit"] {
        let dir = tempfile::tempdir().unwrap();
        let db = format!("sqlite://{}", dir.path().join("api.db").display());
        let mut api = ApiProcess::start_with_env(
            "127.0.0.1:0",
            &["--database", &db, "--insecure-dev"],
            &[("NINETRIX_API_CRASH_AT", point)],
        );
        let listen = api.url.trim_start_matches("http://").to_string();
        register(&api.url, vec![every("tick", 1, "last")]).await;
        // The first fire reaches the kill point.
        aborted(&mut api);
        let api = ApiProcess::start_on(&listen, &["--database", &db, "--insecure-dev"]);
        let keys = eventually(
            Duration::from_secs(30),
            "three fires after the restart",
            || async {
                let keys = inbox_keys(&api.url, "trigger:tick").await;
                (keys.len() >= 3).then_some(keys)
            },
        )
        .await;
        // Every scheduled time once, one a second, none missing: the killed fire either rolled
        // back and fired after the restart, or was committed and is not fired again.
        let t = instants(&keys);
        let mut sorted = t.clone();
        sorted.dedup();
        assert_eq!(sorted, t, "{point}: no scheduled time twice: {keys:?}");
        assert!(
            t.windows(2).all(|w| w[1] == w[0] + 1),
            "{point}: consecutive seconds: {keys:?}"
        );
        let fired: Vec<Value> = history(&api.url, "tick")
            .await
            .into_iter()
            .filter(|e| e["outcome"] == "fired")
            .collect();
        let first =
            chrono::DateTime::parse_from_rfc3339(fired[0]["scheduled_at"].as_str().unwrap())
                .unwrap()
                .timestamp();
        assert_eq!(
            first, t[0],
            "{point}: the history starts at the first message"
        );
    }
}

fn signed(body: &[u8], delivery: &str) -> Vec<(&'static str, String)> {
    vec![
        (
            "x-hub-signature-256",
            github_signature(SECRET.as_bytes(), body),
        ),
        ("x-github-delivery", delivery.to_string()),
    ]
}

async fn post_hook(
    url: &str,
    body: &[u8],
    headers: &[(&'static str, String)],
) -> Result<(u16, Value), reqwest::Error> {
    let mut req = http()
        .post(format!("{url}/v1/hooks/p/gh"))
        .header("content-type", "application/json")
        .body(body.to_vec());
    for (k, v) in headers {
        req = req.header(*k, v);
    }
    let resp = req.send().await?;
    let status = resp.status().as_u16();
    Ok((status, resp.json().await.unwrap_or(Value::Null)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_killed_before_or_after_its_commit_lands_once_when_redelivered() {
    for (point, retry_status, retry_outcome) in [
        ("hook_before_commit", 202, "fired"),
        ("hook_after_commit", 200, "deduplicated"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let db = format!("sqlite://{}", dir.path().join("api.db").display());
        let mut api = ApiProcess::start_with_env(
            "127.0.0.1:0",
            &["--database", &db, "--insecure-dev"],
            &[("NINETRIX_API_CRASH_AT", point)],
        );
        let listen = api.url.trim_start_matches("http://").to_string();
        register(&api.url, vec![hook("gh")]).await;
        let body = br#"{"text": "deploy finished"}"#;
        let headers = signed(body, "delivery-1");
        // The sender sees the connection drop: no answer, so it redelivers.
        assert!(
            post_hook(&api.url, body, &headers).await.is_err(),
            "{point}: the API died before answering"
        );
        aborted(&mut api);
        let api = ApiProcess::start_on(&listen, &["--database", &db, "--insecure-dev"]);
        let (status, answer) = post_hook(&api.url, body, &headers).await.unwrap();
        assert_eq!(
            (status, answer["outcome"].as_str()),
            (retry_status, Some(retry_outcome)),
            "{point}: {answer}"
        );
        assert_eq!(answer["session"], "trigger:gh:delivery-1");
        assert_eq!(
            inbox_keys(&api.url, "trigger:gh:delivery-1").await,
            ["webhook:gh:delivery-1"],
            "{point}: one message"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_missed_across_an_api_crash_is_caught_up_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("api.db").display());
    let mut api = ApiProcess::start(&["--database", &db, "--insecure-dev"]);
    let listen = api.url.trim_start_matches("http://").to_string();
    register(&api.url, vec![every("report", 600, "last")]).await;
    api.child.kill().unwrap();
    api.wait_exit(Duration::from_secs(10)).unwrap();
    // Back "65 minutes later", five minutes past a ten-minute mark, so the last missed fire is
    // well outside the one-minute grace.
    let now = chrono::Utc::now().timestamp();
    let later = (now / 600 + 6) * 600 + 300;
    let skew = (later - now).to_string();
    let env = [("NINETRIX_API_CLOCK_SKEW_SECS", skew.as_str())];
    let api = ApiProcess::start_with_env(&listen, &["--database", &db, "--insecure-dev"], &env);
    let caught = eventually(Duration::from_secs(30), "the catch-up fire", || async {
        let h = history(&api.url, "report").await;
        h.iter().any(|e| e["outcome"] == "caught_up").then_some(h)
    })
    .await;
    let expected_instant = (later / 600) * 600;
    let caught_up: Vec<&Value> = caught
        .iter()
        .filter(|e| e["outcome"] == "caught_up")
        .collect();
    assert_eq!(caught_up.len(), 1, "{caught:?}");
    let at = chrono::DateTime::parse_from_rfc3339(caught_up[0]["scheduled_at"].as_str().unwrap())
        .unwrap()
        .timestamp();
    assert_eq!(at, expected_instant);
    assert!(
        caught.iter().all(|e| e["outcome"] != "fired"),
        "nothing was on time: {caught:?}"
    );
    assert!(
        caught
            .iter()
            .filter(|e| e["outcome"] == "skipped")
            .all(|e| e["reason"] == "only_last" || e["reason"] == "outside_window")
    );
    assert_eq!(inbox_keys(&api.url, "trigger:report").await.len(), 1);
    // Killed and restarted again: the plan was stored with the fire, so the next fire is the
    // next ten-minute mark and nothing is due again.
    drop(api);
    let api = ApiProcess::start_with_env(&listen, &["--database", &db, "--insecure-dev"], &env);
    let (_, listed) = call(&api.url, reqwest::Method::GET, "/v1/triggers?pool=p", None).await;
    let next = chrono::DateTime::parse_from_rfc3339(listed[0]["next_fire_at"].as_str().unwrap())
        .unwrap()
        .timestamp();
    assert_eq!(next, expected_instant + 600);
    assert_eq!(inbox_keys(&api.url, "trigger:report").await.len(), 1);
}
