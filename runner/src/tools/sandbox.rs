//! The tool sandbox: how the runner starts a process a model asked for (`shell`) or an agent
//! declared (a local stdio MCP server). Such a process runs in the runner's container, as the
//! runner's user, so on its own it could read everything the runner can — the model key, the
//! runner token, the other secrets under `/run/secrets`. Confined (`security.tool_sandbox`, the
//! default) it gets:
//!
//! - a fresh environment: the runner's `PATH`, `HOME=/tmp`, `LANG`, the agent's plain `env:`,
//!   the egress proxy settings, and only the secrets it was given by name;
//! - a Landlock domain (Linux ≥ 5.13; unprivileged, kernel-enforced, inherited by every child):
//!   the workspace, `/tmp` and `/dev` read-write, the rest of the filesystem read-only, and
//!   `/run/secrets` not at all; it can neither signal nor trace the runner (Landlock scopes
//!   signals on Linux ≥ 6.12 and always confines ptrace to the domain);
//! - its own process group, which the caller kills whole when the call ends, so nothing it
//!   started in the background outlives the call.
//!
//! A kernel without Landlock fails closed: the tool is refused, naming the setting that runs
//! tools unsandboxed. Unconfined, a tool still gets the fresh environment and process group.

use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, NetPort, Ruleset, RulesetAttr,
    RulesetCreated, RulesetCreatedAttr, RulesetStatus, Scope, path_beneath_rules,
};
use ninetrix_agentfile::AgentSpec;

/// The newest Landlock ABI the sandbox asks for; older kernels get what they support.
const ABI_WANTED: ABI = ABI::V6;

/// Where the secrets are: hidden from confined tools.
const SECRETS_DIR: &str = "/run/secrets";

/// The `PATH` of a tool process when the runner has none: the usual one of Debian-like images.
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The proxy variables passed on to tools (set by `up` when the agent's egress is restricted).
const PROXY_VARS: &[&str] = &[
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
];

/// Why a tool process could not be started confined.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The kernel has no Landlock (too old, or not in `lsm=`), or a seccomp profile blocks it.
    #[error(
        "the tool sandbox needs Landlock (Linux 5.13 or newer, with landlock enabled), and this \
         kernel does not provide it ({0}); the tool was not run. Run tools unsandboxed — able to \
         read the runner's secrets — with `security: {{ tool_sandbox: false }}`"
    )]
    Unsupported(String),
    /// Building the ruleset failed (a path that vanished, too many rules).
    #[error("cannot build the tool sandbox: {0}")]
    Ruleset(#[from] landlock::RulesetError),
}

/// Secrets given to a tool by name, as environment variables; `Debug` shows the names only.
#[derive(Clone, Default)]
pub struct Given(pub Vec<(String, String)>);

impl std::fmt::Debug for Given {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(k, _)| k))
            .finish()
    }
}

/// How an agent's tool processes start.
#[derive(Clone, Debug)]
pub struct Sandbox {
    /// Whether they are confined (Landlock).
    confine: bool,
    /// The workspace: writable.
    workspace: PathBuf,
    /// The environment every tool process gets.
    env: Vec<(String, String)>,
    /// The egress proxy's port, when the agent's egress is restricted: the one TCP port a
    /// confined tool may connect to.
    proxy_port: Option<u16>,
}

impl Sandbox {
    /// The sandbox of `spec`'s tools, with the workspace at `workspace`; `host_env` is the
    /// runner's own environment (only its proxy variables pass).
    pub fn new(
        spec: &AgentSpec,
        workspace: &Path,
        host_env: impl IntoIterator<Item = (String, String)>,
    ) -> Self {
        let env = base_env(&spec.env, host_env);
        Sandbox {
            confine: spec.security.tool_sandbox,
            workspace: workspace.to_path_buf(),
            proxy_port: proxy_port(&env),
            env,
        }
    }

    /// An unconfined sandbox with only the base environment (tests, and agents with
    /// `tool_sandbox: false`).
    pub fn unconfined(workspace: &Path) -> Self {
        Sandbox {
            confine: false,
            workspace: workspace.to_path_buf(),
            env: base_env(&Default::default(), std::iter::empty()),
            proxy_port: None,
        }
    }

    /// Whether tool processes are confined.
    pub fn confines(&self) -> bool {
        self.confine
    }

