//! `triggers`: what starts a turn without a person typing — a schedule (`cron` in a time zone, or
//! `every` interval) or a signed webhook — declared at the top level (sent to `target_agent`, else
//! the file's first agent) or under an agent (sent to that agent).
//!
//! A trigger is checked against the whole pool (unique names and webhook paths, its target agent
//! and whether that agent is durable), wherever it is declared, so decoding happens in two steps,
//! as for collaborators:
//! 1. [`Cx::triggers_in`] reads a `triggers:` list while its section is dispatched: each item's
//!    keys and values, and the rules between the keys of one trigger (a schedule's rule and zone,
//!    a webhook's templates and secret, keys of the other type).
//! 2. [`Cx::resolve_triggers`] checks every trigger of the file against the others and the
//!    agents once every agent is read, and builds the [`TriggerSpec`]s in file order: the
//!    top-level triggers first, then each agent's in agent order.

use super::problem::{NameOf, Unused};
use super::*;
use ninetrix_proto::sessions;
use ninetrix_proto::triggers::schedule::{self, CatchUp, Overlap, ScheduleError, Spec};
use ninetrix_proto::triggers::spec::{
    self as trigger_spec, DEFAULT_MAX_BODY_BYTES, DEFAULT_RATE_LIMIT_PER_MINUTE,
    DEFAULT_TOLERANCE_SECS, MAX_MAX_BODY_BYTES, MAX_RATE_LIMIT_PER_MINUTE,
};
use ninetrix_proto::triggers::template::Template;
use ninetrix_proto::triggers::{
    ScheduleTrigger, SignatureScheme, TriggerKind, TriggerSession, TriggerSpec, WebhookTrigger,
};

/// The most triggers one pool may have (the API's limit too).
pub(super) const MAX_TRIGGERS: usize = trigger_spec::MAX_TRIGGERS;

/// The keys only a schedule takes.
const SCHEDULE_KEYS: &[&str] = &[
    "cron",
    "every",
    "timezone",
    "overlap",
    "catch_up",
    "catch_up_window",
];
/// The keys only a webhook takes.
const WEBHOOK_KEYS: &[&str] = &[
    "path",
    "secret",
    "signature",
    "tolerance",
    "rate_limit",
    "max_body",
];
/// The public Ninetrix's webhook keys: a port of its own, which ninetrix does not open.
const ENDPOINT_KEYS: &[&str] = &["endpoint", "port"];
/// The public Ninetrix's chat channel keys.
const CHANNEL_KEYS: &[&str] = &[
    "channels",
    "bot",
    "session_mode",
    "verbose",
    "allowed_ids",
    "reject_message",
];

/// What a trigger reacts to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TriggerType {
    /// A clock.
    Schedule,
    /// A signed HTTP delivery.
    Webhook,
}

impl TriggerType {
    /// As written in `type:`.
    pub(super) fn name(self) -> &'static str {
        match self {
            TriggerType::Schedule => "schedule",
            TriggerType::Webhook => "webhook",
        }
    }

    /// The type whose keys `key` is, if it is one type's.
    fn owning(key: &str) -> Option<TriggerType> {
        if SCHEDULE_KEYS.contains(&key) {
            Some(TriggerType::Schedule)
        } else if WEBHOOK_KEYS.contains(&key) {
            Some(TriggerType::Webhook)
        } else {
            None
        }
    }
}

/// One `triggers:` list as written, after the checks that need only the list.
#[derive(Debug, Default)]
pub(super) struct TriggersIn {
    entries: Vec<TriggerIn>,
}

/// One trigger as written. Values with errors are reported and left out (and `valid` is
/// cleared), so only the checks that depend on them are skipped.
#[derive(Debug, Default)]
pub(super) struct TriggerIn {
    /// Where the item is.
    at: Loc,
    /// The item's dotted path, e.g. `triggers[0]` or `agents.a.triggers[1]`.
    path: String,
    /// The agent it is declared under; `None` at the top level.
    under: Option<String>,
    /// Whether everything read so far is valid.
    valid: bool,
    /// Every key written, and where.
    keys: Vec<(String, Loc)>,
    name: Option<(String, Loc)>,
    kind: Option<TriggerType>,
    target: Option<(String, Loc)>,
    message: Option<(String, Loc)>,
    session: Option<(String, Loc)>,
    cron: Option<(String, Loc)>,
    every: Option<u64>,
    timezone: Option<(String, Loc)>,
    overlap: Option<Overlap>,
    catch_up: Option<CatchUp>,
    catch_up_window: Option<u64>,
    hook_path: Option<(String, Loc)>,
    secret: Option<String>,
    signature: Option<SignatureScheme>,
    tolerance: Option<u64>,
    rate_limit: Option<u32>,
    max_body: Option<u64>,
    /// The session and rule, when step 1 found the trigger valid.
    built: Option<(TriggerSession, TriggerKind)>,
}

impl TriggerIn {
    /// Where key `key` is, when it is written.
    fn key_loc(&self, key: &str) -> Option<Loc> {
        self.keys
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, loc)| *loc)
    }

    fn has(&self, key: &str) -> bool {
        self.key_loc(key).is_some()
    }

    fn name(&self) -> Option<&str> {
        self.name.as_ref().map(|(n, _)| n.as_str())
    }
}

/// An agent of the file as its triggers see it: its name and whether it is durable (`None`:
/// unknown, its `execution` is invalid and reported already).
pub(super) type Target = (String, Option<bool>);

impl Cx {
    /// Step 1: a `triggers:` list at `path`; `under` is the agent it is declared under (`None`
    /// at the top level). Invalid items are reported; every item is kept for step 2.
    pub(super) fn triggers_in(
        &mut self,
        node: &Node,
        path: &str,
        under: Option<&str>,
    ) -> TriggersIn {
        let mut list = TriggersIn::default();
        let Kind::Seq(items) = &node.kind else {
            self.type_error(path, node, "a list of triggers (`- name: …`)");
            return list;
        };
        for (i, item) in items.iter().enumerate() {
            let p = format!("{path}[{i}]");
            let t = self.trigger_in(item, &p, under);
            list.entries.push(t);
        }
        list
    }

