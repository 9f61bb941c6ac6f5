//! `mcp_servers:` and `mcp://` tool entries resolve into what the runner needs: each agent
//! carries the servers it uses, their secrets, its tool entries with pinned effects, and
//! verifiers resolved to the names the model sees.

use ninetrix_agentfile::mcp::{McpTransport, VerifyArgs};
use ninetrix_agentfile::{self as agentfile, Effect};
use serde_json::json;

const FILE: &str = r#"
mcp_servers:
  tickets:
    url: https://tickets.example.com/mcp
    headers:
      Authorization: "Bearer ${TICKETS_TOKEN}"
    trusted: true
  time:
    image: mcp/time
    command: mcp-server-time --local-timezone=UTC
  git:
    command: [python3, -m, mcp_server_git, --repository, /workspace/repo]
    secrets: [GIT_TOKEN]
    effect: read
agents:
  support:
    runtime:
      provider: scripted
      image: python:3.12-slim
      script:
        - tool_calls: [{ name: tickets__create_ticket, args: { title: t } }]
        - text: done
    tools:
      - name: mcp://tickets/create_ticket
        effect: write
        verify:
          tool: mcp://tickets/find_ticket
          args: { query: "{{args.title}}" }
      - mcp://tickets/find_ticket
      - name: mcp://time
        allow: [get_current_time]
      - mcp://git
      - file_read
  other:
    runtime: { provider: scripted, script: [{ text: hi }] }
    tools: [file_read]
"#;

#[test]
fn mcp_servers_and_tools_resolve_per_agent() {
    let parsed = agentfile::parse("agentfile.yaml", FILE).unwrap_or_else(|r| panic!("{r:?}"));
    let af = parsed.agentfile;
    assert_eq!(af.mcp_servers.len(), 3);
    let McpTransport::Sidecar { command, .. } = &af.mcp_servers["time"].transport else {
        panic!("time is a sidecar: {:?}", af.mcp_servers["time"]);
    };
    assert_eq!(command, &["mcp-server-time", "--local-timezone=UTC"]);

    let support = af.agent("support").unwrap();
    assert_eq!(
        support.mcp_servers.keys().collect::<Vec<_>>(),
        ["git", "tickets", "time"]
    );
    // The header's secret and the local server's secret are mounted in the agent; the
    // sidecar's would not be.
    assert!(support.secrets.contains(&"TICKETS_TOKEN".to_string()));
    assert!(support.secrets.contains(&"GIT_TOKEN".to_string()));

    let names: Vec<&str> = support.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "tickets__create_ticket",
            "tickets__find_ticket",
            "time__*",
            "git__*",
            "file_read"
        ]
    );
    let create = &support.tools[0];
    assert_eq!((create.effect, create.effect_pinned), (Effect::Write, true));
    let verify = create.verify.as_ref().expect("the write has a verifier");
    assert_eq!(verify.tool, "tickets__find_ticket");
    assert_eq!(
        verify.args,
        VerifyArgs::Template(json!({"query": "{{args.title}}"}))
    );
    // Not pinned: the trusted server's annotations decide at boot.
    assert!(!support.tools[1].effect_pinned);
    // The server's `effect:` applies to every tool of it (the runner resolves it per tool).
    assert_eq!(
        (support.tools[3].effect, support.tools[3].effect_pinned),
        (Effect::Read, false)
    );
    assert!(support.offers("time__get_current_time"));
    assert!(!support.offers("time__convert_time"), "not in `allow`");
    assert!(support.offers("git__git_log"));
    assert!(!support.offers("git__"));

    let other = af.agent("other").unwrap();
    assert!(
        other.mcp_servers.is_empty(),
        "only the servers an agent uses"
    );

    // The spec round-trips through the JSON the runner gets.
    let json = serde_json::to_string(support).unwrap();
    let back: agentfile::AgentSpec = serde_json::from_str(&json).unwrap();
    assert_eq!(&back, support);
}

#[test]
fn ninetrix_tool_entries_with_source_and_actions_mean_the_same() {
    let text = r#"
mcp_servers:
  github: { url: "https://gh.example.com/mcp", headers: { Authorization: "Bearer ${GH_TOKEN}" } }
agents:
  a:
    runtime: { provider: scripted, script: [{ text: hi }] }
    tools:
      - name: GitHub
        source: mcp://github
        actions: [list_issues, create_issue]
"#;
    let af = agentfile::parse("agentfile.yaml", text)
        .unwrap_or_else(|r| panic!("{r:?}"))
        .agentfile;
    let a = af.agent("a").unwrap();
    let source = a.tools[0].mcp.as_ref().unwrap();
    assert_eq!(
        (source.server.as_str(), source.tool.as_deref()),
        ("github", None)
    );
    assert_eq!(source.allow, ["list_issues", "create_issue"]);
    assert!(a.offers("github__create_issue") && !a.offers("github__delete_repo"));
    assert_eq!(a.secrets, ["GH_TOKEN"]);
}
