//! The lines of `ninetrix logs`, whichever backend they come from: Docker's frames reassembled
//! into timestamped lines, `--since` parsed, each source printed Compose-style (`agent-n | line`,
//! coloured in turn) or as JSON, with markers for restarts and replaced tasks.

use std::collections::HashMap;
use std::io::IsTerminal as _;

use anyhow::{Context as _, bail};
use bollard::Docker;
use bollard::container::LogOutput;
use bollard::query_parameters::LogsOptionsBuilder;
use chrono::{DateTime, Utc};
use futures_util::StreamExt as _;
use serde_json::json;

/// What `ninetrix logs` was asked for (its arguments, less the pool's name).
#[derive(Clone, Debug, Default)]
pub(crate) struct LogsSettings {
    /// Only this agent's sources.
    pub(crate) agent: Option<String>,
    /// Only this background job of `agent` (its name or ID; one host only).
    pub(crate) job: Option<String>,
    /// Keep following, across restarts.
    pub(crate) follow: bool,
    /// Only lines since this time (RFC 3339) or for this long (10m, 2h).
    pub(crate) since: Option<String>,
    /// Lines per source from the end (`all` for everything).
    pub(crate) tail: String,
    /// Show timestamps.
    pub(crate) timestamps: bool,
    /// No colours.
    pub(crate) no_color: bool,
    /// One JSON object per line.
    pub(crate) json: bool,
}

impl LogsSettings {
    /// Whether prefixes are coloured: stdout a terminal, no `--no-color`, no `NO_COLOR`, no
    /// `--json`.
    pub(crate) fn colored(&self) -> bool {
        std::io::stdout().is_terminal()
            && !self.no_color
            && std::env::var_os("NO_COLOR").is_none()
            && !self.json
    }

    /// `--since` as Docker's Unix seconds.
    pub(crate) fn since_secs(&self) -> anyhow::Result<Option<i32>> {
        self.since
            .as_deref()
            .map(|s| since_unix_secs(s, Utc::now()))
            .transpose()
    }
}

/// One reassembled log line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Line {
    pub(crate) time: DateTime<Utc>,
    pub(crate) stream: &'static str,
    pub(crate) text: String,
}

/// Reassembles lines from Docker's frames: a frame may hold part of a line or several lines.
#[derive(Default)]
pub(crate) struct Reassembler {
    partial: HashMap<&'static str, Vec<u8>>,
}

impl Reassembler {
    /// Feeds one frame's bytes; returns the complete lines.
    pub(crate) fn push(&mut self, stream: &'static str, bytes: &[u8]) -> Vec<Line> {
        let buf = self.partial.entry(stream).or_default();
        buf.extend_from_slice(bytes);
        let mut out = Vec::new();
        while let Some(i) = buf.iter().position(|&b| b == b'\n') {
            let raw: Vec<u8> = buf.drain(..=i).collect();
            out.extend(parse(stream, &raw[..raw.len() - 1]));
        }
        out
    }

    /// Feeds one of Docker's log frames (stdout, stderr or a TTY's console); returns the complete
    /// lines.
    pub(crate) fn frame(&mut self, frame: LogOutput) -> Vec<Line> {
        match frame {
            LogOutput::StdOut { message } | LogOutput::Console { message } => {
                self.push("stdout", &message)
            }
            LogOutput::StdErr { message } => self.push("stderr", &message),
            _ => Vec::new(),
        }
    }

    /// The unterminated rest of each stream (a last line without a newline).
    pub(crate) fn finish(&mut self) -> Vec<Line> {
        let mut out = Vec::new();
        for (stream, buf) in self.partial.drain() {
            if !buf.is_empty() {
                out.extend(parse(stream, &buf));
            }
        }
        out
    }
}

/// `TIMESTAMP text` (Docker's `timestamps=true` format).
fn parse(stream: &'static str, raw: &[u8]) -> Option<Line> {
    let s = String::from_utf8_lossy(raw);
    let s = s.trim_end_matches('\r');
    let (ts, text) = s.split_once(' ').unwrap_or((s, ""));
    let time = DateTime::parse_from_rfc3339(ts).ok()?.with_timezone(&Utc);
    Some(Line {
        time,
        stream,
        text: text.to_string(),
    })
}

/// `--since`: RFC 3339, or relative (`45s`, `10m`, `2h`, `1d`: the agentfile's duration rule,
/// [`ninetrix_agentfile::units::parse_duration`]). A duration that reaches before any
/// representable time is an error naming the flag, never an overflow.
pub(crate) fn parse_since(s: &str, now: DateTime<Utc>) -> anyhow::Result<DateTime<Utc>> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Ok(t.with_timezone(&Utc));
    }
    let Some(secs) = ninetrix_agentfile::units::parse_duration(s) else {
        // Not a duration: with no number first, say what to write (the cause names the missing
        // number); after a number, the unit is what is wrong.
        let (number, _) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
        number.parse::<i64>().with_context(|| {
            format!("--since `{s}`: use RFC 3339 (2026-01-01T10:00:00Z) or a duration like 10m")
        })?;
        bail!("--since `{s}`: the unit must be s, m, h or d");
    };
    i64::try_from(secs)
        .ok()
        .and_then(chrono::Duration::try_seconds)
        .and_then(|d| now.checked_sub_signed(d))
        .with_context(|| {
            format!("--since `{s}` reaches too far back; use a shorter duration, or leave --since out for every line")
        })
}