    /// One item of a `triggers:` list.
    fn trigger_in(&mut self, node: &Node, path: &str, under: Option<&str>) -> TriggerIn {
        let mut t = TriggerIn {
            at: node.loc,
            path: path.to_string(),
            under: under.map(String::from),
            valid: true,
            ..TriggerIn::default()
        };
        let Kind::Map(entries) = &node.kind else {
            self.type_error(
                path,
                node,
                "a mapping, e.g. `- { name: nightly, type: schedule, cron: \"0 2 * * *\", \
                 message: … }`",
            );
            t.valid = false;
            return t;
        };
        // The public Ninetrix's webhook and channel keys are refused here, with their own hint;
        // the rest go through the section.
        let mut kept = Vec::with_capacity(entries.len());
        for (key, value) in entries {
            t.keys.push((key.name.clone(), key.loc));
            let endpoint = ENDPOINT_KEYS.contains(&key.name.as_str());
            if endpoint || CHANNEL_KEYS.contains(&key.name.as_str()) {
                let problem = Problem::UnsupportedTriggerKey {
                    key: &key.name,
                    endpoint,
                };
                self.report(&join(path, &key.name), key.loc, problem);
                t.valid = false;
            } else {
                kept.push((key.clone(), value.clone()));
            }
        }
        let kept = Node {
            kind: Kind::Map(kept),
            loc: node.loc,
        };
        t.valid &= self
            .dispatch(&kept, path, &TRIGGER, &mut t)
            .unwrap_or(false);
        self.trigger_rules(&mut t);
        t
    }

    /// The rules between the keys of one trigger; sets `t.built` when it is valid.
    fn trigger_rules(&mut self, t: &mut TriggerIn) {
        let mut ok = t.valid;
        if t.name.is_none() && !t.has("name") {
            self.report(&t.path, t.at, Problem::TriggerNoName);
            ok = false;
        }
        if let (Some(agent), Some(loc)) = (&t.under, t.key_loc("target_agent")) {
            let problem = Problem::TargetUnderAgent { agent };
            self.report(&join(&t.path, "target_agent"), loc, problem);
            ok = false;
        }
        let Some(kind) = t.kind else {
            if !t.has("type") {
                let guess = t
                    .keys
                    .iter()
                    .find_map(|(k, _)| TriggerType::owning(k))
                    .map(TriggerType::name);
                let problem = Problem::TriggerNoType {
                    trigger: t.name(),
                    guess,
                };
                self.report(&t.path, t.at, problem);
            }
            return;
        };
        let name = t.name().unwrap_or("").to_string();
        // Keys of the other type, at their keys.
        for (key, loc) in &t.keys {
            if let Some(owner) = TriggerType::owning(key)
                && owner != kind
            {
                let problem = Problem::TriggerKeyOfOtherType {
                    key,
                    trigger: t.name(),
                    owner: owner.name(),
                    kind: kind.name(),
                };
                self.report(&join(&t.path, key), *loc, problem);
                ok = false;
            }
        }
        let message = match &t.message {
            Some((text, loc)) if text.trim().is_empty() => {
                let problem = Problem::EmptyTriggerMessage {
                    webhook: kind == TriggerType::Webhook,
                };
                self.report(&join(&t.path, "message"), *loc, problem);
                ok = false;
                None
            }
            Some((text, loc)) => Some((text.clone(), *loc)),
            None => {
                if !t.has("message") {
                    let problem = Problem::TriggerNoMessage {
                        trigger: t.name(),
                        webhook: kind == TriggerType::Webhook,
                    };
                    self.report(&t.path, t.at, problem);
                }
                ok = false;
                None
            }
        };
        let session = self.trigger_session(t, kind, &name);
        ok &= session.is_some();
        let rule = match kind {
            TriggerType::Schedule => self.schedule_rule(t, message.map(|(m, _)| m)),
            TriggerType::Webhook => self.webhook_rule(t, message, &name),
        };
        if ok && let (Some(session), Some(rule)) = (session, rule) {
            t.built = Some((session, rule));
        }
    }

    /// `session:` of trigger `name`: `new`, a key (a template for a webhook), or the default.
    fn trigger_session(
        &mut self,
        t: &TriggerIn,
        kind: TriggerType,
        name: &str,
    ) -> Option<TriggerSession> {
        let Some((text, loc)) = &t.session else {
            // A broken `session:` was reported by its handler.
            return (!t.has("session")).then(|| TriggerSession::default_for(name));
        };
        if text == "new" {
            return Some(TriggerSession::New);
        }
        let path = join(&t.path, "session");
        let is_template = match kind {
            TriggerType::Schedule if text.contains("{{") => {
                self.report(&path, *loc, Problem::TemplateInSchedule);
                return None;
            }
            TriggerType::Schedule => false,
            TriggerType::Webhook => match Template::parse(text) {
                Ok(template) => !template.paths().is_empty(),
                Err(err) => {
                    let problem = Problem::InvalidTemplate {
                        leaf: "session",
                        err,
                    };
                    self.report(&path, *loc, problem);
                    return None;
                }
            },
        };
        // A template's key is checked when it is rendered, delivery by delivery.
        if !is_template && let Err(err) = sessions::check_key(text) {
            self.report(&path, *loc, Problem::TriggerSessionKey(err));
            return None;
        }
        Some(TriggerSession::Key(text.clone()))
    }

    /// A schedule's rule and settings; `None` when any is invalid (reported).
    fn schedule_rule(&mut self, t: &TriggerIn, message: Option<String>) -> Option<TriggerKind> {
        let mut ok = true;
        let (cron_at, every_at) = (t.key_loc("cron"), t.key_loc("every"));
        match (cron_at, every_at) {
            (Some(c), Some(e)) => {
                let (key, loc) = if (e.line, e.column) > (c.line, c.column) {
                    ("every", e)
                } else {
                    ("cron", c)
                };
                let problem = Problem::ScheduleRuleTwice { trigger: t.name() };
                self.report(&join(&t.path, key), loc, problem);
                ok = false;
            }
            (None, None) => {
                let problem = Problem::ScheduleNoRule { trigger: t.name() };
                self.report(&t.path, t.at, problem);
                ok = false;
            }
            _ => {}
        }
        if let (Some(loc), None, Some(_)) = (t.key_loc("timezone"), cron_at, every_at) {
            let path = join(&t.path, "timezone");
            self.report(&path, loc, Problem::TimezoneWithEvery);
            ok = false;
        }
        let zone = t.timezone.as_ref().map_or("UTC", |(zone, _)| zone.as_str());
        if let Some((expr, loc)) = &t.cron {
            match Spec::cron(expr, zone) {
                Ok(_) => {}
                Err(err @ ScheduleError::UnknownZone { .. }) => {
                    if let Some((_, zone_loc)) = &t.timezone {
                        let path = join(&t.path, "timezone");
                        self.report(&path, *zone_loc, Problem::Schedule(err));
                    }
                    ok = false;
                    // The expression is still checked, on its own.
                    if let Err(err) = Spec::cron(expr, "UTC") {
                        let path = join(&t.path, "cron");
                        self.report(&path, *loc, Problem::Schedule(err));
                    }
                }
                Err(err) => {
                    self.report(&join(&t.path, "cron"), *loc, Problem::Schedule(err));
                    ok = false;
                }
            }
        } else if let Some((zone, loc)) = &t.timezone
            && every_at.is_none()
            && let Err(err) = Spec::cron("0 0 * * *", zone)
        {
            // No valid cron to go with it (reported); a wrong zone is still worth saying.
            self.report(&join(&t.path, "timezone"), *loc, Problem::Schedule(err));
            ok = false;
        }
        let catch_up = t.catch_up.unwrap_or(schedule::DEFAULT_CATCH_UP);
        if catch_up == CatchUp::None
            && let Some(loc) = t.key_loc("catch_up_window")
        {
            let problem = Problem::TriggerSettingUnused(Unused::CatchUpWindow);
            self.report(&join(&t.path, "catch_up_window"), loc, problem);
        }
        if !ok {
            return None;
        }
        let cron = t.cron.as_ref().map(|(expr, _)| expr.clone());
        let every_secs = t.every;
        if cron.is_none() && every_secs.is_none() {
            return None;
        }
        let schedule = ScheduleTrigger {
            cron,
            every_secs,
            timezone: zone.to_string(),
            message: message?,
            overlap: t.overlap.unwrap_or(schedule::DEFAULT_OVERLAP),
            catch_up,
            catch_up_window_secs: t
                .catch_up_window
                .unwrap_or(trigger_spec::DEFAULT_CATCH_UP_WINDOW_SECS),
        };
        // The check the API's registration makes too (`ScheduleTrigger::spec`): what passed the
        // located checks above passes it, and nothing the API would refuse gets through.
        if let Err(err) = schedule.spec() {
            self.report(&t.path, t.at, Problem::Schedule(err));
            return None;
        }
        Some(TriggerKind::Schedule(schedule))
    }

