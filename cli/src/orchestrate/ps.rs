//! `ninetrix ps`: the pools' containers, found by label (so it works from any directory), with
//! Docker's status, restarts, exit code, OOM, and "gave up" for a durable agent that used its
//! whole restart budget.

use std::process::ExitCode;

use serde_json::json;

use super::{label, name, pool_containers, spec};
use crate::cli::PsArgs;

/// Runs `ninetrix ps`.
pub(crate) async fn run(args: &PsArgs) -> anyhow::Result<ExitCode> {
    let docker = super::docker::connect().await?;
    let mut rows = Vec::new();
    for c in pool_containers(&docker, args.pool.as_deref()).await? {
        let id = c.id.clone().unwrap_or_default();
        let info = docker.inspect_container(&id, None).await?;
        let st = info.state.clone().unwrap_or_default();
        let running = st.running.unwrap_or(false);
        let restarting = st.restarting.unwrap_or(false);
        if !args.all && !running && !restarting {
            continue;
        }
        let durable = label(&c, spec::DURABLE) == Some("true");
        let restarts = info.restart_count.unwrap_or(0);
        let gave_up = durable && !running && !restarting && restarts >= spec::MAX_RESTARTS;
        let status = c.status.clone().unwrap_or_default();
        rows.push(json!({
            "pool": label(&c, spec::POOL),
            "agent": label(&c, spec::AGENT),
            "replica": label(&c, spec::REPLICA).and_then(|r| r.parse::<u32>().ok()),
            "container": name(&c),
            "thread_id": label(&c, spec::THREAD),
            "state": st.status.map(|s| s.to_string()),
            "status": if gave_up { format!("gave up after {restarts} restarts ({status})") } else { status },
            "restarts": restarts,
            "exit_code": st.exit_code,
            "oom_killed": st.oom_killed.unwrap_or(false),
            "gave_up": gave_up,
            "durable": durable,
        }));
    }
    rows.sort_by_key(|r| {
        (
            r["pool"].to_string(),
            r["agent"].to_string(),
            r["replica"].as_u64(),
        )
    });
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
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
    let table: Vec<[String; 7]> = rows
        .iter()
        .map(|r| {
            let exit = match (r["oom_killed"].as_bool(), r["exit_code"].as_i64()) {
                (Some(true), Some(code)) => format!("{code} (OOM)"),
                (_, Some(code)) if r["state"] != "running" => code.to_string(),
                _ => "-".into(),
            };
            [
                r["container"].as_str().unwrap_or("").to_string(),
                r["agent"].as_str().unwrap_or("").to_string(),
                r["replica"].to_string(),
                r["thread_id"].as_str().unwrap_or("").to_string(),
                r["status"].as_str().unwrap_or("").to_string(),
                r["restarts"].to_string(),
                exit,
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &table {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &[String]| {
        cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = widths[i]))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    println!("{}", line(&header.map(String::from)));
    for row in &table {
        println!("{}", line(row));
    }
    Ok(ExitCode::SUCCESS)
}
