//! The `memory` tool as the model sees it: its definition (Anthropic's memory tool's commands and
//! arguments), reading a call's arguments into a [`MemoryCommand`], and the answer the model gets.
//! The command itself runs in the checkpoint API (the driver sends it with the call's ledger key,
//! so a call repeated after a crash is applied once); nothing here does I/O.

use ninetrix_proto::api::{MemoryCommand, MemoryOpResult};
use serde_json::{Value, json};

use super::ToolOutput;

/// What the model is told the tool does.
pub(crate) const DESCRIPTION: &str = "Your memory: files under /memories that outlive this conversation (kept for you between conversations and restarts). At the start of a task, view /memories to see what you learned before; record what you learn as you work, keeping files up to date, coherent and organised (rename or delete what is no longer relevant). Commands: view (a directory's files with sizes, or a file's numbered lines; view_range [first, last], last -1 for the end), create (create or overwrite a file), str_replace (old_str must occur exactly once), insert (insert_text after line insert_line; 0 is the top), delete (a file or a directory), rename (old_path to new_path). Paths start with /memories. A file holds at most 100 KiB; the memory at most 1 MiB and 1,000 files.";

/// The tool's parameters (JSON Schema).
pub(crate) fn parameters() -> Value {
    json!({"type": "object", "properties": {
        "command": {"type": "string", "enum": ["view", "create", "str_replace", "insert", "delete", "rename"]},
        "path": {"type": "string", "description": "A path under /memories (view, create, str_replace, insert, delete)"},
        "view_range": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2, "description": "view: [first, last] line, 1-based; last -1 reads to the end"},
        "file_text": {"type": "string", "description": "create: the file's whole content"},
        "old_str": {"type": "string", "description": "str_replace: the text to replace; it must occur exactly once"},
        "new_str": {"type": "string", "description": "str_replace: what replaces it"},
        "insert_line": {"type": "integer", "minimum": 0, "description": "insert: the line after which the text goes (0: at the top)"},
        "insert_text": {"type": "string", "description": "insert: the text"},
        "old_path": {"type": "string", "description": "rename: what to rename"},
        "new_path": {"type": "string", "description": "rename: its new path"}
    }, "required": ["command"]})
}

/// The command of a call's arguments, or the error result that says what is wrong with them.
/// Arguments given as `null` (some models send every parameter) count as left out.
pub(crate) fn command(args: &Value) -> Result<MemoryCommand, ToolOutput> {
    if args.get("_raw").is_some() {
        return Err(ToolOutput::error(
            "the arguments were not valid JSON; call the tool again with a JSON object",
        ));
    }
    let Some(fields) = args.as_object() else {
        return Err(ToolOutput::error(
            "the arguments must be a JSON object with `command` and its parameters",
        ));
    };
    let given: serde_json::Map<String, Value> = fields
        .iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    serde_json::from_value(Value::Object(given)).map_err(|e| {
        ToolOutput::error(format!(
            "Error: invalid memory command: {e}. Give `command` (view, create, str_replace, insert, delete or rename) and its parameters"
        ))
    })
}

/// What the model sees of the API's answer.
pub(crate) fn answer(result: MemoryOpResult) -> ToolOutput {
    ToolOutput {
        content: result.content,
        is_error: result.is_error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_become_a_command_or_an_error_the_model_can_act_on() {
        let c = command(
            &json!({"command": "view", "path": "/memories", "view_range": null, "file_text": null}),
        )
        .unwrap();
        assert_eq!(
            c,
            MemoryCommand::View {
                path: "/memories".into(),
                view_range: None
            }
        );
        let e = command(&json!({"command": "create", "path": "/memories/a"})).unwrap_err();
        assert!(
            e.is_error && e.content.contains("file_text"),
            "{}",
            e.content
        );
        let e = command(&json!({"command": "forget", "path": "/memories/a"})).unwrap_err();
        assert!(e.content.contains("forget"), "{}", e.content);
        let e = command(&json!({"_raw": "{no"})).unwrap_err();
        assert!(e.content.contains("not valid JSON"));
        let e = command(&json!("view")).unwrap_err();
        assert!(e.content.contains("JSON object"));
    }

    #[test]
    fn the_definition_names_every_command_the_api_takes() {
        let p = parameters();
        let names: Vec<&str> = p["properties"]["command"]["enum"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        for (name, args) in [
            ("view", json!({"path": "/memories"})),
            ("create", json!({"path": "/memories/a", "file_text": ""})),
            (
                "str_replace",
                json!({"path": "/memories/a", "old_str": "x", "new_str": "y"}),
            ),
            (
                "insert",
                json!({"path": "/memories/a", "insert_line": 0, "insert_text": "x"}),
            ),
            ("delete", json!({"path": "/memories/a"})),
            (
                "rename",
                json!({"old_path": "/memories/a", "new_path": "/memories/b"}),
            ),
        ] {
            assert!(names.contains(&name), "{name}");
            let mut args = args;
            args["command"] = json!(name);
            assert_eq!(command(&args).unwrap().name(), name);
        }
        assert_eq!(names.len(), 6);
    }
}
