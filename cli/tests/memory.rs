//! `ninetrix memory ls|cat|rm`, the real binary against a real checkpoint API (in this process,
//! SQLite in a temp dir) named by `AGENTFILE_API_URL`: no Docker is needed, and none is started.

use ninetrix_client::MemoryOf;

mod support;

use support::{ADMIN, TestApi};

impl TestApi {
    /// Writes a memory file of pool `shop` as the admin.
    fn put(&self, agent: &str, session: Option<&str>, path: &str, content: &str) {
        let client = self.client(ADMIN);
        let memory = MemoryOf {
            pool: "shop".into(),
            agent: agent.into(),
            session: session.map(str::to_string),
        };
        self.runtime
            .block_on(client.put_memory_file(&memory, path, content))
            .unwrap();
    }

    /// Runs `ninetrix ARGS`: its exit code, stdout and stderr.
    fn run(&self, args: &[&str]) -> (i32, String, String) {
        let out = self.ninetrix().args(args).output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    }
}

#[test]
fn memories_are_listed_printed_and_removed() {
    let api = TestApi::start();
    api.put("bot", None, "/memories/notes.md", "remember the milk\n");
    api.put("bot", None, "/memories/d/a.md", "a");
    api.put("bot", Some("alice"), "/memories/prefs.md", "tea");
    api.put("other", None, "/memories/x.md", "x");

    let (code, out, err) = api.run(&["memory", "-p", "shop", "ls", "--agent", "bot"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("AGENT  SCOPE"), "{out}");
    assert_eq!(lines.len(), 4, "{out}");
    assert!(
        out.contains("/memories/notes.md") && out.contains("alice"),
        "{out}"
    );
    assert!(!out.contains("/memories/x.md"), "only bot's: {out}");

    let (code, out, _) = api.run(&["memory", "ls", "-p", "shop", "--session", "alice", "--json"]);
    assert_eq!(code, 0);
    let files: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(files.as_array().unwrap().len(), 1, "{out}");
    assert_eq!(files[0]["path"], "/memories/prefs.md");

    let (code, out, err) = api.run(&["memory", "-p", "shop", "cat", "notes.md", "--agent", "bot"]);
    assert_eq!((code, out.as_str()), (0, "remember the milk\n"), "{err}");
    let (code, out, _) = api.run(&[
        "memory",
        "-p",
        "shop",
        "cat",
        "/memories/prefs.md",
        "--agent",
        "bot",
        "--session",
        "alice",
    ]);
    assert_eq!((code, out.as_str()), (0, "tea"));
    let (code, _, err) = api.run(&["memory", "-p", "shop", "cat", "nope.md", "--agent", "bot"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("no memory file /memories/nope.md") && err.contains("ninetrix memory ls"),
        "{err}"
    );
    let (code, _, err) = api.run(&[
        "memory",
        "-p",
        "shop",
        "cat",
        "/etc/passwd",
        "--agent",
        "bot",
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("not under /memories"), "{err}");
    let (code, _, err) = api.run(&["memory", "-p", "shop", "cat", "notes.md"]);
    assert_eq!(code, 2, "clap names the missing --agent");
    assert!(err.contains("--agent"), "{err}");

    let (code, _, err) = api.run(&["memory", "-p", "shop", "rm", "d", "nope", "--agent", "bot"]);
    assert_eq!(code, 1, "one path was not there: {err}");
    assert!(err.contains("Deleted /memories/d (1 file)"), "{err}");
    assert!(err.contains("nothing at /memories/nope"), "{err}");
    let (_, out, _) = api.run(&["memory", "-p", "shop", "ls", "--agent", "bot"]);
    assert!(
        !out.contains("/memories/d/a.md") && out.contains("/memories/notes.md"),
        "{out}"
    );
}
