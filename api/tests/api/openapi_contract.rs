//! The OpenAPI document states exactly what the server does: schemathesis generates requests
//! from `/openapi.json` (valid and invalid ones) and checks every answer against it (`--checks
//! all`: documented statuses, content types, response schemas, valid data accepted, invalid data
//! refused, …). Two runs with a fixed seed and a bounded number of examples per operation:
//!
//! - as the admin, on every route but the event stream, with generated thread IDs;
//! - as the runner of one thread, with `thread_id` pinned to that thread, so the runner routes
//!   get past authentication and exercise claims, checkpoints, the ledger, the inbox and events,
//!   and the admin routes answer their documented 403.
//!
//! Without schemathesis the test says `SKIPPED: needs schemathesis (…)` and passes
//! (`ninetrix-testkit`); with `NINETRIX_REQUIRE_SCHEMATHESIS=1` (CI) a missing schemathesis fails
//! it instead.

use std::process::Stdio;
use std::time::Duration;

use ninetrix_proto::ThreadId;
use serde_json::{Value, json};

use crate::support::{ADMIN, Backend, TestApi};

/// The seed of every run: a failure reproduces with the same command.
const SEED: u64 = 20_261_123;
/// Generated requests per operation and phase.
const MAX_EXAMPLES: u32 = 25;
/// A run that takes longer than this is killed and fails the test.
const RUN_LIMIT: Duration = Duration::from_secs(240);

/// Settings of both runs, after their `[headers]` and `[parameters]`:
/// - schemathesis' expected statuses for the checks that judge a status by the data sent, with
///   410 added: a thread ID the run purged earlier (generated IDs repeat) is `410 purged` for
///   valid and invalid requests alike, as an unknown one is 404;
/// - no U+0000 in generated strings: the API stores no NUL on any backend and refuses it in
///   every text field and in every string inside JSON it stores (`invalid_text`, documented),
///   which a schema cannot state for free-form JSON;
/// - a checkpoint's or commit's messages must also form a history every provider accepts
///   (`invalid_history`, documented: roles and blocks that go together, results that answer
///   calls, message IDs used once), which a schema cannot state either: there a schema-valid
///   body may get 422 (every other check still runs on those two routes, and the
///   `invalid_history` tests check the rules themselves);
/// - likewise a trigger registration must name a valid cron rule, time zone and templates
///   (`invalid_trigger`), which its schema cannot state: `PUT /v1/pools/{pool}/triggers` may
///   answer a schema-valid body 422 too (the trigger tests check those rules); and a memory
///   command needs a thread with a pool and an agent and must keep the memory within its limits
///   (`unlabelled_thread`, `memory_limit`): `POST …/memory` too (the memory tests check those);
///   and a message may not be a `cancel` (`control: cancel`: 422, a cancel has its own route),
///   which its schema does not state either: `POST /v1/threads/{id}/messages` too (the
///   turn-control tests check it); and a fork needs a thread with a pool and an agent
///   (`unlabelled_thread`), an object upload bytes whose SHA-256 is the ID in its path (`422`,
///   both hashes named): `POST /v1/threads/{id}/fork` and `PUT …/objects/{object}` too (the fork
///   tests check those). A message sent with mode `reject` to a busy thread is `409
///   busy`, which depends on the thread's state like the other 409s. A model lease's budgets
///   name a time zone the IANA database must know (`422`, the field named): `POST
///   …/model-leases` too (the limits tests check it);
/// - a replay's range must run forwards and its candidate be one line (`from_turn` after
///   `to_turn`, a control character: `400 invalid_body`, the field named), an eval member's range
///   too, and an eval run's costs are 0 or more: `POST /v1/threads/{id}/replays`,
///   `POST /v1/evals/{suite}/members` and `…/runs` may answer a schema-valid body 400 (the
///   replay tests check those rules);
/// - an agent's A2A card must give each skill its own ID (`422` naming the field), which its
///   schema cannot state: `PUT /v1/pools/{pool}/agents/{agent}` may answer a schema-valid body
///   422 (the A2A tests check it);
/// - and for the same reason a thread's spend in a time zone the database does not know is `400
///   invalid_query`: `GET /v1/threads/{id}/spend` may answer a schema-valid `timezone` 400.
const SETTINGS: &str = "[checks.positive_data_acceptance]\n\
    expected-statuses = [\"2xx\", \"3xx\", \"401\", \"403\", \"404\", \"409\", \"410\", \"429\", \"5xx\"]\n\
    [checks.negative_data_rejection]\n\
    expected-statuses = [\"400\", \"401\", \"403\", \"404\", \"405\", \"406\", \"409\", \"410\", \"415\", \"422\", \"428\", \"429\", \"5xx\"]\n\
    [generation]\n\
    allow-x00 = false\n\
    [[operations]]\n\
    include-name-regex = '^(POST /v1/runners/threads/[^/]+/(checkpoints|commit|memory|model-leases)|POST /v1/threads/[^/]+/(messages|fork)|PUT /v1/pools/[^/]+/triggers|PUT /v1/pools/[^/]+/agents/[^/]+|PUT /v1/runners/threads/[^/]+/objects/[^/]+)$'\n\
    checks.positive_data_acceptance.expected-statuses = [\"2xx\", \"3xx\", \"401\", \"403\", \"404\", \"409\", \"410\", \"422\", \"429\", \"5xx\"]\n\
    [[operations]]\n\
    include-name-regex = '^(GET /v1/threads/[^/]+/spend|POST /v1/threads/[^/]+/replays|POST /v1/evals/[^/]+/(members|runs))$'\n\
    checks.positive_data_acceptance.expected-statuses = [\"2xx\", \"3xx\", \"400\", \"401\", \"403\", \"404\", \"409\", \"410\", \"429\", \"5xx\"]\n";

