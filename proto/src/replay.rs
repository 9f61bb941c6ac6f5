//! Replaying recorded turns against a candidate agent (issue 42), as pure functions:
//!
//! - [`answer`] — the tool oracle: how a replay answers a call from the recorded turn (the same
//!   tool with the same arguments gets the recorded result; a differing read may run live; a
//!   differing write is never run);
//! - [`pair_calls`] — a turn's calls with their results and ledger records, as the API builds a
//!   [`RecordedTurn`];
//! - [`compare_turn`] and [`report`] — a replayed turn side by side with the recorded one, and
//!   the whole replay's report (divergent turns, where the candidate first diverged).
//!
//! Arguments compare as JSON values: key order does not matter, `1` and `1.0` differ.

use serde::{Deserialize, Serialize};

use crate::api::{PersonDecision, RecordedCall, RecordedTurn, Usage};
use crate::effects::Effect;
use crate::ids::ThreadId;
use crate::message::{Block, Message, Role};

/// The start of every result a replay gives a call it did not run.
pub const NOT_RUN: &str = "Not run: this is a replay";

/// Most characters of an input or an argument list a report keeps.
pub const PREVIEW_CHARS: usize = 120;

/// How a replay answered one call (the `replay_answered` trace event says it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplayVerdict {
    /// The recorded turn has this call (same tool, same arguments): its recorded result.
    Recorded,
    /// A question (`ask_human`) worded differently: the answer the person gave to the recorded
    /// turn's question at the same place.
    RecordedAnswer,
    /// A read the recording does not have, run for real (`--live-reads`).
    Live,
    /// A call the recording does not have, not run: the model got an error result saying so.
    NotRun,
}

impl ReplayVerdict {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            ReplayVerdict::Recorded => "recorded",
            ReplayVerdict::RecordedAnswer => "recorded_answer",
            ReplayVerdict::Live => "live",
            ReplayVerdict::NotRun => "not_run",
        }
    }
}

/// A call the candidate made in a replayed turn, as the oracle needs it.
#[derive(Clone, Copy, Debug)]
pub struct ReplayedCall<'a> {
    /// The tool, by the model's name.
    pub name: &'a str,
    /// Its arguments.
    pub args: &'a serde_json::Value,
    /// Earlier calls in this replayed turn with the same tool and arguments.
    pub occurrence: usize,
    /// For a question (`ask_human`): earlier questions in this replayed turn. `None`: not a
    /// question.
    pub question: Option<usize>,
    /// The candidate's effect class for it.
    pub effect: Effect,
    /// Whether it hands a task to a collaborator (`ask_<agent>`): never run live.
    pub handoff: bool,
}

/// What the oracle says to do with a call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OracleAnswer {
    /// Answer with this result, without running anything.
    Answer {
        /// Which kind of answer it is.
        verdict: ReplayVerdict,
        /// The result the model gets.
        content: String,
        /// Whether it is an error.
        is_error: bool,
    },
    /// Run it for real (a differing read, with live reads on).
    RunLive,
}

/// How a replay answers `call`, given the recorded turn's `calls` (in order): the
/// `occurrence`-th recorded call with the same tool and arguments gives its result; a question
/// worded differently gets the recorded answer of the question at the same place; a differing
/// read runs live when `live_reads` is on; anything else is not run, and the model is told so.
pub fn answer(
    recorded: &[RecordedCall],
    call: &ReplayedCall<'_>,
    live_reads: bool,
) -> OracleAnswer {
    let same = recorded
        .iter()
        .filter(|r| r.name == call.name && &r.args == call.args)
        .nth(call.occurrence);
    if let Some(r) = same {
        return OracleAnswer::Answer {
            verdict: ReplayVerdict::Recorded,
            content: r.result.clone(),
            is_error: r.is_error,
        };
    }
    if let Some(nth) = call.question {
        let asked = recorded.iter().filter(|r| r.name == call.name).nth(nth);
        return match asked {
            Some(r) => OracleAnswer::Answer {
                verdict: ReplayVerdict::RecordedAnswer,
                content: r.result.clone(),
                is_error: r.is_error,
            },
            None => not_run(format!(
                "{NOT_RUN}, and the recorded turn has no question here to take the answer from. \
                 Go on without the answer."
            )),
        };
    }
    if call.effect == Effect::Read && !call.handoff {
        if live_reads {
            return OracleAnswer::RunLive;
        }
        return not_run(format!(
            "{NOT_RUN} without live reads, and the recorded turn has no `{}` call with these \
             arguments, so there is no result to give. Go on without it.",
            call.name
        ));
    }
    not_run(format!(
        "{NOT_RUN}: `{}` with these arguments is not in the recorded turn, and a replay never \
         runs a call that could change anything outside it. Go on as if it had not been made.",
        call.name
    ))
}