    /// A webhook's rule and settings; `None` when any is invalid (reported).
    fn webhook_rule(
        &mut self,
        t: &TriggerIn,
        message: Option<(String, Loc)>,
        name: &str,
    ) -> Option<TriggerKind> {
        let mut ok = true;
        let mut template = None;
        if let Some((text, loc)) = message {
            match Template::parse(&text) {
                Ok(_) => template = Some(text),
                Err(err) => {
                    let problem = Problem::InvalidTemplate {
                        leaf: "message",
                        err,
                    };
                    self.report(&join(&t.path, "message"), loc, problem);
                    ok = false;
                }
            }
        }
        if !t.has("secret") {
            let problem = Problem::WebhookNoSecret { trigger: t.name() };
            self.report(&t.path, t.at, problem);
            ok = false;
        }
        let signature = t.signature.unwrap_or_default();
        if signature == SignatureScheme::Github
            && let Some(loc) = t.key_loc("tolerance")
        {
            let problem = Problem::TriggerSettingUnused(Unused::Tolerance);
            self.report(&join(&t.path, "tolerance"), loc, problem);
        }
        if !ok {
            return None;
        }
        let path = match &t.hook_path {
            Some((path, _)) => path.clone(),
            None => name.to_string(),
        };
        Some(TriggerKind::Webhook(WebhookTrigger {
            path,
            message: template?,
            secret: t.secret.clone()?,
            signature,
            tolerance_secs: t.tolerance.unwrap_or(DEFAULT_TOLERANCE_SECS),
            rate_limit_per_minute: t.rate_limit.unwrap_or(DEFAULT_RATE_LIMIT_PER_MINUTE),
            max_body_bytes: t.max_body.unwrap_or(DEFAULT_MAX_BODY_BYTES),
        }))
    }

    /// Step 2: every trigger of the file — the top-level list `pool`, then each agent's in
    /// agent order — checked against the others and the file's agents (`agents`, in order),
    /// and resolved. Only triggers without errors are returned.
    pub(super) fn resolve_triggers(
        &mut self,
        pool: TriggersIn,
        per_agent: Vec<TriggersIn>,
        agents: &[Target],
    ) -> Vec<TriggerSpec> {
        let mut names: Vec<(String, Loc)> = Vec::new();
        // Each webhook's path and the trigger it belongs to.
        let mut paths: Vec<(String, String)> = Vec::new();
        let mut out = Vec::new();
        let all = pool
            .entries
            .into_iter()
            .chain(per_agent.into_iter().flat_map(|list| list.entries));
        for (i, t) in all.enumerate() {
            if i == MAX_TRIGGERS {
                self.report(&t.path, t.at, Problem::TooManyTriggers);
            }
            let mut ok = i < MAX_TRIGGERS;
            let mut unique = true;
            if let Some((name, loc)) = &t.name {
                if let Some((_, first)) = names.iter().find(|(n, _)| n == name) {
                    let problem = Problem::DuplicateTrigger {
                        name,
                        first_line: first.line,
                    };
                    self.report(&join(&t.path, "name"), *loc, problem);
                    ok = false;
                    unique = false;
                } else {
                    names.push((name.clone(), *loc));
                }
            }
            let agent = self.trigger_target(&t, agents);
            ok &= agent.is_some();
            if unique
                && t.kind == Some(TriggerType::Webhook)
                && let Some(name) = t.name()
            {
                let (path, at, key) = match &t.hook_path {
                    Some((path, loc)) => (path.as_str(), *loc, "path"),
                    None => (name, t.name.as_ref().map_or(t.at, |(_, l)| *l), "name"),
                };
                if let Some((_, other)) = paths.iter().find(|(p, _)| p == path) {
                    let problem = Problem::DuplicateWebhookPath {
                        path,
                        trigger: name,
                        other,
                        defaulted: t.hook_path.is_none(),
                    };
                    self.report(&join(&t.path, key), at, problem);
                    ok = false;
                } else {
                    paths.push((path.to_string(), name.to_string()));
                }
            }
            if !ok {
                continue;
            }
            if let (Some((session, kind)), Some((name, _)), Some(agent)) = (t.built, t.name, agent)
            {
                out.push(TriggerSpec {
                    name,
                    agent,
                    session,
                    kind,
                });
            }
        }
        out
    }

    /// The agent trigger `t` goes to: the agent it is under, its `target_agent`, or the first
    /// of the file's `agents`. It must be one of them and durable; `None` when it is not
    /// (reported) or cannot be known.
    fn trigger_target(&mut self, t: &TriggerIn, agents: &[Target]) -> Option<String> {
        let (agent, how) = match (&t.under, &t.target) {
            (Some(agent), _) => (agent.clone(), TargetHow::Under),
            (None, Some((target, _))) => (target.clone(), TargetHow::Named),
            (None, None) if t.has("target_agent") => return None,
            (None, None) => (agents.first()?.0.clone(), TargetHow::First),
        };
        let Some((_, durable)) = agents.iter().find(|(name, _)| *name == agent) else {
            let known: Vec<&str> = agents.iter().map(|(n, _)| n.as_str()).collect();
            let loc = t.target.as_ref().map_or(t.at, |(_, l)| *l);
            let problem = Problem::UnknownTriggerTarget {
                agent: &agent,
                trigger: t.name(),
                closest: closest(&agent, &known),
                agents: known.clone(),
            };
            self.report(&join(&t.path, "target_agent"), loc, problem);
            return None;
        };
        if *durable == Some(false) {
            let (path, loc) = match (how, &t.target) {
                (TargetHow::Named, Some((_, loc))) => (join(&t.path, "target_agent"), *loc),
                _ => (t.path.clone(), t.at),
            };
            let problem = Problem::BatchTriggerTarget {
                trigger: t.name(),
                agent: &agent,
                first: how == TargetHow::First,
            };
            self.report(&path, loc, problem);
            return None;
        }
        Some(agent)
    }
}

