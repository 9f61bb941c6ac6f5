//! The agentfile language (docs/design.md §4, docs/agentfile.md): a YAML file naming a pool's
//! agents, their models, tools, replicas, durability and triggers — what it says and what it
//! means.
//!
//! [`parse`] turns text into a validated, resolved [`Agentfile`] or a [`Report`] of every problem
//! with its file, line and column; [`load`] does the same for a file on disk, refusing oversized
//! files before reading them. Key names follow the public Ninetrix agentfile where the concept is
//! the same. The rules of names, units, builtin tools, providers, MCP servers and egress
//! allow-list patterns live here too.
//!
//! The wire types the resolved spec shares with the API and the trace — effect classes,
//! triggers, session and handoff keys — belong to `ninetrix-proto`, which this crate depends on
//! (never the reverse); [`Effect`] and the MCP effect source are re-exported where the agentfile
//! uses them.

pub mod context;
mod decode;
pub mod defaults;
mod diagnostic;
pub mod egress;
pub mod mcp;
pub mod names;
pub mod network;
pub mod providers;
mod schema;
pub mod security;
pub mod tools;
pub mod units;
pub mod yaml;

use std::path::{Path, PathBuf};

pub use diagnostic::{Diagnostic, DiagnosticKind, Report, Severity};
pub use schema::{
    A2aRemote, AgentCardInfo, AgentSpec, Agentfile, ApprovalAction, BudgetPolicy, Effect,
    Execution, FallbackModel, Governance, HandoffTarget, HumanApproval, Jobs, Metadata,
    ModelLimits, OnBudgetExceeded, Provider, Resources, ResumeMode, Runtime, ScriptStep,
    ScriptedToolCall, SkillInfo, ToolSpec,
};

/// A valid agentfile and its warnings.
#[derive(Clone, Debug)]
pub struct Parsed {
    /// The resolved agentfile.
    pub agentfile: Agentfile,
    /// Warnings (the report has no errors).
    pub warnings: Report,
}

/// Parses and validates agentfile text. `file` names it in diagnostics.
pub fn parse(file: &str, text: &str) -> Result<Parsed, Report> {
    let root = match yaml::parse(text) {
        Ok(root) => root,
        Err(e) => {
            let mut d = Diagnostic::new(
                Severity::Error,
                DiagnosticKind::YamlSyntax,
                "",
                e.loc,
                e.message,
            );
            d.help = e.help;
            return Err(Report::new(file, text, vec![d]));
        }
    };
    let (agentfile, diagnostics) = decode::decode(&root);
    let report = Report::new(file, text, diagnostics);
    match agentfile {
        Some(agentfile) if !report.has_errors() => Ok(Parsed {
            agentfile,
            warnings: report,
        }),
        _ => Err(report),
    }
}

/// Why an agentfile could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read. The cause is in the message and not a `source` too, so a
    /// report of the whole chain (`{:#}`) says it once.
    #[error("cannot read {}: {error}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The file is larger than any agentfile should be.
    #[error(
        "{} is {size} bytes; agentfiles are limited to {} bytes (is this the right file?)",
        path.display(),
        yaml::MAX_FILE_BYTES
    )]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size in bytes.
        size: u64,
    },
    /// The file is not UTF-8 text.
    #[error("{} is not UTF-8 text (is this the right file?)", path.display())]
    NotText {
        /// The file.
        path: PathBuf,
    },
    /// The file has errors.
    #[error("{} has {} error(s)", .0.file, .0.count(Severity::Error))]
    Invalid(Report),
}

impl LoadError {
    /// The diagnostic kind of a failure that has no located diagnostics; `None` for
    /// [`LoadError::Invalid`], whose report holds them.
    pub fn kind(&self) -> Option<DiagnosticKind> {
        match self {
            LoadError::Io { .. } => Some(DiagnosticKind::Io),
            LoadError::TooLarge { .. } => Some(DiagnosticKind::TooLarge),
            LoadError::NotText { .. } => Some(DiagnosticKind::NotText),
            LoadError::Invalid(_) => None,
        }
    }
}

/// Reads and validates an agentfile. Files over [`yaml::MAX_FILE_BYTES`] are refused before
/// they are read.
pub fn load(path: &Path) -> Result<Parsed, LoadError> {
    use std::io::Read as _;
    let io = |error| LoadError::Io {
        path: path.to_path_buf(),
        error,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let size = file.metadata().map_err(io)?.len();
    let limit = yaml::MAX_FILE_BYTES as u64;
    if size > limit {
        return Err(LoadError::TooLarge {
            path: path.to_path_buf(),
            size,
        });
    }
    let mut bytes = Vec::with_capacity(size as usize);
    // `take` guards against a file that grows while it is read (or a FIFO).
    file.take(limit + 1).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 > limit {
        return Err(LoadError::TooLarge {
            path: path.to_path_buf(),
            size: bytes.len() as u64,
        });
    }
    let text = String::from_utf8(bytes).map_err(|_| LoadError::NotText {
        path: path.to_path_buf(),
    })?;
    parse(&path.display().to_string(), &text).map_err(LoadError::Invalid)
}