/// `--since` as the Unix seconds Docker takes (a 32-bit count from 1970): a time before 1970
/// or after 2038 is an error naming the flag and what to use instead.
pub(crate) fn since_unix_secs(s: &str, now: DateTime<Utc>) -> anyhow::Result<i32> {
    let t = parse_since(s, now)?;
    if t.timestamp() < 0 {
        bail!(
            "--since `{s}` is before 1970 ({}), older than any log line; leave --since out for every line",
            t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        );
    }
    i32::try_from(t.timestamp()).with_context(|| {
        format!(
            "--since `{s}` is after 2038 ({}), beyond what Docker's log API takes; use a time before now",
            t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        )
    })
}

/// The colours of the prefixes, one per source in turn.
pub(crate) const COLORS: [u8; 6] = [36, 33, 32, 35, 34, 96];

/// One log source (a container, or a Swarm task) as printed.
#[derive(Clone)]
pub(crate) struct Target {
    /// The container or task ID.
    pub(crate) id: String,
    /// `agent-n`.
    pub(crate) prefix: String,
    pub(crate) agent: String,
    pub(crate) replica: String,
    pub(crate) durable: bool,
    pub(crate) color: Option<u8>,
}

/// Prints one line with its source's prefix (or as JSON).
pub(crate) fn print_line(t: &Target, width: usize, l: &Line, args: &LogsSettings) {
    if args.json {
        outln!(
            "{}",
            json!({"container": t.prefix, "agent": t.agent, "replica": t.replica, "stream": l.stream, "time": l.time, "line": l.text})
        );
        return;
    }
    let prefix = format!("{:<width$} |", t.prefix);
    let prefix = match t.color {
        Some(c) => format!("\x1b[{c}m{prefix}\x1b[0m"),
        None => prefix,
    };
    if args.timestamps {
        outln!(
            "{prefix} {} {}",
            l.time.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            l.text
        );
    } else {
        outln!("{prefix} {}", l.text);
    }
}

/// Prints a marker line (a restart, a replaced task) for a source.
pub(crate) fn marker(t: &Target, width: usize, text: &str, args: &LogsSettings) {
    if args.json {
        outln!(
            "{}",
            json!({"container": t.prefix, "agent": t.agent, "replica": t.replica, "stream": "marker", "time": Utc::now(), "line": text})
        );
    } else {
        let line = format!("{:<width$} {text}", t.prefix);
        match t.color {
            Some(c) => outln!("\x1b[{c}m{line}\x1b[0m"),
            None => outln!("{line}"),
        }
    }
}

/// A source's lines so far (no follow), reassembled.
pub(crate) async fn read(
    docker: &Docker,
    id: &str,
    follow: bool,
    tail: &str,
    since: Option<i32>,
) -> Vec<Line> {
    let mut stream = docker.logs(id, Some(options(follow, tail, since)));
    let mut r = Reassembler::default();
    let mut out = Vec::new();
    while let Some(Ok(frame)) = stream.next().await {
        out.extend(r.frame(frame));
    }
    out.extend(r.finish());
    out
}

/// The log request of a container or a Swarm task: both streams, timestamped.
pub(crate) fn options(
    follow: bool,
    tail: &str,
    since: Option<i32>,
) -> bollard::query_parameters::LogsOptions {
    let opts = LogsOptionsBuilder::default()
        .stdout(true)
        .stderr(true)
        .timestamps(true)
        .follow(follow)
        .tail(tail);
    match since {
        Some(s) => opts.since(s).build(),
        None => opts.build(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_reassembled_into_lines() {
        let mut r = Reassembler::default();
        assert!(r.push("stdout", b"2026-01-01T00:00:00.5Z hel").is_empty());
        let lines = r.push(
            "stdout",
            b"lo\n2026-01-01T00:00:01Z two\n2026-01-01T00:00:02Z thr",
        );
        assert_eq!(
            lines.iter().map(|l| l.text.as_str()).collect::<Vec<_>>(),
            ["hello", "two"]
        );
        let err = r.push("stderr", b"2026-01-01T00:00:01.5Z oops\n");
        assert_eq!((err[0].stream, err[0].text.as_str()), ("stderr", "oops"));
        let rest = r.finish();
        assert_eq!(rest.len(), 1);
        assert_eq!(rest[0].text, "thr", "a last line without a newline is kept");
    }

    #[test]
    fn since_accepts_rfc3339_and_durations() {
        let now: DateTime<Utc> = "2026-01-01T12:00:00Z".parse().unwrap();
        assert_eq!(
            parse_since("10m", now).unwrap(),
            "2026-01-01T11:50:00Z".parse::<DateTime<Utc>>().unwrap()
        );
        assert_eq!(
            parse_since("2h", now).unwrap(),
            "2026-01-01T10:00:00Z".parse::<DateTime<Utc>>().unwrap()
        );
        assert_eq!(
            parse_since("2026-01-01T09:00:00Z", now).unwrap(),
            "2026-01-01T09:00:00Z".parse::<DateTime<Utc>>().unwrap()
        );
        assert!(parse_since("yesterday", now).is_err());
        assert!(parse_since("5y", now).is_err());
    }

    #[test]
    fn since_too_far_back_or_ahead_is_an_error_naming_the_flag_never_a_panic() {
        let now: DateTime<Utc> = "2026-01-01T10:00:00Z".parse().unwrap();
        for far in ["100000000d", "9223372036854775807s", "99999999999999h"] {
            let e = since_unix_secs(far, now).unwrap_err().to_string();
            assert!(e.contains(&format!("--since `{far}`")), "{e}");
            assert!(e.contains("leave --since out"), "{e}");
        }
        let e = since_unix_secs("30000d", now).unwrap_err().to_string();
        assert!(e.contains("before 1970"), "{e}");
        let e = since_unix_secs("2100-01-01T00:00:00Z", now)
            .unwrap_err()
            .to_string();
        assert!(e.contains("after 2038"), "{e}");
        assert_eq!(since_unix_secs("10m", now).unwrap(), 1_767_261_000);
    }
}
