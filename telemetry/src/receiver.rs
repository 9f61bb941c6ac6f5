//! A real OTLP/HTTP receiver for tests (feature `receiver`): `POST /v1/traces` with an
//! `application/x-protobuf` body is decoded as an `ExportTraceServiceRequest` (prost) and answered
//! with an empty `ExportTraceServiceResponse`, as a collector does; the spans are kept, flattened,
//! with their resource's attributes, for the test to read ([`Receiver::spans`]) or wait for
//! ([`Receiver::wait_for`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use prost::Message as _;

/// An attribute value as received.
#[derive(Clone, Debug, PartialEq)]
pub enum AttrValue {
    /// A string.
    Str(String),
    /// A boolean.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A floating-point number.
    Double(f64),
    /// An array.
    Array(Vec<AttrValue>),
    /// Anything else (key-value lists, bytes, empty), in words.
    Other(String),
}

impl AttrValue {
    /// The string, if it is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            AttrValue::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The integer, if it is one.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            AttrValue::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// The boolean, if it is one.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            AttrValue::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// The floating-point number, if it is one.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            AttrValue::Double(d) => Some(*d),
            _ => None,
        }
    }

    /// The array's strings, if it is an array of strings.
    pub fn as_strs(&self) -> Option<Vec<&str>> {
        match self {
            AttrValue::Array(items) => items.iter().map(AttrValue::as_str).collect(),
            _ => None,
        }
    }
}

/// Attributes by key.
pub type Attributes = BTreeMap<String, AttrValue>;

/// The kind of a span (OTLP's numbering).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Unspecified (0).
    Unspecified,
    /// Internal (1).
    Internal,
    /// Server (2).
    Server,
    /// Client (3).
    Client,
    /// Producer (4).
    Producer,
    /// Consumer (5).
    Consumer,
}

impl Kind {
    fn from_otlp(k: i32) -> Kind {
        match k {
            1 => Kind::Internal,
            2 => Kind::Server,
            3 => Kind::Client,
            4 => Kind::Producer,
            5 => Kind::Consumer,
            _ => Kind::Unspecified,
        }
    }
}

/// A span's status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SpanStatus {
    /// Unset (or no status sent).
    Unset,
    /// Ok.
    Ok,
    /// Error, with its description.
    Error(String),
}

/// A link to another span.
#[derive(Clone, Debug, PartialEq)]
pub struct ReceivedLink {
    /// The linked span's trace (hex).
    pub trace_id: String,
    /// The linked span (hex).
    pub span_id: String,
    /// The link's attributes.
    pub attributes: Attributes,
}

/// One span as a collector received it.
#[derive(Clone, Debug, PartialEq)]
pub struct ReceivedSpan {
    /// Its name.
    pub name: String,
    /// Its kind.
    pub kind: Kind,
    /// Its trace (32 hex digits).
    pub trace_id: String,
    /// Its ID (16 hex digits).
    pub span_id: String,
    /// Its parent's ID (hex), if it has one.
    pub parent_span_id: Option<String>,
    /// Its attributes.
    pub attributes: Attributes,
    /// Its links.
    pub links: Vec<ReceivedLink>,
    /// Its status.
    pub status: SpanStatus,
    /// The attributes of the resource that sent it (`service.name`, …).
    pub resource: Attributes,
    /// The instrumentation scope's name.
    pub scope: String,
    /// Start, in nanoseconds since the Unix epoch.
    pub start_unix_nano: u64,
    /// End, in nanoseconds since the Unix epoch.
    pub end_unix_nano: u64,
}

impl ReceivedSpan {
    /// An attribute.
    pub fn attr(&self, key: &str) -> Option<&AttrValue> {
        self.attributes.get(key)
    }

    /// A string attribute.
    pub fn str_attr(&self, key: &str) -> Option<&str> {
        self.attr(key).and_then(AttrValue::as_str)
    }

    /// An integer attribute.
    pub fn int_attr(&self, key: &str) -> Option<i64> {
        self.attr(key).and_then(AttrValue::as_i64)
    }

    /// A boolean attribute.
    pub fn bool_attr(&self, key: &str) -> Option<bool> {
        self.attr(key).and_then(AttrValue::as_bool)
    }
}

#[derive(Default)]
struct Kept {
    spans: Vec<ReceivedSpan>,
    requests: usize,
}

