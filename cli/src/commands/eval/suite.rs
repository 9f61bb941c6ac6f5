//! An eval suite file (`ninetrix eval SUITE.yaml`) and its checks, as pure functions: the file
//! read into a [`Suite`] with every problem located (`file:line:col`, unknown keys with a
//! did-you-mean; through the agentfile's located YAML tree, so never a panic on bad input), and
//! the `expect:` checks of a case against its replay's report ([`check`]), one line per failed
//! check. docs/replay.md describes the format.

use std::path::{Path, PathBuf};

use ninetrix_agentfile::yaml::{self, Key, Kind, Loc, Node};
use ninetrix_proto::ThreadId;
use ninetrix_proto::replay::{CallMatch, ReplayReport, TurnComparison, check_suite_name, preview};

use crate::commands::replay::{TurnRange, parse_turns};
use crate::ui::replay::dollars;

/// Most failed checks a case keeps (the API keeps 50).
pub(crate) const MAX_FAILED_CHECKS: usize = 50;

const TOP_KEYS: &[&str] = &[
    "suite",
    "agentfile",
    "agent",
    "pool",
    "model",
    "instructions",
    "live_reads",
    "max_divergent_turns",
    "marked",
    "cases",
];
const CASE_KEYS: &[&str] = &["session", "thread", "replica", "agent", "turns", "expect"];
const EXPECT_KEYS: &[&str] = &["turn", "calls", "answer_contains", "max_cost"];

/// A suite as its file says it (paths made relative to the file's directory).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Suite {
    /// Its name (`suite:`).
    pub(crate) name: String,
    /// The candidate agentfile.
    pub(crate) agentfile: PathBuf,
    /// The cases' agent, unless a case names its own.
    pub(crate) agent: Option<String>,
    /// The pool.
    pub(crate) pool: Option<String>,
    /// The candidate's model, over the agent's.
    pub(crate) model: Option<String>,
    /// A file whose text replaces the agent's instructions.
    pub(crate) instructions: Option<PathBuf>,
    /// Whether a differing read runs live.
    pub(crate) live_reads: bool,
    /// A case with more divergent turns fails.
    pub(crate) max_divergent_turns: Option<u64>,
    /// Whether the threads marked into the suite run too.
    pub(crate) marked: bool,
    /// The cases the file names.
    pub(crate) cases: Vec<SuiteCase>,
}

/// Which conversation a case replays.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    /// A session, by its key.
    Session(String),
    /// A replica, by its number.
    Replica(u32),
    /// A thread, by its ID.
    Thread(ThreadId),
}

/// One case of a suite.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct SuiteCase {
    /// Its conversation.
    pub(crate) source: Source,
    /// Its agent (`None`: the suite's).
    pub(crate) agent: Option<String>,
    /// Its turns (`None`: every turn that ended).
    pub(crate) turns: Option<TurnRange>,
    /// Its checks.
    pub(crate) expect: Vec<Expect>,
    /// Where it is in the file.
    pub(crate) line: u32,
}

/// One `expect:` entry: checks of one turn (or of every turn).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Expect {
    /// The recorded turn checked (`None`: every turn of the case).
    pub(crate) turn: Option<u64>,
    /// Tools the candidate must call in that turn.
    pub(crate) calls: Vec<String>,
    /// Text the candidate's answer must contain.
    pub(crate) answer_contains: Option<String>,
    /// Most US dollars the replayed turn may cost.
    pub(crate) max_cost: Option<f64>,
}

/// One problem of a suite file, located.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Problem {
    /// 1-based line.
    pub(crate) line: u32,
    /// 1-based column.
    pub(crate) column: u32,
    /// What is wrong.
    pub(crate) message: String,
    /// How to fix it.
    pub(crate) help: Option<String>,
}

/// Every problem of a suite file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) struct SuiteError {
    /// The file, as given.
    pub(crate) file: String,
    /// Its problems, in the order found.
    pub(crate) problems: Vec<Problem>,
}

impl std::fmt::Display for SuiteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{}:{}:{}: {}", self.file, p.line, p.column, p.message)?;
            if let Some(help) = &p.help {
                write!(f, "\n  help: {help}")?;
            }
        }
        Ok(())
    }
}

/// The edit distance between two short words.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let here = row[j + 1];
            row[j + 1] = (row[j + 1] + 1)
                .min(row[j] + 1)
                .min(prev + usize::from(ca != *cb));
            prev = here;
        }
    }
    row[b.len()]
}

