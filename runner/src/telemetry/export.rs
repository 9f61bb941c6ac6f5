//! Export: the records handed to an OTLP exporter from a background task through a bounded
//! queue (observing never waits; when the collector is down or slow, spans are dropped and
//! counted), the sampling decision shared by every attempt of a turn, and the `traceparent` a
//! commit carries.

use std::time::Duration;

use ninetrix_proto::ThreadId;
use ninetrix_telemetry::{SamplerSetting, Settings, TelemetryError};
use tokio::sync::{mpsc, oneshot};

use super::{Attr, Kind, SpanRecord, Status, attempt_span_id, trace_id};

/// The most spans waiting for the exporter; beyond it new spans are dropped (and counted).
pub const MAX_QUEUED: usize = 2048;
/// The most spans per export request.
const BATCH: usize = 512;
/// How long spans wait for more before they are sent.
const LINGER: Duration = Duration::from_millis(500);

enum Msg {
    Spans(Vec<SpanRecord>),
    Flush(oneshot::Sender<()>),
    /// No new spans for a while: send what waits.
    Linger,
}

/// Sends span records to an OTLP exporter from a background task. Cloning shares the task.
#[derive(Clone)]
pub struct Exporter {
    tx: mpsc::Sender<Msg>,
    dropped: std::sync::Arc<std::sync::atomic::AtomicU64>,
    sampler: SamplerSetting,
}

/// An OTLP/HTTP protobuf exporter, configured and not started yet: [`Otlp::from_settings`] needs
/// no runtime, so a bad setting is found before the runner starts; [`Otlp::start`] needs one.
#[derive(Debug)]
pub struct Otlp {
    exporter: opentelemetry_otlp::SpanExporter,
    resource: opentelemetry_sdk::Resource,
    sampler: SamplerSetting,
}

impl Otlp {
    /// The exporter `settings` describe (the `OTEL_*` variables as
    /// `ninetrix_telemetry::Settings::resolve` reads them), `resource` added to the resource
    /// (`service.name` is the settings').
    pub fn from_settings(
        settings: &Settings,
        resource: Vec<opentelemetry::KeyValue>,
    ) -> Result<Otlp, TelemetryError> {
        let resource = opentelemetry_sdk::Resource::builder_empty()
            .with_detector(Box::new(
                opentelemetry_sdk::resource::TelemetryResourceDetector,
            ))
            .with_attributes(
                settings
                    .resource
                    .iter()
                    .map(|(k, v)| opentelemetry::KeyValue::new(k.clone(), v.clone())),
            )
            .with_attributes(resource)
            .with_service_name(settings.service_name.clone())
            .build();
        Ok(Otlp {
            exporter: ninetrix_telemetry::span_exporter(settings)?,
            resource,
            sampler: settings.sampler,
        })
    }

    /// Starts exporting (inside a Tokio runtime).
    pub fn start(self) -> Exporter {
        Exporter::start_sampled(self.exporter, self.resource, self.sampler)
    }
}

/// The W3C `traceparent` of a turn attempt's span (`00-<trace>-<span>-<01 sampled | 00>`): sent
/// with the runner's commits of that attempt, so the API's spans of them are its children.
pub fn traceparent(thread: ThreadId, turn_seq: u64, epoch: u64, sampler: SamplerSetting) -> String {
    let trace = trace_id(thread, turn_seq);
    let span = attempt_span_id(thread, turn_seq, epoch);
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let flags = if sampled(sampler, trace) { "01" } else { "00" };
    format!("00-{}-{}-{flags}", hex(&trace), hex(&span))
}

/// Whether `sampler` keeps the trace `trace_id` (every span of a turn's trace is a root or a
/// child of one made here, so the trace ID decides for all of them alike).
pub fn sampled(sampler: SamplerSetting, trace_id: [u8; 16]) -> bool {
    let ratio = match sampler {
        SamplerSetting::AlwaysOn | SamplerSetting::ParentBasedAlwaysOn => return true,
        SamplerSetting::AlwaysOff | SamplerSetting::ParentBasedAlwaysOff => return false,
        SamplerSetting::TraceIdRatio(r) | SamplerSetting::ParentBasedTraceIdRatio(r) => r,
    };
    // As the SDK's TraceIdRatioBased: the trace ID's low 63 bits against the ratio.
    let mut low = [0; 8];
    low.copy_from_slice(&trace_id[8..]);
    let bound = (ratio.clamp(0.0, 1.0) * (1u64 << 63) as f64) as u64;
    (u64::from_be_bytes(low) >> 1) < bound
}

impl std::fmt::Debug for Exporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Exporter")
    }
}

impl Exporter {
    /// Starts the task that hands spans to `exporter`, describing them with `resource` (on the
    /// current tokio runtime: the OTLP HTTP exporter needs it).
    pub fn start<E>(exporter: E, resource: opentelemetry_sdk::Resource) -> Exporter
    where
        E: opentelemetry_sdk::trace::SpanExporter + 'static,
    {
        Exporter::start_sampled(exporter, resource, SamplerSetting::AlwaysOn)
    }

