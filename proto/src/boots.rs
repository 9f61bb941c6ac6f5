//! What each claim of a thread was: the first, a crash restart, a recreate, a session moved to
//! another replica, a pool started again after `down`.
//!
//! A `boot` event carries where the runner booted ([`BootHost`]): its process (a random ID drawn
//! when the process started), its container (`AGENTFILE_INSTANCE`, a new ID for every container
//! `ninetrix up` creates — Docker restarting the same container keeps its environment, so keeps
//! it), why `up` created that container (`AGENTFILE_CREATED`), and the replica serving the
//! thread. [`BootKind::of`] compares a boot with the thread's previous one; it is pure, so
//! `ninetrix trace` (and its tests) decide with no I/O. Boot events of older runners carry no
//! host: they read as before (`restart N` for a re-claim).

use serde::{Deserialize, Serialize};

pub use crate::events::{BootHost, Created};

use crate::events::Boot;

/// What a claim of a thread was, told from the boot before it (`ninetrix trace`'s boot lines,
/// and `boot_kind` in `trace --json`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum BootKind {
    /// The thread's first claim.
    First,
    /// The same container started again: Docker's restart policy after the runner died (or a
    /// `docker restart`, or `up` starting a container that had stopped).
    CrashRestart,
    /// `ninetrix up` replaced the container (configuration changed, `--force-recreate`,
    /// `reset`).
    Recreated,
    /// A new container where there was none: `up` after `down` (or after the container was
    /// removed).
    ResumedAfterDown,
    /// A session's thread, taken by another replica than the one that served it last.
    Moved {
        /// The replica that served it before.
        from: u32,
        /// The one that took it.
        to: u32,
    },
    /// A session's thread taken up again by the same runner for new work (it stops when its
    /// inbox is empty).
    TakenUp,
    /// Another container, for a reason it was not told (not made by `ninetrix up`).
    NewContainer,
    /// A re-claim this boot cannot explain: an older runner recorded no host (`restart N`).
    Restart {
        /// Claims before this one.
        restarts: u64,
    },
}

impl BootKind {
    /// What claim `this` was, given the thread's previous boot (`None`: none is known).
    pub fn of(previous: Option<&Boot>, this: &Boot) -> BootKind {
        if this.boot_count <= 1 {
            return BootKind::First;
        }
        let legacy = BootKind::Restart {
            restarts: this.restart_count,
        };
        let Some(host) = &this.host else {
            return legacy;
        };
        let before = previous.and_then(|p| p.host.as_ref());
        if let Some(before) = before {
            if let (Some(from), Some(to)) = (before.replica, host.replica)
                && from != to
            {
                return BootKind::Moved { from, to };
            }
            if before.process == host.process {
                return BootKind::TakenUp;
            }
            if host.container.is_some() && before.container == host.container {
                return BootKind::CrashRestart;
            }
        }
        // Another container (or the previous boot is unknown): `up` said why it made this one.
        // A container `up` made for a replica that had none, on a thread claimed before, is the
        // pool coming back after `down`; only a crash restart keeps the container, and that
        // needs the previous boot to tell.
        match host.created {
            Some(Created::Recreate) => BootKind::Recreated,
            Some(Created::New) => BootKind::ResumedAfterDown,
            // Two known containers, and they differ.
            Some(Created::Other) | None
                if host.container.is_some() && before.is_some_and(|b| b.container.is_some()) =>
            {
                BootKind::NewContainer
            }
            // A plain process restarted, or nothing to compare: as an older runner's boot.
            Some(Created::Other) | None => legacy,
        }
    }

    /// How `ninetrix trace` names it.
    pub fn label(&self) -> String {
        match self {
            BootKind::First => "first".into(),
            BootKind::CrashRestart => "crash restart".into(),
            BootKind::Recreated => "recreated by up".into(),
            BootKind::ResumedAfterDown => "resumed after down".into(),
            BootKind::Moved { from, to } => format!("moved from replica {from} to replica {to}"),
            BootKind::TakenUp => "taken up again for new work".into(),
            BootKind::NewContainer => "new container".into(),
            BootKind::Restart { restarts } => format!("restart {restarts}"),
        }
    }
}

/// Follows one thread's boots in order, naming each ([`BootKind::of`] against the one before).
#[derive(Clone, Debug, Default)]
pub struct BootKinds {
    previous: Option<Boot>,
}