/// The known word closest to `word`, if it is close enough to be a typo.
fn closest<'a>(word: &str, known: &[&'a str]) -> Option<&'a str> {
    known
        .iter()
        .map(|k| (distance(word, k), *k))
        .filter(|(d, k)| *d <= (k.len() / 3).max(2))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// The decoder: collects problems as it walks the tree.
struct Decoder {
    problems: Vec<Problem>,
}

impl Decoder {
    fn problem(&mut self, loc: Loc, message: String, help: Option<String>) {
        self.problems.push(Problem {
            line: loc.line,
            column: loc.column,
            message,
            help,
        });
    }

    /// A mapping's entries, with its unknown keys reported.
    fn fields<'n>(
        &mut self,
        node: &'n Node,
        what: &str,
        known: &[&str],
    ) -> Option<&'n [(Key, Node)]> {
        let Kind::Map(entries) = &node.kind else {
            self.problem(
                node.loc,
                format!("{what} is a mapping, not {}", node.kind.describe()),
                Some(format!("its keys: {}", known.join(", "))),
            );
            return None;
        };
        for (k, _) in entries {
            if !known.contains(&k.name.as_str()) {
                let help = match closest(&k.name, known) {
                    Some(c) => format!("did you mean `{c}`?"),
                    None => format!("the keys of {what}: {}", known.join(", ")),
                };
                self.problem(
                    k.loc,
                    format!("unknown key `{}` in {what}", k.name),
                    Some(help),
                );
            }
        }
        Some(entries)
    }

    fn string(&mut self, node: &Node, key: &str) -> Option<String> {
        match &node.kind {
            Kind::Str(s) if !s.trim().is_empty() => Some(s.clone()),
            kind => {
                self.problem(
                    node.loc,
                    format!("`{key}` is a non-empty string, not {}", kind.describe()),
                    None,
                );
                None
            }
        }
    }

    fn boolean(&mut self, node: &Node, key: &str) -> Option<bool> {
        match node.kind {
            Kind::Bool(b) => Some(b),
            ref kind => {
                self.problem(
                    node.loc,
                    format!("`{key}` is true or false, not {}", kind.describe()),
                    None,
                );
                None
            }
        }
    }

    fn count(&mut self, node: &Node, key: &str, min: u64) -> Option<u64> {
        match node.kind {
            Kind::Int(i) if i >= 0 && i as u64 >= min => Some(i as u64),
            ref kind => {
                self.problem(
                    node.loc,
                    format!(
                        "`{key}` is a whole number from {min}, not {}",
                        kind.describe()
                    ),
                    None,
                );
                None
            }
        }
    }

    fn dollars(&mut self, node: &Node, key: &str) -> Option<f64> {
        let v = match node.kind {
            Kind::Int(i) => i as f64,
            Kind::Float(f) => f,
            _ => f64::NAN,
        };
        if v.is_finite() && v >= 0.0 {
            return Some(v);
        }
        self.problem(
            node.loc,
            format!(
                "`{key}` is an amount of US dollars (e.g. 0.01), not {}",
                node.kind.describe()
            ),
            None,
        );
        None
    }

    fn turns(&mut self, node: &Node) -> Option<TurnRange> {
        let text = match &node.kind {
            Kind::Int(i) => i.to_string(),
            Kind::Str(s) => s.clone(),
            kind => {
                self.problem(
                    node.loc,
                    format!(
                        "`turns` is a range of turns (e.g. 2..5), not {}",
                        kind.describe()
                    ),
                    None,
                );
                return None;
            }
        };
        match parse_turns(&text) {
            Ok(r) => Some(r),
            Err(e) => {
                self.problem(node.loc, e, None);
                None
            }
        }
    }

    fn expect(&mut self, node: &Node) -> Vec<Expect> {
        let Kind::Seq(items) = &node.kind else {
            self.problem(
                node.loc,
                format!("`expect` is a list of checks, not {}", node.kind.describe()),
                Some("e.g. `expect: [{ turn: 3, calls: [file_write] }]`".into()),
            );
            return Vec::new();
        };
        let mut out = Vec::new();
        for item in items {
            let Some(fields) = self.fields(item, "a check", EXPECT_KEYS) else {
                continue;
            };
            let mut e = Expect::default();
            for (k, v) in fields {
                match k.name.as_str() {
                    "turn" => e.turn = self.count(v, "turn", 1),
                    "calls" => e.calls = self.tools(v),
                    "answer_contains" => e.answer_contains = self.string(v, "answer_contains"),
                    "max_cost" => e.max_cost = self.dollars(v, "max_cost"),
                    _ => {}
                }
            }
            if e.calls.is_empty() && e.answer_contains.is_none() && e.max_cost.is_none() {
                self.problem(
                    item.loc,
                    "this check checks nothing".into(),
                    Some("give it `calls`, `answer_contains` or `max_cost`".into()),
                );
            }
            out.push(e);
        }
        out
    }

    fn tools(&mut self, node: &Node) -> Vec<String> {
        let Kind::Seq(items) = &node.kind else {
            self.problem(
                node.loc,
                format!("`calls` is a list of tools, not {}", node.kind.describe()),
                Some("e.g. `calls: [file_write]`".into()),
            );
            return Vec::new();
        };
        items
            .iter()
            .filter_map(|t| self.string(t, "calls"))
            .collect()
    }

    fn case(&mut self, node: &Node) -> Option<SuiteCase> {
        let fields = self.fields(node, "a case", CASE_KEYS)?;
        let mut sources = Vec::new();
        let mut case = SuiteCase {
            source: Source::Replica(1),
            agent: None,
            turns: None,
            expect: Vec::new(),
            line: node.loc.line,
        };
        let mut ok = true;
        for (k, v) in fields {
            match k.name.as_str() {
                "session" => match self.string(v, "session") {
                    Some(s) => sources.push(Source::Session(s)),
                    None => ok = false,
                },
                "replica" => match self.count(v, "replica", 1) {
                    Some(n) => sources.push(Source::Replica(u32::try_from(n).unwrap_or(u32::MAX))),
                    None => ok = false,
                },
                "thread" => {
                    let parsed = match &v.kind {
                        Kind::Str(s) => s.trim().parse::<ThreadId>().ok(),
                        _ => None,
                    };
                    match parsed {
                        Some(id) => sources.push(Source::Thread(id)),
                        None => {
                            ok = false;
                            self.problem(
                                v.loc,
                                format!(
                                    "`thread` is a thread ID (a UUID), not {}",
                                    v.kind.describe()
                                ),
                                Some("`ninetrix sessions` lists a pool's threads".into()),
                            );
                        }
                    }
                }
                "agent" => case.agent = self.string(v, "agent"),
                "turns" => case.turns = self.turns(v),
                "expect" => case.expect = self.expect(v),
                _ => {}
            }
        }
        match sources.len() {
            1 => case.source = sources.remove(0),
            0 if ok => {
                self.problem(
                    node.loc,
                    "this case names no conversation".into(),
                    Some("give it `session: KEY`, `thread: ID` or `replica: N`".into()),
                );
                return None;
            }
            0 => return None,
            _ => {
                self.problem(
                    node.loc,
                    "this case names more than one conversation".into(),
                    Some("give it one of `session`, `thread` and `replica`".into()),
                );
                return None;
            }
        }
        Some(case)
    }
}

