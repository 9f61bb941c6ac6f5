//! The pool's triggers as both backends (one host, and Swarm through this module) register them
//! with their API: the registration set (each webhook's secret read from the host), the progress
//! lines of a registration, and `up --dry-run`'s lines of what a registration would change.

use ninetrix_proto::api::{Trigger, TriggerRegistration, TriggerSet, TriggersApplied};
use ninetrix_proto::triggers::TriggerSpec;

use crate::pool::spec;

/// The pool's triggers as `up` registers them, each webhook with its secret's value read from
/// the host environment as agents' secrets are (a missing one fails `up` before anything starts,
/// naming the trigger).
pub(crate) fn registrations(triggers: &[TriggerSpec]) -> anyhow::Result<TriggerSet> {
    let mut set = TriggerSet::default();
    for trigger in triggers {
        let secret = match trigger.webhook() {
            Some(w) => {
                let needed_by = format!("trigger `{}`", trigger.name);
                let mut values = spec::host_values(std::slice::from_ref(&w.secret), &needed_by)?;
                values.remove(&w.secret)
            }
            None => None,
        };
        set.triggers.push(TriggerRegistration {
            spec: trigger.clone(),
            secret,
        });
    }
    Ok(set)
}

/// The progress lines of a registration: one per trigger created, updated or removed (nothing
/// for an unchanged one).
pub(crate) fn trigger_steps(applied: &TriggersApplied) -> Vec<(&str, &'static str)> {
    let mut steps = Vec::new();
    for (names, status) in [
        (&applied.created, "Created"),
        (&applied.updated, "Updated"),
        (&applied.removed, "Removed"),
    ] {
        steps.extend(names.iter().map(|n| (n.as_str(), status)));
    }
    steps
}

/// `up --dry-run`'s trigger lines: what registering `desired` would change against the triggers
/// the API holds (`registered`), by name and spec. A changed webhook secret cannot be seen (the
/// API never returns it), so nothing is said about secrets.
pub(crate) fn trigger_changes(desired: &[TriggerSpec], registered: &[Trigger]) -> Vec<String> {
    let mut lines = Vec::new();
    for want in desired {
        match registered.iter().find(|t| t.spec.name == want.name) {
            None => lines.push(format!(
                "create trigger {}: new {} for agent {}",
                want.name,
                want.kind_name(),
                want.agent
            )),
            Some(have) if have.spec != *want => lines.push(format!(
                "update trigger {}: changed ({})",
                want.name,
                spec_diff(&have.spec, want).join(", ")
            )),
            Some(_) => {}
        }
    }
    for have in registered {
        if !desired.iter().any(|d| d.name == have.spec.name) {
            lines.push(format!(
                "remove trigger {}: no longer in the agentfile",
                have.spec.name
            ));
        }
    }
    lines
}

/// The fields that differ between two specs of one trigger: `agent`, `session`, `type`, or the
/// kind's own fields (`cron`, `message`, `overlap`…).
fn spec_diff(old: &TriggerSpec, new: &TriggerSpec) -> Vec<String> {
    let mut fields = Vec::new();
    if old.agent != new.agent {
        fields.push("agent".to_string());
    }
    if old.session != new.session {
        fields.push("session".to_string());
    }
    if old.kind_name() != new.kind_name() {
        fields.push("type".to_string());
    } else {
        let as_map = |spec: &TriggerSpec| match serde_json::to_value(&spec.kind) {
            Ok(serde_json::Value::Object(map)) => map,
            _ => serde_json::Map::new(),
        };
        let (a, b) = (as_map(old), as_map(new));
        let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
        fields.extend(
            keys.into_iter()
                .filter(|k| a.get(*k) != b.get(*k))
                .map(|k| agentfile_key(k).to_string()),
        );
    }
    if fields.is_empty() {
        fields.push("spec".to_string());
    }
    fields
}

