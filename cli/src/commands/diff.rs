//! `ninetrix diff`: the files turn N of a conversation changed — a replica's (`--replica N`), a
//! session's (`--session KEY`) or a thread named by its ID (`--thread ID`) — from the API's `GET
//! /v1/threads/{id}/turns/{n}/diff`: turn N's workspace snapshot against the one of the nearest
//! earlier turn on the same history that has one. Each file is `A` (added), `M` (modified) or `D`
//! (removed), with its size before and after, then a one-line total. A turn without a snapshot
//! says why (the API's message names it: dropped after `keep_turns`, or never taken).
//!
//! The listing is a pure function of the API's answer ([`diff_lines`]); the effects are at the
//! edge ([`run`]).

use std::process::ExitCode;

use clap::Args;
use ninetrix_client::{ClientError, ErrorCode};
use ninetrix_proto::api::TurnDiff;
use ninetrix_proto::snapshots::{ChangeKind, FileChange};

use crate::commands::reset::{ConversationArgs, Located};
use crate::ui::going_back::{self, size};

/// The widest the path column gets; longer paths push their sizes right.
const MAX_PATH_COLUMN: usize = 60;

/// Arguments of `ninetrix diff`.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The conversation.
    #[command(flatten)]
    pub conversation: ConversationArgs,
    /// The turn whose changes are shown.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub turn: u64,
    /// Print the API's answer as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// `A`, `M` or `D`.
fn letter(kind: ChangeKind) -> char {
    match kind {
        ChangeKind::Added => 'A',
        ChangeKind::Modified => 'M',
        ChangeKind::Removed => 'D',
    }
}

/// `1.2 KiB → 1.3 KiB`, `— → 120 B`, `4 KiB → —`.
fn sizes(c: &FileChange) -> String {
    let side = |s: Option<u64>| s.map_or_else(|| "—".to_string(), size);
    format!("{} → {}", side(c.size_before), side(c.size_after))
}

/// The listing: what it is compared against, one line per file, and the total.
pub(crate) fn diff_lines(whose: &str, d: &TurnDiff) -> Vec<String> {
    let n = d.turn_seq;
    let against = match d.against {
        Some(t) => format!("against turn {t}"),
        None => "against nothing: no earlier turn of its history has a snapshot, so every file \
                 counts as added"
            .to_string(),
    };
    let mut lines = vec![format!(
        "turn {n} of {whose} ({}) {against}",
        going_back::snapshot(&d.snapshot)
    )];
    if d.changes.is_empty() {
        lines.push(format!("turn {n} changed no file"));
        return lines;
    }
    let width = d
        .changes
        .iter()
        .map(|c| c.path.chars().count())
        .max()
        .unwrap_or(0)
        .min(MAX_PATH_COLUMN);
    for c in &d.changes {
        lines.push(format!(
            "{}  {:<width$}  {}",
            letter(c.kind),
            c.path,
            sizes(c)
        ));
    }
    let count = |k| d.changes.iter().filter(|c| c.kind == k).count();
    let before: u64 = d.changes.iter().filter_map(|c| c.size_before).sum();
    let after: u64 = d.changes.iter().filter_map(|c| c.size_after).sum();
    let delta = if after >= before {
        format!("+{}", size(after - before))
    } else {
        format!("-{}", size(before - after))
    };
    lines.push(format!(
        "{} file(s) changed{}: {} added, {} modified, {} removed ({delta})",
        d.changes.len(),
        if d.truncated {
            " (the first 10,000 listed; there are more)"
        } else {
            ""
        },
        count(ChangeKind::Added),
        count(ChangeKind::Modified),
        count(ChangeKind::Removed),
    ));
    lines
}

/// What `diff` says when the turn has nothing to show (the API's 404 names why), or another
/// refusal; `None` for an error that is not the API's answer.
pub(crate) fn no_diff(e: &ClientError, turn: u64) -> Option<String> {
    let ClientError::Api { code, message, .. } = e else {
        return None;
    };
    Some(match code {
        ErrorCode::NotFound => format!(
            "turn {turn} has no changes to show: {message}. A turn's snapshot is dropped after \
             `execution.snapshots.keep_turns` later turns, and none is taken with `snapshots: \
             false` or when it is skipped (`ninetrix trace` shows `no snapshot: …` and why)"
        ),
        _ => return None,
    })
}

/// Runs `ninetrix diff`.
pub(crate) async fn run(args: &DiffArgs) -> anyhow::Result<ExitCode> {
    let Located {
        api,
        target,
        thread,
        ..
    } = args.conversation.locate().await?;
    let whose = target.whose(&args.conversation.agent);
    let diff = match api.client().turn_diff(thread, args.turn).await {
        Ok(d) => d,
        Err(e) => {
            if let Some(text) = no_diff(&e, args.turn) {
                eprintln!("{text}");
                return Ok(ExitCode::from(crate::EXIT_FAILURE));
            }
            return Err(api.explain(e, &format!("reading turn {} of thread {thread}", args.turn)));
        }
    };
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&diff)?);
    } else {
        for line in diff_lines(&whose, &diff) {
            outln!("{line}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ninetrix_proto::snapshots::{ObjectId, SnapshotRef};

    fn change(path: &str, kind: ChangeKind, before: Option<u64>, after: Option<u64>) -> FileChange {
        FileChange {
            path: path.into(),
            kind,
            size_before: before,
            size_after: after,
        }
    }

    #[test]
    fn each_file_its_sizes_and_a_total() {
        let snapshot = SnapshotRef {
            root: ObjectId::of(b"t5"),
            files: 40,
            bytes: 2 << 20,
        };
        let mut d = TurnDiff {
            turn_seq: 5,
            against: Some(4),
            snapshot: snapshot.clone(),
            changes: vec![
                change("README.md", ChangeKind::Modified, Some(3000), Some(3500)),
                change("src/new.rs", ChangeKind::Added, None, Some(1200)),
                change("old.txt", ChangeKind::Removed, Some(120), None),
            ],
            truncated: false,
        };
        let lines = diff_lines("writer-1", &d);
        assert_eq!(
            lines,
            [
                format!(
                    "turn 5 of writer-1 (snapshot {} (40 files, 2 MiB)) against turn 4",
                    snapshot.root.short()
                ),
                "M  README.md   2.9 KiB → 3.4 KiB".to_string(),
                "A  src/new.rs  — → 1.2 KiB".to_string(),
                "D  old.txt     120 B → —".to_string(),
                "3 file(s) changed: 1 added, 1 modified, 1 removed (+1.5 KiB)".to_string(),
            ]
        );
        d.truncated = true;
        d.against = None;
        let lines = diff_lines("writer-1", &d);
        assert!(
            lines[0].ends_with("so every file counts as added"),
            "{}",
            lines[0]
        );
        assert!(lines[4].contains("the first 10,000 listed"));
        d.changes.clear();
        assert_eq!(diff_lines("writer-1", &d)[1], "turn 5 changed no file");
    }

    #[test]
    fn a_turn_without_a_snapshot_says_why() {
        let e = ClientError::Api {
            status: 404,
            code: ErrorCode::NotFound,
            message: "turn 2's snapshot was dropped (keep_turns: 100)".into(),
            running: None,
        };
        let text = no_diff(&e, 2).unwrap();
        assert!(text.starts_with("turn 2 has no changes to show: turn 2's snapshot was dropped"));
        assert!(text.contains("snapshots: false"));
        let other = ClientError::Unreachable {
            url: "http://x".into(),
            reason: "refused".into(),
        };
        assert_eq!(no_diff(&other, 2), None);
    }
}
