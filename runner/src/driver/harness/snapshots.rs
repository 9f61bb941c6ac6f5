//! Workspace snapshots, rewinds and restores through the real driver (issue 41): snapshots at
//! turn ends, their limits, a rewind's history and files, a rewind of a rewind, the fail-closed
//! cases, a crash at each kill point, and the restore at boot.

use std::collections::BTreeMap;

use ninetrix_proto::api::ThreadStatus;
use ninetrix_proto::snapshots::{ObjectId, ObjectKind, RESERVED_DIR};

use super::*;
use crate::snapshots::faults::{self, held};

/// A durable agent whose every turn answers `Done.` (the test changes the files).
fn agent_done(workspace: &Path) -> Config {
    config(
        agent(
            "    runtime:
      provider: scripted
      script:
        - text: Done.
    execution: { durability: true }
",
        ),
        workspace,
    )
}

fn write(workspace: &Path, path: &str, content: &str) {
    let path = workspace.join(path);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

/// Every regular file of the workspace (outside `.ninetrix/`) with its text. Polled while a
/// restore runs, so a file the walk saw and the restore then moved is left out (the caller
/// polls again).
fn files(workspace: &Path) -> BTreeMap<String, String> {
    let scan = crate::snapshots::scan::walk(workspace, &[]).unwrap();
    scan.files
        .into_iter()
        .filter_map(|f| {
            let text = std::fs::read_to_string(workspace.join(&f.path)).ok()?;
            Some((f.path, text))
        })
        .collect()
}

fn tree(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(p, c)| (p.to_string(), c.to_string()))
        .collect()
}

/// Sends a message and waits for turn `n` to complete.
async fn turn(store: &TestStore, n: usize) {
    store.send("go");
    store.until_event("turn_completed", n).await;
}

/// Polls `check` every 10 ms (of paused time) until it holds, up to the deadline.
async fn until(what: &str, check: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn ids(history: &[ninetrix_proto::Message]) -> Vec<ninetrix_proto::MessageId> {
    history.iter().map(|m| m.id).collect()
}

fn marker(workspace: &Path) -> String {
    std::fs::read_to_string(workspace.join(RESERVED_DIR).join("restored")).unwrap_or_default()
}

#[tokio::test(start_paused = true)]
async fn a_turn_end_uploads_its_snapshot_and_an_unchanged_file_is_not_uploaded_again() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    write(ws, "a.txt", "one");
    write(ws, "dir/b.txt", "two");
    std::os::unix::fs::symlink("a.txt", ws.join("link")).unwrap();
    let store = TestStore::new();
    let driver = Driver::start(&store, &agent_done(ws));
    turn(&store, 1).await;
    let taken = store.events_of("snapshot_taken");
    assert_eq!(taken.len(), 1, "{:?}", store.event_kinds());
    assert_eq!(taken[0]["turn_seq"], 1);
    assert_eq!(taken[0]["snapshot"]["files"], 2);
    assert_eq!(taken[0]["hashed_files"], 2);
    assert_eq!(
        taken[0]["skipped_entries"], 1,
        "the symlink is counted, not kept"
    );
    assert_eq!(taken[0]["uploaded_objects"], 3, "two blobs and a leaf");
    // The turn's end is recorded with it, in the same commit as `turn_completed`.
    let point = store.turn_point(1).await.unwrap();
    let root = point.snapshot.as_ref().unwrap().root.to_string();
    assert_eq!(taken[0]["snapshot"]["root"], root.as_str());

    write(ws, "a.txt", "uno");
    let before = store.puts().len();
    turn(&store, 2).await;
    let taken = store.events_of("snapshot_taken");
    assert_eq!(taken[1]["hashed_files"], 1, "only the changed file is read");
    assert_eq!(taken[1]["uploaded_objects"], 2, "its blob and the leaf");
    let new: Vec<_> = store.puts()[before..].to_vec();
    assert!(new.contains(&(ObjectId::of(b"uno"), ObjectKind::Blob)));
    assert!(!new.iter().any(|(id, _)| *id == ObjectId::of(b"two")));
    // Turn 3 with nothing changed uploads nothing.
    turn(&store, 3).await;
    assert_eq!(store.events_of("snapshot_taken")[2]["uploaded_objects"], 0);
    driver.shutdown.cancel();
    assert_eq!(driver.exit().await, Exit::Ok);
}

