//! Steer, interrupt and cancel through the CLI, on the real Docker Engine: a replica whose turns
//! sleep in a tool is steered (`invoke --steer` prints `↪ steered into turn 1` and that turn's
//! reply), interrupted (`invoke --interrupt` answers; the `invoke` waiting on the interrupted
//! message prints `⏹ interrupted by message 3` and exits 1), refused (`invoke --mode reject`
//! while a turn runs exits 75 naming it) and cancelled (`ninetrix cancel` prints `⏹ turn 4
//! cancelled by ana`); `trace` tells the story.

mod support;

use std::time::Duration;

use support::docker::{Pool, text, wait_for};

/// Waits until the replica's turn for inbox message `seq` has started.
fn started(pool: &Pool, seq: u64) {
    wait_for(
        &format!("the turn of message {seq} to start"),
        Duration::from_secs(60),
        || {
            pool.events("bot")
                .iter()
                .any(|e| e["type"] == "turn_started" && e["data"]["seq"] == seq)
        },
    );
}

#[test]
fn a_running_turn_is_steered_interrupted_refused_and_cancelled_from_the_cli() {
    let pool = Pool::new("control");
    // Every other model round sleeps 3 s in a tool; the next one answers.
    pool.write(
        "agents:
  bot:
    runtime:
      provider: scripted
      script:
        - tool_calls: [{ name: sleep, args: { seconds: 3 } }]
        - text: Done.
    tools: [sleep]
    execution: { interrupt_grace: 1s }
",
    );
    pool.up(&[]);

    // A steer joins turn 1 and gets its reply.
    let out = pool.invoke("bot", "first", &["--no-wait"]);
    assert!(out.status.success(), "{}", text(&out));
    started(&pool, 1);
    let out = pool.invoke("bot", "and the weather", &["--steer", "--timeout", "60"]);
    assert!(out.status.success(), "{}", text(&out));
    let said = text(&out);
    assert!(said.contains("↪ steered into turn 1"), "{said}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "Done.\n");

    // An interrupt: the invoke waiting on message 3 says what stopped its turn.
    let waiting = pool
        .command(&[
            "invoke",
            "-p",
            &pool.name,
            "--agent",
            "bot",
            "-m",
            "second",
            "--timeout",
            "60",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    started(&pool, 3);
    let out = pool.invoke(
        "bot",
        "do this instead",
        &["--interrupt", "--timeout", "60"],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("(interrupts turn 2)"), "{}", text(&out));
    let interrupted = waiting.wait_with_output().unwrap();
    assert_eq!(interrupted.status.code(), Some(1), "{}", text(&interrupted));
    assert!(
        text(&interrupted).contains("⏹ interrupted by message 4"),
        "{}",
        text(&interrupted)
    );

    // A reject while a turn runs is refused and names it; a cancel stops that turn.
    let out = pool.invoke("bot", "third", &["--no-wait"]);
    assert!(out.status.success(), "{}", text(&out));
    started(&pool, 5);
    let refused = pool.invoke("bot", "are you there", &["--mode", "reject"]);
    assert_eq!(refused.status.code(), Some(75), "{}", text(&refused));
    assert!(
        text(&refused).contains("refused: bot-1 is busy with turn 4 (message 5)"),
        "{}",
        text(&refused)
    );
    let out = pool.ninetrix(&["cancel", "-p", &pool.name, "--agent", "bot", "--by", "ana"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("⏹ turn 4 cancelled by ana"),
        "{}",
        text(&out)
    );

    let trace = text(&pool.ninetrix(&["trace", "-p", &pool.name, "--agent", "bot"]));
    for line in ["↪ steered", "interrupted by message 4", "cancelled by ana"] {
        assert!(trace.contains(line), "{line:?} not in:\n{trace}");
    }
}
