//! What the egress proxy tells about itself: one JSON line on stdout per decision (what
//! `ninetrix logs` shows), and the status file (`--status-file`) — counts since start and the
//! last refusals — which the proxy replaces atomically and `ninetrix ps` reads.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// How many refusals the status file keeps.
pub(crate) const LAST_REFUSED: usize = 10;

/// One connection attempt the proxy decided on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Attempt {
    /// The destination host as asked (a name lower-cased, an IPv6 literal in brackets).
    pub(crate) host: String,
    /// The destination port.
    pub(crate) port: u16,
    /// The client's IP address (the agent's container).
    pub(crate) from: String,
    /// The client's container, when Docker's DNS names its address (refusals only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) container: Option<String>,
    /// When, in Unix milliseconds.
    pub(crate) at_ms: u64,
}

/// The proxy's decision on an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// On the allow-list: tunnelled or forwarded.
    Allowed,
    /// Not on the allow-list: answered 403.
    Refused,
}

/// The stdout line of a decision:
/// `{"event":"egress_refused","host":…,"port":…,"from":…,"at_ms":…}` (or `egress_allowed`).
pub(crate) fn event_line(decision: Decision, attempt: &Attempt) -> String {
    #[derive(Serialize)]
    struct Event<'a> {
        event: &'static str,
        #[serde(flatten)]
        attempt: &'a Attempt,
    }
    let event = match decision {
        Decision::Allowed => "egress_allowed",
        Decision::Refused => "egress_refused",
    };
    serde_json::to_string(&Event { event, attempt })
        .expect("an event of strings and numbers always serializes")
}

/// Prints a decision's line on stdout (a closed stdout is ignored: the proxy keeps serving).
pub(crate) fn log(decision: Decision, attempt: &Attempt) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", event_line(decision, attempt));
    let _ = out.flush();
}

/// The status file: `{"refused": N, "allowed": N, "last_refused": [Attempt…]}`, the most
/// recent refusal last.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct EgressStatus {
    /// Refusals since the proxy started.
    pub(crate) refused: u64,
    /// Allowed connections since the proxy started.
    pub(crate) allowed: u64,
    /// The last [`LAST_REFUSED`] refusals, oldest first.
    pub(crate) last_refused: Vec<Attempt>,
}

/// Why the status file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StatusError {
    /// Reading failed.
    #[error("cannot read the egress status {}: {error}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The file is not a status.
    #[error("{} is not an egress status file: {error}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// Why.
        error: serde_json::Error,
    },
    /// Writing (the temporary file or the rename) failed.
    #[error("cannot write the egress status {}: {error}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
}

impl EgressStatus {
    /// One line for `ps`: `egress: 12 allowed, 2 refused (last: evil.example:443 from
    /// tshop-worker-1)`.
    pub(crate) fn line(&self) -> String {
        let mut line = format!("egress: {} allowed, {} refused", self.allowed, self.refused);
        if let Some(last) = self.last_refused.last() {
            line.push_str(&format!(
                " (last: {}:{} from {})",
                last.host,
                last.port,
                last.container.as_deref().unwrap_or(&last.from)
            ));
        }
        line
    }

    /// Counts a refusal and keeps it among the last [`LAST_REFUSED`].
    pub(crate) fn record_refusal(&mut self, attempt: Attempt) {
        self.refused += 1;
        self.last_refused.push(attempt);
        let excess = self.last_refused.len().saturating_sub(LAST_REFUSED);
        self.last_refused.drain(..excess);
    }

    /// Counts an allowed connection.
    pub(crate) fn record_allowed(&mut self) {
        self.allowed += 1;
    }

    /// Reads a status file.
    #[cfg_attr(
        not(test),
        expect(dead_code, reason = "`ninetrix ps` reads it once pools run the proxy")
    )]
    pub(crate) fn read(path: &Path) -> Result<EgressStatus, StatusError> {
        let text = std::fs::read(path).map_err(|error| StatusError::Read {
            path: path.to_path_buf(),
            error,
        })?;
        serde_json::from_slice(&text).map_err(|error| StatusError::Parse {
            path: path.to_path_buf(),
            error,
        })
    }

    /// Replaces the file at `path` with this status: written to `.<name>.tmp` in the same
    /// directory, then renamed over it, so a reader sees the old or the new status, never half.
    pub(crate) async fn write(&self, path: &Path) -> Result<(), StatusError> {
        let fail = |error| StatusError::Write {
            path: path.to_path_buf(),
            error,
        };
        let name = path
            .file_name()
            .ok_or_else(|| fail(std::io::Error::other("the path names no file")))?;
        let mut temp_name = std::ffi::OsString::from(".");
        temp_name.push(name);
        temp_name.push(".tmp");
        let temp = path.with_file_name(temp_name);
        let json = serde_json::to_vec(self).expect("a status always serializes");
        tokio::fs::write(&temp, json).await.map_err(fail)?;
        tokio::fs::rename(&temp, path).await.map_err(fail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(port: u16) -> Attempt {
        Attempt {
            host: "evil.example".into(),
            port,
            from: "172.18.0.5".into(),
            container: None,
            at_ms: 1_700_000_000_000,
        }
    }

    #[test]
    fn the_event_line_is_one_json_object_with_the_event_first() {
        assert_eq!(
            event_line(Decision::Refused, &attempt(443)),
            r#"{"event":"egress_refused","host":"evil.example","port":443,"from":"172.18.0.5","at_ms":1700000000000}"#
        );
        assert!(
            event_line(Decision::Allowed, &attempt(80))
                .starts_with(r#"{"event":"egress_allowed","#)
        );
    }

    #[test]
    fn the_status_keeps_counts_and_the_ten_latest_refusals_newest_last() {
        let mut status = EgressStatus::default();
        for port in 1..=12 {
            status.record_refusal(attempt(port));
        }
        status.record_allowed();
        assert_eq!(status.refused, 12);
        assert_eq!(status.allowed, 1);
        let ports: Vec<u16> = status.last_refused.iter().map(|a| a.port).collect();
        assert_eq!(ports, (3..=12).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn the_status_file_is_replaced_whole_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("egress.json");
        let mut status = EgressStatus::default();
        status.write(&path).await.unwrap();
        assert_eq!(EgressStatus::read(&path).unwrap(), status);
        status.record_refusal(attempt(443));
        status.write(&path).await.unwrap();
        assert_eq!(EgressStatus::read(&path).unwrap(), status);
        let json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"refused": 1, "allowed": 0, "last_refused": [
                {"host": "evil.example", "port": 443, "from": "172.18.0.5", "at_ms": 1_700_000_000_000u64}
            ]})
        );
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["egress.json"], "no temporary file is left");
    }

    #[test]
    fn reading_says_which_file_and_why() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.json");
        let e = EgressStatus::read(&missing).unwrap_err().to_string();
        assert!(e.contains("nope.json"), "{e}");
        let bad = dir.path().join("bad.json");
        std::fs::write(&bad, "{").unwrap();
        let e = EgressStatus::read(&bad).unwrap_err().to_string();
        assert!(e.contains("is not an egress status file"), "{e}");
    }
}