#[tokio::test(start_paused = true)]
async fn ten_thousand_files_with_one_changed_upload_about_that_file_and_a_few_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    for i in 0..10_000 {
        write(
            ws,
            &format!("d{}/f{i}.txt", i % 50),
            &format!("content {i}"),
        );
    }
    let store = TestStore::new();
    let driver = Driver::start(&store, &agent_done(ws));
    turn(&store, 1).await;
    let first = &store.events_of("snapshot_taken")[0];
    assert_eq!(first["snapshot"]["files"], 10_000);
    assert!(first["uploaded_objects"].as_u64().unwrap() > 10_000);
    let asked = store.asked();
    write(ws, "d7/f4357.txt", "changed");
    turn(&store, 2).await;
    assert!(
        store.asked() - asked <= 6,
        "only the objects turn 1's snapshot did not have are asked about: {}",
        store.asked() - asked
    );
    let second = &store.events_of("snapshot_taken")[1];
    assert_eq!(second["hashed_files"], 1);
    let uploaded = second["uploaded_objects"].as_u64().unwrap();
    assert!((2..=6).contains(&uploaded), "{uploaded} objects");
    assert!(
        second["uploaded_bytes"].as_u64().unwrap() < 32 * 1024,
        "{second}"
    );
    driver.shutdown.cancel();
    assert_eq!(driver.exit().await, Exit::Ok);
}

#[tokio::test(start_paused = true)]
async fn a_workspace_past_its_limits_has_no_snapshot_and_the_turn_still_ends() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let mut config = agent_done(ws);
    let limits = config.spec.execution.snapshots.as_mut().unwrap();
    limits.max_files = 2;
    limits.max_bytes = 10;
    for f in ["a", "b", "c"] {
        write(ws, f, "x");
    }
    let store = TestStore::new();
    let driver = Driver::start(&store, &config);
    turn(&store, 1).await;
    let skipped = store.events_of("snapshot_skipped");
    let why = skipped[0]["why"].as_str().unwrap();
    assert!(
        why.contains("3 files") && why.contains("execution.snapshots.max_files: 2"),
        "{why}"
    );
    assert_eq!(store.events_of("turn_completed")[0]["ok"], true);
    assert!(store.events_of("snapshot_taken").is_empty());
    let point = store.turn_point(1).await.unwrap();
    assert_eq!(
        point.snapshot, None,
        "the turn's end is recorded without one"
    );
    assert_eq!(
        point.snapshot_skipped.as_deref(),
        Some(why),
        "and with why, so going back to it is refused"
    );
    let before = store.thread().await;
    store.rewind(1);
    store.until_event("rewind_failed", 1).await;
    let failed = &store.events_of("rewind_failed")[0];
    assert!(
        failed["why"]
            .as_str()
            .unwrap()
            .contains("has no snapshot of its files"),
        "{failed}"
    );
    assert_eq!(ids(&store.thread().await.history), ids(&before.history));

    std::fs::remove_file(ws.join("c")).unwrap();
    write(ws, "a", "more than ten bytes");
    turn(&store, 2).await;
    let why = store.events_of("snapshot_skipped")[1]["why"].clone();
    assert!(
        why.as_str()
            .unwrap()
            .contains("execution.snapshots.max_bytes: 10"),
        "{why}"
    );
    driver.shutdown.cancel();
    assert_eq!(driver.exit().await, Exit::Ok);
}

