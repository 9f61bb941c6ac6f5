//! Triggers on the real Docker Engine, through the CLI: `up` registers a schedule and a signed
//! webhook with the local API; the schedule's fires become turns of the agent's replica; GitHub-
//! signed deliveries to the API's published port become one conversation per chat id (a
//! redelivery adds nothing, a forged one is refused); `triggers fire` runs one now; the schedule
//! keeps its once-per-time promise across a SIGKILL of the API container; `down` removes them.

mod support;

use std::time::Duration;

use ninetrix_e2e::github_signature;
use serde_json::{Value, json};
use support::docker::{Pool, SECRET, inspect, kill_host_pid, text, wait_for};

fn agentfile() -> String {
    "agents:
  bot:
    runtime:
      provider: scripted
      script: [\"Done.\"]
triggers:
  - name: tick
    type: schedule
    every: 2s
    message: tick
  - name: hook
    type: webhook
    secret: TEST_SECRET
    signature: github
    message: \"{{ text }}\"
    session: \"chat-{{ chat.id }}\"
"
    .to_string()
}

fn json_of(pool: &Pool, args: &[&str]) -> Value {
    let out = pool.command(args).output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", text(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The inputs of the turns a session's thread started, and how many it completed.
fn turns(pool: &Pool, key: &str) -> (Vec<String>, usize) {
    let events = pool.session_events("bot", key);
    let started = events
        .iter()
        .filter(|e| e["type"] == "turn_started")
        .map(|e| e["data"]["input"].as_str().unwrap_or_default().to_string())
        .collect();
    let completed = events
        .iter()
        .filter(|e| e["type"] == "turn_completed")
        .count();
    (started, completed)
}

/// The scheduled times of the schedule's fires, from its history.
fn fired(pool: &Pool) -> Vec<String> {
    json_of(
        pool,
        &[
            "triggers", "history", "tick", "-p", &pool.name, "--limit", "1000", "--json",
        ],
    )
    .as_array()
    .unwrap()
    .iter()
    .filter(|e| e["outcome"] == "fired" || e["outcome"] == "caught_up")
    .map(|e| e["scheduled_at"].as_str().unwrap_or_default().to_string())
    .collect()
}

fn signature(body: &[u8]) -> String {
    github_signature(SECRET.as_bytes(), body)
}

async fn deliver(url: &str, body: &Value, delivery: &str, forged: bool) -> (u16, Value) {
    let bytes = body.to_string().into_bytes();
    let sig = if forged {
        signature(b"{}")
    } else {
        signature(&bytes)
    };
    let resp = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("x-hub-signature-256", sig)
        .header("x-github-delivery", delivery)
        .body(bytes)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_and_webhooks_drive_the_pool_and_survive_an_api_crash() {
    let pool = Pool::new("trig");
    pool.write(&agentfile());
    let up = pool.up(&[]);
    assert!(
        up.contains("tick") && up.contains("Created"),
        "up names the triggers it registered:\n{up}"
    );
    let listed = json_of(&pool, &["triggers", "-p", &pool.name, "--json"]);
    let names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["spec"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["hook", "tick"]);
    let hook_path = listed[0]["hook_path"].as_str().unwrap().to_string();
    assert_eq!(hook_path, format!("/v1/hooks/{}/hook", pool.name));

    // The schedule's fires become turns of the replica, in the trigger's session.
    wait_for("two scheduled turns", Duration::from_secs(90), || {
        turns(&pool, "trigger:tick").1 >= 2
    });
    assert!(turns(&pool, "trigger:tick").0.iter().all(|i| i == "tick"));

    // Webhooks to the API's published port: one conversation per chat id.
    let api = pool.api_container().expect("the local API container");
    let port = inspect(&api)["NetworkSettings"]["Ports"]["8080/tcp"][0]["HostPort"]
        .as_str()
        .unwrap()
        .to_string();
    let url = format!("http://127.0.0.1:{port}{hook_path}");
    let five = json!({"text": "hello from 5", "chat": {"id": 5}});
    assert_eq!(deliver(&url, &five, "d-1", false).await.0, 202);
    let (status, again) = deliver(&url, &five, "d-1", false).await;
    assert_eq!(
        (status, again["outcome"].as_str()),
        (200, Some("deduplicated")),
        "a redelivery adds nothing"
    );
    assert_eq!(
        deliver(
            &url,
            &json!({"text": "hello from 6", "chat": {"id": 6}}),
            "d-2",
            false
        )
        .await
        .0,
        202
    );
    assert_eq!(
        deliver(
            &url,
            &json!({"text": "forged", "chat": {"id": 5}}),
            "d-3",
            true
        )
        .await
        .0,
        401
    );
    let fire = pool
        .command(&[
            "triggers",
            "fire",
            "hook",
            "-p",
            &pool.name,
            "--body",
            r#"{"text": "by hand", "chat": {"id": 7}}"#,
        ])
        .output()
        .unwrap();
    assert!(fire.status.success(), "{}", text(&fire));
    assert!(
        text(&fire).contains("queued"),
        "the fire says its message is queued: {}",
        text(&fire)
    );
    for (key, input) in [
        ("chat-5", "hello from 5"),
        ("chat-6", "hello from 6"),
        ("chat-7", "by hand"),
    ] {
        wait_for(
            &format!("the turn of {key}"),
            Duration::from_secs(60),
            || turns(&pool, key).1 >= 1,
        );
        assert_eq!(
            turns(&pool, key).0,
            [input],
            "{key}: one turn, its own message"
        );
    }

    // A SIGKILL of the API container: Docker restarts it and the schedule goes on, each
    // scheduled time once.
    let before = fired(&pool).len();
    kill_host_pid(&api);
    wait_for("the API's restart", Duration::from_secs(60), || {
        let c = inspect(&api);
        c["RestartCount"].as_i64().unwrap_or(0) >= 1 && c["State"]["Running"] == true
    });
    wait_for("fires after the restart", Duration::from_secs(90), || {
        pool.command(&["triggers", "history", "tick", "-p", &pool.name, "--json"])
            .output()
            .is_ok_and(|o| o.status.success())
            && fired(&pool).len() >= before + 2
    });
    let times = fired(&pool);
    let mut unique = times.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(
        unique.len(),
        times.len(),
        "no scheduled time twice: {times:?}"
    );

    // `down` takes the triggers away with the pool.
    let down = pool.ninetrix(&["down", "-p", &pool.name, "-t", "2"]);
    assert!(down.status.success(), "{}", text(&down));
    let left = json_of(&pool, &["triggers", "-p", &pool.name, "--json"]);
    assert_eq!(left, json!([]), "down removed the triggers");
}
