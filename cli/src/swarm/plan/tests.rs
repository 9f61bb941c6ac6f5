//! Every rule of the Swarm plan, asserted on the plan's text, and a property: applying any plan
//! to a simulated swarm converges (the next plan changes nothing).

use proptest::prelude::*;

use super::*;

const NET: &str = "ninetrix-p";

fn api(replicas: u32) -> Desired {
    Desired {
        name: "ninetrix-p-api".into(),
        role: Role::Api,
        image: "ninetrix/runner:1".into(),
        mode: Mode::Replicated(replicas),
    }
}

fn sidecar(server: &str) -> Desired {
    Desired {
        name: format!("ninetrix-p-mcp-{server}"),
        role: Role::Sidecar(server.into()),
        image: "ninetrix/agent:1".into(),
        mode: Mode::Replicated(1),
    }
}

fn agent(name: &str, mode: Mode) -> Desired {
    Desired {
        name: format!("ninetrix-p-{name}"),
        role: Role::Agent(name.into()),
        image: "ninetrix/runner:1".into(),
        mode,
    }
}

fn wanted(services: Vec<Desired>) -> Wanted {
    Wanted {
        network: NET.into(),
        services,
    }
}

/// The service the swarm has after `want` was made so.
fn made(want: &Desired) -> Service {
    Service {
        id: format!("id-{}", want.name),
        name: want.name.clone(),
        component: match want.role {
            Role::Api => Component::Api,
            Role::Sidecar(_) => Component::Mcp,
            Role::Agent(_) => Component::Runner,
        },
        agent: match &want.role {
            Role::Agent(a) => a.clone(),
            _ => String::new(),
        },
        image: Some(want.image.clone()),
        mode: Some(want.mode),
        secrets: vec![format!("sid-{}", want.name)],
    }
}

/// The swarm once `wanted` was deployed: its network, services and their secrets.
fn deployed(wanted: &Wanted) -> Observed {
    Observed {
        network: Some("net-id".into()),
        services: wanted.services.iter().map(made).collect(),
        secrets: wanted
            .services
            .iter()
            .map(|d| (format!("s-{}", d.name), format!("sid-{}", d.name)))
            .collect(),
    }
}

fn lines(plan: &Plan) -> Vec<String> {
    plan.to_string().lines().map(str::to_string).collect()
}

#[test]
fn a_fresh_deploy_creates_everything_in_up_s_order() {
    let w = wanted(vec![
        api(1),
        sidecar("files"),
        agent("writer", Mode::Replicated(2)),
        agent("nightly", Mode::Job(1)),
    ]);
    let p = plan(&w, &Observed::default(), Options::default());
    assert_eq!(
        lines(&p),
        [
            "create network ninetrix-p: missing",
            "create service ninetrix-p-api: missing (the checkpoint API, 1 replica(s))",
            "create service ninetrix-p-mcp-files: missing (MCP server `files`, 1 replica(s))",
            "create service ninetrix-p-writer: missing (agent `writer`, 2 replica(s))",
            "create service ninetrix-p-nightly: missing (agent `nightly`, a job of 1)",
            "prune secrets: none unused now",
        ]
    );
    assert!(p.changes());
}

#[test]
fn no_change_sends_every_update_again_and_changes_nothing() {
    let w = wanted(vec![api(1), agent("writer", Mode::Replicated(2))]);
    let p = plan(&w, &deployed(&w), Options::default());
    assert_eq!(
        lines(&p),
        [
            "update service ninetrix-p-api: sent again (Swarm replaces only the tasks whose spec changed)",
            "update service ninetrix-p-writer: sent again (Swarm replaces only the tasks whose spec changed)",
            "prune secrets: none unused now",
        ]
    );
    assert!(!p.changes());
}