/// Reads a suite file (`file` as given, `dir` its directory, `text` its contents): every
/// problem located, or the suite.
pub(crate) fn parse_suite(file: &str, dir: &Path, text: &str) -> Result<Suite, SuiteError> {
    let fail = |problems| SuiteError {
        file: file.to_string(),
        problems,
    };
    let root = yaml::parse(text).map_err(|e| {
        fail(vec![Problem {
            line: e.loc.line,
            column: e.loc.column,
            message: e.message,
            help: e.help,
        }])
    })?;
    let mut d = Decoder {
        problems: Vec::new(),
    };
    let Some(fields) = d.fields(&root, "a suite", TOP_KEYS) else {
        return Err(fail(d.problems));
    };
    let mut name = None;
    let mut agentfile = None;
    let mut suite = Suite {
        name: String::new(),
        agentfile: PathBuf::new(),
        agent: None,
        pool: None,
        model: None,
        instructions: None,
        live_reads: false,
        max_divergent_turns: None,
        marked: true,
        cases: Vec::new(),
    };
    for (k, v) in fields {
        match k.name.as_str() {
            "suite" => {
                name = d.string(v, "suite");
                if let Some(n) = &name
                    && let Err(e) = check_suite_name(n)
                {
                    d.problem(v.loc, format!("`{n}` cannot name a suite: {e}"), None);
                }
            }
            "agentfile" => agentfile = d.string(v, "agentfile").map(|p| dir.join(p)),
            "agent" => suite.agent = d.string(v, "agent"),
            "pool" => {
                suite.pool = d.string(v, "pool");
                if let Some(p) = &suite.pool
                    && let Err(e) = crate::cli::pool_name(p)
                {
                    d.problem(v.loc, format!("`{p}` cannot name a pool: {e}"), None);
                }
            }
            "model" => suite.model = d.string(v, "model"),
            "instructions" => {
                suite.instructions = d.string(v, "instructions").map(|p| dir.join(p));
            }
            "live_reads" => suite.live_reads = d.boolean(v, "live_reads").unwrap_or(false),
            "max_divergent_turns" => {
                suite.max_divergent_turns = d.count(v, "max_divergent_turns", 0);
            }
            "marked" => suite.marked = d.boolean(v, "marked").unwrap_or(true),
            "cases" => match &v.kind {
                Kind::Seq(items) => suite.cases = items.iter().filter_map(|c| d.case(c)).collect(),
                Kind::Null => {}
                kind => d.problem(
                    v.loc,
                    format!("`cases` is a list of cases, not {}", kind.describe()),
                    Some("e.g. `cases: [{ session: support-42, turns: 2..5 }]`".into()),
                ),
            },
            _ => {}
        }
    }
    let missing = |d: &mut Decoder, key: &str, example: &str| {
        d.problem(
            root.loc,
            format!("the suite has no `{key}`"),
            Some(format!("add `{key}: {example}`")),
        );
    };
    match name {
        Some(n) => suite.name = n,
        None if !fields.iter().any(|(k, _)| k.name == "suite") => {
            missing(&mut d, "suite", "support-regressions")
        }
        None => {}
    }
    match agentfile {
        Some(a) => suite.agentfile = a,
        None if !fields.iter().any(|(k, _)| k.name == "agentfile") => {
            missing(&mut d, "agentfile", "candidate.yaml")
        }
        None => {}
    }
    if d.problems.is_empty() {
        Ok(suite)
    } else {
        Err(fail(d.problems))
    }
}

