//! `ninetrix eval SUITE.yaml`: replays a suite's conversations — the cases its file names and
//! the threads marked into it in the console (`GET /v1/evals/{suite}`) — against the suite's
//! candidate, each through the same code as `ninetrix replay` ([`replay_case`]), checks each
//! case's `expect:` ([`suite::check`]), prints a table (case, turns, divergent, failed checks,
//! cost, PASS/FAIL), and stores the run with the suite (`POST /v1/evals/{suite}/runs`, keyed by a
//! digest of the suite file, the candidate and the replays, so a retry stores nothing new).
//!
//! Exit codes: 0 every case passed; 1 a case failed (or the eval could not run); 2 the suite file
//! is invalid (every problem with its `file:line:col`); 130 stopped by Ctrl-C (the same command
//! resumes every replay).

mod suite;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use ninetrix_agentfile::{AgentSpec, Agentfile};
use ninetrix_client::ErrorCode;
use ninetrix_proto::api::{EvalCaseResult, EvalRunRequest};
use sha2::{Digest as _, Sha256};
use tokio_util::sync::CancellationToken;

use crate::cli::pool_name;
use crate::commands::replay::{
    Case, EXIT_STOPPED, Ended, TurnRange, candidate, describe, hex, locate_thread,
    read_instructions, replay_case, resume_command, short_name, thread_api,
};
use crate::commands::reset::{ConversationArgs, Target};
use crate::ui::replay as render;
use suite::{Source, Suite};

/// Arguments of `ninetrix eval`.
#[derive(Debug, Args)]
pub struct EvalArgs {
    /// The suite file (YAML: `suite`, `agentfile`, `cases`, …; see docs/replay.md).
    #[arg(value_name = "SUITE.yaml")]
    pub suite: PathBuf,
    /// The pool, when the suite names none [default: the candidate agentfile's]
    #[arg(short, long, value_name = "POOL", value_parser = pool_name)]
    pub pool: Option<String>,
    /// Print the stored run (its cases, their results) as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// One case to run: its conversation, agent and turns, and its checks.
struct Planned {
    source: Source,
    agent: String,
    turns: TurnRange,
    expect: Vec<suite::Expect>,
    /// Where it comes from, for messages: `case at line 12`, `marked thread …`.
    origin: String,
}

/// A case's name for people: `agent`, `agent/session`, `agent-2`.
fn case_name(agent: &str, target: &Target) -> String {
    match target {
        Target::Replica(n) => format!("{agent}-{n}"),
        Target::Session(key) => format!("{agent}/{key}"),
    }
}

/// The agent of a case: its own, else the suite's, else the candidate's only agent.
fn case_agent(
    own: Option<&str>,
    suite: Option<&str>,
    af: &Agentfile,
    origin: &str,
) -> anyhow::Result<String> {
    if let Some(a) = own.or(suite) {
        return Ok(a.to_string());
    }
    match af.agents.as_slice() {
        [only] => Ok(only.name.clone()),
        agents => {
            let names: Vec<&str> = agents.iter().map(|a| a.name.as_str()).collect();
            anyhow::bail!(
                "{origin} names no agent and the candidate has {} ({}): set `agent:` in the \
                 suite or the case",
                names.len(),
                names.join(", ")
            )
        }
    }
}

/// Whether a case passed, with the threshold's failure added to its failed checks.
fn verdict(failed: &mut Vec<String>, divergent: u64, max_divergent_turns: Option<u64>) -> bool {
    if let Some(max) = max_divergent_turns
        && divergent > max
    {
        failed.insert(
            0,
            format!("{divergent} divergent turn(s), more than max_divergent_turns {max}"),
        );
        failed.truncate(suite::MAX_FAILED_CHECKS);
    }
    failed.is_empty()
}

/// The run's key: a digest of the suite file, the candidate and the replays.
fn run_key(suite_text: &str, candidate: &str, cases: &[EvalCaseResult]) -> String {
    let mut h = Sha256::new();
    h.update(suite_text.as_bytes());
    h.update(b"\n");
    h.update(candidate.as_bytes());
    for c in cases {
        h.update(format!("\n{}", c.replay).as_bytes());
    }
    format!("eval-{}", hex(&h.finalize()))
}

/// Runs `ninetrix eval`.
pub(crate) fn run(args: &EvalArgs) -> anyhow::Result<ExitCode> {
    let text = match std::fs::read_to_string(&args.suite) {
        Ok(t) => t,
        Err(e) => {
            eprintln!(
                "error: cannot read the suite file {}: {e}; pass the path of a suite (YAML)",
                args.suite.display()
            );
            return Ok(ExitCode::from(crate::EXIT_USAGE));
        }
    };
    let dir = args
        .suite
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let suite = match suite::parse_suite(&args.suite.display().to_string(), &dir, &text) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            return Ok(ExitCode::from(crate::EXIT_USAGE));
        }
    };
    super::runner::init_logging("warn");
    super::until_signal(|shutdown| async move { eval(args, &suite, &text, shutdown).await })?
}

