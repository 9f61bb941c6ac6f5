//! What a test needs beyond the Quickstart's prerequisites (the Rust toolchain, cargo-nextest and
//! a running Docker Engine), decided when the test runs, not when it is compiled: installing a
//! package takes effect on the next run without a rebuild.
//!
//! A test that needs more asks [`require`] for it first. When the thing is there, the test gets
//! what it found (a URL, a program) and goes on. When it is missing the test prints
//! `SKIPPED: needs <X> (<how to get it>)` once, appends a line to the skip log the test command
//! summarises at the end of the run (`cargo xtask test`, see docs/testing.md), and returns
//! early — unless `NINETRIX_REQUIRE_<X>=1` is set (CI sets them all), which makes the absence a
//! failure instead.
//!
//! The module owns the list of needs ([`Need`]), how each is probed and what it says, the skip
//! log's line format ([`SkipRecord`]) and the freshness check of a binary against its sources
//! ([`stale_source`]). It depends on nothing but `std`, so the `xtask` runner shares it.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::SystemTime;

/// The environment variable naming the skip log: a file each skipped test appends one line to.
/// `cargo xtask test` sets it; without it, skips are only printed.
pub const SKIP_LOG_VAR: &str = "NINETRIX_SKIP_LOG";

/// Something a test needs that the Quickstart does not ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Need {
    /// A Postgres server (`NINETRIX_TEST_POSTGRES_URL`), for the Postgres half of the suite.
    Postgres,
    /// schemathesis (PyPI), for the OpenAPI contract tests.
    Schemathesis,
    /// openapi-spec-validator (PyPI), for the served OpenAPI document.
    OpenapiValidator,
    /// The official MCP Python SDK and two reference servers (PyPI).
    Mcp,
    /// The official A2A Python SDK (PyPI), for the A2A server's interop test.
    A2aSdk,
    /// Chromium (Debian), for the web console's browser test.
    Chromium,
    /// docker-compose (Debian), for docker/compose.yaml.
    DockerCompose,
    /// kubernetes-validate (PyPI), for the rendered Kubernetes manifests.
    KubernetesValidate,
    /// Root, for the test that chroots into an empty directory.
    Root,
    /// Permission to make the Docker Engine a single-node swarm manager for one test.
    Swarm,
}

impl Need {
    /// Every need, in the order the summary lists them.
    pub const ALL: [Need; 10] = [
        Need::Postgres,
        Need::Schemathesis,
        Need::OpenapiValidator,
        Need::Mcp,
        Need::A2aSdk,
        Need::Chromium,
        Need::DockerCompose,
        Need::KubernetesValidate,
        Need::Root,
        Need::Swarm,
    ];

