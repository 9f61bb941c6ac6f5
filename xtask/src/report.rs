//! What `cargo xtask test` prints after the run, decided without I/O: the profile the arguments
//! select, the counts in nextest's JUnit report, the skip summary and the closing line.

use std::collections::BTreeMap;

use ninetrix_testkit::{Need, SkipRecord};

/// The nextest profile a run uses: `--profile NAME`, `--profile=NAME` or `-P NAME` in the
/// arguments, else `NEXTEST_PROFILE`, else `default`.
pub(crate) fn profile_of(args: &[String], env: Option<&str>) -> String {
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        if arg == "--" {
            break;
        }
        if arg == "--profile" || arg == "-P" {
            if let Some(name) = it.next() {
                return name.clone();
            }
        } else if let Some(name) = arg.strip_prefix("--profile=") {
            return name.to_string();
        }
    }
    env.filter(|p| !p.is_empty())
        .unwrap_or("default")
        .to_string()
}

/// Whether the arguments choose packages themselves (`-p`, `--package`, `--workspace`), so the
/// run must not add `--workspace`.
pub(crate) fn names_packages(args: &[String]) -> bool {
    args.iter().take_while(|a| *a != "--").any(|a| {
        a == "-p"
            || a == "--package"
            || a.starts_with("--package=")
            || a == "--workspace"
            || (a.starts_with("-p") && a.len() > 2)
    })
}

/// Whether the arguments ask for help (`-h`, `--help`) before any `--`: the task's usage is
/// printed instead of a run.
pub(crate) fn asks_for_help(args: &[String]) -> bool {
    args.iter()
        .take_while(|a| *a != "--")
        .any(|a| a == "-h" || a == "--help")
}

/// The test counts of a run, from the root element of nextest's JUnit report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Counts {
    /// Tests that ran.
    pub(crate) tests: u64,
    /// Tests that failed (failures and errors).
    pub(crate) failed: u64,
}

/// The counts on the `<testsuites …>` element (`tests`, `failures`, `errors`), or `None` when the
/// report has no such element.
pub(crate) fn junit_counts(xml: &str) -> Option<Counts> {
    let start = xml.find("<testsuites")?;
    let element = &xml[start..start + xml[start..].find('>')?];
    let attr = |name: &str| -> Option<u64> {
        let key = format!(" {name}=\"");
        let from = element.find(&key)? + key.len();
        element[from..from + element[from..].find('"')?]
            .parse()
            .ok()
    };
    Some(Counts {
        tests: attr("tests")?,
        failed: attr("failures").unwrap_or(0) + attr("errors").unwrap_or(0),
    })
}

/// The number of tests that skipped whole (nextest counts them as passed); a test that left out
/// one part and ran the rest counts as run.
pub(crate) fn whole_skips(skips: &[SkipRecord]) -> usize {
    let mut tests: Vec<&str> = skips
        .iter()
        .filter(|s| s.part.is_none())
        .map(|s| s.test.as_str())
        .collect();
    tests.sort_unstable();
    tests.dedup();
    tests.len()
}

/// `tests: N passed, N failed, N skipped` — the skipped tests are those that returned early for a
/// missing prerequisite (nextest counts them as passed).
pub(crate) fn closing_line(counts: Counts, skipped: usize) -> String {
    let skipped = skipped as u64;
    let passed = counts
        .tests
        .saturating_sub(counts.failed)
        .saturating_sub(skipped);
    format!(
        "tests: {passed} passed, {} failed, {skipped} skipped",
        counts.failed
    )
}

