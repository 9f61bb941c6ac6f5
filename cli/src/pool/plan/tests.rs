//! Every reconcile rule, asserted on the plan's text (as Compose's reconcile tests do), and a
//! property: applying any plan to a simulated engine converges (the next plan has no ops).

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::pool::state::ReplicaState;

fn cfg(instructions: &str) -> Config {
    Config::from_parts([
        ("metadata.instructions", instructions),
        ("runtime.model", "m"),
        ("image", "img"),
    ])
}

fn want(agent: &str, replicas: u32, durable: bool, config: &Config) -> Desired {
    Desired {
        agent: agent.into(),
        replicas,
        durable,
        config: config.clone(),
    }
}

fn thread(n: u128) -> ThreadId {
    ThreadId::from(uuid::Uuid::from_u128(n))
}

fn running(agent: &str, replica: u32, config: &Config) -> Observed {
    Observed {
        id: format!("id-{agent}-{replica}"),
        agent: agent.into(),
        slot: Some(Slot::Replica(replica)),
        thread: Some(thread(u128::from(replica))),
        config: Some(config.clone()),
        durable: true,
        never_started: false,
        liveness: Liveness {
            running: true,
            ..Liveness::default()
        },
    }
}

fn exited(mut c: Observed, code: i64, restarts: i64) -> Observed {
    c.liveness = Liveness {
        running: false,
        restarting: false,
        restarts,
        exit_code: Some(code),
    };
    c
}

fn lines(plan: &Plan) -> Vec<String> {
    plan.to_string().lines().map(str::to_string).collect()
}

fn run(desired: &[Desired], observed: &[Observed], options: Options) -> Plan {
    plan(desired, observed, &PoolState::default(), &[], options)
}

#[test]
fn missing_replicas_are_created() {
    let c = cfg("a");
    let p = run(
        &[want("writer", 2, true, &c)],
        &[running("writer", 1, &c)],
        Options::default(),
    );
    assert_eq!(
        lines(&p),
        [
            "create writer-2: missing",
            "keep writer-1: unchanged, running"
        ]
    );
}

#[test]
fn unchanged_running_containers_are_kept() {
    let c = cfg("a");
    let p = run(
        &[want("writer", 1, true, &c)],
        &[running("writer", 1, &c)],
        Options::default(),
    );
    assert!(p.ops.is_empty(), "{p}");
}

#[test]
fn a_stopped_durable_container_is_started_which_re_arms_its_budget() {
    let c = cfg("a");
    let p = run(
        &[want("researcher", 1, true, &c)],
        &[exited(running("researcher", 1, &c), 0, 1)],
        Options::default(),
    );
    assert_eq!(
        lines(&p),
        ["start researcher-1: stopped; re-arms the restart budget"]
    );
}

#[test]
fn a_container_that_gave_up_is_started_and_says_so() {
    let c = cfg("a");
    let p = run(
        &[want("worker", 1, true, &c)],
        &[exited(running("worker", 1, &c), 137, 3)],
        Options::default(),
    );
    assert_eq!(
        lines(&p),
        ["start worker-1: gave up after 3 restarts; re-arms the restart budget"]
    );
}

#[test]
fn a_changed_config_recreates_and_names_the_changed_part_keeping_the_thread() {
    let p = run(
        &[want("researcher", 1, true, &cfg("new"))],
        &[running("researcher", 1, &cfg("old"))],
        Options::default(),
    );
    assert_eq!(
        lines(&p),
        ["recreate researcher-1: config changed (metadata.instructions)"]
    );
    assert!(
        matches!(&p.ops[0], Op::Recreate { old, thread: Thread::Reuse(t), .. } if old == "id-researcher-1" && *t == self::thread(1)),
        "{:?}",
        p.ops
    );
}

#[test]
fn several_changed_parts_are_all_named_and_unknown_digests_recreate() {
    let new = Config::from_parts([("metadata.instructions", "b"), ("image", "img2")]);
    let mut old = running("a", 1, &cfg("a"));
    let p = run(
        &[want("a", 1, true, &new)],
        &[old.clone()],
        Options::default(),
    );
    assert_eq!(
        lines(&p),
        ["recreate a-1: config changed (image, metadata.instructions, runtime.model)"]
    );
    old.config = None;
    let p = run(&[want("a", 1, true, &new)], &[old], Options::default());
    assert_eq!(
        lines(&p),
        ["recreate a-1: config changed (created by an older ninetrix)"]
    );
}

