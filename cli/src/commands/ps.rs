//! `ninetrix ps`: the pools' containers, found by label (so it works from any directory), with
//! Docker's status, restarts, exit code, OOM, and "gave up" for a durable agent that used its
//! whole restart budget.

use std::process::ExitCode;

use clap::Args;
use serde::Serialize;

use crate::cli::pool_name;
use crate::docker::{label, name, pool_containers};
use crate::pool::spec::{self, Liveness};

/// Arguments of `ninetrix ps`.
#[derive(Debug, Args)]
pub struct PsArgs {
    /// Only this pool.
    #[arg(short, long, value_name = "POOL", value_parser = pool_name)]
    pub pool: Option<String>,
    /// Include stopped containers.
    #[arg(short, long)]
    pub all: bool,
    /// As JSON.
    #[arg(long)]
    pub json: bool,
}

/// One container as `ps` shows it (also its `--json` form).
#[derive(Debug, Serialize)]
struct Row {
    pool: Option<String>,
    agent: Option<String>,
    replica: Option<u32>,
    container: String,
    thread_id: Option<String>,
    state: Option<String>,
    status: String,
    restarts: i64,
    exit_code: Option<i64>,
    oom_killed: bool,
    gave_up: bool,
    durable: bool,
}

impl Row {
    /// The EXIT column: the code (with OOM) once the container stopped, else `-`.
    fn exit(&self) -> String {
        match (self.oom_killed, self.exit_code) {
            (true, Some(code)) => format!("{code} (OOM)"),
            (_, Some(code)) if self.state.as_deref() != Some("running") => code.to_string(),
            _ => "-".into(),
        }
    }

    fn cells(&self) -> [String; 7] {
        [
            self.container.clone(),
            self.agent.clone().unwrap_or_default(),
            self.replica
                .map_or_else(|| "null".into(), |r| r.to_string()),
            self.thread_id.clone().unwrap_or_default(),
            self.status.clone(),
            self.restarts.to_string(),
            self.exit(),
        ]
    }
}

/// Runs `ninetrix ps`.
pub(crate) async fn run(args: &PsArgs) -> anyhow::Result<ExitCode> {
    let docker = crate::docker::connect().await?;
    let mut rows = Vec::new();
    for c in pool_containers(&docker, args.pool.as_deref()).await? {
        let id = c.id.clone().unwrap_or_default();
        let info = docker.inspect_container(&id, None).await?;
        let live = Liveness::of(&info);
        if !args.all && !live.running && !live.restarting {
            continue;
        }
        let st = info.state.clone().unwrap_or_default();
        let durable = label(&c, spec::DURABLE) == Some("true");
        let gave_up = live.gave_up(durable);
        let status = c.status.clone().unwrap_or_default();
        let owned = |key| label(&c, key).map(str::to_string);
        rows.push(Row {
            pool: owned(spec::POOL),
            agent: owned(spec::AGENT),
            replica: label(&c, spec::REPLICA).and_then(|r| r.parse().ok()),
            container: name(&c),
            thread_id: owned(spec::THREAD),
            state: st.status.map(|s| s.to_string()),
            status: if gave_up {
                format!("gave up after {} restarts ({status})", live.restarts)
            } else {
                status
            },
            restarts: live.restarts,
            exit_code: st.exit_code,
            oom_killed: st.oom_killed.unwrap_or(false),
            gave_up,
            durable,
        });
    }
    rows.sort_by(|a, b| (&a.pool, &a.agent, a.replica).cmp(&(&b.pool, &b.agent, b.replica)));
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(ExitCode::SUCCESS);
    }
    let header = [
        "CONTAINER",
        "AGENT",
        "REPLICA",
        "THREAD",
        "STATUS",
        "RESTARTS",
        "EXIT",
    ];
    let cells: Vec<[String; 7]> = rows.iter().map(Row::cells).collect();
    crate::output::text(&crate::ui::table::table(header, &cells));
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_show_only_once_stopped_with_oom() {
        let row = |state: &str, exit: Option<i64>, oom: bool| Row {
            pool: Some("p".into()),
            agent: Some("writer".into()),
            replica: Some(1),
            container: "ninetrix-p-writer-1".into(),
            thread_id: Some("t".into()),
            state: Some(state.into()),
            status: "Up".into(),
            restarts: 0,
            exit_code: exit,
            oom_killed: oom,
            gave_up: false,
            durable: true,
        };
        assert_eq!(row("running", Some(0), false).exit(), "-");
        assert_eq!(row("exited", Some(2), false).exit(), "2");
        assert_eq!(row("exited", Some(137), true).exit(), "137 (OOM)");
    }
}
