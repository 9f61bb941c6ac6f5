//! An MCP server as a sidecar on the real Docker Engine: a stdio server image built offline
//! (`FROM scratch` + a static rmcp server, tests/src/bin/mcp_lines_server.rs) named in
//! `mcp_servers` with `image:` + `command:`. `up` builds the sidecar image (that image plus
//! ninetrix) and runs `ninetrix-<pool>-mcp-<server>` on the pool network, where the agent reaches
//! it by its alias through `ninetrix mcp-bridge`; `ps` lists it; a turn's write goes through it
//! once; SIGKILL of the sidecar mid-write leaves the write unknown — never repeated — with the
//! verifier's answer from the restarted sidecar; `down` removes it.

mod support;

use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use support::docker::{
    Pool, docker, kill_host_pid, lines_journal as journal, lines_server_image as server_image,
    text, wait_for,
};

fn count(journal: &[String], tool: &str) -> usize {
    journal.iter().filter(|t| *t == tool).count()
}

#[test]
fn a_sidecar_server_serves_the_agent_and_its_crash_mid_write_is_never_repeated() {
    let pool = Pool::new("mcpsc");
    let image = format!("ninetrix-test-mcp-lines:{}", pool.name);
    server_image(&image);
    pool.write(&format!(
        r#"mcp_servers:
  lines:
    image: {image}
    command: [/mcp-lines-server, --dir, /data]
    # It keeps its journal in /data, a directory of the root filesystem: relaxed, by name.
    security: {{ user: root, read_only_root: false }}
    trusted: true
agents:
  scribe:
    runtime:
      provider: scripted
      tool_timeout: 60
      script:
        - tool_calls: [{{ name: lines__append_line, args: {{ text: hello, delay: 3 }} }}]
        - text: Done.
    tools:
      - name: mcp://lines/append_line
        verify: {{ tool: mcp://lines/count_lines, args: {{ text: "{{{{args.text}}}}" }} }}
      - mcp://lines/count_lines
"#
    ));
    let plan = pool.up(&["--dry-run"]);
    assert!(
        plan.contains("create mcp:lines: missing"),
        "the dry run plans the sidecar:\n{plan}"
    );
    let up = pool.up(&[]);
    let sidecar = format!("ninetrix-{}-mcp-lines", pool.name);
    assert!(
        up.contains(&sidecar) && up.contains("1 container(s) and 1 MCP sidecar;"),
        "up names the sidecar and counts it:\n{up}"
    );

    // ps lists it, and its bridge reports healthy once its server runs.
    wait_for("the sidecar to be healthy", Duration::from_secs(60), || {
        docker(&["inspect", "-f", "{{.State.Health.Status}}", &sidecar]).trim() == "healthy"
    });
    let ps = pool.ninetrix(&["ps", "-p", &pool.name, "--json"]);
    let rows: Value = serde_json::from_slice(&ps.stdout).unwrap();
    assert!(
        rows.as_array()
            .unwrap()
            .iter()
            .any(|r| r["agent"] == "mcp:lines" && r["container"] == sidecar.as_str()),
        "ps lists the sidecar: {rows}"
    );

    // A turn through the sidecar: the write happens once.
    let first = pool.invoke("scribe", "write hello", &[]);
    assert!(first.status.success(), "{}", text(&first));
    assert!(text(&first).contains("Done."), "{}", text(&first));
    assert_eq!(count(&journal(&sidecar), "append_line"), 1);

    // The second turn's write is in flight when the sidecar is SIGKILLed.
    let second = pool
        .command(&[
            "invoke",
            "-p",
            &pool.name,
            "--agent",
            "scribe",
            "-m",
            "write again",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("the second write to start", Duration::from_secs(60), || {
        count(&journal(&sidecar), "append_line") == 2
    });
    kill_host_pid(&sidecar);
    let out = second.wait_with_output().unwrap();
    assert!(
        out.status.success() && text(&out).contains("Done."),
        "the turn completes after the sidecar's crash: {}",
        text(&out)
    );
    // Docker restarted the sidecar (same container, its files kept): the write was never
    // repeated, and the verifier asked the restarted server.
    let seen = journal(&sidecar);
    assert_eq!(count(&seen, "append_line"), 2, "never repeated: {seen:?}");
    assert!(count(&seen, "count_lines") >= 1, "verified: {seen:?}");
    let events = pool.events("scribe");
    let modes: Vec<(String, String)> = events
        .iter()
        .filter(|e| e["type"] == "tool_call")
        .map(|e| {
            (
                e["data"]["name"].as_str().unwrap_or_default().to_string(),
                e["data"]["mode"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert!(
        modes.contains(&("lines__append_line".into(), "outcome_unknown".into()))
            && modes.contains(&("lines__count_lines".into(), "verification".into())),
        "{modes:?}"
    );
    let answer = events
        .iter()
        .filter(|e| e["type"] == "tool_call" && e["data"]["mode"] == "verification")
        .map(|e| e["data"]["result"].as_str().unwrap_or_default().to_string())
        .next_back()
        .unwrap();
    assert_eq!(
        answer, "1 line(s) equal \"hello\"",
        "only the first write happened"
    );
    assert!(
        events.iter().any(|e| e["type"] == "mcp_tools"
            && e["data"]["server"] == "lines"
            && e["data"]["tools"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t["name"] == "lines__count_lines"
                    && t["effect"] == "read"
                    && t["source"] == "annotations")),
        "trace shows the server's tools with their classes"
    );

    // `down` removes the sidecar with the agents.
    let sidecar_image = docker(&["inspect", "-f", "{{.Image}}", &sidecar]);
    let down = pool.ninetrix(&["down", "-p", &pool.name]);
    assert!(down.status.success(), "{}", text(&down));
    assert!(
        docker(&["ps", "-a", "-q", "--filter", &format!("name={sidecar}")])
            .trim()
            .is_empty(),
        "down removed the sidecar"
    );
    // The sidecar image built for this test's one-off server image, then that image.
    docker(&["image", "rm", "-f", sidecar_image.trim()]);
    docker(&["image", "rm", "-f", &image]);
}
