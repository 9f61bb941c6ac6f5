//! The Docker Engine before and after a test run, read through the `docker` CLI: which objects
//! the run left behind. Two steps change the engine:
//!
//! - the runner images the tests' pools built (`ninetrix/runner:<version>-<binary digest>`, and
//!   the untagged copies concurrent `up`s of the same binary leave) are the suite's shared
//!   fixture — no one test can remove them while others use them — so the run removes those
//!   that are new, unless a container still uses one (then it is a leftover);
//! - a leftover network is removed once to learn whether it is the Docker 20.10 stale-endpoint
//!   case (removal refused for "active endpoints") — the one documented exception, reported but
//!   not failed.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};

/// The engine's objects at one moment: ID → name, per kind, and its swarm state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Snapshot {
    containers: BTreeMap<String, String>,
    networks: BTreeMap<String, String>,
    volumes: BTreeMap<String, String>,
    images: BTreeMap<String, String>,
    swarm: String,
}

impl Snapshot {
    /// The engine as it is now, or `None` when no engine answers.
    pub(crate) fn take() -> Option<Snapshot> {
        let swarm = docker(&["info", "--format", "{{.Swarm.LocalNodeState}}"])?;
        Some(Snapshot {
            containers: pairs(&docker(&[
                "ps",
                "-a",
                "--no-trunc",
                "--format",
                "{{.ID}}\t{{.Names}}",
            ])?),
            networks: pairs(&docker(&[
                "network",
                "ls",
                "--no-trunc",
                "--format",
                "{{.ID}}\t{{.Name}}",
            ])?),
            volumes: pairs(&docker(&[
                "volume",
                "ls",
                "--format",
                "{{.Name}}\t{{.Name}}",
            ])?),
            images: pairs(&docker(&[
                "image",
                "ls",
                "--no-trunc",
                "--format",
                "{{.ID}}\t{{.Repository}}:{{.Tag}}",
            ])?),
            swarm: swarm.trim().to_string(),
        })
    }
}

/// The label every runner image carries (cli/src/pool/image.rs).
const RUNNER_LABEL: &str = "dev.ninetrix.version";

/// Removes the runner images that are new since `before` (tagged `ninetrix/runner:…` or
/// untagged, with the runner label); answers what it removed. An image a container still uses
/// is not removed, so the check that follows names it.
pub(crate) fn remove_runner_images(before: &Snapshot) -> Vec<String> {
    let Some(listing) = docker(&[
        "image",
        "ls",
        "--no-trunc",
        "--filter",
        &format!("label={RUNNER_LABEL}"),
        "--format",
        "{{.ID}}\t{{.Repository}}:{{.Tag}}",
    ]) else {
        return vec![];
    };
    let mut removed = vec![];
    for (id, name) in runner_images_to_remove(before, &pairs(&listing)) {
        let target = if name == "<none>:<none>" { &id } else { &name };
        let ok = Command::new("docker")
            .args(["image", "rm", target])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            removed.push(format!("{name} ({})", short(&id)));
        }
    }
    removed
}

/// Of the labelled images now (ID → `repo:tag`), those the run built: new since `before`, and
/// named `ninetrix/runner:…` or untagged (pure).
fn runner_images_to_remove(
    before: &Snapshot,
    labelled: &BTreeMap<String, String>,
) -> Vec<(String, String)> {
    labelled
        .iter()
        .filter(|(id, _)| !before.images.contains_key(*id))
        .filter(|(_, name)| name.starts_with("ninetrix/runner:") || *name == "<none>:<none>")
        .map(|(id, name)| (id.clone(), name.clone()))
        .collect()
}

/// One object on the engine: its ID and the name it is shown by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Object {
    id: String,
    name: String,
}

impl std::fmt::Display for Object {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.name == self.id {
            f.write_str(&self.name)
        } else {
            write!(f, "{} ({})", self.name, short(&self.id))
        }
    }
}

/// What a run left: objects there after and not before, by kind.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Leftovers {
    containers: Vec<Object>,
    networks: Vec<Object>,
    volumes: Vec<Object>,
    images: Vec<Object>,
    /// Networks whose removal Docker refuses for stale endpoints.
    stale_networks: Vec<Object>,
    /// The swarm state it was left in, when the run changed it.
    swarm: Option<(String, String)>,
}

/// Compares two snapshots. A leftover network is tried once with `docker network rm` to tell
/// the stale-endpoint case apart.
pub(crate) fn leftovers(before: &Snapshot, after: &Snapshot) -> Leftovers {
    let mut left = diff(before, after);
    let (stale, networks) = std::mem::take(&mut left.networks)
        .into_iter()
        .partition(|n| refused_for_stale_endpoints(&n.id));
    left.stale_networks = stale;
    left.networks = networks;
    left
}

/// The objects in `after` that `before` does not have (pure).
fn diff(before: &Snapshot, after: &Snapshot) -> Leftovers {
    let new = |b: &BTreeMap<String, String>, a: &BTreeMap<String, String>| -> Vec<Object> {
        a.iter()
            .filter(|(id, _)| !b.contains_key(*id))
            .map(|(id, name)| Object {
                id: id.clone(),
                name: name.clone(),
            })
            .collect()
    };
    Leftovers {
        containers: new(&before.containers, &after.containers),
        networks: new(&before.networks, &after.networks),
        volumes: new(&before.volumes, &after.volumes),
        images: new(&before.images, &after.images),
        stale_networks: vec![],
        swarm: (before.swarm != after.swarm).then(|| (before.swarm.clone(), after.swarm.clone())),
    }
}

