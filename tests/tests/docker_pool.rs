//! `ninetrix up` / `ps` / `down` against the real Docker Engine. Each test has its own pool name,
//! `$AGENTFILE_HOME`, local API container (`NINETRIX_API_CONTAINER`) and API port, and cleans up by
//! label even when it fails. The test drives the real binary; it reads Docker through the
//! `docker` CLI (the product itself never shells out to it).

mod support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use ninetrix_e2e::ninetrix_bin;
use serde_json::Value;
use support::docker::{Pool, SECRET, docker, env_of, inspect, kill_host_pid, wait_for};

const TWO_AGENTS: &str = "agents:
  alpha:
    runtime:
      provider: scripted
      script: [\"hello from alpha\"]
      resources: { cpu: 0.5, memory: 64Mi }
    execution: { replicas: 2 }
    env: { LOG_LEVEL: debug }
    secrets: [TEST_SECRET]
  beta:
    runtime:
      provider: scripted
      script: [\"hello from beta\"]
";

#[test]
fn up_creates_the_containers_the_spec_describes_and_reconciles_changes() {
    let pool = Pool::new("up");
    pool.write(TWO_AGENTS);
    let output = pool.up(&[]);
    assert!(
        !output.contains(SECRET),
        "the secret value leaked into CLI output"
    );

    // Containers as specified.
    let state = pool.state();
    for (agent, replica) in [("alpha", 1), ("alpha", 2), ("beta", 1)] {
        let c = inspect(&pool.container(agent, replica));
        let labels = &c["Config"]["Labels"];
        assert_eq!(labels["dev.ninetrix.pool"], pool.name.as_str());
        assert_eq!(labels["dev.ninetrix.agent"], agent);
        assert_eq!(labels["dev.ninetrix.replica"], replica.to_string());
        assert_eq!(labels["dev.ninetrix.durable"], "true");
        let thread = env_of(&c, "AGENTFILE_THREAD_ID").unwrap();
        assert_eq!(labels["dev.ninetrix.thread-id"], thread.as_str());
        assert_eq!(
            state["agents"][agent][replica.to_string()]["thread_id"],
            thread.as_str(),
            "pool state and container agree"
        );
        assert_eq!(c["HostConfig"]["RestartPolicy"]["Name"], "on-failure");
        assert_eq!(c["HostConfig"]["RestartPolicy"]["MaximumRetryCount"], 3);
        assert_eq!(c["HostConfig"]["Init"], true);
        assert_eq!(c["Config"]["Hostname"], format!("{agent}-{replica}"));
        assert!(
            c["HostConfig"]["ExtraHosts"]
                .to_string()
                .contains("host.docker.internal:host-gateway")
        );
        assert_eq!(
            env_of(&c, "AGENTFILE_RUNNER_TOKEN"),
            None,
            "the runner token is a file, not env"
        );
        assert!(c["State"]["Running"].as_bool().unwrap());
    }
    let alpha = inspect(&pool.container("alpha", 1));
    assert_eq!(alpha["HostConfig"]["NanoCpus"], 500_000_000);
    assert_eq!(alpha["HostConfig"]["Memory"], 64 * 1024 * 1024);
    assert_eq!(env_of(&alpha, "LOG_LEVEL").as_deref(), Some("debug"));
    // Hardened by default: not root, no capabilities, no new privileges, a read-only root with
    // a tmpfs /tmp, a pids limit, the secrets on an anonymous volume of this container.
    assert_eq!(alpha["Config"]["User"], "65532:65532");
    assert_eq!(alpha["HostConfig"]["CapDrop"], serde_json::json!(["ALL"]));
    assert_eq!(alpha["HostConfig"]["CapAdd"], Value::Null);
    assert_eq!(
        alpha["HostConfig"]["SecurityOpt"],
        serde_json::json!(["no-new-privileges"])
    );
    assert_eq!(alpha["HostConfig"]["ReadonlyRootfs"], true);
    assert_eq!(alpha["HostConfig"]["PidsLimit"], 512);
    assert!(alpha["HostConfig"]["Tmpfs"]["/tmp"].is_string());
    assert!(
        alpha["Mounts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["Destination"] == "/run/secrets" && m["Type"] == "volume"),
        "{}",
        alpha["Mounts"]
    );
    // The secret is a file in the container, and nowhere else: root's, readable by the
    // container's user (Docker gives uploaded files to root), hidden from tool processes by the
    // tool sandbox.
    let tar = Command::new("docker")
        .args([
            "cp",
            &format!("{}:/run/secrets/TEST_SECRET", pool.container("alpha", 1)),
            "-",
        ])
        .output()
        .unwrap()
        .stdout;
    assert!(String::from_utf8_lossy(&tar).contains(SECRET));
    assert_eq!(
        &tar[103..107],
        b"0444",
        "permission bits 0444 in the tar header"
    );
    for name in [pool.container("alpha", 1), pool.container("beta", 1)] {
        assert!(
            !docker(&["inspect", &name]).contains(SECRET),
            "secret in docker inspect of {name}"
        );
    }
    assert!(
        !std::fs::read_to_string(pool.state_file())
            .unwrap()
            .contains(SECRET)
    );

    // Up again: nothing recreated.
    let ids = |pool: &Pool| -> Vec<String> {
        [("alpha", 1), ("alpha", 2), ("beta", 1)]
            .iter()
            .map(|(a, r)| {
                inspect(&pool.container(a, *r))["Id"]
                    .as_str()
                    .unwrap_or("")
                    .to_string()
            })
            .collect()
    };
    let before = ids(&pool);
    pool.up(&[]);
    assert_eq!(ids(&pool), before, "an unchanged pool keeps its containers");

    // Change beta: only beta is recreated, with the same thread.
    let beta_thread = env_of(&inspect(&pool.container("beta", 1)), "AGENTFILE_THREAD_ID");
    pool.write(&TWO_AGENTS.replace("hello from beta", "hello again from beta"));
    // The dry run names the change and touches nothing.
    let plan = pool.up(&["--dry-run"]);
    assert!(
        plan.contains("recreate beta-1: config changed (runtime.script)"),
        "{plan}"
    );
    assert!(plan.contains("keep alpha-1: unchanged, running"), "{plan}");
    assert_eq!(ids(&pool), before, "a dry run changes nothing");
    pool.up(&[]);
    let after = ids(&pool);
    assert_eq!(after[..2], before[..2], "alpha untouched");
    assert_ne!(after[2], before[2], "beta recreated");
    assert_eq!(
        env_of(&inspect(&pool.container("beta", 1)), "AGENTFILE_THREAD_ID"),
        beta_thread,
        "recreated with the same thread"
    );
    // `trace` says so: a recreate, not a crash (`up` waited for the new runner's boot).
    assert_eq!(
        boot_kinds(&pool, "beta"),
        ["first", "recreated"],
        "beta's boots"
    );

    // Replicas 2 → 1: replica 2 removed.
    pool.write(
        &TWO_AGENTS
            .replace("hello from beta", "hello again from beta")
            .replace("replicas: 2", "replicas: 1"),
    );
    pool.up(&[]);
    assert!(
        inspect(&pool.container("alpha", 2)).is_null(),
        "replica 2 removed"
    );
    assert_eq!(
        inspect(&pool.container("alpha", 1))["Id"].as_str().unwrap(),
        before[0],
        "replica 1 kept"
    );

    // Beta leaves the file: reported as an orphan, removed with --remove-orphans.
    let only_alpha = TWO_AGENTS
        .split("  beta:")
        .next()
        .unwrap()
        .replace("replicas: 2", "replicas: 1");
    pool.write(&only_alpha);
    let out = pool.up(&[]);
    assert!(out.contains("Orphan"), "{out}");
    assert!(!inspect(&pool.container("beta", 1)).is_null());
    pool.up(&["--remove-orphans"]);
    assert!(
        inspect(&pool.container("beta", 1)).is_null(),
        "orphan removed"
    );

    // ps finds the pool by label.
    let ps = pool.ninetrix(&["ps", "-p", &pool.name, "--json"]);
    let rows: Value = serde_json::from_slice(&ps.stdout).unwrap();
    assert_eq!(rows.as_array().unwrap().len(), 1);
    assert_eq!(rows[0]["agent"], "alpha");
    // Its thread's spend, from the checkpoint API (the scripted model costs nothing).
    assert_eq!(rows[0]["spent_usd"], 0.0, "{rows}");

    // down keeps the state; up reuses the thread; down --purge removes the state.
    let thread = env_of(&inspect(&pool.container("alpha", 1)), "AGENTFILE_THREAD_ID");
    let file = pool.file();
    assert!(
        pool.ninetrix(&["down", "-f", file.to_str().unwrap(), "-t", "5"])
            .status
            .success()
    );
    assert!(inspect(&pool.container("alpha", 1)).is_null());
    assert!(
        docker(&["network", "ls", "--format", "{{.Name}}"])
            .lines()
            .all(|n| n != format!("ninetrix-{}", pool.name))
    );
    pool.up(&[]);
    assert_eq!(
        env_of(&inspect(&pool.container("alpha", 1)), "AGENTFILE_THREAD_ID"),
        thread,
        "thread IDs survive down/up"
    );
    // …and `trace` tells the pool back after `down` from a crash.
    assert_eq!(
        boot_kinds(&pool, "alpha"),
        ["first", "resumed_after_down"],
        "alpha-1's boots"
    );
    assert!(
        pool.ninetrix(&["down", "-f", file.to_str().unwrap(), "--purge", "-t", "5"])
            .status
            .success()
    );
    assert!(
        !pool.state_file().exists(),
        "--purge deletes the pool state"
    );
}

/// What each boot of `agent`-1's thread was, as `trace --json` says (`boot_kind.kind`).
fn boot_kinds(pool: &Pool, agent: &str) -> Vec<String> {
    let out = pool
        .command(&["trace", "-p", &pool.name, "--agent", agent, "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "trace failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "boot")
        .map(|e| e["boot_kind"]["kind"].as_str().unwrap_or("?").to_string())
        .collect()
}

#[test]
fn up_dry_run_prints_the_plan_and_creates_nothing() {
    let pool = Pool::new("dry");
    pool.write(TWO_AGENTS);
    let out = pool.up(&["--dry-run"]);
    for line in [
        "create alpha-1: missing",
        "create alpha-2: missing",
        "create beta-1: missing",
    ] {
        assert!(out.contains(line), "{line} missing from:\n{out}");
    }
    assert!(
        !out.contains(SECRET),
        "the secret value leaked into the plan"
    );
    let labelled = docker(&[
        "ps",
        "-aq",
        "--filter",
        &format!("label=dev.ninetrix.pool={}", pool.name),
    ]);
    assert_eq!(labelled.trim(), "", "no container was created");
    assert!(
        inspect(&format!("ninetrix-api-{}", pool.name)).is_null(),
        "the API was not started"
    );
    assert!(
        docker(&["network", "ls", "--format", "{{.Name}}"])
            .lines()
            .all(|n| n != format!("ninetrix-{}", pool.name)),
        "no network was created"
    );
    assert!(!pool.state_file().exists(), "no pool state was written");
}

#[test]
fn a_failed_create_keeps_the_ids_of_the_containers_that_did_start() {
    let pool = Pool::new("partial");
    pool.write("agents:\n  alpha:\n    runtime: { provider: scripted, script: [\"one\"] }\n");
    pool.up(&[]);
    // A container ninetrix does not manage holds beta's name, so creating beta fails.
    let image = inspect(&pool.container("alpha", 1))["Config"]["Image"]
        .as_str()
        .unwrap()
        .to_string();
    docker(&["create", "--name", &pool.container("beta", 1), &image]);
    pool.write(
        "agents:\n  alpha:\n    runtime: { provider: scripted, script: [\"two\"] }\n  beta:\n    runtime: { provider: scripted, script: [\"b\"] }\n",
    );
    let out = pool.ninetrix(&["up", "-f", pool.file().to_str().unwrap()]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("already in use"), "{text}");
    // alpha was recreated, and its new ID is in the pool state although the run failed.
    let alpha = inspect(&pool.container("alpha", 1));
    assert!(alpha["State"]["Running"].as_bool().unwrap(), "{alpha}");
    assert_eq!(
        pool.state()["agents"]["alpha"]["1"]["container_id"],
        alpha["Id"],
        "the recreated container's ID was recorded"
    );
    docker(&["rm", "-f", &pool.container("beta", 1)]);
}

#[test]
fn crashes_restart_with_the_same_thread_until_the_budget_is_spent() {
    let pool = Pool::new("crash");
    pool.write("agents:\n  worker:\n    runtime: { provider: scripted, script: [\"ok\"] }\n  job:\n    runtime: { provider: scripted, script: [\"done\"] }\n    env: { OTEL_EXPORTER_OTLP_ENDPOINT: \"http://collector:4318\", OTEL_EXPORTER_OTLP_PROTOCOL: grpc }\n    execution: { durability: false, task: \"go\" }\n");
    // The batch job's OpenTelemetry settings ask for a protocol the runner does not speak: it
    // exits 2 at once and is never restarted.
    let out = pool.ninetrix(&["up", "-f", pool.file().to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let name = pool.container("worker", 1);
    let thread = env_of(&inspect(&name), "AGENTFILE_THREAD_ID");
    for crash in 1..=3 {
        kill_host_pid(&name);
        wait_for("the restart", Duration::from_secs(30), || {
            let c = inspect(&name);
            c["RestartCount"] == crash
                && c["State"]["Running"] == true
                && c["State"]["Restarting"] == false
                && c["State"]["Pid"].as_i64().unwrap_or(0) > 0
        });
        assert_eq!(
            env_of(&inspect(&name), "AGENTFILE_THREAD_ID"),
            thread,
            "same thread after restart {crash}"
        );
    }
    // The fourth crash exhausts the budget.
    kill_host_pid(&name);
    wait_for("the container to give up", Duration::from_secs(30), || {
        let c = inspect(&name);
        c["State"]["Running"] == false && c["State"]["Restarting"] == false
    });
    let ps: Value =
        serde_json::from_slice(&pool.ninetrix(&["ps", "-p", &pool.name, "--json"]).stdout).unwrap();
    // Listed without -a: a durable agent that is not running is what `ps` is for.
    let worker = ps
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["agent"] == "worker")
        .unwrap()
        .clone();
    assert_eq!(worker["gave_up"], true, "{worker}");
    assert!(
        worker["status"]
            .as_str()
            .unwrap()
            .contains("(gave up after 3 restarts"),
        "{worker}"
    );
    // The batch job failed once and was never restarted.
    let job = inspect(&pool.container("job", 1));
    assert_eq!(
        (
            job["RestartCount"].as_i64(),
            job["State"]["ExitCode"].as_i64(),
            job["HostConfig"]["RestartPolicy"]["Name"].as_str()
        ),
        (Some(0), Some(2), Some("no"))
    );
    // up starts the worker again with a fresh budget, same thread.
    pool.up(&[]);
    let c = inspect(&name);
    assert_eq!(
        (c["State"]["Running"].as_bool(), c["RestartCount"].as_i64()),
        (Some(true), Some(0))
    );
    assert_eq!(env_of(&c, "AGENTFILE_THREAD_ID"), thread);
}

#[test]
fn an_unreachable_docker_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("agentfile.yaml");
    std::fs::write(
        &file,
        "agents:\n  a:\n    runtime: { provider: scripted, script: [hi] }\n",
    )
    .unwrap();
    let out = Command::new(ninetrix_bin())
        .args(["up", "-f", file.to_str().unwrap()])
        .env(
            "DOCKER_HOST",
            format!("unix://{}", dir.path().join("nothing.sock").display()),
        )
        .env("AGENTFILE_HOME", dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("Docker is not reachable")
            && err.contains("nothing.sock")
            && err.contains("DOCKER_HOST"),
        "{err}"
    );
}

#[test]
fn a_missing_secret_stops_up_before_anything_starts() {
    let pool = Pool::new("sec");
    pool.write("agents:\n  a:\n    runtime: { provider: scripted, script: [hi] }\n    secrets: [NOT_SET_ANYWHERE]\n");
    let out = pool.ninetrix(&["up", "-f", pool.file().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("secret NOT_SET_ANYWHERE (needed by agent `a`) is not set")
    );
    assert!(inspect(&pool.container("a", 1)).is_null());
    let _ = Path::new("");
}

const STORY: &str = "agents:
  researcher:
    runtime:
      provider: scripted
      script:
        - text: Recording, then waiting for the source.
          tool_calls:
            - { name: file_write, args: { path: story.txt, content: \"line\\n\", mode: append } }
            - { name: sleep, args: { seconds: 4 } }
        - text: Done.
    tools: [file_write, sleep]
";

/// The mission in one test: a turn with a `write` tool is killed mid-tool; Docker restarts the
/// container; the runner resumes the thread, repairs the history, replays the completed write
/// from the ledger, finishes the turn, and the caller gets exactly one reply.
#[test]
fn the_crash_story() {
    let pool = Pool::new("story");
    pool.write(STORY);
    pool.up(&[]);
    let name = pool.container("researcher", 1);
    let thread = env_of(&inspect(&name), "AGENTFILE_THREAD_ID");
    let invoke = pool
        .command(&[
            "invoke",
            "-p",
            &pool.name,
            "--agent",
            "researcher",
            "-m",
            "write the story",
            "--id",
            "story-1",
            "--timeout",
            "90",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();

    // Mid-tool: the append is done and recorded, the sleep is running.
    wait_for("the write to be executed", Duration::from_secs(30), || {
        pool.events("researcher").iter().any(|e| {
            e["type"] == "tool_call"
                && e["data"]["name"] == "file_write"
                && e["data"]["mode"] == "executed"
        })
    });
    kill_host_pid(&name);

    let out = invoke.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "invoke --wait returns the reply"
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "Done.\n",
        "exactly one reply"
    );

    let c = inspect(&name);
    assert_eq!(c["RestartCount"], 1);
    assert_eq!(
        env_of(&c, "AGENTFILE_THREAD_ID"),
        thread,
        "same thread after the restart"
    );
    let events = pool.events("researcher");
    let epochs: Vec<i64> = events
        .iter()
        .filter(|e| e["type"] == "boot")
        .filter_map(|e| e["data"]["epoch"].as_i64())
        .collect();
    assert_eq!(
        epochs,
        [1, 2],
        "the restarted runner claimed a higher epoch"
    );
    let repair = events
        .iter()
        .find(|e| e["type"] == "repair")
        .expect("a repair event");
    assert!(
        !repair["data"]["dropped"].as_array().unwrap().is_empty(),
        "{repair}"
    );
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "tool_replayed" && e["data"]["name"] == "file_write"),
        "the completed write was replayed, not executed"
    );
    let executed = events
        .iter()
        .filter(|e| e["type"] == "tool_call" && e["data"]["name"] == "file_write")
        .count();
    assert_eq!(executed, 1, "the write ran once");
    let tar = Command::new("docker")
        .args(["cp", &format!("{name}:/workspace/story.txt"), "-"])
        .output()
        .unwrap()
        .stdout;
    assert_eq!(
        String::from_utf8_lossy(&tar).matches("line\n").count(),
        1,
        "the appended line is there exactly once"
    );

    // The human view of the same story.
    let trace = String::from_utf8_lossy(
        &pool
            .command(&["trace", "-p", &pool.name, "--agent", "researcher"])
            .output()
            .unwrap()
            .stdout,
    )
    .to_string();
    assert!(
        trace.contains("boot · epoch 2 · crash restart")
            && trace.contains("repair")
            && trace.contains("replayed"),
        "{trace}"
    );
    let logs = String::from_utf8_lossy(
        &pool
            .command(&["logs", "-p", &pool.name])
            .output()
            .unwrap()
            .stdout,
    )
    .to_string();
    assert!(
        logs.contains("researcher-1 | ") && logs.contains("restarted 1 time(s)"),
        "{logs}"
    );
    let ps: Value = serde_json::from_slice(
        &pool
            .command(&["ps", "-p", &pool.name, "--json"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert_eq!(ps[0]["restarts"], 1);
    // Asking again with the same --id adds nothing: the same single reply.
    let again = pool
        .command(&[
            "invoke",
            "-p",
            &pool.name,
            "--agent",
            "researcher",
            "-m",
            "write the story",
            "--id",
            "story-1",
            "--timeout",
            "30",
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&again.stdout), "Done.\n");
    let turns = pool
        .events("researcher")
        .iter()
        .filter(|e| e["type"] == "turn_started")
        .count();
    assert_eq!(turns, 1, "the retried invoke did not start a second turn");
}

#[test]
fn invoke_times_out_with_124_and_the_reply_still_comes() {
    let pool = Pool::new("slow");
    pool.write(&STORY.replace("seconds: 4", "seconds: 3"));
    pool.up(&[]);
    let out = pool
        .command(&[
            "invoke",
            "-p",
            &pool.name,
            "--agent",
            "researcher",
            "-m",
            "go",
            "--id",
            "slow-1",
            "--timeout",
            "1",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(124));
    assert!(String::from_utf8_lossy(&out.stderr).contains("stays queued"));
    wait_for("the late reply", Duration::from_secs(30), || {
        pool.events("researcher")
            .iter()
            .any(|e| e["type"] == "turn_completed" && e["data"]["seq"] == 1)
    });
}

#[test]
fn run_streams_the_reply_and_returns_the_exit_code() {
    let pool = Pool::new("run");
    pool.write("agents:\n  digest:\n    runtime: { provider: scripted, script: [\"The digest is ready.\"] }\n    execution: { durability: false, task: \"digest\" }\n  broken:\n    runtime: { provider: scripted, script: [\"never\"] }\n    env: { OTEL_EXPORTER_OTLP_ENDPOINT: \"http://collector:4318\", OTEL_EXPORTER_OTLP_PROTOCOL: grpc }\n");
    let file = pool.file();
    let ok = pool
        .command(&["run", "-f", file.to_str().unwrap(), "--agent", "digest"])
        .output()
        .unwrap();
    assert_eq!(
        ok.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&ok.stdout),
        "The digest is ready.\n"
    );
    // A durable agent runs once too; one that cannot start (an OTLP protocol it cannot speak) fails with
    // the runner's exit code and is never restarted.
    let bad = pool
        .command(&[
            "run",
            "-f",
            file.to_str().unwrap(),
            "--agent",
            "broken",
            "-m",
            "go",
        ])
        .output()
        .unwrap();
    assert_eq!(
        bad.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    assert!(String::from_utf8_lossy(&bad.stderr).contains("OTEL_EXPORTER_OTLP_PROTOCOL is `grpc`"));
    let runs = docker(&[
        "ps",
        "-aq",
        "--filter",
        &format!("label=dev.ninetrix.pool={}", pool.name),
        "--filter",
        "label=dev.ninetrix.run=true",
    ]);
    for id in runs.split_whitespace() {
        let c = inspect(id);
        assert_eq!(
            (
                c["RestartCount"].as_i64(),
                c["HostConfig"]["RestartPolicy"]["Name"].as_str()
            ),
            (Some(0), Some("no"))
        );
    }
    // --rm leaves nothing behind.
    let before = runs.split_whitespace().count();
    pool.command(&[
        "run",
        "-f",
        file.to_str().unwrap(),
        "--agent",
        "digest",
        "--rm",
    ])
    .output()
    .unwrap();
    let after = docker(&[
        "ps",
        "-aq",
        "--filter",
        &format!("label=dev.ninetrix.pool={}", pool.name),
        "--filter",
        "label=dev.ninetrix.run=true",
    ])
    .split_whitespace()
    .count();
    assert_eq!(after, before);
}

#[test]
fn logs_follow_a_container_across_a_restart_without_repeating_lines() {
    use std::io::BufRead as _;
    let pool = Pool::new("logs");
    pool.write("agents:\n  worker:\n    runtime: { provider: scripted, script: [\"ok\"] }\n");
    pool.up(&[]);
    let name = pool.container("worker", 1);
    let mut child = pool
        .command(&["logs", "-p", &pool.name, "-f", "--json"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Value>();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(serde_json::from_str(&line).expect("every --json line parses"));
        }
    });
    let mut seen: Vec<Value> = Vec::new();
    let mut wait_line = |what: &str, pred: &dyn Fn(&Value) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if seen.iter().any(pred) {
                return;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            seen.push(
                rx.recv_timeout(left)
                    .unwrap_or_else(|_| panic!("no log line for {what}; saw {seen:#?}")),
            );
        }
    };
    wait_line("the first boot", &|l| {
        l["line"].as_str().unwrap_or("").contains("boot: epoch 1")
    });
    kill_host_pid(&name);
    wait_line("the restart marker", &|l| {
        l["stream"] == "marker" && l["line"].as_str().unwrap_or("").contains("(restarting)")
    });
    wait_line("the second boot", &|l| {
        l["line"].as_str().unwrap_or("").contains("boot: epoch 2")
    });
    let _ = child.kill();
    let _ = child.wait();
    let first_boots = seen
        .iter()
        .filter(|l| l["line"].as_str().unwrap_or("").contains("boot: epoch 1"))
        .count();
    assert_eq!(
        first_boots, 1,
        "no line is repeated after re-attaching: {seen:#?}"
    );
    assert!(
        seen.iter()
            .all(|l| l["container"] == "worker-1" && l["agent"] == "worker")
    );
}

/// A network partition: the runner is cut off from the API in the middle of a turn, then
/// reconnected; it retries, and the turn completes with the write done once.
#[test]
fn a_runner_cut_off_from_the_api_recovers_when_reconnected() {
    let pool = Pool::new("net");
    pool.write(&STORY.replace("seconds: 4", "seconds: 2"));
    pool.up(&[]);
    let name = pool.container("researcher", 1);
    let network = format!("ninetrix-{}", pool.name);
    let invoke = pool
        .command(&[
            "invoke",
            "-p",
            &pool.name,
            "--agent",
            "researcher",
            "-m",
            "go",
            "--id",
            "net-1",
            "--timeout",
            "90",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("the write to be executed", Duration::from_secs(30), || {
        pool.events("researcher")
            .iter()
            .any(|e| e["type"] == "tool_call" && e["data"]["name"] == "file_write")
    });
    docker(&["network", "disconnect", &network, &name]);
    std::thread::sleep(Duration::from_secs(4)); // the partition itself: the sleep tool ends inside it
    docker(&["network", "connect", &network, &name]);
    let out = invoke.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "Done.\n");
    assert_eq!(
        inspect(&name)["RestartCount"],
        0,
        "a partition is ridden out, not crashed through"
    );
    let tar = Command::new("docker")
        .args(["cp", &format!("{name}:/workspace/story.txt"), "-"])
        .output()
        .unwrap()
        .stdout;
    assert_eq!(String::from_utf8_lossy(&tar).matches("line\n").count(), 1);
}