async fn eval(
    args: &EvalArgs,
    suite: &Suite,
    text: &str,
    shutdown: CancellationToken,
) -> anyhow::Result<ExitCode> {
    let af = crate::pool::load(&suite.agentfile)?.agentfile;
    let instructions = suite
        .instructions
        .as_deref()
        .map(read_instructions)
        .transpose()?;
    let pool = suite.pool.clone().or_else(|| args.pool.clone());
    let mut planned = Vec::new();
    for c in &suite.cases {
        let origin = format!("the case at line {}", c.line);
        planned.push(Planned {
            agent: case_agent(c.agent.as_deref(), suite.agent.as_deref(), &af, &origin)?,
            source: c.source.clone(),
            turns: c.turns.unwrap_or(TurnRange {
                from: None,
                to: None,
            }),
            expect: c.expect.clone(),
            origin,
        });
    }
    let api = thread_api(&suite.agentfile, pool.as_deref()).await?;
    if suite.marked {
        planned.extend(marked_cases(&api, suite, &af).await?);
    }
    // One candidate per agent, checked before anything runs.
    let file_label = suite.agentfile.display().to_string();
    let mut specs: Vec<(String, AgentSpec)> = Vec::new();
    for p in &planned {
        if !specs.iter().any(|(a, _)| a == &p.agent) {
            let spec = candidate(
                &af,
                &file_label,
                &p.agent,
                suite.model.as_deref(),
                instructions.as_deref(),
            )
            .map_err(|e| anyhow::anyhow!("{}: {e}", p.origin))?;
            specs.push((p.agent.clone(), spec));
        }
    }
    let model = match (&suite.model, specs.as_slice()) {
        (Some(m), _) => m.clone(),
        (None, [(_, only)]) => only.runtime.model.clone(),
        (None, _) => "each agent's own".to_string(),
    };
    let described = describe(
        &short_name(&suite.agentfile),
        &model,
        suite.instructions.as_deref().map(short_name).as_deref(),
    );
    let mut results = Vec::new();
    for p in &planned {
        let spec = specs
            .iter()
            .find(|(a, _)| a == &p.agent)
            .map(|(_, s)| s)
            .ok_or_else(|| anyhow::anyhow!("no candidate for agent `{}`", p.agent))?;
        match run_case(p, suite, pool.as_deref(), spec, &described, &shutdown).await? {
            Some(result) => results.push(result),
            None => return Ok(ExitCode::from(EXIT_STOPPED)),
        }
    }
    let passed = results.iter().all(|c| c.passed);
    let request = EvalRunRequest {
        key: run_key(text, &described, &results),
        candidate: described.clone(),
        cases: results,
        passed,
    };
    let stored = api
        .client()
        .store_eval_run(&suite.name, &request)
        .await
        .map_err(|e| {
            api.explain(
                e,
                &format!("storing the run of eval suite `{}`", suite.name),
            )
        })?;
    if args.json {
        outln!("{}", serde_json::to_string(&request)?);
    } else {
        for line in render::eval_lines(&suite.name, &described, &request.cases) {
            outln!("{line}");
        }
    }
    eprintln!(
        "{} run {} of suite `{}` (the console shows its table)",
        if stored.duplicate {
            "already stored as"
        } else {
            "stored as"
        },
        stored.id,
        suite.name
    );
    Ok(if passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(crate::EXIT_FAILURE)
    })
}

/// The threads marked into the suite (in the console, or through the API), as cases without
/// checks; none when nobody marked any (the suite is unknown to the API).
async fn marked_cases(
    api: &crate::pool::local_api::Api,
    suite: &Suite,
    af: &Agentfile,
) -> anyhow::Result<Vec<Planned>> {
    let mut marked = Vec::new();
    match api.client().eval_suite(&suite.name).await {
        Ok(s) => {
            for m in s.members {
                let origin = format!("thread {} (marked into the suite)", m.thread);
                let agent = match m.labels.agent.as_deref() {
                    Some(a) => a.to_string(),
                    None => case_agent(None, suite.agent.as_deref(), af, &origin)?,
                };
                marked.push(Planned {
                    source: Source::Thread(m.thread),
                    agent,
                    turns: TurnRange {
                        from: m.from_turn,
                        to: m.to_turn,
                    },
                    expect: Vec::new(),
                    origin,
                });
            }
        }
        Err(e) if e.code() == Some(&ErrorCode::NotFound) => {}
        Err(e) => {
            return Err(api.explain(e, &format!("reading eval suite `{}`", suite.name)));
        }
    }
    Ok(marked)
}

