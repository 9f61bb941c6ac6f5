//! The example of docs/agentfile.md's "Limits, budgets and fallback" validates with no warnings
//! and resolves as the text around it says.

use std::path::Path;

use ninetrix_agentfile::{self as agentfile, OnBudgetExceeded, Provider};

/// The first ```yaml block after the section's heading.
fn example() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/agentfile.md");
    let docs = std::fs::read_to_string(path).expect("docs/agentfile.md is readable");
    let (_, section) = docs
        .split_once("## Limits, budgets and fallback")
        .expect("docs/agentfile.md has the section");
    let (_, block) = section.split_once("```yaml\n").expect("it has an example");
    let (yaml, _) = block.split_once("```").expect("the example is closed");
    yaml.to_string()
}

#[test]
fn the_limits_example_validates_and_means_what_the_docs_say() {
    let parsed = agentfile::parse("agentfile.yaml", &example())
        .unwrap_or_else(|report| panic!("{}", report.render(false)));
    assert!(
        parsed.warnings.diagnostics.is_empty(),
        "{}",
        parsed.warnings.render(false)
    );
    let af = parsed.agentfile;
    let triage = af.agent("triage").unwrap();
    let writer = af.agent("writer").unwrap();
    // Both agents on OpenAI's key share its entry.
    assert_eq!(triage.runtime.limits.max_in_flight, Some(8));
    assert_eq!(triage.runtime.limits, writer.runtime.limits);
    assert_eq!(writer.runtime.limits.tokens_per_minute, Some(2_000_000));
    let fallback = &writer.runtime.fallback[0];
    assert_eq!(
        (fallback.provider, fallback.model.as_str()),
        (Provider::Anthropic, "claude-sonnet-4-6")
    );
    assert_eq!(fallback.limits.max_in_flight, Some(4));
    assert_eq!(writer.runtime.fallback_after_secs, 45);
    assert_eq!(writer.secrets, ["OPENAI_API_KEY", "ANTHROPIC_API_KEY"]);
    // The shared governance fills each agent's gaps; the pool's budget reaches every agent.
    for agent in [triage, writer] {
        let g = &agent.governance;
        let budgets = g.budgets().expect("budgets");
        assert_eq!(budgets.pool_per_day_usd, Some(200.0));
        assert_eq!(budgets.timezone, "Europe/Lisbon");
        assert_eq!(g.on_budget_exceeded, OnBudgetExceeded::AskHuman);
    }
    assert_eq!(triage.governance.max_budget_per_session, Some(0.5));
    assert_eq!(triage.governance.max_budget_per_day, None);
    assert_eq!(writer.governance.max_budget_per_day, Some(50.0));
}