#[tokio::test(start_paused = true)]
async fn an_agent_without_snapshots_and_a_batch_job_end_turns_without_one() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    write(ws, "a", "x");
    let mut config = agent_done(ws);
    config.spec.execution.snapshots = None;
    let store = TestStore::new();
    let driver = Driver::start(&store, &config);
    turn(&store, 1).await;
    let point = store.turn_point(1).await.unwrap();
    assert_eq!(point.snapshot, None);
    assert!(store.puts().is_empty());
    driver.shutdown.cancel();
    assert_eq!(driver.exit().await, Exit::Ok);

    let store = TestStore::new();
    let mut config = config.clone();
    config.spec = agent(
        "    runtime:
      provider: scripted
      script:
        - text: Done.
    execution: { durability: false }
",
    );
    config.task = Some("do it".into());
    assert_eq!(Driver::start(&store, &config).exit().await, Exit::Ok);
    assert!(store.turn_point(1).await.unwrap().snapshot.is_none());
    assert!(store.puts().is_empty());
    let kinds = store.event_kinds();
    assert!(
        !kinds.iter().any(|k| k.starts_with("snapshot_")),
        "{kinds:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_object_lost_before_the_turns_commit_is_uploaded_again_then_the_turn_goes_without() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    write(ws, "a", "kept");
    let store = TestStore::new();
    let driver = Driver::start(&store, &agent_done(ws));
    store.lose_at_turn_ends(ObjectId::of(b"kept"), 1);
    turn(&store, 1).await;
    let taken = store.events_of("snapshot_taken");
    assert_eq!(taken.len(), 1, "{:?}", store.event_kinds());
    assert_eq!(taken[0]["uploaded_objects"], 3, "the blob went twice");
    assert!(store.turn_point(1).await.unwrap().snapshot.is_some());

    store.lose_at_turn_ends(ObjectId::of(b"kept"), 2);
    turn(&store, 2).await;
    let skipped = store.events_of("snapshot_skipped");
    assert_eq!(skipped.len(), 1, "{:?}", store.event_kinds());
    assert!(
        skipped[0]["why"].as_str().unwrap().contains("twice"),
        "{skipped:?}"
    );
    assert_eq!(store.events_of("snapshot_taken").len(), 1);
    assert!(store.turn_point(2).await.unwrap().snapshot.is_none());
    assert_eq!(store.events_of("turn_completed")[1]["ok"], true);
    driver.shutdown.cancel();
    assert_eq!(driver.exit().await, Exit::Ok);
}

/// Turn 1 ends with `first`, turn 2 with `second` (files written by the test, `old` removed).
async fn two_turns(
    store: &TestStore,
    ws: &Path,
    first: &[(&str, &str)],
    second: &[(&str, &str)],
    removed: &[&str],
) {
    for (p, c) in first {
        write(ws, p, c);
    }
    turn(store, 1).await;
    for (p, c) in second {
        write(ws, p, c);
    }
    for p in removed {
        std::fs::remove_file(ws.join(p)).unwrap();
    }
    turn(store, 2).await;
}

#[tokio::test(start_paused = true)]
async fn a_rewind_restores_the_history_and_the_files_and_turn_numbers_keep_growing() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let store = TestStore::new();
    let driver = Driver::start(&store, &agent_done(ws));
    // A session this replica serves keeps its workspace under `sessions/`: never the replica's
    // own thread's to snapshot or restore over.
    write(ws, "sessions/other/s.txt", "theirs");
    two_turns(
        &store,
        ws,
        &[("a", "1"), ("keep/k", "k"), ("same", "s")],
        &[("a", "2"), ("c/new", "n")],
        &["keep/k"],
    )
    .await;
    std::fs::set_permissions(
        ws.join("same"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let at_one = store.turn_point(1).await.unwrap();
    let seq = store.rewind(1);
    store.until_event("rewound", 1).await;
    let rewound = &store.events_of("rewound")[0];
    assert_eq!(
        (rewound["from_turn"].as_u64(), rewound["to_turn"].as_u64()),
        (Some(2), Some(1))
    );
    assert_eq!(rewound["left_messages"], 2);
    assert_eq!(rewound["files_written"], 3, "a, keep/k, and same's mode");
    assert_eq!(rewound["files_removed"], 1, "c/new");
    until("the files are applied", || {
        marker(ws) == at_one.snapshot.as_ref().unwrap().root.as_str()
    })
    .await;
    assert_eq!(
        files(ws),
        tree(&[
            ("a", "1"),
            ("keep/k", "k"),
            ("same", "s"),
            ("sessions/other/s.txt", "theirs")
        ])
    );
    assert_eq!(
        at_one.snapshot.as_ref().unwrap().files,
        3,
        "sessions/ is not the replica's"
    );
    assert!(!ws.join("c").exists(), "the emptied directory is gone");
    let mode = std::fs::metadata(ws.join("same")).unwrap().permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o644
    );
    let thread = store.thread().await;
    assert_eq!(ids(&thread.history), ids(&at_one.history));
    assert_eq!(thread.state.inbox_cursor, seq);
    assert_eq!(thread.state.turn_seq, 2);
    assert_eq!(thread.state.workspace, at_one.snapshot);
    assert_eq!(thread.state.status, ThreadStatus::Idle);
    // The next turn is turn 3, on the turn-1 history; it clears the workspace's claim.
    turn(&store, 3).await;
    let started = store.events_of("turn_started");
    assert_eq!(started.last().unwrap()["turn_seq"], 3);
    let thread = store.thread().await;
    assert_eq!(thread.history.len(), 4);
    assert_eq!(thread.state.workspace, None);
    crate::llm::wire_rules::accepted(&thread.history).unwrap();
    driver.shutdown.cancel();
    assert_eq!(driver.exit().await, Exit::Ok);
}