impl Leftovers {
    /// Whether the run left anything that is not the documented exception.
    pub(crate) fn fails(&self) -> bool {
        !(self.containers.is_empty()
            && self.networks.is_empty()
            && self.volumes.is_empty()
            && self.images.is_empty()
            && self.swarm.is_none())
    }

    /// The report: one line when the engine is as it was, else each leftover by kind.
    pub(crate) fn report(&self) -> String {
        let mut out = String::new();
        if !self.fails() {
            out.push_str("Docker: the run left nothing behind\n");
        } else {
            out.push_str(
                "Docker: the run left objects behind (a test did not clean up after itself):\n",
            );
            for (kind, list) in [
                ("container", &self.containers),
                ("network", &self.networks),
                ("volume", &self.volumes),
                ("image", &self.images),
            ] {
                for item in list {
                    out.push_str(&format!("  {kind} {item}\n"));
                }
            }
            if let Some((before, after)) = &self.swarm {
                out.push_str(&format!(
                    "  swarm: the engine was `{before}` before the run and is `{after}` after it\n"
                ));
            }
        }
        for n in &self.stale_networks {
            out.push_str(&format!(
                "Docker: network {n} is left with stale endpoints (the known Docker 20.10 \
                 exception, not a test's fault); `systemctl restart docker` then \
                 `docker network rm` removes it\n"
            ));
        }
        out
    }
}

/// Tries `docker network rm ID` once: true when Docker refuses it for "active endpoints" (the
/// stale-endpoint case). A network it removes, or refuses for another reason, stays a leftover.
fn refused_for_stale_endpoints(id: &str) -> bool {
    Command::new("docker")
        .args(["network", "rm", id])
        .stdin(Stdio::null())
        .output()
        .is_ok_and(|o| {
            !o.status.success() && String::from_utf8_lossy(&o.stderr).contains("active endpoints")
        })
}

/// `docker ARGS…`'s stdout, or `None` when it fails.
fn docker(args: &[&str]) -> Option<String> {
    let out = Command::new("docker")
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `ID<TAB>name` lines as a map.
fn pairs(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(id, name)| (id.to_string(), name.to_string()))
        .collect()
}

/// An ID as `docker ps` shows it.
fn short(id: &str) -> &str {
    let id = id.strip_prefix("sha256:").unwrap_or(id);
    &id[..id.len().min(12)]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(items: &[(&str, &str)]) -> BTreeMap<String, String> {
        items
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn only_what_is_new_after_the_run_is_left_over() {
        let before = Snapshot {
            containers: map(&[("c1", "user-db")]),
            networks: map(&[("n1", "bridge")]),
            volumes: map(&[("v1", "v1")]),
            images: map(&[("sha256:aaaaaaaaaaaaaaaa", "postgres:16")]),
            swarm: "inactive".into(),
        };
        let mut after = before.clone();
        assert!(!diff(&before, &after).fails());
        assert_eq!(
            diff(&before, &after).report(),
            "Docker: the run left nothing behind\n"
        );
        after
            .containers
            .insert("c2".into(), "ninetrix-tx-a-1".into());
        after.volumes.insert("tx-ws".into(), "tx-ws".into());
        after.images.insert(
            "sha256:bbbbbbbbbbbbbbbbbb".into(),
            "ninetrix-runner:x".into(),
        );
        after.swarm = "active".into();
        let left = diff(&before, &after);
        assert!(left.fails());
        assert_eq!(
            left.report(),
            "Docker: the run left objects behind (a test did not clean up after itself):\n  \
             container ninetrix-tx-a-1 (c2)\n  volume tx-ws\n  \
             image ninetrix-runner:x (bbbbbbbbbbbb)\n  \
             swarm: the engine was `inactive` before the run and is `active` after it\n"
        );
    }

    #[test]
    fn only_runner_images_new_since_the_start_are_the_suites_to_remove() {
        let before = Snapshot {
            images: map(&[("sha256:old", "ninetrix/runner:0.1.0-aaaa")]),
            ..Snapshot::default()
        };
        let labelled = map(&[
            ("sha256:old", "ninetrix/runner:0.1.0-aaaa"),
            ("sha256:new", "ninetrix/runner:0.1.0-bbbb"),
            ("sha256:dup", "<none>:<none>"),
            ("sha256:mine", "my-agent-image:latest"),
        ]);
        assert_eq!(
            runner_images_to_remove(&before, &labelled),
            vec![
                ("sha256:dup".to_string(), "<none>:<none>".to_string()),
                (
                    "sha256:new".to_string(),
                    "ninetrix/runner:0.1.0-bbbb".to_string()
                ),
            ]
        );
    }

    #[test]
    fn a_stale_endpoint_network_is_reported_without_failing() {
        let left = Leftovers {
            stale_networks: vec![Object {
                id: "abcdef0123456789".into(),
                name: "ninetrix-tx".into(),
            }],
            ..Leftovers::default()
        };
        assert!(!left.fails());
        assert!(
            left.report()
                .contains("network ninetrix-tx (abcdef012345) is left with stale endpoints")
        );
    }
}