#[test]
fn scaling_up_and_down_names_the_counts() {
    let before = wanted(vec![
        api(1),
        agent("writer", Mode::Replicated(2)),
        agent("nightly", Mode::Job(1)),
    ]);
    let after = wanted(vec![
        api(1),
        agent("writer", Mode::Replicated(3)),
        agent("nightly", Mode::Job(4)),
    ]);
    let p = plan(&after, &deployed(&before), Options::default());
    assert_eq!(
        lines(&p)[1],
        "update service ninetrix-p-writer: 2 replica(s) → 3 replica(s)"
    );
    assert_eq!(
        lines(&p)[2],
        "update service ninetrix-p-nightly: a job of 1 → a job of 4"
    );
    let p = plan(&before, &deployed(&after), Options::default());
    assert_eq!(
        lines(&p)[1],
        "update service ninetrix-p-writer: 3 replica(s) → 2 replica(s)"
    );
}

#[test]
fn a_spec_change_is_named_and_force_recreate_wins() {
    let before = wanted(vec![api(1), agent("writer", Mode::Replicated(1))]);
    let mut after = before.clone();
    after.services[1].image = "ninetrix/runner:2".into();
    let p = plan(&after, &deployed(&before), Options::default());
    assert_eq!(
        lines(&p)[1],
        "update service ninetrix-p-writer: image ninetrix/runner:1 → ninetrix/runner:2"
    );
    let forced = Options {
        force_recreate: true,
        ..Options::default()
    };
    let p = plan(&before, &deployed(&before), forced);
    assert_eq!(
        lines(&p)[..2],
        [
            "update service ninetrix-p-api: --force-recreate (every task is replaced)",
            "update service ninetrix-p-writer: --force-recreate (every task is replaced)",
        ]
    );
}

#[test]
fn a_durable_agent_turned_batch_changes_its_kind() {
    let before = wanted(vec![api(1), agent("writer", Mode::Replicated(2))]);
    let after = wanted(vec![api(1), agent("writer", Mode::Job(2))]);
    let p = plan(&after, &deployed(&before), Options::default());
    assert_eq!(
        lines(&p)[1],
        "update service ninetrix-p-writer: 2 replica(s) → a job of 2"
    );
}

#[test]
fn a_registry_image_pinned_by_swarm_is_the_same_image() {
    let w = wanted(vec![api(1)]);
    let mut seen = deployed(&w);
    seen.services[0].image = Some("ninetrix/runner:1@sha256:abc".into());
    assert!(!plan(&w, &seen, Options::default()).changes());
}

#[test]
fn orphans_are_reported_and_removed_only_with_remove_orphans() {
    let before = wanted(vec![
        api(1),
        agent("writer", Mode::Replicated(1)),
        agent("old", Mode::Replicated(1)),
    ]);
    let after = wanted(vec![api(1), agent("writer", Mode::Replicated(1))]);
    let p = plan(&after, &deployed(&before), Options::default());
    assert_eq!(
        lines(&p)[2..],
        [
            "keep service ninetrix-p-old: orphan (agent `old` is no longer in the agentfile; --remove-orphans removes it)",
            "prune secrets: none unused now",
        ]
    );
    assert!(!p.changes(), "a reported orphan changes nothing");
    let remove = Options {
        remove_orphans: true,
        ..Options::default()
    };
    let p = plan(&after, &deployed(&before), remove);
    assert_eq!(
        lines(&p)[2..],
        [
            "remove service ninetrix-p-old: orphan (agent `old` is no longer in the agentfile)",
            "prune secrets: s-ninetrix-p-old no service uses",
        ]
    );
}

#[test]
fn a_sidecar_no_longer_declared_is_removed_before_the_agents() {
    let before = wanted(vec![
        api(1),
        sidecar("files"),
        sidecar("web"),
        agent("writer", Mode::Replicated(1)),
    ]);
    let after = wanted(vec![
        api(1),
        sidecar("files"),
        agent("writer", Mode::Replicated(1)),
    ]);
    let p = plan(&after, &deployed(&before), Options::default());
    assert_eq!(
        lines(&p),
        [
            "update service ninetrix-p-api: sent again (Swarm replaces only the tasks whose spec changed)",
            "update service ninetrix-p-mcp-files: sent again (Swarm replaces only the tasks whose spec changed)",
            "remove service ninetrix-p-mcp-web: a sidecar no longer declared",
            "update service ninetrix-p-writer: sent again (Swarm replaces only the tasks whose spec changed)",
            "prune secrets: s-ninetrix-p-mcp-web no service uses",
        ]
    );
}

