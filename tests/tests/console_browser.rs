//! The web console in a real headless Chromium (Debian's package), driven over the DevTools
//! protocol: signed in with the admin token (kept in an HttpOnly cookie the page cannot read), it
//! draws the crash lineage of a thread whose runner was really killed mid-turn — after its write's
//! outcome was stored: restarted at epoch 2, the turn resumed, the write shown executed once —
//! and decides a real pending
//! approval from the page, after which the agent's turn finishes. The waiting turn's page offers
//! a Cancel button; a thread between turns has none. No console errors, and the
//! token never appears in the page.
//!
//! Without Chromium the test says `SKIPPED: needs Chromium (…)` and passes; with
//! `NINETRIX_REQUIRE_CHROMIUM=1` (CI) a missing browser fails it.

mod support;

use std::io::{BufRead as _, Write as _};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use ninetrix_client::{ApprovalQuery, Client, Token};
use ninetrix_e2e::{ApiProcess, ninetrix_bin};
use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{ApprovalStatus, EnqueueRequest, RunnerTokenRequest};
use serde_json::{Value, json};
use support::{Gate, Hold, appender_spec};

const ADMIN: &str = "console-test-admin-token-5150";

/// The Chromium binary, or `None` when the test is skipped for want of one (a failure with
/// `NINETRIX_REQUIRE_CHROMIUM=1`).
fn chromium() -> Option<String> {
    ninetrix_testkit::require(ninetrix_testkit::Need::Chromium)
}

/// A headless Chromium spoken to over `--remote-debugging-pipe` (the DevTools protocol as
/// NUL-separated JSON on file descriptors 3 and 4), one page attached in flat mode.
struct Browser {
    child: Child,
    input: ChildStdin,
    from: mpsc::Receiver<Value>,
    next_id: u64,
    session: String,
    /// Every event seen, for the console-error check.
    events: Vec<Value>,
    _profile: tempfile::TempDir,
}