#[tokio::test(start_paused = true)]
async fn a_rewind_of_a_rewind_goes_back_to_the_turn_it_left() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let store = TestStore::new();
    let driver = Driver::start(&store, &agent_done(ws));
    two_turns(&store, ws, &[("a", "1")], &[("a", "2"), ("b", "2")], &[]).await;
    let at_two = store.thread().await;
    store.rewind(1);
    store.until_event("rewound", 1).await;
    until("turn 1's files", || files(ws) == tree(&[("a", "1")])).await;
    store.rewind(2);
    store.until_event("rewound", 2).await;
    until("turn 2's files", || {
        files(ws) == tree(&[("a", "2"), ("b", "2")])
    })
    .await;
    let thread = store.thread().await;
    assert_eq!(ids(&thread.history), ids(&at_two.history));
    assert_eq!(
        store.events_of("rewound")[1]["left_messages"],
        0,
        "turn 1's history is a prefix of turn 2's"
    );
    driver.shutdown.cancel();
    assert_eq!(driver.exit().await, Exit::Ok);
}

#[tokio::test(start_paused = true)]
async fn a_dropped_snapshot_or_a_failing_stage_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let mut config = agent_done(ws);
    config.spec.execution.snapshots.as_mut().unwrap().keep_turns = 1;
    let store = TestStore::new();
    let driver = Driver::start(&store, &config);
    two_turns(&store, ws, &[("a", "1")], &[("a", "2")], &[]).await;
    write(ws, "a", "after");
    let before = store.thread().await;

    // Turn 1's snapshot was dropped (keep_turns: 1).
    let seq = store.rewind(1);
    store.until_event("rewind_failed", 1).await;
    let failed = &store.events_of("rewind_failed")[0];
    assert!(
        failed["why"].as_str().unwrap().contains("dropped"),
        "{failed}"
    );
    // Turn 2's bytes are gone from the store: staging fails.
    store.drop_object(&ObjectId::of(b"2"));
    let seq2 = store.rewind(2);
    store.until_event("rewind_failed", 2).await;
    let failed = &store.events_of("rewind_failed")[1];
    assert!(
        failed["why"]
            .as_str()
            .unwrap()
            .contains("could not be staged"),
        "{failed}"
    );

    let after = store.thread().await;
    assert_eq!(ids(&after.history), ids(&before.history));
    assert_eq!(after.state.workspace, None);
    assert_eq!(after.state.turn_seq, before.state.turn_seq);
    assert_eq!(after.state.inbox_cursor, seq2);
    assert!(seq2 > seq);
    assert_eq!(files(ws), tree(&[("a", "after")]));
    assert!(!ws.join(RESERVED_DIR).join("staging").exists());
    assert!(store.events_of("rewound").is_empty());
    driver.shutdown.cancel();
    assert_eq!(driver.exit().await, Exit::Ok);
}

