//! The real `ninetrix` binary: exit codes, output (snapshots), and `--json`.

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use predicates::prelude::*;

/// A temporary directory holding agentfiles; commands run inside it so paths print short.
struct Workspace {
    dir: tempfile::TempDir,
}

impl Workspace {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn with_example() -> Self {
        let ws = Self::new();
        let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../agentfile.example.yaml");
        std::fs::copy(example, ws.path("agentfile.yaml")).unwrap();
        ws
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn write(&self, name: &str, text: &str) {
        std::fs::write(self.path(name), text).unwrap();
    }

    fn ninetrix(&self) -> Command {
        let mut cmd = Command::new(assert_cmd::cargo::cargo_bin!("ninetrix"));
        cmd.current_dir(self.dir.path())
            .env_remove("CLICOLOR_FORCE")
            .env("NO_COLOR", "1");
        cmd
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[test]
fn version_prints_the_crate_version() {
    Workspace::new()
        .ninetrix()
        .arg("--version")
        .assert()
        .success()
        .stdout(format!("ninetrix {}\n", env!("CARGO_PKG_VERSION")));
}

#[test]
fn validate_summarises_the_example() {
    let ws = Workspace::with_example();
    let out = ws
        .ninetrix()
        .arg("validate")
        .assert()
        .success()
        .get_output()
        .clone();
    assert_eq!(text(&out.stderr), "", "a valid example has no warnings");
    insta::assert_snapshot!("validate_example", text(&out.stdout));
}

#[test]
fn validate_lists_mcp_servers_and_says_which_secrets_this_environment_lacks() {
    let ws = Workspace::new();
    ws.write(
        "agentfile.yaml",
        "name: p\nmcp_servers:\n  gh:\n    url: https://gh.example.com/mcp\n    headers: { Authorization: \"Bearer ${GH_TEST_TOKEN}\" }\n  t:\n    image: mcp/time\n    command: [mcp-server-time]\n    secrets: [TIME_TEST_KEY]\nagents:\n  a:\n    runtime: { provider: scripted, script: [{ text: hi }] }\n    tools: [mcp://gh, mcp://t/get_current_time]\n",
    );
    let out = ws
        .ninetrix()
        .arg("validate")
        .env("GH_TEST_TOKEN", "set")
        .env_remove("TIME_TEST_KEY")
        .assert()
        .success()
        .get_output()
        .clone();
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("gh__* (write, default)")
            && stdout.contains("t__get_current_time (write, default)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("gh  https://gh.example.com/mcp"),
        "{stdout}"
    );
    let line = |name: &str| {
        stdout
            .lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(line("GH_TEST_TOKEN").trim(), "GH_TEST_TOKEN  used by a");
    assert_eq!(
        line("TIME_TEST_KEY").trim(),
        "TIME_TEST_KEY  used by MCP server t (not set in this environment: `up` would refuse to start)"
    );
}

#[test]
fn validate_lists_each_agents_collaborators() {
    let ws = Workspace::new();
    ws.write(
        "agentfile.yaml",
        "name: p\nagents:\n  lead:\n    runtime: { provider: scripted, script: [{ text: hi }] }\n    collaborators:\n      - researcher\n      - writer\n      - { name: crm, a2a: \"https://crm.example.com/a2a/.well-known/agent-card.json\", secret: CRM_A2A_TOKEN }\n    transfer_timeout: 5m\n    governance:\n      human_approval: { actions: [ask_writer] }\n  researcher:\n    runtime: { provider: scripted, script: [{ text: hi }] }\n    metadata: { description: Finds sources. }\n    collaborators: [lead]\n    execution: { max_delegation_depth: 2 }\n  writer:\n    runtime: { provider: scripted, script: [{ text: hi }] }\n",
    );
    let out = ws
        .ninetrix()
        .arg("validate")
        .assert()
        .success()
        .get_output()
        .clone();
    assert_eq!(text(&out.stderr), "", "no warnings");
    insta::assert_snapshot!("validate_collaborators", text(&out.stdout));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(
            "  lead        researcher (ask_researcher), writer (ask_writer), crm (ask_crm) → A2A https://crm.example.com/a2a/.well-known/agent-card.json (secret CRM_A2A_TOKEN) · transfer_timeout 5m · max_delegation_depth 4\n"
        ),
        "{stdout}"
    );

    let out = ws
        .ninetrix()
        .args(["validate", "--json"])
        .assert()
        .success()
        .get_output()
        .clone();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    let lead = &v["agents"][0];
    assert_eq!(
        lead["collaborators"],
        serde_json::json!(["researcher", "writer"])
    );
    assert_eq!(
        lead["tools"][0],
        serde_json::json!({
            "name": "ask_researcher",
            "effect": "write",
            "effect_pinned": true,
            "handoff": { "agent": "researcher", "about": "Finds sources." }
        })
    );
    assert_eq!(
        lead["tools"][2]["handoff"],
        serde_json::json!({
            "agent": "crm",
            "a2a": {
                "card": "https://crm.example.com/a2a/.well-known/agent-card.json",
                "secret": "CRM_A2A_TOKEN"
            }
        }),
        "the JSON says where each remote collaborator is"
    );
    assert!(
        lead["secrets"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!("CRM_A2A_TOKEN"))
    );
    assert_eq!(lead["execution"]["transfer_timeout_secs"], 300);
    assert_eq!(v["agents"][1]["execution"]["max_delegation_depth"], 2);
}

#[test]
fn validate_json_gives_the_resolved_agents() {
    let ws = Workspace::with_example();
    let out = ws
        .ninetrix()
        .args(["validate", "--json"])
        .assert()
        .success()
        .get_output()
        .clone();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    assert_eq!(v["valid"], true);
    assert_eq!(v["pool"], "research-pool");
    assert_eq!(v["agents"].as_array().unwrap().len(), 3);
    assert_eq!(v["agents"][1]["name"], "writer");
    assert_eq!(v["agents"][1]["execution"]["replicas"], 2);
    assert_eq!(v["agents"][2]["execution"]["durability"], false);
    assert_eq!(
        v["agents"][0]["tools"][2],
        serde_json::json!({"name": "file_write", "effect": "idempotent", "effect_pinned": false})
    );
}

#[test]
fn pool_flag_overrides_the_name() {
    let ws = Workspace::with_example();
    let out = ws
        .ninetrix()
        .args(["validate", "--json", "-p", "other"])
        .assert()
        .success()
        .get_output()
        .clone();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["pool"], "other");
    ws.ninetrix()
        .args(["validate", "-p", "Not Valid"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "pool names use lower-case letters",
        ));
}

const BROKEN: &str = "name: demo\nagents:\n  researcher:\n    runtime:\n      provider: anthropc\n      model: claude-sonnet-4-6\n      temperature: 3\n    execution:\n      durability: yes\n    env:\n      OPENAI_API_KEY: sk-proj-0123456789abcdef\n";

#[test]
fn validate_reports_every_error_with_its_place() {
    let ws = Workspace::new();
    ws.write("agentfile.yaml", BROKEN);
    let out = ws
        .ninetrix()
        .arg("validate")
        .assert()
        .code(1)
        .get_output()
        .clone();
    assert_eq!(text(&out.stdout), "");
    let stderr = text(&out.stderr);
    assert!(
        !stderr.contains("sk-proj"),
        "secrets never appear in errors:\n{stderr}"
    );
    insta::assert_snapshot!("validate_errors", stderr);
}

#[test]
fn validate_refuses_the_shell_tool_without_an_image_with_the_fix() {
    let ws = Workspace::new();
    ws.write(
        "agentfile.yaml",
        "agents:\n  ops:\n    runtime: { provider: scripted, script: [ok] }\n    tools: [file_read, shell]\n",
    );
    let out = ws
        .ninetrix()
        .arg("validate")
        .assert()
        .code(1)
        .get_output()
        .clone();
    insta::assert_snapshot!("validate_shell_needs_image", text(&out.stderr));
    // With an image that has a shell, it validates.
    ws.write(
        "agentfile.yaml",
        "agents:\n  ops:\n    runtime: { provider: scripted, script: [ok], image: debian:stable-slim }\n    tools: [file_read, shell]\n",
    );
    ws.ninetrix().arg("validate").assert().success();
}

#[test]
fn validate_json_reports_errors_on_stdout() {
    let ws = Workspace::new();
    ws.write("agentfile.yaml", BROKEN);
    let out = ws
        .ninetrix()
        .args(["validate", "--json"])
        .assert()
        .code(1)
        .get_output()
        .clone();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    assert_eq!(v["valid"], false);
    let errors: Vec<(String, u64, u64)> = v["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["code"].as_str().unwrap().to_string(),
                e["line"].as_u64().unwrap(),
                e["column"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        errors,
        [
            ("unknown_provider".to_string(), 5, 17),
            ("out_of_range".to_string(), 7, 20),
            ("wrong_type".to_string(), 9, 19)
        ]
    );
    assert_eq!(v["warnings"][0]["code"], "secret_in_env");
    assert!(!text(&out.stdout).contains("sk-proj"));
}

#[test]
fn a_missing_file_says_what_to_do() {
    Workspace::new()
        .ninetrix()
        .arg("validate")
        .assert()
        .code(1)
        .stderr(
            predicate::str::contains("cannot read agentfile.yaml")
                .and(predicate::str::contains("ninetrix init")),
        );
}

#[test]
fn a_huge_file_is_refused() {
    let ws = Workspace::new();
    std::fs::File::create(ws.path("big.yaml"))
        .unwrap()
        .set_len(20 << 20)
        .unwrap();
    ws.ninetrix()
        .args(["validate", "-f", "big.yaml", "--json"])
        .assert()
        .code(1)
        .stdout(predicate::str::contains("\"too_large\""));
}

#[test]
fn egress_proxy_refuses_a_bad_rule_with_exit_2_saying_what_to_write() {
    Workspace::new()
        .ninetrix()
        .args(["egress-proxy", "--listen", "127.0.0.1:0"])
        .args([
            "--allow",
            "api.example.com",
            "--allow",
            "https://api.example.com/v1",
        ])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "`https://api.example.com/v1` is a URL; write the host only: `api.example.com`",
        ));
}

#[test]
fn k8s_render_refuses_background_jobs_naming_the_agent() {
    let ws = Workspace::new();
    ws.write(
        "agentfile.yaml",
        "name: shop\nagents:\n  a:\n    runtime: { provider: scripted, script: [hi] }\n  \
         builder:\n    runtime: { provider: scripted, script: [hi], image: \"debian:12-slim\" }\n    tools: [job_start]\n",
    );
    ws.ninetrix()
        .args(["k8s", "render", "-f", "agentfile.yaml"])
        .assert()
        .code(1)
        .stdout("")
        .stderr(predicate::str::contains(
            "agent(s) builder have the background-job tools",
        ))
        .stderr(predicate::str::contains("one Docker host"));
}

#[test]
fn k8s_render_refuses_an_egress_allow_list_it_cannot_express_and_sets_the_runtime_class() {
    let ws = Workspace::new();
    ws.write(
        "agentfile.yaml",
        "name: shop\nagents:\n  a:\n    runtime: { provider: scripted, script: [hi] }\n    \
         network: { egress: [api.github.com] }\n",
    );
    ws.ninetrix()
        .args(["k8s", "render", "-f", "agentfile.yaml"])
        .assert()
        .code(1)
        .stdout("")
        .stderr(predicate::str::contains(
            "agent(s) a set `network.egress`, which `k8s render` cannot express",
        ));
    ws.write(
        "agentfile.yaml",
        "name: shop\nagents:\n  a:\n    runtime: { provider: scripted, script: [hi], isolation: runsc }\n",
    );
    let out = ws
        .ninetrix()
        .args(["k8s", "render", "-f", "agentfile.yaml"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let manifests = text(&out.stdout);
    assert!(
        manifests.contains("\"runtimeClassName\": \"runsc\""),
        "{manifests}"
    );
    assert!(
        manifests.contains("\"readOnlyRootFilesystem\": true"),
        "{manifests}"
    );
    assert!(manifests.contains("\"drop\": [\n"), "{manifests}");
}

#[test]
fn usage_errors_exit_2() {
    let ws = Workspace::new();
    ws.ninetrix()
        .arg("launch")
        .assert()
        .code(2)
        .stderr(predicate::str::contains("unrecognized subcommand"));
    ws.ninetrix().args(["validate", "--bogus"]).assert().code(2);
    ws.ninetrix()
        .args(["init", "--provider", "gpt"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("possible values"));
}

#[test]
fn init_writes_a_starter_that_validates_and_refuses_to_overwrite() {
    let ws = Workspace::new();
    let out = ws
        .ninetrix()
        .args(["init", "--name", "demo"])
        .assert()
        .success()
        .get_output()
        .clone();
    assert!(text(&out.stdout).contains("wrote agentfile.yaml (pool demo"));
    let written = std::fs::read_to_string(ws.path("agentfile.yaml")).unwrap();
    insta::assert_snapshot!("init_scripted", written);
    ws.ninetrix()
        .arg("validate")
        .assert()
        .success()
        .stdout(predicate::str::contains("pool demo"));

    ws.ninetrix()
        .arg("init")
        .assert()
        .code(1)
        .stderr(predicate::str::contains(
            "agentfile.yaml already exists; pass --force",
        ));
    assert_eq!(
        std::fs::read_to_string(ws.path("agentfile.yaml")).unwrap(),
        written,
        "not overwritten"
    );

    ws.ninetrix()
        .args([
            "init",
            "--force",
            "--provider",
            "anthropic",
            "--name",
            "demo",
        ])
        .assert()
        .success();
    let v: serde_json::Value = serde_json::from_slice(
        &ws.ninetrix()
            .args(["validate", "--json"])
            .assert()
            .success()
            .get_output()
            .stdout,
    )
    .unwrap();
    assert_eq!(v["agents"][0]["runtime"]["provider"], "anthropic");
    assert_eq!(
        v["agents"][0]["secrets"],
        serde_json::json!(["ANTHROPIC_API_KEY"])
    );
}

#[test]
fn init_derives_the_pool_name_from_the_directory() {
    let ws = Workspace::new();
    std::fs::create_dir(ws.path("My Agents")).unwrap();
    ws.ninetrix()
        .args(["init", "-f", "My Agents/agentfile.yaml"])
        .assert()
        .success();
    let v: serde_json::Value = serde_json::from_slice(
        &ws.ninetrix()
            .args(["validate", "--json", "-f", "My Agents/agentfile.yaml"])
            .assert()
            .success()
            .get_output()
            .stdout,
    )
    .unwrap();
    assert_eq!(v["pool"], "my-agents");
}

/// A bad eval suite is refused before anything runs: exit 2, every problem at its
/// `file:line:col` with a hint, nothing on stdout.
#[test]
fn eval_refuses_a_bad_suite_file_with_each_problem_located() {
    let ws = Workspace::new();
    ws.write(
        "suite.yaml",
        "suite: support\nagentfile: candidate.yaml\ncases:\n  - sesion: k\n    turns: 4..2\n",
    );
    let out = ws
        .ninetrix()
        .args(["eval", "suite.yaml"])
        .assert()
        .code(2)
        .stdout("")
        .get_output()
        .clone();
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(
            "suite.yaml:4:5: unknown key `sesion` in a case\n  help: did you mean `session`?"
        ),
        "{stderr}"
    );
    assert!(
        stderr
            .contains("suite.yaml:5:12: `4..2` is empty: its first turn (4) is after its last (2)"),
        "{stderr}"
    );
    ws.ninetrix()
        .args(["eval", "missing.yaml"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "cannot read the suite file missing.yaml",
        ));
}

/// `replay`'s usage errors exit 2 and say what a range of turns looks like.
#[test]
fn replay_refuses_a_bad_range_of_turns() {
    Workspace::new()
        .ninetrix()
        .args(["replay", "--agent", "a", "--turns", "5..2"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "`5..2` is empty: its first turn (5) is after its last (2)",
        ));
}

/// Every command's `--help`, so a change of wording is a reviewed change.
#[test]
fn every_command_has_a_help_page() {
    let ws = Workspace::new();
    for command in [
        "",
        "validate",
        "init",
        "api",
        "build",
        "up",
        "down",
        "ps",
        "reset",
        "compact",
        "cancel",
        "fork",
        "rewind",
        "diff",
        "replay",
        "eval",
        "invoke",
        "trace",
        "logs",
        "run",
        "approvals",
        "approvals token",
        "approve",
        "deny",
        "answer",
        "a2a",
        "a2a token",
        "sessions",
        "memory",
        "memory ls",
        "memory cat",
        "memory rm",
        "triggers",
        "triggers fire",
        "triggers history",
        "k8s",
        "k8s render",
        "mcp-bridge",
    ] {
        let mut cmd = ws.ninetrix();
        cmd.env("COLUMNS", "100");
        cmd.args(command.split_whitespace());
        let out = cmd.arg("--help").assert().success().get_output().clone();
        let name = if command.is_empty() {
            "help".to_string()
        } else {
            format!("help_{}", command.replace(' ', "_"))
        };
        insta::assert_snapshot!(name, text(&out.stdout));
    }
}

#[test]
fn the_top_level_help_describes_the_tool_as_it_is() {
    let out = Workspace::new()
        .ninetrix()
        .arg("--help")
        .assert()
        .success()
        .get_output()
        .clone();
    let help = text(&out.stdout);
    assert!(
        help.starts_with("Run AI agents as Docker containers that survive crashes"),
        "{help}"
    );
    assert!(!help.contains("(later)"), "{help}");
}

#[test]
fn the_top_level_file_and_pool_reach_the_command() {
    let ws = Workspace::with_example();
    std::fs::rename(ws.path("agentfile.yaml"), ws.path("other.yaml")).unwrap();
    let out = ws
        .ninetrix()
        .args(["-f", "other.yaml", "-p", "from-top", "validate", "--json"])
        .assert()
        .success()
        .get_output()
        .clone();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["file"], "other.yaml");
    assert_eq!(json["pool"], "from-top");
    // The command's own flags win over the top-level ones.
    let out = ws
        .ninetrix()
        .args([
            "-p",
            "from-top",
            "validate",
            "-f",
            "other.yaml",
            "-p",
            "own",
            "--json",
        ])
        .assert()
        .success()
        .get_output()
        .clone();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["pool"], "own");
}

#[test]
fn logs_dash_f_with_a_file_says_what_dash_f_means_there() {
    let ws = Workspace::with_example();
    for command in ["logs", "trace"] {
        let out = ws
            .ninetrix()
            .args([command, "-f", "agentfile.yaml"])
            .assert()
            .code(2)
            .get_output()
            .clone();
        let err = text(&out.stderr);
        assert!(err.contains("`-f` means --follow"), "{err}");
        assert!(
            err.contains(&format!("ninetrix -f agentfile.yaml {command}"))
                && err.contains(&format!("ninetrix {command} --file agentfile.yaml")),
            "{err}"
        );
    }
    // Not a file: clap's usual complaint.
    let out = ws
        .ninetrix()
        .args(["logs", "-f", "bogus"])
        .assert()
        .code(2)
        .get_output()
        .clone();
    assert!(text(&out.stderr).contains("unexpected argument 'bogus'"));
}

#[test]
fn a_closed_stdout_ends_quietly_with_status_0() {
    let ws = Workspace::with_example();
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = std::process::Command::new(assert_cmd::cargo::cargo_bin!("ninetrix"))
        .current_dir(ws.dir.path())
        .env("NO_COLOR", "1")
        .arg("validate")
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "", "no panic, no message");
}
