//! `ninetrix k8s render` output validated against the Kubernetes schemas by the PyPI package
//! `kubernetes-validate` (`python3 -m kubernetes_validate --strict -k 1.30.0 FILE`), for every
//! example agentfile. Without the package the test says `SKIPPED: needs kubernetes-validate (…)`
//! and passes, unless NINETRIX_REQUIRE_KUBERNETES_VALIDATE=1 (CI) makes that a failure.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The Kubernetes version the schemas are taken from (StatefulSet, Job, Deployment, Service are
/// all stable there).
const KUBERNETES_VERSION: &str = "1.30.0";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// agentfile.example.yaml and every `*.yaml` under docs/ and examples/ that is an agentfile.
fn examples() -> Vec<PathBuf> {
    let mut out = vec![repo().join("agentfile.example.yaml")];
    for dir in ["docs", "examples"] {
        let Ok(entries) = std::fs::read_dir(repo().join(dir)) else {
            continue;
        };
        let mut found: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.extension().is_some_and(|x| x == "yaml" || x == "yml")
                    && std::fs::read_to_string(p).is_ok_and(|t| t.contains("agents:"))
            })
            .collect();
        found.sort();
        out.extend(found);
    }
    out
}

#[test]
fn rendered_manifests_pass_the_kubernetes_schemas() {
    let Some(python) = ninetrix_testkit::require(ninetrix_testkit::Need::KubernetesValidate) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    for (i, example) in examples().iter().enumerate() {
        for namespace in [None, Some("agents")] {
            let mut cmd = Command::new(assert_cmd::cargo::cargo_bin!("ninetrix"));
            cmd.env("AGENTFILE_HOME", dir.path())
                .args(["k8s", "render", "-f"])
                .arg(example)
                .args(["--image", "registry.example/ninetrix:test"]);
            if let Some(ns) = namespace {
                cmd.args(["--namespace", ns]);
            }
            let out = cmd.output().unwrap();
            assert!(
                out.status.success(),
                "render of {} failed: {}",
                example.display(),
                String::from_utf8_lossy(&out.stderr)
            );
            let file = dir
                .path()
                .join(format!("{i}-{}.yaml", namespace.unwrap_or("none")));
            std::fs::write(&file, &out.stdout).unwrap();
            let check = Command::new(&python)
                .args(["-m", "kubernetes_validate", "--strict", "--quiet"])
                .args(["-k", KUBERNETES_VERSION])
                .arg(&file)
                .output()
                .unwrap();
            assert!(
                check.status.success(),
                "{} does not validate:\n{}{}",
                example.display(),
                String::from_utf8_lossy(&check.stdout),
                String::from_utf8_lossy(&check.stderr)
            );
            let text = String::from_utf8_lossy(&out.stdout);
            let documents = text.matches("---\n").count();
            assert!(
                documents >= 3,
                "only {documents} objects for {}",
                example.display()
            );
        }
    }
}
