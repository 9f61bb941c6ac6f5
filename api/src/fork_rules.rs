//! The rules of going back in a conversation (issue 41), as pure functions: what a snapshot
//! object must be to be stored, which ended turns are still part of the current history, which
//! turn a diff compares against, and a fork's default session key (which later effects going
//! back does not undo is `ninetrix_proto::api::undone_after`, shared with the CLI). The store (`store/ops/turns.rs`, `forks.rs`, `objects.rs`) reads and
//! writes; these decide.

use ninetrix_proto::ThreadId;
use ninetrix_proto::snapshots::{MAX_OBJECT_BYTES, Node, ObjectId, ObjectKind, check_path};

/// How many missing objects an answer names (the rest are counted).
pub(crate) const MISSING_NAMED: usize = 5;

/// The most changes a diff lists.
pub(crate) const MAX_DIFF_CHANGES: usize = 10_000;

/// Checks an object before it is stored: its ID is the SHA-256 of its bytes, it is at most
/// [`MAX_OBJECT_BYTES`], and a node decodes with every path inside the workspace. Returns the
/// objects it refers to (a node's files or children; none for a blob), each once, in order.
pub(crate) fn check_object(
    id: &ObjectId,
    kind: ObjectKind,
    bytes: &[u8],
) -> Result<Vec<ObjectId>, String> {
    if bytes.len() as u64 > MAX_OBJECT_BYTES {
        return Err(format!(
            "object {id} is {} bytes; an object is at most {MAX_OBJECT_BYTES} bytes",
            bytes.len()
        ));
    }
    let actual = ObjectId::of(bytes);
    if &actual != id {
        return Err(format!(
            "the body's SHA-256 is {actual}, not {id} (the object ID in the path): an object's ID is the SHA-256 of its bytes; send the bytes under their own ID"
        ));
    }
    if kind == ObjectKind::Blob {
        return Ok(Vec::new());
    }
    let node = Node::decode(bytes).map_err(|e| format!("object {id} (kind node): {e}"))?;
    if let Node::Leaf(files) = &node {
        for f in files {
            check_path(&f.path).map_err(|e| format!("object {id} (kind node): {e}"))?;
        }
    }
    let mut refs: Vec<ObjectId> = node.refs().into_iter().cloned().collect();
    refs.sort();
    refs.dedup();
    Ok(refs)
}

/// What a refusal for missing objects says: the first few named, the rest counted.
pub(crate) fn missing_message(what: &str, missing: &[ObjectId]) -> String {
    let named: Vec<&str> = missing
        .iter()
        .take(MISSING_NAMED)
        .map(ObjectId::as_str)
        .collect();
    let more = missing.len().saturating_sub(MISSING_NAMED);
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    format!(
        "{what} refers to objects this pool does not store: {}{more}; upload them (PUT …/objects/{{id}}) and send the request again",
        named.join(", ")
    )
}

/// Whether a turn that ended with `history_len` messages, the last `last_message_id`, is part of
/// the history whose message IDs are `ids`: the message at `history_len - 1` is the same one (a
/// turn a rewind brought back by copying its messages counts as live again).
pub(crate) fn turn_live(
    history_len: u64,
    last_message_id: Option<&str>,
    ids: &[Option<String>],
) -> bool {
    match (history_len.checked_sub(1), last_message_id) {
        (None, _) => true,
        (Some(at), Some(last)) => usize::try_from(at)
            .ok()
            .and_then(|at| ids.get(at))
            .is_some_and(|id| id.as_deref() == Some(last)),
        (Some(_), None) => false,
    }
}

/// An ended turn, as a diff picks what to compare against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct EndedTurn {
    pub(crate) turn_seq: u64,
    pub(crate) history_len: u64,
    pub(crate) last_message_id: Option<String>,
    /// Whether it has a snapshot (kept, not dropped).
    pub(crate) has_snapshot: bool,
}

/// The turn a diff of `turn_seq` compares against: the nearest earlier turn with a snapshot whose
/// end is a prefix of turn `turn_seq`'s history (`ids`: that history's message IDs).
pub(crate) fn diff_base(turn_seq: u64, turns: &[EndedTurn], ids: &[Option<String>]) -> Option<u64> {
    turns
        .iter()
        .filter(|t| t.turn_seq < turn_seq && t.has_snapshot)
        .filter(|t| t.history_len as usize <= ids.len())
        .filter(|t| turn_live(t.history_len, t.last_message_id.as_deref(), ids))
        .map(|t| t.turn_seq)
        .max()
}

