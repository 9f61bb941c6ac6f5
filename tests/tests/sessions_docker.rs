//! Sessions on the real Docker Engine, through the CLI: `invoke --session KEY` reaches the replica
//! that owns the key, a crash of that replica's container does not lose the conversation, and
//! scaling the agent from 3 to 4 replicas (`up` after an edit) hands the moved sessions to the new
//! replica — every message answered once, in its own conversation. `ninetrix sessions` lists them
//! with their owners; the replicas' logs name the session of each line.

mod support;

use std::time::Duration;

use ninetrix_proto::sessions;
use serde_json::Value;
use support::docker::{Pool, docker, inspect, kill_host_pid, text, wait_for};

fn agentfile(replicas: u32) -> String {
    format!(
        "agents:
  bot:
    runtime:
      provider: scripted
      script: [\"Hello.\"]
    execution: {{ replicas: {replicas} }}
"
    )
}

fn invoke(pool: &Pool, key: &str, message: &str) -> String {
    let out = pool
        .command(&[
            "invoke",
            "-p",
            &pool.name,
            "--agent",
            "bot",
            "--session",
            key,
            "-m",
            message,
            "--timeout",
            "60",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "invoke {key}: {}", text(&out));
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// `ninetrix sessions --json`.
fn listed(pool: &Pool) -> Vec<Value> {
    let out = pool
        .command(&["sessions", "-p", &pool.name, "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "sessions: {}", text(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The user messages of a session's conversation, from its trace.
fn turns(pool: &Pool, key: &str) -> Vec<String> {
    pool.session_events("bot", key)
        .iter()
        .filter(|e| e["type"] == "turn_started")
        .map(|e| e["data"]["input"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn sessions_are_served_by_their_owners_through_a_crash_and_a_scale_up() {
    let pool = Pool::new("sess");
    pool.write(&agentfile(3));
    pool.up(&[]);
    let keys: Vec<String> = (0..8).map(|i| format!("customer-{i}")).collect();
    for key in &keys {
        assert_eq!(invoke(&pool, key, &format!("{key} says hi")), "Hello.\n");
    }
    let found = listed(&pool);
    assert_eq!(found.len(), keys.len(), "{found:?}");

    // A crash of the replica that owns the first key: Docker restarts it, and the session
    // answers again.
    let owner = sessions::owner(&keys[0], 3);
    let name = pool.container("bot", owner);
    kill_host_pid(&name);
    wait_for("the restart", Duration::from_secs(60), || {
        inspect(&name)["RestartCount"].as_i64().unwrap_or(0) >= 1
            && inspect(&name)["State"]["Running"] == true
    });
    assert_eq!(invoke(&pool, &keys[0], "after the crash"), "Hello.\n");

    // 3 → 4 replicas: the sessions the fourth now owns are served by it.
    pool.write(&agentfile(4));
    pool.up(&[]);
    for key in &keys {
        assert_eq!(invoke(&pool, key, &format!("{key} again")), "Hello.\n");
    }
    let moved: Vec<&String> = keys.iter().filter(|k| sessions::owner(k, 4) == 4).collect();
    let fourth = docker(&["logs", &pool.container("bot", 4)]);
    for key in &moved {
        assert!(
            fourth.contains(&format!("session{{key={key}}}")),
            "bot-4 serves {key}; its log:\n{fourth}"
        );
    }
    // Every conversation holds its own messages, each once.
    for (i, key) in keys.iter().enumerate() {
        let mut want = vec![format!("{key} says hi")];
        if i == 0 {
            want.push("after the crash".into());
        }
        want.push(format!("{key} again"));
        assert_eq!(turns(&pool, key), want, "session {key}");
    }
    let table = text(
        &pool
            .command(&["sessions", "-p", &pool.name])
            .output()
            .unwrap(),
    );
    assert!(
        table.contains(&format!("bot-{}", sessions::owner(&keys[0], 4))),
        "{table}"
    );
}
