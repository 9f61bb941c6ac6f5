//! A table of broken agentfiles: each must fail with its message at its exact line and column.

use ninetrix_agentfile::{self as agentfile, Diagnostic, Severity};

/// One broken file and the first error it must produce.
struct Case {
    name: &'static str,
    yaml: String,
    code: &'static str,
    line: u32,
    column: u32,
    message: &'static str,
}

fn case(
    name: &'static str,
    yaml: &str,
    code: &'static str,
    at: (u32, u32),
    message: &'static str,
) -> Case {
    Case {
        name,
        yaml: yaml.to_string(),
        code,
        line: at.0,
        column: at.1,
        message,
    }
}

const OK_RUNTIME: &str = "    runtime:\n      provider: scripted\n      script: [{ text: hi }]\n";

fn agent(extra: &str) -> String {
    format!("agents:\n  a:\n{OK_RUNTIME}{extra}")
}

/// The valid agent `a`, then the top-level `triggers:` (line 6) holding `items` (from line 7).
fn triggers(items: &str) -> String {
    format!("{}triggers:\n{items}", agent(""))
}

fn billion_laughs() -> String {
    let mut s = String::from("lol: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    let mut prev = 'a';
    for c in 'b'..='j' {
        let refs = vec![format!("*{prev}"); 9].join(", ");
        s.push_str(&format!("{c}: &{c} [{refs}]\n"));
        prev = c;
    }
    s.push_str(&agent(""));
    s
}

fn cases() -> Vec<Case> {
    vec![
        case(
            "broken YAML syntax",
            "agents:\n  a: [unclosed\n",
            "yaml_syntax",
            (2, 6),
            "unclosed bracket '['",
        ),
        case(
            "tab indentation",
            "agents:\n\ta:\n",
            "yaml_syntax",
            (2, 1),
            "tab used for indentation",
        ),
        case(
            "unknown key with suggestion",
            "agents:\n  a:\n    runtime:\n      provider: scripted\n      temprature: 0.2\n      script: [hi]\n",
            "unknown_key",
            (5, 7),
            "unknown key `temprature` in runtime",
        ),
        case(
            "wrong type",
            &agent("    execution:\n      max_turns: ten\n"),
            "wrong_type",
            (7, 18),
            "`max_turns` must be a whole number, found the string \"ten\"",
        ),
        case(
            "bad provider",
            "agents:\n  a:\n    runtime:\n      provider: gpt4\n      model: x\n",
            "unknown_provider",
            (4, 17),
            "unknown provider `gpt4`",
        ),
        case(
            "temperature 3",
            "agents:\n  a:\n    runtime:\n      provider: openai\n      model: gpt-4o\n      temperature: 3\n",
            "out_of_range",
            (6, 20),
            "`temperature` must be between 0 and 2, found 3",
        ),
        case(
            "memory: lots",
            "agents:\n  a:\n    runtime:\n      provider: scripted\n      script: [hi]\n      resources: { memory: lots }\n",
            "invalid_memory",
            (6, 28),
            "`lots` is not a memory size",
        ),
        case(
            "bad agent name",
            &format!("agents:\n  Research.Bot:\n{OK_RUNTIME}"),
            "invalid_name",
            (2, 3),
            "`Research.Bot` is not a valid agent name",
        ),
        case(
            "duplicate key",
            &format!("agents:\n  a:\n{OK_RUNTIME}  a:\n{OK_RUNTIME}"),
            "yaml_syntax",
            (6, 3),
            "duplicate key `a`",
        ),
        case(
            "durability: yes (strict booleans)",
            &agent("    execution:\n      durability: yes\n"),
            "wrong_type",
            (7, 19),
            "`durability` must be true or false, found \"yes\"",
        ),
        case(
            "empty agents",
            "name: demo\nagents: {}\n",
            "no_agents",
            (2, 1),
            "`agents` is empty",
        ),
        case(
            "unsupported Ninetrix key",
            &format!("{}volumes:\n  - data:/data\n", agent("")),
            "unsupported_key",
            (6, 1),
            "`volumes` is not supported yet",
        ),
        case(
            "replicas: 0",
            &agent("    execution:\n      replicas: 0\n"),
            "out_of_range",
            (7, 17),
            "`replicas` must be between 1 and 1000, found 0",
        ),
        case(
            "batch with replicas 2",
            &agent("    execution:\n      durability: false\n      replicas: 2\n"),
            "batch_replicas",
            (8, 17),
            "a batch agent (`durability: false`) runs once, so it cannot have 2 replicas",
        ),
        case(
            "empty model",
            "agents:\n  a:\n    runtime:\n      provider: anthropic\n      model: \"\"\n",
            "empty_value",
            (5, 14),
            "`model` is empty",
        ),
        case(
            "empty script",
            "agents:\n  a:\n    runtime:\n      provider: scripted\n      script: []\n",
            "empty_value",
            (5, 7),
            "`script` is empty",
        ),
        case(
            "a secret given as a value",
            &agent("    secrets:\n      - sk-ant-api03-abcdefghijklmnop\n"),
            "secret_value",
            (7, 9),
            "this looks like a secret value, not a secret name",
        ),
        case(
            "secrets as a name: value mapping",
            &agent("    secrets:\n      ANTHROPIC_API_KEY: hunter2-and-more\n"),
            "secret_value",
            (7, 26),
            "`secrets` lists secret names, not values",
        ),
        case(
            "a 20 MB file",
            &format!("# {}\n", "x".repeat(20 * 1024 * 1024)),
            "yaml_syntax",
            (1, 1),
            "the file is 20971523 bytes; agentfiles are limited to 1048576 bytes",
        ),
        case(
            "a billion-laughs alias bomb",
            &billion_laughs(),
            "yaml_syntax",
            (5, 28),
            "the document is too large or too deeply nested (aliases count once per use)",
        ),
        case(
            "a non-mapping root",
            "- researcher\n- writer\n",
            "not_a_mapping",
            (1, 1),
            "the agentfile must be a mapping of keys, found a list",
        ),
        case(
            "an empty file",
            "# nothing here\n",
            "empty_file",
            (1, 1),
            "the agentfile is empty",
        ),
        case(
            "unknown tool with suggestion",
            &agent("    tools: [file_wirte]\n"),
            "unknown_tool",
            (6, 13),
            "unknown tool `file_wirte`",
        ),
        case(
            "MCP tool of an undeclared server",
            &agent("    tools: [\"mcp://github\"]\n"),
            "unknown_mcp_server",
            (6, 13),
            "unknown MCP server `github`",
        ),
        case(
            "MCP header holding a credential",
            &format!(
                "mcp_servers:\n  gh:\n    url: https://mcp.example.com/mcp\n    headers:\n      Authorization: \"Bearer abc123\"\n{}",
                agent("    tools: [\"mcp://gh\"]\n")
            ),
            "secret_value",
            (5, 22),
            "header `Authorization` must name a secret, not hold a value",
        ),
        case(
            "stdio MCP server in an agent without an image",
            &format!(
                "mcp_servers:\n  t:\n    command: [mcp-server-time]\n{}",
                agent("    tools: [\"mcp://t\"]\n")
            ),
            "mcp_needs_image",
            (9, 13),
            "MCP server `t` runs inside the agent's container, which has no runtime for it (no `runtime.image`)",
        ),
        case(
            "the shell tool in an agent without an image",
            &agent("    tools: [file_read, shell]\n"),
            "shell_needs_image",
            (6, 24),
            "the `shell` tool runs /bin/sh, and the agent's container has none (no `runtime.image`: the runner's own image has no shell), so the agent could never start",
        ),
        case(
            "the job tools in an agent whose jobs have no image",
            &agent("    tools: [file_read, jobs]\n"),
            "jobs_need_image",
            (6, 24),
            "`jobs` gives the job tools, and jobs run their commands with `/bin/sh -c`",
        ),
        case(
            "an invalid runtime.jobs setting",
            "agents:\n  a:\n    runtime:\n      provider: scripted\n      script: [hi]\n      jobs: { image: debian, max_concurrent: 100 }\n    tools: [jobs]\n",
            "out_of_range",
            (6, 46),
            "`max_concurrent` must be between 1 and 64, found 100",
        ),
        case(
            "MCP server that is neither remote nor a command",
            &format!("mcp_servers:\n  t:\n    trusted: true\n{}", agent("")),
            "invalid_mcp_server",
            (2, 3),
            "MCP server `t` says neither where it is nor how to start it",
        ),
        case(
            "MCP command that needs a shell",
            &format!(
                "mcp_servers:\n  t:\n    command: \"sh -c 'x'\"\n{}",
                agent("")
            ),
            "invalid_mcp_server",
            (3, 14),
            "command \"sh -c 'x'\" needs quoting or a shell to split",
        ),
        case(
            "verifier the agent does not have",
            &agent("    tools:\n      - name: file_write\n        verify: { tool: file_read }\n"),
            "undeclared_tool",
            (8, 25),
            "verifier `file_read` is not one of the agent's tools",
        ),
        case(
            "script calls an undeclared tool",
            "agents:\n  a:\n    runtime:\n      provider: scripted\n      script:\n        - tool_calls: [{ name: shell, args: { cmd: ls } }]\n        - done\n",
            "undeclared_tool",
            (6, 32),
            "the script calls `shell`, which is not one of the agent's tools",
        ),
        case(
            "ollama as a provider",
            "agents:\n  a:\n    runtime:\n      provider: ollama\n      model: llama3\n",
            "unsupported_provider",
            (4, 17),
            "provider `ollama` cannot be used directly",
        ),
        case(
            "reserved env name",
            &agent("    env:\n      AGENTFILE_THREAD_ID: x\n"),
            "reserved_env",
            (7, 7),
            "`AGENTFILE_THREAD_ID` is set by ninetrix itself",
        ),
        case(
            "model missing for a hosted provider",
            "agents:\n  a:\n    runtime:\n      provider: openai\n",
            "missing_key",
            (3, 5),
            "`runtime.model` is required for provider `openai`",
        ),
        case(
            "script with a real provider",
            "agents:\n  a:\n    runtime:\n      provider: openai\n      model: gpt-4o\n      script: [hi]\n",
            "script_not_scripted",
            (6, 7),
            "`script` is only used by provider `scripted`, not `openai`",
        ),
        case(
            "misplaced key",
            &agent("    replicas: 2\n"),
            "unknown_key",
            (6, 5),
            "unknown key `replicas` in an agent",
        ),
        case(
            "bad pool name",
            &format!("name: My Pool\n{}", agent("")),
            "invalid_name",
            (1, 7),
            "`My Pool` is not a valid pool name",
        ),
        case(
            "cpu 0",
            "agents:\n  a:\n    runtime:\n      provider: scripted\n      script: [hi]\n      resources: { cpu: 0 }\n",
            "out_of_range",
            (6, 25),
            "`cpu` must be more than 0, found 0",
        ),
        case(
            "base image given twice",
            "agents:\n  a:\n    runtime:\n      provider: scripted\n      script: [hi]\n      image: alpine\n      resources: { base_image: debian }\n",
            "duplicate_setting",
            (7, 20),
            "the base image is given twice",
        ),
        case(
            "base image given twice, resources first",
            "agents:\n  a:\n    runtime:\n      provider: scripted\n      script: [hi]\n      resources: { base_image: debian }\n      image: alpine\n",
            "duplicate_setting",
            (6, 20),
            "the base image is given twice",
        ),
        case(
            "unknown memory scope",
            &agent("    tools:\n      - { name: memory, scope: team }\n"),
            "invalid_value",
            (7, 32),
            "unknown memory scope `team`",
        ),
        case(
            "scope on a tool other than memory",
            &agent("    tools:\n      - { name: file_read, scope: agent }\n"),
            "invalid_value",
            (7, 35),
            "`scope` only applies to the `memory` tool, not `file_read`",
        ),
        case(
            "unknown resume mode",
            &agent("    execution:\n      resume: replay\n"),
            "invalid_value",
            (7, 15),
            "unknown resume mode `replay`",
        ),
        case(
            "unknown collaborator",
            "agents:\n  lead:\n    collaborators: [writer, reseacher]\n  researcher: {}\n  writer: {}\n",
            "unknown_collaborator",
            (3, 29),
            "`reseacher` in agent `lead`'s `collaborators` is not an agent of this agentfile",
        ),
        case(
            "an agent as its own collaborator",
            "agents:\n  a:\n    collaborators: [a]\n",
            "invalid_collaborator",
            (3, 21),
            "agent `a` lists itself in `collaborators`",
        ),
        case(
            "a collaborator listed twice",
            "agents:\n  a:\n    collaborators: [b, b]\n  b: {}\n",
            "duplicate_collaborator",
            (3, 24),
            "collaborator `b` is listed twice",
        ),
        case(
            "a batch collaborator",
            "agents:\n  a:\n    collaborators: [b]\n  b:\n    execution: { durability: false }\n",
            "batch_collaborator",
            (3, 21),
            "collaborator `b` is a batch job (`execution.durability: false`)",
        ),
        case(
            "a batch agent with collaborators",
            "agents:\n  a:\n    execution: { durability: false }\n    collaborators: [b]\n  b: {}\n",
            "batch_collaborator",
            (4, 5),
            "agent `a` is a batch job (`execution.durability: false`)",
        ),
        case(
            "a collaborator name too long for its tool",
            &format!("agents:\n  a:\n    collaborators: [{}]\n", "b".repeat(61)),
            "invalid_collaborator",
            (3, 21),
            "collaborator `bbbbbbbbbb",
        ),
        case(
            "human as a collaborator",
            "agents:\n  a:\n    collaborators: [human]\n  human: {}\n",
            "invalid_collaborator",
            (3, 21),
            "`human` cannot be a collaborator: its tool would be `ask_human`",
        ),
        case(
            "transfer_timeout that is not a duration",
            "agents:\n  a:\n    collaborators: [b]\n    transfer_timeout: 5 minutes\n  b: {}\n",
            "invalid_value",
            (4, 23),
            "`transfer_timeout` must be a duration such as `30s`, `15m`, `24h` or `7d`",
        ),
        case(
            "transfer_timeout over 7 days",
            "agents:\n  a:\n    collaborators: [b]\n    transfer_timeout: 8d\n  b: {}\n",
            "out_of_range",
            (4, 23),
            "`transfer_timeout` must be from 1 second to 7 days, found \"8d\"",
        ),
        case(
            "max_delegation_depth 0",
            &agent("    execution:\n      max_delegation_depth: 0\n"),
            "out_of_range",
            (7, 29),
            "`max_delegation_depth` must be between 1 and 32, found 0",
        ),
        case(
            "shared max_delegation_depth 64",
            &format!("execution: {{ max_delegation_depth: 64 }}\n{}", agent("")),
            "out_of_range",
            (1, 36),
            "`max_delegation_depth` must be between 1 and 32, found 64",
        ),
        case(
            "two triggers with one name",
            &triggers(
                "  - { name: daily, type: schedule, every: 1d, message: m }\n  - { name: daily, \
                 type: schedule, every: 1h, message: m }\n",
            ),
            "duplicate_trigger",
            (8, 13),
            "trigger name `daily` is already used (line 7)",
        ),
        case(
            "two webhooks with one path",
            &triggers(
                "  - { name: gh, type: webhook, message: m, secret: S }\n  - { name: gh2, type: \
                 webhook, path: gh, message: m, secret: S }\n",
            ),
            "duplicate_webhook_path",
            (8, 39),
            "webhook `gh2`'s path `gh` is already webhook `gh`'s",
        ),
        case(
            "unknown trigger target",
            &format!(
                "{}  researcher: {{}}\ntriggers:\n  - {{ name: t, type: schedule, every: 1h, \
                 message: m, target_agent: reseacher }}\n",
                agent("")
            ),
            "unknown_trigger_target",
            (8, 69),
            "`target_agent` `reseacher` of trigger `t` is not an agent of this agentfile",
        ),
        case(
            "a trigger to a batch agent",
            &format!(
                "{}triggers:\n  - {{ name: t, type: schedule, every: 1h, message: m }}\n",
                agent("    execution: { durability: false }\n")
            ),
            "batch_trigger_target",
            (8, 5),
            "trigger `t` goes to agent `a` (the first agent: it has no `target_agent`), which is \
             a batch job",
        ),
        case(
            "cron and every together",
            &triggers(
                "  - name: t\n    type: schedule\n    cron: 0 9 * * *\n    every: 1h\n    \
                 message: m\n",
            ),
            "duplicate_setting",
            (10, 5),
            "trigger `t` has both `cron` and `every`",
        ),
        case(
            "a bad cron field",
            &triggers("  - { name: t, type: schedule, cron: 0 9 * * 8, message: m }\n"),
            "invalid_cron",
            (7, 38),
            "cron `0 9 * * 8`: the day-of-week field `8` is not valid",
        ),
        case(
            "an unknown time zone",
            &triggers(
                "  - { name: t, type: schedule, cron: 0 9 * * 1-5, timezone: Europe/Lisbom, \
                 message: m }\n",
            ),
            "unknown_time_zone",
            (7, 61),
            "unknown time zone `Europe/Lisbom`",
        ),
        case(
            "a webhook message that is not a template",
            &triggers(
                "  - { name: t, type: webhook, secret: S, message: \"New issue: {{ issue.title\" \
                 }\n",
            ),
            "invalid_template",
            (7, 51),
            "`message` is not a valid template: the `{{` at character 11 is never closed",
        ),
        case(
            "a template in a schedule's session",
            &triggers(
                "  - { name: t, type: schedule, every: 1h, message: m, session: \"day-{{ date \
                 }}\" }\n",
            ),
            "invalid_template",
            (7, 64),
            "a schedule's `session` cannot be a template",
        ),
        case(
            "a webhook without a secret",
            &triggers("  - { name: t, type: webhook, message: m }\n"),
            "missing_key",
            (7, 5),
            "trigger `t` needs `secret`",
        ),
        case(
            "cron on a webhook",
            &triggers(
                "  - { name: t, type: webhook, secret: S, message: m, cron: \"0 9 * * *\" }\n",
            ),
            "misplaced_trigger_key",
            (7, 54),
            "`cron` is a key of schedule triggers, and trigger `t` is a webhook",
        ),
        case(
            "target_agent under an agent",
            &agent(
                "    triggers:\n      - { name: t, type: schedule, every: 1h, message: m, \
                 target_agent: a }\n",
            ),
            "misplaced_trigger_key",
            (7, 59),
            "`target_agent` is only for top-level triggers",
        ),
        case(
            "timezone with every",
            &triggers("  - { name: t, type: schedule, every: 10m, timezone: UTC, message: m }\n"),
            "misplaced_trigger_key",
            (7, 44),
            "`timezone` does not apply to `every`",
        ),
        case(
            "a webhook endpoint",
            &triggers(
                "  - { name: t, type: webhook, secret: S, message: m, endpoint: /hooks/gh }\n",
            ),
            "unsupported_key",
            (7, 54),
            "`endpoint` is not supported: webhooks are served by the checkpoint API",
        ),
        case(
            "a channel trigger",
            &triggers("  - { name: t, type: channel, message: m }\n"),
            "unsupported_trigger",
            (7, 22),
            "trigger type `channel` is not supported yet",
        ),
        case(
            "two documents",
            &format!("{}---\nname: other\n", agent("")),
            "yaml_syntax",
            (6, 1),
            "",
        ),
    ]
}

fn first_error(case: &Case) -> Diagnostic {
    match agentfile::parse("agentfile.yaml", &case.yaml) {
        Ok(_) => panic!("{}: expected an error, but the file validated", case.name),
        Err(report) => report
            .diagnostics
            .iter()
            .find(|d| d.severity == Severity::Error)
            .cloned()
            .unwrap_or_else(|| panic!("{}: no error in {report:?}", case.name)),
    }
}

#[test]
fn each_bad_agentfile_gets_its_located_error() {
    let mut failures = Vec::new();
    for case in cases() {
        let d = first_error(&case);
        let got = (d.kind.code(), d.line, d.column);
        let want = (case.code, case.line, case.column);
        if got != want || !d.message.starts_with(case.message) {
            failures.push(format!(
                "{}:\n  want {want:?} {:?}\n  got  {got:?} {:?} (help: {:?})",
                case.name, case.message, d.message, d.help
            ));
        }
        // Every error tells the user what to do next, except raw YAML syntax errors.
        if d.kind.code() != "yaml_syntax" && d.help.is_none() {
            failures.push(format!("{}: no help in {d:?}", case.name));
        }
    }
    assert!(
        failures.is_empty(),
        "{} case(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn the_table_covers_at_least_twenty_cases() {
    assert!(cases().len() >= 20);
}

#[test]
fn secret_values_never_appear_in_rendered_errors() {
    for case in cases().iter().filter(|c| c.code == "secret_value") {
        let report = agentfile::parse("agentfile.yaml", &case.yaml).unwrap_err();
        let text = report.render(false);
        for secret in ["sk-ant-api03-abcdefghijklmnop", "hunter2-and-more"] {
            assert!(
                !text.contains(secret),
                "{}: secret leaked:\n{text}",
                case.name
            );
        }
        let json = serde_json::to_string(&report.diagnostics).unwrap();
        assert!(
            !json.contains("hunter2") && !json.contains("sk-ant"),
            "{json}"
        );
    }
}

#[test]
fn an_unknown_collaborator_gets_the_closest_agent() {
    let case = cases()
        .into_iter()
        .find(|c| c.name == "unknown collaborator")
        .unwrap();
    let d = first_error(&case);
    assert_eq!(d.path, "agents.lead.collaborators[1]");
    let help = d.help.unwrap();
    assert!(help.starts_with("did you mean `researcher`?"), "{help}");
    assert!(help.contains("researcher, writer"), "{help}");
}

#[test]
fn trigger_typos_get_the_closest_name() {
    for (name, hint) in [
        ("unknown trigger target", "did you mean `researcher`?"),
        ("an unknown time zone", "did you mean `Europe/Lisbon`?"),
    ] {
        let case = cases().into_iter().find(|c| c.name == name).unwrap();
        let help = first_error(&case).help.unwrap();
        assert!(help.starts_with(hint), "{name}: {help}");
    }
    let case = cases()
        .into_iter()
        .find(|c| c.name == "a webhook endpoint")
        .unwrap();
    let help = first_error(&case).help.unwrap();
    assert!(
        help.contains("`POST /v1/hooks/<pool>/<path>`") && help.contains("`path:`"),
        "{help}"
    );
}

#[test]
fn trigger_settings_without_effect_are_only_warnings() {
    for (items, at) in [
        (
            "  - { name: t, type: schedule, every: 1h, message: m, catch_up: none, \
             catch_up_window: 2h }\n",
            (7, 71),
        ),
        (
            "  - { name: t, type: webhook, message: m, secret: S, signature: github, tolerance: \
             1m }\n",
            (7, 73),
        ),
    ] {
        let parsed = agentfile::parse("agentfile.yaml", &triggers(items))
            .expect("warnings do not fail validation");
        let w = &parsed.warnings.diagnostics;
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!(
            (w[0].severity, w[0].kind.code(), w[0].line, w[0].column),
            (Severity::Warning, "trigger_setting_unused", at.0, at.1)
        );
        assert_eq!(parsed.agentfile.triggers.len(), 1);
    }
}

#[test]
fn transfer_timeout_without_collaborators_is_only_a_warning() {
    let yaml = agent("    transfer_timeout: 5m\n");
    let parsed =
        agentfile::parse("agentfile.yaml", &yaml).expect("warnings do not fail validation");
    let w = &parsed.warnings.diagnostics;
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!(
        (w[0].severity, w[0].kind.code(), w[0].line, w[0].column),
        (Severity::Warning, "transfer_timeout_unused", 6, 5)
    );
}

#[test]
fn several_errors_are_all_reported() {
    let yaml = "agents:\n  a:\n    runtime:\n      provider: openai\n      model: x\n      temperature: 5\n    execution:\n      replicas: 0\n  B:\n    runtime: { provider: scripted, script: [hi] }\n    tools: [nope]\n";
    let report = agentfile::parse("agentfile.yaml", yaml).unwrap_err();
    let codes: Vec<(&str, u32)> = report
        .diagnostics
        .iter()
        .map(|d| (d.kind.code(), d.line))
        .collect();
    assert_eq!(
        codes,
        [
            ("out_of_range", 6),
            ("out_of_range", 8),
            ("invalid_name", 9),
            ("unknown_tool", 11)
        ],
        "{}",
        report.render(false)
    );
}

#[test]
fn env_secrets_warn_without_showing_the_value() {
    let yaml =
        agent("    env:\n      OPENAI_API_KEY: sk-proj-1234567890abcdef\n      LOG_LEVEL: debug\n");
    let parsed =
        agentfile::parse("agentfile.yaml", &yaml).expect("warnings do not fail validation");
    let warnings = &parsed.warnings.diagnostics;
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(
        (
            warnings[0].kind.code(),
            warnings[0].line,
            warnings[0].column
        ),
        ("secret_in_env", 7, 23)
    );
    let text = parsed.warnings.render(false);
    assert!(!text.contains("sk-proj"), "{text}");
    assert!(text.contains("secrets: [OPENAI_API_KEY]"), "{text}");
}

#[test]
fn oversized_files_are_refused_before_reading() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agentfile.yaml");
    let file = std::fs::File::create(&path).unwrap();
    file.set_len(20 * 1024 * 1024).unwrap();
    match agentfile::load(&path) {
        Err(e @ agentfile::LoadError::TooLarge { size, .. }) => {
            assert_eq!(size, 20 * 1024 * 1024);
            assert_eq!(e.kind().map(|k| k.code()), Some("too_large"));
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
}
