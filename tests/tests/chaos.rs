//! The chaos suite: a pool of durable scripted agents doing write-tool turns, fed a stream of
//! deduplicated messages, while nemeses strike at random times — SIGKILL of a runner, SIGKILL of
//! the API process, and a paused runner whose thread a second copy takes over (fencing). At the
//! end every invariant of docs/durability.md is checked through the API and the side-effect files.
//!
//! Three agents write with the builtin `file_write`, one of them behind an approval gate
//! (`governance.human_approval`): a simulated person approves or rejects its requests at random
//! moments — while runners and the API are being killed — and the checks add that each request
//! was decided once, a rejected write never ran and an approved one at most once. Where the MCP
//! packages are installed (`ninetrix-testkit`; else that part says SKIPPED) a fourth agent writes through an MCP server (the Python
//! SDK test server, `append_line` verified by `count_lines`), and one more nemesis SIGKILLs that
//! server and starts it again. A delegator hands every message to the appender as a durable
//! handoff (`collaborators`): its turns, the appender's replicas serving the handed-over sessions
//! and the API all die at random, and the checks add that each of its turns delegated once, to a
//! session of its own that did the task once, and got the reply as the call's outcome.
//!
//! The first appender is sent every third message as a steer (`mode: steer`): it joins the turn
//! running when it arrives, or starts the next; the checks add that it is applied once either
//! way, and every turn — steered or not — completed with one write.
//!
//! The first appender's model calls also lease permits of a pool-wide limiter (`runtime.limits`,
//! one call in flight) and pass a session budget the checkpoint API keeps
//! (`governance.max_budget_per_session`): its leases and spend are taken, renewed and released
//! through the runner and API kills — a lease a killed runner left is freed by its restart's
//! claim, or expires — and the checks above hold for it as for the others: no turn of it failed
//! or was lost waiting for a slot.
//!
//! The second appender's thread compacts its history every few turns (a small
//! `runtime.context.window`): its compactions are SIGKILLed like any commit, and the checks add
//! that no two of them cover the same turns.
//!
//! Triggers live through the API kills too: a schedule firing every second into a session and a
//! signed webhook delivered once per fault (sometimes redelivered with the same id); the checks
//! add that every scheduled second from the first fire to the last landed exactly once — none
//! lost to a kill, none doubled by a restart — and every delivery exactly once.
//!
//! Purges too: about one fault in four starts a doomed conversation (a runner on a thread of its
//! own, given a message) and purges it while the runner works — when the fault is an API kill,
//! the purge is in flight as the API dies and is sent again after the restart. The checks add
//! that every purged thread stays purged (its reads, a claim and its versions are `410 purged`)
//! and that its runner stops by itself.
//!
//! Rewinds too: one conversation of the appender's sessions is sent a rewind to a random ended
//! turn now and then (issue 41) — refused while a turn runs or a message waits, else carried
//! out by whichever session replica serves it, through its kills and the API's. The checks add
//! that every rewind the API accepted was done or failed exactly once, that after a last turn
//! its workspace holds exactly the files of that turn's snapshot (never a half-restored mix),
//! and that no turn number was used twice.
//!
//! Replays too (issue 42): once one of the appender's conversations has ended 4 turns,
//! `ninetrix replay --agent appender --thread <it> -f <the appender as an agentfile> --turns 1..4
//! --json` runs as a child process while the runners and the API die (the replay's runner rides
//! out the API's outages; a run whose own calls to the API failed exits non-zero and the same
//! command runs again), and is itself SIGKILLed now and then and run again. After the faults the
//! same command runs once more (`support::chaos_replay`). The checks add that this final run
//! succeeds and reports the 4 turns, each replayed; that exactly one replay thread exists for
//! the command's key; that its own turns are 1..=4, each ended once, its inbox only the recorded
//! inputs; that it asked no person, handed nothing over, ran nothing (its ledger is empty, its
//! workspace untouched); that the source's turns 1..=4 are as they were before the replay began;
//! and, where those turns have the appender's plain shape, that none diverged.
//!
//! A2A tasks too (issue 43): a caller sends the appender A2A messages over the JSON-RPC endpoint
//! into three contexts (sessions the session replicas serve), and sends earlier ones again with
//! the same `messageId` now and then and after every send the dead API did not answer
//! (`support::chaos_a2a`). The checks add that every answer to a `messageId` named one task,
//! every task completed, answered by exactly one turn, and each context holds one inbox message
//! per `messageId`.
//!
//! The session replicas start as Swarm tasks do, with their replica number only: each (re)start
//! asks the API for the replica's thread, through the API's kills too; the checks add that each
//! replica has exactly one thread.
//!
//! CI profile: `NINETRIX_CHAOS_FAULTS` faults (default 50). Long profile:
//! `NINETRIX_CHAOS_FAULTS=1000 cargo xtask test -E 'binary_id(ninetrix-e2e::chaos)' --no-capture`.
//! Every run prints its seed; `NINETRIX_SEED=<seed>` replays it.

mod support;

use std::time::{Duration, Instant};

use std::collections::HashSet;

use ninetrix_client::ApprovalQuery;
use ninetrix_e2e::{ApiProcess, Lcg, env_or, seed_from_env, signal};
use ninetrix_proto::api::{
    ApprovalStatus, DecisionRequest, ErrorCode, ThreadStatus, ToolCallStatus, Verdict,
};
use ninetrix_proto::events::TraceEvent;
use ninetrix_proto::{Role, ThreadId};
use support::chaos_a2a::A2aTasks;
use support::chaos_replay::{self, Replaying};
use support::mcp::{McpTestServer, mcp_appender_spec};
use support::{Admin, Runner, appender_spec, lines};