/// A fork's session key when none is given: `fork-` and the last 8 hex digits of its ID — the
/// random part of a UUID v7, so two forks made in one millisecond differ.
pub(crate) fn fork_session_key(id: ThreadId) -> String {
    let hex = id.as_uuid().simple().to_string();
    format!("fork-{}", &hex[hex.len() - 8..])
}

/// The turns a listing names when a turn is not one of them.
pub(crate) fn ended_turns_text(turns: &[u64]) -> String {
    match turns {
        [] => "it has ended no turn yet".to_string(),
        [one] => format!("the only turn it ended is {one}"),
        many if many.len() <= 20 => format!(
            "the turns it ended are {}",
            many.iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        many => format!(
            "it ended {} turns, {} to {}",
            many.len(),
            many[0],
            many[many.len() - 1]
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ninetrix_proto::snapshots::{FileEntry, build};

    fn ids(xs: &[&str]) -> Vec<Option<String>> {
        xs.iter().map(|x| Some(x.to_string())).collect()
    }

    #[test]
    fn an_object_is_its_hash_and_a_node_stays_inside_the_workspace() {
        let blob = b"hello".to_vec();
        let id = ObjectId::of(&blob);
        assert_eq!(check_object(&id, ObjectKind::Blob, &blob), Ok(vec![]));
        let other = ObjectId::of(b"other");
        let err = check_object(&other, ObjectKind::Blob, &blob).unwrap_err();
        assert!(
            err.contains(id.as_str()) && err.contains(other.as_str()),
            "{err}"
        );
        let file = |path: &str| FileEntry {
            path: path.into(),
            mode: 0o644,
            size: 5,
            blob: id.clone(),
        };
        let tree = build(vec![file("a.txt"), file("b/c.txt")]);
        let (root, bytes) = tree.nodes.last().unwrap();
        assert_eq!(
            check_object(root, ObjectKind::Node, bytes),
            Ok(vec![id.clone()]),
            "the blob once"
        );
        let evil = Node::Leaf(vec![file("../etc/passwd")]).encode();
        let err = check_object(&ObjectId::of(&evil), ObjectKind::Node, &evil).unwrap_err();
        assert!(err.contains("../etc/passwd"), "{err}");
        let junk = b"not json".to_vec();
        assert!(check_object(&ObjectId::of(&junk), ObjectKind::Node, &junk).is_err());
    }

    #[test]
    fn a_turn_is_live_while_its_last_message_is_where_it_was() {
        let h = ids(&["m1", "m2", "m3"]);
        assert!(turn_live(2, Some("m2"), &h));
        assert!(!turn_live(2, Some("x"), &h), "a rewind replaced it");
        assert!(!turn_live(4, Some("m4"), &h), "past the end");
        assert!(turn_live(0, None, &h));
    }

    #[test]
    fn a_diff_compares_against_the_nearest_earlier_turn_on_the_same_history_with_a_snapshot() {
        let t = |turn_seq, history_len, last: &str, has_snapshot| EndedTurn {
            turn_seq,
            history_len,
            last_message_id: Some(last.into()),
            has_snapshot,
        };
        let h = ids(&["m1", "m2", "m3", "m4", "m5", "m6"]);
        let turns = [
            t(1, 2, "m2", true),
            t(2, 4, "m4", false),
            t(3, 4, "x4", true),
            t(4, 6, "m6", true),
        ];
        // Turn 3 is on a branch a rewind left; turn 2 has no snapshot: turn 1.
        assert_eq!(diff_base(4, &turns, &h), Some(1));
        assert_eq!(diff_base(1, &turns, &h), None);
    }

    #[test]
    fn a_fork_key_is_unique_per_thread_and_a_valid_session_key() {
        let (a, b) = (ThreadId::new_v7(), ThreadId::new_v7());
        assert_ne!(fork_session_key(a), fork_session_key(b));
        assert!(ninetrix_proto::sessions::check_key(&fork_session_key(a)).is_ok());
        assert_eq!(fork_session_key(a).len(), "fork-".len() + 8);
    }

    #[test]
    fn missing_objects_are_named_up_to_a_few() {
        let many: Vec<ObjectId> = (0..8).map(|i: u8| ObjectId::of(&[i])).collect();
        let text = missing_message("node x", &many);
        assert!(text.contains(many[4].as_str()) && !text.contains(many[5].as_str()));
        assert!(text.contains("and 3 more"), "{text}");
        assert_eq!(ended_turns_text(&[]), "it has ended no turn yet");
        assert_eq!(ended_turns_text(&[1, 2]), "the turns it ended are 1, 2");
    }
}