#[test]
fn force_recreate_and_never_started_containers_recreate() {
    let c = cfg("a");
    let p = run(
        &[want("a", 1, true, &c)],
        &[running("a", 1, &c)],
        Options {
            force_recreate: true,
            ..Options::default()
        },
    );
    assert_eq!(lines(&p), ["recreate a-1: --force-recreate"]);
    let mut created = exited(running("a", 1, &c), 0, 0);
    created.never_started = true;
    let p = run(&[want("a", 1, true, &c)], &[created], Options::default());
    assert_eq!(lines(&p), ["recreate a-1: created but never started"]);
}

#[test]
fn scaling_down_removes_the_highest_replicas_first() {
    let c = cfg("a");
    let p = run(
        &[want("writer", 1, true, &c)],
        &[
            running("writer", 2, &c),
            running("writer", 1, &c),
            running("writer", 3, &c),
        ],
        Options::default(),
    );
    assert_eq!(
        lines(&p),
        [
            "remove writer-3: scaled down",
            "remove writer-2: scaled down",
            "keep writer-1: unchanged, running"
        ]
    );
}

#[test]
fn orphans_are_reported_and_removed_only_with_remove_orphans() {
    let c = cfg("a");
    let observed = [running("writer", 1, &c), running("old", 1, &c)];
    let desired = [want("writer", 1, true, &c)];
    let p = run(&desired, &observed, Options::default());
    assert!(p.ops.is_empty(), "{p}");
    assert_eq!(
        lines(&p),
        [
            "orphan old-1: its agent is not in the agentfile (--remove-orphans removes it)",
            "keep writer-1: unchanged, running"
        ]
    );
    let p = run(
        &desired,
        &observed,
        Options {
            remove_orphans: true,
            ..Options::default()
        },
    );
    assert_eq!(
        lines(&p)[0],
        "remove old-1: orphan (its agent is not in the agentfile)"
    );
}

#[test]
fn an_unchanged_exited_batch_job_is_not_re_run_but_a_changed_one_gets_a_fresh_thread() {
    let c = cfg("a");
    let mut job = exited(running("digest", 1, &c), 2, 0);
    job.durable = false;
    let p = run(
        &[want("digest", 1, false, &c)],
        &[job.clone()],
        Options::default(),
    );
    assert!(p.ops.is_empty(), "{p}");
    assert_eq!(
        lines(&p),
        ["keep digest-1: unchanged, exited batch job (not re-run)"]
    );
    let p = run(
        &[want("digest", 1, false, &cfg("b"))],
        &[job],
        Options::default(),
    );
    assert!(
        matches!(
            &p.ops[..],
            [Op::Recreate {
                thread: Thread::Fresh,
                ..
            }]
        ),
        "{:?}",
        p.ops
    );
}

#[test]
fn threads_are_reused_from_the_pool_state() {
    let c = cfg("a");
    let mut state = PoolState::default();
    state.agents.entry("writer".into()).or_default().insert(
        2,
        ReplicaState {
            thread_id: thread(42),
            container_id: None,
            config_hash: None,
        },
    );
    let p = plan(
        &[want("writer", 3, true, &c)],
        &[],
        &state,
        &[],
        Options::default(),
    );
    let threads: Vec<Thread> = p
        .ops
        .iter()
        .map(|op| match op {
            Op::Create { thread, .. } => *thread,
            other => panic!("{other}"),
        })
        .collect();
    assert_eq!(
        threads,
        [Thread::Fresh, Thread::Reuse(thread(42)), Thread::Fresh]
    );
}

