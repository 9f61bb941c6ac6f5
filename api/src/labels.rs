//! The rule that a thread's labels are fixed: its pool, agent and replica are written once, when
//! the thread is created (by the admin's runner-token mint, `up`, a replica lookup or
//! `POST /v1/sessions`), and never change after. Every rule that trusts labels — which pool's
//! approvers see a request, which collaborators a runner may hand work to, which thread a
//! replica adopts — would otherwise trust whatever a runner last claimed.
//!
//! A claim or a mint may restate the labels (the runner sends its own at every boot); this module
//! decides, without I/O, whether what it states is the thread's.

use ninetrix_proto::api::ThreadLabels;

/// Who states labels for a thread that exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stating {
    /// The admin — its token mint, or a claim made with the admin token (or in insecure-dev
    /// mode, where every caller is the admin): it may label a thread that has no labels at all
    /// yet (one an enqueue made first) — once; after that it only restates.
    Mint,
    /// A runner token's claim (or anything else): it only restates.
    Claim,
}

/// Whether a thread has no labels at all: no pool, agent, replica or session.
pub(crate) fn unlabelled(labels: &ThreadLabels) -> bool {
    labels.pool.is_none()
        && labels.agent.is_none()
        && labels.replica.is_none()
        && labels.session.is_none()
}

/// What a thread's labels become when `asked` states them: the stored ones (a restatement), or —
/// for a mint on a thread without labels — the asked ones. Anything else is a change, refused.
pub(crate) fn settle(
    stored: &ThreadLabels,
    asked: &ThreadLabels,
    stating: Stating,
) -> Result<ThreadLabels, LabelChanged> {
    if stating == Stating::Mint && unlabelled(stored) {
        return Ok(ThreadLabels {
            session: None,
            ..asked.clone()
        });
    }
    restates(stored, asked)?;
    Ok(stored.clone())
}

/// A label a request gives with another value than the thread's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LabelChanged {
    /// Which label: `pool`, `agent` or `replica`.
    pub field: &'static str,
    /// The thread's value (`None`: the thread has none, and never will).
    pub stored: Option<String>,
    /// The value the request gave.
    pub asked: String,
}

/// Whether `asked` restates `stored`: every label `asked` gives must equal the thread's. A label
/// left out says nothing. A session thread's replica is computed from its key, never stored, so a
/// replica given for one is not compared. (The session key is checked on its own: another key is
/// `session_mismatch`.)
pub(crate) fn restates(stored: &ThreadLabels, asked: &ThreadLabels) -> Result<(), LabelChanged> {
    let same = |field: &'static str, stored: Option<String>, asked: Option<String>| match asked {
        Some(asked) if stored.as_deref() != Some(asked.as_str()) => Err(LabelChanged {
            field,
            stored,
            asked,
        }),
        _ => Ok(()),
    };
    same("pool", stored.pool.clone(), asked.pool.clone())?;
    same("agent", stored.agent.clone(), asked.agent.clone())?;
    if stored.session.is_none() {
        same(
            "replica",
            stored.replica.map(|r| r.to_string()),
            asked.replica.map(|r| r.to_string()),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pool: Option<&str>, agent: Option<&str>, replica: Option<u32>) -> ThreadLabels {
        ThreadLabels {
            pool: pool.map(str::to_string),
            agent: agent.map(str::to_string),
            replica,
            session: None,
        }
    }

    #[test]
    fn the_same_labels_or_none_restate_the_thread() {
        let stored = labels(Some("p"), Some("a"), Some(1));
        assert_eq!(restates(&stored, &stored), Ok(()));
        assert_eq!(restates(&stored, &ThreadLabels::default()), Ok(()));
        assert_eq!(restates(&stored, &labels(Some("p"), None, None)), Ok(()));
    }

    #[test]
    fn another_pool_agent_or_replica_is_a_change() {
        let stored = labels(Some("p"), Some("a"), Some(1));
        let changed = restates(&stored, &labels(Some("q"), Some("a"), Some(1))).unwrap_err();
        assert_eq!(
            changed,
            LabelChanged {
                field: "pool",
                stored: Some("p".into()),
                asked: "q".into()
            }
        );
        assert_eq!(
            restates(&stored, &labels(None, Some("b"), None))
                .unwrap_err()
                .field,
            "agent"
        );
        assert_eq!(
            restates(&stored, &labels(None, None, Some(2)))
                .unwrap_err()
                .field,
            "replica"
        );
    }

    #[test]
    fn a_thread_without_labels_keeps_none() {
        // Labels are written at creation only: a thread made without them never gains them (a
        // runner could otherwise adopt a pool by labelling an unlabelled thread).
        let changed = restates(
            &ThreadLabels::default(),
            &labels(Some("p"), Some("a"), Some(1)),
        )
        .unwrap_err();
        assert_eq!((changed.field, changed.stored), ("pool", None));
    }

    #[test]
    fn a_mint_labels_an_unlabelled_thread_once_and_a_claim_never() {
        let asked = labels(Some("p"), Some("a"), Some(1));
        let none = ThreadLabels::default();
        assert_eq!(settle(&none, &asked, Stating::Mint), Ok(asked.clone()));
        assert!(settle(&none, &asked, Stating::Claim).is_err());
        // Labelled once, the thread keeps them, for a mint too.
        let other = labels(Some("q"), Some("a"), Some(1));
        assert!(settle(&asked, &other, Stating::Mint).is_err());
        assert_eq!(settle(&asked, &asked, Stating::Claim), Ok(asked.clone()));
        // A mint never sets a session: only POST /v1/sessions opens one.
        let mut with_session = asked.clone();
        with_session.session = Some("k".into());
        assert_eq!(
            settle(&none, &with_session, Stating::Mint).unwrap().session,
            None
        );
    }

    #[test]
    fn a_session_threads_replica_is_not_compared() {
        let mut stored = labels(Some("p"), Some("a"), None);
        stored.session = Some("k".into());
        assert_eq!(
            restates(&stored, &labels(Some("p"), Some("a"), Some(3))),
            Ok(())
        );
        assert!(restates(&stored, &labels(Some("p"), Some("b"), None)).is_err());
    }
}
