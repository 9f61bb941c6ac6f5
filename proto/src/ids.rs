//! ID newtypes: thread and message IDs are UUID v7 (time-ordered), and never mixed up with each
//! other or with arbitrary strings.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The error for a string that is not a valid ID.
#[derive(Debug, thiserror::Error)]
#[error(
    "`{input}` is not a valid {kind} (expected a UUID such as 01936f5e-7c1a-7d3e-9f4b-2a6c8e0d1f35)"
)]
pub struct ParseIdError {
    kind: &'static str,
    input: String,
}

macro_rules! uuid_id {
    ($(#[$doc:meta])* $name:ident, $kind:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(Uuid);

        impl $name {
            /// A new, time-ordered (UUID v7) ID.
            pub fn new_v7() -> Self {
                Self(Uuid::now_v7())
            }

            /// The underlying UUID.
            pub fn as_uuid(&self) -> &Uuid {
                &self.0
            }
        }

        impl From<Uuid> for $name {
            fn from(uuid: Uuid) -> Self {
                Self(uuid)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }

        impl FromStr for $name {
            type Err = ParseIdError;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Uuid::parse_str(s).map(Self).map_err(|_| ParseIdError {
                    kind: $kind,
                    input: s.chars().take(80).collect(),
                })
            }
        }
    };
}

uuid_id!(
    /// The stable identity of one agent replica's conversation. Created once per
    /// (pool, agent, replica) and reused across every restart and recreate.
    ThreadId,
    "thread ID"
);

uuid_id!(
    /// The identity of one message in a thread's history.
    MessageId,
    "message ID"
);

uuid_id!(
    /// The identity of one request to a person: an approval of a gated call, or an `ask_human`
    /// question. UUID v7, chosen by the runner when it stores the request.
    ApprovalId,
    "approval ID"
);

uuid_id!(
    /// The identity of one model-call lease (a permit of a pool-wide limiter). UUID v7, chosen
    /// by the API when it grants the lease.
    LeaseId,
    "lease ID"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_ids_round_trip_through_text_and_json() {
        let id = ThreadId::new_v7();
        assert_eq!(id.as_uuid().get_version_num(), 7);
        let parsed: ThreadId = id.to_string().parse().unwrap();
        assert_eq!(parsed, id);
        let json = serde_json::to_string(&id).unwrap();
        assert_eq!(json, format!("\"{id}\""));
        assert_eq!(serde_json::from_str::<ThreadId>(&json).unwrap(), id);
    }

    #[test]
    fn a_bad_id_names_the_input_and_the_kind() {
        let err = "researcher-1".parse::<ThreadId>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "`researcher-1` is not a valid thread ID (expected a UUID such as \
             01936f5e-7c1a-7d3e-9f4b-2a6c8e0d1f35)"
        );
    }

    #[test]
    fn v7_ids_sort_by_creation_time() {
        let a = MessageId::new_v7();
        let b = MessageId::new_v7();
        assert!(a < b);
    }
}
