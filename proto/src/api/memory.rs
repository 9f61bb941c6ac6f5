//! An agent's memory (`/v1/runners/threads/{id}/memory`, `/v1/memories`): files under
//! `/memories` that outlive a conversation, kept per (pool, agent, scope) — `agent` scope shared
//! by every session and replica of the agent, `session` scope by one session — with the command
//! set of Anthropic's memory tool, the limits, and the one rule for what a memory path may be.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::int;
#[cfg(feature = "openapi")]
use utoipa::ToSchema;

/// The directory every memory path is under.
pub const MEMORY_ROOT: &str = "/memories";
/// Most bytes one memory file holds (100 KiB).
pub const MAX_MEMORY_FILE_BYTES: u64 = 100 * 1024;
/// Most bytes of all the files of one memory — one (pool, agent, scope, session) — (1 MiB).
pub const MAX_MEMORY_BYTES: u64 = 1024 * 1024;
/// Most files one memory holds.
pub const MAX_MEMORY_FILES: u64 = 1000;
/// Most characters of a memory path.
pub const MAX_MEMORY_PATH_CHARS: usize = 512;
/// Most characters of one name (a segment between slashes) of a memory path.
pub const MAX_MEMORY_NAME_CHARS: usize = 255;
/// Most characters of an op key (a ledger key is 64 hex digits).
pub const MAX_OP_KEY_CHARS: usize = 64;

/// [`memory_path`]'s rule as a JSON Schema pattern, for a path below `/memories` (a file or a
/// directory under it, not `/memories` itself): names of 1 to 255 characters other than `/` and
/// the characters of [`crate::text::is_unsafe_char`], none of them `.` or `..`; one trailing
/// slash allowed. (At most [`MAX_MEMORY_PATH_CHARS`] in all is the schema's `maxLength`.)
pub const MEMORY_FILE_PATH_PATTERN: &str = concat!(
    "^/memories(?:/(?:",
    "[^./\\u0000-\\u001F\\u007F-\\u009F\\u061C\\u200E\\u200F\\u2028-\\u202E\\u2066-\\u2069]",
    "[^/\\u0000-\\u001F\\u007F-\\u009F\\u061C\\u200E\\u200F\\u2028-\\u202E\\u2066-\\u2069]{0,254}",
    "|\\.[^./\\u0000-\\u001F\\u007F-\\u009F\\u061C\\u200E\\u200F\\u2028-\\u202E\\u2066-\\u2069]",
    "[^/\\u0000-\\u001F\\u007F-\\u009F\\u061C\\u200E\\u200F\\u2028-\\u202E\\u2066-\\u2069]{0,253}",
    "|\\.\\.[^/\\u0000-\\u001F\\u007F-\\u009F\\u061C\\u200E\\u200F\\u2028-\\u202E\\u2066-\\u2069]{1,253}",
    "))+/?$"
);

/// A memory file's path in a query (its schema only): [`MEMORY_FILE_PATH_PATTERN`], at most
/// [`MAX_MEMORY_PATH_CHARS`] characters.
#[cfg(feature = "openapi")]
pub struct MemoryFilePath;

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for MemoryFilePath {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .min_length(Some(11))
            .max_length(Some(MAX_MEMORY_PATH_CHARS))
            .pattern(Some(MEMORY_FILE_PATH_PATTERN))
            .into()
    }
}

#[cfg(feature = "openapi")]
impl ToSchema for MemoryFilePath {}

/// Whether `key` can be an op key: 1 to [`MAX_OP_KEY_CHARS`] characters, no control character
/// and no `:` (as a ledger key); the message says what is wrong.
pub fn check_op_key(key: &str) -> Result<(), String> {
    let n = key.chars().count();
    if n == 0 || n > MAX_OP_KEY_CHARS {
        return Err(format!(
            "`op_key` must have 1 to {MAX_OP_KEY_CHARS} characters (it has {n}): the call's ledger key"
        ));
    }
    if key.chars().any(|c| c.is_control() || c == ':') {
        return Err("`op_key` must not hold control characters or `:`".into());
    }
    Ok(())
}

/// Whose memory: the agent's (shared by every session and replica) or one session's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum MemoryScope {
    /// Shared by every session and replica of the agent.
    #[default]
    Agent,
    /// One session's own (a thread that is not a session's: that thread's own).
    Session,
}

impl MemoryScope {
    /// The name used in the API, the agentfile and storage.
    pub fn as_str(self) -> &'static str {
        match self {
            MemoryScope::Agent => "agent",
            MemoryScope::Session => "session",
        }
    }

    /// The scope of a name, if it is one.
    pub fn parse(name: &str) -> Option<MemoryScope> {
        match name {
            "agent" => Some(MemoryScope::Agent),
            "session" => Some(MemoryScope::Session),
            _ => None,
        }
    }
}

