//! A request to a person on the real Docker Engine: the gated write of a pooled agent waits
//! through a crash of its container (the restart policy brings it back), an agentfile edit that
//! recreates it, and `down`/`up` with the decision posted while it is down — one request all
//! along, and the approved write runs once. `invoke` says what it waits for; `ninetrix
//! approvals`/`approve`/`deny` are the commands a person uses.

mod support;

use std::time::Duration;

use serde_json::Value;
use support::docker::{Pool, inspect, kill_host_pid, text, wait_for};

fn agentfile(extra_env: &str) -> String {
    format!(
        "agents:
  clerk:
    runtime:
      provider: scripted
      script:
        - text: Recording.
          tool_calls:
            - name: file_write
              args: {{ path: log.txt, content: \"line\\n\", mode: append }}
        - text: Done.
    tools: [file_write]
    governance:
      human_approval: {{ actions: [file_write], timeout: 1h }}
    env: {{ STAGE: \"{extra_env}\" }}
"
    )
}

/// The pool's requests to people (every status), as `ninetrix approvals --all --json` lists them.
fn requests(pool: &Pool) -> Vec<Value> {
    let out = pool
        .command(&["approvals", "-p", &pool.name, "--all", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "approvals failed: {}", text(&out));
    serde_json::from_slice::<Vec<Value>>(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "approvals --json is not a JSON list ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// `ninetrix ps` of the pool.
fn ps(pool: &Pool) -> String {
    text(&pool.command(&["ps", "-p", &pool.name]).output().unwrap())
}

/// How many times the agent's runner has booted.
fn boots(pool: &Pool) -> usize {
    pool.events("clerk")
        .iter()
        .filter(|e| e["type"] == "boot")
        .count()
}

fn executed_writes(pool: &Pool) -> usize {
    pool.events("clerk")
        .iter()
        .filter(|e| {
            e["type"] == "tool_call"
                && e["data"]["name"] == "file_write"
                && e["data"]["mode"] == "executed"
        })
        .count()
}

#[test]
fn a_pending_request_survives_a_crash_a_recreate_and_down_up() {
    let pool = Pool::new("appr");
    pool.write(&agentfile("one"));
    pool.up(&[]);
    let name = pool.container("clerk", 1);

    // invoke says what it waits for, and that the message stays queued when it gives up.
    let out = pool
        .command(&[
            "invoke",
            "-p",
            &pool.name,
            "--agent",
            "clerk",
            "-m",
            "record it",
            "--id",
            "m1",
            "--timeout",
            "8",
        ])
        .output()
        .unwrap();
    let said = text(&out);
    assert_eq!(out.status.code(), Some(124), "{said}");
    assert!(said.contains("waiting for approval"), "{said}");
    let pending = requests(&pool);
    assert_eq!(pending.len(), 1, "{pending:?}");
    let id = pending[0]["id"].as_str().unwrap().to_string();
    assert!(said.contains(&format!("ninetrix approve {id}")), "{said}");
    assert_eq!(pending[0]["status"], "pending");

    // A crash while waiting: Docker restarts the runner, which waits for the same request.
    kill_host_pid(&name);
    wait_for("the restart", Duration::from_secs(60), || {
        inspect(&name)["RestartCount"].as_i64().unwrap_or(0) >= 1
            && inspect(&name)["State"]["Running"] == true
    });
    let waiting = format!("waiting for approval {id}");
    wait_for(
        "ps to show the restarted runner waiting",
        Duration::from_secs(60),
        || boots(&pool) >= 2 && ps(&pool).contains(&waiting),
    );
    // An edit that recreates the container while it waits.
    pool.write(&agentfile("two"));
    pool.up(&[]);
    wait_for(
        "ps to show the recreated runner waiting",
        Duration::from_secs(60),
        || boots(&pool) >= 3 && ps(&pool).contains(&waiting),
    );
    let still = requests(&pool);
    assert_eq!(
        (
            still.len(),
            still[0]["id"].as_str(),
            still[0]["status"].as_str()
        ),
        (1, Some(id.as_str()), Some("pending")),
        "one request all along"
    );
    assert_eq!(executed_writes(&pool), 0);

    // Down; the person decides while nothing runs; up finishes the turn.
    let file = pool.file();
    let out = pool.ninetrix(&["down", "-f", file.to_str().unwrap(), "-t", "5"]);
    assert!(out.status.success(), "down failed: {}", text(&out));
    let out = pool
        .command(&["approve", &id, "--reason", "checked"])
        .output()
        .unwrap();
    assert!(out.status.success(), "approve failed: {}", text(&out));
    // A different second decision is refused with the first.
    let out = pool
        .command(&["deny", &id, "--reason", "changed my mind"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(text(&out).contains("already approved"), "{}", text(&out));
    pool.up(&[]);
    wait_for("the turn to complete", Duration::from_secs(90), || {
        pool.events("clerk")
            .iter()
            .any(|e| e["type"] == "turn_completed")
    });
    assert_eq!(executed_writes(&pool), 1, "the approved write ran once");
    let trace = pool.events("clerk");
    let decided: Vec<&Value> = trace
        .iter()
        .filter(|e| e["type"] == "approval_decided")
        .collect();
    assert_eq!(decided.len(), 1);
    assert_eq!(decided[0]["data"]["reason"], "checked");
}
