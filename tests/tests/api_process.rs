//! `ninetrix api` as a process: acknowledged checkpoints survive SIGKILL, SIGTERM drains and exits
//! 0, and it refuses to start without a secret.

use std::time::Duration;

use ninetrix_client::Client;
use ninetrix_e2e::{ApiProcess, ninetrix_bin};
use ninetrix_proto::api::{CheckpointRequest, CheckpointState, ThreadStatus};
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
    let pid = api.child.id().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
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