/// One command of the memory tool, as the model sends it (Anthropic's memory tool's commands and
/// arguments). Paths start with `/memories`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(tag = "command", rename_all = "snake_case", deny_unknown_fields)]
pub enum MemoryCommand {
    /// A directory: the files under it (two levels deep) with their sizes; a file: its lines,
    /// numbered, optionally only `view_range` (`[first, last]`, 1-based, `last` -1 for the end).
    View {
        /// The file or directory.
        path: String,
        /// `[first, last]` line, 1-based; `last` -1 reads to the end.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(
            feature = "openapi",
            schema(value_type = Option<Vec<i64>>, min_items = 2, max_items = 2)
        )]
        view_range: Option<[i64; 2]>,
    },
    /// Creates the file, or overwrites it.
    Create {
        /// The file.
        path: String,
        /// Its whole content.
        file_text: String,
    },
    /// Replaces the one occurrence of `old_str` in the file with `new_str`.
    StrReplace {
        /// The file.
        path: String,
        /// The text to replace: it must occur exactly once.
        old_str: String,
        /// What replaces it.
        #[serde(default)]
        new_str: String,
    },
    /// Inserts text after line `insert_line` (0: at the top).
    Insert {
        /// The file.
        path: String,
        /// The line after which the text goes (0 to the number of lines).
        #[serde(deserialize_with = "int::stored")]
        #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
        insert_line: u64,
        /// The text.
        insert_text: String,
    },
    /// Deletes a file, or a directory with everything under it.
    Delete {
        /// The file or directory.
        path: String,
    },
    /// Renames (moves) a file or directory.
    Rename {
        /// What to rename.
        old_path: String,
        /// Its new path, which must not exist.
        new_path: String,
    },
}

impl MemoryCommand {
    /// The command's name, as the model gives it.
    pub fn name(&self) -> &'static str {
        match self {
            MemoryCommand::View { .. } => "view",
            MemoryCommand::Create { .. } => "create",
            MemoryCommand::StrReplace { .. } => "str_replace",
            MemoryCommand::Insert { .. } => "insert",
            MemoryCommand::Delete { .. } => "delete",
            MemoryCommand::Rename { .. } => "rename",
        }
    }

    /// Whether it changes nothing (`view`).
    pub fn reads_only(&self) -> bool {
        matches!(self, MemoryCommand::View { .. })
    }
}

/// `POST /v1/runners/threads/{id}/memory`: one memory command of a runner's `memory` call. The
/// memory is the thread's agent's (or session's): the pool, agent and session are the thread's
/// own labels, never the request's.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct MemoryOpRequest {
    /// The caller's epoch (from its claim): a command from a fenced runner changes nothing
    /// (409 `fenced`).
    #[serde(deserialize_with = "int::any")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
    pub epoch: u64,
    /// Whose memory: the agent's or the session's.
    #[serde(default)]
    pub scope: MemoryScope,
    /// The call's ledger key: 1 to 64 characters, no control characters or `:`. A command that
    /// changes the memory is applied once per key: the same key again answers the first result
    /// without applying it again.
    #[cfg_attr(
        feature = "openapi",
        schema(
            min_length = 1,
            max_length = 64,
            pattern = "^[^:\\u0000-\\u001F\\u007F-\\u009F]+$"
        )
    )]
    pub op_key: String,
    /// The command.
    pub op: MemoryCommand,
}

/// What a memory command answered: the text the model sees.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct MemoryOpResult {
    /// The result text (Anthropic's memory tool's wording).
    pub content: String,
    /// Whether the command failed (nothing was changed).
    pub is_error: bool,
    /// Whether this is the answer recorded for the same `op_key` before (nothing was applied now).
    pub replayed: bool,
}

/// One memory file, without its content.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct MemoryFile {
    /// The pool.
    pub pool: String,
    /// The agent.
    pub agent: String,
    /// Whose memory.
    pub scope: MemoryScope,
    /// For `session` scope: the session key (or, for a thread that is not a session's, the
    /// thread's ID); none for `agent` scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// The path, under `/memories`.
    pub path: String,
    /// Its size in bytes.
    pub size: u64,
    /// When it was last written.
    pub updated_at: DateTime<Utc>,
}

/// `GET /v1/memories/file`: one memory file with its content.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct MemoryFileContent {
    /// The file.
    pub file: MemoryFile,
    /// Its content.
    pub content: String,
}

/// `PUT /v1/memories/file`: the file's new content (it is created or overwritten).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct MemoryWrite {
    /// The whole content: at most 100 KiB.
    pub content: String,
}

/// What a deletion of memories removed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct MemoriesDeleted {
    /// How many files.
    pub files: u64,
}

/// Why a memory path is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct MemoryPathError(pub String);