fn not_run(content: String) -> OracleAnswer {
    OracleAnswer::Answer {
        verdict: ReplayVerdict::NotRun,
        content,
        is_error: true,
    }
}

/// What a thread's ledger holds about one call of a turn, for [`pair_calls`].
#[derive(Clone, Debug, PartialEq)]
pub struct LedgerCall {
    /// The tool.
    pub tool: String,
    /// Its arguments.
    pub args: serde_json::Value,
    /// Its effect class.
    pub effect: Effect,
    /// A person's decision about it, if one was asked.
    pub person: Option<PersonDecision>,
}

/// The tool calls of a turn's `messages`, in order, each with the result the model got (the
/// tool-result block that answers it; empty when none does) and — paired in order by tool and
/// arguments — the ledger's record of it (`ledger`: the turn's records, in the order they were
/// made) and the person's decision about it (`people`: `(tool, args, decision)` of the turn's
/// requests to people, for calls the ledger has no record of, such as a refused one).
pub fn pair_calls(
    messages: &[Message],
    ledger: &[LedgerCall],
    people: &[(String, serde_json::Value, PersonDecision)],
) -> Vec<RecordedCall> {
    let mut used = vec![false; ledger.len()];
    let mut asked = vec![false; people.len()];
    let results: std::collections::HashMap<&str, (&str, bool)> = messages
        .iter()
        .flat_map(|m| &m.blocks)
        .filter_map(|b| match b {
            Block::ToolResult {
                call_id,
                content,
                is_error,
            } => Some((call_id.as_str(), (content.as_str(), *is_error))),
            _ => None,
        })
        .collect();
    let mut out = Vec::new();
    for m in messages.iter().filter(|m| m.role == Role::Assistant) {
        for b in &m.blocks {
            let Block::ToolCall { id, name, args } = b else {
                continue;
            };
            let record = (0..ledger.len())
                .find(|&i| !used[i] && &ledger[i].tool == name && &ledger[i].args == args);
            let (effect, mut person) = match record {
                Some(i) => {
                    used[i] = true;
                    (Some(ledger[i].effect), ledger[i].person.clone())
                }
                None => (None, None),
            };
            if person.is_none()
                && let Some(j) = (0..people.len())
                    .find(|&j| !asked[j] && &people[j].0 == name && &people[j].1 == args)
            {
                asked[j] = true;
                person = Some(people[j].2.clone());
            }
            let (result, is_error) = results.get(id.as_str()).copied().unwrap_or(("", false));
            out.push(RecordedCall {
                name: name.clone(),
                args: args.clone(),
                result: result.to_string(),
                is_error,
                effect,
                person,
            });
        }
    }
    out
}

/// How a call of a replayed turn compares with the recording.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallMatch {
    /// The same tool with the same arguments.
    Same,
    /// The same tool with other arguments.
    Different,
    /// A call the recording does not have.
    New,
    /// A recorded call the candidate did not make.
    Missing,
}

impl CallMatch {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            CallMatch::Same => "same",
            CallMatch::Different => "different",
            CallMatch::New => "new",
            CallMatch::Missing => "missing",
        }
    }
}

/// One row of a turn's call comparison.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CallPair {
    /// How it compares.
    pub verdict: CallMatch,
    /// The tool.
    pub tool: String,
    /// The recorded call's arguments (`None` for a new call).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded_args: Option<serde_json::Value>,
    /// The candidate's arguments (`None` for a missing call).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replayed_args: Option<serde_json::Value>,
    /// The recorded call's effect class (`None`: new, or not in the recorded ledger).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<Effect>,
    /// Whether the replay ran it for real (a live read: the replay's own ledger has it).
    pub ran: bool,
}

