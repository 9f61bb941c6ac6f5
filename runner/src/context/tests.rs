use super::*;
use ninetrix_agentfile::context::ContextPolicy;
use serde_json::json;

fn user(t: &str) -> Message {
    Message::text(Role::User, t)
}

fn answer(t: &str) -> Message {
    Message::text(Role::Assistant, t)
}

fn call(id: &str) -> Message {
    Message::new(
        Role::Assistant,
        vec![Block::ToolCall {
            id: id.into(),
            name: "file_read".into(),
            args: json!({"path": id}),
        }],
    )
}

fn result(id: &str, size: usize) -> Message {
    crate::history::tool_result(id, "x".repeat(size), false)
}

/// `turns` turns, each: input, a read call, its result, an answer.
fn transcript(turns: usize) -> Vec<Message> {
    let mut h = Vec::new();
    for t in 0..turns {
        h.push(user(&format!("question {t}")));
        h.push(call(&format!("c{t}")));
        h.push(result(&format!("c{t}"), 400));
        h.push(answer(&format!("answer {t}")));
    }
    h
}

fn policy(strategy: Strategy, keep: KeepRecent) -> ContextPolicy {
    ContextPolicy {
        window: Some(10_000),
        window_source: None,
        compact_at: 0.8,
        keep_recent: keep,
        strategy,
        model: None,
    }
}

fn summarized(h: &mut Vec<Message>, keep: KeepRecent, limit: usize) -> Plan {
    let p = plan(
        h,
        &policy(Strategy::Summarize, keep),
        limit,
        CompactionReason::Threshold,
        9_000,
        keep,
    )
    .unwrap();
    let c = record(h, &p, Some(("SUMMARY".into(), "m".into())), 100, 7);
    h.push(message(c));
    p
}

#[test]
fn without_compactions_the_view_is_the_history() {
    let h = transcript(3);
    let f = fold(&h);
    assert_eq!((f.start, f.cleared_before, f.count), (0, 0, 0));
    assert_eq!(view(&h, &f), h);
}

#[test]
fn a_summary_replaces_the_turns_before_the_kept_ones() {
    let mut h = transcript(5);
    let p = summarized(&mut h, KeepRecent::Turns(2), 20);
    assert_eq!((p.from, p.to, p.turns), (0, 12, [1, 3]));
    let f = fold(&h);
    let v = view(&h, &f);
    assert_eq!(
        v.len(),
        8,
        "two turns of four messages, the record left out"
    );
    assert!(v[0].text_content().contains("SUMMARY"), "{:?}", v[0]);
    assert!(v[0].text_content().ends_with("question 3"));
    assert!(crate::history::validate(&v).is_ok());
    assert_eq!(f.hidden_rounds, 6, "two per summarised turn");
    assert_eq!(h.len(), 21, "the stored history only grows");
}

#[test]
fn the_cut_never_enters_the_current_turn() {
    // Turn 4 is in progress: its input at 16, a call and its result.
    let mut h = transcript(4);
    h.push(user("current"));
    h.push(call("now"));
    h.push(result("now", 10));
    for keep in [
        KeepRecent::Turns(0),
        KeepRecent::Turns(1),
        KeepRecent::Tokens(1),
    ] {
        let to = cut(&h, &fold(&h), 16, keep).unwrap();
        assert!(to <= 16 && h[to].role == Role::User, "{keep:?}: {to}");
    }
    assert_eq!(cut(&h, &fold(&h), 16, KeepRecent::Turns(0)), Some(16));
    assert_eq!(cut(&h, &fold(&h), 16, KeepRecent::Turns(4)), None);
    // Keeping tokens: the latest turn start that keeps at least that many.
    let one_turn = estimate(&h[12..16]);
    assert_eq!(
        cut(&h, &fold(&h), 16, KeepRecent::Tokens(one_turn as u32)),
        Some(12)
    );
    assert_eq!(
        cut(&h, &fold(&h), 16, KeepRecent::Tokens(one_turn as u32 + 1)),
        Some(8)
    );
}

#[test]
fn a_second_summary_starts_where_the_first_ended_and_carries_it() {
    let mut h = transcript(4);
    summarized(&mut h, KeepRecent::Turns(1), 16);
    assert_eq!(fold(&h).start, 12);
    h.extend(transcript(3));
    let limit = h.len();
    let p = plan(
        &h,
        &policy(Strategy::Summarize, KeepRecent::Turns(1)),
        limit,
        CompactionReason::Threshold,
        1,
        KeepRecent::Turns(1),
    )
    .unwrap();
    assert_eq!(p.from, 12);
    assert_eq!(p.turns, [4, 6]);
    let input = summary_input(&h, &p);
    assert!(
        input[0].text_content().contains("SUMMARY"),
        "the previous summary is summarised again"
    );
    assert_eq!(input.last().unwrap().text_content(), SUMMARY_ASK);
    assert!(
        input.iter().all(|m| m.compaction().is_none()),
        "no record reaches a provider"
    );
}

