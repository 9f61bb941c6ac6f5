//! A pool on Docker Swarm (`ninetrix up --swarm`), on a single-node swarm of the real engine:
//! the test initialises the swarm if the engine is in none, and leaves it again at the end (also
//! when it fails); an engine already in a swarm is used as it is and left in it. Because it
//! changes the engine's state for its run, the story runs only with `NINETRIX_TEST_SWARM=1`.
//!
//! One story, in order (the steps share one swarm and one pool; a swarm cannot be initialised by
//! two tests at once): services, secrets and the API come up; a task's process killed mid-turn
//! is replaced in the same slot and resumes the same thread, replaying its write from the
//! ledger; scaling up gives the new slot a thread and scaling down and up again gives the slot
//! its old thread back; a service update mid-turn (`up --swarm --force-recreate`) stops each
//! task before its replacement resumes the turn; a stale copy of a slot (its process paused
//! while an update starts a new task first) is fenced when it wakes; a batch agent runs as a
//! replicated job; an agent's write goes once through a sidecar MCP server deployed as a service;
//! `ps`, `logs`, `invoke` and `trace` read the swarm; `down --purge` removes every object.

mod support;

use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use support::docker::{Pool, SECRET, docker, lines_journal, lines_server_image, text, wait_for};

/// The swarm of the test: initialised here (and left in `Drop`, with the `docker_gwbridge`
/// network `swarm init` makes, if there was none) unless the engine is in one.
struct Swarm {
    initialised: bool,
    had_gwbridge: bool,
}

