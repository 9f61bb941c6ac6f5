//! What the decode tests share: parse a file and read its one error or warning.

use super::Severity;
use crate::{Diagnostic, Parsed, Report};

pub(super) fn parse(text: &str) -> Result<Parsed, Report> {
    crate::parse("agentfile.yaml", text)
}

/// The parsed file, which must validate.
pub(super) fn valid(text: &str) -> Parsed {
    parse(text).unwrap_or_else(|r| panic!("{}", r.render(false)))
}

/// The errors of `text`, which must not validate.
pub(super) fn errors(text: &str) -> Vec<Diagnostic> {
    let report = parse(text).expect_err("the file must not validate");
    report
        .diagnostics
        .into_iter()
        .filter(|d| d.severity == Severity::Error)
        .collect()
}

/// Every error of `text` as (code, line, column), in the order reported.
pub(super) fn errors_at(text: &str) -> Vec<(&'static str, u32, u32)> {
    errors(text)
        .iter()
        .map(|d| (d.kind.code(), d.line, d.column))
        .collect()
}

/// Asserts `text`'s one error: its code, `line:column`, message, and that it has help.
pub(super) fn assert_error(text: &str, code: &str, at: (u32, u32), message: &str) -> Diagnostic {
    let errors = errors(text);
    assert_eq!(errors.len(), 1, "{errors:#?}");
    let d = errors[0].clone();
    assert_eq!(
        (d.kind.code(), d.line, d.column, d.message.as_str()),
        (code, at.0, at.1, message),
        "{d:?}"
    );
    assert!(d.help.is_some(), "no help in {d:?}");
    d
}

/// The only warning of `text`, which must validate.
pub(super) fn one_warning(text: &str) -> Diagnostic {
    let parsed = valid(text);
    let w = parsed.warnings.diagnostics;
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!(w[0].severity, Severity::Warning);
    assert!(w[0].help.is_some());
    w[0].clone()
}