/// The candidate's calls side by side with the recorded ones: each replayed call is `same` as
/// the first unmatched recorded call with its tool and arguments, else `different` from the
/// first unmatched recorded call of its tool, else `new`; recorded calls left are `missing`.
/// Rows follow the candidate's order, then the missing ones in recorded order.
pub fn compare_calls(recorded: &[RecordedCall], replayed: &[RecordedCall]) -> Vec<CallPair> {
    let mut taken = vec![false; recorded.len()];
    let mut matched: Vec<Option<(usize, CallMatch)>> = vec![None; replayed.len()];
    for (k, c) in replayed.iter().enumerate() {
        if let Some(i) = (0..recorded.len())
            .find(|&i| !taken[i] && recorded[i].name == c.name && recorded[i].args == c.args)
        {
            taken[i] = true;
            matched[k] = Some((i, CallMatch::Same));
        }
    }
    for (k, c) in replayed.iter().enumerate() {
        if matched[k].is_some() {
            continue;
        }
        if let Some(i) = (0..recorded.len()).find(|&i| !taken[i] && recorded[i].name == c.name) {
            taken[i] = true;
            matched[k] = Some((i, CallMatch::Different));
        }
    }
    let mut rows: Vec<CallPair> = replayed
        .iter()
        .zip(&matched)
        .map(|(c, m)| {
            let r = m.map(|(i, _)| &recorded[i]);
            CallPair {
                verdict: m.map_or(CallMatch::New, |(_, v)| v),
                tool: c.name.clone(),
                recorded_args: r.map(|r| r.args.clone()),
                replayed_args: Some(c.args.clone()),
                effect: r.and_then(|r| r.effect).or(c.effect),
                ran: c.effect.is_some(),
            }
        })
        .collect();
    rows.extend(
        recorded
            .iter()
            .zip(&taken)
            .filter(|(_, t)| !**t)
            .map(|(r, _)| CallPair {
                verdict: CallMatch::Missing,
                tool: r.name.clone(),
                recorded_args: Some(r.args.clone()),
                replayed_args: None,
                effect: r.effect,
                ran: false,
            }),
    );
    rows
}

/// One line of an answer's diff.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "text", rename_all = "snake_case")]
pub enum DiffLine {
    /// In both.
    Same(String),
    /// In the recorded answer only.
    Removed(String),
    /// In the candidate's answer only.
    Added(String),
}

/// Most lines of either side a diff compares line by line; past it the diff is the whole of one
/// side removed and the other added.
pub const MAX_DIFF_LINES: usize = 2_000;

/// The line diff from `recorded` to `replayed` (longest common subsequence of lines).
pub fn line_diff(recorded: &str, replayed: &str) -> Vec<DiffLine> {
    let a: Vec<&str> = recorded.lines().collect();
    let b: Vec<&str> = replayed.lines().collect();
    if a.len() > MAX_DIFF_LINES || b.len() > MAX_DIFF_LINES {
        return a
            .iter()
            .map(|l| DiffLine::Removed((*l).to_string()))
            .chain(b.iter().map(|l| DiffLine::Added((*l).to_string())))
            .collect();
    }
    // lcs[i][j]: the longest common subsequence of a[i..] and b[j..].
    let mut lcs = vec![vec![0u32; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::new();
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            out.push(DiffLine::Same(a[i].to_string()));
            i += 1;
            j += 1;
        } else if j < b.len() && (i == a.len() || lcs[i][j + 1] >= lcs[i + 1][j]) {
            out.push(DiffLine::Added(b[j].to_string()));
            j += 1;
        } else {
            out.push(DiffLine::Removed(a[i].to_string()));
            i += 1;
        }
    }
    out
}

/// What one side of a turn cost.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TurnCost {
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// US dollars.
    pub cost_usd: f64,
    /// Milliseconds from its input to its end (`None`: not recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<u64>,
}

impl TurnCost {
    /// A turn's cost as recorded.
    pub fn of(turn: &RecordedTurn) -> Self {
        Self::from_usage(&turn.usage, turn.latency_ms)
    }

    fn from_usage(u: &Usage, latency_ms: Option<u64>) -> Self {
        Self {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            cost_usd: u.cost_usd,
            latency_ms,
        }
    }

    /// The sum of two costs (latency adds when both have it).
    pub fn plus(&self, other: &TurnCost) -> TurnCost {
        TurnCost {
            input_tokens: self.input_tokens + other.input_tokens,
            output_tokens: self.output_tokens + other.output_tokens,
            cost_usd: self.cost_usd + other.cost_usd,
            latency_ms: match (self.latency_ms, other.latency_ms) {
                (Some(a), Some(b)) => Some(a + b),
                (a, b) => a.or(b),
            },
        }
    }
}

