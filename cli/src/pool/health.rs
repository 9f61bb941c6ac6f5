//! The runners' health, read when someone asks instead of by a Docker healthcheck. Every
//! container of a pool mounts the pool's health volume (`ninetrix-<pool>-status`) at
//! [`MOUNT`], and its runner keeps its report there in a file named after the container
//! (`AGENTFILE_HEALTH_FILE`, rewritten on every change and every 10 s). `ps` reads the whole
//! directory with one archive request through any running container of the pool, `invoke` and
//! `up` read one file; [`verdict`] judges what was read, without I/O.
//!
//! Why not the image's HEALTHCHECK: every check is a `docker exec` (dockerd, containerd, the shim
//! and runc start a process in the container), ~70 ms of CPU on Docker 20.10, so 500 idle agents
//! checked every 15 s kept both cores busy. An archive request costs about as much (Docker 20.10
//! re-executes itself as `docker-tar` for each), but one serves a whole pool, and only when a
//! command runs: an idle pool costs nothing but the runners' own small file writes.

use std::collections::HashMap;
use std::io::Read as _;
use std::time::Duration;

use bollard::Docker;
use bollard::query_parameters::DownloadFromContainerOptionsBuilder;
use futures_util::StreamExt as _;
use ninetrix_runner::health::{HealthReport, judge};

/// A runner's health: the verdict on its report (or a Docker healthcheck's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Health {
    /// Not checked yet (the start period).
    Starting,
    /// The last check passed.
    Healthy,
    /// The last check failed.
    Unhealthy,
}

/// Where every container of a pool mounts the pool's health volume.
pub(crate) const MOUNT: &str = "/run/ninetrix/pool";

/// How long after its start a runner that has not reported yet counts as starting (as Docker's
/// `--start-period` did), not unhealthy.
pub(crate) const START_PERIOD: Duration = Duration::from_secs(30);

/// A report written this long before the container's recorded start still belongs to this run:
/// Docker records the start after the process began, and the runner reports at once.
const START_SLACK_MS: i64 = 2_000;

/// Largest health archive read (a report is ~100 bytes, a tar entry 1 KiB: thousands of agents).
const MAX_ARCHIVE: usize = 16 * 1024 * 1024;

/// A container's report file inside the container (its `AGENTFILE_HEALTH_FILE`).
pub(crate) fn file_of(container: &str) -> String {
    format!("{MOUNT}/{container}")
}

/// The mount of the pool's health volume at [`MOUNT`], labelled with the pool when Docker creates
/// it (`down --purge` finds it by the label).
pub(crate) fn volume_mount(pool: &str) -> bollard::models::Mount {
    bollard::models::Mount {
        target: Some(MOUNT.into()),
        source: Some(crate::objects::health_volume_name(pool)),
        typ: Some(bollard::models::MountType::VOLUME),
        volume_options: Some(bollard::models::MountVolumeOptions {
            labels: Some([(crate::objects::POOL.to_string(), pool.to_string())].into()),
            ..bollard::models::MountVolumeOptions::default()
        }),
        ..bollard::models::Mount::default()
    }
}

/// What was found of a runner's report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Seen {
    /// The report.
    Report(HealthReport),
    /// No report (yet).
    Missing,
    /// A file that is not a report, or a read that failed: why.
    Unreadable(String),
}

impl Seen {
    fn parse(bytes: &[u8]) -> Seen {
        serde_json::from_slice(bytes)
            .map(Seen::Report)
            .unwrap_or_else(|e| Seen::Unreadable(format!("the health report is not valid: {e}")))
    }
}

/// Judges a running container's health from its report: `started_ms` is when Docker last
/// started it, `now_ms` the time now (both Unix milliseconds). A report from before this start
/// is an earlier run's and does not count. Without a report of this run the runner is starting
/// for [`START_PERIOD`], then unhealthy; with one, [`judge`] decides (a dependency down, or no
/// report for 60 s, is unhealthy).
pub(crate) fn verdict(seen: &Seen, started_ms: Option<i64>, now_ms: i64) -> (Health, String) {
    let this_run = |r: &HealthReport| of_this_run(r, started_ms);
    match seen {
        Seen::Report(r) if this_run(r) => {
            let (healthy, line) = judge(r, now_ms);
            let health = if healthy {
                Health::Healthy
            } else {
                Health::Unhealthy
            };
            (health, line)
        }
        Seen::Unreadable(why) => (Health::Unhealthy, why.clone()),
        Seen::Report(_) | Seen::Missing => {
            let up_for =
                started_ms.map(|s| Duration::from_millis(u64::try_from(now_ms - s).unwrap_or(0)));
            match up_for {
                Some(t) if t > START_PERIOD => (
                    Health::Unhealthy,
                    format!(
                        "the runner has not reported since it started {} s ago",
                        t.as_secs()
                    ),
                ),
                _ => (Health::Starting, "starting".into()),
            }
        }
    }
}