impl Swarm {
    fn ensure() -> Swarm {
        let state = docker(&["info", "--format", "{{.Swarm.LocalNodeState}}"]);
        let had_gwbridge = !docker(&["network", "ls", "-q", "--filter", "name=^docker_gwbridge$"])
            .trim()
            .is_empty();
        if state.trim() == "active" {
            return Swarm {
                initialised: false,
                had_gwbridge,
            };
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let out = Command::new("docker")
            .args([
                "swarm",
                "init",
                "--advertise-addr",
                "127.0.0.1",
                "--listen-addr",
                &format!("127.0.0.1:{port}"),
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "docker swarm init: {}", text(&out));
        Swarm {
            initialised: true,
            had_gwbridge,
        }
    }
}

impl Drop for Swarm {
    fn drop(&mut self) {
        if self.initialised {
            let _ = Command::new("docker")
                .args(["swarm", "leave", "--force"])
                .output();
            if !self.had_gwbridge {
                let _ = Command::new("docker")
                    .args(["network", "rm", "docker_gwbridge"])
                    .output();
            }
        }
    }
}

/// Images the story builds (the server's) or makes `up` build (the sidecar's), removed when it
/// ends, after the services that use them (declare it before [`Leftovers`]).
struct Images(std::cell::RefCell<Vec<String>>);

impl Drop for Images {
    fn drop(&mut self) {
        for image in self.0.borrow().iter() {
            let _ = Command::new("docker")
                .args(["image", "rm", "-f", image])
                .output();
        }
    }
}

/// Removes whatever the pool left on the swarm (by label), before the swarm is left.
struct Leftovers(String);

impl Drop for Leftovers {
    fn drop(&mut self) {
        let label = format!("label=dev.ninetrix.swarm.pool={}", self.0);
        for kind in [["service", "ls", "-q"], ["secret", "ls", "-q"]] {
            for id in docker(&[kind[0], kind[1], kind[2], "--filter", &label]).split_whitespace() {
                docker(&[kind[0], "rm", id]);
            }
        }
        for id in docker(&["ps", "-aq", "--filter", &label]).split_whitespace() {
            docker(&["rm", "-f", id]);
        }
        for id in docker(&["network", "ls", "-q", "--filter", &label]).split_whitespace() {
            docker(&["network", "rm", id]);
        }
        for id in docker(&["volume", "ls", "-q", "--filter", &label]).split_whitespace() {
            docker(&["volume", "rm", id]);
        }
    }
}

const AGENTS: &str = "mcp_servers:
  lines:
    image: IMAGE
    command: [/mcp-lines-server, --dir, /data]
    # It keeps its journal in /data, a directory of the root filesystem: relaxed, by name.
    security: { user: root, read_only_root: false }
    trusted: true
agents:
  worker:
    runtime:
      provider: scripted
      script:
        - text: Recording, then waiting.
          tool_calls:
            - { name: file_write, args: { path: story.txt, content: \"line\\n\", mode: append } }
            - { name: sleep, args: { seconds: 4 } }
        - text: Done.
    tools: [file_write, sleep]
    secrets: [TEST_SECRET]
    execution: { replicas: REPLICAS }
  scribe:
    runtime:
      provider: scripted
      script:
        - tool_calls: [{ name: lines__append_line, args: { text: hello } }]
        - text: Written.
    tools: [mcp://lines/append_line]
  digest:
    runtime:
      provider: scripted
      script: [\"The digest is ready.\"]
    execution: { durability: false, task: digest }
";

/// The sidecar server's own image for `pool` (built by the story, removed at its end).
fn server_image(pool: &Pool) -> String {
    format!("ninetrix-test-mcp-lines:{}", pool.name)
}

fn agents(pool: &Pool, replicas: u32) -> String {
    AGENTS
        .replace("REPLICAS", &replicas.to_string())
        .replace("IMAGE", &server_image(pool))
}

/// `ps --json` rows of the pool (`-a`: with finished jobs).
fn ps(pool: &Pool) -> Vec<Value> {
    let out = pool.ninetrix(&["ps", "-p", &pool.name, "-a", "--json"]);
    assert!(out.status.success(), "ps: {}", text(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The row of `worker`'s slot `n`.
fn slot(pool: &Pool, n: u32) -> Option<Value> {
    ps(pool)
        .into_iter()
        .find(|r| r["agent"] == "worker" && r["replica"] == n)
}

fn running(pool: &Pool, n: u32) -> bool {
    slot(pool, n).is_some_and(|r| r["state"] == "running")
}

/// The container of the running task in `worker`'s slot `n`, and its host PID.
fn task_container(pool: &Pool, n: u32) -> (String, i64) {
    let service = format!("ninetrix-{}-worker", pool.name);
    let ids = docker(&[
        "service",
        "ps",
        &service,
        "-q",
        "--filter",
        "desired-state=running",
    ]);
    for id in ids.split_whitespace() {
        let task: Value = serde_json::from_str(&docker(&["inspect", id])).unwrap();
        let task = &task[0];
        if task["Slot"] == n && task["Status"]["State"] == "running" {
            let container = task["Status"]["ContainerStatus"]["ContainerID"]
                .as_str()
                .unwrap()
                .to_string();
            let pid = task["Status"]["ContainerStatus"]["PID"].as_i64().unwrap();
            return (container, pid);
        }
    }
    panic!(
        "no running task in slot {n}: {}",
        docker(&["service", "ps", &service])
    );
}

fn signal(pid: i64, sig: &str) {
    assert!(
        Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
}

/// The events of replica `n`'s thread (`trace --json`).
fn events(pool: &Pool, n: u32) -> Vec<Value> {
    pool.replica_events("worker", n)
}

/// Whether replica `n`'s thread has executed `writes` writes (the last turn is then in its
/// sleep).
fn wrote(pool: &Pool, n: u32, writes: usize) -> bool {
    events(pool, n)
        .iter()
        .filter(|e| {
            e["type"] == "tool_call"
                && e["data"]["name"] == "file_write"
                && e["data"]["mode"] == "executed"
        })
        .count()
        >= writes
}

/// The lines the slot's runner wrote to its workspace (the slot's volume on this node).
fn story_lines(pool: &Pool, n: u32) -> usize {
    let volume = format!("ninetrix-{}-worker-{n}-workspace", pool.name);
    let path = docker(&["volume", "inspect", &volume, "--format", "{{.Mountpoint}}"]);
    std::fs::read_to_string(std::path::Path::new(path.trim()).join("story.txt"))
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

/// `invoke` of replica `n` in the background; its reply is checked by [`reply`].
fn invoke(pool: &Pool, n: u32, id: &str) -> std::process::Child {
    pool.command(&[
        "invoke",
        "-p",
        &pool.name,
        "--agent",
        "worker",
        "--replica",
        &n.to_string(),
        "-m",
        "write the story",
        "--id",
        id,
        "--timeout",
        "120",
    ])
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap()
}

fn reply(pool: &Pool, child: std::process::Child) -> String {
    let out = child.wait_with_output().unwrap();
    let service = format!("ninetrix-{}-worker", pool.name);
    assert_eq!(
        out.status.code(),
        Some(0),
        "invoke: {}\ntasks:\n{}\nlogs:\n{}",
        text(&out),
        docker(&["service", "ps", "--no-trunc", &service]),
        docker(&["service", "logs", "--tail", "40", &service])
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// The boot epochs of replica `n`'s thread, in order.
fn boots(pool: &Pool, n: u32) -> Vec<i64> {
    events(pool, n)
        .iter()
        .filter(|e| e["type"] == "boot")
        .filter_map(|e| e["data"]["epoch"].as_i64())
        .collect()
}

/// Outside a swarm, `up --swarm` is a clear error that says how to make one, and starts nothing.
/// Runs on every engine that is in no swarm (it changes nothing).
#[test]
fn up_swarm_outside_a_swarm_says_how_to_make_one_and_starts_nothing() {
    if docker(&["info", "--format", "{{.Swarm.LocalNodeState}}"]).trim() == "active" {
        // The engine is in a swarm already: there is no "outside" to test here.
        return;
    }
    let pool = Pool::new("noswarm");
    // The sidecar's image is never built: the swarm check comes first.
    pool.write(&agents(&pool, 1));
    let out = pool.ninetrix(&["up", "--swarm", "-f", pool.file().to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("docker swarm init"),
        "the error says what to do: {}",
        text(&out)
    );
    let made = docker(&[
        "ps",
        "-aq",
        "--filter",
        &format!("label=dev.ninetrix.pool={}", pool.name),
    ]);
    assert_eq!(made.trim(), "", "nothing was started");
}

/// The story. It makes the engine a single-node swarm manager for its run (and leaves the swarm
/// after), so it runs only when `NINETRIX_TEST_SWARM=1` allows that (CI sets it); otherwise it
/// says `SKIPPED: needs a Docker swarm (…)`.
#[test]
fn the_swarm_story() {
    if ninetrix_testkit::require(ninetrix_testkit::Need::Swarm).is_none() {
        return;
    }
    let pool = Pool::new("swarm");
    let images = Images(vec![server_image(&pool)].into());
    lines_server_image(&server_image(&pool));
    pool.write(&agents(&pool, 2));
    let _swarm = Swarm::ensure();
    let _leftovers = Leftovers(pool.name.clone());
    let minute = Duration::from_secs(60);
    let label = format!("label=dev.ninetrix.swarm.pool={}", pool.name);

    // SQLite with two API replicas is refused before anything is made.
    let out = pool.ninetrix(&[
        "up",
        "--swarm",
        "--api-replicas",
        "2",
        "-f",
        pool.file().to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(text(&out).contains("needs Postgres"), "{}", text(&out));
    assert!(
        docker(&["service", "ls", "-q", "--filter", &label])
            .trim()
            .is_empty()
    );

    // Up: the API service, one service per agent, the secrets as Swarm secrets.
    let out = pool.up(&["--swarm"]);
    assert!(!out.contains(SECRET), "the secret leaked into up's output");
    let state = pool.state();
    assert!(state["swarm"]["api_port"].as_u64().is_some(), "{state}");
    let services = docker(&[
        "service",
        "ls",
        "--filter",
        &format!("label=dev.ninetrix.swarm.pool={}", pool.name),
        "--format",
        "{{.Name}} {{.Mode}} {{.Replicas}}",
    ]);
    for want in [
        "-api replicated",
        "-worker replicated",
        "-scribe replicated",
        "-mcp-lines replicated",
        "-digest replicated job",
    ] {
        assert!(
            services.contains(&format!("ninetrix-{}{want}", pool.name)),
            "{want} in {services}"
        );
    }
    let specs = docker(&[
        "service",
        "inspect",
        &format!("ninetrix-{}-worker", pool.name),
    ]);
    assert!(
        !specs.contains(SECRET),
        "a secret value in the service spec"
    );
    assert!(specs.contains("\"Condition\": \"on-failure\""), "{specs}");
    assert!(specs.contains("\"MaxAttempts\": 3"), "{specs}");
    assert!(specs.contains("AGENTFILE_REPLICA={{.Task.Slot}}"));
    wait_for("both slots running", minute, || {
        running(&pool, 1) && running(&pool, 2)
    });
    let (container, _) = task_container(&pool, 1);
    // The same agentfile again: nothing is replaced, and `up` says so.
    let again = pool.up(&["--swarm"]);
    let worker_line = again
        .lines()
        .find(|l| l.contains(&format!("ninetrix-{}-worker ", pool.name)))
        .unwrap_or_default();
    assert!(worker_line.contains("Unchanged"), "{again}");
    assert_eq!(task_container(&pool, 1).0, container, "the task was kept");
    let env = docker(&["inspect", &container, "--format", "{{json .Config.Env}}"]);
    assert!(
        !env.contains(SECRET),
        "a secret value in a task's environment"
    );
    let first = slot(&pool, 1).unwrap();
    let second = slot(&pool, 2).unwrap();
    assert_ne!(first["thread_id"], second["thread_id"], "a thread per slot");
    assert!(first["node"].as_str().is_some_and(|n| !n.is_empty()));
    // The batch agent ran as a job: once, to completion, its answer in its logs.
    wait_for("the digest job to complete", minute, || {
        ps(&pool)
            .iter()
            .any(|r| r["agent"] == "digest" && r["state"] == "complete")
    });
    let logs = pool.ninetrix(&["logs", "-p", &pool.name, "--agent", "digest"]);
    assert!(
        text(&logs).contains("The digest is ready."),
        "{}",
        text(&logs)
    );

    // The sidecar MCP server: a service on the pool network, listed by `ps` as on one host; the
    // scribe's write goes through it once.
    let sidecar_service = format!("ninetrix-{}-mcp-lines", pool.name);
    wait_for("the sidecar running", minute, || {
        ps(&pool)
            .iter()
            .any(|r| r["agent"] == "mcp:lines" && r["state"] == "running")
    });
    let listed = || {
        pool.replica_events("scribe", 1)
            .iter()
            .any(|e| e["type"] == "mcp_tools" && e["data"]["server"] == "lines")
    };
    let deadline = std::time::Instant::now() + minute;
    while !listed() {
        assert!(
            std::time::Instant::now() < deadline,
            "the scribe did not list the sidecar's tools in a minute\nscribe:\n{}\nsidecar:\n{}",
            text(&pool.ninetrix(&["logs", "-p", &pool.name, "--agent", "scribe"])),
            docker(&["service", "logs", "--tail", "40", &sidecar_service])
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let written = pool.invoke("scribe", "write hello", &["--timeout", "120"]);
    assert!(
        written.status.success() && text(&written).contains("Written."),
        "{}",
        text(&written)
    );
    let sidecar_task = docker(&[
        "ps",
        "-q",
        "--filter",
        &format!("label=com.docker.swarm.service.name={sidecar_service}"),
    ]);
    let journal = lines_journal(sidecar_task.trim());
    assert_eq!(
        journal.iter().filter(|t| *t == "append_line").count(),
        1,
        "the write went through the sidecar once: {journal:?}"
    );
    images.0.borrow_mut().push(
        docker(&[
            "service",
            "inspect",
            &sidecar_service,
            "--format",
            "{{.Spec.TaskTemplate.ContainerSpec.Image}}",
        ])
        .trim()
        .to_string(),
    );

    // A task's process killed mid-turn: Swarm replaces the task in the same slot, its runner
    // resumes the same thread and the write is replayed from the ledger, not run again.
    let call = invoke(&pool, 1, "kill-1");
    wait_for("the write of turn 1", minute, || wrote(&pool, 1, 1));
    let (_, pid) = task_container(&pool, 1);
    signal(pid, "-9");
    assert_eq!(reply(&pool, call), "Done.\n", "exactly one reply");
    let row = slot(&pool, 1).unwrap();
    assert_eq!(
        row["thread_id"], first["thread_id"],
        "same slot, same thread"
    );
    assert_eq!(row["restarts"], 1, "{row}");
    assert_eq!(story_lines(&pool, 1), 1, "the write ran once");
    let epochs = boots(&pool, 1);
    assert!(
        epochs.len() >= 2 && epochs.windows(2).all(|w| w[0] < w[1]),
        "{epochs:?}"
    );
    let logs = pool.ninetrix(&["logs", "-p", &pool.name, "--agent", "worker"]);
    assert!(text(&logs).contains("worker-1 |"), "{}", text(&logs));

    // Scale up: slot 3 gets a thread of its own. Scale down, then up: slot 2 keeps its thread.
    pool.write(&agents(&pool, 3));
    pool.up(&["--swarm"]);
    wait_for("slot 3 running", minute, || running(&pool, 3));
    let third = slot(&pool, 3).unwrap()["thread_id"].clone();
    assert!(third.is_string() && third != first["thread_id"] && third != second["thread_id"]);
    pool.write(&agents(&pool, 1));
    pool.up(&["--swarm"]);
    wait_for("slots 2 and 3 gone", minute, || {
        slot(&pool, 2).is_none() && slot(&pool, 3).is_none()
    });
    pool.write(&agents(&pool, 2));
    pool.up(&["--swarm"]);
    wait_for("slot 2 running again", minute, || running(&pool, 2));
    assert_eq!(slot(&pool, 2).unwrap()["thread_id"], second["thread_id"]);

    // A service update mid-turn: each task is stopped (it checkpoints) before its replacement
    // starts and resumes the turn.
    let call = invoke(&pool, 1, "update-1");
    wait_for("the write of turn 2", minute, || wrote(&pool, 1, 2));
    pool.up(&["--swarm", "--force-recreate"]);
    assert_eq!(reply(&pool, call), "Done.\n");
    assert_eq!(story_lines(&pool, 1), 2, "one write per turn");

    // A stale copy: slot 1's process is paused mid-turn while an update starts its replacement
    // first; the replacement claims the thread and resumes the turn; the old copy, woken, is
    // fenced at its next write and stops by itself (exit 0).
    wait_for("slot 1 running", minute, || running(&pool, 1));
    let call = invoke(&pool, 1, "stale-1");
    wait_for("the write of turn 3", minute, || wrote(&pool, 1, 3));
    let (stale, pid) = task_container(&pool, 1);
    signal(pid, "-STOP");
    let boots_before = boots(&pool, 1).len();
    let service = format!("ninetrix-{}-worker", pool.name);
    let update = Command::new("docker")
        .args([
            "service",
            "update",
            "--detach",
            "--force",
            "--update-order",
            "start-first",
            &service,
        ])
        .output()
        .unwrap();
    assert!(update.status.success(), "{}", text(&update));
    wait_for("the replacement to claim the thread", minute, || {
        boots(&pool, 1).len() > boots_before
    });
    signal(pid, "-CONT");
    assert_eq!(reply(&pool, call), "Done.\n");
    wait_for("the stale copy to stop", minute, || {
        docker(&["inspect", &stale, "--format", "{{.State.Running}}"]).trim() != "true"
    });
    // The runner logs to stderr.
    let stale_logs = text(
        &Command::new("docker")
            .args(["logs", &stale])
            .output()
            .unwrap(),
    );
    assert!(
        stale_logs.contains("fenced"),
        "the stale copy stopped without being fenced: {stale_logs}"
    );
    assert_eq!(
        docker(&["inspect", &stale, "--format", "{{.State.ExitCode}}"]).trim(),
        "0"
    );
    assert_eq!(
        story_lines(&pool, 1),
        3,
        "the stale copy wrote nothing twice"
    );
    let epochs = boots(&pool, 1);
    assert!(epochs.windows(2).all(|w| w[0] < w[1]), "{epochs:?}");

    // Down with --purge: services, secrets, network, volumes and the pool file are gone.
    let out = pool.ninetrix(&["down", "-p", &pool.name, "--purge", "-t", "5"]);
    assert!(out.status.success(), "down: {}", text(&out));
    // (A removed overlay network leaves the node's list a moment after the manager's.)
    for kind in ["service", "secret", "network", "volume"] {
        wait_for(&format!("no {kind} of the pool left"), minute, || {
            docker(&[kind, "ls", "-q", "--filter", &label])
                .trim()
                .is_empty()
        });
    }
    assert!(!pool.state_file().exists(), "the pool file is gone");
}
