//! What the CLI tells a user must be true and must work where they stand (issue 34), on the real
//! Docker Engine: `ps -p` of an unknown pool says so and exits 1; a durable replica whose
//! container was removed is listed as missing; `invoke`'s hint names an `up` with `-f` that works
//! from another directory; after `down`, `triggers` says the pool is down; `down --purge` leaves
//! no lock file; `down --api` beside the agentfile of a pool that is gone exits 0.

mod support;

use support::docker::{Pool, docker, text};

fn agentfile() -> &'static str {
    "agents:
  bot:
    runtime:
      provider: scripted
      script: [\"Hello.\"]
triggers:
  - name: nightly
    type: schedule
    every: 1h
    message: report
"
}

#[test]
fn hints_name_commands_that_work_and_listings_say_what_is_true() {
    let pool = Pool::new("hints");
    pool.write(agentfile());
    pool.up(&[]);
    let elsewhere = tempfile::tempdir().unwrap();

    // `ps -p` of a pool that does not exist: said so, with the pools there are; exit 1.
    let unknown = format!("{}x", pool.name);
    let out = pool.ninetrix(&["ps", "-p", &unknown]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("no pool `{unknown}`")) && err.contains(&pool.name),
        "{err}"
    );

    // The container removed by hand: `ps` lists the replica as missing, with its thread.
    let thread = pool.state()["agents"]["bot"]["1"]["thread_id"]
        .as_str()
        .unwrap()
        .to_string();
    docker(&["rm", "-f", &pool.container("bot", 1)]);
    let out = pool.command(&["ps", "-p", &pool.name]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let table = String::from_utf8_lossy(&out.stdout);
    let row = table
        .lines()
        .find(|l| l.contains(&pool.container("bot", 1)))
        .unwrap_or_else(|| panic!("ps lists the removed replica:\n{table}"));
    assert!(row.contains(&thread) && row.contains("Missing"), "{row}");

    // `invoke` from another directory: its hint is an `up` that works there.
    let out = pool
        .command(&["invoke", "-p", &pool.name, "--agent", "bot", "-m", "hi"])
        .current_dir(elsewhere.path())
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    let file = std::path::absolute(pool.file()).unwrap();
    let hint = format!("ninetrix up -f {} -p {}", file.display(), pool.name);
    assert!(err.contains(&format!("`{hint}`")), "{err}");
    let args: Vec<&str> = hint.split(' ').skip(1).collect();
    let up = pool
        .command(&args)
        .current_dir(elsewhere.path())
        .output()
        .unwrap();
    assert!(
        up.status.success(),
        "the hint's command, run where the hint was given: {}",
        text(&up)
    );
    let out = pool
        .command(&[
            "invoke",
            "-p",
            &pool.name,
            "--agent",
            "bot",
            "-m",
            "hi",
            "--timeout",
            "60",
        ])
        .current_dir(elsewhere.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));

    // After `down`: the triggers are gone because the pool is down, and that is what is said.
    let down = pool.ninetrix(&["down", "-p", &pool.name, "-t", "2"]);
    assert!(down.status.success(), "{}", text(&down));
    let out = pool
        .command(&["triggers", "-p", &pool.name])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "no triggers in pool {}: the pool is down",
            pool.name
        )) && !err.contains("declare schedules"),
        "{err}"
    );

    // `down --purge` leaves nothing of the pool in the pools directory, its lock file included.
    let down = pool.ninetrix(&["down", "-p", &pool.name, "--purge", "-t", "2"]);
    assert!(down.status.success(), "{}", text(&down));
    let pools = pool.home().join("pools");
    let left: Vec<String> = std::fs::read_dir(&pools)
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| n.starts_with(&pool.name))
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "left in {}: {left:?}", pools.display());

    // `down --api` beside the agentfile of the pool that is gone: the API goes, exit 0.
    let out = pool
        .command(&["down", "--api"])
        .current_dir(pool.dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!("no pool `{}`", pool.name)),
        "{}",
        text(&out)
    );
    assert!(
        docker(&[
            "ps",
            "-aq",
            "--filter",
            &format!("name=ninetrix-api-{}", pool.name)
        ])
        .trim()
        .is_empty(),
        "the API container is removed"
    );
}
