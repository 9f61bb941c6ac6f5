//! `ninetrix sessions`: a pool's sessions (many conversations per agent), each with its key, its
//! thread, the replica that owns it now (computed as the runners compute it: rendezvous hashing of
//! the key over the agent's replica count), its status and its last activity. Rendering is a pure
//! function of the records, the replica counts and the time ([`render`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use chrono::{DateTime, Utc};
use clap::Args;
use ninetrix_proto::api::ThreadSummary;
use ninetrix_proto::sessions;

use crate::backend::view::PoolView;
use crate::cli::pool_name;

/// Arguments of `ninetrix sessions`.
#[derive(Debug, Args)]
pub struct SessionsArgs {
    /// The agentfile (for the pool name).
    #[arg(short, long, default_value = "agentfile.yaml", value_name = "FILE")]
    pub file: PathBuf,
    /// The pool [default: the agentfile's, else the only pool]
    #[arg(short, long, value_name = "POOL", value_parser = pool_name)]
    pub pool: Option<String>,
    /// Only this agent's sessions.
    #[arg(long, value_name = "AGENT")]
    pub agent: Option<String>,
    /// The sessions' threads as a JSON array.
    #[arg(long)]
    pub json: bool,
}

/// Runs `ninetrix sessions`.
pub(crate) async fn run(args: &SessionsArgs) -> anyhow::Result<ExitCode> {
    let view = PoolView::open(&args.file, args.pool.as_deref()).await?;
    let mut all: Vec<ThreadSummary> = Vec::new();
    loop {
        let offset = u32::try_from(all.len()).unwrap_or(u32::MAX);
        let page = view
            .api
            .sessions(&view.name, args.agent.as_deref(), offset)
            .await?;
        let full = page.len() >= 1000;
        all.extend(page);
        if !full {
            break;
        }
    }
    let replicas: BTreeMap<String, u32> = view
        .state
        .agents
        .iter()
        .map(|(agent, r)| (agent.clone(), u32::try_from(r.len()).unwrap_or(1).max(1)))
        .collect();
    if args.json {
        outln!("{}", json(&all, &replicas)?);
        return Ok(ExitCode::SUCCESS);
    }
    if all.is_empty() {
        let whose = args
            .agent
            .as_deref()
            .map(|a| format!(" of agent {a}"))
            .unwrap_or_default();
        eprintln!(
            "no sessions{whose} in pool {} (`ninetrix invoke --agent A --session KEY -m …` opens one)",
            view.name
        );
        return Ok(ExitCode::SUCCESS);
    }
    crate::output::text(&render(&all, &replicas, Utc::now()));
    Ok(ExitCode::SUCCESS)
}

/// The replica that serves session `t` with the current replica counts (`agent-N`); `None` for an
/// agent the pool no longer runs.
fn owner_of(t: &ThreadSummary, replicas: &BTreeMap<String, u32>) -> Option<String> {
    let agent = t.labels.agent.as_deref()?;
    let key = t.labels.session.as_deref().unwrap_or_default();
    let n = replicas.get(agent)?;
    Some(format!("{agent}-{}", sessions::owner(key, *n)))
}

/// One session in `--json`: its thread summary and the OWNER the table shows.
#[derive(serde::Serialize)]
struct JsonRow<'a> {
    #[serde(flatten)]
    thread: &'a ThreadSummary,
    /// `agent-N`, or null for an agent the pool no longer runs.
    owner: Option<String>,
}

/// The sessions as a JSON array: each thread summary with its `owner`.
fn json(
    sessions: &[ThreadSummary],
    replicas: &BTreeMap<String, u32>,
) -> serde_json::Result<String> {
    let rows: Vec<JsonRow<'_>> = sessions
        .iter()
        .map(|thread| JsonRow {
            thread,
            owner: owner_of(thread, replicas),
        })
        .collect();
    serde_json::to_string_pretty(&rows)
}

