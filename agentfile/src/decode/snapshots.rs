//! `execution.snapshots`: whether a durable agent's workspace is snapshotted at each turn's end
//! (for `ninetrix fork`, `rewind` and `diff`), and the bounds of one snapshot — `false` (off),
//! `true` or absent (the defaults), or a mapping of `max_bytes`, `max_files` and `keep_turns`
//! over the defaults. A batch agent never has snapshots; asking for them on one is a warning.
//!
//! Set at the top level it is every agent's default; an agent's own value replaces it as a whole
//! (a mapping's missing keys take the defaults, not the top level's).

use super::*;
use crate::schema::Snapshots;

/// The smallest `max_bytes`: 1 MiB.
pub(super) const MIN_BYTES: u64 = 1 << 20;
/// The largest `max_bytes`: 64 GiB.
pub(super) const MAX_BYTES: u64 = 64 << 30;
/// The largest `max_files`.
pub(super) const MAX_FILES: u64 = 1_000_000;
/// The largest `keep_turns`.
pub(super) const MAX_KEEP_TURNS: u32 = 100_000;

/// `execution.snapshots` as written.
#[derive(Clone, Debug)]
pub(super) struct SnapshotsIn {
    /// What it asks for: `None` is off (`false`).
    pub(super) value: Option<Snapshots>,
    /// Where its key is.
    pub(super) at: Loc,
    /// Whether it came from the top-level `execution` (an agent that inherits it).
    pub(super) shared: bool,
}

impl SnapshotsIn {
    /// The same setting as an agent inherits it from the top level.
    pub(super) fn inherited(&self) -> SnapshotsIn {
        SnapshotsIn {
            shared: true,
            ..self.clone()
        }
    }
}

pub(super) const SNAPSHOTS: Section<Snapshots> = Section {
    what: "snapshots",
    keys: &[
        ("max_bytes", |cx, s, f| {
            s.max_bytes = cx.snapshot_bytes(&f)?;
            Some(())
        }),
        ("max_files", |cx, s, f| {
            s.max_files = cx.integer_u64(f.value, &f.path, 1, MAX_FILES)?;
            Some(())
        }),
        ("keep_turns", |cx, s, f| {
            s.keep_turns = cx.integer(f.value, &f.path, 1, MAX_KEEP_TURNS)?;
            Some(())
        }),
    ],
    unsupported: &[],
};

impl Cx {
    /// `snapshots:` (the field `f` of an `execution`): `true`/`null` (the defaults), `false`
    /// (off), or a mapping over the defaults. `None` when it is none of these (reported).
    pub(super) fn snapshots_in(&mut self, f: &Field<'_>) -> Option<SnapshotsIn> {
        let value = match &f.value.kind {
            Kind::Null | Kind::Bool(true) => Some(Snapshots::default()),
            Kind::Bool(false) => None,
            Kind::Map(_) => {
                let mut s = Snapshots::default();
                self.dispatch(f.value, &f.path, &SNAPSHOTS, &mut s)?
                    .then_some(())?;
                Some(s)
            }
            // `yes`/`off` and the like: the strict-boolean message.
            Kind::Str(s)
                if ["yes", "no", "on", "off", "y", "n"]
                    .contains(&s.to_ascii_lowercase().as_str()) =>
            {
                self.boolean(f.value, &f.path)?;
                return None;
            }
            _ => {
                let expected = "`true`, `false`, or a mapping such as `{ max_bytes: 512Mi, \
                                max_files: 20000, keep_turns: 100 }`";
                self.type_error(&f.path, f.value, expected);
                return None;
            }
        };
        Some(SnapshotsIn {
            value,
            at: f.key.loc,
            shared: false,
        })
    }

    /// `max_bytes`: a size such as `512Mi` (or whole bytes), from 1Mi to 64Gi.
    fn snapshot_bytes(&mut self, f: &Field<'_>) -> Option<u64> {
        let (p, v) = (&f.path, f.value);
        let text = match &v.kind {
            Kind::Str(s) => s.clone(),
            Kind::Int(i) => i.to_string(),
            _ => {
                self.type_error(p, v, "a size such as \"512Mi\"");
                return None;
            }
        };
        match units::parse_memory(&text) {
            Some(bytes) if (MIN_BYTES..=MAX_BYTES).contains(&bytes) => Some(bytes),
            Some(_) => {
                self.report(p, v.loc, Problem::SnapshotBytes(&text));
                None
            }
            None => {
                self.report(p, v.loc, Problem::NotAMemorySize(&text));
                None
            }
        }
    }