#[test]
fn a_secret_no_service_uses_is_pruned() {
    let w = wanted(vec![api(1)]);
    let mut seen = deployed(&w);
    seen.secrets.push(("old-value".into(), "sid-old".into()));
    assert_eq!(
        lines(&plan(&w, &seen, Options::default())).last().unwrap(),
        "prune secrets: old-value no service uses"
    );
}

/// The swarm as a pure model: what each op does to what `up` observes.
fn apply(seen: &mut Observed, plan: &Plan) {
    for op in &plan.ops {
        match op {
            Op::CreateNetwork { .. } => seen.network = Some("net-id".into()),
            Op::Create { service } | Op::Update { service, .. } => {
                seen.services.retain(|s| s.name != service.name);
                let made = made(service);
                let secret = (format!("s-{}", service.name), made.secrets[0].clone());
                if !seen.secrets.contains(&secret) {
                    seen.secrets.push(secret);
                }
                seen.services.push(made);
            }
            Op::RemoveSidecar { name, .. } | Op::RemoveOrphan { name, .. } => {
                seen.services.retain(|s| &s.name != name)
            }
            Op::ReportOrphan { .. } => {}
            // `apply` lists the secrets in use again, after the updates.
            Op::PruneSecrets { .. } => {
                let used: Vec<String> = seen
                    .services
                    .iter()
                    .flat_map(|s| s.secrets.clone())
                    .collect();
                seen.secrets.retain(|(_, id)| used.contains(id));
            }
        }
    }
}

const AGENTS: [&str; 3] = ["a", "b", "c"];
const SERVERS: [&str; 2] = ["files", "web"];

fn arb_mode() -> impl Strategy<Value = Mode> {
    prop_oneof![
        (0..4u32).prop_map(Mode::Replicated),
        (1..4u32).prop_map(Mode::Job)
    ]
}

fn arb_wanted() -> impl Strategy<Value = Wanted> {
    (
        1..3u32,
        proptest::sample::subsequence(SERVERS.to_vec(), 0..=SERVERS.len()),
        proptest::collection::vec((any::<bool>(), arb_mode(), 0..2u8), AGENTS.len()),
    )
        .prop_map(|(api_replicas, servers, agents)| {
            let mut services = vec![api(api_replicas)];
            services.extend(servers.into_iter().map(sidecar));
            for (name, (present, mode, image)) in AGENTS.iter().zip(agents) {
                if present {
                    let mut d = agent(name, mode);
                    d.image = format!("ninetrix/runner:{image}");
                    services.push(d);
                }
            }
            wanted(services)
        })
}

fn arb_observed() -> impl Strategy<Value = Observed> {
    (
        arb_wanted(),
        any::<bool>(),
        proptest::collection::vec(any::<bool>(), 0..4),
    )
        .prop_map(|(before, network, extra)| {
            let mut seen = deployed(&before);
            if !network {
                seen.network = None;
            }
            for (i, used) in extra.into_iter().enumerate() {
                let id = format!("sid-extra-{i}");
                seen.secrets.push((format!("extra-{i}"), id.clone()));
                if used && let Some(s) = seen.services.first_mut() {
                    s.secrets.push(id);
                }
            }
            seen
        })
}

proptest! {
    #[test]
    fn applying_a_plan_converges(
        wanted in arb_wanted(),
        observed in arb_observed(),
        force_recreate in any::<bool>(),
        remove_orphans in any::<bool>(),
    ) {
        let options = Options { force_recreate, remove_orphans };
        let mut seen = observed;
        let first = plan(&wanted, &seen, options);
        apply(&mut seen, &first);
        let next = plan(&wanted, &seen, Options { force_recreate: false, remove_orphans });
        prop_assert!(!next.changes(), "{first}\nthen\n{next}");
    }
}