/// The appender with a window small enough that its thread compacts every few turns (the
/// scripted model counts a token per four characters of what it is sent).
fn compacting_spec() -> serde_json::Value {
    let mut spec = appender_spec();
    spec["runtime"]["context"] = serde_json::json!({"window": 1000, "window_source": "agentfile",
        "compact_at": 0.5, "keep_recent": {"turns": 1}, "strategy": "summarize", "model": null});
    spec
}

struct Slot {
    spec: serde_json::Value,
    thread: ThreadId,
    workspace: std::path::PathBuf,
    runner: Runner,
    sent: Vec<String>,
    /// Its writes wait for a person's approval.
    gated: bool,
    /// It hands each message to the appender (a handoff) instead of writing itself.
    delegator: bool,
    /// Its environment beyond the runner's basics.
    env: Vec<(&'static str, &'static str)>,
}

impl Slot {
    /// The slot's runner (again): what Docker's restart would start.
    fn start(&self, url: &str) -> Runner {
        Runner::start_with_env(url, self.thread, &self.spec, &self.workspace, &self.env)
    }
}

/// An agent of the sessions' pool that hands every message to the appender and answers when the
/// appender has replied.
fn delegator_spec() -> serde_json::Value {
    let mut spec = appender_spec();
    spec["name"] = "boss".into();
    spec["tools"] = serde_json::json!([
        {"name": "ask_appender", "effect": "write", "effect_pinned": true, "handoff": {"agent": "appender"}}
    ]);
    spec["collaborators"] = serde_json::json!(["appender"]);
    spec["runtime"]["script"] = serde_json::json!([
        {"text": "Delegating.", "tool_calls": [{"name": "ask_appender", "args": {"task": "append a line"}}]},
        {"text": "Delegated.", "tool_calls": []}
    ]);
    spec
}

/// The chaos suite checks exactly-once through any number of kills, so no turn is given up for
/// its restarts here (that budget has its own test, runner_process.rs).
const NO_TURN_BUDGET: (&str, &str) = ("AGENTFILE_TURN_RESTARTS", "1000000");

/// The pool of the sessions' agent.
const SESSION_POOL: &str = "chaos";

/// Every conversation: each message applied once, in order, in its own thread (nothing from
/// another), and one write per message.
async fn check_conversations(admin: &Admin, conversations: &[(ThreadId, Vec<String>)], seed: u64) {
    for (thread, sent) in conversations {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let latest = admin.client.latest(*thread).await.ok().flatten();
            let state = latest.map(|l| l.state);
            if sent.is_empty()
                || state.as_ref().is_some_and(|s| {
                    s.inbox_cursor == sent.len() as u64 && s.status == ThreadStatus::Idle
                })
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "seed {seed}: conversation {thread} did not finish: {state:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if sent.is_empty() {
            continue;
        }
        let h = admin.latest(*thread).await.history;
        if let Err(v) = ninetrix_runner::history::validate(&h) {
            panic!("seed {seed}: conversation {thread}: invalid transcript: {v}");
        }
        let inputs: Vec<String> = h
            .iter()
            .filter(|m| m.role == Role::User)
            .map(|m| m.text_content())
            .collect();
        assert_eq!(&inputs, sent, "seed {seed}: conversation {thread}");
        let ledger = admin.client.tool_calls(*thread).await.unwrap();
        assert_eq!(
            ledger.len(),
            sent.len(),
            "seed {seed}: conversation {thread}: one write per message"
        );
    }
}

/// The appender whose model calls lease a permit first (one call in flight) and pass a session
/// budget the checkpoint API keeps (far above what the scripted model costs: the check runs, it
/// never stops a turn).
fn limited_spec() -> serde_json::Value {
    let mut spec = appender_spec();
    spec["runtime"]["limits"] =
        serde_json::json!({"max_in_flight": 1, "requests_per_minute": 100000});
    spec["governance"]["max_budget_per_session"] = serde_json::json!(1000.0);
    spec
}

/// The appender with every `write` gated.
fn gated_spec() -> serde_json::Value {
    let mut spec = appender_spec();
    spec["governance"]["human_approval"] = serde_json::json!({
        "enabled": true, "actions": [], "effects": ["write"], "timeout_secs": 3600
    });
    spec
}

