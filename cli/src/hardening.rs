//! The hardened settings every container ninetrix creates on one host is made with — runners,
//! MCP sidecars, egress proxies, the job broker, background jobs and the local API: a non-root
//! user (from `security:`), every capability dropped (the ones `security.capabilities` names
//! added back), no new privileges, a read-only root filesystem with a tmpfs `/tmp`, a pids limit, the container runtime
//! (`runtime.isolation`), and `/run/secrets` as an anonymous volume, the one place a stopped
//! container with a read-only root can be given files (Docker refuses archive uploads
//! elsewhere), labelled so `down` finds it if a container was removed without it. Pure: it
//! fills a `HostConfig`.

use bollard::models::{HostConfig, Mount, MountType, MountVolumeOptions};
use ninetrix_agentfile::security::Security;

/// Where containers find their secrets.
pub(crate) const SECRETS_DIR: &str = "/run/secrets";

/// The tmpfs options of `/tmp`: world-writable with the sticky bit, no device files, no setuid
/// programs. Its size counts against the container's memory limit.
const TMP_OPTIONS: &str = "rw,nosuid,nodev,mode=1777";

/// The `HOME` of every process in a hardened container: `/tmp`, the one writable place every
/// image has (a numeric user has no home directory, and Docker would give it `/`).
pub(crate) const HOME: &str = "/tmp";

/// The role label of a secrets volume: `down` removes the pool's (an anonymous volume outlives
/// a container removed without `-v`, as `docker rm -f` does).
pub(crate) const SECRETS_ROLE: &str = "secrets";

/// Applies `security` and `isolation` (the runtime's name, `None` for the engine's default) to
/// `hc`, adding the `/run/secrets` volume to its mounts, labelled with `owner` (its pool, or the
/// local API's home) and the secrets role.
pub(crate) fn apply(
    hc: &mut HostConfig,
    security: &Security,
    isolation: Option<&str>,
    owner: (&str, &str),
) {
    hc.cap_drop = Some(vec!["ALL".into()]);
    hc.cap_add = (!security.capabilities.is_empty()).then(|| security.capabilities.clone());
    hc.security_opt = Some(vec!["no-new-privileges".into()]);
    hc.readonly_rootfs = Some(security.read_only_root);
    hc.pids_limit = Some(i64::from(security.pids_limit));
    hc.tmpfs = Some([("/tmp".to_string(), TMP_OPTIONS.to_string())].into());
    hc.runtime = isolation.map(str::to_string);
    let labels = [
        (owner.0.to_string(), owner.1.to_string()),
        (crate::objects::ROLE.to_string(), SECRETS_ROLE.to_string()),
    ];
    hc.mounts.get_or_insert_with(Vec::new).push(Mount {
        target: Some(SECRETS_DIR.into()),
        typ: Some(MountType::VOLUME),
        volume_options: Some(MountVolumeOptions {
            labels: Some(labels.into()),
            ..MountVolumeOptions::default()
        }),
        ..Mount::default()
    });
}

/// The `User` of a container run with `security`.
pub(crate) fn user(security: &Security) -> String {
    security.user.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ninetrix_agentfile::security::User;

    #[test]
    fn the_defaults_drop_everything_and_relaxing_is_explicit() {
        let mut hc = HostConfig::default();
        apply(
            &mut hc,
            &Security::default(),
            None,
            (crate::objects::POOL, "p"),
        );
        assert_eq!(hc.cap_drop.as_deref(), Some(&["ALL".to_string()][..]));
        assert_eq!(hc.cap_add, None);
        assert_eq!(
            hc.security_opt.as_deref(),
            Some(&["no-new-privileges".to_string()][..])
        );
        assert_eq!(hc.readonly_rootfs, Some(true));
        assert_eq!(hc.pids_limit, Some(512));
        assert_eq!(hc.runtime, None, "the engine's default runtime");
        assert!(hc.tmpfs.as_ref().unwrap()["/tmp"].contains("nosuid"));
        let secrets = hc.mounts.as_ref().unwrap().last().unwrap();
        assert_eq!(secrets.target.as_deref(), Some(SECRETS_DIR));
        assert_eq!(
            secrets.source, None,
            "anonymous: removed with its container"
        );
        assert_eq!(user(&Security::default()), "65532:65532");

        let loose = Security {
            user: User { uid: 0, gid: 0 },
            capabilities: vec!["NET_BIND_SERVICE".into()],
            read_only_root: false,
            pids_limit: 4096,
            tool_sandbox: true,
        };
        let mut hc = HostConfig::default();
        apply(&mut hc, &loose, Some("runsc"), (crate::objects::POOL, "p"));
        assert_eq!(
            hc.cap_add.as_deref(),
            Some(&["NET_BIND_SERVICE".to_string()][..])
        );
        assert_eq!(hc.readonly_rootfs, Some(false));
        assert_eq!(hc.runtime.as_deref(), Some("runsc"));
        assert_eq!(user(&loose), "0:0");
    }
}
