//! The `ninetrix` binary is statically linked and runs in an empty root: that is what lets the
//! CLI put its own executable into a `FROM scratch` image, offline.

use std::process::Command;

use ninetrix_e2e::{elf_linkage, is_root, ninetrix_bin};

#[test]
fn the_binary_needs_no_dynamic_loader_or_shared_library() {
    let bytes = std::fs::read(ninetrix_bin()).unwrap();
    let linkage = elf_linkage(&bytes).unwrap();
    assert!(
        !linkage.has_interpreter,
        "ninetrix names a dynamic loader: {linkage:?}"
    );
    assert_eq!(
        linkage.needed_libraries, 0,
        "ninetrix needs shared libraries: {linkage:?}"
    );
}

#[test]
fn the_binary_runs_in_an_empty_root() {
    let root = tempfile::tempdir().unwrap();
    std::fs::copy(ninetrix_bin(), root.path().join("ninetrix")).unwrap();
    let example =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../agentfile.example.yaml");
    std::fs::copy(example, root.path().join("agentfile.yaml")).unwrap();
    // Nothing else: no /lib, no /etc, no /dev, no /proc.
    let mut cmd = if is_root() {
        Command::new("chroot")
    } else {
        // Unprivileged: a user namespace maps us to root so chroot is allowed.
        let mut c = Command::new("unshare");
        c.args(["--map-root-user", "chroot"]);
        c
    };
    let out = cmd
        .arg(root.path())
        .args(["/ninetrix", "validate", "--json", "-f", "/agentfile.yaml"])
        .output()
        .expect("chroot (coreutils) or unshare (util-linux) is installed");
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !is_root() && stderr.contains("Operation not permitted") {
        // No unprivileged user namespaces here: only root can chroot (this skips).
        assert!(ninetrix_testkit::require(ninetrix_testkit::Need::Root).is_none());
        return;
    }
    assert!(
        out.status.success(),
        "exit {:?}\nstderr: {stderr}",
        out.status
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(v["valid"], true);
    assert_eq!(v["pool"], "research-pool");
}

#[test]
fn the_runner_runs_a_batch_job_in_an_empty_root() {
    if ninetrix_testkit::require(ninetrix_testkit::Need::Root).is_none() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    std::fs::copy(ninetrix_bin(), root.path().join("ninetrix")).unwrap();
    std::fs::create_dir(root.path().join("workspace")).unwrap();
    // The example's batch agent: a scripted turn that writes digest.md and answers.
    let example =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../agentfile.example.yaml");
    let out = Command::new(ninetrix_bin())
        .args(["validate", "--json", "-f"])
        .arg(&example)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let digest = v["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "digest")
        .unwrap();
    // No /dev, no /etc, no /proc, no CA store: the binary must not need them.
    let out = Command::new("chroot")
        .arg(root.path())
        .args(["/ninetrix", "runner"])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("AGENTFILE_AGENT_SPEC", digest.to_string())
        .env(
            "AGENTFILE_THREAD_ID",
            "01936f5e-7c1a-7d3e-9f4b-2a6c8e0d1f35",
        )
        .env("AGENTFILE_WORKSPACE", "/workspace")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "The digest is in digest.md.\n"
    );
    let digest = std::fs::read_to_string(root.path().join("workspace/digest.md")).unwrap();
    assert!(digest.starts_with("# Daily digest"));
}