    /// Prepares `cmd` to start in the sandbox with `extra` variables (secrets given by name):
    /// a fresh environment, its own process group, and (confined) the Landlock domain applied
    /// between fork and exec.
    #[allow(unsafe_code)] // `pre_exec`: see the SAFETY note.
    pub fn prepare(
        &self,
        cmd: &mut tokio::process::Command,
        extra: &Given,
    ) -> Result<(), SandboxError> {
        cmd.env_clear();
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        cmd.envs(extra.0.iter().map(|(k, v)| (k, v)));
        cmd.process_group(0);
        if self.confine {
            let ruleset = ruleset(&self.workspace, self.proxy_port)?;
            let mut slot = Some(ruleset);
            // SAFETY: runs in the child between fork and exec. It makes two system calls
            // (prctl and landlock_restrict_self) through the ruleset already built above, and
            // allocates nothing: its error is a plain OS error code.
            unsafe {
                cmd.pre_exec(move || restrict(slot.take()));
            }
        }
        Ok(())
    }
}

/// Checks that this process can write `workspace` (creating it if missing). A workspace volume
/// that an earlier ninetrix created while containers ran as root is root's: the message says
/// so and how to keep its files.
pub fn check_writable(workspace: &Path) -> Result<(), String> {
    // Named for this process: runners sharing a workspace (tests, sessions) never race on it.
    let probe = workspace.join(format!(".ninetrix-write-check-{}", std::process::id()));
    let written = std::fs::create_dir_all(workspace)
        .and_then(|()| std::fs::write(&probe, b""))
        .and_then(|()| std::fs::remove_file(&probe));
    written.map_err(|e| {
        format!(
            "the workspace {} is not writable by this runner's user ({e}); a workspace volume \
             created before containers ran as a non-root user belongs to root. Run the agent once \
             with `security: {{ user: root }}` to keep its files as they are, or copy them out \
             and remove the volume (`ninetrix down --volumes`) — see docs/security.md",
            workspace.display()
        )
    })
}

/// The environment every tool process gets.
fn base_env(
    agent_env: &std::collections::BTreeMap<String, String>,
    host_env: impl IntoIterator<Item = (String, String)>,
) -> Vec<(String, String)> {
    let host_env: Vec<(String, String)> = host_env.into_iter().collect();
    // The runner's own `PATH` (the image's, not a secret), else the usual one.
    let path = host_env
        .iter()
        .find(|(k, v)| k == "PATH" && !v.is_empty())
        .map_or(PATH, |(_, v)| v.as_str());
    let mut env = vec![
        ("PATH".to_string(), path.to_string()),
        ("HOME".to_string(), "/tmp".to_string()),
        ("LANG".to_string(), "C.UTF-8".to_string()),
    ];
    env.extend(
        host_env
            .iter()
            .filter(|(k, _)| PROXY_VARS.contains(&k.as_str()))
            .cloned(),
    );
    env.extend(agent_env.iter().map(|(k, v)| (k.clone(), v.clone())));
    env
}

/// The port of the egress proxy `env` names (`HTTPS_PROXY`, else `HTTP_PROXY`, as
/// `http://host:port`), if any.
fn proxy_port(env: &[(String, String)]) -> Option<u16> {
    let url = ["HTTPS_PROXY", "HTTP_PROXY"]
        .iter()
        .find_map(|name| env.iter().find(|(k, _)| k == name).map(|(_, v)| v))?;
    let authority = url.split_once("://")?.1.split('/').next()?;
    authority.rsplit_once(':')?.1.parse().ok()
}

/// Whether this kernel enforces Landlock; why not if it does not. Asked once per process.
pub fn landlock_supported() -> Result<(), String> {
    static SUPPORTED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    SUPPORTED
        .get_or_init(|| {
            Ruleset::default()
                .set_compatibility(CompatLevel::HardRequirement)
                .handle_access(AccessFs::from_all(ABI::V1))
                .and_then(|r| r.create())
                .map(drop)
                .map_err(|e| e.to_string())
        })
        .clone()
}

/// The Landlock ruleset: read-only everywhere but `/run/secrets`, read-write in `workspace`,
/// `/tmp` and `/dev`; signals and abstract sockets scoped to the domain where the kernel can;
/// with an egress proxy (`proxy_port`), TCP connections only to its port (Linux ≥ 6.7): the
/// internal network still routes to the host's own addresses, and a tool must not reach them.
fn ruleset(workspace: &Path, proxy_port: Option<u16>) -> Result<RulesetCreated, SandboxError> {
    landlock_supported().map_err(SandboxError::Unsupported)?;
    let all = AccessFs::from_all(ABI_WANTED);
    let read = AccessFs::from_read(ABI_WANTED);
    let mut readable: Vec<PathBuf> = Vec::new();
    for top in std::fs::read_dir("/").into_iter().flatten().flatten() {
        let path = top.path();
        if path == Path::new("/run") {
            // Each entry of /run but the secrets.
            for entry in std::fs::read_dir("/run").into_iter().flatten().flatten() {
                let p = entry.path();
                if p != Path::new(SECRETS_DIR) {
                    readable.push(p);
                }
            }
        } else {
            readable.push(path);
        }
    }
    let writable = [workspace.to_path_buf(), "/tmp".into(), "/dev".into()];
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)?
        .scope(Scope::Signal | Scope::AbstractUnixSocket)?;
    if proxy_port.is_some() {
        ruleset = ruleset.handle_access(AccessNet::ConnectTcp)?;
    }
    let mut created = ruleset
        .create()?
        .no_new_privs(true)
        .add_rules(path_beneath_rules(readable, read))?
        .add_rules(path_beneath_rules(writable, all))?;
    if let Some(port) = proxy_port {
        created = created.add_rule(NetPort::new(port, AccessNet::ConnectTcp))?;
    }
    Ok(created)
}

