//! Agentfiles broken at random, thousands of ways: the parser never panics, and every refusal
//! points into the file.
//!
//! The seeds are the shipped example and every YAML block of docs/agentfile.md and the README
//! (so every feature the docs show is in play). Each case applies a few seeded mutations — a line
//! dropped, doubled, swapped or re-indented, a token replaced by a YAML oddity (anchors, tags,
//! merge keys, flow collections, huge or odd numbers, tabs, control and right-to-left
//! characters), the file cut short, random characters inserted — and then asserts:
//! - `parse` returns (a panic fails the test with the seed and the input that caused it);
//! - a refusal has at least one error, each at a line of the file and a column ≥ 1, and renders;
//! - an accepted file resolves to JSON and back to the same agentfile.
//!
//! 3,000 cases by default (a second or two); `NINETRIX_FUZZ_CASES=N` runs more and
//! `NINETRIX_SEED=S` replays one run (the seed is printed). The long run's result is in
//! BENCHMARKS.md.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use ninetrix_agentfile::{self as agentfile, Agentfile};

/// A small, seeded generator (xorshift64*): the same seed, the same cases.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// The example and every ```yaml block of the docs that mention agentfiles.
fn seeds() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut seeds = vec![std::fs::read_to_string(root.join("agentfile.example.yaml")).unwrap()];
    for doc in ["docs/agentfile.md", "README.md"] {
        let text = std::fs::read_to_string(root.join(doc)).unwrap();
        let mut block: Option<String> = None;
        for line in text.lines() {
            match (&mut block, line.trim_start()) {
                (None, l) if l.starts_with("```yaml") => block = Some(String::new()),
                (Some(_), l) if l.starts_with("```") => seeds.extend(block.take()),
                (Some(b), _) => {
                    b.push_str(line);
                    b.push('\n');
                }
                (None, _) => {}
            }
        }
    }
    assert!(seeds.len() >= 5, "found {} seeds", seeds.len());
    seeds
}

/// Tokens that YAML parsers and decoders trip on.
const ODDITIES: &[&str] = &[
    "~",
    "null",
    "true",
    "yes",
    "-1",
    "0x1F",
    "0o17",
    "1e400",
    "-.inf",
    ".nan",
    "18446744073709551616",
    "99999999999999999999999999",
    "\"",
    "'",
    "[",
    "]",
    "{",
    "}",
    "[]",
    "{}",
    ":",
    "- ",
    "? ",
    "&a",
    "*a",
    "&a x",
    "*nope",
    "<<: *a",
    "!!binary aGk=",
    "!custom",
    "!!str",
    "---",
    "...",
    "%YAML 1.1",
    "#",
    "|",
    ">-",
    "\t",
    "\u{0}",
    "\u{7}",
    "\u{feff}",
    "\u{202e}",
    "é",
    "🦀",
    "${SECRET}",
    "${",
    "mcp://",
    "mcp://x/",
    "builtin://",
    "0",
    "48h",
    "1ms",
    "-5m",
    "0.0001",
    "999999Gi",
    "*/0 * * * *",
    "60 25 32 13 8",
];

/// One random change to `text`.
fn mutate(rng: &mut Rng, text: &str) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    if lines.is_empty() {
        lines.push(String::new());
    }
    let i = rng.below(lines.len());
    match rng.below(9) {
        0 => {
            lines.remove(i);
        }
        1 => {
            let line = lines[i].clone();
            lines.insert(i, line);
        }
        2 => {
            let j = rng.below(lines.len());
            lines.swap(i, j);
        }
        3 => {
            // Indent or dedent by one or two spaces.
            let by = 1 + rng.below(2);
            if rng.below(2) == 0 {
                lines[i].insert_str(0, &" ".repeat(by));
            } else {
                let trimmed = lines[i].trim_start();
                let keep = (lines[i].len() - trimmed.len()).saturating_sub(by);
                lines[i] = format!("{}{trimmed}", " ".repeat(keep));
            }
        }
        4 | 5 => {
            // Replace the value after a key, or a whole word, with an oddity.
            let odd = rng.pick(ODDITIES);
            let line = &lines[i];
            lines[i] = match line.find(": ") {
                Some(at) if rng.below(3) > 0 => format!("{}: {odd}", &line[..at]),
                _ => {
                    let words: Vec<&str> = line.split(' ').collect();
                    let w = rng.below(words.len());
                    words
                        .iter()
                        .enumerate()
                        .map(|(k, word)| if k == w { *odd } else { *word })
                        .collect::<Vec<_>>()
                        .join(" ")
                }
            };
        }
        6 => {
            // Insert an oddity at a random character of the line.
            let chars: Vec<char> = lines[i].chars().collect();
            let at = rng.below(chars.len() + 1);
            let odd = rng.pick(ODDITIES);
            lines[i] = chars[..at].iter().collect::<String>()
                + odd
                + &chars[at..].iter().collect::<String>();
        }
        7 => {
            // Cut the file short at a random character.
            let all = lines.join("\n");
            let chars: Vec<char> = all.chars().collect();
            let at = rng.below(chars.len() + 1);
            return chars[..at].iter().collect();
        }
        _ => {
            // A line of random characters, mostly YAML punctuation.
            let alphabet: Vec<char> = "abc:-[]{}&*!|>'\"#,? \t0123456789%@`".chars().collect();
            let len = rng.below(12);
            let noise: String = (0..len).map(|_| *rng.pick(&alphabet)).collect();
            lines.insert(i, noise);
        }
    }
    let mut out = lines.join("\n");
    out.push('\n');
    out
}

