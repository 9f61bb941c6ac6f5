//! `ninetrix logs` for a pool on Swarm: each task's logs (Swarm keeps them per task, on whichever
//! node ran it), prefixed `agent-<slot>` as on one host, merged by time. A slot whose task was
//! replaced shows the old task's lines and then the new one's, with a marker; `--follow` attaches
//! to each new task as Swarm starts it.

use std::collections::{BTreeMap, HashSet};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::bail;
use bollard::Docker;
use bollard::models::{Task, TaskState};
use bollard::query_parameters::ListTasksOptions;
use futures_util::StreamExt as _;

use crate::deploy::logs::{
    COLORS, Line, LogsSettings, Reassembler, Target, marker, options, print_line,
};

/// A task of one of the pool's agent services.
struct PoolTask {
    task: Task,
    agent: String,
    durable: bool,
}

impl PoolTask {
    fn id(&self) -> String {
        self.task.id.clone().unwrap_or_default()
    }

    fn slot(&self) -> i64 {
        self.task.slot.unwrap_or(0)
    }

    fn state(&self) -> Option<TaskState> {
        self.task.status.as_ref().and_then(|s| s.state)
    }
}

/// The tasks of the pool's agent services (only `agent`'s when given), by agent, slot, age.
async fn pool_tasks(
    docker: &Docker,
    pool: &str,
    agent: Option<&str>,
) -> anyhow::Result<Vec<PoolTask>> {
    let mut out = Vec::new();
    for service in crate::swarm::observe::agent_services(docker, pool, agent).await? {
        for task in docker
            .list_tasks(Some(ListTasksOptions {
                filters: Some([("service".to_string(), vec![service.id.clone()])].into()),
            }))
            .await?
        {
            out.push(PoolTask {
                task,
                agent: service.agent.clone(),
                durable: service.durable,
            });
        }
    }
    out.sort_by_key(|t| {
        (
            t.agent.clone(),
            t.slot(),
            crate::swarm::observe::created_ns(&t.task),
        )
    });
    Ok(out)
}

/// One task's lines (what is there now, or followed until the task ends).
async fn read(
    docker: &Docker,
    task: &str,
    follow: bool,
    tail: &str,
    since: Option<i32>,
    mut each: impl FnMut(Line),
) {
    let mut stream = docker.task_logs(task, Some(options(follow, tail, since)));
    let mut r = Reassembler::default();
    while let Some(Ok(frame)) = stream.next().await {
        r.frame(frame).into_iter().for_each(&mut each);
    }
    r.finish().into_iter().for_each(each);
}

/// Runs `ninetrix logs` on a Swarm pool.
pub(crate) async fn run(
    docker: &Docker,
    pool: &str,
    args: &LogsSettings,
) -> anyhow::Result<ExitCode> {
    let tasks = pool_tasks(docker, pool, args.agent.as_deref()).await?;
    if tasks.is_empty() {
        bail!(
            "pool `{pool}` has no tasks on Swarm{}; run `ninetrix up --swarm`",
            args.agent
                .as_deref()
                .map(|a| format!(" for agent `{a}`"))
                .unwrap_or_default()
        );
    }
    let color = args.colored();
    // One colour per slot, kept by its later tasks.
    let mut colors: BTreeMap<(String, i64), u8> = BTreeMap::new();
    let target = |t: &PoolTask, colors: &mut BTreeMap<(String, i64), u8>| {
        let n = colors.len();
        let c = *colors
            .entry((t.agent.clone(), t.slot()))
            .or_insert(COLORS[n % COLORS.len()]);
        Target {
            id: t.id(),
            prefix: format!("{}-{}", t.agent, t.slot()),
            agent: t.agent.clone(),
            replica: t.slot().to_string(),
            durable: t.durable,
            color: color.then_some(c),
        }
    };
    let targets: Vec<Target> = tasks.iter().map(|t| target(t, &mut colors)).collect();
    let width = targets.iter().map(|t| t.prefix.len()).max().unwrap_or(0);
    let since = args.since_secs()?;
    let mut all: Vec<(usize, Line)> = Vec::new();
    for (i, t) in targets.iter().enumerate() {
        read(docker, &t.id, false, &args.tail, since, |l| {
            all.push((i, l))
        })
        .await;
    }
    all.sort_by_key(|(_, l)| l.time);
    for (i, l) in &all {
        print_line(&targets[*i], width, l, args);
    }
    // Replacements are not in the logs: said per slot after them.
    let mut per_slot: BTreeMap<(String, i64), Vec<&PoolTask>> = BTreeMap::new();
    for t in &tasks {
        per_slot
            .entry((t.agent.clone(), t.slot()))
            .or_default()
            .push(t);
    }
    for ((agent, slot), slot_tasks) in &per_slot {
        let failed = slot_tasks
            .iter()
            .filter(|t| matches!(t.state(), Some(TaskState::FAILED | TaskState::REJECTED)))
            .count();
        if failed > 0
            && let Some(t) = targets
                .iter()
                .find(|t| &t.agent == agent && t.replica == slot.to_string())
        {
            marker(
                t,
                width,
                &format!(
                    "{failed} task(s) of this slot failed; Swarm replaced them (same slot, same thread)"
                ),
                args,
            );
        }
    }
    if !args.follow {
        return Ok(ExitCode::SUCCESS);
    }
    // Follow: the running tasks now, and each task Swarm starts later.
    type Sender = tokio::sync::mpsc::UnboundedSender<(Target, Option<Line>)>;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(Target, Option<Line>)>();
    let mut attached: HashSet<String> = HashSet::new();
    let follow_task = |t: Target, tx: Sender, tail: &'static str| {
        let docker = docker.clone();
        tokio::spawn(async move {
            let sender = tx.clone();
            let source = t.clone();
            read(&docker, &t.id, true, tail, None, move |l| {
                let _ = sender.send((source.clone(), Some(l)));
            })
            .await;
            let _ = tx.send((t, None));
        });
    };
    for (t, pt) in targets.iter().zip(&tasks) {
        if pt.state() == Some(TaskState::RUNNING) {
            attached.insert(t.id.clone());
            follow_task(t.clone(), tx.clone(), "0");
        }
    }
    for t in &tasks {
        attached.insert(t.id());
    }
    let mut poll = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            got = rx.recv() => match got {
                Some((t, Some(line))) => print_line(&t, width, &line, args),
                Some((t, None)) => marker(&t, width, "task ended", args),
                None => return Ok(ExitCode::SUCCESS),
            },
            _ = poll.tick() => {
                for t in pool_tasks(docker, pool, args.agent.as_deref()).await.unwrap_or_default() {
                    if attached.insert(t.id()) {
                        let new = target(&t, &mut colors);
                        marker(&new, width, "new task in this slot", args);
                        follow_task(new, tx.clone(), "all");
                    }
                }
            }
        }
    }
}