impl BootKinds {
    /// What `boot` was; it becomes the previous boot.
    pub fn next(&mut self, boot: &Boot) -> BootKind {
        let kind = BootKind::of(self.previous.as_ref(), boot);
        self.previous = Some(boot.clone());
        kind
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn host(process: &str, container: Option<&str>, created: Option<Created>) -> BootHost {
        BootHost {
            process: process.into(),
            container: container.map(str::to_string),
            created,
            replica: Some(1),
        }
    }

    fn boot(boot_count: u64, host: Option<BootHost>) -> Boot {
        Boot {
            epoch: boot_count,
            boot_count,
            restart_count: boot_count.saturating_sub(1),
            repaired: false,
            version: 0,
            host,
        }
    }

    #[test]
    fn each_claim_is_named_from_the_boot_before_it() {
        let up = host("p1", Some("c1"), Some(Created::New));
        let first = boot(1, Some(up.clone()));
        assert_eq!(BootKind::of(None, &first), BootKind::First);
        // Docker restarted the same container: a new process, the same container.
        let crashed = boot(2, Some(host("p2", Some("c1"), Some(Created::New))));
        assert_eq!(BootKind::of(Some(&first), &crashed), BootKind::CrashRestart);
        // `up` replaced the container.
        let recreated = boot(3, Some(host("p3", Some("c2"), Some(Created::Recreate))));
        assert_eq!(
            BootKind::of(Some(&crashed), &recreated),
            BootKind::Recreated
        );
        // `down`, then `up`: a new container where there was none.
        let back = boot(4, Some(host("p4", Some("c3"), Some(Created::New))));
        assert_eq!(
            BootKind::of(Some(&recreated), &back),
            BootKind::ResumedAfterDown
        );
        // A crash of a recreated container is still a crash.
        let again = boot(5, Some(host("p5", Some("c2"), Some(Created::Recreate))));
        assert_eq!(
            BootKind::of(Some(&recreated), &again),
            BootKind::CrashRestart
        );
        // Without the previous boot, `up`'s word is what is known.
        assert_eq!(BootKind::of(None, &recreated), BootKind::Recreated);
        assert_eq!(BootKind::of(None, &back), BootKind::ResumedAfterDown);
    }

    #[test]
    fn a_session_moved_or_taken_up_again_is_not_a_restart() {
        let on = |process: &str, container: &str, replica: u32| {
            Some(BootHost {
                replica: Some(replica),
                ..host(process, Some(container), Some(Created::New))
            })
        };
        let first = boot(1, on("p1", "c1", 1));
        let woke = boot(2, on("p1", "c1", 1));
        assert_eq!(BootKind::of(Some(&first), &woke), BootKind::TakenUp);
        let moved = boot(3, on("p9", "c9", 2));
        assert_eq!(
            BootKind::of(Some(&woke), &moved),
            BootKind::Moved { from: 1, to: 2 }
        );
        assert_eq!(
            BootKind::Moved { from: 1, to: 2 }.label(),
            "moved from replica 1 to replica 2"
        );
    }

    #[test]
    fn boots_without_a_host_or_a_cause_read_as_before() {
        // An older runner's boots: `restart N` for a re-claim, else the first.
        let old = boot(1, None);
        assert_eq!(BootKind::of(None, &old), BootKind::First);
        let old2 = boot(3, None);
        assert_eq!(
            BootKind::of(Some(&old), &old2),
            BootKind::Restart { restarts: 2 }
        );
        assert_eq!(BootKind::Restart { restarts: 2 }.label(), "restart 2");
        // Containers nobody said anything about (Swarm): another one, or unknown.
        let swarm1 = boot(2, Some(host("p1", Some("t1"), None)));
        let swarm2 = boot(3, Some(host("p2", Some("t2"), None)));
        assert_eq!(BootKind::of(Some(&swarm1), &swarm2), BootKind::NewContainer);
        // A plain process (no container known) restarted: as before.
        let plain1 = boot(1, Some(host("p1", None, None)));
        let plain2 = boot(2, Some(host("p2", None, None)));
        assert_eq!(
            BootKind::of(Some(&plain1), &plain2),
            BootKind::Restart { restarts: 1 }
        );
        assert_eq!(
            BootKind::of(None, &swarm2),
            BootKind::Restart { restarts: 2 }
        );
        // After an older runner's boot, `up`'s word still counts.
        let new = boot(4, Some(host("p3", Some("c1"), Some(Created::New))));
        assert_eq!(BootKind::of(Some(&old2), &new), BootKind::ResumedAfterDown);
    }

    #[test]
    fn the_wire_shapes_are_stable_and_unknown_causes_still_read() {
        let b: Boot = serde_json::from_value(json!({
            "epoch": 2, "boot_count": 2, "restart_count": 1, "repaired": false,
            "host": {"process": "p", "container": "c", "created": "rebuilt", "replica": 1}
        }))
        .unwrap();
        assert_eq!(b.host.as_ref().unwrap().created, Some(Created::Other));
        assert_eq!(Created::parse("recreate"), Created::Recreate);
        assert_eq!(Created::parse(" new\n"), Created::New);
        assert_eq!(Created::parse("?"), Created::Other);
        assert_eq!(
            serde_json::to_value(BootKind::Moved { from: 1, to: 2 }).unwrap(),
            json!({"kind": "moved", "from": 1, "to": 2})
        );
        assert_eq!(
            serde_json::to_value(BootKind::ResumedAfterDown).unwrap(),
            json!({"kind": "resumed_after_down"})
        );
        // An older runner's boot has no host, and one without a host writes none.
        let old: Boot = serde_json::from_value(
            json!({"epoch": 1, "boot_count": 1, "restart_count": 0, "repaired": false}),
        )
        .unwrap();
        assert_eq!(old.host, None);
        assert!(serde_json::to_value(&old).unwrap().get("host").is_none());
    }

    #[test]
    fn kinds_follow_a_thread_s_boots_in_order() {
        let mut kinds = BootKinds::default();
        let first = boot(1, Some(host("p1", Some("c1"), Some(Created::New))));
        let crashed = boot(2, Some(host("p2", Some("c1"), Some(Created::New))));
        assert_eq!(kinds.next(&first), BootKind::First);
        assert_eq!(kinds.next(&crashed), BootKind::CrashRestart);
    }
}