/// A crash at `point` during a rewind from turn 2 to turn 1: the next driver finishes it, and
/// the workspace and the history agree.
async fn crash_during_a_rewind_at(point: &'static str) {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let store = TestStore::new();
    let config = agent_done(ws);
    let first = Driver::start(&store, &config);
    let turn1 = [("a", "1"), ("b", "1"), ("c", "1"), ("d", "1")];
    two_turns(
        &store,
        ws,
        &turn1,
        &[("a", "2"), ("b", "2"), ("c", "2"), ("d", "2"), ("e", "2")],
        &[],
    )
    .await;
    let at_one = store.turn_point(1).await.unwrap();
    let at_two = store.thread().await;
    held::hold(ws, point);
    store.rewind(1);
    until("the kill point", || held::reached(ws, point)).await;
    first.kill().await;
    let crashed = store.thread().await;
    if point == faults::REWIND_BEFORE_COMMIT {
        assert_eq!(ids(&crashed.history), ids(&at_two.history), "not committed");
        assert_eq!(
            files(ws),
            tree(&[("a", "2"), ("b", "2"), ("c", "2"), ("d", "2"), ("e", "2")])
        );
    } else {
        assert_eq!(ids(&crashed.history), ids(&at_one.history), "committed");
        assert_eq!(crashed.state.workspace, at_one.snapshot);
    }
    if point == faults::RESTORE_MIDWAY {
        let now = files(ws);
        let restored = now.values().filter(|c| *c == "1").count();
        assert!(restored > 0 && restored < 4, "half applied: {now:?}");
    }

    let second = Driver::start(&store, &config);
    store.until_event("ready", 2).await;
    if point == faults::REWIND_BEFORE_COMMIT {
        // The control is still in the inbox: the new runner carries it out.
        store.until_event("rewound", 1).await;
        until("the files are applied", || !marker(ws).is_empty()).await;
    } else {
        let restored = store.events_of("workspace_restored");
        assert_eq!(restored.len(), 1, "{:?}", store.event_kinds());
        assert_eq!(
            restored[0]["snapshot"]["root"],
            at_one.snapshot.as_ref().unwrap().root.as_str()
        );
    }
    let thread = store.thread().await;
    assert_eq!(ids(&thread.history), ids(&at_one.history));
    assert_eq!(files(ws), tree(&turn1));
    assert_eq!(marker(ws), at_one.snapshot.as_ref().unwrap().root.as_str());
    assert_eq!(store.events_of("rewound").len(), 1, "rewound once");
    // And the thread serves on from there.
    store.send("go");
    store.until_event("turn_completed", 3).await;
    assert_eq!(store.thread().await.state.turn_seq, 3);
    second.shutdown.cancel();
    assert_eq!(second.exit().await, Exit::Ok);
}

#[tokio::test(start_paused = true)]
async fn a_crash_before_the_rewinds_commit_leaves_it_to_the_next_runner() {
    crash_during_a_rewind_at(faults::REWIND_BEFORE_COMMIT).await;
}

#[tokio::test(start_paused = true)]
async fn a_crash_after_the_rewinds_commit_is_finished_at_the_next_boot() {
    crash_during_a_rewind_at(faults::REWIND_AFTER_COMMIT).await;
}

#[tokio::test(start_paused = true)]
async fn a_crash_halfway_through_the_restore_is_finished_at_the_next_boot() {
    crash_during_a_rewind_at(faults::RESTORE_MIDWAY).await;
}

#[tokio::test(start_paused = true)]
async fn a_workspace_without_the_checkpoints_snapshot_is_restored_at_boot_or_the_boot_fails() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let store = TestStore::new();
    let config = agent_done(ws);
    let first = Driver::start(&store, &config);
    two_turns(
        &store,
        ws,
        &[("src/main.rs", "fn main() {}")],
        &[("x", "y")],
        &[],
    )
    .await;
    store.rewind(1);
    store.until_event("rewound", 1).await;
    first.shutdown.cancel();
    assert_eq!(first.exit().await, Exit::Ok);
    let snapshot = store.thread().await.state.workspace.unwrap();

    // As a fork's first runner: another, empty workspace with the same checkpoint.
    let fork = tempfile::tempdir().unwrap();
    write(fork.path(), "stray", "not in the snapshot");
    let second = Driver::start(&store, &agent_done(fork.path()));
    store.until_event("ready", 2).await;
    let restored = store.events_of("workspace_restored");
    assert_eq!(restored[0]["files_written"], 1);
    assert_eq!(restored[0]["files_removed"], 1);
    assert_eq!(files(fork.path()), tree(&[("src/main.rs", "fn main() {}")]));
    assert_eq!(marker(fork.path()), snapshot.root.as_str());
    second.shutdown.cancel();
    assert_eq!(second.exit().await, Exit::Ok);

    // Marked: nothing to do.
    let third = Driver::start(&store, &agent_done(fork.path()));
    store.until_event("ready", 3).await;
    assert_eq!(store.events_of("workspace_restored").len(), 1);
    third.shutdown.cancel();
    assert_eq!(third.exit().await, Exit::Ok);

    // An object missing: the boot fails, naming the snapshot; nothing serves.
    let broken = tempfile::tempdir().unwrap();
    store.drop_object(&ObjectId::of(b"fn main() {}"));
    let exit = Driver::start(&store, &agent_done(broken.path()))
        .exit()
        .await;
    let Exit::Failure(why) = &exit else {
        panic!("{exit:?}")
    };
    assert!(
        why.contains(&format!(
            "cannot restore the workspace to snapshot {}",
            snapshot.root
        )),
        "{why}"
    );
    assert!(files(broken.path()).is_empty());
    assert_eq!(store.events_of("ready").len(), 3, "it never said ready");
}
