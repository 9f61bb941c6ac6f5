//! `ninetrix api` as a process: acknowledged checkpoints survive SIGKILL, SIGTERM drains and exits
//! 0, and it refuses to start without a secret.

use std::time::Duration;

use ninetrix_e2e::{ApiProcess, ninetrix_bin};
use ninetrix_proto::ThreadId;
use serde_json::json;

fn checkpoint(epoch: u64, parent: u64) -> serde_json::Value {
    let message = serde_json::to_value(ninetrix_proto::Message::text(
        ninetrix_proto::Role::User,
        format!("message {parent}"),
    ))
    .unwrap();
    json!({"epoch": epoch, "parent_version": parent, "append": [message],
           "state": {"turn_seq": parent, "turn_start_history_len": 0, "status": "in_turn", "inbox_cursor": 0}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_checkpoints_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("api.db").display());
    let client = reqwest::Client::new();
    let mut api = ApiProcess::start(&["--database", &db, "--insecure-dev"]);
    let threads: Vec<ThreadId> = (0..4).map(|_| ThreadId::new_v7()).collect();
    let mut epochs = Vec::new();
    for t in &threads {
        let claim: serde_json::Value = client
            .post(format!("{}/v1/runners/threads/{t}/claim", api.url))
            .json(&json!({}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        epochs.push(claim["epoch"].as_u64().unwrap());
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
        let (client, url, tx) = (client.clone(), api.url.clone(), acked_tx.clone());
        writers.push(tokio::spawn(async move {
            for parent in 0.. {
                let resp = client
                    .post(format!("{url}/v1/runners/threads/{t}/checkpoints"))
                    .json(&checkpoint(epoch, parent))
                    .send()
                    .await;
                match resp {
                    Ok(r) if r.status() == reqwest::StatusCode::CREATED => {
                        let _ = tx.send((i, parent + 1));
                    }
                    _ => return,
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
    for (t, acked) in threads.iter().zip(&acked) {
        let versions: serde_json::Value = client
            .get(format!("{}/v1/threads/{t}/checkpoints", api.url))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let chain: Vec<(u64, u64)> = versions
            .as_array()
            .unwrap()
            .iter()
            .map(|v| {
                (
                    v["version"].as_u64().unwrap(),
                    v["parent_version"].as_u64().unwrap(),
                )
            })
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
        let latest: serde_json::Value = client
            .get(format!("{}/v1/runners/threads/{t}/latest", api.url))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(latest["history"].as_array().unwrap().len(), chain.len());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_long_polls_and_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("api.db").display());
    let mut api = ApiProcess::start(&["--database", &db, "--insecure-dev"]);
    let thread = ThreadId::new_v7();
    let poll = reqwest::Client::new()
        .get(format!(
            "{}/v1/runners/threads/{thread}/inbox?wait=60",
            api.url
        ))
        .send();
    let poll = tokio::spawn(poll);
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
        .unwrap()
        .unwrap();
    assert_eq!(resp.status(), reqwest::StatusCode::OK);
    assert_eq!(resp.text().await.unwrap(), "[]");
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