    /// The snapshots of agent `agent_path` (its `execution`'s `written`, the top level's merged
    /// in): the defaults when unset, `None` when off and always for a batch agent — where an
    /// own request for them is a warning.
    pub(super) fn snapshots(
        &mut self,
        written: Option<&SnapshotsIn>,
        durable: bool,
        agent_path: &str,
    ) -> Option<Snapshots> {
        if !durable {
            if let Some(s) = written.filter(|s| !s.shared && s.value.is_some()) {
                let path = join(agent_path, "execution.snapshots");
                self.report(
                    &path,
                    s.at,
                    Problem::SnapshotsUnused(Some(leaf(agent_path))),
                );
            }
            return None;
        }
        match written {
            None => Some(Snapshots::default()),
            Some(s) => s.value,
        }
    }

    /// The top level's `execution.snapshots` (`shared`) when no agent is durable: a warning
    /// if it asks for snapshots.
    pub(super) fn unused_shared_snapshots(&mut self, shared: Option<&SnapshotsIn>) {
        if let Some(s) = shared.filter(|s| s.value.is_some()) {
            self.report("execution.snapshots", s.at, Problem::SnapshotsUnused(None));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use crate::schema::Snapshots;

    const SCRIPTED: &str = "    runtime: { provider: scripted, script: [hi] }\n";

    /// Agent `a` with `execution` lines `own` (indented 6), then `top` at the top level.
    fn file(own: &str, top: &str) -> String {
        format!("agents:\n  a:\n{SCRIPTED}    execution:\n{own}{top}")
    }

    fn snapshots_of(text: &str, agent: &str) -> Option<Snapshots> {
        valid(text)
            .agentfile
            .agent(agent)
            .unwrap()
            .execution
            .snapshots
    }

    #[test]
    fn absent_or_true_is_the_defaults_false_is_off_and_a_map_fills_the_rest() {
        let defaults = Some(Snapshots::default());
        let none = format!("agents:\n  a:\n{SCRIPTED}");
        assert_eq!(snapshots_of(&none, "a"), defaults);
        assert_eq!(
            snapshots_of(&file("      snapshots: true\n", ""), "a"),
            defaults
        );
        assert_eq!(snapshots_of(&file("      snapshots:\n", ""), "a"), defaults);
        assert_eq!(
            snapshots_of(&file("      snapshots: false\n", ""), "a"),
            None
        );
        let map = file("      snapshots: { max_bytes: 2Gi, keep_turns: 10 }\n", "");
        assert_eq!(
            snapshots_of(&map, "a"),
            Some(Snapshots {
                max_bytes: 2 << 30,
                max_files: 20_000,
                keep_turns: 10,
            })
        );
        let p = valid(&map);
        assert!(p.warnings.diagnostics.is_empty(), "{:?}", p.warnings);
        // The resolved spec reads back.
        let a = p.agentfile.agent("a").unwrap();
        let json = serde_json::to_string(a).unwrap();
        assert_eq!(&serde_json::from_str::<crate::AgentSpec>(&json).unwrap(), a);
    }

    #[test]
    fn the_top_level_is_every_agents_default_and_an_agents_own_replaces_it() {
        let text = format!(
            "execution:\n  snapshots: {{ max_files: 500 }}\nagents:\n  a:\n{SCRIPTED}  b:\n{SCRIPTED}    \
             execution:\n      snapshots: false\n  c:\n{SCRIPTED}    execution:\n      snapshots: \
             {{ keep_turns: 3 }}\n"
        );
        assert_eq!(
            snapshots_of(&text, "a"),
            Some(Snapshots {
                max_files: 500,
                ..Snapshots::default()
            })
        );
        assert_eq!(snapshots_of(&text, "b"), None);
        assert_eq!(
            snapshots_of(&text, "c"),
            Some(Snapshots {
                keep_turns: 3,
                ..Snapshots::default()
            })
        );
    }

    #[test]
    fn bad_values_are_located_with_help() {
        assert_error(
            &file("      snapshots: { max_files: 0 }\n", ""),
            "out_of_range",
            (5, 31),
            "`max_files` must be between 1 and 1000000, found 0",
        );
        assert_error(
            &file("      snapshots: { keep_turns: 100001 }\n", ""),
            "out_of_range",
            (5, 32),
            "`keep_turns` must be between 1 and 100000, found 100001",
        );
        let d = assert_error(
            &file("      snapshots: { max_bytes: 100Gi }\n", ""),
            "out_of_range",
            (5, 31),
            "`max_bytes` must be between 1Mi and 64Gi, found `100Gi`",
        );
        assert!(d.help.unwrap().contains("512Mi"));
        assert_error(
            &file("      snapshots: { max_bytes: 512Ki }\n", ""),
            "out_of_range",
            (5, 31),
            "`max_bytes` must be between 1Mi and 64Gi, found `512Ki`",
        );
        assert_error(
            &file("      snapshots: { max_bytes: lots }\n", ""),
            "invalid_memory",
            (5, 31),
            "`lots` is not a memory size",
        );
        let d = assert_error(
            &file("      snapshots: { keep_turn: 5 }\n", ""),
            "unknown_key",
            (5, 20),
            "unknown key `keep_turn` in snapshots",
        );
        assert_eq!(d.help.as_deref(), Some("did you mean `keep_turns`?"));
        let d = assert_error(
            &file("      snapshot: false\n", ""),
            "unknown_key",
            (5, 7),
            "unknown key `snapshot` in execution",
        );
        assert_eq!(d.help.as_deref(), Some("did you mean `snapshots`?"));
        let d = assert_error(
            &file("      snapshots: 100\n", ""),
            "wrong_type",
            (5, 18),
            "`snapshots` must be `true`, `false`, or a mapping such as `{ max_bytes: 512Mi, \
             max_files: 20000, keep_turns: 100 }`, found the number 100",
        );
        assert!(d.help.is_some());
        assert_error(
            &file("      snapshots: off\n", ""),
            "wrong_type",
            (5, 18),
            "`snapshots` must be true or false, found \"off\"",
        );
        let d = assert_error(
            &file("      keep_turns: 5\n", ""),
            "unknown_key",
            (5, 7),
            "unknown key `keep_turns` in execution",
        );
        assert_eq!(
            d.help.as_deref(),
            Some("`keep_turns` belongs under `execution.snapshots`")
        );
    }

    #[test]
    fn a_batch_agent_has_none_and_asking_for_them_is_a_warning() {
        let batch = "      durability: false\n      task: go\n";
        let off = file(&format!("{batch}      snapshots: false\n"), "");
        assert_eq!(snapshots_of(&off, "a"), None);
        assert!(valid(&off).warnings.diagnostics.is_empty());
        let plain = file(batch, "");
        assert_eq!(snapshots_of(&plain, "a"), None);
        assert!(valid(&plain).warnings.diagnostics.is_empty());
        let w = one_warning(&file(
            &format!("{batch}      snapshots: {{ keep_turns: 5 }}\n"),
            "",
        ));
        assert_eq!(
            (w.kind.code(), w.path.as_str(), w.line, w.column),
            ("setting_unused", "agents.a.execution.snapshots", 7, 7)
        );
        assert!(
            w.message.contains("agent `a` is a batch job"),
            "{}",
            w.message
        );
        // The top level's, when every agent is a batch job: said once, at the top level.
        let w = one_warning(&file(batch, "execution:\n  snapshots: true\n"));
        assert_eq!(
            (w.kind.code(), w.path.as_str(), w.line, w.column),
            ("setting_unused", "execution.snapshots", 8, 3)
        );
        assert!(
            w.message.contains("every agent is a batch job"),
            "{}",
            w.message
        );
        // Used by a durable agent: no warning.
        let text = format!(
            "execution:\n  snapshots: {{ keep_turns: 5 }}\nagents:\n  a:\n{SCRIPTED}    \
             execution: {{ durability: false, task: go }}\n  b:\n{SCRIPTED}"
        );
        let p = valid(&text);
        assert!(p.warnings.diagnostics.is_empty(), "{:?}", p.warnings);
        assert_eq!(snapshots_of(&text, "a"), None);
        assert_eq!(snapshots_of(&text, "b").unwrap().keep_turns, 5);
    }
}