/// When the only thing wrong in a runner's report of this run is the checkpoint API (a fresh
/// report, the model fine): the runner's words. A caller that reaches the API itself — `invoke`,
/// right after an API restart that the runner has not noticed yet — knows the message it queues
/// is safe there and will be taken once the runner reconnects, so it queues rather than refuses.
pub(crate) fn api_complaint(seen: &Seen, started_ms: Option<i64>, now_ms: i64) -> Option<String> {
    let Seen::Report(r) = seen else {
        return None;
    };
    // `judge` names the API only when the report is fresh and the API is its first complaint.
    match (&r.api, &r.model) {
        (Some(api), None) if of_this_run(r, started_ms) && judge(r, now_ms).1 == *api => {
            Some(api.clone())
        }
        _ => None,
    }
}

/// Whether a report was written in the container's current run (Docker last started it at
/// `started_ms`), not left by an earlier one.
fn of_this_run(r: &HealthReport, started_ms: Option<i64>) -> bool {
    started_ms.is_none_or(|s| r.written_ms + START_SLACK_MS >= s)
}

/// Docker's `StartedAt` (RFC 3339) as Unix milliseconds; `None` if it never started.
pub(crate) fn started_ms(info: &bollard::models::ContainerInspectResponse) -> Option<i64> {
    info.state
        .as_ref()
        .and_then(|s| s.started_at.as_deref())
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.timestamp_millis())
        .filter(|&ms| ms > 0)
}

/// How many times a report is read before a broken one counts. Docker's archive takes a file's
/// size and then opens it, so a read that meets the runner's rename (a new report of another
/// length) comes back cut — a torn read, which reading again fixes (CI saw one in 844 tests).
const READS: usize = 4;

/// What an archive of reports held, by file name, and whether a read again may do better: an
/// entry that is not valid JSON, or a tar cut short, is torn.
fn reports_in(tar: &[u8]) -> (HashMap<String, Seen>, bool) {
    let mut out = HashMap::new();
    let mut archive = tar::Archive::new(tar);
    let entries = match archive.entries() {
        Ok(e) => e,
        Err(_) => return (out, true),
    };
    for entry in entries {
        let Ok(mut entry) = entry else {
            return (out, true);
        };
        if entry.header().entry_type() != tar::EntryType::Regular {
            continue;
        }
        let Some(name) = entry
            .path()
            .ok()
            .and_then(|p| p.file_name().and_then(|n| n.to_str()).map(str::to_string))
        else {
            continue;
        };
        // The runner's report being written (renamed over the report when complete).
        if name.ends_with(".tmp") {
            continue;
        }
        let mut bytes = Vec::new();
        if let Err(e) = entry.by_ref().take(64 * 1024).read_to_end(&mut bytes) {
            out.insert(
                name,
                Seen::Unreadable(format!("cannot read the health report: {e}")),
            );
            return (out, true);
        }
        out.insert(name, Seen::parse(&bytes));
    }
    let torn = out.values().any(|s| matches!(s, Seen::Unreadable(_)));
    (out, torn)
}

/// Every report in the pool's health directory, by container name, read through the running
/// container `through` (one archive request, again after a torn read). Errors if the request
/// fails.
pub(crate) async fn read_pool(
    docker: &Docker,
    through: &str,
) -> anyhow::Result<HashMap<String, Seen>> {
    let mut read = HashMap::new();
    for _ in 0..READS {
        let tar = download(docker, through, MOUNT).await?;
        let torn;
        (read, torn) = reports_in(&tar);
        if !torn {
            break;
        }
    }
    Ok(read)
}

/// One container's report, read from the container itself (again after a torn read).
pub(crate) async fn read_one(docker: &Docker, container: &str, name: &str) -> Seen {
    let mut seen = Seen::Missing;
    for _ in 0..READS {
        let tar = match download(docker, container, &file_of(name)).await {
            Ok(t) => t,
            Err(e)
                if e.downcast_ref::<bollard::errors::Error>()
                    .is_some_and(crate::docker::is_not_found) =>
            {
                return Seen::Missing;
            }
            Err(e) => return Seen::Unreadable(format!("cannot read the health report: {e:#}")),
        };
        let (mut read, torn) = reports_in(&tar);
        // The archive of one file holds that file, under its own name.
        seen = read.remove(name).unwrap_or(if torn {
            Seen::Unreadable("cannot read the health report: the archive was cut short".into())
        } else {
            Seen::Missing
        });
        if !torn {
            break;
        }
    }
    seen
}

