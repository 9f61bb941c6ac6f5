//! Sessions: many durable conversations per agent, each a thread of its own, addressed by a key
//! (a customer ID, a chat ID — any string up to [`MAX_KEY_CHARS`] characters), and served by one
//! of the agent's replicas: its owner, computed from the key and the replica count alone — no
//! coordinator.
//!
//! Ownership is rendezvous (highest-random-weight) hashing: every replica scores the key and the
//! highest score owns it. Going from n to n+1 replicas moves only the sessions the new replica now
//! wins, about 1/(n+1) of them; going down moves only the removed replica's sessions. The score is
//! a fixed function of the bytes (FNV-1a 64 folded with a SplitMix64 finaliser), so every runner
//! and the API agree on it across builds and machines.

/// Longest session key, in characters.
pub const MAX_KEY_CHARS: usize = 200;

/// Why a session key is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// An empty key.
    #[error("a session key must not be empty")]
    Empty,
    /// A key over [`MAX_KEY_CHARS`] characters.
    #[error("a session key has at most {MAX_KEY_CHARS} characters; this one has {0}")]
    TooLong(usize),
    /// A key with a character that would garble or forge listings and logs: a control
    /// character (a line break, a NUL, an ANSI escape), a bidirectional control or a line
    /// separator ([`crate::text`]).
    #[error(
        "a session key must not contain control, bidirectional-control or line-separator characters (found U+{0:04X})"
    )]
    Control(u32),
}

/// Checks a session key: 1 to [`MAX_KEY_CHARS`] characters, none unsafe in a name
/// ([`crate::text::is_unsafe_char`]).
pub fn check_key(key: &str) -> Result<(), KeyError> {
    let n = key.chars().count();
    if n == 0 {
        return Err(KeyError::Empty);
    }
    if n > MAX_KEY_CHARS {
        return Err(KeyError::TooLong(n));
    }
    if let Some(c) = crate::text::first_unsafe(key) {
        return Err(KeyError::Control(u32::from(c)));
    }
    Ok(())
}

/// The replica (from 1) that owns session `key` among `replicas` (0 counts as 1).
pub fn owner(key: &str, replicas: u32) -> u32 {
    let prefix = KeyHash::new(key);
    best(&prefix, 1..=replicas.max(1), None)
}

/// The owner of session `key` among `replicas`, knowing `from`: the owner it had among another
/// count (`(count, owner)`, as stored). Going up, the old owner keeps the session unless one of
/// the added replicas scores higher (one score per added replica instead of one per replica);
/// going down, only the sessions of removed replicas are computed again. Always equal to
/// [`owner`]`(key, replicas)` when `from` is right; `None` (or a `from` that cannot be right)
/// computes it from scratch.
pub fn owner_after(key: &str, from: Option<(u32, u32)>, replicas: u32) -> u32 {
    let replicas = replicas.max(1);
    let prefix = KeyHash::new(key);
    match from {
        Some((count, old)) if count >= 1 && (1..=count).contains(&old) => {
            if replicas >= count {
                best(&prefix, count + 1..=replicas, Some(old))
            } else if old <= replicas {
                old
            } else {
                best(&prefix, 1..=replicas, None)
            }
        }
        _ => best(&prefix, 1..=replicas, None),
    }
}

/// The highest-scoring replica of `candidates` and `incumbent` (ties to the lower number).
fn best(
    prefix: &KeyHash,
    candidates: std::ops::RangeInclusive<u32>,
    incumbent: Option<u32>,
) -> u32 {
    incumbent
        .into_iter()
        .chain(candidates)
        .max_by_key(|&r| (prefix.score(r), std::cmp::Reverse(r)))
        .unwrap_or(1)
}

/// FNV-1a 64 of a key and its separator, computed once for every replica's score.
struct KeyHash(u64);

impl KeyHash {
    const PRIME: u64 = 0x0000_0100_0000_01b3;

    fn new(key: &str) -> KeyHash {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in key.as_bytes().iter().chain(&[0xff]) {
            h ^= u64::from(*b);
            h = h.wrapping_mul(Self::PRIME);
        }
        KeyHash(h)
    }