/// How a trigger's agent was chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TargetHow {
    /// It is declared under the agent.
    Under,
    /// Its `target_agent`.
    Named,
    /// No `target_agent`: the file's first agent.
    First,
}

/// `value` of key `f`, one of `choices` (as written, and what it means); `None` when it is not
/// (reported, with the closest choice).
fn choice<T: Copy>(cx: &mut Cx, f: &Field<'_>, choices: &[(&'static str, T)]) -> Option<T> {
    let text = cx.string(f.value, &f.path)?;
    if let Some((_, v)) = choices.iter().find(|(name, _)| *name == text) {
        return Some(*v);
    }
    let names: Vec<&str> = choices.iter().map(|(name, _)| *name).collect();
    let problem = Problem::UnknownTriggerChoice {
        leaf: leaf(&f.path),
        found: &text,
        closest: closest(&text, &names),
    };
    cx.report(&f.path, f.value.loc, problem);
    None
}

/// A string value of `f`, and where it is.
fn located(cx: &mut Cx, f: &Field<'_>) -> Option<(String, Loc)> {
    cx.string(f.value, &f.path).map(|s| (s, f.value.loc))
}

pub(super) const TRIGGER: Section<TriggerIn> = Section {
    what: "a trigger",
    keys: &[
        ("name", |cx, t, f| {
            let name = cx.string(f.value, &f.path)?;
            if !trigger_spec::is_valid_name(&name) {
                let problem = Problem::InvalidTriggerName {
                    name: &name,
                    what: NameOf::Trigger,
                };
                cx.report(&f.path, f.value.loc, problem);
                return None;
            }
            t.name = Some((name, f.value.loc));
            Some(())
        }),
        ("type", |cx, t, f| {
            let text = cx.string(f.value, &f.path)?;
            t.kind = Some(match text.as_str() {
                "schedule" => TriggerType::Schedule,
                "webhook" => TriggerType::Webhook,
                "channel" => {
                    cx.report(&f.path, f.value.loc, Problem::ChannelTrigger);
                    return None;
                }
                other => {
                    let problem = Problem::UnknownTriggerType {
                        found: other,
                        closest: closest(other, &["schedule", "webhook"]),
                    };
                    cx.report(&f.path, f.value.loc, problem);
                    return None;
                }
            });
            Some(())
        }),
        ("target_agent", |cx, t, f| {
            t.target = Some(located(cx, &f)?);
            Some(())
        }),
        ("message", |cx, t, f| {
            t.message = Some(located(cx, &f)?);
            Some(())
        }),
        ("session", |cx, t, f| {
            t.session = Some(located(cx, &f)?);
            Some(())
        }),
        ("cron", |cx, t, f| {
            t.cron = Some(located(cx, &f)?);
            Some(())
        }),
        ("every", |cx, t, f| {
            let text = match &f.value.kind {
                Kind::Int(i) => i.to_string(),
                Kind::Str(s) => s.clone(),
                _ => {
                    cx.type_error(
                        &f.path,
                        f.value,
                        "an interval such as `10m`, or whole seconds",
                    );
                    return None;
                }
            };
            match units::parse_every(&text) {
                Ok(secs) => {
                    t.every = Some(secs);
                    Some(())
                }
                Err(err) => {
                    cx.report(&f.path, f.value.loc, Problem::Schedule(err));
                    None
                }
            }
        }),
        ("timezone", |cx, t, f| {
            t.timezone = Some(located(cx, &f)?);
            Some(())
        }),
        ("overlap", |cx, t, f| {
            let choices = [
                ("skip", Overlap::Skip),
                ("buffer_one", Overlap::BufferOne),
                ("allow", Overlap::Allow),
            ];
            t.overlap = Some(choice(cx, &f, &choices)?);
            Some(())
        }),
        ("catch_up", |cx, t, f| {
            let choices = [
                ("none", CatchUp::None),
                ("last", CatchUp::Last),
                ("all", CatchUp::All),
            ];
            t.catch_up = Some(choice(cx, &f, &choices)?);
            Some(())
        }),
        ("catch_up_window", |cx, t, f| {
            let field = DurationField::CatchUpWindow;
            t.catch_up_window = Some(cx.duration(f.value, &f.path, field)?);
            Some(())
        }),
        ("path", |cx, t, f| {
            let path = cx.string(f.value, &f.path)?;
            if !trigger_spec::is_valid_name(&path) {
                let problem = Problem::InvalidTriggerName {
                    name: &path,
                    what: NameOf::WebhookPath,
                };
                cx.report(&f.path, f.value.loc, problem);
                return None;
            }
            t.hook_path = Some((path, f.value.loc));
            Some(())
        }),
        ("secret", |cx, t, f| {
            let name = cx.string(f.value, &f.path)?;
            if !names::is_valid_secret_name(&name) {
                cx.secret_name_error(&f.path, f.value.loc, &name);
                return None;
            }
            t.secret = Some(name);
            Some(())
        }),
        ("signature", |cx, t, f| {
            let choices = [
                ("auto", SignatureScheme::Auto),
                ("github", SignatureScheme::Github),
                ("standard_webhooks", SignatureScheme::StandardWebhooks),
            ];
            t.signature = Some(choice(cx, &f, &choices)?);
            Some(())
        }),
        ("tolerance", |cx, t, f| {
            let field = DurationField::Tolerance;
            t.tolerance = Some(cx.duration(f.value, &f.path, field)?);
            Some(())
        }),
        ("rate_limit", |cx, t, f| {
            let max = MAX_RATE_LIMIT_PER_MINUTE;
            t.rate_limit = Some(cx.integer(f.value, &f.path, 1, max)?);
            Some(())
        }),
        ("max_body", |cx, t, f| {
            let (bytes, found) = match &f.value.kind {
                Kind::Int(i) => (u64::try_from(*i).unwrap_or(0), i.to_string()),
                Kind::Str(s) => match units::parse_memory(s) {
                    Some(bytes) => (bytes, format!("\"{s}\"")),
                    None => {
                        cx.report(&f.path, f.value.loc, Problem::MaxBodyFormat(s));
                        return None;
                    }
                },
                _ => {
                    cx.type_error(&f.path, f.value, "a size such as `1MiB`, or bytes");
                    return None;
                }
            };
            if !(1..=MAX_MAX_BODY_BYTES).contains(&bytes) {
                cx.report(&f.path, f.value.loc, Problem::MaxBodyRange(found));
                return None;
            }
            t.max_body = Some(bytes);
            Some(())
        }),
    ],
    unsupported: &[
        "endpoint",
        "port",
        "channels",
        "bot",
        "session_mode",
        "verbose",
        "allowed_ids",
        "reject_message",
    ],
};

