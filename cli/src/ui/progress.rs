//! Progress output of `up` and `down`, Compose-style: one line per step when piped, JSON lines
//! with `--json`, and on a terminal a block of rows redrawn in place under a `[+] Running
//! done/total` header.

use std::time::{Duration, Instant};

use serde_json::json;

/// How progress is shown: redrawn in place on a terminal (like Compose), one line per step when
/// piped, or JSON lines with `--json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Json,
    Plain,
    Live,
}

/// One row of the live view: the latest status of one object.
#[derive(Debug, Clone, PartialEq)]
struct Row {
    kind: String,
    name: String,
    status: String,
    state: RowState,
    elapsed: Duration,
}

/// Whether a row is still moving, done, or failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RowState {
    Working,
    Done,
    Failed,
}

/// Progress output: one line per step (plain or JSON), or on a terminal a block of rows redrawn
/// in place under a `[+] Running done/total` header.
pub(crate) struct Progress {
    mode: Mode,
    started: Instant,
    /// Live mode only: the rows being redrawn.
    live: std::sync::Mutex<Live>,
}

impl Progress {
    /// Picks the mode: JSON when asked, live when stdout is a terminal (and `TERM` is not
    /// `dumb`), plain lines otherwise.
    pub(crate) fn new(json: bool) -> Self {
        use std::io::IsTerminal as _;
        let mode = if json {
            Mode::Json
        } else if std::io::stdout().is_terminal()
            && std::env::var("TERM").map_or(true, |t| t != "dumb")
        {
            Mode::Live
        } else {
            Mode::Plain
        };
        Self {
            mode,
            started: Instant::now(),
            live: std::sync::Mutex::new(Live::default()),
        }
    }

    /// A step that is under way (shown only in the live view; plain and JSON output report
    /// outcomes).
    pub(crate) fn working(&self, kind: &str, name: &str, status: &str) {
        if self.mode == Mode::Live {
            self.redraw(kind, name, status, RowState::Working);
        }
    }

    /// A step that finished.
    pub(crate) fn step(&self, kind: &str, name: &str, status: &str) {
        match self.mode {
            Mode::Json => best_effort(format_args!(
                "{}",
                json!({"type": kind, "name": name, "status": status, "elapsed_ms": self.started.elapsed().as_millis() as u64})
            )),
            Mode::Plain => best_effort(format_args!(
                " ✔ {kind:<9} {name:<40} {status:<12} {:.1}s",
                self.started.elapsed().as_secs_f64()
            )),
            Mode::Live => self.redraw(kind, name, status, RowState::Done),
        }
    }

    /// A step that failed.
    pub(crate) fn fail(&self, kind: &str, name: &str, status: &str) {
        match self.mode {
            Mode::Json => best_effort(format_args!(
                "{}",
                json!({"type": kind, "name": name, "status": status, "error": true, "elapsed_ms": self.started.elapsed().as_millis() as u64})
            )),
            Mode::Plain => best_effort(format_args!(" ✘ {kind:<9} {name:<40} {status}")),
            Mode::Live => self.redraw(kind, name, status, RowState::Failed),
        }
    }

    /// Live mode: refreshes the elapsed time of rows still under way (called while polling).
    pub(crate) fn tick(&self) {
        if self.mode != Mode::Live {
            return;
        }
        let mut guard = self.live.lock().unwrap_or_else(|e| e.into_inner());
        let now = self.started.elapsed();
        let mut moving = false;
        for r in guard
            .rows
            .iter_mut()
            .filter(|r| r.state == RowState::Working)
        {
            r.elapsed = now;
            moving = true;
        }
        if moving {
            paint(&mut guard);
        }
    }

    /// Updates (or adds) the row for `kind name` and repaints the live block.
    fn redraw(&self, kind: &str, name: &str, status: &str, state: RowState) {
        let mut guard = self.live.lock().unwrap_or_else(|e| e.into_inner());
        let elapsed = self.started.elapsed();
        upsert(&mut guard.rows, kind, name, status, state, elapsed);
        paint(&mut guard);
    }
}

/// Writes one progress line, ignoring a closed stdout: the reconcile goes on without its
/// reader, so no container ID goes unrecorded.
fn best_effort(args: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    let _ = out.write_fmt(args).and_then(|()| out.write_all(b"\n"));
}

/// The live view's state.
#[derive(Debug, Default)]
struct Live {
    /// Rows still redrawn in place.
    rows: Vec<Row>,
    /// Rows already printed for good above the block.
    committed: usize,
    /// How many lines the last paint printed (the cursor moves back over them).
    printed: usize,
}

/// At most this many rows are redrawn (fewer on a short terminal); finished rows above them are
/// printed for good.
const MAX_LIVE_ROWS: usize = 20;

/// Moves the cursor back over the previously printed block, clears to the end of the screen,
/// commits rows that must not be redrawn, and prints the new block.
///
/// Redrawing only works if every line of the block is exactly one terminal line, so lines in the
/// block are cut to the terminal's width and the block never outgrows its height. Failed rows
/// are committed at once (their full reason stays readable however long it is), and finished
/// leading rows are committed once the block is full.
fn paint(live: &mut Live) {
    use std::io::Write as _;
    let (width, height) = terminal_size::terminal_size()
        .map_or((80, 24), |(w, h)| (usize::from(w.0), usize::from(h.0)));
    let max_rows = MAX_LIVE_ROWS.min(height.saturating_sub(2)).max(1);
    let mut out = std::io::stdout().lock();
    if live.printed > 0 {
        let _ = write!(out, "\x1b[{}A\x1b[J", live.printed);
    }
    for row in commit(live, max_rows) {
        let _ = out.write_all(line(&row).as_bytes());
    }
    let block = render(&live.rows, live.committed, width.saturating_sub(1).max(20));
    let _ = out.write_all(block.as_bytes());
    let _ = out.flush();
    live.printed = block.lines().count();
}

