//! Starting one conversation over on the real Docker Engine (issue 34): `ninetrix reset` purges
//! one replica's thread — asking first, refusing without a terminal unless `--yes` — and the
//! replica's container is recreated on a new thread (the pool file and the API's replica mapping
//! follow) while the other replica keeps its container and thread; a session's reset makes its
//! next message open a new thread. A replica whose thread is purged behind the CLI's back stops
//! with exit 0 (no restart loop), saying what to run, and `up` gives it a new thread.

mod support;

use std::time::Duration;

use ninetrix_client::{Client, ErrorCode};
use ninetrix_proto::ThreadId;
use support::docker::{Pool, block_on, inspect, text, wait_for};

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

/// The admin client of the pool's local API.
fn admin(pool: &Pool) -> Client {
    pool.admin_client(&format!("ninetrix-api-{}", pool.name))
}

/// Replica `n`'s thread in the pool file.
fn state_thread(pool: &Pool, n: u32) -> ThreadId {
    pool.state()["agents"]["bot"][n.to_string()]["thread_id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

fn container_thread(pool: &Pool, n: u32) -> String {
    inspect(&pool.container("bot", n))["Config"]["Labels"]["dev.ninetrix.thread-id"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn purged(client: &Client, thread: ThreadId) -> bool {
    let read = block_on(client.thread(thread));
    read.err().and_then(|e| e.code().cloned()) == Some(ErrorCode::Purged)
}

fn answered(pool: &Pool, extra: &[&str]) {
    let mut args = vec!["--timeout", "60"];
    args.extend_from_slice(extra);
    let out = pool.invoke("bot", "hi", &args);
    assert!(out.status.success(), "invoke {extra:?}: {}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "Hello.\n");
}

fn turns(events: &[serde_json::Value]) -> usize {
    events
        .iter()
        .filter(|e| e["type"] == "turn_started")
        .count()
}

#[test]
fn reset_starts_one_replica_and_one_session_over_and_keeps_the_rest() {
    let pool = Pool::new("reset");
    pool.write(&agentfile(2));
    pool.up(&[]);
    let client = admin(&pool);
    answered(&pool, &["--replica", "1"]);
    answered(&pool, &["--replica", "2"]);
    let (old1, old2) = (state_thread(&pool, 1), state_thread(&pool, 2));
    let other = inspect(&pool.container("bot", 2))["Id"].clone();

    // Without a terminal and without --yes: refused, nothing deleted.
    let refused = pool.ninetrix(&[
        "reset",
        "-p",
        &pool.name,
        "--agent",
        "bot",
        "--replica",
        "1",
    ]);
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains(&format!(
            "deletes the conversation of bot-1 in pool {} (thread {old1}",
            pool.name
        )) && err.contains("pass --yes"),
        "{err}"
    );
    assert!(!purged(&client, old1));
    // Several replicas and none named: the error says how to name one.
    let which = pool.ninetrix(&["reset", "-p", &pool.name, "--agent", "bot", "--yes"]);
    assert_eq!(which.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&which.stderr).contains("--replica N (1 to 2)"),
        "{}",
        text(&which)
    );

    // From another directory, naming only the pool: the agentfile `up` recorded is used.
    let elsewhere = tempfile::tempdir().unwrap();
    let reset = pool
        .command(&[
            "reset",
            "-p",
            &pool.name,
            "--agent",
            "bot",
            "--replica",
            "1",
            "--yes",
        ])
        .current_dir(elsewhere.path())
        .output()
        .unwrap();
    let said = text(&reset);
    assert!(reset.status.success(), "reset: {said}");
    let new1 = state_thread(&pool, 1);
    assert_ne!(new1, old1, "replica 1 has a new thread in the pool file");
    assert!(
        said.contains(&format!(
            "bot-1: its thread {old1} was purged; it starts a new conversation on thread {new1}"
        )),
        "{said}"
    );
    assert!(
        said.contains(&format!(
            "bot-1 of pool {} is up on thread {new1}",
            pool.name
        )),
        "{said}"
    );
    assert!(purged(&client, old1));
    assert_eq!(
        container_thread(&pool, 1),
        new1.to_string(),
        "recreated on it"
    );
    // The API's replica mapping follows (what a Swarm or Kubernetes runner would be given).
    let mapped = block_on(client.replica_thread(&pool.name, "bot", 1)).unwrap();
    assert_eq!((mapped.thread_id, mapped.created), (new1, false));
    // The other replica is untouched: same container, same thread, its history kept.
    assert_eq!(state_thread(&pool, 2), old2);
    assert_eq!(inspect(&pool.container("bot", 2))["Id"], other);
    assert_eq!(turns(&pool.replica_events("bot", 2)), 1);
    // Replica 1 answers on its new conversation.
    answered(&pool, &["--replica", "1"]);
    assert_eq!(turns(&pool.replica_events("bot", 1)), 1);

    // A session: its next message opens a new thread under the same key.
    answered(&pool, &["--session", "customer-7"]);
    let before = pool.session_events("bot", "customer-7");
    assert_eq!(turns(&before), 1);
    let reset = pool.ninetrix(&[
        "reset",
        "-p",
        &pool.name,
        "--agent",
        "bot",
        "--session",
        "customer-7",
        "--yes",
    ]);
    assert!(reset.status.success(), "{}", text(&reset));
    assert!(
        String::from_utf8_lossy(&reset.stdout).contains(
            "session `customer-7` of bot starts over: its next message opens a new thread"
        ),
        "{}",
        text(&reset)
    );
    answered(&pool, &["--session", "customer-7"]);
    assert_eq!(turns(&pool.session_events("bot", "customer-7")), 1);
    assert_eq!(state_thread(&pool, 2), old2);
}

#[test]
fn a_replica_whose_thread_is_purged_stops_without_a_restart_loop_and_up_renews_it() {
    let pool = Pool::new("purged");
    pool.write(&agentfile(1));
    pool.up(&[]);
    answered(&pool, &[]);
    let client = admin(&pool);
    let old = state_thread(&pool, 1);
    let name = pool.container("bot", 1);
    // Purged behind the CLI's back (the API's DELETE, as a user of the API would).
    assert!(block_on(client.purge(old)).unwrap());
    wait_for("the runner to stop", Duration::from_secs(60), || {
        inspect(&name)["State"]["Running"] == false
    });
    let c = inspect(&name);
    assert_eq!(c["State"]["ExitCode"], 0, "exit 0: {}", c["State"]);
    assert_eq!(c["RestartCount"], 0, "Docker does not restart it");
    let logs = text(
        &std::process::Command::new("docker")
            .args(["logs", &name])
            .output()
            .unwrap(),
    );
    assert!(
        logs.contains(&format!("thread {old} was purged"))
            && logs.contains(&format!("`ninetrix up -p {}`", pool.name)),
        "{logs}"
    );

    // `up` gives the replica a new thread (from the API's replica mapping), says so, and
    // recreates its container on it.
    let said = pool.up(&[]);
    let new = state_thread(&pool, 1);
    assert_ne!(new, old);
    assert!(
        said.contains(&format!(
            "bot-1: its thread {old} was purged; it starts a new conversation on thread {new}"
        )),
        "{said}"
    );
    assert_eq!(container_thread(&pool, 1), new.to_string());
    answered(&pool, &[]);
    assert_eq!(turns(&pool.events("bot")), 1);
    // A second `up` has nothing to replace.
    let again = pool.up(&[]);
    assert!(!again.contains("was purged"), "{again}");
}

/// `ninetrix compact` on real Docker (issue 36): the replica's runner compacts its older turns
/// between turns, once; `trace --summaries` shows the summary, `ps --json` the context use, and
/// a second request has nothing to compact. The next turn is answered as before.
#[test]
fn compact_summarizes_a_replicas_older_turns_on_request() {
    let pool = Pool::new("compact");
    // Answers long enough that a summary of four of them is shorter.
    pool.write(&format!(
        "agents:\n  bot:\n    runtime:\n      provider: scripted\n      script: [\"{}\"]\n",
        "A long answer. ".repeat(40).trim_end()
    ));
    pool.up(&[]);
    for _ in 0..6 {
        let out = pool.invoke("bot", "hi", &["--timeout", "60"]);
        assert!(out.status.success(), "{}", text(&out));
    }
    let compact = || pool.ninetrix(&["compact", "-p", &pool.name, "--agent", "bot"]);
    let out = compact();
    assert!(out.status.success(), "{}", text(&out));
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        said.starts_with("bot-1: compacted turns 1–4 (") && said.contains("summarized by scripted"),
        "{said}"
    );
    let again = compact();
    assert!(
        String::from_utf8_lossy(&again.stdout).contains("bot-1: nothing compacted"),
        "{}",
        text(&again)
    );
    let trace = pool.ninetrix(&["trace", "-p", &pool.name, "--agent", "bot", "--summaries"]);
    let trace = text(&trace);
    assert!(
        trace.contains("compacted turns 1–4 (")
            && trace.contains("⇣ turns 1–4 (summarize, requested):"),
        "{trace}"
    );
    assert!(trace.contains("· 1 compaction(s)"), "{trace}");
    let out = pool.invoke("bot", "and now?", &["--timeout", "60"]);
    assert!(out.status.success(), "{}", text(&out));
    // The runner's health report carries the context use after the turn's commit.
    let mut last = serde_json::Value::Null;
    wait_for(
        "ps --json to show the compaction",
        Duration::from_secs(30),
        || {
            let ps = pool.ninetrix(&["ps", "-p", &pool.name, "--json"]);
            last = serde_json::from_slice(&ps.stdout).unwrap_or_default();
            last[0]["context"]["compactions"].as_u64() == Some(1)
        },
    );
    assert!(
        last[0]["context"]["input_tokens"].as_u64() > Some(0),
        "{last}"
    );
}
