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
        eprintln!("skipped: neither root nor unprivileged user namespaces are available here");
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