    /// The name in the skip log and in `NINETRIX_REQUIRE_<KEY>`.
    pub fn key(self) -> &'static str {
        match self {
            Need::Postgres => "POSTGRES",
            Need::Schemathesis => "SCHEMATHESIS",
            Need::OpenapiValidator => "OPENAPI_VALIDATOR",
            Need::Mcp => "MCP",
            Need::A2aSdk => "A2A_SDK",
            Need::Chromium => "CHROMIUM",
            Need::DockerCompose => "DOCKER_COMPOSE",
            Need::KubernetesValidate => "KUBERNETES_VALIDATE",
            Need::Root => "ROOT",
            Need::Swarm => "SWARM",
        }
    }

    /// The need named by [`Need::key`].
    pub fn from_key(key: &str) -> Option<Need> {
        Need::ALL.into_iter().find(|n| n.key() == key)
    }

    /// What is needed, as a person would name it.
    pub fn what(self) -> &'static str {
        match self {
            Need::Postgres => "Postgres",
            Need::Schemathesis => "schemathesis",
            Need::OpenapiValidator => "openapi-spec-validator",
            Need::Mcp => "the MCP Python SDK and reference servers",
            Need::A2aSdk => "the A2A Python SDK",
            Need::Chromium => "Chromium",
            Need::DockerCompose => "docker-compose",
            Need::KubernetesValidate => "kubernetes-validate",
            Need::Root => "root",
            Need::Swarm => "a Docker swarm",
        }
    }

    /// How to get it (the versions `.ci/run` pins).
    pub fn how(self) -> &'static str {
        match self {
            Need::Postgres => {
                "set NINETRIX_TEST_POSTGRES_URL=postgres://USER@HOST:PORT/DB, a server where USER may create databases"
            }
            Need::Schemathesis => "pip install schemathesis==4.32.5",
            Need::OpenapiValidator => "pip install openapi-spec-validator==0.9.0",
            Need::Mcp => {
                "pip install mcp==2.3.0 mcp-server-time==2026.10.19 mcp-server-git==2026.10.19"
            }
            Need::A2aSdk => "pip install \"a2a-sdk[http-server]==1.3.0\"",
            Need::Chromium => "apt-get install chromium",
            Need::DockerCompose => "apt-get install docker-compose",
            Need::KubernetesValidate => "pip install kubernetes-validate==1.37.0",
            Need::Root => "run the tests as root",
            Need::Swarm => {
                "set NINETRIX_TEST_SWARM=1 to let the test make the engine a single-node swarm manager and leave the swarm after"
            }
        }
    }

    /// The variable that turns a missing need into a failure. For [`Need::Swarm`] it is the
    /// opt-in itself, since nothing else can be missing.
    pub fn require_var(self) -> String {
        match self {
            Need::Swarm => "NINETRIX_TEST_SWARM".to_string(),
            n => format!("NINETRIX_REQUIRE_{}", n.key()),
        }
    }

    /// Looks for the need on this machine: what was found (a URL, a program's path or name), or
    /// why it is missing.
    pub fn probe(self) -> Result<String, String> {
        match self {
            Need::Postgres => match std::env::var("NINETRIX_TEST_POSTGRES_URL") {
                Ok(url) if !url.is_empty() => Ok(url),
                _ => Err("NINETRIX_TEST_POSTGRES_URL is not set".into()),
            },
            Need::Schemathesis => {
                let program = std::env::var("NINETRIX_SCHEMATHESIS")
                    .unwrap_or_else(|_| "schemathesis".into());
                runs(&program, &["--version"])
                    .then_some(program.clone())
                    .ok_or_else(|| format!("`{program} --version` does not run"))
            }
            Need::OpenapiValidator => python_imports(&["openapi_spec_validator"]),
            Need::A2aSdk => python_imports(&["a2a.client", "httpx"]),
            Need::Mcp => {
                let python = python_imports(&["mcp", "mcp_server_time", "mcp_server_git"])?;
                for server in ["mcp-server-time", "mcp-server-git"] {
                    if which(server).is_none() {
                        return Err(format!("{server} is not on PATH"));
                    }
                }
                Ok(python)
            }
            Need::Chromium => ["chromium", "chromium-browser"]
                .into_iter()
                .find_map(which)
                .map(|p| p.display().to_string())
                .ok_or_else(|| "neither chromium nor chromium-browser is on PATH".into()),
            Need::DockerCompose => runs("docker-compose", &["version"])
                .then(|| "docker-compose".to_string())
                .ok_or_else(|| "`docker-compose version` does not run".into()),
            Need::KubernetesValidate => python_imports(&["kubernetes_validate"]),
            Need::Root => is_root()
                .then(|| "root".to_string())
                .ok_or_else(|| "the tests do not run as root".into()),
            Need::Swarm => (std::env::var("NINETRIX_TEST_SWARM").as_deref() == Ok("1"))
                .then(|| "NINETRIX_TEST_SWARM=1".to_string())
                .ok_or_else(|| "NINETRIX_TEST_SWARM is not 1".into()),
        }
    }
}

/// What the test needs, if it is there: `Some(found)`. Otherwise the test is skipped — one
/// `SKIPPED: needs <X> (<how>)` line on stderr and one line in the skip log — and this answers
/// `None`, or it panics when `NINETRIX_REQUIRE_<X>=1` says the need must be met.
pub fn require(need: Need) -> Option<String> {
    require_for(need, None)
}

/// As [`require`], for one part of a test that runs the rest without it (the chaos suite's MCP
/// writer): the SKIPPED line and the skip log name the part, and the test still counts as run.
pub fn require_part(need: Need, part: &str) -> Option<String> {
    require_for(need, Some(part))
}

fn require_for(need: Need, part: Option<&str>) -> Option<String> {
    match need.probe() {
        Ok(found) => Some(found),
        Err(why) => {
            let var = need.require_var();
            if need != Need::Swarm && std::env::var(&var).as_deref() == Ok("1") {
                panic!(
                    "{var}=1 but {} is missing: {why} ({})",
                    need.what(),
                    need.how()
                );
            }
            skip(need, part, &why);
            None
        }
    }
}