#[test]
fn clearing_stubs_old_results_and_keeps_every_call_paired() {
    let mut h = transcript(4);
    let pol = policy(Strategy::ClearToolResults, KeepRecent::Turns(1));
    let p = plan(
        &h,
        &pol,
        16,
        CompactionReason::Threshold,
        1,
        KeepRecent::Turns(1),
    )
    .unwrap();
    let c = record(&h, &p, None, 0, 3);
    assert_eq!((c.cleared, c.to), (3, 12));
    assert!(c.tokens_after < estimate(&h));
    h.push(message(c));
    let v = view(&h, &fold(&h));
    assert!(crate::history::validate(&v).is_ok());
    let stubbed: Vec<String> = v
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| match &m.blocks[0] {
            Block::ToolResult { content, .. } => content.clone(),
            _ => unreachable!(),
        })
        .collect();
    assert!(
        stubbed[..3]
            .iter()
            .all(|c| c.contains("`file_read` call (400 bytes)"))
    );
    assert_eq!(stubbed[3].len(), 400, "the kept turn's result is whole");
    // Nothing more to clear up to the same point.
    assert!(
        plan(
            &h,
            &pol,
            16,
            CompactionReason::Threshold,
            1,
            KeepRecent::Turns(1)
        )
        .is_err()
    );
}

#[test]
fn an_overflow_with_nothing_before_clears_the_current_turns_older_results() {
    let mut h = vec![user("one long turn")];
    for i in 0..3 {
        h.push(call(&format!("c{i}")));
        h.push(result(&format!("c{i}"), 5_000));
    }
    let pol = policy(Strategy::Summarize, KeepRecent::Turns(2));
    let p = plan_overflow(&h, &pol, 0, 9).unwrap();
    assert_eq!((p.strategy, p.to), (Strategy::ClearToolResults, 5));
    let c = record(&h, &p, None, 0, 1);
    assert_eq!(c.cleared, 2, "the last round's result stays");
    h.push(message(c));
    assert!(crate::history::validate(&view(&h, &fold(&h))).is_ok());
    assert_eq!(plan_overflow(&h, &pol, 0, 9), Err(Skip::CurrentTurnTooBig));
}

#[test]
fn the_estimate_follows_the_providers_count_and_adds_what_is_new() {
    let h = transcript(3);
    let f = fold(&h);
    let used = ContextUse {
        input_tokens: 5_000,
        history_len: 8,
        window: Some(10_000),
        compactions: 0,
    };
    assert_eq!(
        input_estimate(&h, &f, Some(&used), 0),
        5_000 + estimate(&h[8..])
    );
    assert_eq!(input_estimate(&h, &f, None, 50), 50 + estimate(&h));
    assert!(due(
        &policy(Strategy::Summarize, KeepRecent::Turns(1)),
        8_001
    ));
    assert!(!due(
        &policy(Strategy::Summarize, KeepRecent::Turns(1)),
        8_000
    ));
}

mod properties {
    use super::*;
    use ninetrix_proto::context::Strategy;
    use proptest::prelude::{
        Strategy as Generate, any, prop, prop_assert, prop_assert_eq, proptest,
    };

    /// Turns of 0–3 rounds of 0–3 read calls each, ending with an answer.
    fn turns() -> impl Generate<Value = Vec<Vec<usize>>> {
        proptest::collection::vec(proptest::collection::vec(0usize..4, 0..4), 1..12)
    }

    fn build(turns: &[Vec<usize>]) -> Vec<Message> {
        let mut h = Vec::new();
        let mut n = 0;
        for (t, rounds) in turns.iter().enumerate() {
            h.push(user(&format!("input {t}")));
            for calls in rounds {
                let ids: Vec<String> = (0..*calls)
                    .map(|_| {
                        n += 1;
                        format!("c{n}")
                    })
                    .collect();
                h.push(Message::new(
                    Role::Assistant,
                    ids.iter()
                        .map(|id| Block::ToolCall {
                            id: id.clone(),
                            name: "file_read".into(),
                            args: json!({}),
                        })
                        .collect::<Vec<_>>()
                        .into_iter()
                        .chain(std::iter::once(Block::Text { text: "r".into() }))
                        .collect(),
                ));
                for id in &ids {
                    h.push(result(id, 100));
                }
            }
            h.push(answer(&format!("answer {t}")));
        }
        h
    }

    proptest! {
        /// Whatever compactions are made, wherever they reach and whatever they keep, the
        /// model's view is a valid history that ends as the stored one does and keeps the
        /// current input.
        #[test]
        fn every_view_is_valid_and_keeps_the_current_input(
            shape in turns(),
            steps in proptest::collection::vec((any::<bool>(), 0u32..4, any::<prop::sample::Index>()), 1..6),
        ) {
            let mut h = build(&shape);
            for (clear, keep, at) in steps {
                let starts: Vec<usize> = (0..h.len()).filter(|&i| h[i].role == Role::User).collect();
                let limit = starts[at.index(starts.len())];
                let strategy = if clear { Strategy::ClearToolResults } else { Strategy::Summarize };
                let pol = policy(strategy, KeepRecent::Turns(keep));
                if let Ok(p) = plan(&h, &pol, limit, CompactionReason::Threshold, 1, KeepRecent::Turns(keep)) {
                    prop_assert!(p.to <= limit && p.to > p.from);
                    let summary = (!clear).then(|| ("S".to_string(), "m".to_string()));
                    let c = record(&h, &p, summary, 0, 1);
                    h.push(message(c));
                }
                let v = view(&h, &fold(&h));
                prop_assert!(crate::history::validate(&v).is_ok(), "{:?}", crate::history::validate(&v));
                let last_input = h.iter().rev().find(|m| m.role == Role::User).unwrap();
                prop_assert!(v.iter().any(|m| m.id == last_input.id));
                prop_assert_eq!(v.last().map(|m| m.id), h.iter().rev().find(|m| m.compaction().is_none()).map(|m| m.id));
            }
        }
    }
}
