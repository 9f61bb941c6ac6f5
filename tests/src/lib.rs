//! Support code for ninetrix's end-to-end tests: finding the real `ninetrix` binary the workspace
//! built (and refusing one older than its sources), and facts about the machine the tests run on.
//!
//! The tests themselves live in `tests/tests/*.rs`; they drive the real binary and the real
//! Docker Engine, never in-process shortcuts.

use std::path::PathBuf;

/// The `ninetrix` executable under test: `$NINETRIX_BIN` if set (taken as it is), else the one
/// cargo built next to this test binary (`target/<triple>/<profile>/ninetrix`; `cargo xtask test`
/// builds it, since the CLI crate has integration tests). A built binary older than one of the
/// sources it was built from (cargo's dep-info beside it) is refused, naming the command that
/// rebuilds it: `cargo nextest run -p ninetrix-e2e` builds only this crate, and would otherwise
/// test whatever `ninetrix` was built last.
///
/// The check runs once per test process: a source edited while a test runs does not make the
/// test's later calls (its cleanup in `Drop` among them) panic halfway — a panic in a destructor
/// aborts the process and leaves the test's Docker objects behind.
pub fn ninetrix_bin() -> PathBuf {
    static CHECKED: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    CHECKED.get_or_init(checked_bin).clone()
}

fn checked_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("NINETRIX_BIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("the test binary knows its path");
    // target/<triple>/<profile>/deps/<test> → target/<triple>/<profile>/ninetrix
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("test binaries live in <profile>/deps");
    let bin = profile_dir.join("ninetrix");
    let profile = profile_dir
        .file_name()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    let rebuild = match profile.as_str() {
        "debug" => "cargo build -p ninetrix-cli".to_string(),
        "release" => "cargo build --release -p ninetrix-cli".to_string(),
        other => format!("cargo build --profile {other} -p ninetrix-cli"),
    };
    assert!(
        bin.exists(),
        "{} does not exist: build it with `{rebuild}` (or run the suite with `cargo xtask test`, \
         which builds it), or set NINETRIX_BIN",
        bin.display()
    );
    if let Some(source) = ninetrix_testkit::stale_source(&bin) {
        panic!(
            "{} is older than {}, one of its sources: these tests would test an old binary. \
             Rebuild it with `{rebuild}` (or run the suite with `cargo xtask test`, which builds \
             it), or set NINETRIX_BIN to test another binary",
            bin.display(),
            source.display()
        );
    }
    bin
}

pub use ninetrix_testkit::is_root;

/// Facts read from an ELF executable's program headers.
#[derive(Debug, PartialEq, Eq)]
pub struct ElfLinkage {
    /// It names a dynamic loader (`PT_INTERP`): it needs one at run time.
    pub has_interpreter: bool,
    /// Shared libraries it needs (`DT_NEEDED` entries).
    pub needed_libraries: usize,
}

