//! `ninetrix api` as a process: acknowledged checkpoints survive SIGKILL, a purge killed before or
//! after its commit is all or nothing, an A2A task killed at its send's commit is made once, a model lease or its release killed at its commit is
//! granted once and counted once, SIGTERM drains and exits 0, and it refuses to start without a
//! secret or with a lease time out of range.

use std::time::Duration;

use ninetrix_client::Client;
use ninetrix_e2e::{ApiProcess, ninetrix_bin};
use ninetrix_proto::api::{
    CheckpointRequest, CheckpointState, LeaseRelease, LeaseRequest, LeaseResponse, ModelLimits,
    SlotWait, ThreadStatus,
};
use ninetrix_proto::{Message, Role, ThreadId};

fn checkpoint(epoch: u64, parent: u64) -> CheckpointRequest {
    CheckpointRequest {
        epoch,
        parent_version: parent,
        truncate_to: None,
        append: vec![Message::text(Role::User, format!("message {parent}"))],
        state: CheckpointState {
            turn_seq: parent,
            turn_start_history_len: 0,
            status: ThreadStatus::InTurn,
            inbox_cursor: 0,
            usage: Default::default(),
            handoff: None,
            attempt: None,
            context: None,
            ..Default::default()
        },
    }
}

fn client(url: &str) -> Client {
    Client::new(ninetrix_client::http_client(), url, None)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_checkpoints_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("api.db").display());
    let mut api = ApiProcess::start(&["--database", &db, "--insecure-dev"]);
    let writer = client(&api.url);
    let threads: Vec<ThreadId> = (0..4).map(|_| ThreadId::new_v7()).collect();
    let mut epochs = Vec::new();
    for t in &threads {
        let claim = writer.claim(*t, &Default::default()).await.unwrap();
        epochs.push(claim.epoch);
    }
    // Four writers append as fast as they can; the process is killed mid-stream.
    let (acked_tx, mut acked_rx) = tokio::sync::mpsc::unbounded_channel::<(usize, u64)>();
    let mut writers = Vec::new();
    for (i, (t, epoch)) in threads
        .iter()
        .copied()
        .zip(epochs.iter().copied())
        .enumerate()
    {
        let (writer, tx) = (writer.clone(), acked_tx.clone());
        writers.push(tokio::spawn(async move {
            for parent in 0.. {
                // Only a 201 acknowledges a version; any failure (the kill) ends this writer.
                match writer
                    .append_checkpoint(t, &checkpoint(epoch, parent))
                    .await
                {
                    Ok(_) => {
                        let _ = tx.send((i, parent + 1));
                    }
                    Err(_) => return,
                }
            }
        }));
    }
    drop(acked_tx);
    let mut acked = vec![0u64; threads.len()];
    let mut total = 0;
    while let Some((i, version)) = acked_rx.recv().await {
        acked[i] = acked[i].max(version);
        total += 1;
        if total == 400 {
            api.child.kill().unwrap(); // SIGKILL
            break;
        }
    }
    while let Some((i, version)) = acked_rx.recv().await {
        acked[i] = acked[i].max(version);
    }
    for w in writers {
        w.await.unwrap();
    }
    api.child.wait().unwrap();
    assert!(acked.iter().sum::<u64>() >= 400);

    let api = ApiProcess::start(&["--database", &db, "--insecure-dev"]);
    let reader = client(&api.url);
    for (t, acked) in threads.iter().zip(&acked) {
        let versions = reader.versions(*t).await.unwrap();
        let chain: Vec<(u64, u64)> = versions
            .iter()
            .map(|v| (v.version, v.parent_version))
            .collect();
        assert!(
            chain.len() as u64 >= *acked,
            "thread {t}: {} versions survived, {acked} were acknowledged",
            chain.len()
        );
        for (i, (version, parent)) in chain.iter().enumerate() {
            assert_eq!(
                (*version, *parent),
                (i as u64 + 1, i as u64),
                "one linear chain"
            );
        }
        let latest = reader.latest(*t).await.unwrap().unwrap();
        assert_eq!(latest.history.len(), chain.len());
    }
}

