//! How an agent's containers are confined: the resolved `security:` section (user, Linux
//! capabilities, read-only root filesystem, pids limit, the tool sandbox) with the hardened
//! defaults every container of a pool gets, the capability names Linux knows, and what a
//! `security:` relaxes compared with those defaults (what `validate` and `ps --json` show), and
//! `network:` ([`Network`]; its allow-list is `crate::network`'s). Pure: the Docker, Swarm and
//! Kubernetes backends turn it into their own settings.

use serde::{Deserialize, Serialize};

/// The user containers run as unless `security.user` says otherwise: the conventional
/// "nonroot" ID of distroless images, which no base image gives a login.
pub const DEFAULT_UID: u32 = 65532;

/// The most processes and threads a container may hold at once (`security.pids_limit`): room
/// for the runner, its MCP servers and a busy `shell`, not for a fork bomb.
pub const DEFAULT_PIDS_LIMIT: u32 = 512;

/// The bounds of `security.pids_limit`.
pub const PIDS_LIMIT_RANGE: (u32, u32) = (32, 1_000_000);

/// A numeric user and group (`uid:gid`): images built `FROM scratch` have no `/etc/passwd`,
/// so names other than `root` cannot be resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    /// The user ID.
    pub uid: u32,
    /// The group ID.
    pub gid: u32,
}

impl User {
    /// The hardened default, `65532:65532`.
    pub const NONROOT: User = User {
        uid: DEFAULT_UID,
        gid: DEFAULT_UID,
    };

    /// Whether this is root (uid 0).
    pub fn is_root(&self) -> bool {
        self.uid == 0
    }

    /// Parses `root`, `UID` (group = UID) or `UID:GID`; `None` otherwise.
    pub fn parse(text: &str) -> Option<User> {
        let text = text.trim();
        if text == "root" {
            return Some(User { uid: 0, gid: 0 });
        }
        let number = |s: &str| {
            (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .then(|| s.parse::<u32>().ok())
                .flatten()
        };
        match text.split_once(':') {
            Some((u, g)) => Some(User {
                uid: number(u)?,
                gid: number(g)?,
            }),
            None => {
                let uid = number(text)?;
                Some(User { uid, gid: uid })
            }
        }
    }
}

impl std::fmt::Display for User {
    /// `uid:gid`, as Docker's `--user` takes it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.uid, self.gid)
    }
}

/// How an agent's containers are confined (`security:`), resolved with the defaults.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Security {
    /// The user its processes run as.
    pub user: User,
    /// The Linux capabilities added back after dropping all of them, as Docker names them
    /// (`NET_BIND_SERVICE`), sorted. They reach a non-root user's programs only through file
    /// capabilities.
    pub capabilities: Vec<String>,
    /// Whether the root filesystem is read-only (the workspace, `/tmp` and the runner's own
    /// volumes stay writable).
    pub read_only_root: bool,
    /// The most processes and threads the container may hold.
    pub pids_limit: u32,
    /// Whether tool processes (`shell`, local MCP servers) run sandboxed: a fresh environment
    /// with only the secrets given to them by name, the runner's secret files out of reach
    /// (Landlock), and no way to signal or trace the runner.
    pub tool_sandbox: bool,
}

impl Default for Security {
    fn default() -> Self {
        Security {
            user: User::NONROOT,
            capabilities: Vec::new(),
            read_only_root: true,
            pids_limit: DEFAULT_PIDS_LIMIT,
            tool_sandbox: true,
        }
    }
}

impl Security {
    /// What this setting relaxes compared with the hardened defaults, one phrase each, in a
    /// fixed order (empty when nothing is). A higher pids limit counts; a lower one does not.
    pub fn relaxed(&self) -> Vec<String> {
        let d = Security::default();
        let mut out = Vec::new();
        if self.user.is_root() {
            out.push("runs as root".to_string());
        }
        if !self.capabilities.is_empty() {
            out.push(format!(
                "adds capabilities {}",
                self.capabilities.join(", ")
            ));
        }
        if !self.read_only_root {
            out.push("writable root filesystem".to_string());
        }
        if self.pids_limit > d.pids_limit {
            out.push(format!("pids limit raised to {}", self.pids_limit));
        }
        if !self.tool_sandbox {
            out.push("tools run unsandboxed (they can read the runner's secrets)".to_string());
        }
        out
    }