/// Skips the running test for a need it found missing: the SKIPPED line and the skip log.
fn skip(need: Need, part: Option<&str>, why: &str) {
    let scope = part.map(|p| format!(" ({p})")).unwrap_or_default();
    eprintln!(
        "SKIPPED{scope}: needs {} ({}): {why}",
        need.what(),
        need.how()
    );
    let Some(path) = std::env::var_os(SKIP_LOG_VAR) else {
        return;
    };
    let record = SkipRecord {
        need,
        test: current_test(),
        part: part.map(str::to_string),
    };
    // One short write with O_APPEND: lines from concurrent tests never interleave.
    let line = format!("{}\n", record.to_line());
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(e) = written {
        eprintln!(
            "could not record the skip in {} ({SKIP_LOG_VAR}): {e}",
            Path::new(&path).display()
        );
    }
}

/// The running test as nextest prints it: the binary (`NEXTEST_BINARY_ID`, else the test
/// executable's name) and the name libtest gives the test's thread.
fn current_test() -> String {
    let binary = std::env::var("NEXTEST_BINARY_ID").ok().or_else(|| {
        std::env::current_exe()
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
    });
    let test = std::thread::current()
        .name()
        .filter(|n| *n != "main")
        .map(str::to_string);
    match (binary, test) {
        (Some(b), Some(t)) => format!("{b} {t}"),
        (b, t) => b.or(t).unwrap_or_else(|| "?".into()),
    }
}

/// One line of the skip log: which test skipped for which need.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkipRecord {
    /// What was missing.
    pub need: Need,
    /// The test that skipped.
    pub test: String,
    /// The part of it that was left out, when the rest of the test ran.
    pub part: Option<String>,
}

impl SkipRecord {
    /// `KEY<TAB>test name[<TAB>part]`, with no line break or tab inside a field.
    pub fn to_line(&self) -> String {
        let clean = |s: &str| -> String {
            s.chars()
                .map(|c| if c.is_control() { ' ' } else { c })
                .collect()
        };
        match &self.part {
            Some(part) => format!(
                "{}\t{}\t{}",
                self.need.key(),
                clean(&self.test),
                clean(part)
            ),
            None => format!("{}\t{}", self.need.key(), clean(&self.test)),
        }
    }

    /// Reads a line [`SkipRecord::to_line`] wrote; `None` for anything else.
    pub fn from_line(line: &str) -> Option<SkipRecord> {
        let mut fields = line.split('\t');
        let need = Need::from_key(fields.next()?)?;
        let test = fields.next()?.to_string();
        let part = fields.next().map(str::to_string);
        fields
            .next()
            .is_none()
            .then_some(SkipRecord { need, test, part })
    }
}

/// Whether `program args…` runs and exits 0.
fn runs(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The Python (`$NINETRIX_PYTHON` or `python3`) if it imports every module, else which it could
/// not.
fn python_imports(modules: &[&str]) -> Result<String, String> {
    let python = std::env::var("NINETRIX_PYTHON").unwrap_or_else(|_| "python3".into());
    let import = format!("import {}", modules.join(", "));
    if runs(&python, &["-c", &import]) {
        Ok(python)
    } else {
        Err(format!("`{python} -c '{import}'` fails"))
    }
}

/// The first executable named `name` on `PATH`.
pub fn which(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|p| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Whether this process runs as root (read from /proc, without unsafe code).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1).map(|euid| euid == "0"))
        })
        .unwrap_or(false)
}

/// A source of `binary` newer than it, by the dep-info file cargo writes beside it
/// (`<binary>.d`: every file rustc read to build it): `Some(source)` when the binary is older
/// than one of its sources, `None` when it is as new as all of them or cargo left no dep-info
/// (a binary from elsewhere, which is taken as it is).
pub fn stale_source(binary: &Path) -> Option<PathBuf> {
    let built = binary.metadata().and_then(|m| m.modified()).ok()?;
    let dep_info = std::fs::read_to_string(binary.with_extension("d")).ok()?;
    sources_in_dep_info(&dep_info)
        .into_iter()
        .filter(|source| {
            // A source that is gone no longer feeds the binary (cargo rebuilds on the next build
            // either way); only one newer than the binary makes it stale.
            source
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|m: SystemTime| m > built)
        })
        .max_by_key(|source| source.metadata().and_then(|m| m.modified()).ok())
}