#[cfg(test)]
mod tests {
    use super::super::testing::{assert_error, errors, errors_at, one_warning, parse, valid};
    use super::*;

    const SCRIPTED: &str = "runtime: { provider: scripted, script: [hi] }";

    /// A file whose top-level `triggers:` holds `items` (one line each, from line 2 at column 5
    /// after `  - `), followed by agents `lead` and `ops`:
    ///
    /// ```text
    /// 1 triggers:
    /// 2   - <first line>
    /// ```
    fn top(items: &str) -> String {
        format!("triggers:\n{}{}", indent(items, "  "), agents(""))
    }

    /// Agents `lead` and `ops`; `ops` has `ops_extra` (lines at column 5).
    fn agents(ops_extra: &str) -> String {
        format!(
            "agents:\n  lead:\n    {SCRIPTED}\n  ops:\n    {SCRIPTED}\n{}",
            indent(ops_extra, "    ")
        )
    }

    fn indent(lines: &str, by: &str) -> String {
        lines.lines().map(|l| format!("{by}{l}\n")).collect()
    }

    /// A file whose agent `ops` (line 4) has `triggers:` (line 6) holding `items` (from line 7,
    /// at column 9 after `      - `).
    fn under_ops(items: &str) -> String {
        agents(&format!("triggers:\n{}", indent(items, "  ")))
    }

    fn schedule(cron: Option<&str>, every: Option<u64>, zone: &str, message: &str) -> TriggerKind {
        TriggerKind::Schedule(ScheduleTrigger {
            cron: cron.map(String::from),
            every_secs: every,
            timezone: zone.into(),
            message: message.into(),
            overlap: Overlap::Skip,
            catch_up: CatchUp::Last,
            catch_up_window_secs: 3600,
        })
    }

    #[test]
    fn top_level_schedules_get_their_defaults_and_the_first_agent() {
        let text = top(
            "- name: standup\n  type: schedule\n  cron: 0 9 * * 1-5\n  timezone: \
             Europe/Lisbon\n  message: Post the stand-up summary.\n- name: poll\n  type: \
             schedule\n  every: 10m\n  message: Check the queue.\n  target_agent: ops\n  \
             session: new",
        );
        let parsed = valid(&text);
        assert!(parsed.warnings.diagnostics.is_empty());
        let t = &parsed.agentfile.triggers;
        assert_eq!(
            t[0],
            TriggerSpec {
                name: "standup".into(),
                agent: "lead".into(),
                session: TriggerSession::Key("trigger:standup".into()),
                kind: schedule(
                    Some("0 9 * * 1-5"),
                    None,
                    "Europe/Lisbon",
                    "Post the stand-up summary."
                ),
            }
        );
        assert_eq!(
            t[1],
            TriggerSpec {
                name: "poll".into(),
                agent: "ops".into(),
                session: TriggerSession::New,
                kind: schedule(None, Some(600), "UTC", "Check the queue."),
            }
        );
        assert_eq!(t[1].schedule().unwrap().describe(), "every 10m");
        assert_eq!(
            t[0].schedule().unwrap().describe(),
            "cron 0 9 * * 1-5 (Europe/Lisbon)"
        );
        // The resolved file round-trips through JSON.
        let json = serde_json::to_string(&parsed.agentfile).unwrap();
        let back: Agentfile = serde_json::from_str(&json).unwrap();
        assert_eq!(back, parsed.agentfile);
    }

    #[test]
    fn a_decoded_cron_fires_on_its_zones_wall_clock_across_dst() {
        let text = top(
            "- { name: standup, type: schedule, cron: 0 9 * * 1-5, timezone: Europe/Lisbon, \
             message: m }",
        );
        let t = valid(&text).agentfile.triggers.remove(0);
        let spec = t.schedule().unwrap().spec().unwrap();
        let at = |s: &str| s.parse::<chrono::DateTime<chrono::Utc>>().unwrap();
        // Lisbon moves from UTC+0 to UTC+1 on Sunday 29 March 2026: 09:00 local is 09:00Z on
        // the Friday before, 08:00Z on the Monday after; no fire on the weekend.
        let fires = spec.fires_between(at("2026-03-26T12:00:00Z"), at("2026-04-01T00:00:00Z"), 10);
        assert_eq!(
            fires,
            [
                at("2026-03-27T09:00:00Z"),
                at("2026-03-30T08:00:00Z"),
                at("2026-03-31T08:00:00Z"),
            ]
        );
    }

    #[test]
    fn schedule_settings_are_read() {
        let text = top(
            "- name: nightly\n  type: schedule\n  cron: \"30 2 * * *\"\n  message: Run the \
             nightly report.\n  session: reports\n  overlap: buffer_one\n  catch_up: all\n  \
             catch_up_window: 6h\n- name: sync\n  type: schedule\n  every: 45\n  message: \
             sync\n  overlap: allow\n  catch_up: none",
        );
        let t = valid(&text).agentfile.triggers;
        assert_eq!(t[0].session, TriggerSession::Key("reports".into()));
        let s = t[0].schedule().unwrap();
        assert_eq!(
            (s.overlap, s.catch_up, s.catch_up_window_secs),
            (Overlap::BufferOne, CatchUp::All, 6 * 3600)
        );
        let s = t[1].schedule().unwrap();
        assert_eq!(s.every_secs, Some(45));
        assert_eq!((s.overlap, s.catch_up), (Overlap::Allow, CatchUp::None));
    }

    #[test]
    fn webhooks_under_an_agent_get_their_defaults() {
        let text = under_ops(
            "- name: gh-issues\n  type: webhook\n  message: \"New issue: {{ issue.title }}\"\n  \
             secret: GITHUB_WEBHOOK_SECRET\n  session: \"issue-{{ issue.number }}\"",
        );
        let parsed = valid(&text);
        assert!(parsed.warnings.diagnostics.is_empty());
        assert_eq!(
            parsed.agentfile.triggers,
            [TriggerSpec {
                name: "gh-issues".into(),
                agent: "ops".into(),
                session: TriggerSession::Key("issue-{{ issue.number }}".into()),
                kind: TriggerKind::Webhook(WebhookTrigger {
                    path: "gh-issues".into(),
                    message: "New issue: {{ issue.title }}".into(),
                    secret: "GITHUB_WEBHOOK_SECRET".into(),
                    signature: SignatureScheme::Auto,
                    tolerance_secs: 300,
                    rate_limit_per_minute: 60,
                    max_body_bytes: 1 << 20,
                }),
            }]
        );
        // The secret is the API's, not the agent's.
        let ops = parsed.agentfile.agent("ops").unwrap();
        assert!(ops.secrets.is_empty(), "{:?}", ops.secrets);
    }