/// The canonical form of a memory path: `/memories` or `/memories/<name>/…`, without a trailing
/// slash; or why not (the message names the path and says what a path must be). Empty names
/// (`//`), `.` and `..`, control characters and names or paths that are too long are refused;
/// one trailing slash is dropped.
pub fn memory_path(raw: &str) -> Result<String, MemoryPathError> {
    let refuse = |why: &str| {
        MemoryPathError(format!(
            "Error: the path {raw:?} {why}; memory paths are /memories or /memories/NAME/… \
             (no `.` or `..`, no empty names)"
        ))
    };
    if let Some(c) = crate::text::first_unsafe(raw) {
        return Err(refuse(&format!(
            "has the character U+{:04X}, which a memory path may not hold",
            u32::from(c)
        )));
    }
    let n = raw.chars().count();
    if n > MAX_MEMORY_PATH_CHARS {
        return Err(refuse(&format!(
            "is {n} characters long (at most {MAX_MEMORY_PATH_CHARS})"
        )));
    }
    let trimmed = match raw.strip_suffix('/') {
        Some("") | None => raw,
        Some(t) => t,
    };
    let Some(rest) = trimmed.strip_prefix(MEMORY_ROOT) else {
        return Err(refuse("is not under /memories"));
    };
    if rest.is_empty() {
        return Ok(MEMORY_ROOT.to_string());
    }
    let Some(rest) = rest.strip_prefix('/') else {
        return Err(refuse("is not under /memories"));
    };
    for name in rest.split('/') {
        match name {
            "" => return Err(refuse("has an empty name (`//`)")),
            "." | ".." => return Err(refuse("has `.` or `..` in it")),
            n if n.chars().count() > MAX_MEMORY_NAME_CHARS => {
                return Err(refuse(&format!(
                    "has a name of {} characters (at most {MAX_MEMORY_NAME_CHARS})",
                    n.chars().count()
                )));
            }
            _ => {}
        }
    }
    Ok(trimmed.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_made_canonical_or_refused_with_the_reason() {
        assert_eq!(memory_path("/memories").unwrap(), "/memories");
        assert_eq!(memory_path("/memories/").unwrap(), "/memories");
        assert_eq!(
            memory_path("/memories/a/b.md/").unwrap(),
            "/memories/a/b.md"
        );
        for (bad, why) in [
            ("/etc/passwd", "not under /memories"),
            ("memories/a", "not under /memories"),
            ("/memoriesx/a", "not under /memories"),
            ("/", "not under /memories"),
            ("", "not under /memories"),
            ("/memories/../etc", "`..`"),
            ("/memories/./a", "`..`"),
            ("/memories//a", "empty name"),
            ("/memories/a\0b", "U+0000"),
            ("/memories/a\nb", "U+000A"),
        ] {
            let e = memory_path(bad).unwrap_err().0;
            assert!(e.contains(why), "{bad:?}: {e}");
            assert!(e.contains(&format!("{bad:?}")), "names the path: {e}");
        }
        let long = format!("/memories/{}", "é".repeat(256));
        assert!(memory_path(&long).unwrap_err().0.contains("256 characters"));
        assert!(memory_path(&format!("/memories/{}", "é".repeat(255))).is_ok());
        let deep = format!("/memories/{}", ["abcdefgh"; 60].join("/"));
        assert!(
            memory_path(&deep)
                .unwrap_err()
                .0
                .contains("characters long")
        );
        assert!(
            memory_path("/memories//").is_err(),
            "one trailing slash only"
        );
        assert_eq!(check_op_key(&"a".repeat(64)), Ok(()));
        assert!(check_op_key(&"a".repeat(65)).is_err());
        assert!(check_op_key("a:b").is_err() && check_op_key("").is_err());
    }

    #[test]
    fn commands_read_as_the_model_sends_them() {
        let c: MemoryCommand = serde_json::from_value(serde_json::json!(
            {"command": "insert", "path": "/memories/a", "insert_line": 2.0, "insert_text": "x"}
        ))
        .unwrap();
        assert_eq!(
            c,
            MemoryCommand::Insert {
                path: "/memories/a".into(),
                insert_line: 2,
                insert_text: "x".into()
            }
        );
        let e = serde_json::from_value::<MemoryCommand>(serde_json::json!(
            {"command": "create", "path": "/memories/a"}
        ))
        .unwrap_err();
        assert!(e.to_string().contains("file_text"), "{e}");
        let e = serde_json::from_value::<MemoryCommand>(serde_json::json!(
            {"command": "view", "path": "/memories", "mode": "x"}
        ))
        .unwrap_err();
        assert!(e.to_string().contains("mode"), "{e}");
        assert_eq!(MemoryScope::parse("session"), Some(MemoryScope::Session));
        assert_eq!(MemoryScope::default().as_str(), "agent");
    }
}