/// A `ninetrix api` on SQLite in `dir` (with `extra` flags) that dies at kill point `point`, and
/// how to start it again.
fn crashing_api(dir: &std::path::Path, point: &str, extra: &[&str]) -> (ApiProcess, Again) {
    let db = format!("sqlite://{}", dir.join("api.db").display());
    let mut args = vec!["--database".to_string(), db, "--insecure-dev".to_string()];
    args.extend(extra.iter().map(|a| a.to_string()));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let api = ApiProcess::start_with_env("127.0.0.1:0", &refs, &[("NINETRIX_API_CRASH_AT", point)]);
    let listen = api.url.trim_start_matches("http://").to_string();
    (api, Again { args, listen })
}

/// A crashed API's arguments and address.
struct Again {
    args: Vec<String>,
    listen: String,
}

impl Again {
    /// The API started again where it listened, on the same database, without the kill point.
    fn start(&self) -> ApiProcess {
        let refs: Vec<&str> = self.args.iter().map(String::as_str).collect();
        ApiProcess::start_on(&self.listen, &refs)
    }
}

/// Waits for the API to abort at its armed kill point (SIGABRT), as a crash there would leave it.
fn aborted(api: &mut ApiProcess, point: &str) {
    use std::os::unix::process::ExitStatusExt as _;
    let status = api
        .wait_exit(Duration::from_secs(30))
        .expect("the API aborted at the kill point");
    assert_eq!(status.signal(), Some(6), "{point}: {status:?}");
}

/// A replica's thread is made in one transaction with kill points before and after its commit
/// (`NINETRIX_API_CRASH_AT=replica_thread_before_commit|replica_thread_after_commit`): killed
/// before, nothing is kept and the runner's retry makes it; killed after, the retry gets the
/// thread that was made. Either way the replica has exactly one thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_thread_killed_at_its_commit_is_made_once() {
    for (point, committed) in [
        ("replica_thread_before_commit", false),
        ("replica_thread_after_commit", true),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (mut api, again) = crashing_api(dir.path(), point, &[]);
        assert!(
            client(&api.url)
                .replica_thread("fleet", "bot", 2)
                .await
                .is_err(),
            "{point}: the API died before answering"
        );
        aborted(&mut api, point);

        let api = again.start();
        let c = client(&api.url);
        let labelled = ninetrix_client::ThreadQuery {
            pool: Some("fleet".into()),
            ..Default::default()
        };
        let before = c.list_threads(&labelled).await.unwrap();
        assert_eq!(before.len(), usize::from(committed), "{point}: {before:?}");
        let retried = c.replica_thread("fleet", "bot", 2).await.unwrap();
        assert_eq!(retried.created, !committed, "{point}");
        if let Some(kept) = before.first() {
            assert_eq!(
                retried.thread_id, kept.thread_id,
                "{point}: the thread made"
            );
        }
        let after = c.list_threads(&labelled).await.unwrap();
        assert_eq!(after.len(), 1, "{point}: one thread for the replica");
        assert_eq!(after[0].labels.replica, Some(2));
    }
}