/// A spec field by the agentfile key that sets it (`every_secs` is `every`).
fn agentfile_key(field: &str) -> &str {
    match field {
        "every_secs" => "every",
        "catch_up_window_secs" => "catch_up_window",
        "tolerance_secs" => "tolerance",
        "rate_limit_per_minute" => "rate_limit",
        "max_body_bytes" => "max_body",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone as _, Utc};
    use ninetrix_proto::triggers::schedule::{CatchUp, Overlap};
    use ninetrix_proto::triggers::{
        ScheduleTrigger, SignatureScheme, TriggerKind, TriggerSession, WebhookTrigger,
    };

    use super::*;

    fn schedule(name: &str, cron: &str) -> TriggerSpec {
        TriggerSpec {
            name: name.into(),
            agent: "writer".into(),
            session: TriggerSession::default_for(name),
            kind: TriggerKind::Schedule(ScheduleTrigger {
                cron: Some(cron.into()),
                every_secs: None,
                timezone: "UTC".into(),
                message: "Write the daily report".into(),
                overlap: Overlap::Skip,
                catch_up: CatchUp::Last,
                catch_up_window_secs: 3_600,
            }),
        }
    }

    fn webhook(name: &str, secret: &str) -> TriggerSpec {
        TriggerSpec {
            name: name.into(),
            agent: "triage".into(),
            session: TriggerSession::New,
            kind: TriggerKind::Webhook(WebhookTrigger {
                path: name.into(),
                message: "New issue: {{ issue.title }}".into(),
                secret: secret.into(),
                signature: SignatureScheme::Github,
                tolerance_secs: 300,
                rate_limit_per_minute: 60,
                max_body_bytes: 1 << 20,
            }),
        }
    }

    fn registered(spec: TriggerSpec) -> Trigger {
        let at = Utc.with_ymd_and_hms(2026, 3, 2, 9, 0, 0).unwrap();
        Trigger {
            pool: "shop".into(),
            hook_path: None,
            spec,
            next_fire_at: None,
            buffered_at: None,
            last: None,
            created_at: at,
            updated_at: at,
        }
    }

    #[test]
    fn a_webhooks_secret_comes_from_the_host_and_a_missing_one_names_the_trigger() {
        let set =
            registrations(&[schedule("nightly", "0 9 * * *"), webhook("gh", "PATH")]).unwrap();
        assert_eq!(set.triggers.len(), 2);
        assert_eq!(set.triggers[0].secret, None, "a schedule has no secret");
        assert_eq!(set.triggers[1].secret, std::env::var("PATH").ok());
        let unset = "NINETRIX_TEST_SECRET_THAT_IS_NEVER_SET_7F3A";
        let err = registrations(&[webhook("gh-issues", unset)]).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains(unset)
                && text.contains("trigger `gh-issues`")
                && text.contains("nothing was started"),
            "{text}"
        );
        assert!(registrations(&[]).unwrap().triggers.is_empty());
    }

    #[test]
    fn progress_names_each_trigger_that_changed_and_none_that_did_not() {
        let applied = TriggersApplied {
            created: vec!["a".into()],
            updated: vec!["b".into()],
            unchanged: vec!["c".into()],
            removed: vec!["d".into(), "e".into()],
        };
        assert_eq!(
            trigger_steps(&applied),
            [
                ("a", "Created"),
                ("b", "Updated"),
                ("d", "Removed"),
                ("e", "Removed")
            ]
        );
        assert!(trigger_steps(&TriggersApplied::default()).is_empty());
    }

    #[test]
    fn a_dry_run_lists_the_triggers_it_would_create_update_and_remove() {
        let mut moved = schedule("moved", "0 9 * * *");
        moved.agent = "editor".into();
        let desired = [
            schedule("nightly", "0 9 * * *"),
            schedule("weekly", "0 9 * * 1"),
            webhook("gh", "GH_SECRET"),
            moved,
        ];
        let have = [
            registered(schedule("nightly", "0 9 * * *")),
            registered(schedule("weekly", "0 8 * * 1")),
            registered(schedule("moved", "0 9 * * *")),
            registered(schedule("old", "0 0 * * *")),
        ];
        assert_eq!(
            trigger_changes(&desired, &have),
            [
                "update trigger weekly: changed (cron)",
                "create trigger gh: new webhook for agent triage",
                "update trigger moved: changed (agent)",
                "remove trigger old: no longer in the agentfile",
            ]
        );
        let mut faster = schedule("poll", "0 9 * * *");
        if let TriggerKind::Schedule(s) = &mut faster.kind {
            (s.cron, s.every_secs, s.catch_up_window_secs) = (None, Some(300), 60);
        }
        assert_eq!(
            trigger_changes(&[faster], &[registered(schedule("poll", "0 9 * * *"))]),
            ["update trigger poll: changed (catch_up_window, cron, every)"]
        );
        let mut other = webhook("gh", "GH_SECRET");
        other.session = TriggerSession::Key("gh".into());
        assert_eq!(
            trigger_changes(&[other], &[registered(schedule("gh", "0 9 * * *"))]),
            ["update trigger gh: changed (agent, session, type)"]
        );
        assert!(
            trigger_changes(&[webhook("gh", "A")], &[registered(webhook("gh", "A"))]).is_empty()
        );
        assert!(trigger_changes(&[], &[]).is_empty());
    }
}