    #[test]
    fn webhook_settings_are_read() {
        let text = top(
            "- name: telegram\n  type: webhook\n  target_agent: ops\n  path: tg\n  message: \
             \"{{ message.text }}\"\n  session: \"chat-{{ message.chat.id }}\"\n  secret: \
             TG_HOOK_SECRET\n  signature: standard_webhooks\n  tolerance: 10m\n  rate_limit: \
             600\n  max_body: 256k\n- name: plain\n  type: webhook\n  message: ping\n  secret: \
             S\n  session: new\n  max_body: 25MiB",
        );
        let t = valid(&text).agentfile.triggers;
        assert_eq!(t[0].agent, "ops");
        assert_eq!(
            t[0].webhook().unwrap(),
            &WebhookTrigger {
                path: "tg".into(),
                message: "{{ message.text }}".into(),
                secret: "TG_HOOK_SECRET".into(),
                signature: SignatureScheme::StandardWebhooks,
                tolerance_secs: 600,
                rate_limit_per_minute: 600,
                max_body_bytes: 256 << 10,
            }
        );
        assert_eq!(t[1].agent, "lead");
        assert_eq!(t[1].session, TriggerSession::New);
        assert_eq!(t[1].webhook().unwrap().max_body_bytes, 25 << 20);
    }

    #[test]
    fn triggers_resolve_in_file_order_top_level_first() {
        let text = format!(
            "agents:\n  lead:\n    {SCRIPTED}\n    triggers:\n      - {{ name: b, type: \
             schedule, every: 1h, message: m }}\n  ops:\n    {SCRIPTED}\n    triggers:\n      - \
             {{ name: c, type: schedule, every: 1h, message: m }}\ntriggers:\n  - {{ name: a, \
             type: schedule, every: 1h, message: m }}\n"
        );
        let t = valid(&text).agentfile.triggers;
        let order: Vec<(&str, &str)> = t
            .iter()
            .map(|t| (t.name.as_str(), t.agent.as_str()))
            .collect();
        assert_eq!(order, [("a", "lead"), ("b", "lead"), ("c", "ops")]);
        // No triggers: an empty list, and none in the JSON.
        let af = valid(&agents("triggers: []")).agentfile;
        assert!(af.triggers.is_empty());
        assert!(!serde_json::to_string(&af).unwrap().contains("triggers"));
    }

    #[test]
    fn names_are_unique_in_the_pool() {
        let text = format!(
            "triggers:\n  - {{ name: daily, type: schedule, every: 1d, message: m }}\n{}",
            agents("triggers:\n  - { name: daily, type: schedule, every: 1h, message: m }")
        );
        let d = assert_error(
            &text,
            "duplicate_trigger",
            (9, 17),
            "trigger name `daily` is already used (line 2)",
        );
        assert_eq!(d.path, "agents.ops.triggers[0].name");
        assert!(d.help.unwrap().contains("line 2"));
        let d = assert_error(
            &top("- { name: Daily Report, type: schedule, every: 1d, message: m }"),
            "invalid_name",
            (2, 13),
            "`Daily Report` is not a valid trigger name",
        );
        assert!(d.help.unwrap().ends_with("for example `daily-report`"));
    }

    #[test]
    fn webhook_paths_are_unique_in_the_pool() {
        let d = assert_error(
            &top(
                "- { name: gh, type: webhook, message: m, secret: S }\n- { name: other, type: \
                 webhook, path: gh, message: m, secret: S }",
            ),
            "duplicate_webhook_path",
            (3, 41),
            "webhook `other`'s path `gh` is already webhook `gh`'s",
        );
        assert_eq!(d.path, "triggers[1].path");
        assert!(d.help.unwrap().contains("POST /v1/hooks/<pool>/<path>"));
        assert_error(
            &top(
                "- { name: a, type: webhook, path: b, message: m, secret: S }\n- { name: b, \
                 type: webhook, message: m, secret: S }",
            ),
            "duplicate_webhook_path",
            (3, 13),
            "webhook `b`'s path `b` (its name) is already webhook `a`'s",
        );
        assert_error(
            &top("- { name: a, type: webhook, path: No/Slash, message: m, secret: S }"),
            "invalid_name",
            (2, 37),
            "`No/Slash` is not a valid webhook path",
        );
    }

    #[test]
    fn the_target_must_be_a_durable_agent_of_the_file() {
        let d = assert_error(
            &top("- { name: t, type: schedule, every: 1h, message: m, target_agent: opz }"),
            "unknown_trigger_target",
            (2, 69),
            "`target_agent` `opz` of trigger `t` is not an agent of this agentfile",
        );
        assert_eq!(
            d.help.unwrap(),
            "did you mean `ops`? The agents are: lead, ops; a top-level trigger sends its \
             messages to `target_agent`, an agent of the same agentfile (the first one when it \
             is not given)"
        );
        let text = format!(
            "triggers:\n  - {{ name: t, type: schedule, every: 1h, message: m, target_agent: ops \
             }}\n{}",
            agents("execution: { durability: false }")
        );
        let d = assert_error(
            &text,
            "batch_trigger_target",
            (2, 69),
            "trigger `t` goes to agent `ops`, which is a batch job (`execution.durability: \
             false`)",
        );
        assert!(
            d.help
                .unwrap()
                .contains("`execution.durability: true` on `ops`")
        );
        // The default target (the first agent) is checked too, at the trigger.
        let text = "triggers:\n  - { name: t, type: schedule, every: 1h, message: m }\nagents:\n  \
                    lead:\n    execution: { durability: false }\n  ops: {}\n";
        assert_error(
            text,
            "batch_trigger_target",
            (2, 5),
            "trigger `t` goes to agent `lead` (the first agent: it has no `target_agent`), \
             which is a batch job (`execution.durability: false`)",
        );
        // And the agent a trigger is declared under; the shared `execution` decides too.
        let text = format!(
            "execution: {{ durability: false }}\n{}",
            under_ops("- { name: t, type: schedule, every: 1h, message: m }")
        )
        .replace("  ops:\n", "  ops:\n    execution: { durability: false }\n");
        let errors = errors(&text);
        assert_eq!(
            errors
                .iter()
                .map(|d| (d.kind.code(), d.line, d.column))
                .collect::<Vec<_>>(),
            [("batch_trigger_target", 9, 9)],
            "{errors:#?}"
        );
    }

    #[test]
    fn target_agent_under_an_agent_is_misplaced() {
        let d = assert_error(
            &under_ops("- { name: t, type: schedule, every: 1h, message: m, target_agent: lead }"),
            "misplaced_trigger_key",
            (7, 59),
            "`target_agent` is only for top-level triggers: this trigger is under agent `ops`, so \
             its messages go to `ops`",
        );
        assert_eq!(d.path, "agents.ops.triggers[0].target_agent");
    }