/// The schemathesis command (`$NINETRIX_SCHEMATHESIS` or `schemathesis`), or `None` when the
/// test is skipped for want of it (a failure with `NINETRIX_REQUIRE_SCHEMATHESIS=1`).
fn schemathesis() -> Option<String> {
    ninetrix_testkit::require(ninetrix_testkit::Need::Schemathesis)
}

/// Runs schemathesis against the server with this configuration file; panics with its output
/// unless it passes.
async fn run(program: &str, api: &TestApi, name: &str, config: &str, extra: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let config_path = dir.path().join("schemathesis.toml");
    std::fs::write(&config_path, config).unwrap();
    let mut command = tokio::process::Command::new(program);
    command
        .current_dir(dir.path())
        .env("NO_COLOR", "1")
        .arg("--config-file")
        .arg(&config_path)
        .args(["run", &format!("{}/openapi.json", api.url)])
        .args(["--checks", "all"])
        .args(["--seed", &SEED.to_string()])
        .args(["--max-examples", &MAX_EXAMPLES.to_string()])
        .args([
            "--workers",
            "1",
            "--no-color",
            "--generation-database",
            "none",
        ])
        .args(["--request-timeout", "10"])
        .args(extra)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let started = std::time::Instant::now();
    let output = tokio::time::timeout(RUN_LIMIT, command.output())
        .await
        .unwrap_or_else(|_| panic!("schemathesis ({name}) ran longer than {RUN_LIMIT:?}"))
        .expect("schemathesis starts");
    let report = format!(
        "schemathesis ({name}, seed {SEED}, {MAX_EXAMPLES} examples, {:.0?}) exited with {}\n\
         --- stdout ---\n{}\n--- stderr ---\n{}",
        started.elapsed(),
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(output.status.success(), "{report}");
    eprintln!("{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_the_server_true_to_its_openapi_document() {
    contract(Backend::Sqlite).await;
}

/// The same runs on Postgres: the store is the other half of every answer (the report behind
/// issue 20 found Postgres-only 500s — U+0000, a purge racing writes — that SQLite never showed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_the_server_true_to_its_openapi_document_on_postgres() {
    contract(Backend::Postgres).await;
}

/// Both schemathesis runs against a server on `backend`: as the admin on every route, then as
/// the runner of one thread.
async fn contract(backend: Backend) {
    let Some(program) = schemathesis() else {
        return;
    };
    // Long-polls answer at once so generated `wait` values do not stall the run.
    let Some(api) = TestApi::start_with(backend, |c| c.max_wait = Duration::ZERO).await else {
        return;
    };
    let admin = format!("[headers]\nAuthorization = \"Bearer {ADMIN}\"\n{SETTINGS}");
    // The event stream of a thread that exists never ends by itself; generated thread IDs can
    // name one minted earlier in the run, so the admin run leaves the stream out (the runner run
    // checks its documented 403, and `conformance` checks the stream itself).
    run(
        &program,
        &api,
        "admin",
        &admin,
        &["--exclude-path-regex", "/events/stream$"],
    )
    .await;

    let thread = ThreadId::new_v7();
    let token = api.runner_token(thread).await;
    let runner = format!(
        "[headers]\nAuthorization = \"Bearer {token}\"\n\
         [parameters]\n\"path.thread_id\" = \"{thread}\"\n{SETTINGS}"
    );
    run(&program, &api, "runner", &runner, &[]).await;
    api.stop().await;
}

/// The Python (`$NINETRIX_PYTHON` or `python3`) that imports `openapi_spec_validator`, or `None`
/// when the test is skipped for want of it (a failure with `NINETRIX_REQUIRE_OPENAPI_VALIDATOR=1`).
fn openapi_spec_validator() -> Option<String> {
    ninetrix_testkit::require(ninetrix_testkit::Need::OpenapiValidator)
}

/// The document the server serves is valid OpenAPI 3.1 by the reference validator (required
/// descriptions, parameters placed where they are, schemas that are valid JSON Schema, …).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_spec_validator_accepts_the_served_document() {
    let Some(python) = openapi_spec_validator() else {
        return;
    };
    let api = TestApi::start(Backend::Sqlite).await.unwrap();
    let (status, served) = api
        .call(reqwest::Method::GET, "/openapi.json", None, None)
        .await;
    assert_eq!(status, reqwest::StatusCode::OK);
    api.stop().await;
    assert_eq!(
        served["openapi"], "3.1.0",
        "the validator picks the version from here"
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("openapi.json");
    std::fs::write(&file, serde_json::to_vec_pretty(&served).unwrap()).unwrap();
    // Every error, not only the first one, each with where it is.
    let output = tokio::process::Command::new(&python)
        .args(["-c", VALIDATE])
        .arg(&file)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .expect("the validator starts");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "openapi-spec-validator refuses the document ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(stdout.contains("valid OpenAPI 3.1"), "{stdout}");
}

/// Validates the file named by the first argument as OpenAPI 3.1 and prints every error.
const VALIDATE: &str = r#"
import json, sys
from importlib.metadata import version
from openapi_spec_validator import OpenAPIV31SpecValidator
with open(sys.argv[1]) as f:
    spec = json.load(f)
errors = list(OpenAPIV31SpecValidator(spec).iter_errors())
for e in errors:
    where = getattr(e, "json_path", "$")
    message = str(getattr(e, "message", e)).strip().splitlines()[0]
    print(f"{where}: {message}")
v = version("openapi-spec-validator")
if errors:
    sys.exit(f"openapi-spec-validator {v}: {len(errors)} errors")
print(f"openapi-spec-validator {v}: valid OpenAPI 3.1")
"#;

/// Real answers fit the schemas the served document gives them, by the `jsonschema` package the
/// validator is built on: thread summaries flatten the thread's labels (`ThreadLabels` refuses
/// unknown fields, so an `allOf` of the two halves would refuse every summary), with and without
/// labels, a session's among them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_answers_fit_their_schemas_in_the_served_document() {
    let Some(python) = openapi_spec_validator() else {
        return;
    };
    let api = TestApi::start(Backend::Sqlite).await.unwrap();
    let (status, doc) = api
        .call(reqwest::Method::GET, "/openapi.json", None, None)
        .await;
    assert_eq!(status, reqwest::StatusCode::OK);
    let bare = ThreadId::new_v7();
    api.claim(bare, ADMIN).await;
    let labelled = ThreadId::new_v7();
    let token = api.runner_token(labelled).await;
    api.claim(labelled, &token).await;
    let mut cases = Vec::new();
    let mut answer = |method: &str, route: &str, status: u16, body: Value| {
        assert!(
            body.is_object() || body.as_array().is_some_and(|a| !a.is_empty()),
            "{method} {route}: {body}"
        );
        let schema = doc["paths"][route][method]["responses"][status.to_string()]["content"]
            ["application/json"]["schema"]
            .clone();
        assert!(schema.is_object(), "{method} {route} {status}: no schema");
        cases.push(
            json!({"where": format!("{method} {route} {status}"), "schema": schema, "value": body}),
        );
    };
    let session = json!({"pool": "shop", "agent": "clerk", "key": "customer-7"});
    for expected in [reqwest::StatusCode::CREATED, reqwest::StatusCode::OK] {
        let (status, body) = api
            .admin(reqwest::Method::POST, "/v1/sessions", Some(session.clone()))
            .await;
        assert_eq!(status, expected, "{body}");
        answer("post", "/v1/sessions", status.as_u16(), body);
    }
    let (status, body) = api.admin(reqwest::Method::GET, "/v1/threads", None).await;
    assert_eq!(status, reqwest::StatusCode::OK, "{body}");
    // The runner token's labels are flattened into the summary.
    assert!(
        body.as_array()
            .unwrap()
            .iter()
            .any(|t| t["thread_id"] == labelled.to_string()
                && t["pool"] == "p"
                && t["replica"] == 1),
        "{body}"
    );
    answer("get", "/v1/threads", 200, body);
    for thread in [bare, labelled] {
        let (status, body) = api
            .admin(reqwest::Method::GET, format!("/v1/threads/{thread}"), None)
            .await;
        assert_eq!(status, reqwest::StatusCode::OK, "{body}");
        answer("get", "/v1/threads/{thread_id}", 200, body);
    }
    let (status, body) = api.admin(reqwest::Method::GET, "/v1/sessions", None).await;
    assert_eq!(status, reqwest::StatusCode::OK, "{body}");
    answer("get", "/v1/sessions", 200, body);
    // Triggers: `TriggerKind` is an internally tagged enum of structs that refuse unknown
    // fields, the other shape utoipa writes as an `allOf` no value fits.
    let schedule = json!({"name": "nightly", "agent": "clerk", "session": {"key": "trigger:nightly"},
        "kind": {"type": "schedule", "message": "tick", "cron": "0 3 * * *", "timezone": "UTC", "overlap": "skip", "catch_up": "last", "catch_up_window_secs": 3600}});
    let webhook = json!({"name": "gh", "agent": "clerk", "session": {"key": "trigger:gh"},
        "kind": {"type": "webhook", "message": "{{ text }}", "path": "gh", "secret": "S", "signature": "github", "tolerance_secs": 300,
                 "rate_limit_per_minute": 60, "max_body_bytes": 65536}});
    let (status, body) = api
        .admin(
            reqwest::Method::PUT,
            "/v1/pools/shop/triggers",
            Some(json!({"triggers": [{"spec": schedule}, {"spec": webhook, "secret": "s3cret-value"}]})),
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::OK, "{body}");
    let (status, body) = api.admin(reqwest::Method::GET, "/v1/triggers", None).await;
    assert_eq!(status, reqwest::StatusCode::OK, "{body}");
    answer("get", "/v1/triggers", 200, body);
    // Model leases: each answer's `status` and `reason` sit beside the fields of its variant
    // (two internally tagged enums, one flattened into the other).
    let epoch = api.claim(labelled, &token).await;
    let leases = format!("/v1/runners/threads/{labelled}/model-leases");
    let route = "/v1/runners/threads/{thread_id}/model-leases";
    let ask = |limits: Value, budgets: Option<Value>| {
        let mut body = json!({"epoch": epoch, "limiter": "openai@api.openai.com#0123456789ab",
            "provider": "openai", "limits": limits, "estimated_tokens": 10});
        if let Some(b) = budgets {
            body["budgets"] = b;
        }
        body
    };
    let (status, granted) = api
        .call(
            reqwest::Method::POST,
            &leases,
            Some(&token),
            Some(ask(
                json!({"max_in_flight": 1, "requests_per_minute": 2, "tokens_per_minute": 25}),
                None,
            )),
        )
        .await;
    assert_eq!(
        (status, &granted["status"]),
        (reqwest::StatusCode::OK, &json!("granted")),
        "{granted}"
    );
    let lease = granted["lease_id"].as_str().unwrap().to_string();
    answer("post", route, 200, granted);
    let (_, in_flight) = api
        .call(
            reqwest::Method::POST,
            &leases,
            Some(&token),
            Some(ask(json!({"max_in_flight": 1}), None)),
        )
        .await;
    assert_eq!(in_flight["reason"], "in_flight", "{in_flight}");
    answer("post", route, 200, in_flight);
    let (_, tokens) = api
        .call(
            reqwest::Method::POST,
            &leases,
            Some(&token),
            Some(ask(json!({"tokens_per_minute": 15}), None)),
        )
        .await;
    assert_eq!(tokens["reason"], "tokens_per_minute", "{tokens}");
    answer("post", route, 200, tokens);
    let (status, renewed) = api
        .call(
            reqwest::Method::POST,
            format!("{leases}/{lease}/renew"),
            Some(&token),
            None,
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::OK, "{renewed}");
    answer(
        "post",
        "/v1/runners/threads/{thread_id}/model-leases/{lease_id}/renew",
        200,
        renewed,
    );
    let (status, _) = api
        .call(reqwest::Method::POST, format!("{leases}/{lease}/release"), Some(&token),
            Some(json!({"input_tokens": 10, "cost_usd": 0.5, "rate_limited": {"retry_after_ms": 60000}})))
        .await;
    assert_eq!(status, reqwest::StatusCode::NO_CONTENT);
    let (_, limited) = api
        .call(
            reqwest::Method::POST,
            &leases,
            Some(&token),
            Some(ask(json!({}), None)),
        )
        .await;
    assert_eq!(limited["reason"], "rate_limited", "{limited}");
    answer("post", route, 200, limited);
    for budgets in [
        json!({"per_session_usd": 0.5, "timezone": "UTC"}),
        json!({"per_day_usd": 0.5, "timezone": "Asia/Tokyo"}),
    ] {
        let (_, over) = api
            .call(
                reqwest::Method::POST,
                &leases,
                Some(&token),
                Some(ask(json!({}), Some(budgets))),
            )
            .await;
        assert_eq!(over["status"], "over_budget", "{over}");
        answer("post", route, 200, over);
    }
    let (status, spent) = api
        .admin(
            reqwest::Method::GET,
            format!("/v1/threads/{labelled}/spend?timezone=Asia/Tokyo"),
            None,
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::OK, "{spent}");
    answer("get", "/v1/threads/{thread_id}/spend", 200, spent);
    let (_, summary) = api
        .admin(
            reqwest::Method::GET,
            format!("/v1/threads/{labelled}"),
            None,
        )
        .await;
    assert_eq!(summary["spent_usd"], 0.5, "{summary}");
    answer("get", "/v1/threads/{thread_id}", 200, summary);
    // A budget request carries its raise.
    let approval = ninetrix_proto::ApprovalId::new_v7();
    let mut commit = crate::support::checkpoint(
        epoch,
        0,
        None,
        vec![crate::support::message("user", "q")],
        1,
    );
    commit["approvals"] = json!([{"id": approval, "key": "b1", "call_id": "c1", "turn_seq": 1, "kind": "budget",
        "tool": "raise_budget", "args": {}, "args_hash": "h", "timeout_secs": 60,
        "raise": {"scope": "agent_day", "day": "2026-11-28", "amount_usd": 5.0}}]);
    let (status, body) = api
        .call(
            reqwest::Method::POST,
            format!("/v1/runners/threads/{labelled}/commit"),
            Some(&token),
            Some(commit),
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::CREATED, "{body}");
    let (status, body) = api
        .admin(
            reqwest::Method::GET,
            format!("/v1/approvals/{approval}"),
            None,
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::OK, "{body}");
    assert_eq!(body["raise"]["day"], "2026-11-28", "{body}");
    answer("get", "/v1/approvals/{approval_id}", 200, body);
    api.stop().await;

    let fit = format!("{} answers fit", cases.len());
    let input = json!({"components": doc["components"], "cases": cases});
    let mut child = tokio::process::Command::new(&python)
        .args(["-c", CONFORM])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("python starts");
    let mut stdin = child.stdin.take().unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut stdin, input.to_string().as_bytes())
        .await
        .unwrap();
    drop(stdin);
    let output = child.wait_with_output().await.unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "answers that do not fit their schema ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(stdout.contains(&fit), "{stdout}");
}

