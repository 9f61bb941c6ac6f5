//! Sessions served by an agent's replicas, as processes against a real `ninetrix api`: each
//! replica finds the sessions it owns (rendezvous hashing over the recorded replica count) and
//! serves them beside its own thread. Every message is answered once, in its own conversation,
//! with its side effect once — through random SIGKILLs of replicas and through scaling 3 → 4 → 2
//! while messages flow.

mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use ninetrix_e2e::{Lcg, env_or, seed_from_env};
use ninetrix_proto::api::ThreadStatus;
use ninetrix_proto::{Role, ThreadId, sessions};
use serde_json::{Value, json};
use support::openai::{answer_stream, stream_response};
use support::{Runner, Setup, appender_spec, setup};

const POOL: &str = "shop";

/// A replica process of the appender agent: its own thread, and the sessions it owns.
fn replica(s: &Setup, spec: &Value, n: u32) -> Runner {
    let workspace = s.dir.path().join(format!("replica-{n}"));
    std::fs::create_dir_all(&workspace).unwrap();
    let n = n.to_string();
    Runner::start_with_env(
        &s.api.url,
        ThreadId::new_v7(),
        spec,
        &workspace,
        &[
            ("AGENTFILE_POOL", POOL),
            ("AGENTFILE_REPLICA", n.as_str()),
            ("AGENTFILE_AGENT_TOKEN", "insecure-dev"),
        ],
    )
}

struct Sessions {
    /// Session key → its thread and the messages sent to it.
    sent: HashMap<String, (ThreadId, Vec<String>)>,
}

impl Sessions {
    async fn send(&mut self, s: &Setup, key: &str) {
        let agent = appender_spec()["name"].as_str().unwrap().to_string();
        let thread = match self.sent.get(key) {
            Some((t, _)) => *t,
            None => {
                s.admin
                    .client
                    .open_session(POOL, &agent, key)
                    .await
                    .unwrap()
                    .thread_id
            }
        };
        let entry = self
            .sent
            .entry(key.to_string())
            .or_insert((thread, Vec::new()));
        let n = entry.1.len();
        let content = format!("{key}: message {n}");
        s.admin.send(thread, &content, &format!("{key}-{n}")).await;
        entry.1.push(content);
    }

