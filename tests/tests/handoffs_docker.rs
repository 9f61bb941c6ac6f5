//! Handoffs between agents on the real Docker Engine, through the CLI: a chain lead → researcher →
//! writer whose every hop's container is SIGKILLed (its host PID, so Docker's restart policy
//! brings it back) while the handoff is under way — every delegated task done once, the right
//! final reply; a fan-out to two collaborators that work at the same time; a cycle stopped by
//! the depth limit; and a collaborator that gave up (its restart budget spent), whose call fails
//! after `transfer_timeout` with an error naming it.

mod support;

use std::collections::{HashMap, HashSet};
use std::process::{Child, Stdio};
use std::time::Duration;

use serde_json::Value;
use support::docker::{Pool, inspect, kill_host_pid, text, wait_for};

/// `trace --follow-handoffs --json` of the agent's first replica: every event of its thread and
/// of the sessions its handoffs reached, each with its `thread_id`.
fn tree(pool: &Pool, agent: &str) -> Vec<Value> {
    let out = pool
        .command(&[
            "trace",
            "-p",
            &pool.name,
            "--agent",
            agent,
            "--follow-handoffs",
            "--json",
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// `ninetrix invoke` in the background.
fn invoke(pool: &Pool, agent: &str, message: &str) -> Child {
    pool.command(&[
        "invoke",
        "-p",
        &pool.name,
        "--agent",
        agent,
        "-m",
        message,
        "--timeout",
        "240",
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap()
}

fn finished(child: Child) -> (i32, String, String) {
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
        text(&out),
    )
}

/// Kills a container's host PID and waits for Docker to have restarted it.
fn crash(pool: &Pool, agent: &str) {
    let name = pool.container(agent, 1);
    let before = inspect(&name)["RestartCount"].as_i64().unwrap_or(0);
    kill_host_pid(&name);
    wait_for(
        &format!("{name} restarted"),
        Duration::from_secs(60),
        || {
            let c = inspect(&name);
            c["RestartCount"].as_i64().unwrap_or(0) > before
                && c["State"]["Status"] == "running"
                && c["State"]["Pid"].as_i64().unwrap_or(0) > 0
        },
    );
}

/// Whether the tree has an event of `kind` matching `pred`.
fn has(events: &[Value], kind: &str, pred: impl Fn(&Value) -> bool) -> bool {
    events.iter().any(|e| e["type"] == kind && pred(e))
}

/// Executed (not replayed) calls of `tool` per thread.
fn executed(events: &[Value], tool: &str) -> HashMap<String, usize> {
    let mut n = HashMap::new();
    for e in events {
        if e["type"] == "tool_call" && e["data"]["name"] == tool {
            *n.entry(e["thread_id"].as_str().unwrap_or_default().to_string())
                .or_default() += 1;
        }
    }
    n
}

#[test]
fn a_chain_of_three_survives_a_crash_of_every_hop() {
    let pool = Pool::new("hand");
    pool.write(
        "agents:
  lead:
    collaborators: [researcher]
    runtime:
      provider: scripted
      script:
        - tool_calls: [{ name: ask_researcher, args: { task: find the answer } }]
        - 'lead: done'
  researcher:
    metadata: { description: Finds answers. }
    collaborators: [writer]
    tools: [file_write, sleep]
    runtime:
      provider: scripted
      script:
        - tool_calls: [{ name: ask_writer, args: { task: write it down } }]
        - tool_calls: [{ name: file_write, args: { path: notes.txt, content: \"researched\\n\", mode: append } }]
        - 'researcher: 42'
  writer:
    tools: [file_write, sleep]
    runtime:
      provider: scripted
      script:
        - tool_calls: [{ name: sleep, args: { seconds: 3 } }]
        - tool_calls: [{ name: file_write, args: { path: draft.txt, content: \"written\\n\", mode: append } }]
        - 'writer: the draft'
",
    );
    pool.up(&[]);
    let child = invoke(&pool, "lead", "what is the answer?");

    // The lead waits for the researcher: crash it.
    wait_for("the lead's handoff", Duration::from_secs(60), || {
        has(&tree(&pool, "lead"), "handoff_sent", |e| {
            e["data"]["agent"] == "researcher"
        })
    });
    crash(&pool, "lead");
    // The researcher waits for the writer: crash it.
    wait_for("the researcher's handoff", Duration::from_secs(60), || {
        has(&tree(&pool, "lead"), "handoff_sent", |e| {
            e["data"]["agent"] == "writer"
        })
    });
    crash(&pool, "researcher");
    // The writer is in the middle of its turn: crash it.
    wait_for("the writer's turn", Duration::from_secs(60), || {
        has(&tree(&pool, "lead"), "handoff_received", |e| {
            e["data"]["from_agent"] == "researcher"
        })
    });
    crash(&pool, "writer");

    let (code, stdout, all) = finished(child);
    assert_eq!(code, 0, "{all}");
    assert_eq!(stdout, "lead: done\n", "{all}");
    let events = tree(&pool, "lead");
    // One handoff per hop (a restarted caller re-attached to its own), each replied.
    let sent: HashSet<(String, String)> = events
        .iter()
        .filter(|e| e["type"] == "handoff_sent")
        .map(|e| {
            (
                e["data"]["agent"].as_str().unwrap().to_string(),
                e["data"]["delivery_key"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        sent.iter().map(|(a, _)| a.as_str()).collect::<HashSet<_>>(),
        HashSet::from(["researcher", "writer"]),
        "{sent:?}"
    );
    assert_eq!(sent.len(), 2, "one delegation per hop: {sent:?}");
    assert!(
        has(&events, "handoff_sent", |e| e["data"]["reattached"] == true),
        "a restarted caller re-attached"
    );
    let settled: Vec<(&str, &str)> = events
        .iter()
        .filter(|e| e["type"] == "handoff_settled")
        .map(|e| {
            (
                e["data"]["agent"].as_str().unwrap(),
                e["data"]["reply"].as_str().unwrap(),
            )
        })
        .collect();
    assert!(
        settled.contains(&("researcher", "researcher: 42")),
        "{settled:?}"
    );
    assert!(
        settled.contains(&("writer", "writer: the draft")),
        "{settled:?}"
    );
    // Each side effect once, in the session of the hop that made it.
    let writes = executed(&events, "file_write");
    assert_eq!(writes.len(), 2, "{writes:?}");
    assert!(writes.values().all(|&n| n == 1), "{writes:?}");
    let lead_thread = events
        .iter()
        .find(|e| e["type"] == "handoff_sent" && e["data"]["agent"] == "researcher")
        .map(|e| e["thread_id"].as_str().unwrap().to_string())
        .unwrap();
    assert!(
        !writes.contains_key(&lead_thread),
        "the lead wrote nothing itself"
    );
}

#[test]
fn calls_to_two_collaborators_run_at_the_same_time() {
    let pool = Pool::new("fan");
    pool.write(
        "agents:
  lead:
    collaborators: [flights, hotels]
    runtime:
      provider: scripted
      script:
        - tool_calls:
            - { name: ask_flights, args: { task: find a flight } }
            - { name: ask_hotels, args: { task: find a hotel } }
        - 'lead: booked'
  flights:
    tools: [sleep]
    runtime:
      provider: scripted
      script:
        - tool_calls: [{ name: sleep, args: { seconds: 3 } }]
        - 'flights: TP 1234'
  hotels:
    tools: [sleep]
    runtime:
      provider: scripted
      script:
        - tool_calls: [{ name: sleep, args: { seconds: 3 } }]
        - 'hotels: Hotel Lisboa'
",
    );
    pool.up(&[]);
    let (code, stdout, all) = finished(invoke(&pool, "lead", "plan my trip"));
    assert_eq!((code, stdout.as_str()), (0, "lead: booked\n"), "{all}");
    let events = tree(&pool, "lead");
    // Each collaborator's turn started before either had replied: they worked at the same time.
    let at = |kind: &str, agent: &str| -> chrono::DateTime<chrono::Utc> {
        let session = events
            .iter()
            .find(|e| e["type"] == "handoff_sent" && e["data"]["agent"] == agent)
            .map(|e| e["data"]["thread_id"].clone())
            .unwrap_or_else(|| panic!("no handoff to {agent}: {events:#?}"));
        events
            .iter()
            .find(|e| e["type"] == kind && e["thread_id"] == session)
            .and_then(|e| e["data"]["at"].as_str())
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("no {kind} in {agent}'s session: {events:#?}"))
    };
    let started = at("turn_started", "flights").max(at("turn_started", "hotels"));
    let replied = at("handoff_replied", "flights").min(at("handoff_replied", "hotels"));
    assert!(
        started < replied,
        "both worked at once: the last start {started} is before the first reply {replied}"
    );
    let settled: HashSet<&str> = events
        .iter()
        .filter(|e| e["type"] == "handoff_settled" && e["data"]["status"] == "replied")
        .map(|e| e["data"]["reply"].as_str().unwrap())
        .collect();
    assert_eq!(
        settled,
        HashSet::from(["flights: TP 1234", "hotels: Hotel Lisboa"])
    );
}

#[test]
fn a_cycle_is_stopped_by_the_depth_limit() {
    let pool = Pool::new("cyc");
    pool.write(
        "execution: { max_delegation_depth: 3 }
agents:
  ping:
    collaborators: [pong]
    runtime:
      provider: scripted
      script:
        - tool_calls: [{ name: ask_pong, args: { task: your turn } }]
        - 'ping: done'
  pong:
    collaborators: [ping]
    runtime:
      provider: scripted
      script:
        - tool_calls: [{ name: ask_ping, args: { task: your turn } }]
        - 'pong: done'
",
    );
    pool.up(&[]);
    let (code, stdout, all) = finished(invoke(&pool, "ping", "start"));
    assert_eq!((code, stdout.as_str()), (0, "ping: done\n"), "{all}");
    let events = tree(&pool, "ping");
    let handoffs = events
        .iter()
        .filter(|e| e["type"] == "handoff_sent")
        .count();
    assert_eq!(handoffs, 3, "ping → pong → ping → pong, then no more");
    let refused: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "handoff_refused")
        .collect();
    assert_eq!(refused.len(), 1, "{events:#?}");
    assert_eq!(
        refused[0]["data"]["chain"],
        serde_json::json!(["ping", "pong", "ping", "pong", "ping"])
    );
    assert_eq!(refused[0]["data"]["max_depth"], 3);
}

#[test]
fn a_collaborator_that_gave_up_fails_the_call_after_the_transfer_timeout() {
    let pool = Pool::new("gone");
    pool.write(
        "agents:
  lead:
    collaborators: [flaky]
    transfer_timeout: 8s
    runtime:
      provider: scripted
      script:
        - tool_calls: [{ name: ask_flaky, args: { task: do it } }]
        - 'lead: carried on without flaky'
  flaky:
    runtime:
      provider: scripted
      script: ['flaky: done']
",
    );
    pool.up(&[]);
    // Four crashes: Docker's `on-failure:3` restarts it three times, then gives up.
    let name = pool.container("flaky", 1);
    for _ in 0..3 {
        crash(&pool, "flaky");
    }
    kill_host_pid(&name);
    wait_for("flaky given up", Duration::from_secs(60), || {
        inspect(&name)["State"]["Running"] == false
    });
    let (code, stdout, all) = finished(invoke(&pool, "lead", "go"));
    assert_eq!(
        (code, stdout.as_str()),
        (0, "lead: carried on without flaky\n"),
        "{all}"
    );
    let events = tree(&pool, "lead");
    let settled = events
        .iter()
        .find(|e| e["type"] == "handoff_settled")
        .unwrap_or_else(|| panic!("{events:#?}"));
    assert_eq!(settled["data"]["status"], "timed_out");
    let reply = settled["data"]["reply"].as_str().unwrap();
    assert!(reply.contains("`flaky` did not reply within 8s"), "{reply}");
    assert!(
        settled["data"]["waited_ms"].as_u64().unwrap() >= 8000,
        "{settled}"
    );
    // `ps` tells the truth about it.
    let ps = text(&pool.command(&["ps", "-p", &pool.name]).output().unwrap());
    assert!(ps.contains("flaky-1"), "{ps}");
}