/// The table: AGENT, SESSION (the key), THREAD, OWNER (`agent-N`, the replica that serves it with
/// the current replica counts; `-` for an agent the pool no longer runs), STATUS, SPENT (what its
/// model calls cost, ever, as the checkpoint API counts it), LAST ACTIVITY, and — when a session
/// is a fork (`ninetrix fork`) — FORKED FROM (`fork of <thread> @ turn N`).
pub(crate) fn render(
    sessions: &[ThreadSummary],
    replicas: &BTreeMap<String, u32>,
    now: DateTime<Utc>,
) -> String {
    let rows: Vec<[String; 8]> = sessions
        .iter()
        .map(|t| {
            let agent = t.labels.agent.clone().unwrap_or_else(|| "-".into());
            let key = t.labels.session.clone().unwrap_or_default();
            let owner = owner_of(t, replicas).unwrap_or_else(|| "-".into());
            let origin = t.forked_from.as_ref().map_or_else(
                || "-".to_string(),
                |f| format!("fork of {} @ turn {}", f.parent, f.at_turn),
            );
            [
                agent,
                one_line(&key),
                t.thread_id.to_string(),
                owner,
                t.status.as_str().to_string(),
                usd(t.spent_usd),
                format!("{} ago", ago(now - t.updated_at)),
                origin,
            ]
        })
        .collect();
    let header = [
        "AGENT",
        "SESSION",
        "THREAD",
        "OWNER",
        "STATUS",
        "SPENT",
        "LAST ACTIVITY",
        "FORKED FROM",
    ];
    if sessions.iter().any(|t| t.forked_from.is_some()) {
        return crate::ui::table::table(header, &rows);
    }
    // No fork: the column would be all dashes.
    let rows: Vec<[String; 7]> = rows
        .into_iter()
        .map(|r| std::array::from_fn(|i| r[i].clone()))
        .collect();
    crate::ui::table::table(std::array::from_fn(|i| header[i]), &rows)
}

/// A key on one line, at most 40 characters: a longer one loses its middle, so keys that share a
/// long prefix (`handoff:<caller thread>:<ledger key>`) still differ on screen.
fn one_line(key: &str) -> String {
    let flat: Vec<char> = key
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .collect();
    if flat.len() > 40 {
        let head: String = flat[..19].iter().collect();
        let tail: String = flat[flat.len() - 20..].iter().collect();
        format!("{head}…{tail}")
    } else {
        flat.into_iter().collect()
    }
}

/// `$0.0000` … `$0.0123` (cents and below keep four decimals), `$12.35`.
fn usd(amount: f64) -> String {
    if amount < 1.0 {
        format!("${amount:.4}")
    } else {
        format!("${amount:.2}")
    }
}

