//! A runner whose replica thread is purged while it serves it (issue 34), as processes: one that
//! took its thread from the API's replica mapping (a Swarm task, a StatefulSet pod) asks the
//! mapping again and serves the replica's new thread without exiting; one given its thread
//! (`AGENTFILE_THREAD_ID`, as a container `ninetrix up` made) exits 0 — no restart, no crash loop
//! — saying which command gives its replica a new thread.

mod support;

use std::time::{Duration, Instant};

use ninetrix_client::{ErrorCode, ThreadQuery};
use ninetrix_proto::ThreadId;
use support::{Runner, appender_spec, setup};

const POOL: &str = "purgepool";

/// The pool's live threads of replica 1 that a runner has claimed.
async fn claimed(admin: &support::Admin) -> Vec<ThreadId> {
    let query = ThreadQuery {
        pool: Some(POOL.into()),
        ..ThreadQuery::default()
    };
    admin
        .client
        .list_threads(&query)
        .await
        .unwrap()
        .into_iter()
        .filter(|t| t.labels.replica == Some(1) && t.labels.session.is_none() && t.epoch > 0)
        .map(|t| t.thread_id)
        .collect()
}

async fn wait_claimed(admin: &support::Admin, not: Option<ThreadId>) -> ThreadId {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(t) = claimed(admin).await.into_iter().find(|t| Some(*t) != not) {
            return t;
        }
        assert!(
            Instant::now() < deadline,
            "no runner claimed a thread of replica 1"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replica_runner_whose_thread_is_purged_takes_the_replicas_new_thread() {
    let s = setup();
    let agent = appender_spec()["name"].as_str().unwrap().to_string();
    s.admin
        .client
        .set_replicas(POOL, &agent, 1, &[], None)
        .await
        .unwrap();
    let mut runner = Runner::start_replica(
        &s.api.url,
        &appender_spec(),
        &s.workspace,
        &[
            ("AGENTFILE_POOL", POOL),
            ("AGENTFILE_REPLICA", "1"),
            ("AGENTFILE_AGENT_TOKEN", "insecure-dev"),
        ],
    );
    let old = wait_claimed(&s.admin, None).await;
    let seq = s.admin.send(old, "before", "k1").await;
    s.admin.wait_done(old, seq, Duration::from_secs(30)).await;

    assert!(s.admin.client.purge(old).await.unwrap());
    // The runner asks the mapping again (which replaces the purged thread) and serves the new
    // thread: it is claimed and answers, and the process never exited.
    let new = wait_claimed(&s.admin, Some(old)).await;
    assert_ne!(new, old);
    let seq = s.admin.send(new, "after", "k1").await;
    s.admin.wait_done(new, seq, Duration::from_secs(30)).await;
    assert!(
        runner.child.try_wait().unwrap().is_none(),
        "the runner kept running"
    );
    let latest = s.admin.latest(new).await;
    assert_eq!(
        latest
            .history
            .iter()
            .filter(|m| m.role == ninetrix_proto::Role::User)
            .count(),
        1,
        "the new thread starts a new conversation"
    );
    let gone = s.admin.client.thread(old).await.unwrap_err();
    assert_eq!(gone.code(), Some(&ErrorCode::Purged));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_runner_given_its_thread_stops_with_exit_0_when_it_is_purged() {
    let s = setup();
    let mut runner = Runner::start_with_env(
        &s.api.url,
        s.thread,
        &appender_spec(),
        &s.workspace,
        &[
            ("AGENTFILE_POOL", POOL),
            ("AGENTFILE_AGENT", "appender"),
            ("AGENTFILE_REPLICA", "1"),
        ],
    );
    // Claimed first: a message queued before would make the thread without the runner's labels.
    assert_eq!(wait_claimed(&s.admin, None).await, s.thread);
    let seq = s.admin.send(s.thread, "hello", "k1").await;
    s.admin
        .wait_done(s.thread, seq, Duration::from_secs(30))
        .await;
    assert!(s.admin.client.purge(s.thread).await.unwrap());
    let status = runner
        .wait_exit(Duration::from_secs(30))
        .expect("the runner of a purged thread stops");
    assert_eq!(
        status.code(),
        Some(0),
        "exit 0: Docker's on-failure policy does not restart it"
    );
}