/// A running receiver; it stops when dropped.
pub struct Receiver {
    addr: std::net::SocketAddr,
    kept: Arc<Mutex<Kept>>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl Receiver {
    /// Binds `127.0.0.1:0` and serves `POST /v1/traces`.
    pub async fn start() -> std::io::Result<Receiver> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let kept = Arc::new(Mutex::new(Kept::default()));
        let app = Router::new()
            .route("/v1/traces", post(traces))
            .with_state(kept.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Receiver { addr, kept, server })
    }

    /// The endpoint base (`http://127.0.0.1:PORT`), as `OTEL_EXPORTER_OTLP_ENDPOINT` takes it.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The traces endpoint (`…/v1/traces`), as `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` takes it.
    pub fn traces_url(&self) -> String {
        format!("{}/v1/traces", self.url())
    }

    /// The spans received so far, in the order they arrived.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.kept
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .spans
            .clone()
    }

    /// How many export requests were decoded.
    pub fn requests(&self) -> usize {
        self.kept.lock().unwrap_or_else(|e| e.into_inner()).requests
    }

    /// Waits until `pred` holds for the spans received, polling until `timeout`; returns the
    /// spans then, or an error naming what arrived.
    pub async fn wait_for(
        &self,
        pred: impl Fn(&[ReceivedSpan]) -> bool,
        timeout: Duration,
    ) -> Result<Vec<ReceivedSpan>, String> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let spans = self.spans();
            if pred(&spans) {
                return Ok(spans);
            }
            if tokio::time::Instant::now() >= deadline {
                let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
                return Err(format!(
                    "the spans expected did not arrive within {timeout:?}; received: {names:?}"
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

async fn traces(State(kept): State<Arc<Mutex<Kept>>>, headers: HeaderMap, body: Bytes) -> Response {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !content_type.starts_with("application/x-protobuf") {
        return (
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("expected application/x-protobuf, got `{content_type}`"),
        )
            .into_response();
    }
    let request = match ExportTraceServiceRequest::decode(body) {
        Ok(r) => r,
        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    let mut spans = Vec::new();
    for rs in request.resource_spans {
        let resource = attributes(
            rs.resource
                .as_ref()
                .map(|r| r.attributes.as_slice())
                .unwrap_or_default(),
        );
        for ss in rs.scope_spans {
            let scope = ss.scope.map(|s| s.name).unwrap_or_default();
            for s in ss.spans {
                spans.push(ReceivedSpan {
                    name: s.name,
                    kind: Kind::from_otlp(s.kind),
                    trace_id: hex(&s.trace_id),
                    span_id: hex(&s.span_id),
                    parent_span_id: (!s.parent_span_id.is_empty()).then(|| hex(&s.parent_span_id)),
                    attributes: attributes(&s.attributes),
                    links: s
                        .links
                        .iter()
                        .map(|l| ReceivedLink {
                            trace_id: hex(&l.trace_id),
                            span_id: hex(&l.span_id),
                            attributes: attributes(&l.attributes),
                        })
                        .collect(),
                    status: match s.status {
                        Some(st) if st.code == 1 => SpanStatus::Ok,
                        Some(st) if st.code == 2 => SpanStatus::Error(st.message),
                        _ => SpanStatus::Unset,
                    },
                    resource: resource.clone(),
                    scope: scope.clone(),
                    start_unix_nano: s.start_time_unix_nano,
                    end_unix_nano: s.end_time_unix_nano,
                });
            }
        }
    }
    {
        let mut kept = kept.lock().unwrap_or_else(|e| e.into_inner());
        kept.requests += 1;
        kept.spans.extend(spans);
    }
    (
        [(header::CONTENT_TYPE, "application/x-protobuf")],
        ExportTraceServiceResponse::default().encode_to_vec(),
    )
        .into_response()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn attributes(kvs: &[KeyValue]) -> Attributes {
    kvs.iter()
        .map(|kv| (kv.key.clone(), value(kv.value.as_ref())))
        .collect()
}

fn value(v: Option<&AnyValue>) -> AttrValue {
    match v.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => AttrValue::Str(s.clone()),
        Some(any_value::Value::BoolValue(b)) => AttrValue::Bool(*b),
        Some(any_value::Value::IntValue(i)) => AttrValue::Int(*i),
        Some(any_value::Value::DoubleValue(d)) => AttrValue::Double(*d),
        Some(any_value::Value::ArrayValue(a)) => {
            AttrValue::Array(a.values.iter().map(|v| value(Some(v))).collect())
        }
        Some(other) => AttrValue::Other(format!("{other:?}")),
        None => AttrValue::Other(String::new()),
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry::KeyValue;
    use opentelemetry::trace::{Span as _, SpanKind, Status, Tracer as _, TracerProvider as _};
    use opentelemetry_otlp::WithExportConfig as _;
    use opentelemetry_sdk::Resource;
    use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter as _, SpanProcessor};

    /// A span processor that keeps the ended spans.
    #[derive(Clone, Debug, Default)]
    struct Captured(Arc<Mutex<Vec<SpanData>>>);

    impl SpanProcessor for Captured {
        fn on_start(&self, _: &mut opentelemetry_sdk::trace::Span, _: &opentelemetry::Context) {}
        fn on_end(&self, span: SpanData) {
            self.0.lock().unwrap().push(span);
        }
        fn force_flush(&self) -> opentelemetry_sdk::error::OTelSdkResult {
            Ok(())
        }
        fn shutdown_with_timeout(&self, _: Duration) -> opentelemetry_sdk::error::OTelSdkResult {
            Ok(())
        }
    }

    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn decodes_a_span_sent_by_the_otlp_http_exporter() {
        let receiver = Receiver::start().await.unwrap();
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(receiver.traces_url())
            .build()
            .unwrap();
        // The workspace's exporter speaks async reqwest, which needs the tokio reactor: the
        // span is taken from the SDK as the batch processor would get it, then exported here.
        let ended = Captured::default();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(ended.clone())
            .build();
        let tracer = provider.tracer("receiver-test-scope");
        let mut span = tracer
            .span_builder("chat m")
            .with_kind(SpanKind::Client)
            .with_attributes([
                KeyValue::new("gen_ai.request.model", "m"),
                KeyValue::new("gen_ai.usage.input_tokens", 12i64),
                KeyValue::new("ninetrix.resumed", true),
                KeyValue::new(
                    "gen_ai.response.finish_reasons",
                    opentelemetry::Value::Array(
                        vec![opentelemetry::StringValue::from("stop")].into(),
                    ),
                ),
            ])
            .start(&tracer);
        span.set_status(Status::error("boom"));
        span.end();
        let batch = std::mem::take(&mut *ended.0.lock().unwrap());
        assert_eq!(batch.len(), 1);
        let mut exporter = exporter;
        exporter.set_resource(
            &Resource::builder()
                .with_service_name("receiver-test")
                .build(),
        );
        exporter.export(batch).await.unwrap();
        let spans = receiver
            .wait_for(|s| !s.is_empty(), Duration::from_secs(10))
            .await
            .unwrap();
        assert_eq!(spans.len(), 1);
        let s = &spans[0];
        assert_eq!(s.name, "chat m");
        assert_eq!(s.kind, Kind::Client);
        assert_eq!(s.trace_id.len(), 32);
        assert_eq!(s.span_id.len(), 16);
        assert_eq!(s.parent_span_id, None);
        assert_eq!(s.str_attr("gen_ai.request.model"), Some("m"));
        assert_eq!(s.int_attr("gen_ai.usage.input_tokens"), Some(12));
        assert_eq!(s.bool_attr("ninetrix.resumed"), Some(true));
        assert_eq!(
            s.attr("gen_ai.response.finish_reasons")
                .and_then(AttrValue::as_strs),
            Some(vec!["stop"])
        );
        assert_eq!(s.status, SpanStatus::Error("boom".into()));
        assert_eq!(
            s.resource.get("service.name").and_then(AttrValue::as_str),
            Some("receiver-test")
        );
        assert_eq!(s.scope, "receiver-test-scope");
        assert!(s.end_unix_nano >= s.start_unix_nano);
        assert_eq!(receiver.requests(), 1);
    }

    #[tokio::test]
    async fn refuses_what_is_not_protobuf() {
        let receiver = Receiver::start().await.unwrap();
        let addr = receiver.addr;
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        stream
            .write_all(
                b"POST /v1/traces HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}",
            )
            .await
            .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 415"), "{answer}");
        assert!(receiver.spans().is_empty());
    }
}