/// `GET /containers/{id}/archive?path=…`: the tar, bounded.
async fn download(docker: &Docker, container: &str, path: &str) -> anyhow::Result<Vec<u8>> {
    let options = DownloadFromContainerOptionsBuilder::default()
        .path(path)
        .build();
    let mut stream = docker.download_from_container(container, Some(options));
    let mut tar = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        if tar.len() + chunk.len() > MAX_ARCHIVE {
            anyhow::bail!("the health directory of {container} is larger than {MAX_ARCHIVE} bytes");
        }
        tar.extend_from_slice(&chunk);
    }
    Ok(tar)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ninetrix_runner::health::Activity;

    fn report(written_ms: i64, model: Option<&str>) -> Seen {
        Seen::Report(HealthReport {
            context: None,
            activity: Activity::Working { seq: 4 },
            api: None,
            model: model.map(str::to_string),
            mcp: Default::default(),
            failed_turns: None,
            sessions_waiting: None,
            written_ms,
        })
    }

    const START: i64 = 1_000_000;

    #[test]
    fn a_fresh_report_of_this_run_is_judged_by_the_runners_rule() {
        assert_eq!(
            verdict(&report(START + 500, None), Some(START), START + 5_000),
            (Health::Healthy, "working on message 4".into())
        );
        let down = "model unreachable: connection refused at http://h:9/v1 (runtime.base_url)";
        assert_eq!(
            verdict(&report(START + 500, Some(down)), Some(START), START + 5_000),
            (Health::Unhealthy, down.into())
        );
        // Written just before Docker recorded the start: still this run.
        assert_eq!(
            verdict(&report(START - 1_000, None), Some(START), START + 5_000).0,
            Health::Healthy
        );
    }

    #[test]
    fn a_runner_that_stopped_reporting_is_unhealthy() {
        let (health, line) = verdict(&report(START + 500, None), Some(START), START + 90_500);
        assert_eq!(health, Health::Unhealthy);
        assert_eq!(line, "the runner has not reported for 90 s");
    }

    #[test]
    fn without_a_report_of_this_run_it_is_starting_then_unhealthy() {
        let earlier_run = report(START - 60_000, None);
        for seen in [&Seen::Missing, &earlier_run] {
            assert_eq!(
                verdict(seen, Some(START), START + 10_000),
                (Health::Starting, "starting".into())
            );
            let (health, line) = verdict(seen, Some(START), START + 45_000);
            assert_eq!(health, Health::Unhealthy);
            assert_eq!(
                line,
                "the runner has not reported since it started 45 s ago"
            );
        }
        let (health, line) = verdict(
            &Seen::Unreadable("the health report is not valid: EOF".into()),
            Some(START),
            START + 1_000,
        );
        assert_eq!(health, Health::Unhealthy);
        assert!(line.contains("not valid"), "{line}");
    }

    /// A tar of the given files, as Docker's archive route sends it.
    fn tar_of(files: &[(&str, &[u8])]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (name, bytes) in files {
            let mut h = tar::Header::new_gnu();
            h.set_size(bytes.len() as u64);
            h.set_mode(0o644);
            h.set_cksum();
            b.append_data(&mut h, name, *bytes).unwrap();
        }
        b.into_inner().unwrap()
    }

    #[test]
    fn a_report_cut_by_the_runners_rename_is_a_torn_read() {
        let whole: &[u8] = br#"{"activity":{"state":"serving"},"written_ms":7}"#;
        let (read, torn) = reports_in(&tar_of(&[("a", whole), ("b", whole), ("b.tmp", b"{")]));
        assert!(!torn);
        assert_eq!(read.len(), 2, "a report being written is not read");
        assert!(matches!(read["a"], Seen::Report(_)));
        assert!(matches!(read["b"], Seen::Report(_)));
        // The old report's length with the new report's bytes: cut JSON.
        let (read, torn) = reports_in(&tar_of(&[("a", whole), ("b", &whole[..30])]));
        assert!(torn);
        assert!(matches!(read["b"], Seen::Unreadable(_)));
        // A tar cut short (Docker ends the stream when a file shrank under it).
        let tar = tar_of(&[("a", whole)]);
        let (_, torn) = reports_in(&tar[..600]);
        assert!(torn);
        // Nothing there is not torn: the runner has not reported yet.
        let (read, torn) = reports_in(&tar_of(&[]));
        assert!(!torn && read.is_empty());
    }

    #[test]
    fn names_follow_the_pool_and_the_container() {
        assert_eq!(crate::objects::health_volume_name("p"), "ninetrix-p-status");
        assert_eq!(
            file_of("ninetrix-p-a-1"),
            "/run/ninetrix/pool/ninetrix-p-a-1"
        );
        assert!(matches!(Seen::parse(b"{"), Seen::Unreadable(_)));
        assert_eq!(
            Seen::parse(br#"{"activity":{"state":"serving"},"written_ms":7}"#),
            Seen::Report(HealthReport {
                context: None,
                activity: Activity::Serving,
                api: None,
                model: None,
                mcp: Default::default(),
                failed_turns: None,
                sessions_waiting: None,
                written_ms: 7,
            })
        );
    }
}