/// Reads the linkage of a 64-bit little-endian ELF file (x86_64, aarch64).
pub fn elf_linkage(bytes: &[u8]) -> Result<ElfLinkage, String> {
    let u16_at = |o: usize| -> Result<u16, String> {
        bytes
            .get(o..o + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
            .ok_or_else(|| format!("truncated at {o}"))
    };
    let u32_at = |o: usize| -> Result<u32, String> {
        bytes
            .get(o..o + 4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
            .ok_or_else(|| format!("truncated at {o}"))
    };
    let u64_at = |o: usize| -> Result<u64, String> {
        bytes
            .get(o..o + 8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
            .ok_or_else(|| format!("truncated at {o}"))
    };
    if bytes.get(0..4) != Some(b"\x7fELF") || bytes.get(4) != Some(&2) || bytes.get(5) != Some(&1) {
        return Err("not a 64-bit little-endian ELF file".into());
    }
    let phoff = u64_at(0x20)? as usize;
    let phentsize = u16_at(0x36)? as usize;
    let phnum = u16_at(0x38)? as usize;
    let mut linkage = ElfLinkage {
        has_interpreter: false,
        needed_libraries: 0,
    };
    for i in 0..phnum {
        let ph = phoff + i * phentsize;
        match u32_at(ph)? {
            3 => linkage.has_interpreter = true, // PT_INTERP
            2 => {
                // PT_DYNAMIC: (tag, value) pairs until DT_NULL.
                let offset = u64_at(ph + 8)? as usize;
                let size = u64_at(ph + 32)? as usize;
                for entry in (offset..offset + size).step_by(16) {
                    match u64_at(entry)? {
                        0 => break,
                        1 => linkage.needed_libraries += 1, // DT_NEEDED
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Ok(linkage)
}

/// A tiny deterministic random generator for seeded fault schedules (the seed is printed so a
/// failing run can be replayed).
pub struct Lcg(pub u64);

impl Lcg {
    /// A number in `0..below`.
    pub fn next(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % below.max(1)
    }
}

/// Sends `sig` (`-TERM`, `-STOP`, …) to process `pid` with kill(1); whether it was delivered.
pub fn signal(pid: u32, sig: &str) -> bool {
    std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .is_ok_and(|s| s.success())
}

/// The seed for a seeded run: `NINETRIX_SEED` when set (to replay a run), otherwise the clock.
/// Prints it with the way to replay it, labelled `what`.
pub fn seed_from_env(what: &str) -> u64 {
    let seed = env_parse("NINETRIX_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    eprintln!("{what}: seed {seed} (replay with NINETRIX_SEED={seed})");
    seed
}

/// The number in the environment variable `name`, or `default` when it is unset.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    env_parse(name).unwrap_or(default)
}

/// The number in the environment variable `name` if it is set; a value that is not a number
/// stops the test with a message naming the variable (a typo never silently runs the default).
fn env_parse<T: std::str::FromStr>(name: &str) -> Option<T> {
    let raw = std::env::var(name).ok()?;
    match raw.trim().parse() {
        Ok(v) => Some(v),
        Err(_) => panic!("{name}={raw:?} is not a number; unset it or give a number"),
    }
}

/// A `ninetrix api` child process on a loopback port.
pub struct ApiProcess {
    /// The child.
    pub child: std::process::Child,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// Lines the server logged (stderr), as they arrive.
    pub log: std::sync::mpsc::Receiver<String>,
}

impl ApiProcess {
    /// Starts `ninetrix api` with these extra arguments (`--listen 127.0.0.1:0` is added) and
    /// waits until it logs its address.
    pub fn start(args: &[&str]) -> ApiProcess {
        Self::start_on("127.0.0.1:0", args)
    }

    /// Starts `ninetrix api` on a given address (to restart it where runners expect it).
    pub fn start_on(listen: &str, args: &[&str]) -> ApiProcess {
        Self::start_with_env(listen, args, &[])
    }

    /// Starts `ninetrix api` on `listen` with extra environment variables (its test hooks:
    /// `NINETRIX_API_CRASH_AT`, `NINETRIX_API_CLOCK_SKEW_SECS`).
    pub fn start_with_env(listen: &str, args: &[&str], env: &[(&str, &str)]) -> ApiProcess {
        use std::io::BufRead as _;
        let child = std::process::Command::new(ninetrix_bin())
            .arg("api")
            .args(["--listen", listen])
            .args(args)
            .envs(env.iter().copied())
            .env("NINETRIX_LOG_FORMAT", "json")
            .env("RUST_LOG", "info,tower_http=debug")
            .env_remove("NINETRIX_API_SECRET")
            .env_remove("NINETRIX_ADMIN_TOKEN")
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("ninetrix api starts");
        let (tx, rx) = std::sync::mpsc::channel();
        // From here on, Drop kills and reaps the child whatever happens.
        let mut api = ApiProcess {
            child,
            url: String::new(),
            log: rx,
        };
        let stderr = api.child.stderr.take().expect("piped");
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let line = api
                .log
                .recv_timeout(left)
                .expect("ninetrix api logs its address within 30 s");
            if let Some(rest) = line.split("listening on http://").nth(1) {
                let addr: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ':')
                    .collect();
                api.url = format!("http://{addr}");
                return api;
            }
        }
    }

    /// Waits until the server logs a line containing `needle`, up to `timeout`.
    pub fn wait_for_log(&self, needle: &str, timeout: std::time::Duration) -> String {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.log.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return line,
                Ok(_) => {}
                Err(_) => panic!("the server did not log {needle:?} within {timeout:?}"),
            }
        }
    }

    /// Waits for the process to exit, up to `timeout`.
    pub fn wait_exit(&mut self, timeout: std::time::Duration) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + timeout;
        while std::time::Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return Some(status);
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        None
    }
}

impl Drop for ApiProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// GitHub's `X-Hub-Signature-256` of a webhook delivery: `sha256=<hex of HMAC-SHA256(secret,
/// body)>`, as a sender signs what the tests deliver to `POST /v1/hooks/…`.
pub fn github_signature(secret: &[u8], body: &[u8]) -> String {
    use hmac::Mac as _;
    let mut mac = <hmac::Hmac<sha2::Sha256> as hmac::KeyInit>::new_from_slice(secret)
        .expect("HMAC takes a key of any length");
    mac.update(body);
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256={hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dynamically_linked_program_is_recognised() {
        // The test harness itself is built by the same rules; use a system binary that is
        // certainly dynamic to check the parser can tell the difference.
        let Ok(bytes) = std::fs::read("/bin/sh").or_else(|_| std::fs::read("/usr/bin/env")) else {
            return;
        };
        let linkage = elf_linkage(&bytes).unwrap();
        assert!(
            linkage.has_interpreter && linkage.needed_libraries > 0,
            "{linkage:?}"
        );
    }

    #[test]
    fn garbage_is_not_elf() {
        assert!(elf_linkage(b"#!/bin/sh\n").is_err());
    }
}