    /// One line for people: `user 65532:65532, no capabilities, read-only root, pids ≤ 512,
    /// tools sandboxed`.
    pub fn describe(&self) -> String {
        let caps = if self.capabilities.is_empty() {
            "no capabilities".to_string()
        } else {
            format!("capabilities {}", self.capabilities.join(","))
        };
        format!(
            "user {}{}, {caps}, {} root, no new privileges, pids ≤ {}, tools {}",
            self.user,
            if self.user.is_root() { " (root)" } else { "" },
            if self.read_only_root {
                "read-only"
            } else {
                "writable"
            },
            self.pids_limit,
            if self.tool_sandbox {
                "sandboxed"
            } else {
                "unsandboxed"
            },
        )
    }
}

/// An agent's network settings (`network:`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Network {
    /// The hosts it may reach besides what it needs (`network.egress`); `None`: any host the
    /// Docker host reaches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<Vec<crate::egress::EgressRule>>,
}

impl Network {
    /// Whether its egress is restricted.
    pub fn restricted(&self) -> bool {
        self.egress.is_some()
    }
}

/// The capabilities Linux defines (6.x), as Docker names them: without `CAP_`.
pub const CAPABILITIES: &[&str] = &[
    "AUDIT_CONTROL",
    "AUDIT_READ",
    "AUDIT_WRITE",
    "BLOCK_SUSPEND",
    "BPF",
    "CHECKPOINT_RESTORE",
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "IPC_LOCK",
    "IPC_OWNER",
    "KILL",
    "LEASE",
    "LINUX_IMMUTABLE",
    "MAC_ADMIN",
    "MAC_OVERRIDE",
    "MKNOD",
    "NET_ADMIN",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_RAW",
    "PERFMON",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYSLOG",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_CHROOT",
    "SYS_MODULE",
    "SYS_NICE",
    "SYS_PACCT",
    "SYS_PTRACE",
    "SYS_RAWIO",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "WAKE_ALARM",
];

/// The capability `name` names (`net_bind_service`, `CAP_NET_BIND_SERVICE`), as Docker
/// names it; `None` when Linux has no such capability.
pub fn capability(name: &str) -> Option<&'static str> {
    let upper = name.trim().to_ascii_uppercase();
    let bare = upper.strip_prefix("CAP_").unwrap_or(&upper);
    CAPABILITIES.iter().copied().find(|c| *c == bare)
}

/// Whether `name` may name a container runtime (`runtime.isolation`): what Docker accepts in
/// `daemon.json`'s `runtimes` and Kubernetes in a RuntimeClass name.
pub fn is_runtime_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// The runtime every engine has: `runtime.isolation: runc` (or none) sets nothing.
pub const DEFAULT_RUNTIME: &str = "runc";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_are_root_a_uid_or_uid_and_gid() {
        assert_eq!(User::parse("root"), Some(User { uid: 0, gid: 0 }));
        assert_eq!(
            User::parse("1000"),
            Some(User {
                uid: 1000,
                gid: 1000
            })
        );
        assert_eq!(User::parse("1000:50"), Some(User { uid: 1000, gid: 50 }));
        for bad in ["", "nobody", "1000:", ":5", "-1", "1:2:3", "99999999999"] {
            assert_eq!(User::parse(bad), None, "{bad}");
        }
        assert_eq!(User::NONROOT.to_string(), "65532:65532");
    }

    #[test]
    fn capabilities_are_named_as_docker_names_them() {
        assert_eq!(capability("net_bind_service"), Some("NET_BIND_SERVICE"));
        assert_eq!(capability("CAP_CHOWN"), Some("CHOWN"));
        assert_eq!(capability("ALL"), None);
        assert_eq!(capability("NET_BIND"), None);
    }

    #[test]
    fn relaxed_names_each_setting_looser_than_the_default() {
        assert!(Security::default().relaxed().is_empty());
        let loose = Security {
            user: User { uid: 0, gid: 0 },
            capabilities: vec!["CHOWN".into()],
            read_only_root: false,
            pids_limit: 4096,
            tool_sandbox: false,
        };
        assert_eq!(loose.relaxed().len(), 5, "{:?}", loose.relaxed());
        let tighter = Security {
            pids_limit: 64,
            ..Security::default()
        };
        assert!(tighter.relaxed().is_empty());
        assert_eq!(
            Security::default().describe(),
            "user 65532:65532, no capabilities, read-only root, no new privileges, pids ≤ 512, tools sandboxed"
        );
    }

    #[test]
    fn runtime_names_are_what_docker_and_kubernetes_accept() {
        for ok in [
            "runc",
            "runsc",
            "kata",
            "kata-runtime",
            "io.containerd.kata.v2",
        ] {
            assert!(is_runtime_name(ok), "{ok}");
        }
        for bad in ["", "-x", "run sc", "a/b", &"x".repeat(64)] {
            assert!(!is_runtime_name(bad), "{bad}");
        }
    }
}