/// The simulated person: decides some (or, with `all`, every) pending request of a gated slot,
/// approving two in three. A decision that fails (the API is down) is tried again later.
async fn decide(admin: &Admin, slot: &Slot, rng: &mut Lcg, all: bool) -> usize {
    if !slot.gated {
        return 0;
    }
    let query = ApprovalQuery {
        thread: Some(slot.thread),
        status: Some(ApprovalStatus::Pending),
        ..ApprovalQuery::default()
    };
    let Ok(pending) = admin.client.list_approvals(&query).await else {
        return 0;
    };
    let mut decided = 0;
    for request in pending {
        if !all && rng.next(2) == 0 {
            continue;
        }
        let decision = if rng.next(3) == 0 {
            Verdict::Reject
        } else {
            Verdict::Approve
        };
        let body = DecisionRequest {
            decision,
            reason: Some("chaos".into()),
            answer: None,
            by: Some("chaos".into()),
        };
        if admin
            .client
            .decide_approval(request.id, &body)
            .await
            .is_ok()
        {
            decided += 1;
        }
    }
    decided
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos() {
    let faults: usize = env_or("NINETRIX_CHAOS_FAULTS", 50);
    let seed = seed_from_env(&format!("chaos ({faults})"));
    let mut rng = Lcg(seed);
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("api.db").display());
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let url = format!("http://{listen}");
    let mut api = ApiProcess::start_on(&listen, &["--database", &db, "--insecure-dev"]);
    let admin = Admin::new(&url);
    let slot = |i: usize, spec: serde_json::Value| {
        let workspace = dir.path().join(format!("ws{i}"));
        std::fs::create_dir_all(&workspace).unwrap();
        let thread = ThreadId::new_v7();
        Slot {
            runner: Runner::start_with_env(&url, thread, &spec, &workspace, &[NO_TURN_BUDGET]),
            spec,
            thread,
            workspace,
            sent: Vec::new(),
            gated: false,
            delegator: false,
            env: vec![NO_TURN_BUDGET],
        }
    };
    // The second appender's thread compacts every few turns (a small window): its compactions
    // live through the kills too.
    let mut slots: Vec<Slot> = (0..2)
        .map(|i| {
            slot(
                i,
                if i == 1 {
                    compacting_spec()
                } else {
                    limited_spec()
                },
            )
        })
        .collect();
    slots.push(Slot {
        gated: true,
        ..slot(2, gated_spec())
    });
    let mut decisions = 0usize;
    // The MCP writer: its server works in the slot's workspace, so `lines` counts its writes.
    let mut mcp: Option<McpTestServer> =
        ninetrix_testkit::require_part(ninetrix_testkit::Need::Mcp, "the MCP writer").map(|_| {
            let ws = dir.path().join("ws3");
            std::fs::create_dir_all(&ws).unwrap();
            let server = McpTestServer::start(&ws, &dir.path().join("mcp-journal"));
            slots.push(slot(3, mcp_appender_spec(&server.url())));
            server
        });
    let mut mcp_restarts = 0usize;
    // Sessions: two replicas of the appender serve 12 conversations beside their own threads.
    let agent = appender_spec()["name"].as_str().unwrap().to_string();
    // With a card: the appender is an A2A agent too (`support::chaos_a2a`).
    let card = ninetrix_proto::api::AgentCardInfo {
        description: Some("appends a line per message".into()),
        ..Default::default()
    };
    admin
        .client
        .set_replicas(SESSION_POOL, &agent, 2, &[], Some(&card))
        .await
        .unwrap();
    let session_replica = |n: u32| {
        let workspace = dir.path().join(format!("session-replica-{n}"));
        std::fs::create_dir_all(&workspace).unwrap();
        let n = n.to_string();
        // As a Swarm task: its replica number only; the API keeps the replica's thread.
        Runner::start_replica(
            &url,
            &appender_spec(),
            &workspace,
            &[
                ("AGENTFILE_POOL", SESSION_POOL),
                ("AGENTFILE_REPLICA", n.as_str()),
                ("AGENTFILE_AGENT_TOKEN", "insecure-dev"),
                NO_TURN_BUDGET,
            ],
        )
    };
    let mut session_replicas: Vec<Runner> = (1..=2).map(session_replica).collect();
    // The delegator, in the sessions' pool: its handoffs go to sessions of the appender.
    admin
        .client
        .set_replicas(SESSION_POOL, "boss", 1, std::slice::from_ref(&agent), None)
        .await
        .unwrap();
    {
        let workspace = dir.path().join("ws-boss");
        std::fs::create_dir_all(&workspace).unwrap();
        let env = vec![
            ("AGENTFILE_POOL", SESSION_POOL),
            ("AGENTFILE_REPLICA", "1"),
            NO_TURN_BUDGET,
        ];
        let thread = ThreadId::new_v7();
        let spec = delegator_spec();
        slots.push(Slot {
            runner: Runner::start_with_env(&url, thread, &spec, &workspace, &env),
            spec,
            thread,
            workspace,
            sent: Vec::new(),
            gated: false,
            delegator: true,
            env,
        });
    }
    let mut conversations: Vec<(ThreadId, Vec<String>)> = Vec::new();
    for i in 0..12 {
        let t = admin
            .client
            .open_session(SESSION_POOL, &agent, &format!("conversation-{i}"))
            .await
            .unwrap()
            .thread_id;
        conversations.push((t, Vec::new()));
    }
    let mut rewinding = Rewinding {
        thread: admin
            .client
            .open_session(SESSION_POOL, &agent, "rewinding")
            .await
            .unwrap()
            .thread_id,
        sent: 0,
        asked: 0,
        accepted: HashSet::new(),
        refused: 0,
        pending: None,
    };
    let triggers = Triggers::register(&url).await;
    // `ninetrix replay` of a conversation's first turns, run (and re-run) through the faults.
    let mut replaying = Replaying::new(dir.path(), &url, SESSION_POOL, &agent, seed);
    // A2A messages to the appender's pool, some sent again with the same messageId.
    let mut a2a = A2aTasks::new(&url, SESSION_POOL, &agent);
    let mut deliveries: Vec<String> = Vec::new();
    let mut session_kills = 0usize;
    // Doomed threads: each gets a runner and a message, and is purged while it works —
    // sometimes by a request in flight when the API is killed (then sent again, as a client
    // that got no answer would). Each must end purged for good.
    let mut doomed: Vec<(ThreadId, Runner)> = Vec::new();
    let mut purge_in_flight: Option<tokio::task::JoinHandle<()>> = None;
    let mut counts = [0usize; 4];
    let started = Instant::now();
    for fault in 0..faults {
        // Work: one or two new messages, sometimes a retried one (same dedupe key).
        for _ in 0..=rng.next(2) {
            let s = rng.next(slots.len() as u64) as usize;
            let slot = &mut slots[s];
            if !slot.sent.is_empty() && rng.next(5) == 0 {
                let old = rng.next(slot.sent.len() as u64) as usize;
                let content = slot.sent[old].clone();
                admin.send(slot.thread, &content, &format!("k{old}")).await;
            } else {
                let n = slot.sent.len();
                let content = format!("message {n}");
                // The first appender's every third message steers the turn it finds running.
                let mode =
                    (s == 0 && n % 3 == 2).then_some(ninetrix_proto::api::MessageMode::Steer);
                admin
                    .send_as(slot.thread, &content, &format!("k{n}"), mode)
                    .await;
                slot.sent.push(content);
            }
        }
        // A message to a conversation (sometimes sent again: the same dedupe key).
        let c = rng.next(conversations.len() as u64) as usize;
        let (thread, sent) = &mut conversations[c];
        if !sent.is_empty() && rng.next(5) == 0 {
            let n = rng.next(sent.len() as u64) as usize;
            admin
                .send(*thread, &sent[n].clone(), &format!("s{n}"))
                .await;
        } else {
            let n = sent.len();
            let content = format!("conversation {c}: message {n}");
            admin.send(*thread, &content, &format!("s{n}")).await;
            sent.push(content);
        }
        // The rewinding conversation: a message, or now and then a rewind.
        rewinding.step(&admin, &mut rng).await;
        // The replay: started once a conversation has ended its turns, run again after a
        // failure (the API was down), SIGKILLed now and then.
        replaying.step(&admin, &conversations).await;
        a2a.step(&mut rng).await;
        // A webhook delivery, sometimes a redelivery (the same id).
        if !deliveries.is_empty() && rng.next(5) == 0 {
            let old = deliveries[rng.next(deliveries.len() as u64) as usize].clone();
            triggers.deliver(&url, &old).await;
        } else {
            let id = format!("delivery-{}", deliveries.len());
            triggers.deliver(&url, &id).await;
            deliveries.push(id);
        }
        let doom = rng.next(4) == 0;
        if doom {
            let t = ThreadId::new_v7();
            let ws = dir.path().join(format!("doomed-{}", doomed.len()));
            std::fs::create_dir_all(&ws).unwrap();
            let runner = Runner::start_with_env(&url, t, &appender_spec(), &ws, &[NO_TURN_BUDGET]);
            admin.send(t, "a doomed conversation", "d0").await;
            doomed.push((t, runner));
        }
        tokio::time::sleep(Duration::from_millis(rng.next(150))).await;
        // The fault of this round, drawn now so a purge can be in flight when it kills the API.
        let nemesis = rng.next(10);
        let killing_api = (6..=7).contains(&nemesis);
        if let Some(&(t, _)) = doomed.last().filter(|_| doom) {
            if killing_api {
                let client = admin.client.clone();
                purge_in_flight = Some(tokio::spawn(async move {
                    let _ = client.purge(t).await;
                }));
            } else {
                admin.client.purge(t).await.unwrap();
            }
        }
        for slot in &slots {
            decisions += decide(&admin, slot, &mut rng, false).await;
        }
        // SIGKILL of a session replica; it comes back (its sessions resume under it).
        if rng.next(6) == 0 {
            let r = rng.next(2) as usize;
            session_replicas[r].kill();
            session_replicas[r] = session_replica(r as u32 + 1);
            session_kills += 1;
        }
        let s = rng.next(slots.len() as u64) as usize;
        match nemesis {
            // SIGKILL of a runner; Docker would restart it.
            0..=5 => {
                counts[0] += 1;
                let slot = &mut slots[s];
                slot.runner.kill();
                slot.runner = slot.start(&url);
            }
            // SIGKILL of the API; it comes back on the same file and address.
            6..=7 => {
                counts[1] += 1;
                let _ = api.child.kill();
                let _ = api.child.wait();
                tokio::time::sleep(Duration::from_millis(rng.next(300))).await;
                api = ApiProcess::start_on(&listen, &["--database", &db, "--insecure-dev"]);
                if let Some(request) = purge_in_flight.take() {
                    let _ = request.await;
                    let t = doomed.last().unwrap().0;
                    admin.client.purge(t).await.unwrap();
                }
            }
            // A paused runner, a second copy on its thread, then the first resumes: fenced.
            _ => {
                counts[2] += 1;
                let slot = &mut slots[s];
                let stale = slot.runner.child.id();
                signal(stale, "-STOP");
                let replacement = slot.start(&url);
                tokio::time::sleep(Duration::from_millis(100 + rng.next(200))).await;
                signal(stale, "-CONT");
                let mut old = std::mem::replace(&mut slot.runner, replacement);
                // The stale copy must stop by itself (fenced → exit 0) once it tries to write;
                // if it is idle it may never write, so it is stopped after a while.
                match old.wait_exit(Duration::from_millis(300)) {
                    Some(status) => {
                        counts[3] += 1;
                        assert!(
                            status.success(),
                            "seed {seed}: a fenced runner exited with {status}"
                        );
                    }
                    None => old.kill(),
                }
            }
        }
        // A runner that exited (fenced, or failed while the API was down) is restarted, as
        // Docker's on-failure would for failures.
        for slot in &mut slots {
            if let Ok(Some(_)) = slot.runner.child.try_wait() {
                slot.runner = slot.start(&url);
            }
        }
        // SIGKILL of the MCP server (a call in flight is lost), then it comes back.
        if let Some(mcp) = &mut mcp
            && rng.next(8) == 0
        {
            mcp_restarts += 1;
            tokio::task::block_in_place(|| mcp.restart());
        }
        if fault % 25 == 24 {
            eprintln!("chaos: {} faults in {:.0?}", fault + 1, started.elapsed());
        }
    }
    // Let everything finish, then check.
    for slot in &mut slots {
        let last = slot.sent.len() as u64;
        if last == 0 {
            continue;
        }
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            decisions += decide(&admin, slot, &mut rng, true).await;
            let latest = admin.client.latest(slot.thread).await.ok().flatten();
            let state = latest.map(|l| l.state);
            let done = state
                .as_ref()
                .is_some_and(|s| s.inbox_cursor == last && s.status == ThreadStatus::Idle);
            if done {
                break;
            }
            // The API stays up from here on: a runner has no reason to exit, and none is
            // restarted (one that gave up would hide here as a thread that never finishes).
            let kind = match (slot.gated, slot.delegator) {
                (true, _) => "gated writer",
                (_, true) => "delegator",
                _ => "writer",
            };
            assert!(
                Instant::now() < deadline,
                "seed {seed}: thread {} ({kind}) did not finish: {state:?}; its runner: {}",
                slot.thread,
                match slot.runner.child.try_wait() {
                    Ok(Some(status)) => format!("exited ({status})"),
                    _ => "running".to_string(),
                }
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // Too few faults for a conversation to end the replayed turns: one is given them now.
    if !replaying.started() {
        let (thread, sent) = &mut conversations[0];
        while (sent.len() as u64) < chaos_replay::K {
            let n = sent.len();
            let content = format!("conversation 0: message {n}");
            admin.send(*thread, &content, &format!("s{n}")).await;
            sent.push(content);
        }
    }
    check_conversations(&admin, &conversations, seed).await;
    let replayed = replaying.check(&admin, &conversations, seed).await;
    let a2a_tasks = a2a.check(&admin, seed).await;
    let (rewinds, rewinds_failed) = rewinding.check(&admin, dir.path(), seed).await;
    // The session replicas found their threads by replica number through every kill (theirs and
    // the API's, some in the middle of the first ask): one thread per replica, no orphan.
    for n in 1..=2u32 {
        let asked = admin
            .client
            .replica_thread(SESSION_POOL, &agent, n)
            .await
            .unwrap();
        assert!(!asked.created, "seed {seed}: replica {n} had no thread");
    }
    let replica_threads: Vec<_> = admin
        .client
        .list_threads(&ninetrix_client::ThreadQuery {
            pool: Some(SESSION_POOL.into()),
            agent: Some(agent.clone()),
            limit: Some(1000),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_iter()
        // A replay has the pool's and agent's labels only (no replica, no session).
        .filter(|t| t.labels.session.is_none() && t.replay_of.is_none())
        .collect();
    assert_eq!(
        replica_threads.len(),
        2,
        "seed {seed}: one thread per session replica: {replica_threads:?}"
    );
    let mut purged = 0usize;
    for (t, mut runner) in doomed.drain(..) {
        for refused in [
            admin.client.thread(t).await.map(|_| ()),
            admin.client.claim(t, &Default::default()).await.map(|_| ()),
            admin.client.versions(t).await.map(|_| ()),
        ] {
            let code = refused.as_ref().err().and_then(|e| e.code());
            assert_eq!(
                code,
                Some(&ErrorCode::Purged),
                "seed {seed}: purged thread {t}: {refused:?}"
            );
        }
        // Its runner stops by itself: every write it tries is refused for good.
        assert!(
            runner.wait_exit(Duration::from_secs(60)).is_some(),
            "seed {seed}: the runner of purged thread {t} is still running"
        );
        purged += 1;
    }
    let fires = triggers.check(&url, &deliveries, seed).await;
    let mut totals = (0usize, 0usize, 0usize, 0usize);
    let mut compactions = 0;
    for slot in &slots {
        compactions += check(&admin, slot, seed, &mut totals).await;
    }
    eprintln!(
        "chaos: seed {seed}: {faults} faults ({} runner kills, {} API kills, {} fencings, {} stale copies fenced, {mcp_restarts} MCP server kills) in {:.1?}; {} messages, {} repairs, {} writes completed, {} outcomes unknown, {decisions} approval decisions, {} handoffs, {session_kills} session replica kills over {} conversations, {fires} scheduled fires, {} webhook deliveries, {compactions} compactions, {purged} threads purged mid-turn, {rewinds} rewinds done ({rewinds_failed} failed, {} refused), {replayed}, {a2a_tasks}; all invariants hold",
        counts[0],
        counts[1],
        counts[2],
        counts[3],
        started.elapsed(),
        totals.0,
        totals.1,
        totals.2,
        totals.3,
        slots
            .iter()
            .filter(|s| s.delegator)
            .map(|s| s.sent.len())
            .sum::<usize>(),
        conversations.len(),
        deliveries.len(),
        rewinding.refused
    );
    drop(session_replicas);
}

/// A conversation of the appender's sessions that is rewound now and then.
struct Rewinding {
    thread: ThreadId,
    /// Messages sent.
    sent: usize,
    /// Rewinds asked for (each its own dedupe key).
    asked: usize,
    /// The inbox seqs of the rewinds the API stored.
    accepted: HashSet<u64>,
    /// Rewinds refused (a turn ran or a message waited).
    refused: usize,
    /// A rewind whose answer was lost, to ask again with the same key.
    pending: Option<ninetrix_proto::api::RewindRequest>,
}

impl Rewinding {
    /// One round: a message, or (one round in three, once it has turns) a rewind to a random
    /// ended turn. A rewind whose answer was lost (the API killed) is asked again with its key.
    async fn step(&mut self, admin: &Admin, rng: &mut Lcg) {
        if self.sent > 0 && rng.next(3) == 0 {
            let Ok(list) = admin.client.turns(self.thread).await else {
                return;
            };
            if list.turns.is_empty() {
                return;
            }
            let request = self.pending.take().unwrap_or_else(|| {
                self.asked += 1;
                ninetrix_proto::api::RewindRequest {
                    to_turn: list.turns[rng.next(list.turns.len() as u64) as usize].turn_seq,
                    dedupe_key: Some(format!("rewind-{}", self.asked)),
                }
            });
            match admin.client.rewind(self.thread, &request).await {
                Ok(queued) => {
                    self.accepted.insert(queued.seq);
                }
                // No answer (the API was killed): it may be stored; asked again with its key.
                Err(e) if e.is_transient() => self.pending = Some(request),
                Err(_) => self.refused += 1,
            }
        } else {
            let n = self.sent;
            self.sent += 1;
            let _ = admin
                .client
                .enqueue(
                    self.thread,
                    &ninetrix_proto::api::EnqueueRequest {
                        content: format!("rewinding: message {n}"),
                        dedupe_key: Some(format!("rw{n}")),
                        control: None,
                        mode: None,
                    },
                )
                .await;
        }
    }

    /// After one last message: every accepted rewind was done or failed once, the workspace
    /// holds the last turn's snapshot exactly, no turn number was used twice. Returns the rewinds
    /// done and failed.
    async fn check(&mut self, admin: &Admin, dir: &std::path::Path, seed: u64) -> (usize, usize) {
        // A rewind whose answer was lost: ask once more (the API is up now) to learn its fate.
        if let Some(request) = self.pending.take() {
            match admin.client.rewind(self.thread, &request).await {
                Ok(queued) => {
                    self.accepted.insert(queued.seq);
                }
                Err(_) => self.refused += 1,
            }
        }
        let last = admin
            .client
            .enqueue(
                self.thread,
                &ninetrix_proto::api::EnqueueRequest {
                    content: "rewinding: the last message".into(),
                    dedupe_key: Some("rw-last".into()),
                    control: None,
                    mode: None,
                },
            )
            .await
            .unwrap()
            .seq;
        // A session whose task failed during the faults (an API kill) rests up to a minute,
        // with jitter, before its replica takes it again — possibly twice.
        admin
            .wait_done(self.thread, last, Duration::from_secs(240))
            .await;
        let trace = admin.trace(self.thread).await;
        let done = trace
            .iter()
            .filter(|e| matches!(e, TraceEvent::Rewound(_)))
            .count();
        let failed = trace
            .iter()
            .filter(|e| matches!(e, TraceEvent::RewindFailed(_)))
            .count();
        assert_eq!(
            done + failed,
            self.accepted.len(),
            "seed {seed}: each accepted rewind is done or failed once ({done} done, {failed} failed)"
        );
        let list = admin.client.turns(self.thread).await.unwrap();
        let seqs: HashSet<u64> = list.turns.iter().map(|t| t.turn_seq).collect();
        assert_eq!(
            seqs.len(),
            list.turns.len(),
            "seed {seed}: a turn number used twice"
        );
        let newest = list
            .turns
            .iter()
            .filter(|t| t.thread_id == self.thread)
            .max_by_key(|t| t.turn_seq)
            .unwrap();
        assert!(newest.live, "seed {seed}: the last turn is the live one");
        let snapshot = newest
            .snapshot
            .clone()
            .unwrap_or_else(|| panic!("seed {seed}: the last turn has no snapshot"));
        // Its files, read from the store, against the session's workspace on disk.
        let mut want = std::collections::BTreeMap::new();
        let mut stack = vec![snapshot.root.clone()];
        while let Some(id) = stack.pop() {
            let bytes = admin.client.get_object(self.thread, &id).await.unwrap();
            match ninetrix_proto::snapshots::Node::decode(&bytes).unwrap() {
                ninetrix_proto::snapshots::Node::Leaf(files) => {
                    for f in files {
                        let body = admin.client.get_object(self.thread, &f.blob).await.unwrap();
                        want.insert(f.path, body);
                    }
                }
                ninetrix_proto::snapshots::Node::Branch(children) => {
                    stack.extend(children.into_iter().map(|c| c.id));
                }
            }
        }
        let owner = ninetrix_proto::sessions::owner("rewinding", 2);
        let ws = dir
            .join(format!("session-replica-{owner}"))
            .join("sessions")
            .join(self.thread.to_string());
        let mut have = std::collections::BTreeMap::new();
        for e in std::fs::read_dir(&ws).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if name != ninetrix_proto::snapshots::RESERVED_DIR {
                have.insert(name, std::fs::read(e.path()).unwrap());
            }
        }
        assert_eq!(
            have, want,
            "seed {seed}: the rewinding conversation's files are its last turn's snapshot"
        );
        (done, failed)
    }
}

/// Checks one slot's thread; returns its compactions.
async fn check(
    admin: &Admin,
    slot: &Slot,
    seed: u64,
    totals: &mut (usize, usize, usize, usize),
) -> usize {
    let t = slot.thread;
    if slot.sent.is_empty() {
        return 0;
    }
    let latest = admin.latest(t).await;
    let h = &latest.history;
    // Valid for both providers.
    if let Err(v) = ninetrix_runner::history::validate(h) {
        panic!("seed {seed}: thread {t}: invalid transcript: {v}");
    }
    // Every acknowledged message applied exactly once, each turn completed.
    for content in &slot.sent {
        let n = h
            .iter()
            .filter(|m| m.role == Role::User && &m.text_content() == content)
            .count();
        assert_eq!(
            n, 1,
            "seed {seed}: thread {t}: `{content}` applied {n} times"
        );
    }
    // A turn starts at a user message; one right after a tool result, or right after the
    // turn's input (a steer that arrived before the turn's first model round), is a steer that
    // joined the turn running then.
    let inputs: Vec<usize> = h
        .iter()
        .enumerate()
        .filter(|(i, m)| {
            m.role == Role::User && (*i == 0 || !matches!(h[i - 1].role, Role::Tool | Role::User))
        })
        .map(|(i, _)| i)
        .collect();
    for (k, start) in inputs.iter().enumerate() {
        let end = inputs.get(k + 1).copied().unwrap_or(h.len());
        // A compaction record made at the next turn's start stands between the two.
        let Some(last) = h[*start..end]
            .iter()
            .rev()
            .find(|m| m.compaction().is_none())
        else {
            unreachable!("the input itself is no record")
        };
        assert!(
            last.role == Role::Assistant && last.tool_call_ids().next().is_none(),
            "seed {seed}: thread {t}: turn at {start} never completed"
        );
    }
    // Compactions never cover turns twice: each starts where the one before ended.
    let records: Vec<_> = h.iter().filter_map(|m| m.compaction()).collect();
    for pair in records.windows(2) {
        assert_eq!(
            pair[1].from, pair[0].to,
            "seed {seed}: thread {t}: compactions overlap: {pair:?}"
        );
    }
    if slot.spec["runtime"].get("context").is_some() && slot.sent.len() >= 20 {
        assert!(
            !records.is_empty(),
            "seed {seed}: thread {t}: {} turns never compacted",
            slot.sent.len()
        );
    }
    // One linear chain of versions; epochs never go back (no stale write accepted).
    let versions = admin.client.versions(t).await.unwrap();
    let mut last_epoch = 0;
    for (i, v) in versions.iter().enumerate() {
        assert_eq!(
            (v.version, v.parent_version),
            (i as u64 + 1, i as u64),
            "seed {seed}: thread {t}: chain broken"
        );
        let epoch = v.epoch;
        assert!(
            epoch >= last_epoch,
            "seed {seed}: thread {t}: version {} written by stale epoch {epoch} after {last_epoch}",
            i + 1
        );
        last_epoch = epoch;
        if v.truncate_to.is_some() {
            totals.1 += 1;
        }
    }
    // The write tool: never executed twice; ambiguous outcomes reported, not re-run.
    let ledger = admin.client.tool_calls(t).await.unwrap();
    let ok = ledger
        .iter()
        .filter(|r| r.status == ToolCallStatus::Completed)
        .count();
    let unknown = ledger
        .iter()
        .filter(|r| {
            r.status == ToolCallStatus::Failed
                && r.result.as_deref().unwrap_or("").contains("unknown")
        })
        .count();
    if slot.delegator {
        check_handoffs(admin, slot, seed, &ledger, totals).await;
        totals.0 += slot.sent.len();
        return records.len();
    }
    let written = lines(&slot.workspace);
    assert!(
        ok <= written && written <= ok + unknown,
        "seed {seed}: thread {t}: {written} lines, {ok} completed, {unknown} unknown"
    );
    if slot.gated {
        check_approvals(admin, slot, seed, &ledger).await;
    } else {
        assert_eq!(
            ledger.len(),
            inputs.len(),
            "seed {seed}: thread {t}: one write per turn (a steer joins a turn: no write of its own)"
        );
    }
    totals.0 += slot.sent.len();
    totals.2 += ok;
    totals.3 += unknown;
    records.len()
}

/// A gated slot: one request per turn (whatever the crashes), each decided once (one
/// `approval_decided` event), a rejected write never in the ledger (so never run), every write in
/// the ledger approved.
async fn check_approvals(
    admin: &Admin,
    slot: &Slot,
    seed: u64,
    ledger: &[ninetrix_proto::api::ToolCallRecord],
) {
    let t = slot.thread;
    let query = ApprovalQuery {
        thread: Some(t),
        status: None,
        limit: Some(1000),
        ..ApprovalQuery::default()
    };
    let requests = admin.client.list_approvals(&query).await.unwrap();
    assert_eq!(
        requests.len(),
        slot.sent.len(),
        "seed {seed}: thread {t}: one request per turn"
    );
    let approved: HashSet<&str> = requests
        .iter()
        .filter(|r| r.status == ApprovalStatus::Approved)
        .map(|r| r.key.as_str())
        .collect();
    for r in &requests {
        assert!(
            matches!(
                r.status,
                ApprovalStatus::Approved | ApprovalStatus::Rejected
            ),
            "seed {seed}: thread {t}: request {} ended {:?}",
            r.id,
            r.status
        );
    }
    for record in ledger {
        assert!(
            approved.contains(record.key.as_str()),
            "seed {seed}: thread {t}: {} ran without an approval",
            record.key
        );
    }
    assert_eq!(
        ledger.len(),
        approved.len(),
        "seed {seed}: thread {t}: one write per approved request"
    );
    let events = admin.client.events_after(t, 0).await.unwrap();
    for r in &requests {
        let decided = events
            .iter()
            .filter(|e| e.kind == "approval_decided" && e.data["id"] == serde_json::json!(r.id))
            .count();
        assert_eq!(
            decided, 1,
            "seed {seed}: thread {t}: request {} decided {decided} times",
            r.id
        );
    }
}

/// The delegator: one handoff per turn (whatever the crashes on either side), each to a session
/// of its own whose one task was done — its write at most once — and each call's outcome the
/// appender's reply.
async fn check_handoffs(
    admin: &Admin,
    slot: &Slot,
    seed: u64,
    ledger: &[ninetrix_proto::api::ToolCallRecord],
    totals: &mut (usize, usize, usize, usize),
) {
    let t = slot.thread;
    assert_eq!(
        ledger.len(),
        slot.sent.len(),
        "seed {seed}: delegator {t}: one handoff call per turn"
    );
    for record in ledger {
        assert_eq!(
            (record.status, record.result.as_deref()),
            (ToolCallStatus::Completed, Some("Done.")),
            "seed {seed}: delegator {t}: call {} ended without the appender's reply",
            record.key
        );
    }
    let handoffs = admin
        .client
        .list_handoffs(None, Some(t), None)
        .await
        .unwrap();
    assert_eq!(
        handoffs.len(),
        slot.sent.len(),
        "seed {seed}: delegator {t}: one handoff per turn"
    );
    let targets: HashSet<ThreadId> = handoffs.iter().map(|h| h.target_thread_id).collect();
    assert_eq!(
        targets.len(),
        handoffs.len(),
        "seed {seed}: a session per handoff"
    );
    for h in &handoffs {
        assert_eq!(
            h.status,
            ninetrix_proto::api::HandoffStatus::Replied,
            "seed {seed}: handoff {}",
            h.delivery_key
        );
        let session = admin
            .client
            .thread(h.target_thread_id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            session.inbox_seq, 1,
            "seed {seed}: {}: its task once",
            h.delivery_key
        );
        let writes = admin.client.tool_calls(h.target_thread_id).await.unwrap();
        assert_eq!(
            writes.len(),
            1,
            "seed {seed}: {}: one write",
            h.delivery_key
        );
        totals.2 += writes
            .iter()
            .filter(|r| r.status == ToolCallStatus::Completed)
            .count();
    }
}

/// The triggers of the chaos run, in a pool no runner serves (their messages queue in their
/// sessions): a schedule every second and a GitHub-signed webhook.
struct Triggers {
    http: reqwest::Client,
}

const TRIGGER_POOL: &str = "chaos-triggers";
const HOOK_SECRET: &str = "chaos-hook-secret";

impl Triggers {
    async fn register(url: &str) -> Triggers {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap();
        let set = serde_json::json!({"triggers": [
            {"spec": {"name": "clock", "agent": "clock", "session": {"key": "clock"},
                "kind": {"type": "schedule", "every_secs": 1, "timezone": "UTC", "message": "tick",
                         "overlap": "allow", "catch_up": "all", "catch_up_window_secs": 3600}}},
            {"spec": {"name": "hook", "agent": "clock", "session": {"key": "hooks"},
                "kind": {"type": "webhook", "path": "hook", "message": "{{ n }}", "secret": "S",
                         "signature": "github", "tolerance_secs": 300, "rate_limit_per_minute": 60000,
                         "max_body_bytes": 4096}},
             "secret": HOOK_SECRET}
        ]});
        let resp = http
            .put(format!("{url}/v1/pools/{TRIGGER_POOL}/triggers"))
            .json(&set)
            .send()
            .await
            .unwrap();
        assert_eq!(
            resp.status(),
            200,
            "{}",
            resp.text().await.unwrap_or_default()
        );
        Triggers { http }
    }

    /// Delivers `id` (signed) until the API answers it.
    async fn deliver(&self, url: &str, id: &str) {
        let body = serde_json::json!({"n": id}).to_string();
        let signature = ninetrix_e2e::github_signature(HOOK_SECRET.as_bytes(), body.as_bytes());
        let resp = self
            .http
            .post(format!("{url}/v1/hooks/{TRIGGER_POOL}/hook"))
            .header("content-type", "application/json")
            .header("x-hub-signature-256", signature)
            .header("x-github-delivery", id)
            .body(body)
            .send()
            .await
            .unwrap();
        assert!(
            resp.status() == 202 || resp.status() == 200,
            "delivery {id}: {}",
            resp.status()
        );
    }

    /// The dedupe keys of session `key`'s messages.
    async fn keys(&self, url: &str, key: &str) -> Vec<String> {
        let sessions: serde_json::Value = self
            .http
            .get(format!(
                "{url}/v1/sessions?pool={TRIGGER_POOL}&agent=clock&key={key}"
            ))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let thread = sessions[0]["thread_id"]
            .as_str()
            .expect("the session exists")
            .to_string();
        let mut keys = Vec::new();
        let mut after = 0;
        loop {
            let page: serde_json::Value = self
                .http
                .get(format!(
                    "{url}/v1/runners/threads/{thread}/inbox?after={after}&limit=100"
                ))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let page = page.as_array().unwrap();
            if page.is_empty() {
                return keys;
            }
            for m in page {
                keys.push(m["dedupe_key"].as_str().unwrap_or_default().to_string());
                after = m["seq"].as_u64().unwrap();
            }
        }
    }

    /// Every scheduled second from the first fire to the last landed once; every delivery
    /// once. Returns the number of fires.
    async fn check(&self, url: &str, deliveries: &[String], seed: u64) -> usize {
        let clock = self.keys(url, "clock").await;
        let seconds: Vec<i64> = clock
            .iter()
            .map(|k| {
                let t = k.splitn(3, ':').nth(2).expect("schedule:clock:<time>");
                chrono::DateTime::parse_from_rfc3339(t).unwrap().timestamp()
            })
            .collect();
        assert!(
            seconds.len() > 1,
            "seed {seed}: the schedule fired {} times",
            seconds.len()
        );
        for w in seconds.windows(2) {
            assert_eq!(
                w[1],
                w[0] + 1,
                "seed {seed}: scheduled seconds lost or doubled: {clock:?}"
            );
        }
        let hooks = self.keys(url, "hooks").await;
        let expected: HashSet<String> = deliveries
            .iter()
            .map(|d| format!("webhook:hook:{d}"))
            .collect();
        assert_eq!(
            hooks.len(),
            expected.len(),
            "seed {seed}: each delivery once: {hooks:?}"
        );
        assert_eq!(
            hooks.into_iter().collect::<HashSet<_>>(),
            expected,
            "seed {seed}"
        );
        seconds.len()
    }
}