/// A purge is one transaction with kill points before and after its commit
/// (`NINETRIX_API_CRASH_AT=purge_before_commit|purge_after_commit`): killed before, the thread is
/// whole after the restart and the purge can be sent again; killed after, it is purged for good —
/// never half deleted, never re-created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_killed_at_its_commit_is_all_or_nothing() {
    for (point, committed) in [("purge_before_commit", false), ("purge_after_commit", true)] {
        let dir = tempfile::tempdir().unwrap();
        let (mut api, again) = crashing_api(dir.path(), point, &[]);
        let c = client(&api.url);
        let thread = ThreadId::new_v7();
        let epoch = c.claim(thread, &Default::default()).await.unwrap().epoch;
        c.append_checkpoint(thread, &checkpoint(epoch, 0))
            .await
            .unwrap();
        c.enqueue(
            thread,
            &ninetrix_proto::api::EnqueueRequest {
                content: "hi".into(),
                dedupe_key: None,
                control: None,
                mode: None,
            },
        )
        .await
        .unwrap();
        assert!(
            c.purge(thread).await.is_err(),
            "{point}: the API died before answering"
        );
        aborted(&mut api, point);

        let api = again.start();
        let c = client(&api.url);
        if committed {
            let gone = c.thread(thread).await.unwrap_err();
            assert_eq!(
                gone.code(),
                Some(&ninetrix_proto::api::ErrorCode::Purged),
                "{point}: {gone}"
            );
            assert!(
                !c.purge(thread).await.unwrap(),
                "{point}: nothing left to purge"
            );
        } else {
            let latest = c
                .latest(thread)
                .await
                .unwrap()
                .expect("the thread is whole");
            assert_eq!((latest.version, latest.history.len()), (1, 1), "{point}");
            assert_eq!(
                c.thread(thread).await.unwrap().unwrap().inbox_seq,
                1,
                "{point}"
            );
            assert!(
                c.purge(thread).await.unwrap(),
                "{point}: the purge is sent again and done"
            );
        }
        let refused = c.claim(thread, &Default::default()).await.unwrap_err();
        assert_eq!(
            refused.code(),
            Some(&ninetrix_proto::api::ErrorCode::Purged),
            "{point}: {refused}"
        );
    }
}

/// How a lease whose answer the API never sent is freed after the restart.
#[derive(Clone, Copy, Debug)]
enum Freed {
    /// It was never stored: nothing to free.
    NotStored,
    /// The next claim of its thread (a new epoch) frees it at once.
    ByClaim,
    /// It expires at the end of its lease time.
    ByExpiry,
}

fn lease_request(epoch: u64, wait_ms: u64) -> LeaseRequest {
    LeaseRequest {
        epoch,
        limiter: "openai@api.openai.com#0123456789ab".into(),
        provider: "openai".into(),
        limits: ModelLimits {
            max_in_flight: Some(1),
            ..Default::default()
        },
        budgets: None,
        estimated_tokens: 100,
        wait_ms,
    }
}

/// A model lease is one transaction with kill points before and after its commit
/// (`NINETRIX_API_CRASH_AT=lease_before_commit|lease_after_commit`): killed before, nothing is
/// kept and the retried request gets the one slot; killed after, the lease the runner never
/// heard of holds the slot until the next claim of its thread frees it, or until it expires —
/// never for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_killed_at_its_commit_is_freed_by_the_next_claim_or_its_expiry() {
    for (point, freed) in [
        ("lease_before_commit", Freed::NotStored),
        ("lease_after_commit", Freed::ByClaim),
        ("lease_after_commit", Freed::ByExpiry),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (mut api, again) = crashing_api(dir.path(), point, &["--model-lease-ttl", "2"]);
        let c = client(&api.url);
        let (dying, other) = (ThreadId::new_v7(), ThreadId::new_v7());
        let epoch = c.claim(dying, &Default::default()).await.unwrap().epoch;
        assert!(
            c.lease_model(dying, &lease_request(epoch, 0))
                .await
                .is_err(),
            "{point}: the API died before answering"
        );
        aborted(&mut api, point);

        let api = again.start();
        let c = client(&api.url);
        let other_epoch = c.claim(other, &Default::default()).await.unwrap().epoch;
        let asked = c
            .lease_model(other, &lease_request(other_epoch, 0))
            .await
            .unwrap();
        match freed {
            Freed::NotStored => {
                assert!(
                    matches!(asked, LeaseResponse::Granted { .. }),
                    "{point}: {asked:?}"
                );
                continue;
            }
            Freed::ByClaim | Freed::ByExpiry => assert!(
                matches!(
                    asked,
                    LeaseResponse::Wait {
                        wait: SlotWait::InFlight {
                            in_flight: 1,
                            max_in_flight: 1
                        },
                        ..
                    }
                ),
                "{point} ({freed:?}): the stored lease holds the slot: {asked:?}"
            ),
        }
        let started = std::time::Instant::now();
        if let Freed::ByClaim = freed {
            c.claim(dying, &Default::default()).await.unwrap();
            let granted = c
                .lease_model(other, &lease_request(other_epoch, 0))
                .await
                .unwrap();
            assert!(
                matches!(granted, LeaseResponse::Granted { .. }),
                "{point}: freed by the claim: {granted:?}"
            );
        } else {
            let granted = c
                .lease_model(other, &lease_request(other_epoch, 10_000))
                .await
                .unwrap();
            assert!(
                matches!(granted, LeaseResponse::Granted { .. }),
                "{point}: freed when it expired: {granted:?}"
            );
            assert!(
                started.elapsed() < Duration::from_secs(8),
                "{:?}",
                started.elapsed()
            );
        }
    }
}

