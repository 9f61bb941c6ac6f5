//! How `ninetrix replay` and `ninetrix eval` put a replay into words: the progress line of each
//! replayed turn, each turn side by side with its recording (input, calls, answer, cost), the
//! summary table, and the eval's table of cases. Pure functions from `ninetrix_proto::replay`'s
//! report to lines; the commands print them.

use ninetrix_proto::api::EvalCaseResult;
use ninetrix_proto::replay::{
    CallMatch, CallPair, DiffLine, ReplayReport, TurnComparison, TurnCost, preview,
};

use crate::ui::table::table;

/// Most characters of an argument list a calls table shows.
const ARGS_PREVIEW: usize = 48;
/// Most lines of an answer's diff shown; the rest are counted.
const MAX_DIFF_SHOWN: usize = 40;

/// `$0.0123` (four decimals: a turn often costs a fraction of a cent).
pub(crate) fn dollars(v: f64) -> String {
    format!("${v:.4}")
}

/// `1.2s`, `850ms`, `—` when not recorded.
pub(crate) fn latency(ms: Option<u64>) -> String {
    match ms {
        None => "—".into(),
        Some(ms) if ms < 1_000 => format!("{ms}ms"),
        Some(ms) => format!("{:.1}s", ms as f64 / 1_000.0),
    }
}

/// `120+45` tokens (input + output).
fn tokens(c: &TurnCost) -> String {
    format!("{}+{}", c.input_tokens, c.output_tokens)
}

/// An argument list on one line, cut.
fn args(v: Option<&serde_json::Value>) -> String {
    match v {
        None => "—".into(),
        Some(v) => preview(
            &serde_json::to_string(v).unwrap_or_else(|_| "?".into()),
            ARGS_PREVIEW,
        ),
    }
}

/// What the replay did with a call: its recorded result, run live, not run, or (missing) not
/// made.
fn answered(c: &CallPair) -> &'static str {
    match c.verdict {
        CallMatch::Same => "recorded result",
        CallMatch::Missing => "not made",
        CallMatch::Different | CallMatch::New if c.ran => "ran live",
        CallMatch::Different | CallMatch::New => "not run",
    }
}

/// The line `replay` prints on stderr as a replayed turn ends: `turn 4 (2/5): diverged — call 2:
/// `file_write` with other arguments`.
pub(crate) fn progress_line(done: usize, of: usize, t: &TurnComparison) -> String {
    let what = match (&t.divergence, t.divergent) {
        (Some(d), true) => format!("diverged — {d}"),
        _ => "same calls and answer".to_string(),
    };
    let cost = t
        .replayed
        .as_ref()
        .map(|c| format!(" ({}, {})", dollars(c.cost_usd), latency(c.latency_ms)))
        .unwrap_or_default();
    format!("  turn {} ({done}/{of}): {what}{cost}", t.turn)
}