/// The tools the candidate called in a turn.
fn called(t: &TurnComparison) -> impl Iterator<Item = &str> {
    t.calls
        .iter()
        .filter(|c| c.verdict != CallMatch::Missing)
        .map(|c| c.tool.as_str())
}

/// A case's checks against its replay's report: one line per failed check (at most
/// [`MAX_FAILED_CHECKS`], the last saying how many more), empty when every check passed.
pub(crate) fn check(report: &ReplayReport, expect: &[Expect]) -> Vec<String> {
    let mut failed = Vec::new();
    for e in expect {
        let turns: Vec<&TurnComparison> = match e.turn {
            Some(n) => {
                let found: Vec<_> = report.turns.iter().filter(|t| t.turn == n).collect();
                if found.is_empty() {
                    failed.push(format!("turn {n}: not among the turns replayed"));
                }
                found
            }
            None => report.turns.iter().collect(),
        };
        for t in turns {
            let n = t.turn;
            let Some(cost) = &t.replayed else {
                failed.push(format!("turn {n}: not replayed"));
                continue;
            };
            for tool in &e.calls {
                if !called(t).any(|c| c == tool) {
                    failed.push(format!("turn {n}: `{tool}` was not called"));
                }
            }
            if let Some(text) = &e.answer_contains
                && !t.replayed_answer.contains(text.as_str())
            {
                failed.push(format!(
                    "turn {n}: the answer does not contain \"{}\"",
                    preview(text, 60)
                ));
            }
            if let Some(max) = e.max_cost
                && cost.cost_usd > max
            {
                failed.push(format!(
                    "turn {n}: it cost {}, more than max_cost {}",
                    dollars(cost.cost_usd),
                    dollars(max)
                ));
            }
        }
    }
    failed.dedup();
    if failed.len() > MAX_FAILED_CHECKS {
        let more = failed.len() - (MAX_FAILED_CHECKS - 1);
        failed.truncate(MAX_FAILED_CHECKS - 1);
        failed.push(format!("… and {more} more failed check(s)"));
    }
    failed
}

#[cfg(test)]
mod tests {
    use super::*;
    use ninetrix_proto::api::{RecordedCall, RecordedTurn, Usage};
    use serde_json::json;