/// A release is one transaction with kill points before and after its commit
/// (`NINETRIX_API_CRASH_AT=release_before_commit|release_after_commit`): the runner retries it
/// after the restart, and its cost is counted once either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_killed_at_its_commit_counts_its_spend_once() {
    for point in ["release_before_commit", "release_after_commit"] {
        let dir = tempfile::tempdir().unwrap();
        let (mut api, again) = crashing_api(dir.path(), point, &[]);
        let c = client(&api.url);
        let thread = ThreadId::new_v7();
        let epoch = c.claim(thread, &Default::default()).await.unwrap().epoch;
        let LeaseResponse::Granted { lease_id, .. } = c
            .lease_model(thread, &lease_request(epoch, 0))
            .await
            .unwrap()
        else {
            panic!("{point}: not granted");
        };
        let release = LeaseRelease {
            input_tokens: 120,
            output_tokens: 30,
            cost_usd: 0.25,
            rate_limited: None,
        };
        assert!(
            c.release_model_lease(thread, lease_id, &release)
                .await
                .is_err(),
            "{point}: the API died before answering"
        );
        aborted(&mut api, point);

        let api = again.start();
        let c = client(&api.url);
        for _ in 0..2 {
            c.release_model_lease(thread, lease_id, &release)
                .await
                .unwrap();
            let spent = c.spend(thread, None).await.unwrap();
            assert_eq!(spent.thread_usd, 0.25, "{point}: {spent:?}");
            assert_eq!(spent.agent_today_usd, 0.25, "{point}: {spent:?}");
        }
        // The slot is free again.
        let again = c
            .lease_model(thread, &lease_request(epoch, 0))
            .await
            .unwrap();
        assert!(
            matches!(again, LeaseResponse::Granted { .. }),
            "{point}: {again:?}"
        );
    }
}