/// `45s`, `12m`, `5h`, `3d`.
fn ago(d: chrono::TimeDelta) -> String {
    match d.num_seconds().max(0) {
        s if s < 60 => format!("{s}s"),
        s if s < 3_600 => format!("{}m", s / 60),
        s if s < 86_400 => format!("{}h", s / 3_600),
        s => format!("{}d", s / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use ninetrix_proto::ThreadId;
    use ninetrix_proto::api::{ThreadLabels, ThreadStatus};

    use super::*;

    fn session(agent: &str, key: &str, status: ThreadStatus, idle_secs: i64) -> ThreadSummary {
        let now: DateTime<Utc> = "2026-11-24T12:00:00Z".parse().unwrap();
        ThreadSummary {
            thread_id: ThreadId::from(uuid::Uuid::from_u128(
                0x0193_6f5e_0000_7000_8000_0000_0000_0000 + key.len() as u128,
            )),
            labels: ThreadLabels {
                pool: Some("shop".into()),
                agent: Some(agent.into()),
                replica: None,
                session: Some(key.into()),
            },
            status,
            epoch: 1,
            boot_count: 1,
            version: 2,
            history_len: 2,
            inbox_seq: 1,
            event_seq: 3,
            created_at: now,
            updated_at: now - chrono::Duration::seconds(idle_secs),
            context: None,
            spent_usd: 0.0,
            forked_from: None,
            replay_of: None,
        }
    }

    #[test]
    fn each_session_shows_its_owner_status_and_idle_time() {
        let now: DateTime<Utc> = "2026-11-24T12:00:00Z".parse().unwrap();
        let replicas = BTreeMap::from([("bot".to_string(), 3)]);
        let rows = [
            session("bot", "alice", ThreadStatus::Idle, 90),
            session(
                "bot",
                "a very long key with\nline breaks that goes on and on",
                ThreadStatus::InTurn,
                5,
            ),
            session("gone", "bob", ThreadStatus::Waiting, 7200),
        ];
        let mut rows = rows;
        rows[0].spent_usd = 0.01234;
        rows[2].spent_usd = 12.345;
        let text = render(&rows, &replicas, now);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("AGENT  SESSION"), "{text}");
        assert!(
            lines[1].contains(&format!("bot-{}", sessions::owner("alice", 3)))
                && lines[1].contains("idle")
                && lines[1].contains("$0.0123")
                && lines[1].ends_with("1m ago"),
            "{text}"
        );
        assert!(
            lines[2].contains("a very long key wit… that goes on and on"),
            "{text}"
        );
        assert!(
            lines[3].contains("gone")
                && lines[3].contains(" -  ")
                && lines[3].contains("$12.35")
                && lines[3].ends_with("2h ago"),
            "{text}"
        );
    }

    #[test]
    fn a_fork_shows_where_it_came_from_and_no_fork_no_column() {
        let now: DateTime<Utc> = "2026-11-24T12:00:00Z".parse().unwrap();
        let replicas = BTreeMap::from([("bot".to_string(), 1)]);
        let mut rows = [
            session("bot", "alice", ThreadStatus::Idle, 90),
            session("bot", "fork-0193abcd", ThreadStatus::Idle, 30),
        ];
        assert!(!render(&rows, &replicas, now).contains("FORKED FROM"));
        rows[1].forked_from = Some(ninetrix_proto::api::ForkOrigin {
            parent: rows[0].thread_id,
            at_turn: 3,
        });
        let text = render(&rows, &replicas, now);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].ends_with("FORKED FROM"), "{text}");
        assert!(lines[1].ends_with("ago         -"), "{text}");
        assert!(
            lines[2].ends_with(&format!("fork of {} @ turn 3", rows[0].thread_id)),
            "{text}"
        );
    }

    #[test]
    fn handoff_keys_keep_what_tells_them_apart() {
        let caller = "0193a000-0000-7000-8000-000000000001";
        let a = format!("handoff:{caller}:9f2c1a7b{}", "0".repeat(48) + "11112222");
        let b = format!("handoff:{caller}:9f2c1a7b{}", "0".repeat(48) + "33334444");
        assert_ne!(one_line(&a), one_line(&b));
        assert_eq!(one_line(&a).chars().count(), 40);
        assert!(
            one_line(&a).starts_with("handoff:0193a000-00"),
            "{}",
            one_line(&a)
        );
        assert!(one_line(&a).ends_with("11112222"));
    }

    #[test]
    fn the_json_carries_the_owner_the_table_shows() {
        let replicas = BTreeMap::from([("bot".to_string(), 3)]);
        let rows = [
            session("bot", "alice", ThreadStatus::Idle, 90),
            session("gone", "bob", ThreadStatus::Idle, 90),
        ];
        let v: serde_json::Value = serde_json::from_str(&json(&rows, &replicas).unwrap()).unwrap();
        assert_eq!(
            v[0]["owner"],
            format!("bot-{}", sessions::owner("alice", 3)).as_str()
        );
        assert_eq!(
            v[0]["thread_id"],
            rows[0].thread_id.to_string().as_str(),
            "the summary is kept whole"
        );
        assert!(v[1]["owner"].is_null());
        assert_eq!(v[0]["spent_usd"], 0.0, "the spend is in the summary");
    }
}