    /// Waits until every session has answered every message, then checks each conversation.
    async fn check(&self, s: &Setup, seed: u64) {
        let deadline = Instant::now() + Duration::from_secs(180);
        for (key, (thread, sent)) in &self.sent {
            loop {
                let latest = s.admin.client.latest(*thread).await.ok().flatten();
                let state = latest.as_ref().map(|l| l.state.clone());
                if state.as_ref().is_some_and(|st| {
                    st.inbox_cursor == sent.len() as u64 && st.status == ThreadStatus::Idle
                }) {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "seed {seed}: session {key} did not finish: {state:?}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let h = s.admin.latest(*thread).await.history;
            if let Err(v) = ninetrix_runner::history::validate(&h) {
                panic!("seed {seed}: session {key}: invalid transcript: {v}");
            }
            // Its own messages, each once, in order — nothing from another session.
            let inputs: Vec<String> = h
                .iter()
                .filter(|m| m.role == Role::User)
                .map(|m| m.text_content())
                .collect();
            assert_eq!(&inputs, sent, "seed {seed}: session {key}");
            // One side effect per message, in the session's own workspace.
            let ledger = s.admin.client.tool_calls(*thread).await.unwrap();
            assert_eq!(
                ledger.len(),
                sent.len(),
                "seed {seed}: session {key}: one write per turn"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_sessions_over_three_replicas_through_random_kills() {
    let seed = seed_from_env("sessions");
    let mut rng = Lcg(seed);
    let s = setup();
    let spec = appender_spec();
    let agent = spec["name"].as_str().unwrap().to_string();
    s.admin
        .client
        .set_replicas(POOL, &agent, 3, &[], None)
        .await
        .unwrap();
    let mut replicas: Vec<Runner> = (1..=3).map(|n| replica(&s, &spec, n)).collect();
    let mut all = Sessions {
        sent: HashMap::new(),
    };
    let count: usize = env_or("NINETRIX_SESSIONS", 200);
    let kills: usize = env_or("NINETRIX_SESSION_KILLS", 12);
    let mut killed = 0;
    for i in 0..count {
        all.send(&s, &format!("customer-{i}")).await;
        // Some sessions get a second message later.
        if i % 3 == 0 {
            let again = rng.next(i as u64 + 1) as usize;
            all.send(&s, &format!("customer-{again}")).await;
        }
        if killed < kills && rng.next((count / kills.max(1)) as u64) == 0 {
            let r = rng.next(3) as usize;
            replicas[r].kill();
            replicas[r] = replica(&s, &spec, r as u32 + 1);
            killed += 1;
        }
    }
    all.check(&s, seed).await;
    // Each session was served by its owner (its claims name no other replica's runner: the
    // thread's boot count is small and its owner is the key's).
    let listed = s
        .admin
        .client
        .list_sessions(
            &ninetrix_client::ThreadQuery {
                pool: Some(POOL.into()),
                limit: Some(1000),
                ..Default::default()
            },
            None,
        )
        .await
        .unwrap();
    assert_eq!(listed.len(), count);
    let per_replica = listed.iter().fold([0usize; 3], |mut acc, t| {
        acc[(sessions::owner(t.labels.session.as_deref().unwrap(), 3) - 1) as usize] += 1;
        acc
    });
    assert!(
        per_replica.iter().all(|&n| n > count / 6),
        "{per_replica:?}"
    );
    eprintln!(
        "sessions: seed {seed}: {count} sessions, {} messages, {killed} replica kills; per replica {per_replica:?}",
        all.sent.values().map(|(_, m)| m.len()).sum::<usize>()
    );
    drop(replicas);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_three_to_four_to_two_while_messages_flow_loses_and_repeats_nothing() {
    let seed = seed_from_env("sessions scaling");
    let mut rng = Lcg(seed);
    let s = setup();
    let spec = appender_spec();
    let agent = spec["name"].as_str().unwrap().to_string();
    s.admin
        .client
        .set_replicas(POOL, &agent, 3, &[], None)
        .await
        .unwrap();
    let mut replicas: Vec<Runner> = (1..=3).map(|n| replica(&s, &spec, n)).collect();
    let mut all = Sessions {
        sent: HashMap::new(),
    };
    let keys: Vec<String> = (0..60).map(|i| format!("user-{i}")).collect();
    // 40 messages to sessions picked at random.
    let burst = |rng: &mut Lcg| -> Vec<String> {
        (0..40)
            .map(|_| keys[rng.next(keys.len() as u64) as usize].clone())
            .collect()
    };
    for key in burst(&mut rng) {
        all.send(&s, &key).await;
    }
    // 3 → 4: the fourth replica starts, then the count moves; the sessions it now owns move to it.
    replicas.push(replica(&s, &spec, 4));
    s.admin
        .client
        .set_replicas(POOL, &agent, 4, &[], None)
        .await
        .unwrap();
    for key in burst(&mut rng) {
        all.send(&s, &key).await;
    }
    // 4 → 2: the count moves first, then replicas 3 and 4 go (one killed mid-work, one stopped).
    s.admin
        .client
        .set_replicas(POOL, &agent, 2, &[], None)
        .await
        .unwrap();
    for key in burst(&mut rng) {
        all.send(&s, &key).await;
    }
    let mut fourth = replicas.pop().unwrap();
    fourth.kill();
    let mut third = replicas.pop().unwrap();
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &third.child.id().to_string()])
        .status();
    assert!(
        third.wait_exit(Duration::from_secs(20)).is_some(),
        "a stopped replica exits"
    );
    for key in burst(&mut rng) {
        all.send(&s, &key).await;
    }
    all.check(&s, seed).await;
    drop(replicas);
}

/// A fake OpenAI that answers at once, except a request whose conversation mentions "slow",
/// which it holds until `release` is notified (`held` is notified when one arrives).
async fn openai_with_a_slow_lane(
    held: std::sync::Arc<tokio::sync::Notify>,
    release: std::sync::Arc<tokio::sync::Notify>,
) -> String {
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move |body: String| {
            let (held, release) = (held.clone(), release.clone());
            async move {
                if body.contains("slow") {
                    let go = release.notified();
                    held.notify_one();
                    go.await;
                    return stream_response(answer_stream("Slow answer."));
                }
                stream_response(answer_stream("Fast answer."))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_sessions_long_turn_does_not_block_the_others() {
    let s = setup();
    let held = std::sync::Arc::new(tokio::sync::Notify::new());
    let release = std::sync::Arc::new(tokio::sync::Notify::new());
    let base_url = openai_with_a_slow_lane(held.clone(), release.clone()).await;
    let spec = json!({
        "name": "talker",
        "metadata": {"name": null, "description": null, "role": "test agent", "goal": null, "instructions": null, "constraints": []},
        "runtime": {"provider": "openai", "via": null, "model": "gpt-4o-mini", "base_url": base_url, "api_key_secret": "FAKE_OPENAI_KEY",
                    "temperature": 0.2, "max_tokens": 1024, "tool_timeout_secs": 30, "image": null,
                    "resources": {"cpu": null, "memory_bytes": null}, "script": []},
        "tools": [],
        "execution": {"durability": true, "replicas": 1, "max_turns": 10, "task": null, "resume": "truncate", "max_concurrent_sessions": 2},
        "governance": {"max_budget_per_run": null}, "env": {}, "secrets": ["FAKE_OPENAI_KEY"]
    });
    let workspace = s.dir.path().join("replica-1");
    std::fs::create_dir_all(&workspace).unwrap();
    let _replica = Runner::start_with_env(
        &s.api.url,
        ThreadId::new_v7(),
        &spec,
        &workspace,
        &[
            ("AGENTFILE_POOL", POOL),
            ("AGENTFILE_REPLICA", "1"),
            ("AGENTFILE_AGENT_TOKEN", "insecure-dev"),
            ("FAKE_OPENAI_KEY", "sk-fake"),
        ],
    );
    let open = |key: &'static str| {
        let admin = s.admin.clone();
        async move {
            admin
                .client
                .open_session(POOL, "talker", key)
                .await
                .unwrap()
                .thread_id
        }
    };
    let (slow, fast) = (open("slow-customer").await, open("fast-customer").await);
    let armed = held.notified();
    let slow_seq = s.admin.send(slow, "a slow question", "s1").await;
    tokio::time::timeout(Duration::from_secs(30), armed)
        .await
        .expect("the slow turn reaches the model");
    // While that turn is held, another session is answered.
    let fast_seq = s.admin.send(fast, "a quick one", "f1").await;
    let done = s
        .admin
        .wait_turn(fast, fast_seq, Duration::from_secs(30))
        .await;
    assert_eq!(done.reply, "Fast answer.");
    let slow_state = s.admin.client.latest(slow).await.unwrap();
    assert!(
        slow_state.is_none_or(|l| l.state.inbox_cursor < slow_seq),
        "the slow turn is still held"
    );
    release.notify_one();
    let done = s
        .admin
        .wait_turn(slow, slow_seq, Duration::from_secs(30))
        .await;
    assert_eq!(done.reply, "Slow answer.");
}