#[test]
fn a_model_lease_time_outside_a_second_to_an_hour_is_refused() {
    for ttl in ["0", "3601", "soon"] {
        let out = std::process::Command::new(ninetrix_bin())
            .args([
                "api",
                "--listen",
                "127.0.0.1:0",
                "--insecure-dev",
                "--database",
                "sqlite:///nonexistent/x.db",
                "--model-lease-ttl",
                ttl,
            ])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{ttl}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("--model-lease-ttl"), "{ttl}: {stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_long_polls_and_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("api.db").display());
    let mut api = ApiProcess::start(&["--database", &db, "--insecure-dev"]);
    let thread = ThreadId::new_v7();
    let poller = client(&api.url);
    let poll =
        tokio::spawn(async move { poller.inbox(thread, 0, Duration::from_secs(60), 100).await });
    // Once the server has the poll in hand, ask it to stop.
    api.wait_for_log("started processing request", Duration::from_secs(10));
    assert!(ninetrix_e2e::signal(api.child.id(), "-TERM"));
    let resp = tokio::time::timeout(Duration::from_secs(10), poll)
        .await
        .expect("the long-poll ends promptly")
        .unwrap();
    assert_eq!(
        resp.unwrap(),
        [],
        "answered (200, no messages), not cut off"
    );
    let status = api
        .wait_exit(Duration::from_secs(10))
        .expect("the server exits after SIGTERM");
    assert_eq!(status.code(), Some(0));
}

#[test]
fn refuses_to_start_without_a_secret() {
    let out = std::process::Command::new(ninetrix_bin())
        .args([
            "api",
            "--listen",
            "127.0.0.1:0",
            "--database",
            "sqlite:///nonexistent/never-created.db",
        ])
        .env_remove("NINETRIX_API_SECRET")
        .env_remove("NINETRIX_ADMIN_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("refusing to start without a secret") && stderr.contains("--insecure-dev"),
        "{stderr}"
    );
}

#[test]
fn insecure_dev_is_loopback_only() {
    let out = std::process::Command::new(ninetrix_bin())
        .args([
            "api",
            "--listen",
            "0.0.0.0:0",
            "--insecure-dev",
            "--database",
            "sqlite:///nonexistent/x.db",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("only listens on a loopback address"));
}

/// One A2A `SendMessage` (returning at once) to agent `bot` of pool `fleet`: the JSON-RPC answer,
/// or the transport error when the API died.
async fn a2a_send(url: &str, message_id: &str) -> Result<serde_json::Value, reqwest::Error> {
    let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
        "message": {"messageId": message_id, "contextId": "ctx", "role": "ROLE_USER", "parts": [{"text": "hello"}]},
        "configuration": {"returnImmediately": true}}});
    ninetrix_client::http_client()
        .post(format!("{url}/a2a/fleet/bot"))
        .json(&body)
        .send()
        .await?
        .json()
        .await
}

/// An A2A send of a new task is one transaction with kill points before and after its commit
/// (`NINETRIX_API_CRASH_AT=a2a_send_before_commit|a2a_send_after_commit`): killed before,
/// nothing is stored (no task, no inbox message) and the client's retry makes the task; killed
/// after, the task is stored and the retry with the same `messageId` answers that same task.
/// Either way one task and one inbox message exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_a2a_send_killed_at_its_commit_makes_one_task() {
    for (point, committed) in [
        ("a2a_send_before_commit", false),
        ("a2a_send_after_commit", true),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (mut api, again) = crashing_api(dir.path(), point, &[]);
        client(&api.url)
            .set_replicas("fleet", "bot", 1, &[], Some(&Default::default()))
            .await
            .unwrap();
        assert!(
            a2a_send(&api.url, "m-1").await.is_err(),
            "{point}: the API died before answering"
        );
        aborted(&mut api, point);

        let api = again.start();
        let c = client(&api.url);
        let key = Some("a2a:ctx");
        let before = c
            .list_sessions(&Default::default(), key)
            .await
            .unwrap()
            .pop();
        assert_eq!(
            before.as_ref().map(|t| t.inbox_seq),
            committed.then_some(1),
            "{point}: stored before the kill or not"
        );
        let retried = a2a_send(&api.url, "m-1").await.unwrap();
        let task = &retried["result"]["task"];
        assert_eq!(
            task["status"]["state"], "TASK_STATE_SUBMITTED",
            "{point}: {retried}"
        );
        let again = a2a_send(&api.url, "m-1").await.unwrap();
        assert_eq!(
            again["result"]["task"]["id"], task["id"],
            "{point}: one task"
        );
        let after = c
            .list_sessions(&Default::default(), key)
            .await
            .unwrap()
            .pop()
            .unwrap();
        assert_eq!(after.inbox_seq, 1, "{point}: one inbox message");
        assert_eq!(
            task["metadata"]["ninetrix"]["thread_id"],
            after.thread_id.to_string()
        );
    }
}
