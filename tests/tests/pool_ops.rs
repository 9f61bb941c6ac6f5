//! Concurrent and large pool operations on the real Docker Engine: 100 replicas up and purged
//! without a trace, two `up`s of one new pool at once, purge of `ninetrix run` threads, an API
//! restart that moves its port, two homes on one engine, and `down` of a pool that does not
//! exist. Each test has its own pool and home and cleans up by label (also when it fails).

mod support;

use std::process::Output;
use std::time::Duration;

use ninetrix_client::ThreadQuery;
use ninetrix_proto::api::ThreadSummary;
use support::docker::{Pool, api_port, docker, text, wait_for};

/// Everything Docker holds that is labelled with (or named after) the pool: containers,
/// networks, volumes.
fn leftovers(pool: &Pool) -> Vec<String> {
    let label = format!("label=dev.ninetrix.pool={}", pool.name);
    let mut left = Vec::new();
    for (kind, args) in [
        ("container", vec!["ps", "-aq", "--filter", &label]),
        ("network", vec!["network", "ls", "-q", "--filter", &label]),
        ("volume", vec!["volume", "ls", "-q", "--filter", &label]),
    ] {
        left.extend(
            docker(&args)
                .split_whitespace()
                .map(|id| format!("{kind} {id}")),
        );
    }
    let prefix = format!("ninetrix-{}-", pool.name);
    left.extend(
        docker(&["volume", "ls", "-q"])
            .split_whitespace()
            .filter(|v| v.starts_with(&prefix))
            .map(|v| format!("volume {v}")),
    );
    left
}

/// Every thread the pool's local API records for the pool (`GET /v1/threads?pool=`, paged),
/// read with the admin token from `$AGENTFILE_HOME/api/admin-token`.
fn api_threads(pool: &Pool, api_container: &str) -> Vec<ThreadSummary> {
    let client = pool.admin_client(api_container);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut all = Vec::new();
        loop {
            let page = client
                .list_threads(&ThreadQuery {
                    pool: Some(pool.name.clone()),
                    offset: Some(u32::try_from(all.len()).unwrap()),
                    ..ThreadQuery::default()
                })
                .await
                .unwrap();
            if page.is_empty() {
                return all;
            }
            all.extend(page);
        }
    })
}

fn invoke(pool: &Pool, agent: &str, key: &str) -> Output {
    pool.invoke(agent, "hello", &["--id", key, "--timeout", "60"])
}

#[test]
fn a_hundred_replicas_go_up_and_a_purge_leaves_nothing_labelled_with_the_pool() {
    let pool = Pool::new("hundred");
    pool.write(
        "agents:\n  w:\n    runtime: { provider: scripted, script: [\"hi\"] }\n    execution: { replicas: 100 }\n",
    );
    pool.up(&["--wait-timeout", "600"]);
    let api = format!("ninetrix-api-{}", pool.name);
    let label = format!("label=dev.ninetrix.pool={}", pool.name);
    assert_eq!(
        docker(&["ps", "-q", "--filter", &label])
            .split_whitespace()
            .count(),
        100
    );
    let volumes = docker(&["volume", "ls", "-q", "--filter", &label]);
    assert_eq!(
        volumes
            .split_whitespace()
            .filter(|v| v.ends_with("-workspace"))
            .count(),
        100,
        "every workspace volume carries the pool label"
    );
    assert!(
        volumes
            .split_whitespace()
            .any(|v| v == format!("ninetrix-{}-status", pool.name)),
        "so does the pool's health volume: {volumes}"
    );
    assert!(api_threads(&pool, &api).len() >= 100);

    let down = pool.ninetrix(&["down", "-p", &pool.name, "--purge", "-t", "5"]);
    // Docker 20.10 can lose endpoint-count decrements when many containers of one network stop
    // at once (moby/moby#42119): the network then refuses removal with no endpoint left to
    // disconnect, until the daemon restarts. `down` must then say so with the command that
    // removes it, and still leave no container, volume or thread behind.
    let stuck_network = if down.status.success() {
        None
    } else {
        let err = String::from_utf8_lossy(&down.stderr).to_string();
        assert!(
            err.contains("down finished with 1 problem(s):")
                && err.contains("still has active endpoints")
                && err.contains("sudo systemctl restart docker && docker network rm"),
            "down --purge failed for another reason than Docker's stale endpoints:\n{}",
            text(&down)
        );
        eprintln!("note: Docker left stale endpoints on the pool network:\n{err}");
        Some(
            docker(&["network", "ls", "-q", "--filter", &label])
                .trim()
                .to_string(),
        )
    };
    assert_eq!(
        api_threads(&pool, &api).len(),
        0,
        "the API still lists threads of the purged pool"
    );
    let left: Vec<String> = leftovers(&pool)
        .into_iter()
        .filter(|l| {
            stuck_network
                .as_ref()
                .is_none_or(|n| *l != format!("network {n}"))
        })
        .collect();
    assert_eq!(left, Vec::<String>::new());

    // `down --api --volumes` needs no pool: run where no agentfile is.
    let out = pool
        .command(&["down", "--api", "--volumes"])
        .current_dir(pool.home())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "down --api --volumes:\n{}",
        text(&out)
    );
    assert!(docker(&["ps", "-aq", "--filter", &format!("name=^{api}$")]).is_empty());
    assert!(
        docker(&[
            "volume",
            "ls",
            "-q",
            "--filter",
            &format!("name=^{api}-data$")
        ])
        .is_empty(),
        "the API's data volume is gone"
    );
}