/// The dependencies a make-style dep-info file lists for its first target (`target: a b \
/// c`), with `\ ` as an escaped space.
pub fn sources_in_dep_info(text: &str) -> Vec<PathBuf> {
    let joined = text.replace("\\\n", " ");
    let Some(first) = joined.lines().find(|l| !l.trim().is_empty()) else {
        return vec![];
    };
    // The target ends at the first unescaped ": ".
    let Some(colon) = find_unescaped(first, ": ").or_else(|| first.strip_suffix(':').map(str::len))
    else {
        return vec![];
    };
    let deps = first.get(colon + 1..).unwrap_or("");
    let mut out = vec![];
    let mut current = String::new();
    let mut chars = deps.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&' ') => {
                current.push(' ');
                chars.next();
            }
            ' ' | '\t' => {
                if !current.is_empty() {
                    out.push(PathBuf::from(std::mem::take(&mut current)));
                }
            }
            c => current.push(c),
        }
    }
    if !current.is_empty() {
        out.push(PathBuf::from(current));
    }
    out
}

/// The byte offset of the first `pattern` not preceded by a backslash.
fn find_unescaped(s: &str, pattern: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = s[from..].find(pattern) {
        let at = from + i;
        if at == 0 || s.as_bytes()[at - 1] != b'\\' {
            return Some(at);
        }
        from = at + pattern.len();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_skip_record_reads_back_and_keeps_one_line() {
        let record = SkipRecord {
            need: Need::Postgres,
            test: "postgres::purge\nraces".into(),
            part: None,
        };
        let line = record.to_line();
        assert_eq!(line, "POSTGRES\tpostgres::purge races");
        assert_eq!(
            SkipRecord::from_line(&line),
            Some(SkipRecord {
                need: Need::Postgres,
                test: "postgres::purge races".into(),
                part: None,
            })
        );
        let part = SkipRecord {
            need: Need::Mcp,
            test: "chaos".into(),
            part: Some("the MCP\twriter".into()),
        };
        assert_eq!(part.to_line(), "MCP\tchaos\tthe MCP writer");
        assert_eq!(
            SkipRecord::from_line(&part.to_line()).and_then(|r| r.part),
            Some("the MCP writer".into())
        );
        assert_eq!(SkipRecord::from_line("NOPE\tx"), None);
        assert_eq!(SkipRecord::from_line("no tab"), None);
    }

    #[test]
    fn every_need_has_its_own_key_and_says_how_to_get_it() {
        for need in Need::ALL {
            assert_eq!(Need::from_key(need.key()), Some(need));
            assert!(!need.how().is_empty() && !need.what().is_empty());
        }
        let keys: std::collections::BTreeSet<_> = Need::ALL.iter().map(|n| n.key()).collect();
        assert_eq!(keys.len(), Need::ALL.len());
        assert_eq!(Need::Mcp.require_var(), "NINETRIX_REQUIRE_MCP");
        assert_eq!(Need::Swarm.require_var(), "NINETRIX_TEST_SWARM");
    }

    #[test]
    fn dep_info_lists_the_first_targets_sources_with_escaped_spaces() {
        let text =
            "/t/debug/ninetrix: /src/a.rs /src/my\\ dir/b.rs \\\n /src/c.sql\n\n/src/a.rs:\n";
        assert_eq!(
            sources_in_dep_info(text),
            vec![
                PathBuf::from("/src/a.rs"),
                PathBuf::from("/src/my dir/b.rs"),
                PathBuf::from("/src/c.sql")
            ]
        );
        assert_eq!(sources_in_dep_info(""), Vec::<PathBuf>::new());
        assert_eq!(sources_in_dep_info("/t/x:\n"), Vec::<PathBuf>::new());
    }

    #[test]
    fn a_binary_older_than_a_source_is_stale_and_a_newer_one_is_not() {
        let dir = std::env::temp_dir().join(format!("testkit-stale-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let source = dir.join("main.rs");
        let binary = dir.join("tool");
        std::fs::write(&source, "fn main() {}").unwrap();
        std::fs::write(&binary, "bin").unwrap();
        std::fs::write(
            dir.join("tool.d"),
            format!("{}: {}\n", binary.display(), source.display()),
        )
        .unwrap();
        let t = |secs| SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs);
        let set = |p: &Path, when| {
            std::fs::File::options()
                .write(true)
                .open(p)
                .unwrap()
                .set_modified(when)
                .unwrap()
        };
        set(&source, t(1_000));
        set(&binary, t(2_000));
        assert_eq!(stale_source(&binary), None);
        set(&source, t(3_000));
        assert_eq!(stale_source(&binary), Some(source.clone()));
        std::fs::remove_file(dir.join("tool.d")).unwrap();
        assert_eq!(stale_source(&binary), None, "no dep-info: taken as it is");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