#[test]
fn a_replica_whose_state_names_a_new_thread_is_recreated_on_it_running_or_stopped() {
    let c = cfg("a");
    let mut state = PoolState::default();
    for (agent, n) in [("writer", 1), ("writer", 2), ("job", 1)] {
        state.agents.entry(agent.into()).or_default().insert(
            n,
            ReplicaState {
                thread_id: thread(40 + u128::from(n)),
                container_id: None,
                config_hash: None,
            },
        );
    }
    let mut job = exited(running("job", 1, &c), 0, 0);
    job.durable = false;
    let p = plan(
        &[want("writer", 2, true, &c), want("job", 1, false, &c)],
        &[
            running("writer", 1, &c),
            exited(running("writer", 2, &c), 0, 0),
            job,
        ],
        &state,
        &[],
        Options::default(),
    );
    assert_eq!(
        lines(&p),
        [
            "recreate writer-1: a new thread (its old thread was purged)",
            "recreate writer-2: a new thread (its old thread was purged)",
            "keep job-1: unchanged, exited batch job (not re-run)",
        ]
    );
    let threads: Vec<Thread> = p
        .ops
        .iter()
        .filter_map(|op| match op {
            Op::Recreate { thread, .. } => Some(*thread),
            _ => None,
        })
        .collect();
    assert_eq!(
        threads,
        [Thread::Reuse(thread(41)), Thread::Reuse(thread(42))]
    );
    // The same thread in both: kept as before.
    state
        .agents
        .get_mut("writer")
        .unwrap()
        .get_mut(&1)
        .unwrap()
        .thread_id = thread(1);
    let p = plan(
        &[want("writer", 1, true, &c)],
        &[running("writer", 1, &c)],
        &state,
        &[],
        Options::default(),
    );
    assert!(p.ops.is_empty(), "{p}");
}

#[test]
fn the_plan_of_one_replica_leaves_the_others_alone() {
    let (old, new) = (cfg("a"), cfg("b"));
    let p = plan(
        &[want("writer", 2, true, &new), want("editor", 1, true, &new)],
        &[
            running("writer", 1, &old),
            running("writer", 3, &new),
            running("editor", 1, &new),
            running("gone", 1, &new),
        ],
        &PoolState::default(),
        &["img".into()],
        Options::default(),
    );
    assert_eq!(
        lines(&p.clone().only("writer", 1)),
        ["recreate writer-1: config changed (metadata.instructions)"]
    );
    assert_eq!(
        lines(&p.clone().only("writer", 2)),
        ["create writer-2: missing"]
    );
    assert_eq!(
        lines(&p.clone().only("editor", 1)),
        ["keep editor-1: unchanged, running"]
    );
    assert!(p.only("writer", 9).to_string().is_empty());
}

#[test]
fn run_containers_are_left_alone_and_duplicates_removed() {
    let c = cfg("a");
    let mut job = running("writer", 1, &c);
    job.id = "run-1".into();
    job.slot = Some(Slot::Run);
    let mut dup = exited(running("writer", 1, &c), 0, 0);
    dup.id = "dup-1".into();
    let p = run(
        &[want("writer", 1, true, &c)],
        &[dup, job, running("writer", 1, &c)],
        Options::default(),
    );
    assert_eq!(
        lines(&p),
        [
            "remove writer-1: duplicate of the same replica",
            "keep writer-1: unchanged, running"
        ]
    );
    assert!(matches!(&p.ops[0], Op::Remove { id, .. } if id == "dup-1"));
}

#[test]
fn images_to_build_come_first() {
    let p = plan(
        &[],
        &[],
        &PoolState::default(),
        &["ninetrix/runner:1".into()],
        Options::default(),
    );
    assert_eq!(lines(&p), ["build ninetrix/runner:1: image would be built"]);
}

/// A Docker engine in memory: containers by ID, and the pool state beside it.
#[derive(Debug, Default)]
struct Engine {
    containers: BTreeMap<String, Observed>,
    state: PoolState,
    next: u64,
}

impl Engine {
    fn observed(&self) -> Vec<Observed> {
        self.containers.values().cloned().collect()
    }

    fn create(&mut self, want: &Desired, replica: u32, pick: Thread) {
        self.next += 1;
        let id = format!("new-{}", self.next);
        let t = match pick {
            Thread::Reuse(t) => t,
            Thread::Fresh => thread(1000 + u128::from(self.next)),
        };
        self.state
            .agents
            .entry(want.agent.clone())
            .or_default()
            .insert(
                replica,
                ReplicaState {
                    thread_id: t,
                    container_id: Some(id.clone()),
                    config_hash: Some(want.config.hash()),
                },
            );
        let mut c = Observed {
            id: id.clone(),
            agent: want.agent.clone(),
            slot: Some(Slot::Replica(replica)),
            thread: Some(t),
            config: Some(want.config.clone()),
            durable: want.durable,
            never_started: false,
            liveness: Liveness {
                running: true,
                ..Liveness::default()
            },
        };
        if !want.durable {
            // A batch job may well have finished already.
            c = exited(c, 0, 0);
        }
        self.containers.insert(id, c);
    }

