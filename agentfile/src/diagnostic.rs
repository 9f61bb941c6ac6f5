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

/// Declares [`DiagnosticKind`] with each variant's wire code, so a code is written once.
macro_rules! diagnostic_kinds {
    ($($(#[doc = $doc:literal])* $variant:ident = $code:literal,)*) => {
        /// What kind of problem a [`Diagnostic`] reports. Each kind has one stable wire code
        /// ([`DiagnosticKind::code`]), the `code` field of `ninetrix validate --json`.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum DiagnosticKind {
            $($(#[doc = $doc])* $variant,)*
        }

        impl DiagnosticKind {
            /// Every kind, in declaration order.
            pub const ALL: &'static [DiagnosticKind] = &[$(DiagnosticKind::$variant,)*];

            /// The stable machine-readable code, e.g. `unknown_key`.
            pub const fn code(self) -> &'static str {
                match self {
                    $(DiagnosticKind::$variant => $code,)*
                }
            }
        }
    };
}

diagnostic_kinds! {
    /// The text is not valid YAML (or breaks a parser budget).
    YamlSyntax = "yaml_syntax",
    /// The file holds no document.
    EmptyFile = "empty_file",
    /// The document is not a mapping of keys.
    NotAMapping = "not_a_mapping",
    /// A key no section knows.
    UnknownKey = "unknown_key",
    /// A key of the public Ninetrix agentfile that ninetrix does not implement yet.
    UnsupportedKey = "unsupported_key",
    /// A value of the wrong YAML type.
    WrongType = "wrong_type",
    /// A number (or a duration) outside its allowed range.
    OutOfRange = "out_of_range",
    /// A required key is absent.
    MissingKey = "missing_key",
    /// A value that must not be empty is.
    EmptyValue = "empty_value",
    /// A pool, agent, environment variable or secret name breaks its naming rules.
    InvalidName = "invalid_name",
    /// `base_url`, an MCP server's `url` or `notify_url` is not an http(s) URL.
    InvalidUrl = "invalid_url",
    /// A value outside a closed set (resume mode, tool effect) or not in its format (a
    /// duration).
    InvalidValue = "invalid_value",
    /// A memory size that cannot be parsed.
    InvalidMemory = "invalid_memory",
    /// A `schema_version` ninetrix does not read.
    UnsupportedVersion = "unsupported_version",
    /// A provider name ninetrix does not know.
    UnknownProvider = "unknown_provider",
    /// A known provider that cannot be used directly.
    UnsupportedProvider = "unsupported_provider",
    /// `script` given for a provider other than `scripted`.
    ScriptNotScripted = "script_not_scripted",
    /// A script, verifier or approval action names a tool the agent does not declare.
    UndeclaredTool = "undeclared_tool",
    /// A script's last step calls tools (a warning).
    ScriptEndsWithToolCall = "script_ends_with_tool_call",
    /// One setting given in two places.
    DuplicateSetting = "duplicate_setting",
    /// A secret listed twice.
    DuplicateSecret = "duplicate_secret",
    /// A tool listed twice.
    DuplicateTool = "duplicate_tool",
    /// A batch agent with more than one replica.
    BatchReplicas = "batch_replicas",
    /// `agents` holds no agent.
    NoAgents = "no_agents",
    /// An `env:` name reserved for the runner.
    ReservedEnv = "reserved_env",
    /// A secret in plain `env:`, or a name both in `env:` and `secrets:`.
    SecretInEnv = "secret_in_env",
    /// A secret value where a secret name belongs, or credentials in `notify_url`.
    SecretValue = "secret_value",
    /// A tool name ninetrix does not know.
    UnknownTool = "unknown_tool",
    /// A tool source ninetrix does not implement yet.
    UnsupportedTool = "unsupported_tool",
    /// An `mcp://` tool naming a server `mcp_servers` does not declare.
    UnknownMcpServer = "unknown_mcp_server",
    /// An `mcp_servers` entry that is not one kind of server (or an invalid command or `allow`).
    InvalidMcpServer = "invalid_mcp_server",
    /// A stdio MCP server in an agent's container that has no image to run it.
    McpNeedsImage = "mcp_needs_image",
    /// The `shell` tool in an agent without `runtime.image`: the runner's image has no shell.
    ShellNeedsImage = "shell_needs_image",
    /// Job tools in an agent whose jobs have no image with a shell (neither
    /// `runtime.jobs.image` nor `runtime.image`).
    JobsNeedImage = "jobs_need_image",
    /// `governance.human_approval` that gates no call (a warning).
    ApprovalGatesNothing = "approval_gates_nothing",
    /// A `collaborators` entry that is no agent of the agentfile.
    UnknownCollaborator = "unknown_collaborator",
    /// A `collaborators` entry that can never be a collaborator: the agent itself, `human`, or
    /// a name too long for its `ask_<agent>` tool.
    InvalidCollaborator = "invalid_collaborator",
    /// A collaborator listed twice.
    DuplicateCollaborator = "duplicate_collaborator",
    /// A handoff where the caller or the collaborator is a batch job (`durability: false`).
    BatchCollaborator = "batch_collaborator",
    /// `transfer_timeout` on an agent without collaborators (a warning).
    TransferTimeoutUnused = "transfer_timeout_unused",
    /// A host the agent must reach (a remote A2A collaborator's card) that its restricted
    /// `network.egress` does not allow.
    EgressNotAllowed = "egress_not_allowed",
    /// Two triggers of the pool with one name.
    DuplicateTrigger = "duplicate_trigger",
    /// Two webhook triggers of the pool with one `path`.
    DuplicateWebhookPath = "duplicate_webhook_path",
    /// A trigger's `target_agent` that is no agent of the agentfile.
    UnknownTriggerTarget = "unknown_trigger_target",
    /// A trigger whose agent is a batch job (`durability: false`), which has no sessions.
    BatchTriggerTarget = "batch_trigger_target",
    /// A kind of trigger ninetrix does not implement yet (`type: channel`).
    UnsupportedTrigger = "unsupported_trigger",
    /// A trigger key where it has no meaning: a key of the other type, `target_agent` under an
    /// agent, `timezone` with `every`.
    MisplacedTriggerKey = "misplaced_trigger_key",
    /// A schedule's `cron` that is not a valid 5-field expression (or never fires).
    InvalidCron = "invalid_cron",
    /// A schedule's or `governance.timezone` that is not an IANA time zone.
    UnknownTimeZone = "unknown_time_zone",
    /// A webhook's `message`/`session` that is not a valid template, or `{{` in a schedule's
    /// `session`.
    InvalidTemplate = "invalid_template",
    /// A trigger setting that has no effect with the others (a warning).
    TriggerSettingUnused = "trigger_setting_unused",
    /// A key in a section where it has no meaning: `max_pool_budget_per_day` under an agent's
    /// `governance` (it is the pool's).
    MisplacedKey = "misplaced_key",
    /// A setting that has no effect with the others (a warning): `runtime.fallback_after`
    /// without `fallback`, `governance.on_budget_exceeded` or `timezone` without a budget beyond
    /// the run, a top-level `limits` entry that no model uses.
    SettingUnused = "setting_unused",
    /// An agent's `runtime.limits` that differ from another model's on the same provider key
    /// (a warning): the pool keeps one set per key.
    LimitsConflict = "limits_conflict",
    /// The file cannot be read (no location).
    Io = "io",
    /// The file is larger than any agentfile should be (no location).
    TooLarge = "too_large",
    /// The file is not UTF-8 text (no location).
    NotText = "not_text",
}

impl std::fmt::Display for DiagnosticKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.code())
    }
}

impl Serialize for DiagnosticKind {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.code())
    }
}

/// One problem found in an agentfile.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Diagnostic {
    /// Error or warning.
    pub severity: Severity,
    /// What kind of problem; serialized as its stable code, e.g. `unknown_key`.
    #[serde(rename = "code")]
    pub kind: DiagnosticKind,
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
        kind: DiagnosticKind,
        path: impl Into<String>,
        loc: Loc,
        message: impl Into<String>,
    ) -> Self {
        Self {
            severity,
            kind,
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
            DiagnosticKind::SecretInEnv,
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

    #[test]
    fn kinds_serialize_as_their_distinct_codes() {
        let mut codes: Vec<&str> = DiagnosticKind::ALL.iter().map(|k| k.code()).collect();
        for kind in DiagnosticKind::ALL {
            assert_eq!(
                serde_json::to_value(kind).unwrap(),
                serde_json::Value::from(kind.code())
            );
            assert_eq!(kind.to_string(), kind.code());
        }
        let n = codes.len();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), n, "two kinds share a code");
    }
}