/// In the child: enters the domain; a kernel that enforced nothing fails the exec.
fn restrict(ruleset: Option<RulesetCreated>) -> std::io::Result<()> {
    let Some(ruleset) = ruleset else {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    };
    match ruleset.restrict_self() {
        Ok(status) if status.ruleset != RulesetStatus::NotEnforced => Ok(()),
        _ => Err(std::io::Error::from_raw_os_error(libc::EPERM)),
    }
}

/// Kills process group `pgid` (a tool process and everything it started that stayed in its
/// group) and waits until none of it is left, or gives up after `rounds` signals (a process
/// forking while the group dies is caught by the next round).
#[allow(unsafe_code)] // kill(2): see the SAFETY note.
pub fn kill_group(pgid: u32, rounds: u32) {
    let Ok(pgid) = i32::try_from(pgid) else {
        return;
    };
    for _ in 0..rounds {
        // SAFETY: kill(2) with a negative pid signals a process group; no memory is touched.
        let r = unsafe { libc::kill(-pgid, libc::SIGKILL) };
        if r != 0 {
            // ESRCH: nothing left in the group.
            return;
        }
        std::thread::yield_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tools_get_a_fresh_environment_with_the_proxy_and_the_agents_plain_env() {
        let env = base_env(
            &[("MODE".to_string(), "fast".to_string())].into(),
            [
                ("PATH".to_string(), "/opt/tools/bin:/usr/bin".to_string()),
                ("HTTPS_PROXY".to_string(), "http://proxy:3128".to_string()),
                ("AGENTFILE_RUNNER_TOKEN".to_string(), "secret".to_string()),
                ("OPENAI_API_KEY".to_string(), "sk-secret".to_string()),
            ],
        );
        let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["PATH", "HOME", "LANG", "HTTPS_PROXY", "MODE"]);
        assert_eq!(env[0].1, "/opt/tools/bin:/usr/bin", "the runner's PATH");
        assert_eq!(proxy_port(&env), Some(3128));
        assert_eq!(proxy_port(&env[..3]), None);
    }

    /// A shell command in a confined sandbox: what it printed, or the sandbox's refusal.
    async fn confined_sh(workspace: &Path, script: &str) -> Result<String, SandboxError> {
        let sandbox = Sandbox {
            confine: true,
            workspace: workspace.to_path_buf(),
            env: base_env(&Default::default(), std::iter::empty()),
            proxy_port: None,
        };
        let mut cmd = tokio::process::Command::new("/bin/sh");
        // As if the runner's own environment held a secret: the sandbox must drop it.
        cmd.arg("-c")
            .arg(script)
            .current_dir(workspace)
            .env("RUNNER_SECRET", "hunter2");
        sandbox.prepare(&mut cmd, &Given(vec![("GIVEN".into(), "yes".into())]))?;
        let out = cmd.output().await.expect("sh starts");
        Ok(String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr))
    }

    #[tokio::test]
    async fn a_confined_tool_writes_only_its_workspace_and_sees_only_what_it_was_given() {
        let ws = tempfile::tempdir().unwrap();
        // Outside the workspace, /tmp and /dev: under the user's home (or /var/tmp).
        let base = std::env::var("CARGO_TARGET_TMPDIR")
            .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_string());
        let outside = tempfile::tempdir_in(base).unwrap();
        let script = format!(
            "echo in > {ws}/f && echo wrote-ws; echo out > {out}/f && echo wrote-outside; \
             echo \"given=$GIVEN secret=$RUNNER_SECRET\"",
            ws = ws.path().display(),
            out = outside.path().display()
        );
        let result = confined_sh(ws.path(), &script).await;
        match (landlock_supported(), result) {
            (Ok(()), Ok(text)) => {
                assert!(text.contains("wrote-ws"), "{text}");
                assert!(!text.contains("wrote-outside"), "{text}");
                assert!(!outside.path().join("f").exists());
                assert!(text.contains("given=yes secret=\n"), "{text}");
                assert!(!text.contains("hunter2"), "{text}");
            }
            (Err(_), Err(SandboxError::Unsupported(_))) => {
                println!("this kernel has no Landlock: the sandbox refused, as it must");
            }
            (support, result) => panic!("support {support:?}, result {result:?}"),
        }
    }
}