    fn apply(&mut self, desired: &[Desired], plan: &Plan) {
        let find = |agent: &str| desired.iter().find(|d| d.agent == agent).unwrap();
        for op in &plan.ops {
            match op {
                Op::BuildImage { .. } => {}
                Op::Remove { id, .. } => {
                    self.containers.remove(id);
                }
                Op::Start { id, .. } => {
                    let c = self.containers.get_mut(id).unwrap();
                    c.liveness = Liveness {
                        running: true,
                        ..Liveness::default()
                    };
                }
                Op::Create {
                    agent,
                    replica,
                    thread,
                } => self.create(find(agent), *replica, *thread),
                Op::Recreate {
                    agent,
                    replica,
                    old,
                    thread,
                    ..
                } => {
                    self.containers.remove(old);
                    self.create(find(agent), *replica, *thread);
                }
            }
        }
    }
}

fn arb_config() -> impl Strategy<Value = Config> {
    (0..3u8).prop_map(|v| cfg(&v.to_string()))
}

const AGENTS: [&str; 4] = ["a", "b", "c", "d"];

fn arb_observed() -> impl Strategy<Value = Observed> {
    (
        0..AGENTS.len(),
        prop_oneof![
            4 => (1..6u32).prop_map(|n| Some(Slot::Replica(n))),
            1 => Just(Some(Slot::Run)),
            1 => Just(None),
        ],
        proptest::option::of(arb_config()),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        0..5i64,
        -1..3i64,
    )
        .prop_map(
            |(agent, slot, config, durable, never_started, running, restarts, code)| Observed {
                id: String::new(),
                agent: AGENTS[agent].into(),
                slot,
                thread: None,
                config,
                durable,
                never_started,
                liveness: Liveness {
                    running,
                    restarting: false,
                    restarts,
                    exit_code: (!running).then_some(code),
                },
            },
        )
}

fn arb_desired() -> impl Strategy<Value = Vec<Desired>> {
    proptest::sample::subsequence(AGENTS.to_vec(), 0..=AGENTS.len()).prop_flat_map(|agents| {
        let n = agents.len();
        (
            Just(agents),
            proptest::collection::vec((0..4u32, any::<bool>(), arb_config()), n),
        )
            .prop_map(|(agents, specs)| {
                agents
                    .into_iter()
                    .zip(specs)
                    .map(|(agent, (replicas, durable, config))| {
                        want(agent, replicas, durable, &config)
                    })
                    .collect()
            })
    })
}

proptest! {
    #[test]
    fn applying_a_plan_converges(
        desired in arb_desired(),
        observed in proptest::collection::vec(arb_observed(), 0..10),
        force_recreate in any::<bool>(),
        remove_orphans in any::<bool>(),
    ) {
        let mut engine = Engine::default();
        for (i, mut c) in observed.into_iter().enumerate() {
            c.id = format!("old-{i}");
            engine.containers.insert(c.id.clone(), c);
        }
        let options = Options { force_recreate, remove_orphans };
        let first = plan(&desired, &engine.observed(), &engine.state, &[], options);
        engine.apply(&desired, &first);
        // The next plan (without --force-recreate, which always recreates) has nothing to do.
        let again = Options { force_recreate: false, remove_orphans };
        let next = plan(&desired, &engine.observed(), &engine.state, &[], again);
        prop_assert!(next.ops.is_empty(), "first:\n{first}\nnext:\n{next}");
        // Every wanted replica has exactly one container, with the wanted config.
        for d in &desired {
            for r in 1..=d.replicas {
                let matching: Vec<&Observed> = engine.containers.values()
                    .filter(|c| c.agent == d.agent && c.slot == Some(Slot::Replica(r)))
                    .collect();
                prop_assert_eq!(matching.len(), 1);
                prop_assert_eq!(matching[0].config.as_ref(), Some(&d.config));
            }
        }
    }
}
