//! A pool on Docker (docs/design.md §9): the decisions of `up` ([`plan`], pure) and their execution
//! ([`apply`]), what Docker has ([`observed`]), container specs and names ([`spec`]), the pool
//! state file ([`state`]), images ([`image`]), the checkpoint API a pool uses ([`local_api`]),
//! which pool a command means ([`resolve`]), `up`'s readiness wait ([`ready`]) and what a
//! container is doing as people read it ([`condition`]), with the runners' health reports
//! ([`health`]), the MCP servers' sidecar containers ([`sidecar`]), and background jobs: the
//! pool's job broker ([`broker`]) and its job containers as `ps`, `logs` and `down` see them
//! ([`jobs`]). Everything
//! goes through the Engine API (bollard); nothing shells out to the `docker` CLI.

pub(crate) mod apply;
pub(crate) mod broker;
pub(crate) mod condition;
pub(crate) mod down;
pub(crate) mod egress;
pub(crate) mod egress_env;
pub(crate) mod engine;
pub(crate) mod health;
pub(crate) mod image;
pub(crate) mod jobs;
pub(crate) mod local_api;
pub(crate) mod logs;
pub(crate) mod observed;
pub(crate) mod plan;
pub(crate) mod ready;
pub(crate) mod resolve;
pub(crate) mod runtimes;
pub(crate) mod sidecar;
pub(crate) mod spec;
pub(crate) mod state;
pub(crate) mod status;
pub(crate) mod triggers;
pub(crate) mod up;

use std::path::Path;

use ninetrix_agentfile::{self as agentfile, LoadError, Parsed};

/// Loads and validates the agentfile, printing its warnings, or its report on failure.
pub(crate) fn load(file: &Path) -> anyhow::Result<Parsed> {
    match agentfile::load(file) {
        Ok(parsed) => {
            if !parsed.warnings.diagnostics.is_empty() {
                eprint!(
                    "{}",
                    parsed
                        .warnings
                        .render(crate::ui::style::Style::stderr().color)
                );
            }
            Ok(parsed)
        }
        Err(LoadError::Invalid(report)) => {
            eprint!("{}", report.render(crate::ui::style::Style::stderr().color));
            anyhow::bail!(
                "{} is invalid; run `ninetrix validate -f {}` for details",
                report.file,
                file.display()
            )
        }
        Err(LoadError::Io { path, error }) if error.kind() == std::io::ErrorKind::NotFound => {
            anyhow::bail!(
                "{}",
                missing_agentfile(&path, std::env::current_dir().ok().as_deref())
            )
        }
        Err(e) => Err(e.into()),
    }
}

/// What a command that needs the agentfile says when it is not there: where it looked, and how
/// to name it.
pub(crate) fn missing_agentfile(path: &Path, cwd: Option<&Path>) -> String {
    let here = match cwd {
        Some(dir) if path.is_relative() => format!(" in {}", dir.display()),
        _ => String::new(),
    };
    format!(
        "{} does not exist{here}; pass the agentfile with -f FILE (or run the command in its \
         directory)",
        path.display()
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_missing_agentfile_is_named_once_with_where_it_was_looked_for() {
        let said = super::missing_agentfile(
            std::path::Path::new("agentfile.yaml"),
            Some(std::path::Path::new("/home/me")),
        );
        assert_eq!(
            said,
            "agentfile.yaml does not exist in /home/me; pass the agentfile with -f FILE (or run \
             the command in its directory)"
        );
        assert!(!said.contains("os error"), "{said}");
        let absolute = super::missing_agentfile(std::path::Path::new("/srv/a.yaml"), None);
        assert!(
            absolute.starts_with("/srv/a.yaml does not exist;"),
            "{absolute}"
        );
    }
}