/// One turn side by side with its recording: a heading (the recorded turn, the replay's, and
/// the first divergence), the input, the calls table, the answer (identical, or its line diff),
/// and tokens, cost and latency recorded → candidate.
pub(crate) fn turn_lines(t: &TurnComparison) -> Vec<String> {
    let heading = match t.replay_turn {
        Some(r) if r == t.turn => format!("── turn {}", t.turn),
        Some(r) => format!("── turn {} (replayed as turn {r})", t.turn),
        None => format!("── turn {}", t.turn),
    };
    let verdict = match (&t.divergence, t.divergent) {
        (Some(d), true) => format!("DIVERGENT: {d}"),
        _ => "same".to_string(),
    };
    let mut lines = vec![
        format!("{heading} · {verdict}"),
        format!("  input: {}", t.input),
    ];
    if t.replay_turn.is_none() {
        lines.push(
            "  not replayed (the replay stopped before it; re-run the command to resume)".into(),
        );
        return lines;
    }
    if t.calls.is_empty() {
        lines.push("  calls: none on either side".into());
    } else {
        let rows: Vec<[String; 5]> = t
            .calls
            .iter()
            .map(|c| {
                [
                    c.verdict.as_str().to_string(),
                    c.tool.clone(),
                    args(c.recorded_args.as_ref()),
                    args(c.replayed_args.as_ref()),
                    answered(c).to_string(),
                ]
            })
            .collect();
        lines.push("  calls:".into());
        let text = table(["CALL", "TOOL", "RECORDED", "CANDIDATE", "REPLAY"], &rows);
        lines.extend(text.lines().map(|l| format!("    {l}")));
    }
    if t.answer_identical {
        lines.push(format!(
            "  answer: identical ({})",
            preview(&t.replayed_answer, 80)
        ));
    } else {
        lines.push("  answer: differs (- recorded, + candidate)".into());
        for d in t.answer_diff.iter().take(MAX_DIFF_SHOWN) {
            lines.push(match d {
                DiffLine::Same(s) => format!("      {s}"),
                DiffLine::Removed(s) => format!("    - {s}"),
                DiffLine::Added(s) => format!("    + {s}"),
            });
        }
        if t.answer_diff.len() > MAX_DIFF_SHOWN {
            lines.push(format!(
                "    … {} more line(s) (--json has the whole diff)",
                t.answer_diff.len() - MAX_DIFF_SHOWN
            ));
        }
    }
    let r = &t.recorded;
    let c = t.replayed.clone().unwrap_or_default();
    lines.push(format!(
        "  tokens {} → {} · cost {} → {} · latency {} → {}",
        tokens(r),
        tokens(&c),
        dollars(r.cost_usd),
        dollars(c.cost_usd),
        latency(r.latency_ms),
        latency(c.latency_ms)
    ));
    lines
}

/// The whole report: a heading, each turn ([`turn_lines`]), the summary (turns, divergent turns
/// and the first divergence, calls not run and run live, a table of tokens, cost and latency on
/// both sides), and how to see the replay's thread.
pub(crate) fn report_lines(whose: &str, r: &ReplayReport) -> Vec<String> {
    let mut lines = vec![format!(
        "replay of {whose} (thread {}) against {}{}",
        r.source,
        r.candidate,
        if r.live_reads { " · live reads" } else { "" }
    )];
    for t in &r.turns {
        lines.push(String::new());
        lines.extend(turn_lines(t));
    }
    lines.push(String::new());
    lines.extend(summary_lines(r));
    lines
}

/// The summary of a report (the end of [`report_lines`]).
pub(crate) fn summary_lines(r: &ReplayReport) -> Vec<String> {
    let replayed = r.turns.iter().filter(|t| t.replay_turn.is_some()).count();
    let mut lines = vec![format!(
        "summary: {} turn(s), {replayed} replayed, {} divergent{}",
        r.turns.len(),
        r.divergent_turns,
        match &r.first_divergence {
            Some(f) => format!(" (first: turn {}, {})", f.turn, f.what),
            None => String::new(),
        }
    )];
    lines.push(format!(
        "calls: {} not run (the replay answered them with an error), {} run live{}",
        r.calls_not_run,
        r.calls_run,
        if r.calls_run > 0 { " (reads only)" } else { "" }
    ));
    let side = |c: &TurnCost| {
        [
            c.input_tokens.to_string(),
            c.output_tokens.to_string(),
            dollars(c.cost_usd),
            latency(c.latency_ms),
        ]
    };
    let (a, b) = (side(&r.recorded), side(&r.replayed));
    let rows = [
        ["input tokens".to_string(), a[0].clone(), b[0].clone()],
        ["output tokens".to_string(), a[1].clone(), b[1].clone()],
        ["cost".to_string(), a[2].clone(), b[2].clone()],
        ["latency".to_string(), a[3].clone(), b[3].clone()],
    ];
    lines.extend(
        table(["", "RECORDED", "CANDIDATE"], &rows)
            .lines()
            .map(str::to_string),
    );
    lines.push(format!(
        "replay thread {}: `ninetrix trace --thread-id {}` shows what the candidate did",
        r.replay, r.replay
    ));
    lines
}

