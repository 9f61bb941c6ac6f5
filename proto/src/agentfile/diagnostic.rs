//! Located diagnostics for agentfiles, and their rendering as rustc-style snippets.
//!
//! A [`Diagnostic`] says what is wrong, where (line and column), and how to fix it. A [`Report`]
//! holds the diagnostics of one file with its text, and renders them with a caret under the
//! offending span. Values that may be secrets are masked in snippets: a rendered report never
//! repeats them.

use std::fmt::Write as _;

use serde::Serialize;

use super::yaml::Loc;

/// How serious a diagnostic is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// The agentfile is invalid.
    Error,
    /// The agentfile is valid, but something in it is probably a mistake.
    Warning,
}

/// One problem found in an agentfile.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Diagnostic {
    /// Error or warning.
    pub severity: Severity,
    /// A stable machine-readable code, e.g. `unknown_key`.
    pub code: &'static str,
    /// The dotted path of the offending node, e.g. `agents.researcher.runtime.temperature`.
    pub path: String,
    /// 1-based line.
    pub line: u32,
    /// 1-based column, in characters.
    pub column: u32,
    /// What is wrong.
    pub message: String,
    /// How to fix it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub help: Option<String>,
    #[serde(skip)]
    pub(crate) len: u32,
    /// Mask the span in snippets: it may hold a secret.
    #[serde(skip)]
    pub(crate) redact: bool,
}

impl Diagnostic {
    pub(crate) fn new(
        severity: Severity,
        code: &'static str,
        path: impl Into<String>,
        loc: Loc,
        message: impl Into<String>,
    ) -> Self {
        Self {
            severity,
            code,
            path: path.into(),
            line: loc.line,
            column: loc.column,
            len: loc.len,
            message: message.into(),
            help: None,
            redact: false,
        }
    }
}

/// The diagnostics of one agentfile, with the text they point into.
#[derive(Clone, Debug)]
pub struct Report {
    /// The file name shown in locations.
    pub file: String,
    /// The diagnostics, sorted by position.
    pub diagnostics: Vec<Diagnostic>,
    source: String,
}

/// Colours used when rendering on a terminal.
#[derive(Clone, Copy, Debug)]
struct Style {
    on: bool,
}

impl Style {
    fn paint(self, code: &str, text: &str) -> String {
        if self.on {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }
}

impl Report {
    pub(crate) fn new(
        file: impl Into<String>,
        source: &str,
        mut diagnostics: Vec<Diagnostic>,
    ) -> Self {
        diagnostics.sort_by_key(|d| (d.line, d.column));
        Self {
            file: file.into(),
            diagnostics,
            source: source.to_string(),
        }
    }

    /// Whether any diagnostic is an error.
    pub fn has_errors(&self) -> bool {
        self.diagnostics
            .iter()
            .any(|d| d.severity == Severity::Error)
    }

    /// Number of diagnostics of the given severity.
    pub fn count(&self, severity: Severity) -> usize {
        self.diagnostics
            .iter()
            .filter(|d| d.severity == severity)
            .count()
    }

    /// Renders every diagnostic, each with a snippet, as plain text or with ANSI colours.
    pub fn render(&self, color: bool) -> String {
        let style = Style { on: color };
        let mut out = String::new();
        for d in &self.diagnostics {
            self.render_one(&mut out, d, style);
            out.push('\n');
        }
        out
    }

    fn render_one(&self, out: &mut String, d: &Diagnostic, style: Style) {
        let (label, code) = match d.severity {
            Severity::Error => ("error", "1;31"),
            Severity::Warning => ("warning", "1;33"),
        };
        let _ = writeln!(
            out,
            "{}{} {}",
            style.paint(code, label),
            style.paint("1", ":"),
            style.paint("1", &d.message)
        );
        let gutter = d.line.to_string().len();
        let pad = " ".repeat(gutter);
        let _ = writeln!(
            out,
            "{pad}{} {}:{}:{}",
            style.paint("1;34", "-->"),
            self.file,
            d.line,
            d.column
        );
        if let Some(line) = self.source.lines().nth(d.line.saturating_sub(1) as usize) {
            let line = line.trim_end_matches('\r');
            let start = d.column.saturating_sub(1) as usize;
            let width = (d.len as usize).max(1);
            let shown: String = if d.redact {
                line.chars()
                    .enumerate()
                    .map(|(i, c)| {
                        if i >= start && i < start + width {
                            '*'
                        } else {
                            c
                        }
                    })
                    .collect()
            } else {
                line.to_string()
            };
            let shown = shown.replace('\t', " ");
            let line_len = shown.chars().count();
            let width = width.min(line_len.saturating_sub(start).max(1));
            let bar = style.paint("1;34", "|");
            let _ = writeln!(out, "{pad} {bar}");
            let _ = writeln!(
                out,
                "{} {bar} {shown}",
                style.paint("1;34", &d.line.to_string())
            );
            let _ = writeln!(
                out,
                "{pad} {bar} {}{}",
                " ".repeat(start),
                style.paint(code, &"^".repeat(width))
            );
        }
        if let Some(help) = &d.help {
            let _ = writeln!(
                out,
                "{pad} {} {}",
                style.paint("1;34", "="),
                format_args!("help: {help}")
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_a_caret_under_the_span_and_masks_secrets() {
        let src = "env:\n  OPENAI_API_KEY: sk-abcdef\n";
        let loc = Loc {
            line: 2,
            column: 19,
            len: 9,
        };
        let mut d = Diagnostic::new(
            Severity::Warning,
            "secret_in_env",
            "env.OPENAI_API_KEY",
            loc,
            "looks like a key",
        );
        d.help = Some("move it to secrets:".into());
        d.redact = true;
        let text = Report::new("agentfile.yaml", src, vec![d]).render(false);
        assert_eq!(
            text,
            "warning: looks like a key\n \
             --> agentfile.yaml:2:19\n  \
             |\n\
             2 |   OPENAI_API_KEY: *********\n  \
             |                   ^^^^^^^^^\n  \
             = help: move it to secrets:\n\n"
        );
        assert!(!text.contains("sk-abcdef"));
    }
}
