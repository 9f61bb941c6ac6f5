//! `up` hands the `OTEL_*` settings it sees to the containers on the real Docker Engine: the
//! agents' and the local API's environment get the endpoint, the headers (a collector's key)
//! arrive only as a secret file — never in an environment variable or a label — and a change
//! recreates the API container, which keeps its data. A collector that does not answer costs
//! the pool nothing: the agent still answers.

mod support;

use std::process::Command;
use std::time::Duration;

use support::docker::{Pool, env_of, inspect, text, wait_for};

const KEY: &str = "x-api-key=collector-key-7319";

fn agentfile() -> &'static str {
    "agents:
  bot:
    runtime:
      provider: scripted
      script: [\"Hello.\"]
"
}

/// `up` with these extra environment variables.
fn up(pool: &Pool, env: &[(&str, &str)]) {
    let file = pool.file();
    let out = pool
        .command(&["up", "-f", file.to_str().unwrap()])
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(out.status.success(), "up: {}", text(&out));
}

/// A file of a container, read with `docker cp` (the images have no shell).
fn file_of(container: &str, path: &str) -> String {
    let out = Command::new("docker")
        .args(["cp", &format!("{container}:{path}"), "-"])
        .output()
        .unwrap();
    assert!(out.status.success(), "docker cp {path}: {}", text(&out));
    // `docker cp … -` writes a tar stream: the content sits after the 512-byte header.
    String::from_utf8_lossy(&out.stdout[512..])
        .trim_end_matches('\0')
        .to_string()
}

#[test]
fn up_passes_otel_settings_and_keeps_their_headers_secret() {
    let pool = Pool::new("otel");
    pool.write(agentfile());
    let endpoint = "http://collector.invalid:4318";
    up(
        &pool,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
            ("OTEL_EXPORTER_OTLP_HEADERS", KEY),
        ],
    );
    let api = pool.api_container().expect("the local API container");
    for name in [api.clone(), pool.container("bot", 1)] {
        let c = inspect(&name);
        assert_eq!(
            env_of(&c, "OTEL_EXPORTER_OTLP_ENDPOINT").as_deref(),
            Some(endpoint),
            "{name}"
        );
        let shown = c["Config"].to_string();
        assert!(!shown.contains("collector-key-7319"), "{name}: {shown}");
        assert!(
            file_of(&name, "/run/secrets/OTEL_EXPORTER_OTLP_HEADERS").contains(KEY),
            "{name} has the headers as a secret file"
        );
    }
    // An unreachable collector: the agent answers all the same.
    let out = pool.invoke("bot", "hi", &["--timeout", "60"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "Hello.\n",
        "{}",
        text(&out)
    );

    // The settings removed: the API is recreated without them, on the same data.
    let before = inspect(&api)["Id"].clone();
    up(&pool, &[]);
    wait_for("the API recreated", Duration::from_secs(30), || {
        inspect(&api)["Id"] != before
    });
    let c = inspect(&api);
    assert_eq!(env_of(&c, "OTEL_EXPORTER_OTLP_ENDPOINT"), None);
    let out = pool.invoke("bot", "again", &["--timeout", "60"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "Hello.\n",
        "{}",
        text(&out)
    );
}