#[test]
fn volumes_without_api_is_a_usage_error() {
    let pool = Pool::new("vol");
    let out = pool.ninetrix(&["down", "-p", &pool.name, "--volumes"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--api"));
}

#[test]
fn two_concurrent_ups_of_a_new_pool_make_one_network() {
    let pool = Pool::new("twin");
    pool.write("agents:\n  a:\n    runtime: { provider: scripted, script: [\"hi\"] }\n");
    let file = pool.file();
    let spawn = || {
        pool.command(&["up", "-f", file.to_str().unwrap()])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (first, second) = (spawn(), spawn());
    for child in [first, second] {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "an up failed:\n{}", text(&out));
    }
    let label = format!("label=dev.ninetrix.pool={}", pool.name);
    assert_eq!(
        docker(&["network", "ls", "-q", "--filter", &label])
            .split_whitespace()
            .count(),
        1,
        "exactly one network carries the pool's label"
    );
    assert_eq!(
        docker(&["ps", "-q", "--filter", &label])
            .split_whitespace()
            .count(),
        1
    );
    let down = pool.ninetrix(&["down", "-p", &pool.name, "-t", "5"]);
    assert!(down.status.success(), "down failed:\n{}", text(&down));
    assert!(
        docker(&["network", "ls", "-q", "--filter", &label]).is_empty(),
        "down removed the network"
    );
}

#[test]
fn purge_deletes_the_threads_of_runs_and_of_replicas() {
    let pool = Pool::new("purge");
    pool.write(
        "agents:\n  keeper:\n    runtime: { provider: scripted, script: [\"kept\"] }\n  job:\n    runtime: { provider: scripted, script: [\"done\"] }\n    execution: { durability: false, task: \"go\" }\n",
    );
    pool.up(&[]);
    let file = pool.file();
    let run = pool
        .command(&[
            "run",
            "-f",
            file.to_str().unwrap(),
            "--agent",
            "job",
            "--rm",
        ])
        .output()
        .unwrap();
    assert!(run.status.success(), "run failed:\n{}", text(&run));
    let api = format!("ninetrix-api-{}", pool.name);
    let threads = api_threads(&pool, &api);
    let agents: Vec<&str> = threads
        .iter()
        .filter_map(|t| t.labels.agent.as_deref())
        .collect();
    assert!(agents.contains(&"keeper"), "{agents:?}");
    assert!(
        agents.iter().filter(|a| **a == "job").count() >= 2,
        "the batch container's thread and the run's: {agents:?}"
    );
    let down = pool.ninetrix(&["down", "-p", &pool.name, "--purge", "-t", "5"]);
    assert!(
        down.status.success(),
        "down --purge failed:\n{}",
        text(&down)
    );
    assert_eq!(api_threads(&pool, &api).len(), 0);
}

#[test]
fn an_api_restart_that_moves_its_port_heals_without_up() {
    let pool = Pool::new("port");
    pool.write("agents:\n  a:\n    runtime: { provider: scripted, script: [\"pong\"] }\n");
    pool.up(&[]);
    let api = format!("ninetrix-api-{}", pool.name);
    let before = invoke(&pool, "a", "k1");
    assert!(before.status.success(), "{}", text(&before));
    let old_port = api_port(&api).unwrap();
    docker(&["restart", "-t", "5", &api]);
    wait_for("the API's new port", Duration::from_secs(30), || {
        api_port(&api).is_some()
    });
    let new_port = api_port(&api).unwrap();
    assert_ne!(
        old_port, new_port,
        "the restart on port 0 was meant to move the port"
    );
    let after = invoke(&pool, "a", "k2");
    assert!(
        after.status.success(),
        "invoke after the restart:\n{}",
        text(&after)
    );
    assert!(String::from_utf8_lossy(&after.stdout).contains("pong"));
    for args in [
        vec!["trace", "-p", &pool.name, "--agent", "a"],
        vec!["ps", "-p", &pool.name],
    ] {
        let out = pool.command(&args).output().unwrap();
        assert!(out.status.success(), "{args:?}:\n{}", text(&out));
    }
    // A stopped API is named, with the command that starts it.
    docker(&["stop", "-t", "5", &api]);
    let out = invoke(&pool, "a", "k3");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("{api} is not running")) && err.contains("ninetrix up"),
        "{err}"
    );
}

#[test]
fn two_homes_on_one_engine_get_an_api_each() {
    let a = Pool::with_derived_api("homea");
    let b = Pool::with_derived_api("homeb");
    for pool in [&a, &b] {
        pool.write("agents:\n  a:\n    runtime: { provider: scripted, script: [\"mine\"] }\n");
        pool.up(&[]);
    }
    for pool in [&a, &b] {
        let out = invoke(pool, "a", "k1");
        assert!(out.status.success(), "{}: {}", pool.name, text(&out));
        assert!(String::from_utf8_lossy(&out.stdout).contains("mine"));
    }
    let (api_a, api_b) = (a.api_container().unwrap(), b.api_container().unwrap());
    assert_ne!(api_a, api_b);
    for api in [&api_a, &api_b] {
        assert!(
            api.starts_with("ninetrix-api-") && api.len() == "ninetrix-api-".len() + 8,
            "{api} is named after its home"
        );
    }
}

#[test]
fn down_of_an_unknown_pool_says_so() {
    let pool = Pool::new("none");
    let out = pool.ninetrix(&["down", "-p", &pool.name]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("no pool `{}`", pool.name)), "{err}");
    assert!(!pool.state_file().exists());
}