    /// [`Exporter::start`], keeping only the traces `sampler` keeps.
    pub fn start_sampled<E>(
        mut exporter: E,
        resource: opentelemetry_sdk::Resource,
        sampler: SamplerSetting,
    ) -> Exporter
    where
        E: opentelemetry_sdk::trace::SpanExporter + 'static,
    {
        exporter.set_resource(&resource);
        let (tx, rx) = mpsc::channel(MAX_QUEUED / 8);
        let dropped = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        tokio::spawn(export_loop(exporter, rx, dropped.clone()));
        Exporter {
            tx,
            dropped,
            sampler,
        }
    }

    /// The sampler the exported traces go through.
    pub fn sampler(&self) -> SamplerSetting {
        self.sampler
    }

    /// Queues finished spans; never waits. When the queue is full (the collector is slow or
    /// down), they are dropped.
    pub fn export(&self, mut spans: Vec<SpanRecord>) {
        spans.retain(|s| sampled(self.sampler, s.trace_id));
        if spans.is_empty() {
            return;
        }
        let n = spans.len() as u64;
        if self.tx.try_send(Msg::Spans(spans)).is_err() {
            self.dropped
                .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Sends what is queued, waiting at most `bound`.
    pub async fn flush(&self, bound: Duration) {
        let (done, wait) = oneshot::channel();
        let sent = tokio::time::timeout(bound, self.tx.send(Msg::Flush(done))).await;
        if matches!(sent, Ok(Ok(()))) {
            let _ = tokio::time::timeout(bound, wait).await;
        }
    }

    /// Spans dropped so far because the queue was full or the collector refused them.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(std::sync::atomic::Ordering::Relaxed)
    }
}

async fn export_loop<E: opentelemetry_sdk::trace::SpanExporter>(
    exporter: E,
    mut rx: mpsc::Receiver<Msg>,
    dropped: std::sync::Arc<std::sync::atomic::AtomicU64>,
) {
    let scope = opentelemetry::InstrumentationScope::builder("ninetrix-runner")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build();
    let mut batch: Vec<SpanRecord> = Vec::new();
    let mut waiting: Vec<oneshot::Sender<()>> = Vec::new();
    let mut warned = false;
    loop {
        // Spans wait [`LINGER`] for more (or a full batch, or a flush) before they are sent.
        let msg = if batch.is_empty() {
            rx.recv().await
        } else {
            match tokio::time::timeout(LINGER, rx.recv()).await {
                Ok(m) => m,
                Err(_) => Some(Msg::Linger),
            }
        };
        let closed = msg.is_none();
        match msg {
            Some(Msg::Linger) | None => {}
            Some(Msg::Spans(spans)) => {
                batch.extend(spans);
                if batch.len() > MAX_QUEUED {
                    let over = batch.len() - MAX_QUEUED;
                    batch.drain(..over);
                    dropped.fetch_add(over as u64, std::sync::atomic::Ordering::Relaxed);
                }
                if batch.len() < BATCH {
                    continue;
                }
            }
            Some(Msg::Flush(done)) => waiting.push(done),
        }
        while !batch.is_empty() {
            let n = batch.len().min(BATCH);
            let data: Vec<_> = batch.drain(..n).map(|r| span_data(r, &scope)).collect();
            if let Err(e) = exporter.export(data).await {
                dropped.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
                if !warned {
                    tracing::warn!(
                        "OpenTelemetry: {n} span(s) could not be exported ({e}); spans are dropped while the collector does not take them"
                    );
                    warned = true;
                }
            } else {
                warned = false;
            }
        }
        for w in waiting.drain(..) {
            let _ = w.send(());
        }
        if closed {
            return;
        }
    }
}

fn span_data(
    r: SpanRecord,
    scope: &opentelemetry::InstrumentationScope,
) -> opentelemetry_sdk::trace::SpanData {
    use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
    let context = |trace: [u8; 16], span: [u8; 8], remote| {
        SpanContext::new(
            TraceId::from_bytes(trace),
            SpanId::from_bytes(span),
            TraceFlags::SAMPLED,
            remote,
            TraceState::default(),
        )
    };
    let mut links = opentelemetry_sdk::trace::SpanLinks::default();
    links.links = r
        .links
        .into_iter()
        .map(|l| {
            opentelemetry::trace::Link::new(
                context(l.trace_id, l.span_id, true),
                key_values(l.attributes),
                0,
            )
        })
        .collect();
    opentelemetry_sdk::trace::SpanData {
        span_context: context(r.trace_id, r.span_id, false),
        parent_span_id: r.parent.map_or(SpanId::INVALID, SpanId::from_bytes),
        parent_span_is_remote: false,
        span_kind: match r.kind {
            Kind::Internal => opentelemetry::trace::SpanKind::Internal,
            Kind::Client => opentelemetry::trace::SpanKind::Client,
        },
        name: r.name.into(),
        start_time: r.start.into(),
        end_time: r.end.into(),
        attributes: key_values(r.attributes),
        dropped_attributes_count: 0,
        events: opentelemetry_sdk::trace::SpanEvents::default(),
        links,
        status: match r.status {
            Status::Unset => opentelemetry::trace::Status::Unset,
            Status::Ok => opentelemetry::trace::Status::Ok,
            Status::Error(d) => opentelemetry::trace::Status::error(d),
        },
        instrumentation_scope: scope.clone(),
    }
}

fn key_values(attributes: Vec<(&'static str, Attr)>) -> Vec<opentelemetry::KeyValue> {
    use opentelemetry::{KeyValue, StringValue, Value};
    attributes
        .into_iter()
        .map(|(k, v)| {
            let v = match v {
                Attr::Str(s) => Value::from(s),
                Attr::Int(i) => Value::from(i),
                Attr::Bool(b) => Value::from(b),
                Attr::F64(f) => Value::from(f),
                Attr::Strs(items) => Value::Array(
                    items
                        .into_iter()
                        .map(StringValue::from)
                        .collect::<Vec<_>>()
                        .into(),
                ),
            };
            KeyValue::new(k, v)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::Observed;
    use super::super::testkit::*;
    use super::*;
    use ninetrix_proto::api::TurnAttempt;
    use ninetrix_proto::events::TraceEvent;
    #[test]
    fn sampling_keeps_or_drops_a_whole_trace() {
        let ids: Vec<[u8; 16]> = (0..1000).map(|n| trace_id(thread(), n)).collect();
        assert!(ids.iter().all(|&id| sampled(SamplerSetting::AlwaysOn, id)));
        assert!(!ids.iter().any(|&id| sampled(SamplerSetting::AlwaysOff, id)));
        let kept = ids
            .iter()
            .filter(|&&id| sampled(SamplerSetting::TraceIdRatio(0.25), id))
            .count();
        assert!((150..350).contains(&kept), "{kept} of 1000 at 0.25");
        // The same answer for every attempt and child of a turn: they share the trace ID.
        let id = trace_id(thread(), 7);
        assert_eq!(
            sampled(SamplerSetting::ParentBasedTraceIdRatio(0.5), id),
            sampled(SamplerSetting::ParentBasedTraceIdRatio(0.5), id)
        );
    }

    #[tokio::test]
    async fn the_exporter_sends_the_records_over_otlp_http() {
        use opentelemetry_otlp::WithExportConfig as _;
        let receiver = ninetrix_telemetry::receiver::Receiver::start()
            .await
            .unwrap();
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(receiver.traces_url())
            .build()
            .unwrap();
        let resource = opentelemetry_sdk::Resource::builder()
            .with_service_name("helper")
            .build();
        let export = Exporter::start(exporter, resource);
        let mut s = machine(2);
        s.observe(
            t(0),
            Observed::Interrupted(TurnAttempt {
                epoch: 1,
                started_at: t(-100),
                turn_boot: 0,
            }),
        );
        let mut records = feed(
            &mut s,
            5,
            TraceEvent::TurnResumed(ev::TurnResumed {
                turn_seq: 1,
                seq: 1,
            }),
        );
        records.extend(feed(&mut s, 50, llm("end_turn", 10)));
        records.extend(feed(&mut s, 60, completed(1, true)));
        export.export(records);
        export.flush(Duration::from_secs(10)).await;
        let got = receiver
            .wait_for(|s| s.len() == 3, Duration::from_secs(10))
            .await
            .unwrap();
        let hex = |b: &[u8]| b.iter().map(|b| format!("{b:02x}")).collect::<String>();
        let old = got
            .iter()
            .find(|s| s.bool_attr("ninetrix.interrupted") == Some(true))
            .unwrap();
        let new = got
            .iter()
            .find(|s| s.name == "invoke_agent helper" && s.links.len() == 1)
            .unwrap();
        let chat = got.iter().find(|s| s.name == "chat claude-x").unwrap();
        assert_eq!(old.span_id, hex(&attempt_span_id(thread(), 1, 1)));
        assert_eq!(new.trace_id, hex(&trace_id(thread(), 1)));
        assert_eq!(new.links[0].span_id, old.span_id);
        assert_eq!(chat.parent_span_id.as_deref(), Some(new.span_id.as_str()));
        assert_eq!(
            chat.resource.get("service.name").and_then(|v| v.as_str()),
            Some("helper")
        );
        assert_eq!(chat.start_unix_nano, 1_800_000_000_040_000_000);
        assert_eq!(export.dropped(), 0);
    }

    #[tokio::test]
    async fn an_unreachable_collector_drops_spans_without_waiting() {
        use opentelemetry_otlp::WithExportConfig as _;
        // A port nothing listens on.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(format!("http://127.0.0.1:{port}/v1/traces"))
            .build()
            .unwrap();
        let export = Exporter::start(exporter, opentelemetry_sdk::Resource::builder().build());
        let mut s = machine(1);
        feed(&mut s, 0, started(1));
        // Far more than the queue holds: every call returns at once.
        for i in 0..(MAX_QUEUED as i64 * 2) {
            export.export(feed(&mut s, i, llm("tool_use", 1)));
        }
        export.flush(Duration::from_secs(10)).await;
        assert!(export.dropped() > 0);
    }
}