    /// Replica `replica`'s score for the key: the hash continued over the replica's bytes, then
    /// SplitMix64's finaliser (FNV alone leaves the last bytes, the replica, weakly mixed).
    fn score(&self, replica: u32) -> u64 {
        let mut h = self.0;
        for b in replica.to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(Self::PRIME);
        }
        h ^= h >> 30;
        h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        h ^= h >> 27;
        h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
        h ^ (h >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("customer-{i}")).collect()
    }

    #[test]
    fn owners_are_fixed_values_every_build_agrees_on() {
        // Changing the score function would move every session: these pin it.
        let got: Vec<u32> = ["alice", "bob", "carol", "dave", "", "é"]
            .iter()
            .map(|k| owner(k, 5))
            .collect();
        assert_eq!(got, [5, 1, 3, 1, 2, 4]);
        for k in ["alice", "bob", "carol"] {
            assert_eq!(owner(k, 5), owner(k, 5));
            assert!((1..=5).contains(&owner(k, 5)));
        }
        assert_eq!(owner("anything", 1), 1);
        assert_eq!(owner("anything", 0), 1);
    }

    #[test]
    fn sessions_spread_evenly() {
        let n = 4;
        let keys = keys(20_000);
        let mut counts = vec![0usize; n as usize];
        for k in &keys {
            counts[(owner(k, n) - 1) as usize] += 1;
        }
        let fair = keys.len() / n as usize;
        for c in counts {
            assert!(c.abs_diff(fair) < fair / 10, "{c} vs {fair}");
        }
    }

    #[test]
    fn adding_a_replica_moves_about_one_in_n_plus_one_and_only_to_it() {
        let keys = keys(20_000);
        for n in 1..8u32 {
            let moved: Vec<&String> = keys
                .iter()
                .filter(|k| owner(k, n) != owner(k, n + 1))
                .collect();
            for k in &moved {
                assert_eq!(
                    owner(k, n + 1),
                    n + 1,
                    "a moved session goes to the new replica"
                );
            }
            let expected = keys.len() / (n as usize + 1);
            assert!(
                moved.len().abs_diff(expected) < expected / 8,
                "{n} → {}: {} moved, about {expected} expected",
                n + 1,
                moved.len()
            );
        }
    }

    #[test]
    fn removing_a_replica_moves_only_its_sessions() {
        let keys = keys(5_000);
        for k in &keys {
            let (before, after) = (owner(k, 3), owner(k, 2));
            if before != 3 {
                assert_eq!(before, after, "{k} moved although its owner stays");
            }
        }
    }

    #[test]
    fn the_owner_after_a_stored_one_is_the_owner() {
        let keys = keys(3_000);
        for (from, to) in [(1, 4), (3, 4), (4, 3), (7, 2), (5, 5), (2, 9)] {
            for k in &keys {
                let stored = Some((from, owner(k, from)));
                assert_eq!(
                    owner_after(k, stored, to),
                    owner(k, to),
                    "{k}: {from} → {to}"
                );
            }
        }
        // Nothing stored, or a stored owner that cannot be right: computed from scratch.
        for from in [None, Some((0, 0)), Some((3, 5)), Some((2, 0))] {
            assert_eq!(owner_after("alice", from, 5), owner("alice", 5));
        }
    }

    #[test]
    fn keys_are_checked() {
        assert!(check_key("cust-42 / eu").is_ok());
        assert!(check_key(&"é".repeat(200)).is_ok());
        assert_eq!(check_key(""), Err(KeyError::Empty));
        assert_eq!(check_key(&"x".repeat(201)), Err(KeyError::TooLong(201)));
        assert_eq!(check_key("a\nb"), Err(KeyError::Control(0x0A)));
        assert_eq!(check_key("a\u{202E}b"), Err(KeyError::Control(0x202E)));
        assert_eq!(check_key("a\u{2028}b"), Err(KeyError::Control(0x2028)));
    }
}
