//! Files written for the public Ninetrix load, with its key names mapped onto ninetrix's, and
//! settings resolve with their defaults.

use ninetrix_agentfile::{self as agentfile, Agentfile, Effect, Provider};

fn parse(yaml: &str) -> Agentfile {
    match agentfile::parse("agentfile.yaml", yaml) {
        Ok(parsed) => parsed.agentfile,
        Err(report) => panic!("{}", report.render(false)),
    }
}

#[test]
fn a_ninetrix_file_loads_with_its_key_names() {
    let af = parse(
        r#"
schema_version: "1.1"
agents:
  researcher:
    metadata:
      name: Researcher
      description: Finds things
      role: researcher
    runtime:
      provider: anthropic
      model: claude-sonnet-4-6
      max_turns: 12
      resources:
        cpu: 2
        memory: 4g
        base_image: python:3.12-slim
    tools:
      - bash
      - filesystem
      - builtin://http_request
    governance:
      max_budget_per_run: 0.5
"#,
    );
    let a = af.agent("researcher").unwrap();
    assert_eq!(a.execution.max_turns, 12);
    assert_eq!(a.runtime.image.as_deref(), Some("python:3.12-slim"));
    assert_eq!(a.runtime.resources.memory_bytes, Some(4 << 30));
    let tools: Vec<&str> = a.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        tools,
        [
            "shell",
            "file_read",
            "file_write",
            "list_dir",
            "http_request"
        ]
    );
    assert_eq!(
        a.secrets,
        ["ANTHROPIC_API_KEY"],
        "the provider's key is a needed secret"
    );
    assert_eq!(a.governance.max_budget_per_run, Some(0.5));
}

#[test]
fn an_agent_with_nothing_under_it_gets_every_default() {
    let af = parse("agents:\n  helper:\n");
    let a = af.agent("helper").unwrap();
    assert_eq!(a.runtime.provider, Provider::Anthropic);
    assert_eq!(a.runtime.model, agentfile::defaults::ANTHROPIC_MODEL);
    assert_eq!(a.runtime.temperature, agentfile::defaults::TEMPERATURE);
    assert_eq!(a.runtime.max_tokens, agentfile::defaults::MAX_TOKENS);
    assert!(a.execution.durability);
    assert_eq!(
        (a.execution.replicas, a.execution.max_turns),
        (1, agentfile::defaults::MAX_TURNS)
    );
    assert_eq!(a.governance.max_budget_per_run, None);
    assert!(a.tools.is_empty());
}

#[test]
fn openai_compatible_services_resolve_to_openai() {
    let af = parse(
        "agents:\n  fast:\n    runtime: { provider: groq, model: llama-3.3-70b-versatile }\n  local:\n    runtime: { provider: openai, model: llama3.2, base_url: \"http://host.docker.internal:11434/v1/\" }\n",
    );
    let fast = af.agent("fast").unwrap();
    assert_eq!(fast.runtime.provider, Provider::Openai);
    assert_eq!(fast.runtime.via.as_deref(), Some("groq"));
    assert_eq!(
        fast.runtime.base_url.as_deref(),
        Some("https://api.groq.com/openai/v1")
    );
    assert_eq!(fast.secrets, ["GROQ_API_KEY"]);
    let local = af.agent("local").unwrap();
    assert_eq!(
        local.runtime.base_url.as_deref(),
        Some("http://host.docker.internal:11434/v1")
    );
    assert!(local.secrets.is_empty(), "a local server needs no key");
}

#[test]
fn top_level_settings_are_defaults_that_agents_override_key_by_key() {
    let af = parse(
        "execution: { max_turns: 5, resume: complete }\ngovernance: { max_budget_per_run: 2 }\nagents:\n  a:\n    runtime: { provider: scripted, script: [hi] }\n  b:\n    runtime: { provider: scripted, script: [hi] }\n    execution: { max_turns: 9 }\n    governance: { max_budget_per_run: 0.25 }\n",
    );
    let a = af.agent("a").unwrap();
    assert_eq!(
        (a.execution.max_turns, a.execution.resume.as_str()),
        (5, "complete")
    );
    assert_eq!(a.governance.max_budget_per_run, Some(2.0));
    let b = af.agent("b").unwrap();
    assert_eq!(
        (b.execution.max_turns, b.execution.resume.as_str()),
        (9, "complete")
    );
    assert_eq!(b.governance.max_budget_per_run, Some(0.25));
}

#[test]
fn tool_effects_can_be_overridden_and_all_means_every_builtin() {
    let af = parse(
        "agents:\n  a:\n    tools: [{ name: http_request, effect: read }]\n  b:\n    tools: all\n    runtime: { image: debian }\n",
    );
    assert_eq!(af.agent("a").unwrap().tools[0].effect, Effect::Read);
    assert_eq!(
        af.agent("b").unwrap().tools.len(),
        agentfile::tools::BUILTINS.len()
    );
}

#[test]
fn the_resolved_spec_round_trips_through_json() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../agentfile.example.yaml");
    let af = agentfile::load(&path).unwrap().agentfile;
    for agent in &af.agents {
        let json = serde_json::to_string(agent).unwrap();
        let back: agentfile::AgentSpec = serde_json::from_str(&json).unwrap();
        assert_eq!(&back, agent);
    }
}

#[test]
fn the_memory_builtin_maps_onto_ours_with_its_scope() {
    let af = parse(
        r#"
agents:
  shared:
    runtime: { provider: scripted, script: [{ text: hi }] }
    tools: [builtin://memory]
  own:
    runtime: { provider: scripted, script: [{ text: hi }] }
    tools:
      - { name: memory, scope: session }
"#,
    );
    let shared = &af.agent("shared").unwrap().tools[0];
    assert_eq!(
        (shared.name.as_str(), shared.effect, shared.scope),
        ("memory", Effect::Idempotent, None),
        "scope `agent` by default"
    );
    let own = &af.agent("own").unwrap().tools[0];
    assert_eq!(own.scope, Some(ninetrix_proto::api::MemoryScope::Session));
    let view = serde_json::json!({"command": "view", "path": "/memories"});
    let edit = serde_json::json!({"command": "str_replace", "path": "/memories/a", "old_str": "x", "new_str": "y"});
    assert_eq!(
        agentfile::tools::call_effect("memory", own.effect, false, &view),
        Effect::Read
    );
    assert_eq!(
        agentfile::tools::call_effect("memory", own.effect, false, &edit),
        Effect::Idempotent
    );
}
