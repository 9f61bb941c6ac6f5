//! Ledger keys (DESIGN §6.5): `sha256(thread, turn_seq, tool, canonical args, occurrence)`,
//! where occurrence counts earlier identical calls in the same turn. Never the provider's call
//! ID, which changes when a turn is re-run.

use ninetrix_proto::ThreadId;
use sha2::{Digest, Sha256};

/// The JSON of `value` with object keys sorted (serde_json's map is ordered by key), so equal
/// arguments give equal text whatever order the model wrote them in.
pub fn canonical_json(value: &serde_json::Value) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// The ledger key of a call.
pub fn key(
    thread: ThreadId,
    turn_seq: u64,
    tool: &str,
    args: &serde_json::Value,
    occurrence: usize,
) -> String {
    let mut h = Sha256::new();
    for part in [
        thread.to_string(),
        turn_seq.to_string(),
        tool.to_string(),
        canonical_json(args),
        occurrence.to_string(),
    ] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_ignore_argument_order_and_differ_by_occurrence() {
        let t = ThreadId::new_v7();
        let a = key(t, 1, "file_write", &json!({"path": "a", "content": "x"}), 0);
        let b = key(
            t,
            1,
            "file_write",
            &serde_json::from_str(r#"{"content":"x","path":"a"}"#).unwrap(),
            0,
        );
        assert_eq!(a, b);
        assert_eq!(a.len(), 64);
        assert_ne!(
            a,
            key(t, 1, "file_write", &json!({"path": "a", "content": "x"}), 1)
        );
        assert_ne!(
            a,
            key(t, 2, "file_write", &json!({"path": "a", "content": "x"}), 0)
        );
        assert_ne!(
            a,
            key(
                ThreadId::new_v7(),
                1,
                "file_write",
                &json!({"path": "a", "content": "x"}),
                0
            )
        );
    }
}
