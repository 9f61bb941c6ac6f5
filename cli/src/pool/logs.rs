//! `ninetrix logs` of a pool on one host: every container of the pool, Compose-style (`agent-n |
//! line`), stdout and stderr, lines reassembled from Docker's frames, merged by time; `--follow`
//! re-attaches across restarts without repeating lines and prints restart markers. Background
//! jobs are left out, except the one `--agent A --job NAME` names (pool/jobs.rs picks it).

use std::process::ExitCode;
use std::time::Duration;

use anyhow::bail;
use bollard::Docker;
use bollard::container::LogOutput;
use bollard::query_parameters::LogsOptionsBuilder;
use chrono::{DateTime, Utc};
use futures_util::StreamExt as _;

use crate::deploy::logs::{
    COLORS, Line, LogsSettings, Reassembler, Target, marker, print_line, read,
};
use crate::docker::label;
use crate::pool::engine::pool_containers;
use crate::pool::{jobs, spec};

/// Prints (and with `follow`, follows) the logs of the pool's containers.
pub(crate) async fn run(
    docker: &Docker,
    pool: &str,
    args: &LogsSettings,
) -> anyhow::Result<ExitCode> {
    let docker = docker.clone();
    let mut containers = pool_containers(&docker, Some(pool)).await?;
    match (&args.job, &args.agent) {
        (Some(wanted), Some(agent)) => {
            let listed: Vec<jobs::Listed> =
                containers.iter().filter_map(jobs::Listed::of).collect();
            let (job, note) = jobs::pick(&listed, pool, agent, wanted)?;
            if let Some(note) = note {
                eprintln!("note: {note}");
            }
            let id = job.container_id.clone();
            containers.retain(|c| c.id.as_deref() == Some(id.as_str()));
        }
        _ => {
            // Jobs' output is the job's (`--job`); the agents' logs are the runners'.
            containers.retain(|c| {
                !jobs::is_job(c)
                    && args
                        .agent
                        .as_deref()
                        .is_none_or(|a| label(c, crate::objects::AGENT) == Some(a))
            });
        }
    }
    if containers.is_empty() {
        bail!(
            "pool `{pool}` has no containers{}; run `ninetrix up`",
            args.agent
                .as_deref()
                .map(|a| format!(" for agent `{a}`"))
                .unwrap_or_default()
        );
    }
    containers.sort_by_key(|c| {
        (
            label(c, crate::objects::AGENT).unwrap_or("").to_string(),
            label(c, crate::objects::REPLICA).and_then(|r| r.parse::<u32>().ok()),
        )
    });
    let color = args.colored();
    let targets: Vec<Target> = containers
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let agent = label(c, crate::objects::AGENT).unwrap_or("?").to_string();
            let replica = label(c, crate::objects::REPLICA).unwrap_or("?").to_string();
            // An MCP sidecar has no replica: it is `mcp:<server>`; the job broker is
            // `jobs:broker`, a job `job:<name>`.
            let prefix = if crate::pool::sidecar::is_sidecar(c) {
                agent.clone()
            } else if jobs::is_broker(c) {
                jobs::BROKER_SHOWN.to_string()
            } else if let Some(job) = jobs::Listed::of(c) {
                job.shown_name()
            } else {
                format!("{agent}-{replica}")
            };
            Target {
                id: c.id.clone().unwrap_or_default(),
                prefix,
                agent,
                replica,
                durable: label(c, crate::objects::DURABLE) == Some("true"),
                color: color.then_some(COLORS[i % COLORS.len()]),
            }
        })
        .collect();
    let width = targets.iter().map(|t| t.prefix.len()).max().unwrap_or(0);
    let since = args.since_secs()?;
    let tail = args.tail.clone();
    // What is there now, merged by time.
    let mut all: Vec<(usize, Line)> = Vec::new();
    for (i, t) in targets.iter().enumerate() {
        all.extend(
            read(&docker, &t.id, false, &tail, since)
                .await
                .into_iter()
                .map(|l| (i, l)),
        );
    }
    all.sort_by_key(|(_, l)| l.time);
    let mut last: Vec<Option<DateTime<Utc>>> = vec![None; targets.len()];
    for (i, l) in &all {
        last[*i] = Some(l.time);
        print_line(&targets[*i], width, l, args);
    }
    if !args.follow {
        // Restarts are not in the log stream: say so after it.
        for t in &targets {
            if let Ok(info) = docker.inspect_container(&t.id, None).await {
                let restarts = info.restart_count.unwrap_or(0);
                if restarts > 0 {
                    let live = spec::Liveness::of(&info);
                    let code = live.exit_code.unwrap_or(0);
                    let text = if live.gave_up(t.durable) {
                        format!("restarted {restarts} times, then gave up (exit code {code})")
                    } else {
                        format!("restarted {restarts} time(s) after crashes")
                    };
                    marker(t, width, &text, args);
                }
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    // Follow each container across restarts.
    let tasks = targets
        .iter()
        .enumerate()
        .map(|(i, t)| follow(&docker, t, last[i], width, args));
    futures_util::future::join_all(tasks).await;
    Ok(ExitCode::SUCCESS)
}

/// Follows one container's log across its restarts, from after `seen` (the last line printed),
/// until it exits for good: a restart is marked and the log re-attached after the last line
/// seen; a final exit is marked with its code (and "gave up" when the restart budget is spent).
async fn follow(
    docker: &Docker,
    t: &Target,
    mut seen: Option<DateTime<Utc>>,
    width: usize,
    args: &LogsSettings,
) {
    loop {
        let since = seen.map(|s| s.timestamp() as i32);
        let opts = LogsOptionsBuilder::default()
            .stdout(true)
            .stderr(true)
            .timestamps(true)
            .follow(true)
            .tail(if seen.is_some() { "all" } else { "0" });
        let opts = match since {
            Some(s) => opts.since(s),
            None => opts,
        };
        let mut stream = docker.logs(&t.id, Some(opts.build()));
        let mut r = Reassembler::default();
        while let Some(Ok(frame)) = stream.next().await {
            let lines = match frame {
                LogOutput::StdOut { message } | LogOutput::Console { message } => {
                    r.push("stdout", &message)
                }
                LogOutput::StdErr { message } => r.push("stderr", &message),
                _ => Vec::new(),
            };
            for l in lines {
                if seen.is_some_and(|s| l.time <= s) {
                    continue;
                }
                seen = Some(l.time);
                print_line(t, width, &l, args);
            }
        }
        let Ok(info) = docker.inspect_container(&t.id, None).await else {
            return;
        };
        let live = spec::Liveness::of(&info);
        let code = live.exit_code.unwrap_or(0);
        let restarts = live.restarts;
        if live.restarting || live.running {
            marker(
                t,
                width,
                &format!("exited with code {code} (restarting)"),
                args,
            );
            // Wait for the restarted process, then re-attach after the last line seen.
            for _ in 0..600 {
                let running = docker
                    .inspect_container(&t.id, None)
                    .await
                    .ok()
                    .and_then(|i| i.state)
                    .is_some_and(|s| s.running.unwrap_or(false) && !s.restarting.unwrap_or(false));
                if running {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            continue;
        }
        if live.gave_up(t.durable) {
            marker(
                t,
                width,
                &format!("exited with code {code}; gave up after {restarts} restarts"),
                args,
            );
        } else {
            marker(t, width, &format!("exited with code {code}"), args);
        }
        return;
    }
}
