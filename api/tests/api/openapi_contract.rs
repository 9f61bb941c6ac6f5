//! The OpenAPI document states exactly what the server does: schemathesis generates requests
//! from `/openapi.json` (valid and invalid ones) and checks every answer against it (`--checks
//! all`: documented statuses, content types, response schemas, valid data accepted, invalid data
//! refused, …). Two runs with a fixed seed and a bounded number of examples per operation:
//!
//! - as the admin, on every route but the event stream, with generated thread IDs;
//! - as the runner of one thread, with `thread_id` pinned to that thread, so the runner routes
//!   get past authentication and exercise claims, checkpoints, the ledger, the inbox and events,
//!   and the admin routes answer their documented 403.
//!
//! Without schemathesis the test is compiled as ignored (reported as skipped, see `build.rs`);
//! with `NINETRIX_REQUIRE_SCHEMATHESIS=1` (CI) a missing schemathesis fails it instead.

use std::process::Stdio;
use std::time::Duration;

use ninetrix_proto::ThreadId;

use crate::support::{ADMIN, Backend, TestApi};

/// The seed of every run: a failure reproduces with the same command.
const SEED: u64 = 20_261_123;
/// Generated requests per operation and phase.
const MAX_EXAMPLES: u32 = 25;
/// A run that takes longer than this is killed and fails the test.
const RUN_LIMIT: Duration = Duration::from_secs(240);

/// The schemathesis command, or `None` (skipped) when it is not installed.
fn schemathesis() -> Option<String> {
    let program = std::env::var("NINETRIX_SCHEMATHESIS").unwrap_or_else(|_| "schemathesis".into());
    let found = std::process::Command::new(&program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if found {
        return Some(program);
    }
    assert!(
        std::env::var("NINETRIX_REQUIRE_SCHEMATHESIS").as_deref() != Ok("1"),
        "NINETRIX_REQUIRE_SCHEMATHESIS=1 but `{program} --version` does not run"
    );
    eprintln!("SKIPPED (schemathesis): `pip install schemathesis` to check the OpenAPI document");
    None
}

/// Runs schemathesis against the server with this configuration file; panics with its output
/// unless it passes.
async fn run(program: &str, api: &TestApi, name: &str, config: &str, extra: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let config_path = dir.path().join("schemathesis.toml");
    std::fs::write(&config_path, config).unwrap();
    let mut command = tokio::process::Command::new(program);
    command
        .current_dir(dir.path())
        .env("NO_COLOR", "1")
        .arg("--config-file")
        .arg(&config_path)
        .args(["run", &format!("{}/openapi.json", api.url)])
        .args(["--checks", "all"])
        .args(["--seed", &SEED.to_string()])
        .args(["--max-examples", &MAX_EXAMPLES.to_string()])
        .args([
            "--workers",
            "1",
            "--no-color",
            "--generation-database",
            "none",
        ])
        .args(["--request-timeout", "10"])
        .args(extra)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let started = std::time::Instant::now();
    let output = tokio::time::timeout(RUN_LIMIT, command.output())
        .await
        .unwrap_or_else(|_| panic!("schemathesis ({name}) ran longer than {RUN_LIMIT:?}"))
        .expect("schemathesis starts");
    let report = format!(
        "schemathesis ({name}, seed {SEED}, {MAX_EXAMPLES} examples, {:.0?}) exited with {}\n\
         --- stdout ---\n{}\n--- stderr ---\n{}",
        started.elapsed(),
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(output.status.success(), "{report}");
    eprintln!("{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(ninetrix_schemathesis),
    ignore = "install schemathesis (pip install schemathesis) to check the OpenAPI document"
)]
async fn schemathesis_finds_the_server_true_to_its_openapi_document() {
    let Some(program) = schemathesis() else {
        return;
    };
    // Long-polls answer at once so generated `wait` values do not stall the run.
    let api = TestApi::start_with(Backend::Sqlite, |c| c.max_wait = Duration::ZERO)
        .await
        .unwrap();
    let admin = format!("[headers]\nAuthorization = \"Bearer {ADMIN}\"\n");
    // The event stream of a thread that exists never ends by itself; generated thread IDs can
    // name one minted earlier in the run, so the admin run leaves the stream out (the runner run
    // checks its documented 403, and `conformance` checks the stream itself).
    run(
        &program,
        &api,
        "admin",
        &admin,
        &["--exclude-path-regex", "/events/stream$"],
    )
    .await;

    let thread = ThreadId::new_v7();
    let token = api.runner_token(thread).await;
    let runner = format!(
        "[headers]\nAuthorization = \"Bearer {token}\"\n\
         [parameters]\n\"path.thread_id\" = \"{thread}\"\n"
    );
    run(&program, &api, "runner", &runner, &[]).await;
    api.stop().await;
}
