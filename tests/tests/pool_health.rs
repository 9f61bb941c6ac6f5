//! What `ps`, `invoke` and `up` tell the user about agents that cannot answer, on real Docker:
//! a durable agent that gave up is listed without `-a` and `invoke` refuses it at once; a batch
//! agent is refused with the `ninetrix run` line to use; an agent whose model is unreachable is
//! unhealthy with the reason, and `invoke` says its message stays queued; a runner that resumes a
//! long turn is Ready at once.

mod support;

use std::time::Duration;

use serde_json::Value;
use support::docker::{Pool, inspect, text, wait_for};

/// `ps --json` rows of the pool.
fn ps(pool: &Pool, all: bool) -> Vec<Value> {
    let mut args = vec!["ps", "-p", &pool.name, "--json"];
    if all {
        args.push("-a");
    }
    let out = pool.ninetrix(&args);
    assert!(out.status.success(), "ps failed:\n{}", text(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn row<'a>(rows: &'a [Value], agent: &str) -> Option<&'a Value> {
    rows.iter().find(|r| r["agent"] == agent)
}

/// Turns an agent's first replica has started.
fn turns_started(pool: &Pool, agent: &str) -> usize {
    pool.events(agent)
        .iter()
        .filter(|e| e["type"] == "turn_started")
        .count()
}

const BROKEN_AND_BATCH: &str = "agents:
  broken:
    runtime:
      provider: scripted
      script: [\"never answers\"]
    env:
      OTEL_EXPORTER_OTLP_ENDPOINT: http://collector:4318
      OTEL_EXPORTER_OTLP_PROTOCOL: grpc
  digest:
    runtime:
      provider: scripted
      script: [\"The digest is written.\"]
    execution:
      durability: false
      task: Write the digest.
";

#[test]
fn a_dead_agent_looks_dead_and_invoke_refuses_it_at_once() {
    let pool = Pool::new("dead");
    pool.write(BROKEN_AND_BATCH);
    // Its OpenTelemetry settings ask for gRPC, which the runner does not speak (a configuration
    // error `validate` cannot see: the variables are the exporter's): every boot exits 2, Docker
    // restarts it three times, then gives up. `up` reports it; it does not hang.
    let out = pool.ninetrix(&["up", "-f", pool.file().to_str().unwrap()]);
    let up = text(&out);
    assert!(
        !out.status.success(),
        "up must fail for a runner that exits:\n{up}"
    );
    let broken = pool.container("broken", 1);
    wait_for(
        "the broken agent to give up",
        Duration::from_secs(60),
        || {
            let c = inspect(&broken);
            c["State"]["Status"] == "exited" && c["RestartCount"].as_i64() == Some(3)
        },
    );

    // `ps` without -a lists the durable agent that gave up, with the reason; the finished batch
    // job needs -a.
    let rows = ps(&pool, false);
    let dead = row(&rows, "broken").expect("a gave-up durable agent is listed without -a");
    assert_eq!(dead["gave_up"], true, "{dead}");
    assert_eq!(dead["answers"], false, "{dead}");
    let status = dead["status"].as_str().unwrap();
    assert!(
        status.contains("gave up after 3 restarts")
            && status.contains("OTEL_EXPORTER_OTLP_PROTOCOL"),
        "the status says it gave up and why: {status}"
    );
    assert!(
        row(&rows, "digest").is_none(),
        "a finished batch job needs -a"
    );
    assert!(row(&ps(&pool, true), "digest").is_some());
    let table = text(&pool.ninetrix(&["ps", "-p", &pool.name]));
    assert!(table.contains("gave up after 3 restarts"), "{table}");

    // invoke refuses at once, names the cause and the fix, and queues nothing.
    let out = pool.invoke("broken", "hello", &["--timeout", "120"]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(69), "{said}");
    // It exits 2 at every boot (a configuration it refuses): the fix is not a restart but what
    // the runner named, then the `up` that works from anywhere (with the recorded agentfile).
    assert!(
        said.contains("refused its configuration (exit 2)"),
        "{said}"
    );
    assert!(said.contains("OTEL_EXPORTER_OTLP_PROTOCOL"), "{said}");
    assert!(said.contains("a restart does not fix that"), "{said}");
    assert!(
        said.contains(&format!(
            "ninetrix up -f {} -p {}",
            pool.file().display(),
            pool.name
        )),
        "{said}"
    );
    assert!(said.contains("nothing was queued"), "{said}");

    // A batch agent takes no messages: refused, with the line to run it instead.
    let out = pool.invoke("digest", "Write it now", &[]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(69), "{said}");
    assert!(
        said.contains(&format!(
            "ninetrix run -p {} --agent digest -m 'Write it now'",
            pool.name
        )),
        "{said}"
    );
    wait_for("the batch job's own turn", Duration::from_secs(30), || {
        pool.events("digest")
            .iter()
            .any(|e| e["type"] == "turn_completed")
    });
    assert_eq!(
        turns_started(&pool, "digest"),
        1,
        "only the job's own task ran"
    );
}

const UNREACHABLE_MODEL: &str = "agents:
  asker:
    runtime:
      provider: openai
      model: gpt-4o-mini
      base_url: http://127.0.0.1:9/v1
      api_key_secret: TEST_SECRET
    secrets: [TEST_SECRET]
";

#[test]
fn an_agent_whose_model_is_unreachable_is_unhealthy_and_invoke_says_so() {
    let pool = Pool::new("sick");
    pool.write(UNREACHABLE_MODEL);
    // Nothing listens on the container's own port 9: every model call is refused. The runner
    // claims its thread and serves, so `up` says Ready.
    pool.up(&[]);
    let out = pool.invoke("asker", "Are you there?", &["--timeout", "240"]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(69), "{said}");
    assert!(said.contains("queued as message"), "{said}");
    assert!(said.contains("stays queued"), "{said}");
    assert!(
        said.contains("unhealthy: model unreachable")
            && said.contains("http://127.0.0.1:9/v1")
            && said.contains("runtime.base_url"),
        "{said}"
    );

    let rows = ps(&pool, false);
    let sick = row(&rows, "asker").unwrap();
    assert_eq!(sick["health"], "unhealthy", "{sick}");
    assert!(
        sick["reason"]
            .as_str()
            .unwrap()
            .contains("connection refused"),
        "{sick}"
    );
    let table = text(&pool.ninetrix(&["ps", "-p", &pool.name]));
    assert!(table.contains("(unhealthy: model unreachable"), "{table}");
    // It keeps running and retrying: no restart was spent.
    assert_eq!(inspect(&pool.container("asker", 1))["RestartCount"], 0);

    // A second invoke is refused before anything is queued.
    let out = pool.invoke("asker", "Still there?", &[]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(69), "{said}");
    assert!(said.contains("nothing was queued"), "{said}");
}

const LONG_TURN: &str = "agents:
  sleeper:
    runtime:
      provider: scripted
      script:
        - text: Waiting a long time.
          tool_calls:
            - { name: sleep, args: { seconds: 120 } }
        - text: Done waiting.
    tools: [sleep]
";

#[test]
fn a_runner_resuming_a_long_turn_is_ready_at_once() {
    let pool = Pool::new("resume");
    pool.write(LONG_TURN);
    pool.up(&[]);
    let out = pool.invoke("sleeper", "Wait.", &["--no-wait"]);
    assert!(out.status.success(), "{}", text(&out));
    wait_for("the long turn to start", Duration::from_secs(30), || {
        pool.events("sleeper")
            .iter()
            .any(|e| e["type"] == "tool_call" || e["type"] == "turn_started")
    });
    // Stop it mid-turn (SIGTERM, then SIGKILL after 1 s): the turn is left interrupted.
    let down = pool.ninetrix(&["down", "-p", &pool.name, "-t", "1"]);
    assert!(down.status.success(), "{}", text(&down));
    let up = pool.up(&[]);
    assert!(
        up.contains("Ready (resuming its interrupted turn)"),
        "up calls a runner that resumes a long turn ready at once:\n{up}"
    );
    let events = pool.events("sleeper");
    assert!(
        events.iter().any(|e| e["type"] == "turn_resumed"),
        "the turn was resumed"
    );
    assert!(
        !events.iter().any(|e| e["type"] == "turn_completed"),
        "up returned while the resumed 120 s turn was still running"
    );
}

/// The runner process inside a container (the child of its `docker-init`), as a host PID.
fn runner_pid(container: &str) -> u32 {
    let init = inspect(container)["State"]["Pid"].as_i64().unwrap_or(0);
    assert!(init > 0, "{container} is not running");
    let children = std::fs::read_to_string(format!("/proc/{init}/task/{init}/children")).unwrap();
    children
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{container}'s init has no child"))
}

fn signal(pid: u32, sig: &str) {
    assert!(
        std::process::Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
}

/// Health without a Docker healthcheck: no `docker exec` runs per container; `ps` reads the
/// runners' reports from the pool's health volume. A runner that stops reporting (frozen with
/// SIGSTOP) turns unhealthy with the reason while its sibling stays healthy, `invoke` refuses
/// it, and it is healthy again once it runs.
#[test]
fn a_runner_that_stops_reporting_is_unhealthy_in_ps_without_a_docker_healthcheck() {
    let pool = Pool::new("stale");
    pool.write(
        "agents:\n  idler:\n    runtime: { provider: scripted, script: [\"ok\"] }\n    execution: { replicas: 2 }\n",
    );
    pool.up(&[]);
    let (one, two) = (pool.container("idler", 1), pool.container("idler", 2));
    for c in [&one, &two] {
        let info = inspect(c);
        assert!(
            info["State"]["Health"].is_null(),
            "Docker runs no healthcheck: {}",
            info["State"]
        );
        assert_eq!(info["Config"]["Healthcheck"]["Test"][0], "NONE");
    }
    let health = |replica: u64| {
        let rows = ps(&pool, false);
        let row = rows
            .iter()
            .find(|r| r["replica"] == replica)
            .unwrap_or_else(|| panic!("replica {replica} listed: {rows:#?}"))
            .clone();
        (
            row["health"].as_str().unwrap_or("none").to_string(),
            row["reason"].as_str().unwrap_or("").to_string(),
        )
    };
    wait_for("both runners healthy", Duration::from_secs(40), || {
        health(1).0 == "healthy" && health(2).0 == "healthy"
    });

    let frozen = runner_pid(&two);
    signal(frozen, "-STOP");
    let mut last = (String::new(), String::new());
    wait_for(
        "the frozen runner to be unhealthy in ps",
        Duration::from_secs(100),
        || {
            last = health(2);
            last.0 == "unhealthy"
        },
    );
    assert!(
        last.1.starts_with("the runner has not reported for"),
        "the reason is named: {last:?}"
    );
    assert_eq!(health(1).0, "healthy", "its sibling is not affected");
    let out = pool.invoke("idler", "hello", &["--replica", "2"]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(69), "{said}");
    assert!(
        said.contains("unhealthy: the runner has not reported"),
        "{said}"
    );
    assert!(said.contains("nothing was queued"), "{said}");

    signal(frozen, "-CONT");
    wait_for(
        "the runner to be healthy again",
        Duration::from_secs(30),
        || health(2).0 == "healthy",
    );
}
