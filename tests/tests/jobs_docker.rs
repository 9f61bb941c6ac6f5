//! Background jobs on the real Docker Engine (issue 40): a job that runs 60 s while its runner
//! is SIGKILLed twice and its container recreated once is one job whose whole output and exit
//! code reach the model; the runner killed at each step of a `job_start` (after its intent is
//! committed, between the create and the start, after the start) makes one job or none, never
//! two; a job started before a crash is killed by the runner after it; 20 jobs run at once;
//! `down` stops a pool's jobs (`--keep-jobs` keeps them) and `up` re-attaches; `--purge` removes
//! them. The pool's job broker is the only container with the Docker socket.

mod support;

use std::time::Duration;

use ninetrix_proto::ThreadId;
use ninetrix_proto::api::Event;
use support::docker::{Pool, block_on, docker, inspect, kill_host_pid, text, wait_for};

/// The job containers of `pool` (all states), by name.
fn jobs(pool: &Pool) -> Vec<String> {
    let mut names: Vec<String> = docker(&[
        "ps",
        "-a",
        "--filter",
        &format!("label=dev.ninetrix.pool={}", pool.name),
        "--filter",
        "label=dev.ninetrix.role=job",
        "--format",
        "{{.Names}}",
    ])
    .split_whitespace()
    .map(str::to_string)
    .collect();
    names.sort();
    names
}