/// The eval's table: one row per case (its name, turns, divergent turns, failed checks, cost and
/// PASS/FAIL), then each failed check on its own line under the case's name.
pub(crate) fn eval_lines(suite: &str, candidate: &str, cases: &[EvalCaseResult]) -> Vec<String> {
    let mut lines = vec![format!("eval {suite} against {candidate}")];
    if cases.is_empty() {
        lines.push("no case: the suite names none and no thread is marked into it".into());
        return lines;
    }
    let rows: Vec<[String; 6]> = cases
        .iter()
        .map(|c| {
            [
                c.name.clone(),
                c.turns.to_string(),
                c.divergent_turns.to_string(),
                c.failed_checks.len().to_string(),
                dollars(c.cost_usd),
                if c.passed { "PASS" } else { "FAIL" }.to_string(),
            ]
        })
        .collect();
    lines.extend(
        table(
            [
                "CASE",
                "TURNS",
                "DIVERGENT",
                "FAILED CHECKS",
                "COST",
                "RESULT",
            ],
            &rows,
        )
        .lines()
        .map(str::to_string),
    );
    for c in cases.iter().filter(|c| !c.failed_checks.is_empty()) {
        lines.push(format!("{}:", c.name));
        lines.extend(c.failed_checks.iter().map(|f| format!("  ✗ {f}")));
    }
    let passed = cases.iter().filter(|c| c.passed).count();
    lines.push(format!(
        "{passed}/{} case(s) passed: {}",
        cases.len(),
        if passed == cases.len() {
            "PASS"
        } else {
            "FAIL"
        }
    ));
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use ninetrix_proto::ThreadId;
    use ninetrix_proto::api::{RecordedCall, RecordedTurn, Usage};
    use ninetrix_proto::effects::Effect;
    use ninetrix_proto::replay::report;
    use serde_json::json;

    fn call(name: &str, args: serde_json::Value, effect: Option<Effect>) -> RecordedCall {
        RecordedCall {
            name: name.into(),
            args,
            result: "ok".into(),
            is_error: false,
            effect,
            person: None,
        }
    }

    fn turn(n: u64, calls: Vec<RecordedCall>, answer: &str, cost: f64) -> RecordedTurn {
        RecordedTurn {
            turn_seq: n,
            live: true,
            input: format!("please do step {n}"),
            messages: Vec::new(),
            calls,
            answer: answer.into(),
            ok: true,
            usage: Usage {
                input_tokens: 100,
                output_tokens: 20,
                cost_usd: cost,
            },
            latency_ms: Some(1_500),
            model: None,
        }
    }

    fn sample() -> ReplayReport {
        let read = |p: &str| call("file_read", json!({"path": p}), Some(Effect::Read));
        let write = |p: &str| call("file_write", json!({"path": p}), Some(Effect::Write));
        let recorded = vec![
            turn(3, vec![read("a")], "done", 0.01),
            turn(4, vec![read("a"), write("b")], "saved b\nbye", 0.02),
            turn(5, vec![], "ok", 0.01),
        ];
        // A live read: the replay's own ledger has it.
        let live = call("file_read", json!({"path": "z"}), Some(Effect::Read));
        let replayed = vec![
            turn(
                3,
                vec![call("file_read", json!({"path": "a"}), None)],
                "done",
                0.005,
            ),
            turn(
                4,
                vec![
                    call("file_read", json!({"path": "a"}), None),
                    call("file_write", json!({"path": "c"}), None),
                    live,
                ],
                "saved c\nbye",
                0.006,
            ),
        ];
        let id = |n| ThreadId::from(uuid::Uuid::from_u128(n));
        report(
            id(1),
            id(2),
            "agentfile candidate.yaml · model gpt-5",
            true,
            &recorded,
            &replayed,
        )
    }

    #[test]
    fn a_same_turn_says_so_with_its_calls_answer_and_costs_side_by_side() {
        let r = sample();
        let lines = turn_lines(&r.turns[0]);
        assert_eq!(lines[0], "── turn 3 · same");
        assert_eq!(lines[1], "  input: please do step 3");
        assert_eq!(lines[2], "  calls:");
        assert_eq!(
            lines[3],
            "    CALL  TOOL       RECORDED      CANDIDATE     REPLAY"
        );
        assert_eq!(
            lines[4],
            "    same  file_read  {\"path\":\"a\"}  {\"path\":\"a\"}  recorded result"
        );
        assert_eq!(lines[5], "  answer: identical (done)");
        assert_eq!(
            lines[6],
            "  tokens 100+20 → 100+20 · cost $0.0100 → $0.0050 · latency 1.5s → 1.5s"
        );
    }

    #[test]
    fn a_divergent_turn_marks_calls_not_run_and_live_and_diffs_the_answer() {
        let r = sample();
        let lines = turn_lines(&r.turns[1]);
        assert_eq!(
            lines[0],
            "── turn 4 · DIVERGENT: call 2: `file_write` with other arguments"
        );
        let text = lines.join("\n");
        assert!(
            text.contains("different  file_write  {\"path\":\"b\"}  {\"path\":\"c\"}  not run"),
            "{text}"
        );
        assert!(text.contains("ran live"), "{text}");
        assert!(text.contains("  answer: differs (- recorded, + candidate)"));
        assert!(
            text.contains("\n    + saved c\n    - saved b\n      bye"),
            "{text}"
        );
    }

    #[test]
    fn a_turn_not_replayed_says_how_to_resume() {
        let r = sample();
        let lines = turn_lines(&r.turns[2]);
        assert_eq!(lines[0], "── turn 5 · DIVERGENT: not replayed");
        assert!(
            lines[2].contains("re-run the command to resume"),
            "{lines:?}"
        );
        assert_eq!(lines.len(), 3);
    }

    #[test]
    fn the_summary_counts_divergences_calls_and_costs_and_names_the_replay_thread() {
        let r = sample();
        let lines = summary_lines(&r);
        assert_eq!(
            lines[0],
            "summary: 3 turn(s), 2 replayed, 2 divergent (first: turn 4, call 2: `file_write` \
             with other arguments)"
        );
        assert_eq!(
            lines[1],
            "calls: 1 not run (the replay answered them with an error), 1 run live (reads only)"
        );
        assert_eq!(lines[2], "               RECORDED  CANDIDATE");
        assert_eq!(lines[3], "input tokens   300       200");
        assert_eq!(lines[5], "cost           $0.0400   $0.0110");
        assert_eq!(lines[6], "latency        4.5s      3.0s");
        assert!(
            lines[7].contains("ninetrix trace --thread-id 00000000-0000-0000-0000-000000000002"),
            "{}",
            lines[7]
        );
        let all = report_lines("writer-1", &r);
        assert_eq!(
            all[0],
            "replay of writer-1 (thread 00000000-0000-0000-0000-000000000001) against \
             agentfile candidate.yaml · model gpt-5 · live reads"
        );
    }

    #[test]
    fn progress_lines_say_whether_the_turn_diverged() {
        let r = sample();
        assert_eq!(
            progress_line(1, 3, &r.turns[0]),
            "  turn 3 (1/3): same calls and answer ($0.0050, 1.5s)"
        );
        assert_eq!(
            progress_line(2, 3, &r.turns[1]),
            "  turn 4 (2/3): diverged — call 2: `file_write` with other arguments ($0.0060, 1.5s)"
        );
        assert_eq!(latency(Some(850)), "850ms");
        assert_eq!(latency(None), "—");
    }

    #[test]
    fn the_eval_table_has_a_row_per_case_and_lists_failed_checks() {
        let id = |n| ThreadId::from(uuid::Uuid::from_u128(n));
        let case = |name: &str, failed: Vec<String>, passed| EvalCaseResult {
            thread: id(1),
            name: name.into(),
            replay: id(2),
            turns: 4,
            divergent_turns: 1,
            failed_checks: failed,
            cost_usd: 0.02,
            passed,
        };
        let lines = eval_lines(
            "support",
            "agentfile c.yaml",
            &[
                case("writer/support-42", vec![], true),
                case(
                    "writer-1",
                    vec!["turn 3: `file_write` was not called".into()],
                    false,
                ),
            ],
        );
        assert_eq!(lines[0], "eval support against agentfile c.yaml");
        assert_eq!(
            lines[1],
            "CASE               TURNS  DIVERGENT  FAILED CHECKS  COST     RESULT"
        );
        assert_eq!(
            lines[2],
            "writer/support-42  4      1          0              $0.0200  PASS"
        );
        assert!(lines[3].ends_with("FAIL"));
        assert_eq!(lines[4], "writer-1:");
        assert_eq!(lines[5], "  ✗ turn 3: `file_write` was not called");
        assert_eq!(lines[6], "1/2 case(s) passed: FAIL");
        assert!(eval_lines("s", "c", &[])[1].starts_with("no case"));
    }
}
