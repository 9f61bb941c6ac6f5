//! Docker orchestration (DESIGN §9): images, the local API, pool state, and the `build`, `up`,
//! `down` and `ps` commands. Everything goes through the Engine API (bollard); nothing shells out
//! to the `docker` CLI.

pub(crate) mod api;
pub(crate) mod apply;
pub(crate) mod diag;
pub(crate) mod docker;
pub(crate) mod down;
pub(crate) mod image;
pub(crate) mod logs;
pub(crate) mod observed;
pub(crate) mod plan;
pub(crate) mod pool;
pub(crate) mod progress;
pub(crate) mod ps;
pub(crate) mod ready;
pub(crate) mod run;
pub(crate) mod spec;
pub(crate) mod state;
pub(crate) mod up;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use bollard::Docker;
use bollard::models::ContainerSummary;
use bollard::query_parameters::ListContainersOptionsBuilder;
use ninetrix_proto::agentfile::{self, LoadError, Parsed};

/// `$AGENTFILE_HOME`, else `~/.agentfile`.
pub(crate) fn home() -> anyhow::Result<PathBuf> {
    crate::commands::agentfile_home()
}

/// Loads and validates the agentfile, printing its report on failure.
pub(crate) fn load(file: &Path) -> anyhow::Result<Parsed> {
    match agentfile::load(file) {
        Ok(parsed) => {
            if !parsed.warnings.diagnostics.is_empty() {
                eprint!(
                    "{}",
                    parsed.warnings.render(crate::style::Style::stderr().color)
                );
            }
            Ok(parsed)
        }
        Err(LoadError::Invalid(report)) => {
            eprint!("{}", report.render(crate::style::Style::stderr().color));
            anyhow::bail!(
                "{} is invalid; run `ninetrix validate -f {}` for details",
                report.file,
                file.display()
            )
        }
        Err(e) => Err(e.into()),
    }
}

/// The pool's containers (all states), found by label.
pub(crate) async fn pool_containers(
    docker: &Docker,
    pool: Option<&str>,
) -> anyhow::Result<Vec<ContainerSummary>> {
    let label = match pool {
        Some(p) => format!("{}={p}", spec::POOL),
        None => spec::POOL.to_string(),
    };
    let filters: HashMap<&str, Vec<String>> = [("label", vec![label])].into_iter().collect();
    let options = ListContainersOptionsBuilder::default()
        .all(true)
        .filters(&filters)
        .build();
    docker
        .list_containers(Some(options))
        .await
        .context("cannot list containers")
}

/// A label of a listed container.
pub(crate) fn label<'a>(c: &'a ContainerSummary, key: &str) -> Option<&'a str> {
    c.labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
}

/// A listed container's name without the leading slash.
pub(crate) fn name(c: &ContainerSummary) -> String {
    c.names
        .as_ref()
        .and_then(|n| n.first())
        .map(|n| n.trim_start_matches('/').to_string())
        .unwrap_or_default()
}
