//! The shipped example agentfile is valid and says what the README says it says.

use std::path::Path;

use ninetrix_agentfile::{self as agentfile, Effect, Provider, ResumeMode};

#[test]
fn the_example_validates_with_no_warnings() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../agentfile.example.yaml");
    let parsed = agentfile::load(&path).unwrap_or_else(|e| match e {
        agentfile::LoadError::Invalid(report) => panic!("{}", report.render(false)),
        other => panic!("{other}"),
    });
    assert!(
        parsed.warnings.diagnostics.is_empty(),
        "{}",
        parsed.warnings.render(false)
    );
    let af = parsed.agentfile;
    assert_eq!(af.name.as_deref(), Some("research-pool"));
    let names: Vec<&str> = af.agents.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["researcher", "writer", "digest"]);

    let researcher = af.agent("researcher").unwrap();
    assert_eq!(researcher.runtime.provider, Provider::Scripted);
    assert!(researcher.execution.durability);
    assert_eq!(researcher.execution.resume, ResumeMode::Truncate);
    assert_eq!(researcher.runtime.resources.memory_bytes, Some(256 << 20));
    let rounds_with_tools = researcher
        .runtime
        .script
        .iter()
        .filter(|s| !s.tool_calls.is_empty())
        .count();
    assert!(
        rounds_with_tools >= 3,
        "the researcher uses tools across several rounds"
    );
    let write = researcher
        .tools
        .iter()
        .find(|t| t.name == "file_write")
        .unwrap();
    assert_eq!(
        (write.effect, write.effect_pinned),
        (Effect::Idempotent, false)
    );
    // The finding is appended: that call is a `write` (never re-run after a crash).
    let append = researcher
        .runtime
        .script
        .iter()
        .flat_map(|s| &s.tool_calls)
        .find(|c| c.name == "file_write")
        .unwrap();
    assert_eq!(
        agentfile::tools::call_effect(
            "file_write",
            write.effect,
            write.effect_pinned,
            &append.args
        ),
        Effect::Write
    );
    assert!(researcher.secrets.is_empty(), "offline: no API key needed");

    let writer = af.agent("writer").unwrap();
    assert_eq!(writer.execution.replicas, 2);
    assert!(writer.execution.durability);

    let digest = af.agent("digest").unwrap();
    assert!(!digest.execution.durability);
    assert!(digest.execution.task.is_some());
}