/// The thread of replica 1 of `agent`.
fn thread(pool: &Pool, agent: &str) -> ThreadId {
    pool.state()["agents"][agent]["1"]["thread_id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// The results of `tool`'s calls in `agent`'s thread, in ledger order.
fn results(pool: &Pool, agent: &str, tool: &str) -> Vec<String> {
    let client = pool.admin_client(&format!("ninetrix-api-{}", pool.name));
    block_on(client.tool_calls(thread(pool, agent)))
        .unwrap()
        .into_iter()
        .filter(|c| c.tool == tool)
        .map(|c| c.result.unwrap_or_default())
        .collect()
}

/// The events of `agent`'s thread.
fn events(pool: &Pool, agent: &str) -> Vec<Event> {
    let client = pool.admin_client(&format!("ninetrix-api-{}", pool.name));
    block_on(client.events_after(thread(pool, agent), 0)).unwrap()
}

/// A scripted step calling `tool` with `args` (JSON).
fn call(tool: &str, args: serde_json::Value) -> String {
    format!("        - tool_calls: [{{ name: {tool}, args: {args} }}]\n")
}

/// An agent named `name` with the job tools on `image`, its model following `script`.
fn agent(name: &str, image: &str, script: &str, extra: &str) -> String {
    format!(
        "  {name}:
    runtime:
      provider: scripted
      image: {image}
      tool_timeout: 300
      jobs: {{ max_concurrent: 20, default_timeout: 10m }}
      script:
{script}        - text: Done.
    tools: [jobs]
{extra}"
    )
}

/// The `ninetrix invoke` of `message` to `agent`, run in the background.
fn invoke_in_background(pool: &Pool, agent: &str, message: &str) -> std::process::Child {
    let id = format!("{agent}-{message}");
    pool.command(&[
        "invoke",
        "-p",
        &pool.name,
        "--agent",
        agent,
        "-m",
        message,
        "--timeout",
        "600",
        "--id",
        &id,
    ])
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap()
}

/// Waits until `container` runs again after a kill (its restart count past `restarts`).
fn restarted(container: &str, restarts: u64) {
    wait_for(
        &format!("{container} restarted"),
        Duration::from_secs(60),
        || {
            let c = inspect(container);
            c["RestartCount"].as_u64().unwrap_or(0) > restarts
                && c["State"]["Status"] == "running"
                && c["State"]["Pid"].as_i64().unwrap_or(0) > 0
        },
    );
}

#[test]
fn a_job_outlives_two_kills_and_a_recreate_of_its_runner() {
    let pool = Pool::new("job");
    let image = format!("ninetrix-test-jobs:{}", pool.name);
    support::docker::shell_image(&image, &["sleep"]);
    let command = "i=0; while [ $i -lt 60 ]; do i=$((i+1)); echo line $i; sleep 1; done; exit 3";
    let script = [
        call(
            "job_start",
            serde_json::json!({"command": command, "name": "long"}),
        ),
        call(
            "job_wait",
            serde_json::json!({"job": "long", "timeout": 290}),
        ),
        call("job_output", serde_json::json!({"job": "long"})),
    ]
    .concat();
    pool.write(&format!(
        "agents:\n{}",
        agent("worker", &image, &script, "")
    ));
    pool.up(&[]);
    let runner = pool.container("worker", 1);
    let broker = format!("ninetrix-{}-jobs", pool.name);
    // The broker holds the socket; the runner does not.
    let mounts = |c: &str| inspect(c)["Mounts"].to_string();
    assert!(
        mounts(&broker).contains("docker.sock"),
        "{}",
        mounts(&broker)
    );
    assert!(
        !mounts(&runner).contains("docker.sock"),
        "{}",
        mounts(&runner)
    );

    let invoke = invoke_in_background(&pool, "worker", "build it");
    wait_for("the job runs", Duration::from_secs(60), || {
        jobs(&pool)
            .first()
            .is_some_and(|j| inspect(j)["State"]["Running"].as_bool() == Some(true))
    });
    let job = jobs(&pool).remove(0);
    // Twice killed as a crash would (the restart policy brings it back)…
    kill_host_pid(&runner);
    restarted(&runner, 0);
    kill_host_pid(&runner);
    restarted(&runner, 1);
    // …and once recreated by `up`, while the job goes on (the runner's deaths never touched
    // it: started once, never restarted; whether it still runs depends on how fast the host
    // restarted the runner, so that is not asserted).
    assert_eq!(
        inspect(&job)["RestartCount"],
        0,
        "the job is its own container"
    );
    pool.up(&["--force-recreate"]);
    // `invoke` says so when the runner it waits on is gone (as it was for a moment); asked again
    // with the message's ID it waits for the reply without queueing it twice.
    let _ = invoke.wait_with_output().unwrap();
    let out = pool.invoke(
        "worker",
        "build it",
        &["--id", "worker-build it", "--timeout", "300"],
    );
    assert!(out.status.success(), "invoke: {}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "Done.");

    // One job, run once, to its end.
    assert_eq!(jobs(&pool), vec![job.clone()]);
    let state = &inspect(&job)["State"];
    assert_eq!(state["ExitCode"], 3, "{state}");
    assert_eq!(inspect(&job)["RestartCount"], 0);
    let started = results(&pool, "worker", "job_start");
    assert_eq!(started.len(), 1, "{started:#?}");
    let output = results(&pool, "worker", "job_output");
    let output = output.last().expect("job_output ran");
    assert!(output.contains("exited with code 3"), "{output}");
    for i in 1..=60 {
        assert!(
            output.contains(&format!("line {i}\n")),
            "line {i} in {output}"
        );
    }
    let kinds: Vec<String> = events(&pool, "worker")
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(
        kinds.iter().filter(|k| *k == "job_started").count(),
        1,
        "{kinds:?}"
    );
    assert!(
        kinds.iter().any(|k| k == "job_reattached"),
        "a restarted runner found the job: {kinds:?}"
    );
    assert!(kinds.iter().any(|k| k == "job_finished"), "{kinds:?}");
    // `ps` lists it under its agent; `logs --job` shows its output.
    let ps = pool.ninetrix(&["ps", "-a", "-p", &pool.name]);
    assert!(
        String::from_utf8_lossy(&ps.stdout).contains("job:long"),
        "{}",
        text(&ps)
    );
    let logs = pool.ninetrix(&[
        "logs", "-p", &pool.name, "--agent", "worker", "--job", "long",
    ]);
    assert!(
        String::from_utf8_lossy(&logs.stdout).contains("line 60"),
        "{}",
        text(&logs)
    );
    drop(pool);
    remove_images(&image);
}

#[test]
fn a_runner_killed_at_each_step_of_a_job_start_makes_one_job_or_none() {
    let pool = Pool::new("jkp");
    let image = format!("ninetrix-test-jobs:{}", pool.name);
    support::docker::shell_image(&image, &[]);
    let script = [
        call(
            "job_start",
            serde_json::json!({"command": "echo run >> /workspace/runs; echo hello", "name": "once"}),
        ),
        call("job_wait", serde_json::json!({"job": "once", "timeout": 60})),
    ]
    .concat();
    let points = ["job_before_create", "job_before_start", "job_after_start"];
    let agents: String = points
        .iter()
        .map(|point| {
            agent(
                &point.replace('_', "-"),
                &image,
                &script,
                &format!("    env: {{ NINETRIX_RUNNER_CRASH_AT: {point} }}\n"),
            )
        })
        .collect();
    pool.write(&format!("agents:\n{agents}"));
    pool.up(&[]);
    let invokes: Vec<_> = points
        .iter()
        .map(|p| invoke_in_background(&pool, &p.replace('_', "-"), "go"))
        .collect();
    for (point, invoke) in points.iter().zip(invokes) {
        let out = invoke.wait_with_output().unwrap();
        assert!(out.status.success(), "{point}: invoke: {}", text(&out));
        let agent = point.replace('_', "-");
        let runner = pool.container(&agent, 1);
        assert_eq!(
            inspect(&runner)["RestartCount"],
            1,
            "{point}: the runner died once at its kill point"
        );
        let started = results(&pool, &agent, "job_start");
        assert_eq!(started.len(), 1, "{point}: {started:#?}");
        let runs = docker(&[
            "exec",
            &runner,
            "/bin/sh",
            "-c",
            // The image has a shell and no `cat`: the file's first two lines, if it exists
            // (`run|` is one run).
            "{ read -r a; read -r b; } < /workspace/runs; echo \"$a|$b\"",
        ]);
        let mine: Vec<String> = jobs(&pool)
            .into_iter()
            .filter(|j| inspect(j)["Config"]["Labels"]["dev.ninetrix.agent"] == agent.as_str())
            .collect();
        if *point == "job_before_create" {
            // Nothing was made: the call is answered *not run*, and nothing runs later.
            assert!(mine.is_empty(), "{point}: {mine:?}");
            assert!(started[0].contains("not started again"), "{}", started[0]);
            assert!(!runs.contains("run|"), "{point}: {runs}");
        } else {
            // The job made before the crash is the one job, started once.
            assert_eq!(mine.len(), 1, "{point}: {mine:?}");
            let job = &mine[0];
            assert_eq!(
                runs.trim(),
                "run|",
                "{point}: ran once; job_start answered {}; the job: {}; its logs: {}",
                started[0],
                inspect(job)["State"],
                docker(&["logs", job]),
            );
            assert!(started[0].contains("\"job\""), "{}", started[0]);
        }
    }
    drop(pool);
    remove_images(&image);
}

#[test]
fn jobs_outlive_their_runner_twenty_at_once_and_down_stops_them() {
    let pool = Pool::new("jmany");
    let image = format!("ninetrix-test-jobs:{}", pool.name);
    support::docker::shell_image(&image, &["sleep"]);
    let many = |tool: &str, args: &dyn Fn(usize) -> serde_json::Value| {
        let calls: Vec<String> = (1..=20)
            .map(|i| format!("{{ name: {tool}, args: {} }}", args(i)))
            .collect();
        format!("        - tool_calls: [{}]\n", calls.join(", "))
    };
    let script = [
        many("job_start", &|i| {
            serde_json::json!({"command": format!("sleep 2; echo job {i} done"), "name": format!("j{i}")})
        }),
        many("job_wait", &|i| serde_json::json!({"job": format!("j{i}"), "timeout": 120})),
        many("job_output", &|i| serde_json::json!({"job": format!("j{i}")})),
    ]
    .concat();
    let sleeper = [
        call(
            "job_start",
            serde_json::json!({"command": "sleep 300", "name": "sleeper"}),
        ),
        "        - text: Started.\n".to_string(),
        call("job_kill", serde_json::json!({"job": "sleeper"})),
    ]
    .concat();
    pool.write(&format!(
        "agents:\n{}{}",
        agent("many", &image, &script, ""),
        agent("sleepy", &image, &sleeper, "")
    ));
    pool.up(&[]);

    // Twenty at once, each with its own output.
    let out = pool.invoke("many", "go", &["--timeout", "300"]);
    assert!(out.status.success(), "invoke: {}", text(&out));
    let outputs = results(&pool, "many", "job_output");
    assert_eq!(outputs.len(), 20, "{outputs:#?}");
    for i in 1..=20 {
        assert!(
            outputs.iter().any(|o| o.contains(&format!("job {i} done"))),
            "job {i}: {outputs:#?}"
        );
    }

    // A job started in one turn, its runner killed, and the next runner kills it.
    let out = pool.invoke("sleepy", "start", &["--timeout", "120"]);
    assert!(out.status.success(), "invoke: {}", text(&out));
    let runner = pool.container("sleepy", 1);
    kill_host_pid(&runner);
    restarted(&runner, 0);
    let out = pool.invoke("sleepy", "stop it", &["--timeout", "120"]);
    assert!(out.status.success(), "invoke: {}", text(&out));
    let killed = results(&pool, "sleepy", "job_kill");
    assert!(killed[0].contains("\"exited\""), "{killed:?}");

    // Another sleeper; `down --keep-jobs` keeps it running, `down` stops it, `up` re-attaches.
    let sleeper_of = |pool: &Pool| {
        jobs(pool)
            .into_iter()
            .find(|j| inspect(j)["State"]["Running"].as_bool() == Some(true))
    };
    let out = pool.invoke("sleepy", "start again", &["--timeout", "120"]);
    assert!(out.status.success(), "invoke: {}", text(&out));
    let running = sleeper_of(&pool).expect("a running sleeper");
    let down = pool.ninetrix(&["down", "-p", &pool.name, "--keep-jobs", "-t", "2"]);
    assert!(down.status.success(), "down --keep-jobs: {}", text(&down));
    assert_eq!(inspect(&running)["State"]["Running"], true, "kept");
    pool.up(&[]);
    let down = pool.ninetrix(&["down", "-p", &pool.name, "-t", "2"]);
    assert!(down.status.success(), "down: {}", text(&down));
    let state = &inspect(&running)["State"];
    assert_eq!(state["Running"], false, "stopped by down: {state}");
    pool.up(&[]);
    wait_for("the re-attach is traced", Duration::from_secs(60), || {
        events(&pool, "sleepy").iter().any(|e| {
            e.kind == "job_reattached" && e.data["state"] == "exited" && e.data["name"] == "sleeper"
        })
    });
    let count = jobs(&pool).len();
    assert_eq!(count, 22, "20 + two sleepers: {:?}", jobs(&pool));
    // `--purge` removes them with their output.
    let down = pool.ninetrix(&["down", "-p", &pool.name, "--purge", "-t", "2"]);
    assert!(down.status.success(), "down --purge: {}", text(&down));
    assert!(jobs(&pool).is_empty(), "{:?}", jobs(&pool));
    drop(pool);
    remove_images(&image);
}

/// Removes the test's base image and the agent images `up` built on it (which inherit its
/// label; `docker images` lists them first, as the newer).
fn remove_images(base: &str) {
    let built = docker(&[
        "images",
        "-q",
        "--filter",
        &format!("label=dev.ninetrix.test={base}"),
    ]);
    for id in built.split_whitespace() {
        docker(&["image", "rm", "-f", id]);
    }
    docker(&["image", "rm", "-f", base]);
}