/// One recorded turn beside its replay.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TurnComparison {
    /// The recorded turn.
    pub turn: u64,
    /// The replay's turn (`None`: it was not replayed, as when the replay stopped early).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_turn: Option<u64>,
    /// The start of its input.
    pub input: String,
    /// The calls side by side.
    pub calls: Vec<CallPair>,
    /// Whether the final answers are the same text.
    pub answer_identical: bool,
    /// The answer's line diff, recorded to candidate (empty when identical).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub answer_diff: Vec<DiffLine>,
    /// The recorded answer.
    pub recorded_answer: String,
    /// The candidate's answer.
    pub replayed_answer: String,
    /// What the recorded turn cost.
    pub recorded: TurnCost,
    /// What the replayed turn cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replayed: Option<TurnCost>,
    /// Whether anything differs (a call not `same`, or the answer).
    pub divergent: bool,
    /// The first thing that differs, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub divergence: Option<String>,
}

/// The first `max` characters of `text` on one line, with `…` when cut.
pub fn preview(text: &str, max: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    crate::text::preview(&flat, max)
}

/// `recorded` beside its replay `replayed` (`None`: not replayed).
pub fn compare_turn(recorded: &RecordedTurn, replayed: Option<&RecordedTurn>) -> TurnComparison {
    let input = preview(&recorded.input, PREVIEW_CHARS);
    let Some(replayed) = replayed else {
        return TurnComparison {
            turn: recorded.turn_seq,
            replay_turn: None,
            input,
            calls: Vec::new(),
            answer_identical: false,
            answer_diff: Vec::new(),
            recorded_answer: recorded.answer.clone(),
            replayed_answer: String::new(),
            recorded: TurnCost::of(recorded),
            replayed: None,
            divergent: true,
            divergence: Some("not replayed".into()),
        };
    };
    let calls = compare_calls(&recorded.calls, &replayed.calls);
    let answer_identical = recorded.answer == replayed.answer;
    let divergence = calls
        .iter()
        .enumerate()
        .find_map(|(k, c)| call_divergence(k, c))
        .or_else(|| (!answer_identical).then(|| "the final answer".to_string()));
    TurnComparison {
        turn: recorded.turn_seq,
        replay_turn: Some(replayed.turn_seq),
        input,
        answer_diff: if answer_identical {
            Vec::new()
        } else {
            line_diff(&recorded.answer, &replayed.answer)
        },
        answer_identical,
        recorded_answer: recorded.answer.clone(),
        replayed_answer: replayed.answer.clone(),
        recorded: TurnCost::of(recorded),
        replayed: Some(TurnCost::of(replayed)),
        divergent: divergence.is_some(),
        divergence,
        calls,
    }
}

/// How row `k` (from 0) of a turn's call comparison differs, in words (`None`: it is the same).
fn call_divergence(k: usize, c: &CallPair) -> Option<String> {
    match c.verdict {
        CallMatch::Same => None,
        CallMatch::Different => Some(format!("call {}: `{}` with other arguments", k + 1, c.tool)),
        CallMatch::New => Some(format!(
            "call {}: `{}`, which the recording does not have",
            k + 1,
            c.tool
        )),
        CallMatch::Missing => Some(format!("the recorded `{}` call was not made", c.tool)),
    }
}

/// A whole replay's report (`ninetrix replay --json` prints it).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReplayReport {
    /// The recorded thread.
    pub source: ThreadId,
    /// The replay's thread.
    pub replay: ThreadId,
    /// What the turns were replayed against.
    pub candidate: String,
    /// Whether differing reads ran live.
    pub live_reads: bool,
    /// One record per recorded turn, in order.
    pub turns: Vec<TurnComparison>,
    /// Turns in which anything differs.
    pub divergent_turns: u64,
    /// Where the candidate first diverged: `(turn, what)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_divergence: Option<FirstDivergence>,
    /// Calls the candidate made that the replay did not run (new or different, not live reads).
    pub calls_not_run: u64,
    /// Calls the replay ran for real (live reads; never a write).
    pub calls_run: u64,
    /// The recorded turns' cost, summed.
    pub recorded: TurnCost,
    /// The replayed turns' cost, summed.
    pub replayed: TurnCost,
}

