//! `up` of 20 durable agents with the image cached (wall time until every runner is ready) and
//! `down` of the same pool, on the real Docker Engine.
//!
//! Run: `cargo build --release -p ninetrix-cli && cargo bench -p ninetrix-e2e --bench pool`

use std::process::Command;
use std::time::Instant;

use ninetrix_e2e::ninetrix_bin;

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("agentfile.yaml");
    std::fs::write(&file, "name: benchpool\nagents:\n  agent:\n    runtime: { provider: scripted, script: [\"ok\"] }\n    execution: { replicas: 20 }\n").unwrap();
    let run = |args: &[&str]| {
        let started = Instant::now();
        let out = Command::new(ninetrix_bin())
            .args(args)
            .env("AGENTFILE_HOME", dir.path().join("home"))
            .env("NINETRIX_API_CONTAINER", "ninetrix-api-bench")
            .env("NINETRIX_API_PORT", "0")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        started.elapsed()
    };
    let f = file.to_str().unwrap();
    // Warm-up: builds the image and starts the API once.
    run(&["up", "-f", f]);
    run(&["down", "-f", f, "--purge"]);
    let mut ups = Vec::new();
    let mut downs = Vec::new();
    for _ in 0..3 {
        ups.push(run(&["up", "-f", f]));
        downs.push(run(&["down", "-f", f, "--purge"]));
    }
    run(&["down", "-f", f, "--purge", "--api"]);
    let _ = Command::new("docker")
        .args(["volume", "rm", "ninetrix-api-bench-data"])
        .output();
    ups.sort();
    downs.sort();
    println!("| measurement | median of 3 | runs |");
    println!("|---|---:|---|");
    println!(
        "| `up`: 20 durable agents, image cached, until all are ready | {:.2} s | {:?} |",
        ups[1].as_secs_f64(),
        ups.iter()
            .map(|d| format!("{:.2}", d.as_secs_f64()))
            .collect::<Vec<_>>()
    );
    println!(
        "| `down --purge` of the same pool | {:.2} s | {:?} |",
        downs[1].as_secs_f64(),
        downs
            .iter()
            .map(|d| format!("{:.2}", d.as_secs_f64()))
            .collect::<Vec<_>>()
    );
}