/// Reads `{components, cases: [{where, schema, value}]}` on stdin and validates each value
/// against its schema (JSON Schema 2020-12, OpenAPI 3.1's dialect; `$ref`s into `components`).
const CONFORM: &str = r#"
import json, sys
from jsonschema import Draft202012Validator
data = json.load(sys.stdin)
failures = []
for case in data["cases"]:
    schema = dict(case["schema"], components=data["components"])
    for e in Draft202012Validator(schema).iter_errors(case["value"]):
        failures.append(f"{case['where']} at {e.json_path}: {e.message}")
print("\n".join(failures))
if failures:
    sys.exit(f"{len(failures)} errors")
print(f"{len(data['cases'])} answers fit their schemas")
"#;

/// What the reference validator checks, without Python: every response says what it means, and
/// a parameter is `in: path` only where the path template has a place for it (a query struct
/// that derives `IntoParams` without `parameter_in = Query` is declared `in: path`, and clients
/// generated from the document then cannot send it).
#[test]
fn every_response_is_described_and_every_path_parameter_is_in_its_path() {
    let doc = serde_json::to_value(ninetrix_api::openapi()).unwrap();
    let mut failures = Vec::new();
    let paths = doc["paths"].as_object().expect("paths");
    assert!(!paths.is_empty());
    let mut responses_seen = 0;
    let mut query_seen = 0;
    for (path, item) in paths {
        for (method, operation) in item.as_object().expect("a path item") {
            let route = format!("{} {path}", method.to_uppercase());
            let responses = operation["responses"].as_object();
            if responses.is_none_or(|r| r.is_empty()) {
                failures.push(format!("{route}: no responses"));
            }
            for (status, response) in responses.into_iter().flatten() {
                responses_seen += 1;
                let described = response["description"]
                    .as_str()
                    .is_some_and(|d| !d.trim().is_empty());
                if !described {
                    failures.push(format!("{route} {status}: no description"));
                }
            }
            let parameters = operation["parameters"].as_array();
            for parameter in parameters.into_iter().flatten() {
                let name = parameter["name"].as_str().unwrap_or_default();
                match parameter["in"].as_str() {
                    Some("path") => {
                        if !path.contains(&format!("{{{name}}}")) {
                            failures.push(format!(
                                "{route}: `{name}` is declared `in: path` but the path has no `{{{name}}}`"
                            ));
                        }
                        if parameter["required"] != true {
                            failures.push(format!("{route}: path parameter `{name}` not required"));
                        }
                    }
                    Some("query") => query_seen += 1,
                    Some("header") => {}
                    other => failures.push(format!("{route}: `{name}` is in {other:?}")),
                }
            }
            // Every `{name}` of the template is declared as a path parameter.
            for segment in path.split('/') {
                if let Some(name) = segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                    let declared = parameters
                        .into_iter()
                        .flatten()
                        .any(|p| p["name"] == name && p["in"] == "path");
                    if !declared {
                        failures.push(format!("{route}: `{{{name}}}` is not declared"));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The walk saw the document: list routes take query parameters (`?status=`, `?after=`, …).
    assert!(responses_seen > 100, "{responses_seen} responses");
    assert!(query_seen >= 10, "{query_seen} query parameters");
}

/// Every integer's `format` agrees with its bounds: a `u32` that utoipa declares `int32` but
/// whose `maximum` is 2^32−1 makes a client generated from the document refuse (or overflow on)
/// values the server takes, and schemathesis send values past 2^31−1 as invalid — found by a
/// long run on `?offset=2147483648`.
#[test]
fn every_integer_format_agrees_with_its_bounds() {
    fn walk(at: &str, value: &Value, failures: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                let bound = |key: &str| map.get(key).and_then(Value::as_f64);
                let range = match map.get("format").and_then(Value::as_str) {
                    Some("int32") => Some((f64::from(i32::MIN), f64::from(i32::MAX))),
                    Some("int64") => Some((i64::MIN as f64, i64::MAX as f64)),
                    _ => None,
                };
                if let Some((lowest, highest)) = range
                    && (bound("maximum").is_some_and(|m| m > highest)
                        || bound("minimum").is_some_and(|m| m < lowest))
                {
                    failures.push(format!("{at}: {value}"));
                }
                for (key, inner) in map {
                    walk(&format!("{at}/{key}"), inner, failures);
                }
            }
            Value::Array(items) => {
                for (i, inner) in items.iter().enumerate() {
                    walk(&format!("{at}/{i}"), inner, failures);
                }
            }
            _ => {}
        }
    }
    let doc = serde_json::to_value(ninetrix_api::openapi()).unwrap();
    let mut failures = Vec::new();
    walk("", &doc, &mut failures);
    assert!(
        failures.is_empty(),
        "integers whose bounds break their format:\n{}",
        failures.join("\n")
    );
}

/// Issue 33 item 6: trigger names and webhook paths carry the pattern the server enforces, and
/// each branch of `TriggerKind` refuses unknown fields, as serde does.
#[test]
fn trigger_names_have_their_pattern_and_trigger_kinds_are_closed() {
    let doc = serde_json::to_value(ninetrix_api::openapi()).unwrap();
    let schemas = &doc["components"]["schemas"];
    let pattern = ninetrix_proto::triggers::spec::NAME_PATTERN;
    assert_eq!(
        schemas["TriggerSpec"]["properties"]["name"]["pattern"],
        pattern
    );
    let branches = schemas["TriggerKind"]["oneOf"].as_array().unwrap();
    assert_eq!(branches.len(), 2);
    for branch in branches {
        assert_eq!(branch["additionalProperties"], false, "{branch}");
        assert!(branch["properties"]["type"].is_object(), "{branch}");
    }
    let webhook = branches
        .iter()
        .find(|b| b["properties"]["path"].is_object())
        .unwrap();
    assert_eq!(webhook["properties"]["path"]["pattern"], pattern);
}