/// Where a replay first diverged.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FirstDivergence {
    /// The recorded turn.
    pub turn: u64,
    /// What differs first in it.
    pub what: String,
}

/// The report of a replay: `recorded[i]` beside `replayed[i]` (the replay's turns in order; a
/// shorter list means the replay stopped early).
pub fn report(
    source: ThreadId,
    replay: ThreadId,
    candidate: &str,
    live_reads: bool,
    recorded: &[RecordedTurn],
    replayed: &[RecordedTurn],
) -> ReplayReport {
    let turns: Vec<TurnComparison> = recorded
        .iter()
        .enumerate()
        .map(|(i, r)| compare_turn(r, replayed.get(i)))
        .collect();
    let first_divergence = turns.iter().find(|t| t.divergent).map(|t| FirstDivergence {
        turn: t.turn,
        what: t.divergence.clone().unwrap_or_default(),
    });
    let calls = || turns.iter().flat_map(|t| &t.calls);
    ReplayReport {
        source,
        replay,
        candidate: candidate.to_string(),
        live_reads,
        divergent_turns: turns.iter().filter(|t| t.divergent).count() as u64,
        first_divergence,
        calls_not_run: calls()
            .filter(|c| matches!(c.verdict, CallMatch::New | CallMatch::Different) && !c.ran)
            .count() as u64,
        calls_run: calls().filter(|c| c.ran).count() as u64,
        recorded: turns
            .iter()
            .fold(TurnCost::default(), |a, t| a.plus(&t.recorded)),
        replayed: turns
            .iter()
            .filter_map(|t| t.replayed.as_ref())
            .fold(TurnCost::default(), |a, c| a.plus(c)),
        turns,
    }
}

/// Why an eval suite's name is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SuiteNameError {
    /// Empty, or longer than [`MAX_SUITE_CHARS`].
    #[error("a suite name has 1 to {MAX_SUITE_CHARS} characters, not {0}")]
    Length(usize),
    /// A character other than `a-z`, `0-9`, `-`, `_`, or a first one that is not a letter or
    /// digit.
    #[error(
        "a suite name is lowercase letters, digits, `-` and `_`, starting with a letter or a digit (e.g. `support-regressions`)"
    )]
    Chars,
}

/// Most characters of a suite's name.
pub const MAX_SUITE_CHARS: usize = 63;

