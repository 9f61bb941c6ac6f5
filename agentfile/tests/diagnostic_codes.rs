//! Diagnostic codes are a stable interface (`ninetrix validate --json`): each is documented.

use ninetrix_agentfile::DiagnosticKind;

#[test]
fn the_docs_list_every_diagnostic_code() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/agentfile.md");
    let docs = std::fs::read_to_string(path).expect("docs/agentfile.md is readable");
    let start = docs
        .find("## Diagnostics")
        .expect("docs/agentfile.md has a Diagnostics section");
    let section = &docs[start..];
    let missing: Vec<&str> = DiagnosticKind::ALL
        .iter()
        .map(|k| k.code())
        .filter(|code| !section.contains(&format!("| `{code}` |")))
        .collect();
    assert!(
        missing.is_empty(),
        "codes missing from the table in docs/agentfile.md: {missing:?}"
    );
}
