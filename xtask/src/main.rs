//! The project's tasks (the alias is in `.cargo/config.toml`): `cargo xtask layout [--check]`
//! measures the code's shape (see `layout`); `cargo xtask test [NEXTEST ARGS…]` is the test
//! command (docs/testing.md explains the tiers).
//!
//! It runs `cargo nextest run --workspace` with the arguments given (a profile, a filter, `-p`),
//! then says what the run did not test and what it left behind:
//!
//! 1. every test that skipped for a missing prerequisite, grouped by what was missing and how to
//!    get it (the tests append to the skip log this command names in `NINETRIX_SKIP_LOG`;
//!    `ninetrix-testkit` owns the format);
//! 2. every container, network, volume and image that exists on the Docker Engine after the
//!    run and did not before, and a swarm the run left the engine in — a failure, since no test
//!    may change the user's engine beyond its own objects (a network Docker 20.10 cannot remove
//!    for stale endpoints is reported as the one known exception, not as a failure). The runner
//!    images the tests' pools built and shared are the suite's own: removed first, and said so;
//! 3. one closing line, `tests: N passed, N failed, N skipped`, read from nextest's JUnit report.
//!
//! Exit status: nextest's when it failed, 1 when the run left something behind, else 0.

mod docker;
mod layout;
mod report;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::SystemTime;

use ninetrix_testkit::{SKIP_LOG_VAR, SkipRecord};

const USAGE: &str = "usage: cargo xtask test [NEXTEST ARGS…]
       cargo xtask layout [--check]

Runs the whole test suite (`cargo nextest run --workspace …`), then lists the tests skipped for a
missing prerequisite and anything the run left on the Docker Engine.

Profiles (--profile NAME, or NEXTEST_PROFILE): default, fast (no Docker), docker, ci.
Every other argument is nextest's (`cargo nextest run --help`). See docs/testing.md.

`layout` prints the largest files, the long functions and the module cycles; with --check it
fails when a file is over 1,200 lines or modules form a cycle (docs/architecture.md).";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("test") if report::asks_for_help(&args[1..]) => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        Some("test") => test(&args[1..]),
        Some("layout") => layout::run(&workspace_root(), &args[1..]),
        Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        Some(other) => {
            eprintln!("xtask: unknown task `{other}`\n\n{USAGE}");
            ExitCode::from(2)
        }
        None => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}

/// `cargo xtask test`.
fn test(args: &[String]) -> ExitCode {
    let root = workspace_root();
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let env_profile = std::env::var("NEXTEST_PROFILE").ok();
    let profile = report::profile_of(args, env_profile.as_deref());
    let runs_dir = target.join("nextest");
    if let Err(e) = std::fs::create_dir_all(&runs_dir) {
        eprintln!("xtask: cannot create {}: {e}", runs_dir.display());
        return ExitCode::from(2);
    }
    let skip_log = runs_dir.join(format!("skips-{profile}.tsv"));
    let _ = std::fs::remove_file(&skip_log);

    let before = docker::Snapshot::take();
    let started = SystemTime::now();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut nextest = Command::new(cargo);
    nextest.current_dir(&root).args(["nextest", "run"]);
    if !report::names_packages(args) {
        nextest.arg("--workspace");
    }
    nextest.args(args).env(SKIP_LOG_VAR, &skip_log);
    let status = match nextest.status() {
        Ok(status) => status,
        Err(e) => {
            eprintln!(
                "xtask: cannot run `cargo nextest` ({e}); install it: cargo install cargo-nextest --locked"
            );
            return ExitCode::from(2);
        }
    };

    let skips: Vec<SkipRecord> = std::fs::read_to_string(&skip_log)
        .unwrap_or_default()
        .lines()
        .filter_map(SkipRecord::from_line)
        .collect();
    let junit = runs_dir.join(&profile).join("junit.xml");
    let counts = fresh_text(&junit, started).and_then(|xml| report::junit_counts(&xml));

    println!();
    print!("{}", report::skipped_summary(&skips));
    if let Some(before) = &before {
        let removed = docker::remove_runner_images(before);
        if !removed.is_empty() {
            println!(
                "Docker: removed the {} runner image(s) the tests' pools built and shared: {}",
                removed.len(),
                removed.join(", ")
            );
        }
    }
    let left = match (&before, docker::Snapshot::take()) {
        (Some(before), Some(after)) => Some(docker::leftovers(before, &after)),
        _ => {
            println!(
                "Docker: not reachable before and after the run; nothing checked for leftovers"
            );
            None
        }
    };
    let mut failed_leftovers = false;
    if let Some(left) = &left {
        print!("{}", left.report());
        failed_leftovers = left.fails();
    }
    match counts {
        Some(c) => println!("{}", report::closing_line(c, report::whole_skips(&skips))),
        None => println!(
            "(no JUnit report at {} from this run: nextest did not run the tests)",
            junit.display()
        ),
    }
    if !status.success() {
        return ExitCode::from(status.code().unwrap_or(1).clamp(1, 255) as u8);
    }
    if failed_leftovers {
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}

/// The workspace root: the folder above this crate's.
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

/// A file's text if it was written after `since` (a report left by an earlier run is not this
/// run's).
fn fresh_text(path: &Path, since: SystemTime) -> Option<String> {
    let modified = path.metadata().and_then(|m| m.modified()).ok()?;
    (modified >= since)
        .then(|| std::fs::read_to_string(path).ok())
        .flatten()
}