/// Whether `name` may name an eval suite (it appears in URLs: `/v1/evals/{suite}`).
pub fn check_suite_name(name: &str) -> Result<(), SuiteNameError> {
    let n = name.chars().count();
    if n == 0 || n > MAX_SUITE_CHARS {
        return Err(SuiteNameError::Length(n));
    }
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if !first_ok
        || !name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
    {
        return Err(SuiteNameError::Chars);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rec(
        name: &str,
        args: serde_json::Value,
        result: &str,
        effect: Option<Effect>,
    ) -> RecordedCall {
        RecordedCall {
            name: name.into(),
            args,
            result: result.into(),
            is_error: false,
            effect,
            person: None,
        }
    }

    fn call<'a>(name: &'a str, args: &'a serde_json::Value, effect: Effect) -> ReplayedCall<'a> {
        ReplayedCall {
            name,
            args,
            occurrence: 0,
            question: None,
            effect,
            handoff: false,
        }
    }

    #[test]
    fn an_identical_call_gets_its_recorded_result_by_occurrence_whatever_the_key_order() {
        let recorded = vec![
            rec(
                "shell",
                json!({"cmd": "date", "n": 1}),
                "first",
                Some(Effect::Write),
            ),
            rec(
                "shell",
                json!({"n": 1, "cmd": "date"}),
                "second",
                Some(Effect::Write),
            ),
        ];
        let args = json!({"n": 1, "cmd": "date"});
        let mut c = call("shell", &args, Effect::Write);
        let got = |c: &ReplayedCall<'_>| answer(&recorded, c, false);
        assert_eq!(
            got(&c),
            OracleAnswer::Answer {
                verdict: ReplayVerdict::Recorded,
                content: "first".into(),
                is_error: false
            }
        );
        c.occurrence = 1;
        assert!(matches!(got(&c), OracleAnswer::Answer { content, .. } if content == "second"));
        c.occurrence = 2;
        assert!(matches!(
            got(&c),
            OracleAnswer::Answer { verdict: ReplayVerdict::NotRun, is_error: true, content } if content.starts_with(NOT_RUN)
        ));
    }

    #[test]
    fn a_differing_write_is_never_run_and_a_differing_read_runs_only_with_live_reads() {
        let recorded = vec![rec(
            "file_read",
            json!({"path": "a"}),
            "A",
            Some(Effect::Read),
        )];
        let other = json!({"path": "b"});
        let read = call("file_read", &other, Effect::Read);
        assert_eq!(answer(&recorded, &read, true), OracleAnswer::RunLive);
        assert!(matches!(
            answer(&recorded, &read, false),
            OracleAnswer::Answer { verdict: ReplayVerdict::NotRun, content, .. } if content.contains("without live reads")
        ));
        for effect in [Effect::Write, Effect::Idempotent] {
            let write = call("file_write", &other, effect);
            assert!(matches!(
                answer(&recorded, &write, true),
                OracleAnswer::Answer {
                    verdict: ReplayVerdict::NotRun,
                    is_error: true,
                    ..
                }
            ));
        }
        let mut handoff = call("ask_writer", &other, Effect::Read);
        handoff.handoff = true;
        assert!(matches!(
            answer(&recorded, &handoff, true),
            OracleAnswer::Answer {
                verdict: ReplayVerdict::NotRun,
                ..
            }
        ));
    }

    #[test]
    fn a_question_worded_differently_gets_the_recorded_answer_at_its_place() {
        let recorded = vec![
            rec(
                "ask_human",
                json!({"question": "Which region?"}),
                "eu-west",
                None,
            ),
            rec("ask_human", json!({"question": "Budget?"}), "100", None),
        ];
        let args = json!({"question": "What budget do we have?"});
        let mut q = call("ask_human", &args, Effect::Read);
        q.question = Some(1);
        assert_eq!(
            answer(&recorded, &q, false),
            OracleAnswer::Answer {
                verdict: ReplayVerdict::RecordedAnswer,
                content: "100".into(),
                is_error: false
            }
        );
        q.question = Some(2);
        assert!(matches!(
            answer(&recorded, &q, false),
            OracleAnswer::Answer {
                verdict: ReplayVerdict::NotRun,
                ..
            }
        ));
    }

    fn assistant(calls: &[(&str, &str, serde_json::Value)]) -> Message {
        Message::new(
            Role::Assistant,
            calls
                .iter()
                .map(|(id, name, args)| Block::ToolCall {
                    id: (*id).into(),
                    name: (*name).into(),
                    args: args.clone(),
                })
                .collect(),
        )
    }

    fn result(id: &str, content: &str, is_error: bool) -> Message {
        Message::new(
            Role::Tool,
            vec![Block::ToolResult {
                call_id: id.into(),
                content: content.into(),
                is_error,
            }],
        )
    }

    #[test]
    fn calls_are_paired_with_their_results_ledger_records_and_decisions_in_order() {
        let messages = vec![
            Message::text(Role::User, "go"),
            assistant(&[
                ("c1", "shell", json!({"cmd": "x"})),
                ("c2", "shell", json!({"cmd": "x"})),
                ("c3", "deploy", json!({})),
            ]),
            result("c1", "one", false),
            result("c2", "two", false),
            result("c3", "Not run: alice rejected this call", true),
            Message::text(Role::Assistant, "done"),
        ];
        let ledger = vec![
            LedgerCall {
                tool: "shell".into(),
                args: json!({"cmd": "x"}),
                effect: Effect::Write,
                person: None,
            },
            LedgerCall {
                tool: "shell".into(),
                args: json!({"cmd": "x"}),
                effect: Effect::Idempotent,
                person: None,
            },
        ];
        let refused = PersonDecision {
            kind: crate::api::ApprovalKind::Approval,
            status: crate::api::ApprovalStatus::Rejected,
            by: Some("alice".into()),
        };
        let people = vec![("deploy".to_string(), json!({}), refused.clone())];
        let calls = pair_calls(&messages, &ledger, &people);
        assert_eq!(calls.len(), 3);
        assert_eq!(
            (calls[0].result.as_str(), calls[0].effect),
            ("one", Some(Effect::Write))
        );
        assert_eq!(
            (calls[1].result.as_str(), calls[1].effect),
            ("two", Some(Effect::Idempotent))
        );
        assert_eq!(calls[2].effect, None);
        assert!(calls[2].is_error);
        assert_eq!(calls[2].person, Some(refused));
    }

    #[test]
    fn calls_compare_as_same_different_new_and_missing() {
        let recorded = vec![
            rec("read", json!({"p": 1}), "", Some(Effect::Read)),
            rec("write", json!({"p": 1}), "", Some(Effect::Write)),
            rec("mail", json!({}), "", Some(Effect::Write)),
        ];
        let replayed = vec![
            rec("write", json!({"p": 2}), "", None),
            rec("read", json!({"p": 1}), "", None),
            rec("shell", json!({}), "", None),
        ];
        let rows = compare_calls(&recorded, &replayed);
        let verdicts: Vec<(CallMatch, &str)> =
            rows.iter().map(|r| (r.verdict, r.tool.as_str())).collect();
        assert_eq!(
            verdicts,
            vec![
                (CallMatch::Different, "write"),
                (CallMatch::Same, "read"),
                (CallMatch::New, "shell"),
                (CallMatch::Missing, "mail"),
            ]
        );
        assert_eq!(rows[0].effect, Some(Effect::Write));
        assert!(rows.iter().all(|r| !r.ran));
    }

    #[test]
    fn the_line_diff_keeps_common_lines_and_marks_the_rest() {
        assert_eq!(
            line_diff("a\nb\nc", "a\nx\nc"),
            vec![
                DiffLine::Same("a".into()),
                DiffLine::Added("x".into()),
                DiffLine::Removed("b".into()),
                DiffLine::Same("c".into()),
            ]
        );
        assert!(
            line_diff("same", "same")
                .iter()
                .all(|l| matches!(l, DiffLine::Same(_)))
        );
        assert_eq!(line_diff("", "new"), vec![DiffLine::Added("new".into())]);
    }

    fn turn(n: u64, calls: Vec<RecordedCall>, answer: &str) -> RecordedTurn {
        RecordedTurn {
            turn_seq: n,
            live: true,
            input: format!("input {n}"),
            messages: Vec::new(),
            calls,
            answer: answer.into(),
            ok: true,
            usage: Usage {
                input_tokens: 10,
                output_tokens: 5,
                cost_usd: 0.5,
            },
            latency_ms: Some(100),
            model: None,
        }
    }

    #[test]
    fn the_report_counts_divergent_turns_and_names_the_first_divergence() {
        let w = |p: i64| rec("file_write", json!({"path": p}), "ok", Some(Effect::Write));
        let recorded = vec![
            turn(3, vec![w(1)], "done"),
            turn(4, vec![w(2)], "done"),
            turn(5, vec![], "bye"),
        ];
        let mut new_call = w(9);
        new_call.effect = None;
        let replayed = vec![
            turn(3, vec![w(1)], "done"),
            turn(4, vec![w(2), new_call], "done"),
        ];
        let id = ThreadId::new_v7();
        let r = report(id, id, "model x", false, &recorded, &replayed);
        assert_eq!(
            r.divergent_turns, 2,
            "turn 4 differs and turn 5 was not replayed"
        );
        assert_eq!(
            r.first_divergence,
            Some(FirstDivergence {
                turn: 4,
                what: "call 2: `file_write`, which the recording does not have".into()
            })
        );
        assert_eq!(r.calls_not_run, 1);
        assert_eq!(r.recorded.input_tokens, 30);
        assert_eq!(r.replayed.latency_ms, Some(200));
        assert!(!r.turns[0].divergent);
        assert_eq!(r.turns[2].divergence.as_deref(), Some("not replayed"));
        let other = report(
            id,
            id,
            "m",
            false,
            &recorded[..1],
            &[turn(7, vec![w(1)], "finished")],
        );
        assert_eq!(other.first_divergence.unwrap().what, "the final answer");
    }

    #[test]
    fn suite_names_are_url_safe() {
        assert!(check_suite_name("support-regressions_2").is_ok());
        assert_eq!(check_suite_name(""), Err(SuiteNameError::Length(0)));
        assert_eq!(
            check_suite_name(&"a".repeat(64)),
            Err(SuiteNameError::Length(64))
        );
        for bad in ["-x", "Upper", "a b", "a/b", "é"] {
            assert_eq!(check_suite_name(bad), Err(SuiteNameError::Chars), "{bad}");
        }
    }
}