impl Browser {
    fn launch(binary: &str) -> Browser {
        let profile = tempfile::tempdir().unwrap();
        // fd 3 reads what we write to its stdin, fd 4 writes to its stdout; Chromium's own
        // output goes nowhere.
        let script = format!(
            "exec '{binary}' --headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage \
             --no-first-run --remote-debugging-pipe --user-data-dir='{}' about:blank \
             3<&0 4>&1 1>/dev/null 2>/dev/null 0</dev/null",
            profile.path().display()
        );
        let mut child = Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("chromium starts");
        let input = child.stdin.take().unwrap();
        let mut output = std::io::BufReader::new(child.stdout.take().unwrap());
        let (tx, from) = mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            while output.read_until(0, &mut buf).is_ok_and(|n| n > 0) {
                buf.pop();
                if let Ok(v) = serde_json::from_slice::<Value>(&buf)
                    && tx.send(v).is_err()
                {
                    break;
                }
                buf.clear();
            }
        });
        let mut b = Browser {
            child,
            input,
            from,
            next_id: 0,
            session: String::new(),
            events: Vec::new(),
            _profile: profile,
        };
        let target = b.call(None, "Target.createTarget", json!({"url": "about:blank"}));
        let target = target["targetId"].as_str().unwrap().to_string();
        let attached = b.call(
            None,
            "Target.attachToTarget",
            json!({"targetId": target, "flatten": true}),
        );
        b.session = attached["sessionId"].as_str().unwrap().to_string();
        for domain in ["Runtime.enable", "Log.enable", "Page.enable"] {
            b.page(domain, json!({}));
        }
        b
    }

    /// Sends a command (to the page's session, or the browser) and waits for its result.
    fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = s.into();
        }
        let mut bytes = serde_json::to_vec(&msg).unwrap();
        bytes.push(0);
        self.input.write_all(&bytes).unwrap();
        self.input.flush().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let v = self
                .from
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no answer to {method} within 30 s"));
            if v["id"].as_u64() == Some(id) {
                assert!(v.get("error").is_none(), "{method}: {v}");
                return v["result"].clone();
            }
            self.events.push(v);
        }
    }

    fn page(&mut self, method: &str, params: Value) -> Value {
        let session = self.session.clone();
        self.call(Some(&session), method, params)
    }

    /// Evaluates `expression` in the page; its value.
    fn eval(&mut self, expression: &str) -> Value {
        let r = self.page(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
        );
        assert!(
            r.get("exceptionDetails").is_none(),
            "{expression} threw: {r}"
        );
        r["result"]["value"].clone()
    }

    /// Polls `expression` until it is truthy, up to `limit`.
    fn wait(&mut self, what: &str, expression: &str, limit: Duration) -> Value {
        let deadline = Instant::now() + limit;
        loop {
            let v = self.eval(expression);
            if !(v.is_null() || v == json!(false) || v == json!("")) {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "the page did not show {what} within {limit:?}; it shows: {}",
                self.eval("document.body.innerText")
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The errors the page reported: exceptions, `console.error`, and failed loads.
    fn errors(&mut self) -> Vec<Value> {
        while let Ok(v) = self.from.try_recv() {
            self.events.push(v);
        }
        self.events
            .iter()
            .filter(|e| {
                let m = e["method"].as_str().unwrap_or("");
                m == "Runtime.exceptionThrown"
                    || (m == "Runtime.consoleAPICalled" && e["params"]["type"] == "error")
                    || (m == "Log.entryAdded" && e["params"]["entry"]["level"] == "error")
            })
            .cloned()
            .collect()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A runner of `spec` on `thread` against `api` with its own runner token.
fn runner(api: &str, token: &str, thread: ThreadId, spec: &Value, dir: &std::path::Path) -> Child {
    let workspace = dir.join(format!("ws-{thread}"));
    std::fs::create_dir_all(&workspace).unwrap();
    Command::new(ninetrix_bin())
        .arg("runner")
        .env("AGENTFILE_API_URL", api)
        .env("AGENTFILE_RUNNER_TOKEN", token)
        .env("AGENTFILE_THREAD_ID", thread.to_string())
        .env("AGENTFILE_AGENT_SPEC", spec.to_string())
        .env("AGENTFILE_WORKSPACE", &workspace)
        .env(
            "AGENTFILE_HEALTH_FILE",
            dir.join(format!("health-{thread}")),
        )
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(if std::env::var_os("NINETRIX_RUNNER_STDERR").is_some() {
            Stdio::inherit()
        } else {
            Stdio::null()
        })
        .spawn()
        .expect("ninetrix runner starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_tells_a_crash_story_and_decides_an_approval() {
    let Some(binary) = chromium() else { return };
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    let admin_file = dir.path().join("admin");
    std::fs::write(&secret, "console-test-secret-0123456789abcdef").unwrap();
    std::fs::write(&admin_file, ADMIN).unwrap();
    let db = format!("sqlite://{}", dir.path().join("api.db").display());
    let api = ApiProcess::start(&[
        "--database",
        &db,
        "--secret-file",
        secret.to_str().unwrap(),
        "--admin-token-file",
        admin_file.to_str().unwrap(),
    ]);
    let admin = Client::new(
        ninetrix_client::http_client(),
        &api.url,
        Some(Token::new(ADMIN)),
    );
    let mint = |thread: ThreadId, agent: &str| {
        let admin = admin.clone();
        let request = RunnerTokenRequest {
            thread_id: thread,
            pool: Some("demo".into()),
            agent: Some(agent.into()),
            replica: Some(1),
        };
        async move { admin.mint_runner_token(&request).await.unwrap().token }
    };

    // A thread whose runner is killed mid-turn: its write's outcome is stored, the answer held.
    let crashed = ThreadId::new_v7();
    let token = mint(crashed, "appender").await;
    let gate = Gate::start(&api.url).await;
    let held = gate.arm(Hold {
        method: "POST",
        path_contains: "/commit",
        body_contains: vec!["\"outcomes\":[{"],
        forward_first: true,
        lose_answer: false,
    });
    let mut first = runner(&gate.url, &token, crashed, &appender_spec(), dir.path());
    admin
        .enqueue(
            crashed,
            &EnqueueRequest {
                content: "write it down".into(),
                dedupe_key: Some("m1".into()),
                control: None,
                mode: None,
            },
        )
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(30), held)
        .await
        .expect("the runner stored the write's outcome");
    first.kill().unwrap();
    first.wait().unwrap();
    // It comes back (as Docker's restart would), resumes the turn and replays the write.
    let mut second = runner(&api.url, &token, crashed, &appender_spec(), dir.path());

    // A thread whose write waits for a person.
    let gated = ThreadId::new_v7();
    let mut spec = appender_spec();
    spec["name"] = "clerk".into();
    spec["governance"]["human_approval"] =
        json!({"enabled": true, "actions": [], "effects": ["write"], "timeout_secs": 3600});
    let gated_token = mint(gated, "clerk").await;
    let mut third = runner(&api.url, &gated_token, gated, &spec, dir.path());
    admin
        .enqueue(
            gated,
            &EnqueueRequest {
                content: "file the report".into(),
                dedupe_key: Some("g1".into()),
                control: None,
                mode: None,
            },
        )
        .await
        .unwrap();
    let approval = {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let pending = admin
                .list_approvals(&ApprovalQuery {
                    thread: Some(gated),
                    status: Some(ApprovalStatus::Pending),
                    ..ApprovalQuery::default()
                })
                .await
                .unwrap();
            if let Some(a) = pending.into_iter().next() {
                break a;
            }
            assert!(
                Instant::now() < deadline,
                "no request to a person within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };

    let url = api.url.clone();
    let approval_id = approval.id.to_string();
    let crashed_id = crashed.to_string();
    let gated_id = gated.to_string();
    // The browser is synchronous (a pipe and a thread); it runs beside the runtime.
    let (page_text, executed) = tokio::task::spawn_blocking(move || {
        let mut b = Browser::launch(&binary);
        b.page("Page.navigate", json!({"url": format!("{url}/console")}));
        b.wait(
            "the sign-in form",
            "!!document.getElementById('signin') && !document.getElementById('signin').hidden",
            Duration::from_secs(20),
        );
        b.eval(&format!(
            "document.getElementById('token').value = '{ADMIN}'; \
             document.getElementById('signin').requestSubmit(); true"
        ));
        // Signed in, the admin lands on the pools: two agents of pool demo.
        b.wait(
            "the pool's agents",
            "!!document.querySelector('[data-pool=\"demo\"] [data-agent=\"appender\"]') && \
             !!document.querySelector('[data-pool=\"demo\"] [data-agent=\"clerk\"]')",
            Duration::from_secs(20),
        );
        b.eval("location.hash = '#/threads'; true");
        b.wait(
            "the threads list",
            &format!("!!document.querySelector('[data-thread=\"{crashed_id}\"]')"),
            Duration::from_secs(20),
        );
        // Its model context: the last round's input (the scripted model has no window).
        let context = b.eval(&format!(
            "document.querySelector('[data-thread=\"{crashed_id}\"] .context').textContent"
        ));
        assert!(
            context.as_str().is_some_and(|c| c.ends_with(" tokens")),
            "the context gauge: {context}"
        );
        // The cookie is HttpOnly: the page's script cannot read it.
        assert_eq!(b.eval("document.cookie"), json!(""));
        b.eval(&format!("location.hash = '#/threads/{crashed_id}'; true"));
        let lineage = b.wait(
            "the crash lineage",
            "(() => { const l = document.querySelector('[data-lineage=\"2\"]'); \
               const done = [...document.querySelectorAll('#timeline li.reply')].length > 0; \
               return l && done ? l.innerText : ''; })()",
            Duration::from_secs(60),
        );
        let lineage = lineage.as_str().unwrap().to_string();
        // The write ran once, in epoch 1: the resumed turn did not run it again.
        let executed = b.eval(
            "[...document.querySelectorAll('#timeline .badge')].filter(x => x.textContent === 'executed').length",
        );
        // Its turn is over: nothing to cancel (the button goes once the page has read the
        // thread again after its `turn_completed`).
        b.wait(
            "no Cancel button on a thread between turns",
            "!document.querySelector('[data-action=\"cancel\"]')",
            Duration::from_secs(20),
        );
        // The gated thread's turn waits for a person: it can be cancelled from its page.
        b.eval(&format!("location.hash = '#/threads/{gated_id}'; true"));
        b.wait(
            "the Cancel button of a turn that waits",
            "(() => { const c = document.querySelector('[data-action=\"cancel\"]'); \
               return c && !c.disabled ? c.textContent : ''; })()",
            Duration::from_secs(20),
        );
        b.eval("location.hash = '#/approvals'; true");
        b.wait(
            "the pending approval",
            &format!("!!document.querySelector('[data-approval=\"{approval_id}\"] [data-action=\"approve\"]')"),
            Duration::from_secs(20),
        );
        b.eval(&format!(
            "document.querySelector('[data-approval=\"{approval_id}\"] [data-action=\"approve\"]').click(); true"
        ));
        b.wait(
            "the empty inbox",
            "!!document.getElementById('no-approvals')",
            Duration::from_secs(20),
        );
        let html = b.eval("document.documentElement.outerHTML");
        assert!(
            !html.as_str().unwrap().contains(ADMIN),
            "the token is not in the page"
        );
        let errors = b.errors();
        assert!(errors.is_empty(), "the page reported errors: {errors:#?}");
        (lineage, executed)
    })
    .await
    .unwrap();
    assert!(page_text.contains("restarted: epoch 2"), "{page_text}");
    assert!(page_text.contains("resumed turn 1"), "{page_text}");
    assert_eq!(executed, json!(1), "one execution of the write on the page");

    // The decision came from the page: the request is approved and the turn finishes.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let a = admin
            .approval(approval.id)
            .await
            .unwrap()
            .expect("the request exists");
        if a.status == ApprovalStatus::Approved {
            assert_eq!(a.decided_by.as_deref(), Some("admin"));
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the approval was not decided: {a:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = (second.kill(), third.kill());
    let _ = (second.wait(), third.wait());
}