    #[test]
    fn a_schedule_has_exactly_one_rule() {
        assert_error(
            &top("- name: t\n  type: schedule\n  cron: 0 9 * * *\n  every: 1h\n  message: m"),
            "duplicate_setting",
            (5, 5),
            "trigger `t` has both `cron` and `every`",
        );
        let d = assert_error(
            &top("- name: t\n  type: schedule\n  message: m"),
            "missing_key",
            (2, 5),
            "trigger `t` needs `cron` or `every`",
        );
        assert!(d.help.unwrap().contains("every: 10m"));
        assert_error(
            &top(
                "- name: t\n  type: schedule\n  every: 10m\n  timezone: Europe/Lisbon\n  message: m",
            ),
            "misplaced_trigger_key",
            (5, 5),
            "`timezone` does not apply to `every`: intervals are aligned to the Unix epoch, not \
             to a zone's clock",
        );
    }

    #[test]
    fn cron_and_zone_errors_are_reported_at_their_values() {
        let d = assert_error(
            &top("- name: t\n  type: schedule\n  cron: 0 25 * * *\n  message: m"),
            "invalid_cron",
            (4, 11),
            "cron `0 25 * * *`: the hour field `25` is not valid (number out of bounds); hour \
             takes 0-23",
        );
        assert_eq!(d.path, "triggers[0].cron");
        let d = assert_error(
            &top(
                "- name: t\n  type: schedule\n  cron: 0 9 * * 1-5\n  timezone: Europe/Lisbom\n  \
                 message: m",
            ),
            "unknown_time_zone",
            (5, 15),
            "unknown time zone `Europe/Lisbom`",
        );
        let help = d.help.unwrap();
        assert!(help.starts_with("did you mean `Europe/Lisbon`?"), "{help}");
        // Both at once: both reported.
        let errors = errors(&top(
            "- name: t\n  type: schedule\n  cron: 0 9 * *\n  timezone: Mars/Base\n  message: m",
        ));
        let found: Vec<(&str, u32)> = errors.iter().map(|d| (d.kind.code(), d.line)).collect();
        assert_eq!(found, [("invalid_cron", 4), ("unknown_time_zone", 5)]);
        assert_error(
            &top("- name: t\n  type: schedule\n  cron: 0 0 30 2 *\n  message: m"),
            "invalid_cron",
            (4, 11),
            "cron `0 0 30 2 *` never fires: no date matches it",
        );
        assert_error(
            &top("- name: t\n  type: schedule\n  every: 10 minutes\n  message: m"),
            "invalid_value",
            (4, 12),
            "`10 minutes` is not an interval: write a whole number with `s`, `m`, `h` or `d` \
             (`30s`, `10m`, `2h`, `1d`), or plain seconds",
        );
        assert_error(
            &top("- name: t\n  type: schedule\n  every: 0\n  message: m"),
            "out_of_range",
            (4, 12),
            "an interval must be at least 1 second",
        );
    }

    #[test]
    fn a_schedule_session_is_no_template() {
        let d = assert_error(
            &top("- { name: t, type: schedule, every: 1h, message: m, session: \"r-{{ x }}\" }"),
            "invalid_template",
            (2, 64),
            "a schedule's `session` cannot be a template: a fire has no body to fill `{{ … }}` \
             from",
        );
        assert!(d.help.unwrap().contains("session: new"));
        let long = "k".repeat(201);
        assert_error(
            &top(&format!(
                "- {{ name: t, type: schedule, every: 1h, message: m, session: {long} }}"
            )),
            "invalid_value",
            (2, 64),
            "`session` is not a session key: a session key has at most 200 characters; this \
             one has 201",
        );
    }

    #[test]
    fn webhook_templates_are_parsed() {
        let d = assert_error(
            &top("- { name: t, type: webhook, secret: S, message: \"New: {{ issue.title }\" }"),
            "invalid_template",
            (2, 51),
            "`message` is not a valid template: the `{{` at character 5 is never closed: end the \
             placeholder with `}}`, e.g. `{{ issue.title }}` (a template has no escape for a \
             literal `{{`)",
        );
        assert_eq!(d.path, "triggers[0].message");
        assert_error(
            &top("- { name: t, type: webhook, secret: S, message: m, session: \"c-{{ a..b }}\" }"),
            "invalid_template",
            (2, 63),
            "`session` is not a valid template: the path `a..b` at character 2 has an empty \
             segment: separate keys and indices with single dots, e.g. `message.chat.id` or \
             `commits.0.id`",
        );
    }

    #[test]
    fn required_keys() {
        let d = assert_error(
            &top("- { name: t, type: webhook, message: m }"),
            "missing_key",
            (2, 5),
            "trigger `t` needs `secret`: the name of the secret its deliveries are signed with",
        );
        assert!(d.help.unwrap().contains("checkpoint API only"));
        assert_error(
            &top("- { type: schedule, every: 1h, message: m }"),
            "missing_key",
            (2, 5),
            "a trigger needs `name`",
        );
        let d = assert_error(
            &top("- { name: t, cron: \"0 9 * * *\", message: m }"),
            "missing_key",
            (2, 5),
            "trigger `t` needs `type`",
        );
        assert_eq!(
            d.help.unwrap(),
            "it has schedule keys: add `type: schedule`"
        );
        let d = assert_error(
            &top("- { name: t, type: webhook, secret: S }"),
            "missing_key",
            (2, 5),
            "trigger `t` needs `message`",
        );
        assert!(d.help.unwrap().contains("{{ issue.title }}"));
        assert_error(
            &top("- { name: t, type: schedule, every: 1h, message: \" \" }"),
            "empty_value",
            (2, 52),
            "`message` is empty",
        );
    }

    #[test]
    fn types_and_keys_of_the_other_type() {
        let d = assert_error(
            &top("- { name: t, type: webhok, message: m }"),
            "invalid_value",
            (2, 22),
            "unknown trigger type `webhok`",
        );
        assert!(d.help.unwrap().starts_with("did you mean `webhook`?"));
        let d = assert_error(
            &top("- { name: t, type: channel, message: m }"),
            "unsupported_trigger",
            (2, 22),
            "trigger type `channel` is not supported yet",
        );
        assert!(d.help.unwrap().contains("type: webhook"));
        let d = assert_error(
            &top("- { name: t, type: webhook, secret: S, message: m, cron: \"0 9 * * *\" }"),
            "misplaced_trigger_key",
            (2, 54),
            "`cron` is a key of schedule triggers, and trigger `t` is a webhook",
        );
        assert_eq!(d.path, "triggers[0].cron");
        assert!(
            d.help
                .unwrap()
                .starts_with("remove `cron`, or make it a schedule")
        );
        assert_error(
            &top("- { name: t, type: schedule, every: 1h, message: m, secret: S }"),
            "misplaced_trigger_key",
            (2, 55),
            "`secret` is a key of webhook triggers, and trigger `t` is a schedule",
        );
    }