/// Runs one planned case as a replay and checks it: its result, or `None` when Ctrl-C stopped it
/// (the line that resumes the eval is printed).
async fn run_case(
    p: &Planned,
    suite: &Suite,
    pool: Option<&str>,
    spec: &AgentSpec,
    described: &str,
    shutdown: &CancellationToken,
) -> anyhow::Result<Option<EvalCaseResult>> {
    let (session, replica, thread) = match &p.source {
        Source::Session(k) => (Some(k.clone()), None, None),
        Source::Replica(n) => (None, Some(*n), None),
        Source::Thread(t) => (None, None, Some(*t)),
    };
    let conversation = ConversationArgs {
        file: suite.agentfile.clone(),
        pool: pool.map(str::to_string),
        agent: p.agent.clone(),
        replica,
        session,
        thread,
    };
    let located = locate_thread(&conversation)
        .await
        .map_err(|e| e.context(format!("finding {}", p.origin)))?;
    let name = case_name(&p.agent, &located.target);
    eprintln!("case {name}:");
    let case = Case {
        located: &located,
        agent: &p.agent,
        whose: located.target.whose(&p.agent),
        turns: p.turns,
        spec,
        candidate: described,
        live_reads: suite.live_reads,
        fresh: false,
    };
    let report = match replay_case(&case, shutdown).await? {
        Ended::Done(r) => r,
        Ended::Refused(line) => anyhow::bail!("{} ({name}): {line}", p.origin),
        Ended::Stopped(replay) => {
            let argv: Vec<String> = std::env::args().collect();
            eprintln!(
                "stopped during case {name} (replay {replay} is kept); to resume the eval, \
                 run the same command:\n  {}",
                resume_command(&argv)
            );
            return Ok(None);
        }
    };
    let mut failed = suite::check(&report, &p.expect);
    let passed = verdict(
        &mut failed,
        report.divergent_turns,
        suite.max_divergent_turns,
    );
    Ok(Some(EvalCaseResult {
        thread: located.thread,
        name,
        replay: report.replay,
        turns: report.turns.len() as u64,
        divergent_turns: report.divergent_turns,
        failed_checks: failed,
        cost_usd: report.replayed.cost_usd,
        passed,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ninetrix_proto::ThreadId;

    #[test]
    fn cases_are_named_as_people_name_conversations() {
        assert_eq!(case_name("writer", &Target::Replica(2)), "writer-2");
        assert_eq!(
            case_name("writer", &Target::Session("support-42".into())),
            "writer/support-42"
        );
    }

    #[test]
    fn a_case_takes_its_agent_the_suites_or_the_only_one() {
        let two = ninetrix_agentfile::parse(
            "a.yaml",
            "agents:\n  a: { runtime: { provider: scripted, script: [x] } }\n  b: { runtime: { provider: scripted, script: [x] } }\n",
        )
        .unwrap()
        .agentfile;
        assert_eq!(case_agent(Some("b"), Some("a"), &two, "c").unwrap(), "b");
        assert_eq!(case_agent(None, Some("a"), &two, "c").unwrap(), "a");
        let e = case_agent(None, None, &two, "the case at line 4")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "the case at line 4 names no agent and the candidate has 2 (a, b): set `agent:` in \
             the suite or the case"
        );
        let one = ninetrix_agentfile::parse(
            "a.yaml",
            "agents:\n  solo: { runtime: { provider: scripted, script: [x] } }\n",
        )
        .unwrap()
        .agentfile;
        assert_eq!(case_agent(None, None, &one, "c").unwrap(), "solo");
    }

    #[test]
    fn a_case_over_the_divergence_threshold_fails_saying_so() {
        let mut failed = Vec::new();
        assert!(verdict(&mut failed, 2, None));
        assert!(verdict(&mut failed, 2, Some(2)));
        assert!(!verdict(&mut failed, 3, Some(2)));
        assert_eq!(
            failed,
            vec!["3 divergent turn(s), more than max_divergent_turns 2"]
        );
        let mut checks = vec!["turn 1: x".to_string()];
        assert!(!verdict(&mut checks, 0, Some(0)));
    }

    #[test]
    fn the_run_key_changes_with_the_suite_the_candidate_and_the_replays() {
        let case = |replay| EvalCaseResult {
            thread: ThreadId::from(uuid::Uuid::from_u128(1)),
            name: "w-1".into(),
            replay,
            turns: 1,
            divergent_turns: 0,
            failed_checks: Vec::new(),
            cost_usd: 0.0,
            passed: true,
        };
        let r1 = [case(ThreadId::from(uuid::Uuid::from_u128(2)))];
        let r2 = [case(ThreadId::from(uuid::Uuid::from_u128(3)))];
        let k = run_key("suite: s", "c", &r1);
        assert!(k.starts_with("eval-") && k.len() <= 128);
        assert_eq!(k, run_key("suite: s", "c", &r1));
        assert_ne!(k, run_key("suite: t", "c", &r1));
        assert_ne!(k, run_key("suite: s", "d", &r1));
        assert_ne!(k, run_key("suite: s", "c", &r2));
    }
}