    const GOOD: &str = "suite: support-regressions
agentfile: candidate.yaml
agent: researcher
pool: research-pool
model: gpt-5
instructions: prompt-v2.md
live_reads: false
max_divergent_turns: 0
marked: true
cases:
  - session: support-42
    agent: researcher
    turns: 2..5
    expect:
      - turn: 3
        calls: [file_write]
        answer_contains: saved
        max_cost: 0.01
  - thread: 0190b0f0-0000-7000-8000-000000000001
  - replica: 2
    turns: 4
";

    fn parse(text: &str) -> Result<Suite, SuiteError> {
        parse_suite("suite.yaml", Path::new("/s"), text)
    }

    #[test]
    fn a_good_suite_is_read_with_its_paths_beside_it() {
        let s = parse(GOOD).unwrap();
        assert_eq!(s.name, "support-regressions");
        assert_eq!(s.agentfile, PathBuf::from("/s/candidate.yaml"));
        assert_eq!(s.instructions, Some(PathBuf::from("/s/prompt-v2.md")));
        assert_eq!(s.pool.as_deref(), Some("research-pool"));
        assert_eq!(s.model.as_deref(), Some("gpt-5"));
        assert_eq!(s.max_divergent_turns, Some(0));
        assert!(s.marked && !s.live_reads);
        assert_eq!(s.cases.len(), 3);
        assert_eq!(s.cases[0].source, Source::Session("support-42".into()));
        assert_eq!(
            s.cases[0].turns,
            Some(TurnRange {
                from: Some(2),
                to: Some(5)
            })
        );
        assert_eq!(
            s.cases[0].expect,
            vec![Expect {
                turn: Some(3),
                calls: vec!["file_write".into()],
                answer_contains: Some("saved".into()),
                max_cost: Some(0.01),
            }]
        );
        assert!(matches!(s.cases[1].source, Source::Thread(_)));
        assert_eq!(s.cases[2].source, Source::Replica(2));
        assert_eq!(s.cases[2].line, 20);
        let minimal = parse("suite: s\nagentfile: a.yaml\n").unwrap();
        assert!(minimal.cases.is_empty() && minimal.marked);
    }

