//! `ninetrix approvals`, `approve`, `deny`, `answer` and `approvals token`, the real binary
//! against a real checkpoint API (in this process, SQLite in a temp dir) named by
//! `AGENTFILE_API_URL`: no Docker is needed, and none is started.

use ninetrix_client::ApprovalQuery;
use ninetrix_proto::api::{ClaimRequest, CommitRequest, RunnerTokenRequest};
use ninetrix_proto::{ApprovalId, ThreadId};
use serde_json::json;

mod support;

use support::{ADMIN, TestApi};

impl TestApi {
    /// A thread of `support`/`writer-1` whose first commit stores one request per `(kind, tool,
    /// args)`; their IDs.
    fn waiting(&self, requests: &[(&str, &str, serde_json::Value)]) -> Vec<ApprovalId> {
        let admin = self.client(ADMIN);
        let thread = ThreadId::new_v7();
        let ids: Vec<ApprovalId> = requests.iter().map(|_| ApprovalId::new_v7()).collect();
        let approvals: Vec<serde_json::Value> = requests
            .iter()
            .zip(&ids)
            .enumerate()
            .map(|(i, ((kind, tool, args), id))| {
                json!({"id": id, "key": format!("k{i}"), "call_id": format!("call-{i}"), "turn_seq": 1,
                       "kind": kind, "tool": tool, "args": args, "args_hash": "ab12", "timeout_secs": 86_400})
            })
            .collect();
        let user = serde_json::to_value(ninetrix_proto::Message::text(
            ninetrix_proto::Role::User,
            "do it",
        ))
        .unwrap();
        self.runtime.block_on(async {
            let minted = admin
                .mint_runner_token(&RunnerTokenRequest {
                    thread_id: thread,
                    pool: Some("support".into()),
                    agent: Some("writer".into()),
                    replica: Some(1),
                })
                .await
                .unwrap();
            let runner = self.client(&minted.token);
            let epoch = runner
                .claim(thread, &ClaimRequest::default())
                .await
                .unwrap()
                .epoch;
            let commit: CommitRequest = serde_json::from_value(json!({
                "epoch": epoch,
                "parent_version": 0,
                "append": [user],
                "state": {"turn_seq": 1, "turn_start_history_len": 1, "status": "waiting", "inbox_cursor": 0},
                "approvals": approvals,
            }))
            .unwrap();
            runner.commit(thread, &commit).await.unwrap();
        });
        ids
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[test]
fn requests_are_listed_decided_once_and_refusals_say_what_stands() {
    let api = TestApi::start();
    let ids = api.waiting(&[
        (
            "approval",
            "file_write",
            json!({"path": "out.txt", "api_key": "***"}),
        ),
        (
            "question",
            "ask_human",
            json!({"question": "Which tier is this customer?"}),
        ),
        ("approval", "shell", json!({"command": "rm -rf /tmp/x"})),
    ]);
    let (write, question, shell) = (ids[0], ids[1], ids[2]);

    // Another pool has none: said on stderr, exit 0, nothing on stdout.
    api.ninetrix()
        .args(["approvals", "-p", "other"])
        .assert()
        .success()
        .stdout("")
        .stderr("no pending requests in pool other\n");

    let out = api
        .ninetrix()
        .args(["approvals", "-p", "support"])
        .assert()
        .success()
        .get_output()
        .clone();
    let table = text(&out.stdout);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 4, "{table}");
    assert!(
        lines[0].starts_with("ID") && lines[0].ends_with("AGE  EXPIRES"),
        "{table}"
    );
    assert!(
        lines[1].starts_with(&write.to_string())
            && lines[1].contains(
                "writer-1  approval  file_write  {\"api_key\":\"***\",\"path\":\"out.txt\"}"
            )
            && lines[1].ends_with("in 23h"),
        "{table}"
    );
    assert!(
        lines[2].contains("question  ask_human   Which tier is this customer?"),
        "{table}"
    );

    let out = api
        .ninetrix()
        .args(["-p", "support", "approvals", "--agent", "writer", "--json"])
        .assert()
        .success()
        .get_output()
        .clone();
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).expect("a JSON array");
    assert_eq!(listed.as_array().unwrap().len(), 3);
    assert_eq!(listed[1]["id"], json!(question));
    assert_eq!(listed[1]["kind"], "question");

    // A question is answered, not approved: the API's reason and the command that fits.
    let out = api
        .ninetrix()
        .args(["approve", &question.to_string()])
        .assert()
        .code(1)
        .get_output()
        .clone();
    let err = text(&out.stderr);
    assert!(
        err.contains("this request is a question")
            && err.contains(&format!("use `ninetrix answer {question} TEXT`")),
        "{err}"
    );

    api.ninetrix()
        .args(["approve", &write.to_string()])
        .assert()
        .success()
        .stdout(format!(
            "approved {write} (tool file_write, agent writer-1)\n"
        ));
    // Approving again is the same decision: nothing changes.
    api.ninetrix()
        .args(["approve", &write.to_string(), "--by", "someone-else"])
        .assert()
        .success();
    let out = api
        .ninetrix()
        .args(["deny", &write.to_string(), "--reason", "changed my mind"])
        .assert()
        .code(1)
        .get_output()
        .clone();
    assert_eq!(
        text(&out.stderr),
        format!("error: approval {write} was already approved by tester\n")
    );