/// What is wrong with what `parse` did with `text`, if anything.
fn judge(text: &str) -> Result<(), String> {
    let result = catch_unwind(AssertUnwindSafe(|| agentfile::parse("mutated.yaml", text)))
        .map_err(|panic| {
            let why = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            format!("parse panicked: {why}")
        })?;
    match result {
        Ok(parsed) => {
            let json = serde_json::to_string(&parsed.agentfile)
                .map_err(|e| format!("accepted, but does not serialize: {e}"))?;
            let back: Agentfile = serde_json::from_str(&json)
                .map_err(|e| format!("accepted, but its JSON does not read back: {e}"))?;
            if back != parsed.agentfile {
                return Err("accepted, but its JSON reads back as another agentfile".into());
            }
        }
        Err(report) => {
            let errors: Vec<_> = report
                .diagnostics
                .iter()
                .filter(|d| d.severity == agentfile::Severity::Error)
                .collect();
            if errors.is_empty() {
                return Err("refused with no error".into());
            }
            let lines = text.lines().count().max(1) as u32;
            for d in &report.diagnostics {
                // A location one past the last line is where an unexpected end of file is.
                if d.line == 0 || d.line > lines + 1 || d.column == 0 {
                    return Err(format!(
                        "diagnostic at {}:{} outside the file ({lines} lines): {}",
                        d.line, d.column, d.message
                    ));
                }
                if d.message.trim().is_empty() {
                    return Err(format!("a {:?} with no message", d.kind));
                }
            }
            catch_unwind(AssertUnwindSafe(|| report.render(false)))
                .map_err(|_| "rendering the report panicked".to_string())?;
        }
    }
    Ok(())
}

#[test]
fn mutated_agentfiles_are_refused_with_located_errors_and_never_panic() {
    let cases: usize = std::env::var("NINETRIX_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3_000);
    let seed: u64 = std::env::var("NINETRIX_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5EED_A6E7_F11E);
    eprintln!("{cases} cases, NINETRIX_SEED={seed}");
    // Keep the default hook's backtraces out of the output: panics are reported below.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let seeds = seeds();
    let mut rng = Rng(seed | 1);
    let (mut accepted, mut failures) = (0usize, Vec::new());
    for case in 0..cases {
        let mut text = rng.pick(&seeds).clone();
        for _ in 0..1 + rng.below(4) {
            text = mutate(&mut rng, &text);
        }
        match judge(&text) {
            Ok(()) => accepted += usize::from(agentfile::parse("m.yaml", &text).is_ok()),
            Err(why) if failures.len() < 5 => failures.push(format!(
                "case {case}: {why}\n--- input ---\n{text}\n-------------"
            )),
            Err(_) => {}
        }
    }
    std::panic::set_hook(hook);
    eprintln!("{accepted} of {cases} mutated files still valid, the rest refused");
    assert!(
        failures.is_empty(),
        "NINETRIX_SEED={seed}:\n{}",
        failures.join("\n")
    );
    // The mutations are not all fatal: some files stay valid, so acceptance is checked too.
    assert!(accepted > 0, "no mutated file was valid");
}