    #[test]
    fn ninetrix_endpoint_and_channel_keys_are_refused_with_a_hint() {
        let d = assert_error(
            &top("- { name: t, type: webhook, secret: S, message: m, endpoint: /hooks/gh }"),
            "unsupported_key",
            (2, 54),
            "`endpoint` is not supported: webhooks are served by the checkpoint API, not on an \
             endpoint of their own",
        );
        assert!(
            d.help
                .unwrap()
                .starts_with("a webhook's URL is `POST /v1/hooks/<pool>/<path>`")
        );
        assert_error(
            &top("- { name: t, type: webhook, secret: S, message: m, port: 9000 }"),
            "unsupported_key",
            (2, 54),
            "`port` is not supported: webhooks are served by the checkpoint API, not on an \
             endpoint of their own",
        );
        assert_error(
            &top("- { name: t, type: webhook, secret: S, message: m, bot: x }"),
            "unsupported_key",
            (2, 54),
            "`bot` is not supported yet: it configures a chat channel, and ninetrix has no \
             channels yet",
        );
        let d = assert_error(
            &top("- { name: t, type: webhook, secret: S, message: m, secrett: x }"),
            "unknown_key",
            (2, 54),
            "unknown key `secrett` in a trigger",
        );
        assert_eq!(d.help.unwrap(), "did you mean `secret`?");
        // A trigger key misplaced under an agent points at `triggers`.
        let d = assert_error(
            &agents("cron: \"0 9 * * *\""),
            "unknown_key",
            (6, 5),
            "unknown key `cron` in an agent",
        );
        assert_eq!(d.help.unwrap(), "`cron` belongs under `triggers`");
    }

    #[test]
    fn secret_names_follow_the_secrets_rules() {
        let d = assert_error(
            &top("- { name: t, type: webhook, message: m, secret: gh-secret }"),
            "invalid_name",
            (2, 51),
            "`gh-secret` is not a valid secret name",
        );
        assert!(d.help.unwrap().contains("GH_SECRET"));
        let text =
            top("- { name: t, type: webhook, message: m, secret: whsec_abcdef0123456789abcdef }");
        let report = parse(&text).unwrap_err();
        assert_eq!(report.diagnostics[0].kind.code(), "secret_value");
        assert!(!report.render(false).contains("whsec_abcdef"));
    }

    #[test]
    fn ranges_and_choices() {
        let hook = |extra: &str| {
            top(&format!(
                "- {{ name: t, type: webhook, message: m, secret: S, {extra} }}"
            ))
        };
        let sched = |extra: &str| {
            top(&format!(
                "- {{ name: t, type: schedule, every: 1h, message: m, {extra} }}"
            ))
        };
        let at = 54;
        assert_error(
            &hook("rate_limit: 0"),
            "out_of_range",
            (2, at + 12),
            "`rate_limit` must be between 1 and 60000, found 0",
        );
        assert_error(
            &hook("max_body: 26MiB"),
            "out_of_range",
            (2, at + 10),
            "`max_body` must be from 1 byte to 25 MiB, found \"26MiB\"",
        );
        assert_error(
            &hook("max_body: lots"),
            "invalid_value",
            (2, at + 10),
            "`max_body` must be a size such as `1MiB` or `256k`, found \"lots\"",
        );
        assert_error(
            &hook("tolerance: 2d"),
            "out_of_range",
            (2, at + 11),
            "`tolerance` must be from 1 second to 1 day, found \"2d\"",
        );
        let d = assert_error(
            &hook("signature: gihub"),
            "invalid_value",
            (2, at + 11),
            "unknown `signature` value `gihub`",
        );
        assert!(d.help.unwrap().starts_with("did you mean `github`?"));
        assert_error(
            &sched("catch_up_window: 31d"),
            "out_of_range",
            (2, 72),
            "`catch_up_window` must be from 1 second to 30 days, found \"31d\"",
        );
        let d = assert_error(
            &sched("overlap: queue"),
            "invalid_value",
            (2, 64),
            "unknown `overlap` value `queue`",
        );
        assert!(d.help.unwrap().starts_with("`overlap` is `skip`"));
        assert_error(
            &sched("catch_up: latest"),
            "invalid_value",
            (2, 65),
            "unknown `catch_up` value `latest`",
        );
    }

    #[test]
    fn settings_without_effect_are_warnings() {
        let w = one_warning(&top(
            "- { name: t, type: schedule, every: 1h, message: m, catch_up: none, \
             catch_up_window: 2h }",
        ));
        assert_eq!(
            (w.kind.code(), w.line, w.column, w.message.as_str()),
            (
                "trigger_setting_unused",
                2,
                71,
                "`catch_up_window` has no effect with `catch_up: none`"
            )
        );
        let w = one_warning(&top(
            "- { name: t, type: webhook, message: m, secret: S, signature: github, tolerance: \
             1m }",
        ));
        assert_eq!(
            (w.kind.code(), w.line, w.column),
            ("trigger_setting_unused", 2, 73)
        );
        assert!(w.message.contains("GitHub sends no timestamp"));
    }

    #[test]
    fn every_problem_is_reported_in_one_pass() {
        let text = format!(
            "triggers:\n  - {{ name: a, type: schedule, cron: \"0 9 * * *\", every: 1h, message: m \
             }}\n  - {{ name: a, type: webhook, message: \"{{{{ x\" }}\n  - 7\n{}",
            agents(
                "triggers:\n  - { name: b, type: schedule, every: 1h, message: m, target_agent: lead }"
            )
        );
        assert_eq!(
            errors_at(&text),
            [
                ("duplicate_setting", 2, 51),
                ("missing_key", 3, 5),
                ("duplicate_trigger", 3, 13),
                ("invalid_template", 3, 40),
                ("wrong_type", 4, 5),
                ("misplaced_trigger_key", 11, 59),
            ]
        );
    }

    #[test]
    fn wrong_types() {
        assert_error(
            &agents("triggers: { name: t }"),
            "wrong_type",
            (6, 15),
            "`triggers` must be a list of triggers (`- name: …`), found a mapping",
        );
        assert_error(
            &top("- { name: t, type: schedule, every: 1.5, message: m }"),
            "wrong_type",
            (2, 39),
            "`every` must be an interval such as `10m`, or whole seconds, found the number 1.5",
        );
        assert_error(
            &top("- { name: t, type: schedule, every: 1h, message: [m] }"),
            "wrong_type",
            (2, 52),
            "`message` must be a string, found a list",
        );
    }

    #[test]
    fn too_many_triggers() {
        let items: String = (0..=MAX_TRIGGERS)
            .map(|i| format!("- {{ name: t{i}, type: schedule, every: 1h, message: m }}\n"))
            .collect();
        let d = assert_error(
            &top(&items),
            "out_of_range",
            (258, 5),
            "the pool has more than 256 triggers",
        );
        assert_eq!(d.path, "triggers[256]");
    }
}