    fn problems(text: &str) -> Vec<String> {
        parse(text)
            .unwrap_err()
            .to_string()
            .lines()
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn every_problem_is_located_with_a_hint() {
        let p = problems("suite: s\nagentfile: a.yaml\nmodle: x\n");
        assert_eq!(
            p,
            vec![
                "suite.yaml:3:1: unknown key `modle` in a suite",
                "  help: did you mean `model`?"
            ]
        );
        let p = problems("suite: Bad Name\nagentfile: a.yaml\n");
        assert!(
            p[0].starts_with("suite.yaml:1:8: `Bad Name` cannot name a suite:"),
            "{p:?}"
        );
        let p = problems("agentfile: a.yaml\n");
        assert_eq!(p[0], "suite.yaml:1:1: the suite has no `suite`");
        assert_eq!(p[1], "  help: add `suite: support-regressions`");
        let text = "suite: s
agentfile: a.yaml
cases:
  - session: k
    turns: 5..2
    expect:
      - turn: 0
        calls: file_write
        max_cost: lots
      - turn: 2
  - replica: 1
    session: k
  - agent: x
  - sesion: k
";
        let p = problems(text);
        let want = [
            "suite.yaml:5:12: `5..2` is empty: its first turn (5) is after its last (2)",
            "suite.yaml:7:15: `turn` is a whole number from 1, not the number 0",
            "suite.yaml:8:16: `calls` is a list of tools, not the string \"file_write\"",
            "  help: e.g. `calls: [file_write]`",
            "suite.yaml:9:19: `max_cost` is an amount of US dollars (e.g. 0.01), not the string \"lots\"",
            "suite.yaml:10:9: this check checks nothing",
            "  help: give it `calls`, `answer_contains` or `max_cost`",
            "suite.yaml:11:5: this case names more than one conversation",
            "  help: give it one of `session`, `thread` and `replica`",
            "suite.yaml:13:5: this case names no conversation",
            "  help: give it `session: KEY`, `thread: ID` or `replica: N`",
            "suite.yaml:14:5: unknown key `sesion` in a case",
            "  help: did you mean `session`?",
        ];
        for w in want {
            assert!(
                p.iter().any(|l| l == w),
                "missing {w:?} in\n{}",
                p.join("\n")
            );
        }
        let p = problems("suite: s\nagentfile: [a]\nthread: x\n");
        assert_eq!(p[0], "suite.yaml:3:1: unknown key `thread` in a suite");
        assert!(
            p[1].starts_with("  help: the keys of a suite: suite, agentfile"),
            "{p:?}"
        );
        assert_eq!(
            p[2],
            "suite.yaml:2:12: `agentfile` is a non-empty string, not a list"
        );
        let p = problems("suite: s\n  bad: [\n");
        assert!(p[0].starts_with("suite.yaml:"), "{p:?}");
        let p = problems("- a\n- b\n");
        assert!(
            p[0].starts_with("suite.yaml:1:1: a suite is a mapping"),
            "{p:?}"
        );
    }

    fn turn(n: u64, tools: &[&str], answer: &str, cost: f64) -> RecordedTurn {
        RecordedTurn {
            turn_seq: n,
            live: true,
            input: "go".into(),
            messages: Vec::new(),
            calls: tools
                .iter()
                .map(|t| RecordedCall {
                    name: (*t).into(),
                    args: json!({}),
                    result: String::new(),
                    is_error: false,
                    effect: None,
                    person: None,
                })
                .collect(),
            answer: answer.into(),
            ok: true,
            usage: Usage {
                input_tokens: 1,
                output_tokens: 1,
                cost_usd: cost,
            },
            latency_ms: None,
            model: None,
        }
    }

    #[test]
    fn checks_fail_one_line_each_and_pass_silently() {
        let recorded = vec![
            turn(2, &["file_read"], "x", 0.0),
            turn(3, &["file_write"], "saved it", 0.0),
            turn(4, &[], "bye", 0.0),
        ];
        let replayed = vec![
            turn(2, &["file_read"], "x", 0.001),
            turn(3, &["file_read"], "did not save", 0.02),
        ];
        let id = ThreadId::new_v7();
        let r = ninetrix_proto::replay::report(id, id, "c", false, &recorded, &replayed);
        let pass = Expect {
            turn: Some(2),
            calls: vec!["file_read".into()],
            answer_contains: Some("x".into()),
            max_cost: Some(0.01),
        };
        assert!(check(&r, std::slice::from_ref(&pass)).is_empty());
        let fail = Expect {
            turn: Some(3),
            calls: vec!["file_write".into()],
            answer_contains: Some("saved it".into()),
            max_cost: Some(0.01),
        };
        assert_eq!(
            check(&r, &[fail]),
            vec![
                "turn 3: `file_write` was not called",
                "turn 3: the answer does not contain \"saved it\"",
                "turn 3: it cost $0.0200, more than max_cost $0.0100",
            ]
        );
        let every = Expect {
            answer_contains: Some("x".into()),
            ..Expect::default()
        };
        assert_eq!(
            check(&r, &[every]),
            vec![
                "turn 3: the answer does not contain \"x\"",
                "turn 4: not replayed"
            ]
        );
        let absent = Expect {
            turn: Some(9),
            max_cost: Some(1.0),
            ..Expect::default()
        };
        assert_eq!(
            check(&r, &[absent]),
            vec!["turn 9: not among the turns replayed"]
        );
        let many: Vec<Expect> = (0..60)
            .map(|i| Expect {
                turn: Some(100 + i),
                max_cost: Some(1.0),
                ..Expect::default()
            })
            .collect();
        let lines = check(&r, &many);
        assert_eq!(lines.len(), MAX_FAILED_CHECKS);
        assert_eq!(lines[49], "… and 11 more failed check(s)");
    }

    /// The suite docs/replay.md shows is one `eval` reads.
    #[test]
    fn the_documented_suite_is_valid() {
        let doc = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/replay.md"),
        )
        .unwrap();
        let start = doc.find("```yaml\n").expect("a yaml block") + "```yaml\n".len();
        let end = start + doc[start..].find("```").unwrap();
        let s = parse(&doc[start..end]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.name, "support-regressions");
        assert_eq!(s.cases[0].expect[0].calls, vec!["file_write".to_string()]);
    }

    #[test]
    fn typos_get_the_closest_key() {
        assert_eq!(
            closest("answer_contain", EXPECT_KEYS),
            Some("answer_contains")
        );
        assert_eq!(closest("zzzzzz", EXPECT_KEYS), None);
        assert_eq!(distance("kitten", "sitting"), 3);
    }
}