/// Takes out of the live block the rows to print for good: every failed row, then finished
/// leading rows while the block has more than `max_rows`.
fn commit(live: &mut Live, max_rows: usize) -> Vec<Row> {
    let (failed, rest): (Vec<Row>, Vec<Row>) = std::mem::take(&mut live.rows)
        .into_iter()
        .partition(|r| r.state == RowState::Failed);
    live.rows = rest;
    let mut out = failed;
    while live.rows.len() > max_rows && live.rows[0].state != RowState::Working {
        out.push(live.rows.remove(0));
    }
    live.committed += out.len();
    out
}

/// Replaces the row for `kind name`, or appends one.
fn upsert(
    rows: &mut Vec<Row>,
    kind: &str,
    name: &str,
    status: &str,
    state: RowState,
    at: Duration,
) {
    let row = Row {
        kind: kind.to_string(),
        name: name.to_string(),
        status: status.to_string(),
        state,
        elapsed: at,
    };
    match rows.iter_mut().find(|r| r.kind == kind && r.name == name) {
        Some(r) => *r = row,
        None => rows.push(row),
    }
}

/// The live block: a `[+] Running done/total` header (counting `committed` rows already printed
/// above it) and one line per row, each cut to `width` characters.
fn render(rows: &[Row], committed: usize, width: usize) -> String {
    let done = committed + rows.iter().filter(|r| r.state != RowState::Working).count();
    let mut s = format!("[+] Running {done}/{}\n", committed + rows.len());
    for r in rows {
        let full = line(r);
        let text = full.trim_end_matches('\n');
        if text.chars().count() > width {
            s.extend(text.chars().take(width.saturating_sub(1)));
            s.push_str("…\n");
        } else {
            s.push_str(&full);
        }
    }
    s
}

/// One row as a line: mark, kind, name, status, elapsed seconds.
fn line(r: &Row) -> String {
    let mark = match r.state {
        RowState::Working => "⠿",
        RowState::Done => "✔",
        RowState::Failed => "✘",
    };
    format!(
        " {mark} {:<9} {:<40} {:<12} {:.1}s\n",
        r.kind,
        r.name,
        r.status,
        r.elapsed.as_secs_f64()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_rows_update_in_place_and_count_finished_ones() {
        let mut rows = Vec::new();
        let t = Duration::from_millis(1500);
        upsert(
            &mut rows,
            "API",
            "http://127.0.0.1:1",
            "Ready",
            RowState::Done,
            t,
        );
        upsert(
            &mut rows,
            "Container",
            "p-a-1",
            "Creating",
            RowState::Working,
            t,
        );
        upsert(
            &mut rows,
            "Container",
            "p-b-1",
            "Creating",
            RowState::Working,
            t,
        );
        assert!(render(&rows, 0, 200).starts_with("[+] Running 1/3\n"));
        upsert(&mut rows, "Container", "p-a-1", "Ready", RowState::Done, t);
        upsert(
            &mut rows,
            "Container",
            "p-b-1",
            "not ready: exited with code 1",
            RowState::Failed,
            t,
        );
        let block = render(&rows, 0, 200);
        assert_eq!(rows.len(), 3, "a row is replaced, not appended");
        let lines: Vec<&str> = block.lines().collect();
        assert_eq!(lines[0], "[+] Running 3/3");
        assert!(lines[2].starts_with(" ✔ Container p-a-1") && lines[2].contains("Ready"));
        assert!(lines[2].ends_with("1.5s"));
        assert!(
            lines[3].starts_with(" ✘ Container p-b-1") && lines[3].contains("exited with code 1")
        );
        // Cut to the terminal width so the cursor can move back over the block.
        let narrow = render(&rows, 0, 30);
        assert!(narrow.lines().all(|l| l.chars().count() <= 30), "{narrow}");
        assert!(narrow.lines().nth(1).is_some_and(|l| l.ends_with('…')));
    }

    #[test]
    fn failed_rows_and_overflow_are_committed_and_still_counted() {
        let t = Duration::ZERO;
        let mut live = Live::default();
        for i in 0..5 {
            upsert(
                &mut live.rows,
                "Container",
                &format!("c{i}"),
                "Created",
                RowState::Done,
                t,
            );
        }
        upsert(
            &mut live.rows,
            "Container",
            "c5",
            "Waiting",
            RowState::Working,
            t,
        );
        upsert(
            &mut live.rows,
            "Container",
            "c6",
            "Waiting",
            RowState::Working,
            t,
        );
        upsert(
            &mut live.rows,
            "Container",
            "c2",
            "not ready: OOM-killed",
            RowState::Failed,
            t,
        );
        let out = commit(&mut live, 3);
        let names: Vec<&str> = out.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            ["c2", "c0", "c1", "c3"],
            "failed first, then oldest finished"
        );
        assert_eq!(live.rows.len(), 3);
        assert_eq!(live.committed, 4);
        assert!(render(&live.rows, live.committed, 200).starts_with("[+] Running 5/7\n"));
        // A working row at the top is never committed, even when the block is full.
        let mut stuck = Live::default();
        upsert(
            &mut stuck.rows,
            "Container",
            "w",
            "Waiting",
            RowState::Working,
            t,
        );
        upsert(
            &mut stuck.rows,
            "Container",
            "d",
            "Ready",
            RowState::Done,
            t,
        );
        assert!(commit(&mut stuck, 1).is_empty());
    }
}
