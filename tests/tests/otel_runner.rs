//! The runner's OpenTelemetry spans on the real wire (issue 18): runners as processes with
//! `OTEL_EXPORTER_OTLP_ENDPOINT` pointing at a real OTLP/HTTP receiver that decodes the protobuf.
//! A turn killed after its first response is stored and resumed by a second runner shows as one
//! trace with two `invoke_agent` attempts — the interrupted one reported by the runner that
//! resumed it, and its own, linked to it — with `chat` and `execute_tool` spans under the
//! attempt that made them. The runner's commits carry the attempt's `traceparent`, so an API
//! that exports too shows each commit's server span inside the turn's trace. An unreachable
//! collector costs the turn nothing.

mod support;

use std::time::Duration;

use ninetrix_e2e::ninetrix_bin;
use ninetrix_proto::ThreadId;
use ninetrix_telemetry::receiver::{Kind, ReceivedSpan, Receiver, SpanStatus};
use support::{Gate, Hold, Runner, appender_spec, lines, setup};

fn named<'a>(spans: &'a [ReceivedSpan], name: &str) -> Vec<&'a ReceivedSpan> {
    spans.iter().filter(|s| s.name == name).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_turn_is_one_trace_linking_the_interrupted_attempt() {
    let receiver = Receiver::start().await.unwrap();
    let otel = [("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url())];
    let env: Vec<(&str, &str)> = otel.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let s = setup();
    let gate = Gate::start(&s.api.url).await;
    let seq = s.admin.send(s.thread, "message 0", "k0").await;
    // The first response (with the write's intent) is stored; the runner dies before the tool's
    // outcome.
    let held = gate.arm(Hold {
        method: "POST",
        path_contains: "/commit",
        body_contains: vec!["\"type\":\"tool_call\"", "\"intents\":[{"],
        forward_first: true,
        lose_answer: false,
    });
    let mut first =
        Runner::start_with_env(&gate.url, s.thread, &appender_spec(), &s.workspace, &env);
    tokio::time::timeout(Duration::from_secs(30), held)
        .await
        .expect("the runner stored its first response");
    first.kill();
    let stored = s.admin.latest(s.thread).await;
    let attempt = stored
        .state
        .attempt
        .expect("the turn's commit carries the attempt");
    assert_eq!(attempt.epoch, 1);

    let _second =
        Runner::start_with_env(&s.api.url, s.thread, &appender_spec(), &s.workspace, &env);
    s.admin
        .wait_done(s.thread, seq, Duration::from_secs(30))
        .await;
    assert_eq!(
        s.admin.latest(s.thread).await.state.attempt,
        None,
        "no attempt is stored between turns"
    );
    let spans = receiver
        .wait_for(
            |spans| {
                named(spans, "invoke_agent appender").len() >= 2
                    && !named(spans, "chat scripted").is_empty()
                    && !named(spans, "execute_tool file_write").is_empty()
            },
            Duration::from_secs(20),
        )
        .await
        .unwrap();

    let attempts = named(&spans, "invoke_agent appender");
    assert_eq!(attempts.len(), 2, "{attempts:#?}");
    let old = attempts
        .iter()
        .find(|s| s.bool_attr("ninetrix.interrupted") == Some(true))
        .expect("the interrupted attempt is reported");
    let new = attempts
        .iter()
        .find(|s| s.bool_attr("ninetrix.interrupted").is_none())
        .unwrap();
    assert_eq!(
        old.status,
        SpanStatus::Error("interrupted: the runner stopped before the turn ended".into())
    );
    assert_eq!(old.int_attr("ninetrix.epoch"), Some(1));
    assert_eq!(
        old.start_unix_nano,
        attempt.started_at.timestamp_nanos_opt().unwrap() as u64,
        "the interrupted attempt starts when its runner took the turn"
    );
    assert_eq!(
        new.trace_id, old.trace_id,
        "every attempt of a turn shares the trace"
    );
    assert_eq!(new.kind, Kind::Internal);
    assert_eq!(new.parent_span_id, None);
    assert_eq!(
        new.status,
        SpanStatus::Ok,
        "the model verified and answered"
    );
    assert_eq!(new.links.len(), 1);
    assert_eq!(new.links[0].span_id, old.span_id);
    assert_eq!(new.links[0].trace_id, old.trace_id);
    assert_eq!(
        new.links[0]
            .attributes
            .get("ninetrix.link")
            .and_then(|v| v.as_str()),
        Some("resumed_from")
    );
    assert_eq!(new.str_attr("gen_ai.operation.name"), Some("invoke_agent"));
    assert_eq!(new.str_attr("gen_ai.agent.name"), Some("appender"));
    assert_eq!(
        new.str_attr("ninetrix.thread_id"),
        Some(s.thread.to_string().as_str())
    );
    assert_eq!(new.int_attr("ninetrix.epoch"), Some(2));
    assert_eq!(new.int_attr("ninetrix.boot_count"), Some(2));
    assert_eq!(new.int_attr("ninetrix.restart_count"), Some(1));
    assert_eq!(new.int_attr("ninetrix.turn_seq"), Some(1));
    assert_eq!(new.bool_attr("ninetrix.resumed"), Some(true));
    assert_eq!(new.bool_attr("ninetrix.fenced"), Some(false));

    let tool = named(&spans, "execute_tool file_write");
    assert_eq!(tool.len(), 1);
    let tool = tool[0];
    assert_eq!(tool.trace_id, new.trace_id);
    assert_eq!(tool.parent_span_id.as_deref(), Some(new.span_id.as_str()));
    assert_eq!(tool.kind, Kind::Internal);
    assert_eq!(tool.str_attr("gen_ai.tool.name"), Some("file_write"));
    // An append is a `write` whose intent the killed runner stored: its outcome is unknown, it
    // is not run again, and the span says so.
    assert_eq!(tool.str_attr("ninetrix.tool.mode"), Some("outcome_unknown"));
    assert_eq!(tool.str_attr("ninetrix.tool.effect"), Some("write"));
    assert_eq!(tool.str_attr("error.type"), Some("outcome_unknown"));
    assert!(matches!(&tool.status, SpanStatus::Error(d) if d.starts_with("outcome unknown")));
    assert!(tool.str_attr("ninetrix.ledger.key").is_some());
    assert!(
        tool.attr("gen_ai.tool.call.arguments").is_none()
            && !format!("{:?}", tool.attributes).contains("line\\n"),
        "no arguments in attributes: {:?}",
        tool.attributes
    );

    // `resume: truncate`: the interrupted response is cut, the turn re-run from its input: the
    // model asks for the write again (its outcome unknown), then answers.
    let chats = named(&spans, "chat scripted");
    assert_eq!(chats.len(), 2, "the resumed attempt's two model calls");
    assert!(
        chats
            .iter()
            .all(|c| c.parent_span_id.as_deref() == Some(new.span_id.as_str()))
    );
    assert!(
        new.attr("ninetrix.repair.dropped_ids")
            .and_then(|v| v.as_strs())
            .is_some_and(|ids| !ids.is_empty()),
        "the repair's dropped call IDs: {:?}",
        new.attributes
    );
    let chat = chats[0];
    assert_eq!(chat.kind, Kind::Client);
    assert_eq!(chat.trace_id, new.trace_id);
    assert_eq!(chat.parent_span_id.as_deref(), Some(new.span_id.as_str()));
    assert_eq!(chat.str_attr("gen_ai.operation.name"), Some("chat"));
    assert_eq!(chat.str_attr("gen_ai.provider.name"), Some("scripted"));
    assert_eq!(chat.str_attr("gen_ai.request.model"), Some("scripted"));
    assert!(chat.int_attr("gen_ai.usage.input_tokens").is_some());
    assert!(chat.int_attr("gen_ai.usage.output_tokens").is_some());
    assert!(
        chat.attr("gen_ai.response.finish_reasons")
            .and_then(|v| v.as_strs())
            .is_some_and(|r| r.len() == 1)
    );
    assert!(chat.start_unix_nano <= chat.end_unix_nano);
    assert!(chat.start_unix_nano >= new.start_unix_nano);

    for span in &spans {
        assert_eq!(
            span.resource.get("service.name").and_then(|v| v.as_str()),
            Some("appender"),
            "the agent's name, as OTEL_SERVICE_NAME is not set"
        );
        assert_eq!(
            span.resource.get("ninetrix.agent").and_then(|v| v.as_str()),
            Some("appender")
        );
        assert_eq!(span.scope, "ninetrix-runner");
    }
    assert_eq!(lines(&s.workspace), 0, "the write never ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_apis_span_of_each_commit_is_a_child_of_the_turn_attempt() {
    let receiver = Receiver::start().await.unwrap();
    let endpoint = receiver.url();
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("api.db").display());
    let api = ninetrix_e2e::ApiProcess::start_with_env(
        "127.0.0.1:0",
        &["--database", &db, "--insecure-dev"],
        // Batches sent every 100 ms, not the SDK's 5 s.
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    );
    let admin = support::Admin::new(&api.url);
    let thread = ThreadId::new_v7();
    let workspace = dir.path().join("workspace");
    std::fs::create_dir(&workspace).unwrap();
    let seq = admin.send(thread, "message 0", "k0").await;
    let _runner = Runner::start_with_env(
        &api.url,
        thread,
        &appender_spec(),
        &workspace,
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str())],
    );
    admin.wait_done(thread, seq, Duration::from_secs(30)).await;
    let commit = "POST /v1/runners/threads/{thread_id}/commit";
    let spans = receiver
        .wait_for(
            |spans| {
                named(spans, "invoke_agent appender").len() == 1 && named(spans, commit).len() >= 3
            },
            Duration::from_secs(20),
        )
        .await
        .unwrap();
    let turn = named(&spans, "invoke_agent appender")[0];
    let commits = named(&spans, commit);
    // The turn's commits (its input and first response, the write's outcome, the answer): each
    // a SERVER span of the API, child of the attempt's span in the turn's trace.
    let in_turn: Vec<_> = commits
        .iter()
        .filter(|c| c.trace_id == turn.trace_id)
        .collect();
    assert!(in_turn.len() >= 3, "{commits:#?}");
    for c in &in_turn {
        assert_eq!(c.kind, Kind::Server);
        assert_eq!(c.parent_span_id.as_deref(), Some(turn.span_id.as_str()));
        assert_eq!(
            c.resource.get("service.name").and_then(|v| v.as_str()),
            Some("ninetrix-api")
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_collector_costs_the_turn_nothing() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let s = setup();
    let seq = s.admin.send(s.thread, "message 0", "k0").await;
    let _runner = Runner::start_with_env(
        &s.api.url,
        s.thread,
        &appender_spec(),
        &s.workspace,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_SERVICE_NAME", "nowhere"),
        ],
    );
    s.admin
        .wait_done(s.thread, seq, Duration::from_secs(30))
        .await;
    let done = s
        .admin
        .wait_turn(s.thread, seq, Duration::from_secs(10))
        .await;
    assert!(done.ok);
    assert_eq!(lines(&s.workspace), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_job_sends_its_spans_before_it_exits() {
    let receiver = Receiver::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut spec = appender_spec();
    spec["execution"]["durability"] = false.into();
    spec["execution"]["task"] = "write the digest".into();
    let url = receiver.url();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(ninetrix_bin())
            .arg("runner")
            .env("AGENTFILE_AGENT_SPEC", spec.to_string())
            .env("AGENTFILE_THREAD_ID", ThreadId::new_v7().to_string())
            .env("AGENTFILE_WORKSPACE", dir.path())
            .env(
                "AGENTFILE_HEALTH_FILE",
                dir.path().join("health").display().to_string(),
            )
            .env_remove("AGENTFILE_API_URL")
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", url)
            .env("OTEL_SERVICE_NAME", "digest-job")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Flushed before the exit: no waiting needed.
    let spans = receiver.spans();
    let turn = named(&spans, "invoke_agent appender");
    assert_eq!(turn.len(), 1, "{spans:#?}");
    assert_eq!(turn[0].status, SpanStatus::Ok);
    assert_eq!(turn[0].bool_attr("ninetrix.resumed"), Some(false));
    assert_eq!(named(&spans, "chat scripted").len(), 2, "two model rounds");
    let tool = named(&spans, "execute_tool file_write");
    assert_eq!(tool.len(), 1);
    assert_eq!(tool[0].str_attr("ninetrix.tool.mode"), Some("executed"));
    assert_eq!(
        turn[0]
            .resource
            .get("service.name")
            .and_then(|v| v.as_str()),
        Some("digest-job"),
        "OTEL_SERVICE_NAME wins"
    );
}

#[test]
fn a_bad_otel_variable_exits_two_naming_it() {
    let out = std::process::Command::new(ninetrix_bin())
        .arg("runner")
        .env("AGENTFILE_AGENT_SPEC", appender_spec().to_string())
        .env("AGENTFILE_THREAD_ID", ThreadId::new_v7().to_string())
        .env("AGENTFILE_API_URL", "http://127.0.0.1:9")
        .env("AGENTFILE_RUNNER_TOKEN", "t")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("OTEL_EXPORTER_OTLP_PROTOCOL"), "{stderr}");
}