    api.ninetrix()
        .args(["answer", &question.to_string(), "-"])
        .write_stdin("Gold\n")
        .assert()
        .success()
        .stdout(format!(
            "answered {question} (tool ask_human, agent writer-1)\n"
        ));
    let out = api
        .ninetrix()
        .args(["answer", &shell.to_string(), "yes"])
        .assert()
        .code(1)
        .get_output()
        .clone();
    assert!(
        text(&out.stderr).contains(&format!(
            "use `ninetrix approve {shell}` or `ninetrix deny {shell} --reason R`"
        )),
        "{}",
        text(&out.stderr)
    );
    api.ninetrix()
        .args([
            "deny",
            &shell.to_string(),
            "--reason",
            "too risky",
            "--by",
            "alice",
        ])
        .assert()
        .success()
        .stdout(format!("rejected {shell} (tool shell, agent writer-1)\n"));
    let out = api
        .ninetrix()
        .args(["approve", &shell.to_string()])
        .assert()
        .code(1)
        .get_output()
        .clone();
    assert_eq!(
        text(&out.stderr),
        format!("error: approval {shell} was already rejected by alice (too risky)\n")
    );

    let unknown = ApprovalId::new_v7();
    api.ninetrix()
        .args(["approve", &unknown.to_string()])
        .assert()
        .code(1)
        .stderr(format!(
            "error: no request {unknown} (list them with `ninetrix approvals`)\n"
        ));

    api.ninetrix()
        .args(["approvals", "-p", "support"])
        .assert()
        .success()
        .stdout("")
        .stderr("no pending requests in pool support\n");
    let out = api
        .ninetrix()
        .args(["approvals", "-p", "support", "--all"])
        .assert()
        .success()
        .get_output()
        .clone();
    let table = text(&out.stdout);
    assert!(table.lines().next().unwrap().ends_with("EXPIRES  STATUS"));
    for status in [
        "approved by tester",
        "answered by tester",
        "rejected by alice",
    ] {
        assert!(table.contains(status), "{status}:\n{table}");
    }
    // The answer was read from stdin without its line break.
    let stored = api
        .runtime
        .block_on(api.client(ADMIN).approval(question))
        .unwrap()
        .unwrap();
    assert_eq!(stored.answer.as_deref(), Some("Gold"));
    assert_eq!(stored.decided_by.as_deref(), Some("tester"));
}

#[test]
fn an_approver_token_is_printed_alone_and_works_for_its_pool() {
    let api = TestApi::start();
    api.waiting(&[("approval", "file_write", json!({"path": "a"}))]);
    let out = api
        .ninetrix()
        .args([
            "approvals",
            "token",
            "-p",
            "support",
            "--name",
            "bob",
            "--ttl",
            "2h",
        ])
        .assert()
        .success()
        .get_output()
        .clone();
    let stdout = text(&out.stdout);
    let token = stdout.strip_suffix('\n').unwrap();
    assert!(
        !token.is_empty() && !token.contains(char::is_whitespace),
        "{stdout:?}"
    );
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with("approver token for bob in pool support, valid for 2h: expires ")
            && stderr.trim_end().ends_with('Z'),
        "{stderr}"
    );
    let listed = api
        .runtime
        .block_on(api.client(token).list_approvals(&ApprovalQuery::default()))
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].labels.pool.as_deref(), Some("support"));
    // The same through the CLI: the approver lists its pool and decides, recorded by its name.
    let id = listed[0].id.to_string();
    let as_approver = |args: &[&str]| {
        let mut cmd = api.ninetrix();
        cmd.env_remove("AGENTFILE_ADMIN_TOKEN")
            .env("AGENTFILE_APPROVER_TOKEN", token)
            .args(args);
        cmd
    };
    as_approver(&["approvals", "-p", "support", "--json"])
        .assert()
        .success()
        .stdout(predicates::str::contains(id.as_str()));
    as_approver(&["approve", &id, "--reason", "looks right"])
        .assert()
        .success()
        .stdout(format!("approved {id} (tool file_write, agent writer-1)\n"));
    let decided = api
        .runtime
        .block_on(api.client(ADMIN).approval(listed[0].id))
        .unwrap()
        .unwrap();
    assert_eq!(decided.decided_by.as_deref(), Some("bob"), "not $USER");
    // Another name is refused, and so is another pool.
    as_approver(&["deny", &id, "--reason", "x", "--by", "mallory"])
        .assert()
        .code(1);
    as_approver(&["approvals", "-p", "elsewhere"])
        .assert()
        .code(1)
        .stderr(predicates::str::contains("AGENTFILE_APPROVER_TOKEN"));
}

#[test]
fn without_an_api_the_error_says_what_to_do() {
    let api = TestApi::start();
    let id = ApprovalId::new_v7().to_string();
    let out = api
        .ninetrix()
        .env("AGENTFILE_API_URL", "http://127.0.0.1:1")
        .args(["approve", &id])
        .assert()
        .code(1)
        .get_output()
        .clone();
    let err = text(&out.stderr);
    assert!(
        err.contains("is not reachable") && err.contains("`ninetrix up`"),
        "{err}"
    );
    let out = api
        .ninetrix()
        .env("AGENTFILE_ADMIN_TOKEN", "not-the-admin-token-at-all")
        .args(["approvals", "-p", "support"])
        .assert()
        .code(1)
        .get_output()
        .clone();
    let err = text(&out.stderr);
    assert!(
        err.contains("refused the admin token") && err.contains("AGENTFILE_ADMIN_TOKEN"),
        "{err}"
    );
}