/// The skipped tests, grouped by what they needed, each group with how to get it.
pub(crate) fn skipped_summary(skips: &[SkipRecord]) -> String {
    if skips.is_empty() {
        return "Skipped: none (every prerequisite was there)\n".to_string();
    }
    let mut by_need: BTreeMap<Need, Vec<String>> = BTreeMap::new();
    for s in skips {
        let name = match &s.part {
            Some(part) => format!("{} (only {part})", s.test),
            None => s.test.clone(),
        };
        by_need.entry(s.need).or_default().push(name);
    }
    let mut out = format!(
        "Skipped for missing prerequisites: {} test(s) whole, {} in part\n",
        whole_skips(skips),
        skips.iter().filter(|s| s.part.is_some()).count()
    );
    for (need, mut tests) in by_need {
        tests.sort_unstable();
        tests.dedup();
        let strict = if need == Need::Swarm {
            String::new()
        } else {
            format!("; {}=1 makes this a failure", need.require_var())
        };
        out.push_str(&format!(
            "  needs {} ({}){strict} — {} test(s):\n",
            need.what(),
            need.how(),
            tests.len()
        ));
        for t in tests {
            out.push_str(&format!("    {t}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_profile_comes_from_the_arguments_then_the_environment() {
        assert_eq!(profile_of(&args(&[]), None), "default");
        assert_eq!(profile_of(&args(&[]), Some("ci")), "ci");
        assert_eq!(
            profile_of(&args(&["--profile", "fast"]), Some("ci")),
            "fast"
        );
        assert_eq!(profile_of(&args(&["-P", "docker"]), None), "docker");
        assert_eq!(
            profile_of(&args(&["--profile=fast", "-E", "x"]), None),
            "fast"
        );
        assert_eq!(
            profile_of(&args(&["--", "--profile", "x"]), None),
            "default"
        );
    }

    #[test]
    fn packages_named_in_the_arguments_replace_the_workspace() {
        assert!(!names_packages(&args(&["--profile", "fast", "chaos"])));
        assert!(names_packages(&args(&["-p", "ninetrix-e2e"])));
        assert!(names_packages(&args(&["-pninetrix-e2e"])));
        assert!(names_packages(&args(&["--package=ninetrix-api"])));
        assert!(!names_packages(&args(&["--", "-p"])));
    }

    #[test]
    fn help_before_the_separator_is_the_tasks_own() {
        assert!(asks_for_help(&args(&["--help"])));
        assert!(asks_for_help(&args(&["--profile", "fast", "-h"])));
        assert!(!asks_for_help(&args(&["--", "--help"])));
        assert!(!asks_for_help(&args(&["--profile", "fast"])));
    }

    #[test]
    fn counts_are_read_from_the_root_element() {
        let xml = r#"<?xml version="1.0" encoding="UTF-8"?>
<testsuites name="nextest-run" tests="734" failures="2" errors="1" uuid="x" timestamp="t" time="1.0">
<testsuite name="a" tests="3" failures="9"></testsuite></testsuites>"#;
        assert_eq!(
            junit_counts(xml),
            Some(Counts {
                tests: 734,
                failed: 3
            })
        );
        assert_eq!(junit_counts("<nothing/>"), None);
        assert_eq!(
            closing_line(
                Counts {
                    tests: 734,
                    failed: 3
                },
                10
            ),
            "tests: 721 passed, 3 failed, 10 skipped"
        );
    }

    #[test]
    fn the_summary_groups_skips_by_need_and_says_how_to_get_each() {
        let skip = |need, test: &str| SkipRecord {
            need,
            test: test.into(),
            part: None,
        };
        let skips = [
            skip(Need::Postgres, "postgres::b"),
            skip(Need::Chromium, "console"),
            skip(Need::Postgres, "postgres::a"),
            SkipRecord {
                part: Some("the MCP writer".into()),
                ..skip(Need::Mcp, "chaos")
            },
        ];
        assert_eq!(whole_skips(&skips), 3);
        let text = skipped_summary(&skips);
        assert_eq!(
            text,
            "Skipped for missing prerequisites: 3 test(s) whole, 1 in part\n  \
             needs Postgres (set NINETRIX_TEST_POSTGRES_URL=postgres://USER@HOST:PORT/DB, a server where USER may create databases); NINETRIX_REQUIRE_POSTGRES=1 makes this a failure — 2 test(s):\n    \
             postgres::a\n    postgres::b\n  \
             needs the MCP Python SDK and reference servers (pip install mcp==2.3.0 mcp-server-time==2026.10.19 mcp-server-git==2026.10.19); NINETRIX_REQUIRE_MCP=1 makes this a failure — 1 test(s):\n    \
             chaos (only the MCP writer)\n  \
             needs Chromium (apt-get install chromium); NINETRIX_REQUIRE_CHROMIUM=1 makes this a failure — 1 test(s):\n    \
             console\n"
        );
        assert!(skipped_summary(&[]).starts_with("Skipped: none"));
    }
}
