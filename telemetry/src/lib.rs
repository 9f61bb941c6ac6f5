//! OpenTelemetry export for ninetrix (issue 18): the OTLP/HTTP protobuf span exporter, configured
//! from the standard `OTEL_*` variables, shared by the runner and the checkpoint API.
//!
//! [`Telemetry::from_env`] is `None` unless an OTLP endpoint is set, so a process without one
//! pays nothing. With one, spans go through a batch processor on the Tokio runtime whose queue
//! is bounded: when it is full (a slow or unreachable collector) new spans are dropped, never
//! waited for, so export never holds up a request or a turn.
//!
//! The variables are read once, here, through a lookup function ([`Settings::resolve`]), and
//! applied to the SDK programmatically, so a bad value is a startup error that names the
//! variable instead of a silent fallback. What the libraries read themselves and this crate
//! leaves to them: the batch processor's `OTEL_BSP_*` and the span limits `OTEL_SPAN_*_LIMIT`
//! (opentelemetry_sdk), and `OTEL_EXPORTER_OTLP_[TRACES_]COMPRESSION` (opentelemetry-otlp; no
//! compression is built in, so setting one is an error from the exporter).
//!
//! Header values are secrets: they are never logged, never shown in an error, and the `Debug`
//! form of [`Settings`] shows their names only.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub use opentelemetry;
pub use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
pub use opentelemetry_otlp;
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
pub use opentelemetry_sdk;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
/// The tracer handed to instrumented code: cheap to clone; a span it starts is exported by the
/// [`Telemetry`] that made it.
pub use opentelemetry_sdk::trace::SdkTracer as Tracer;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, Sampler, SdkTracerProvider, SpanData, SpanExporter,
};

/// The standard variables this crate reads (and the ones `ninetrix up` passes on).
pub mod vars {
    /// Base URL of the collector; `/v1/traces` is appended.
    pub const ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
    /// Full URL of the collector's traces route, used as is.
    pub const TRACES_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
    /// Request headers, `name=value,…` (values percent-encoded). A secret.
    pub const HEADERS: &str = "OTEL_EXPORTER_OTLP_HEADERS";
    /// Request headers for traces only (instead of [`HEADERS`]). A secret.
    pub const TRACES_HEADERS: &str = "OTEL_EXPORTER_OTLP_TRACES_HEADERS";
    /// `http/protobuf` (the only one supported).
    pub const PROTOCOL: &str = "OTEL_EXPORTER_OTLP_PROTOCOL";
    /// `http/protobuf` for traces (instead of [`PROTOCOL`]).
    pub const TRACES_PROTOCOL: &str = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL";
    /// Export timeout in milliseconds.
    pub const TIMEOUT: &str = "OTEL_EXPORTER_OTLP_TIMEOUT";
    /// Export timeout for traces in milliseconds (instead of [`TIMEOUT`]).
    pub const TRACES_TIMEOUT: &str = "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT";
    /// The `service.name` resource attribute.
    pub const SERVICE_NAME: &str = "OTEL_SERVICE_NAME";
    /// More resource attributes, `key=value,…` (values percent-encoded).
    pub const RESOURCE_ATTRIBUTES: &str = "OTEL_RESOURCE_ATTRIBUTES";
    /// The sampler: `always_on`, `always_off`, `traceidratio`, `parentbased_always_on` (the
    /// default), `parentbased_always_off`, `parentbased_traceidratio`.
    pub const SAMPLER: &str = "OTEL_TRACES_SAMPLER";
    /// The ratio of the `*traceidratio` samplers, 0 to 1 (default 1).
    pub const SAMPLER_ARG: &str = "OTEL_TRACES_SAMPLER_ARG";
    /// `true` turns export off whatever else is set.
    pub const SDK_DISABLED: &str = "OTEL_SDK_DISABLED";

    /// The variables that are secrets: passed to containers as files under `/run/secrets/`,
    /// never as environment or labels.
    pub const SECRET: [&str; 2] = [HEADERS, TRACES_HEADERS];

    /// The variables that are not secrets and that `ninetrix up` passes to agent containers
    /// when set (the `OTEL_BSP_*` and span limit variables the SDK reads are passed too; see
    /// [`passed_to_containers`](super::passed_to_containers)).
    pub const PASSED: [&str; 11] = [
        ENDPOINT,
        TRACES_ENDPOINT,
        PROTOCOL,
        TRACES_PROTOCOL,
        TIMEOUT,
        TRACES_TIMEOUT,
        SERVICE_NAME,
        RESOURCE_ATTRIBUTES,
        SAMPLER,
        SAMPLER_ARG,
        SDK_DISABLED,
    ];
}

/// Where a container finds its secrets: `/run/secrets/<NAME>`.
pub const SECRETS_DIR: &str = "/run/secrets";

/// Whether a variable of the environment is one `ninetrix up` passes to containers: the
/// [`vars::PASSED`] ones, plus the batch processor's `OTEL_BSP_*` and the span limits
/// (`OTEL_SPAN_*`), which the SDK reads itself. Never a secret ([`vars::SECRET`]).
pub fn passed_to_containers(name: &str) -> bool {
    vars::PASSED.contains(&name)
        || name.starts_with("OTEL_BSP_")
        || (name.starts_with("OTEL_SPAN_") && name.ends_with("_LIMIT"))
}

/// Why telemetry could not be set up. Every message names the variable and says what to do; none
/// repeats a header value.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// A protocol other than `http/protobuf`.
    #[error(
        "{variable} is `{value}`, but ninetrix exports traces over OTLP/HTTP protobuf only: set it to `http/protobuf` or unset it"
    )]
    Protocol {
        /// The variable.
        variable: &'static str,
        /// Its value.
        value: String,
    },
    /// An endpoint that is not an `http(s)://` URL.
    #[error(
        "{variable} is `{value}`, which is not an http:// or https:// URL; set it to the collector's OTLP/HTTP address, e.g. http://jaeger:4318"
    )]
    Endpoint {
        /// The variable.
        variable: &'static str,
        /// Its value.
        value: String,
    },
    /// Headers that cannot be sent (the value is never shown).
    #[error(
        "{source_name} is malformed: {reason}; write it as `name=value,name2=value2` with percent-encoded values"
    )]
    Headers {
        /// The variable or the secret file it was read from.
        source_name: String,
        /// What is wrong (names a header, never a value).
        reason: String,
    },
    /// The headers secret file exists but cannot be read.
    #[error("cannot read the OTLP headers from {path}")]
    HeadersFile {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A timeout that is not a number of milliseconds.
    #[error("{variable} is `{value}`, which is not a whole number of milliseconds; e.g. 10000")]
    Timeout {
        /// The variable.
        variable: &'static str,
        /// Its value.
        value: String,
    },
    /// An unknown sampler.
    #[error(
        "OTEL_TRACES_SAMPLER is `{value}`, which ninetrix does not support; use always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio"
    )]
    Sampler {
        /// Its value.
        value: String,
    },
    /// A sampling ratio out of range.
    #[error(
        "OTEL_TRACES_SAMPLER_ARG is `{value}`, but `{sampler}` needs a ratio between 0 and 1, e.g. 0.25"
    )]
    SamplerArg {
        /// The sampler it is for.
        sampler: String,
        /// Its value.
        value: String,
    },
    /// Resource attributes that cannot be read.
    #[error("OTEL_RESOURCE_ATTRIBUTES is malformed: {reason}; write it as `key=value,key2=value2`")]
    ResourceAttributes {
        /// What is wrong.
        reason: String,
    },
    /// Started outside a Tokio runtime.
    #[error(
        "the OpenTelemetry exporter must be started inside a Tokio runtime (a bug in ninetrix)"
    )]
    NoRuntime,
    /// The exporter refused its configuration.
    #[error(
        "cannot build the OTLP exporter: {0}; check the OTEL_EXPORTER_OTLP_* variables (compression is not supported)"
    )]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
}

/// The sampler chosen by `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SamplerSetting {
    /// Every trace.
    AlwaysOn,
    /// No trace.
    AlwaysOff,
    /// This fraction of traces, by trace ID.
    TraceIdRatio(f64),
    /// As the parent says; every root.
    ParentBasedAlwaysOn,
    /// As the parent says; no root.
    ParentBasedAlwaysOff,
    /// As the parent says; this fraction of roots.
    ParentBasedTraceIdRatio(f64),
}

impl SamplerSetting {
    fn sampler(self) -> Sampler {
        match self {
            Self::AlwaysOn => Sampler::AlwaysOn,
            Self::AlwaysOff => Sampler::AlwaysOff,
            Self::TraceIdRatio(r) => Sampler::TraceIdRatioBased(r),
            Self::ParentBasedAlwaysOn => Sampler::ParentBased(Box::new(Sampler::AlwaysOn)),
            Self::ParentBasedAlwaysOff => Sampler::ParentBased(Box::new(Sampler::AlwaysOff)),
            Self::ParentBasedTraceIdRatio(r) => {
                Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(r)))
            }
        }
    }
}

/// Everything the exporter is built from, resolved from the variables.
#[derive(Clone, PartialEq)]
pub struct Settings {
    /// The full URL spans are POSTed to (`…/v1/traces`).
    pub endpoint: String,
    /// Extra request headers (secret values).
    pub headers: Vec<(String, String)>,
    /// The export timeout (`None`: the exporter's default, 10 s).
    pub timeout: Option<Duration>,
    /// The sampler.
    pub sampler: SamplerSetting,
    /// The `service.name` resource attribute.
    pub service_name: String,
    /// Resource attributes from `OTEL_RESOURCE_ATTRIBUTES` (without `service.name`).
    pub resource: Vec<(String, String)>,
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let header_names: Vec<&str> = self.headers.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("Settings")
            .field("endpoint", &self.endpoint)
            .field("headers", &header_names)
            .field("timeout", &self.timeout)
            .field("sampler", &self.sampler)
            .field("service_name", &self.service_name)
            .field("resource", &self.resource)
            .finish()
    }
}

impl Settings {
    /// Export to `endpoint` (the full traces URL) as `service_name`, with the defaults for the
    /// rest (tests, and callers that configure without variables).
    pub fn new(endpoint: impl Into<String>, service_name: impl Into<String>) -> Self {
        Self {
            endpoint: endpoint.into(),
            headers: Vec::new(),
            timeout: None,
            sampler: SamplerSetting::ParentBasedAlwaysOn,
            service_name: service_name.into(),
            resource: Vec::new(),
        }
    }

    /// The settings the variables ask for: `None` when no endpoint is set or
    /// `OTEL_SDK_DISABLED=true`. `lookup` reads a variable (an empty value counts as unset).
    /// When neither headers variable is set, the headers are read from the secret files
    /// `<secrets_dir>/OTEL_EXPORTER_OTLP_TRACES_HEADERS` or
    /// `<secrets_dir>/OTEL_EXPORTER_OTLP_HEADERS`, if one exists.
    pub fn resolve(
        lookup: impl Fn(&str) -> Option<String>,
        secrets_dir: Option<&Path>,
        default_service_name: &str,
    ) -> Result<Option<Settings>, TelemetryError> {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        if get(vars::SDK_DISABLED).is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        let endpoint = if let Some(url) = get(vars::TRACES_ENDPOINT) {
            // The signal's own variable is the full URL (OTLP exporter spec).
            let url = url.trim();
            check_endpoint(vars::TRACES_ENDPOINT, url)?;
            url.to_string()
        } else if let Some(base) = get(vars::ENDPOINT) {
            // The generic one is a base URL the signal's path is appended to.
            let base = base.trim();
            check_endpoint(vars::ENDPOINT, base)?;
            format!("{}/v1/traces", base.strip_suffix('/').unwrap_or(base))
        } else {
            return Ok(None);
        };
        for variable in [vars::TRACES_PROTOCOL, vars::PROTOCOL] {
            if let Some(value) = get(variable) {
                if value.trim() != "http/protobuf" {
                    return Err(TelemetryError::Protocol {
                        variable,
                        value: value.trim().to_string(),
                    });
                }
                break;
            }
        }
        let headers = resolve_headers(&get, secrets_dir)?;
        let timeout = [vars::TRACES_TIMEOUT, vars::TIMEOUT]
            .into_iter()
            .find_map(|variable| get(variable).map(|v| (variable, v)))
            .map(|(variable, value)| {
                value
                    .trim()
                    .parse::<u64>()
                    .map(Duration::from_millis)
                    .map_err(|_| TelemetryError::Timeout {
                        variable,
                        value: value.trim().to_string(),
                    })
            })
            .transpose()?;
        let sampler = parse_sampler(get(vars::SAMPLER), get(vars::SAMPLER_ARG))?;
        let mut resource = match get(vars::RESOURCE_ATTRIBUTES) {
            Some(text) => parse_resource_attributes(&text)?,
            None => Vec::new(),
        };
        let from_attributes = resource
            .iter()
            .position(|(k, _)| k == "service.name")
            .map(|i| resource.remove(i).1);
        let service_name = get(vars::SERVICE_NAME)
            .map(|s| s.trim().to_string())
            .or(from_attributes)
            .unwrap_or_else(|| default_service_name.to_string());
        Ok(Some(Settings {
            endpoint,
            headers,
            timeout,
            sampler,
            service_name,
            resource,
        }))
    }
}

fn check_endpoint(variable: &'static str, endpoint: &str) -> Result<(), TelemetryError> {
    let lower = endpoint.to_ascii_lowercase();
    let rest = lower
        .strip_prefix("http://")
        .or_else(|| lower.strip_prefix("https://"));
    match rest {
        Some(rest) if !rest.is_empty() && !rest.starts_with('/') && !rest.contains(' ') => Ok(()),
        _ => Err(TelemetryError::Endpoint {
            variable,
            value: without_userinfo(endpoint),
        }),
    }
}

/// A URL as it may be shown: credentials in it (`user:password@`) become `***@`.
fn without_userinfo(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) if !scheme.is_empty() => format!("{scheme}://***{}", &rest[at..]),
        Some(at) => format!("***{}", &rest[at..]),
        None => url.to_string(),
    }
}

/// The headers: the traces variable, else the generic one, else the secret file of either.
fn resolve_headers(
    get: &impl Fn(&str) -> Option<String>,
    secrets_dir: Option<&Path>,
) -> Result<Vec<(String, String)>, TelemetryError> {
    for variable in [vars::TRACES_HEADERS, vars::HEADERS] {
        if let Some(text) = get(variable) {
            return parse_headers(&text, variable);
        }
    }
    let Some(dir) = secrets_dir else {
        return Ok(Vec::new());
    };
    for name in [vars::TRACES_HEADERS, vars::HEADERS] {
        let path = dir.join(name);
        match std::fs::read_to_string(&path) {
            Ok(text) => return parse_headers(&text, &path.display().to_string()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(TelemetryError::HeadersFile { path, source }),
        }
    }
    Ok(Vec::new())
}

/// Parses `name=value,…` (W3C baggage-like, as the OTLP exporter spec says): names are HTTP
/// header names, values percent-decoded. Errors name the header, never its value.
pub fn parse_headers(
    text: &str,
    source_name: &str,
) -> Result<Vec<(String, String)>, TelemetryError> {
    let bad = |reason: String| TelemetryError::Headers {
        source_name: source_name.to_string(),
        reason,
    };
    let mut headers = Vec::new();
    for (i, entry) in text.split(',').enumerate() {
        let entry = entry.trim();
        if entry.is_empty() {
            continue;
        }
        let Some((name, value)) = entry.split_once('=') else {
            return Err(bad(format!("entry {} has no `=`", i + 1)));
        };
        let name = name.trim();
        if name.is_empty() || !name.bytes().all(is_token_byte) {
            return Err(bad(format!(
                "entry {} does not start with a valid header name",
                i + 1
            )));
        }
        let value = percent_decode(value.trim()).ok_or_else(|| {
            bad(format!(
                "the value of `{name}` is not valid percent-encoding"
            ))
        })?;
        if value.is_empty() {
            return Err(bad(format!("`{name}` has an empty value")));
        }
        if value.bytes().any(|b| (b < 0x20 && b != b'\t') || b == 0x7f) {
            return Err(bad(format!(
                "the value of `{name}` holds a control character"
            )));
        }
        headers.push((name.to_ascii_lowercase(), value));
    }
    Ok(headers)
}

/// RFC 9110 `tchar`.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// `%XX` decoding into UTF-8; `None` for a bad escape or invalid UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn parse_sampler(
    sampler: Option<String>,
    arg: Option<String>,
) -> Result<SamplerSetting, TelemetryError> {
    let Some(name) = sampler else {
        return Ok(SamplerSetting::ParentBasedAlwaysOn);
    };
    let name = name.trim().to_ascii_lowercase();
    let ratio = || -> Result<f64, TelemetryError> {
        match &arg {
            None => Ok(1.0),
            Some(value) => value
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|r| (0.0..=1.0).contains(r))
                .ok_or_else(|| TelemetryError::SamplerArg {
                    sampler: name.clone(),
                    value: value.trim().to_string(),
                }),
        }
    };
    Ok(match name.as_str() {
        "always_on" => SamplerSetting::AlwaysOn,
        "always_off" => SamplerSetting::AlwaysOff,
        "traceidratio" => SamplerSetting::TraceIdRatio(ratio()?),
        "parentbased_always_on" => SamplerSetting::ParentBasedAlwaysOn,
        "parentbased_always_off" => SamplerSetting::ParentBasedAlwaysOff,
        "parentbased_traceidratio" => SamplerSetting::ParentBasedTraceIdRatio(ratio()?),
        _ => return Err(TelemetryError::Sampler { value: name }),
    })
}

/// Parses `OTEL_RESOURCE_ATTRIBUTES`: `key=value,…`, values percent-decoded.
fn parse_resource_attributes(text: &str) -> Result<Vec<(String, String)>, TelemetryError> {
    let mut attributes: Vec<(String, String)> = Vec::new();
    for (i, entry) in text.split(',').enumerate() {
        let entry = entry.trim();
        if entry.is_empty() {
            continue;
        }
        let bad = |what: &str| TelemetryError::ResourceAttributes {
            reason: format!("entry {} {what}", i + 1),
        };
        let (key, value) = entry.split_once('=').ok_or_else(|| bad("has no `=`"))?;
        let key = key.trim();
        if key.is_empty() {
            return Err(bad("has no key"));
        }
        let value =
            percent_decode(value.trim()).ok_or_else(|| bad("is not valid percent-encoding"))?;
        attributes.retain(|(k, _)| k != key);
        attributes.push((key.to_string(), value));
    }
    Ok(attributes)
}

/// The process's span export: a tracer provider with a bounded batch processor exporting over
/// OTLP/HTTP protobuf. Make tracers with [`Telemetry::tracer`]; call [`Telemetry::shutdown`] on
/// exit to send what is queued.
#[derive(Debug)]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
    endpoint: String,
}

impl Telemetry {
    /// Export as the process environment says (see [`Settings::resolve`]; header secret files
    /// under [`SECRETS_DIR`]): `None` when no endpoint is set. `default_service_name` stands
    /// when neither `OTEL_SERVICE_NAME` nor a `service.name` in `OTEL_RESOURCE_ATTRIBUTES` is
    /// set; `resource` is added to the resource (and wins over `OTEL_RESOURCE_ATTRIBUTES`).
    /// Call it inside a Tokio runtime: the batch processor runs on it.
    pub fn from_env(
        default_service_name: &str,
        resource: Vec<KeyValue>,
    ) -> Result<Option<Telemetry>, TelemetryError> {
        Self::from_lookup(
            |name| std::env::var(name).ok(),
            Some(Path::new(SECRETS_DIR)),
            default_service_name,
            resource,
        )
    }

    /// [`Telemetry::from_env`] with the variables read through `lookup` and the header secret
    /// files under `secrets_dir`.
    pub fn from_lookup(
        lookup: impl Fn(&str) -> Option<String>,
        secrets_dir: Option<&Path>,
        default_service_name: &str,
        resource: Vec<KeyValue>,
    ) -> Result<Option<Telemetry>, TelemetryError> {
        match Settings::resolve(lookup, secrets_dir, default_service_name)? {
            Some(settings) => Self::start(settings, resource).map(Some),
            None => Ok(None),
        }
    }

    /// Starts exporting with `settings`, `resource` added to the resource. Inside a Tokio
    /// runtime.
    pub fn start(settings: Settings, resource: Vec<KeyValue>) -> Result<Telemetry, TelemetryError> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(TelemetryError::NoRuntime);
        }
        let shown = without_userinfo(&settings.endpoint);
        let exporter = Logged {
            inner: span_exporter(&settings)?,
            endpoint: shown.clone(),
            failing: AtomicBool::new(false),
        };
        // The queue is bounded (OTEL_BSP_MAX_QUEUE_SIZE, default 2048): a span that does not fit
        // is dropped at once.
        let batch = opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor::builder(
            exporter,
            opentelemetry_sdk::runtime::Tokio,
        )
        .with_batch_config(BatchConfigBuilder::default().build())
        .build();
        let resource = Resource::builder_empty()
            .with_detector(Box::new(
                opentelemetry_sdk::resource::TelemetryResourceDetector,
            ))
            .with_attributes(
                settings
                    .resource
                    .iter()
                    .map(|(k, v)| KeyValue::new(k.clone(), v.clone())),
            )
            .with_attributes(resource)
            .with_service_name(settings.service_name.clone())
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(batch)
            .with_sampler(settings.sampler.sampler())
            .with_resource(resource)
            .build();
        Ok(Telemetry {
            provider: Some(provider),
            endpoint: shown,
        })
    }

    /// Where spans go, as it may be logged (no headers; credentials in the URL masked).
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// A tracer for the instrumentation scope `scope` (e.g. `ninetrix-api`).
    pub fn tracer(&self, scope: &'static str) -> Tracer {
        match &self.provider {
            Some(provider) => provider.tracer(scope),
            None => SdkTracerProvider::builder().build().tracer(scope),
        }
    }

    /// Exports what is queued and stops, waiting at most `timeout`; what is not sent by then is
    /// dropped. Tracers made earlier become no-ops. Blocks the calling thread: call it outside
    /// async code, or from a multi-threaded runtime (the export runs on the runtime).
    pub fn shutdown(mut self, timeout: Duration) {
        self.stop(timeout);
    }

    fn stop(&mut self, timeout: Duration) {
        let Some(provider) = self.provider.take() else {
            return;
        };
        // The SDK's shutdown blocks until the batch task answers and ignores the timeout; wait
        // for it on a thread of its own, at most `timeout`.
        let (done, wait) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("otel-shutdown".into())
            .spawn(move || {
                let _ = done.send(provider.shutdown_with_timeout(timeout));
            });
        if spawned.is_err() {
            tracing::warn!("cannot start a thread to flush the OpenTelemetry spans; dropping them");
            return;
        }
        match wait.recv_timeout(timeout) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!("OpenTelemetry shutdown: {e}"),
            Err(_) => tracing::warn!(
                "OpenTelemetry spans not sent within {timeout:?} of shutdown were dropped"
            ),
        }
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(1));
    }
}

/// The OTLP exporter, logging (once per outage) when the collector cannot be reached. The
/// messages carry the endpoint and the error, never a header.
#[derive(Debug)]
struct Logged {
    inner: opentelemetry_otlp::SpanExporter,
    endpoint: String,
    failing: AtomicBool,
}

impl SpanExporter for Logged {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let count = batch.len();
        let result = self.inner.export(batch).await;
        match &result {
            Ok(()) => {
                if self.failing.swap(false, Ordering::Relaxed) {
                    tracing::info!(endpoint = %self.endpoint, "OpenTelemetry export works again");
                }
            }
            Err(e) => {
                if !self.failing.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        endpoint = %self.endpoint,
                        "OpenTelemetry export failed, {count} spans dropped (further failures are not logged until it works again): {e}"
                    );
                }
            }
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(feature = "receiver")]
pub mod receiver;

/// The OTLP/HTTP protobuf span exporter `settings` describe (endpoint, headers, timeout), on
/// [`http_client`]: the one exporter the API's provider and the runner's own export task use.
pub fn span_exporter(
    settings: &Settings,
) -> Result<opentelemetry_otlp::SpanExporter, TelemetryError> {
    let headers: HashMap<String, String> = settings.headers.iter().cloned().collect();
    let mut builder = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(http_client())
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(settings.endpoint.clone())
        .with_headers(headers);
    if let Some(timeout) = settings.timeout {
        builder = builder.with_timeout(timeout);
    }
    Ok(builder.build()?)
}

/// The exporter's HTTP client: the one every ninetrix process uses
/// ([`ninetrix_client::http::builder`]: bundled web PKI roots, so it works in a `FROM scratch`
/// image whose platform store the exporter's default client would fail on; DNS through hickory),
/// with the OTLP default request timeout: an export that takes longer is given up (its spans
/// dropped).
pub fn http_client() -> reqwest::Client {
    ninetrix_client::http::builder()
        .timeout(std::time::Duration::from_secs(10))
        .build()
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    fn resolve(pairs: &[(&str, &str)]) -> Result<Option<Settings>, TelemetryError> {
        Settings::resolve(env(pairs), None, "svc")
    }

    #[test]
    fn nothing_is_exported_without_an_endpoint_or_when_disabled() {
        assert!(resolve(&[]).unwrap().is_none());
        assert!(resolve(&[(vars::ENDPOINT, "  ")]).unwrap().is_none());
        assert!(
            resolve(&[
                (vars::ENDPOINT, "http://c:4318"),
                (vars::SDK_DISABLED, "TRUE")
            ])
            .unwrap()
            .is_none()
        );
        assert!(
            resolve(&[
                (vars::ENDPOINT, "http://c:4318"),
                (vars::SDK_DISABLED, "false")
            ])
            .unwrap()
            .is_some()
        );
    }

    #[test]
    fn the_generic_endpoint_gets_v1_traces_and_the_traces_one_is_used_as_is() {
        let s = resolve(&[(vars::ENDPOINT, "http://jaeger:4318")])
            .unwrap()
            .unwrap();
        assert_eq!(s.endpoint, "http://jaeger:4318/v1/traces");
        let s = resolve(&[(vars::ENDPOINT, "https://c.example/otlp/")])
            .unwrap()
            .unwrap();
        assert_eq!(s.endpoint, "https://c.example/otlp/v1/traces");
        let s = resolve(&[
            (vars::ENDPOINT, "http://ignored:4318"),
            (vars::TRACES_ENDPOINT, "http://c:4318/custom/path"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(s.endpoint, "http://c:4318/custom/path");
        assert_eq!(
            without_userinfo("https://u:hunter2@c.example:4318/v1/traces?x=a@b"),
            "https://***@c.example:4318/v1/traces?x=a@b"
        );
        let e = resolve(&[(vars::TRACES_ENDPOINT, "ftp://u:hunter2@c/")]).unwrap_err();
        assert!(!e.to_string().contains("hunter2"), "{e}");
        let e = resolve(&[(vars::ENDPOINT, "jaeger:4318")]).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("OTEL_EXPORTER_OTLP_ENDPOINT is `jaeger:4318`"),
            "{e}"
        );
    }

    #[test]
    fn only_http_protobuf_is_accepted_and_the_error_names_the_variable() {
        let ok = resolve(&[
            (vars::ENDPOINT, "http://c:4318"),
            (vars::PROTOCOL, "http/protobuf"),
        ]);
        assert!(ok.unwrap().is_some());
        let e =
            resolve(&[(vars::ENDPOINT, "http://c:4318"), (vars::PROTOCOL, "grpc")]).unwrap_err();
        assert!(matches!(
            e,
            TelemetryError::Protocol {
                variable: vars::PROTOCOL,
                ..
            }
        ));
        assert!(
            e.to_string()
                .contains("OTEL_EXPORTER_OTLP_PROTOCOL is `grpc`"),
            "{e}"
        );
        // The signal's own variable wins over the generic one.
        let ok = resolve(&[
            (vars::ENDPOINT, "http://c:4318"),
            (vars::PROTOCOL, "grpc"),
            (vars::TRACES_PROTOCOL, "http/protobuf"),
        ]);
        assert!(ok.unwrap().is_some());
        let e = resolve(&[
            (vars::ENDPOINT, "http://c:4318"),
            (vars::TRACES_PROTOCOL, "http/json"),
        ])
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"),
            "{e}"
        );
    }

    #[test]
    fn headers_are_decoded_the_traces_variable_wins_and_errors_never_show_values() {
        let s = resolve(&[
            (vars::ENDPOINT, "http://c:4318"),
            (
                vars::HEADERS,
                "Authorization=Basic%20c2VjcmV0 , x-tenant=a%3Db,",
            ),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            s.headers,
            [
                ("authorization".to_string(), "Basic c2VjcmV0".to_string()),
                ("x-tenant".to_string(), "a=b".to_string())
            ]
        );
        let debug = format!("{s:?}");
        assert!(!debug.contains("c2VjcmV0"), "{debug}");
        let s = resolve(&[
            (vars::ENDPOINT, "http://c:4318"),
            (vars::HEADERS, "a=1"),
            (vars::TRACES_HEADERS, "b=2"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(s.headers, [("b".to_string(), "2".to_string())]);
        for bad in [
            "token-hunter2",
            "bad name=hunter2",
            "k=%zzhunter2",
            "k=hunter2%0A",
        ] {
            let e =
                resolve(&[(vars::ENDPOINT, "http://c:4318"), (vars::HEADERS, bad)]).unwrap_err();
            let message = e.to_string();
            assert!(
                message.starts_with("OTEL_EXPORTER_OTLP_HEADERS is malformed"),
                "{message}"
            );
            assert!(!message.contains("hunter2"), "{message}");
        }
    }

    #[test]
    fn headers_come_from_the_secret_file_when_no_variable_is_set() {
        let dir = std::env::temp_dir().join(format!("ninetrix-telemetry-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(vars::HEADERS), "authorization=Bearer%20s3cret\n").unwrap();
        let endpoint = [(vars::ENDPOINT, "http://c:4318")];
        let s = Settings::resolve(env(&endpoint), Some(&dir), "svc")
            .unwrap()
            .unwrap();
        assert_eq!(
            s.headers,
            [("authorization".to_string(), "Bearer s3cret".to_string())]
        );
        // The traces file wins over the generic one; a variable wins over both.
        std::fs::write(dir.join(vars::TRACES_HEADERS), "x-traces=1").unwrap();
        let s = Settings::resolve(env(&endpoint), Some(&dir), "svc")
            .unwrap()
            .unwrap();
        assert_eq!(s.headers, [("x-traces".to_string(), "1".to_string())]);
        let with_var = [
            (vars::ENDPOINT, "http://c:4318"),
            (vars::HEADERS, "x-env=2"),
        ];
        let s = Settings::resolve(env(&with_var), Some(&dir), "svc")
            .unwrap()
            .unwrap();
        assert_eq!(s.headers, [("x-env".to_string(), "2".to_string())]);
        std::fs::write(dir.join(vars::TRACES_HEADERS), "no-equals-s3cret").unwrap();
        let e = Settings::resolve(env(&endpoint), Some(&dir), "svc").unwrap_err();
        assert!(
            e.to_string()
                .contains(&dir.join(vars::TRACES_HEADERS).display().to_string())
        );
        assert!(!e.to_string().contains("s3cret"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
        let s = Settings::resolve(env(&endpoint), Some(&dir), "svc")
            .unwrap()
            .unwrap();
        assert!(s.headers.is_empty(), "no file, no headers");
    }

    #[test]
    fn timeouts_are_milliseconds_and_the_traces_variable_wins() {
        let s = resolve(&[(vars::ENDPOINT, "http://c:4318"), (vars::TIMEOUT, "2500")])
            .unwrap()
            .unwrap();
        assert_eq!(s.timeout, Some(Duration::from_millis(2500)));
        let s = resolve(&[
            (vars::ENDPOINT, "http://c:4318"),
            (vars::TIMEOUT, "2500"),
            (vars::TRACES_TIMEOUT, "100"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(s.timeout, Some(Duration::from_millis(100)));
        assert_eq!(
            resolve(&[(vars::ENDPOINT, "http://c:4318")])
                .unwrap()
                .unwrap()
                .timeout,
            None
        );
        let e = resolve(&[(vars::ENDPOINT, "http://c:4318"), (vars::TIMEOUT, "10s")]).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("OTEL_EXPORTER_OTLP_TIMEOUT is `10s`"),
            "{e}"
        );
    }

    #[test]
    fn samplers_follow_the_standard_names() {
        let sampler = |pairs: &[(&str, &str)]| {
            let mut all = vec![(vars::ENDPOINT, "http://c:4318")];
            all.extend_from_slice(pairs);
            resolve(&all).map(|s| s.unwrap().sampler)
        };
        assert_eq!(sampler(&[]).unwrap(), SamplerSetting::ParentBasedAlwaysOn);
        assert_eq!(
            sampler(&[(vars::SAMPLER, "always_off")]).unwrap(),
            SamplerSetting::AlwaysOff
        );
        assert_eq!(
            sampler(&[(vars::SAMPLER, "always_on")]).unwrap(),
            SamplerSetting::AlwaysOn
        );
        assert_eq!(
            sampler(&[(vars::SAMPLER, "parentbased_always_off")]).unwrap(),
            SamplerSetting::ParentBasedAlwaysOff
        );
        assert_eq!(
            sampler(&[(vars::SAMPLER, "traceidratio"), (vars::SAMPLER_ARG, "0.25")]).unwrap(),
            SamplerSetting::TraceIdRatio(0.25)
        );
        assert_eq!(
            sampler(&[(vars::SAMPLER, "parentbased_traceidratio")]).unwrap(),
            SamplerSetting::ParentBasedTraceIdRatio(1.0)
        );
        let e = sampler(&[(vars::SAMPLER, "traceidratio"), (vars::SAMPLER_ARG, "2")]).unwrap_err();
        assert!(
            e.to_string().starts_with("OTEL_TRACES_SAMPLER_ARG is `2`"),
            "{e}"
        );
        let e = sampler(&[(vars::SAMPLER, "xray")]).unwrap_err();
        assert!(
            e.to_string().starts_with("OTEL_TRACES_SAMPLER is `xray`"),
            "{e}"
        );
    }

    #[test]
    fn the_service_name_comes_from_the_variable_then_the_attributes_then_the_default() {
        let name = |pairs: &[(&str, &str)]| {
            let mut all = vec![(vars::ENDPOINT, "http://c:4318")];
            all.extend_from_slice(pairs);
            resolve(&all).unwrap().unwrap()
        };
        assert_eq!(name(&[]).service_name, "svc");
        let s = name(&[(
            vars::RESOURCE_ATTRIBUTES,
            "service.name=attr,deployment.environment=prod%20eu",
        )]);
        assert_eq!(s.service_name, "attr");
        assert_eq!(
            s.resource,
            [("deployment.environment".to_string(), "prod eu".to_string())]
        );
        let s = name(&[
            (vars::RESOURCE_ATTRIBUTES, "service.name=attr"),
            (vars::SERVICE_NAME, "var"),
        ]);
        assert_eq!(s.service_name, "var");
        let e = resolve(&[
            (vars::ENDPOINT, "http://c:4318"),
            (vars::RESOURCE_ATTRIBUTES, "a=1,b"),
        ])
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("OTEL_RESOURCE_ATTRIBUTES is malformed: entry 2"),
            "{e}"
        );
    }

    #[test]
    fn only_non_secret_variables_are_passed_to_containers() {
        assert!(passed_to_containers(vars::ENDPOINT));
        assert!(passed_to_containers("OTEL_BSP_MAX_QUEUE_SIZE"));
        assert!(passed_to_containers("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT"));
        for secret in vars::SECRET {
            assert!(!passed_to_containers(secret));
        }
        assert!(!passed_to_containers("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"));
    }

    /// Runs with the `receiver` feature (on in workspace test runs: the API's tests enable it).
    #[cfg(feature = "receiver")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_variables_shape_what_a_collector_receives() {
        use opentelemetry::trace::{Span as _, Tracer as _};
        let receiver = crate::receiver::Receiver::start().await.unwrap();
        let base = receiver.url();
        let vars = [
            (vars::ENDPOINT, base.as_str()),
            (vars::SERVICE_NAME, "from-var"),
            (
                vars::RESOURCE_ATTRIBUTES,
                "deployment.environment=prod%2Ceu,ninetrix.agent=overridden",
            ),
            (vars::SAMPLER, "always_on"),
        ];
        let telemetry = Telemetry::from_lookup(
            env(&vars),
            None,
            "default-name",
            vec![KeyValue::new("ninetrix.agent", "writer")],
        )
        .unwrap()
        .unwrap();
        assert_eq!(telemetry.endpoint(), format!("{base}/v1/traces"));
        let mut span = telemetry.tracer("scope-x").start("hello");
        span.set_attribute(KeyValue::new("k", 7));
        span.end();
        tokio::task::spawn_blocking(move || telemetry.shutdown(Duration::from_secs(10)))
            .await
            .unwrap();
        let spans = receiver
            .wait_for(|s| !s.is_empty(), Duration::from_secs(10))
            .await
            .unwrap();
        let span = &spans[0];
        assert_eq!(span.name, "hello");
        assert_eq!(span.scope, "scope-x");
        assert_eq!(span.int_attr("k"), Some(7));
        let resource = |k: &str| span.resource.get(k).and_then(|v| v.as_str());
        assert_eq!(resource("service.name"), Some("from-var"));
        assert_eq!(resource("deployment.environment"), Some("prod,eu"));
        assert_eq!(
            resource("ninetrix.agent"),
            Some("writer"),
            "the caller's facts win"
        );
        assert_eq!(resource("telemetry.sdk.language"), Some("rust"));
    }

    #[test]
    fn starting_outside_a_runtime_is_an_error_not_a_panic() {
        let e = Telemetry::start(Settings::new("http://c:4318/v1/traces", "svc"), Vec::new())
            .unwrap_err();
        assert!(matches!(e, TelemetryError::NoRuntime));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_unreachable_collector_drops_spans_and_never_blocks() {
        use opentelemetry::trace::{Span as _, Tracer as _};
        // Nothing listens on port 9 (discard) of localhost in a test environment.
        let mut settings = Settings::new("http://127.0.0.1:9/v1/traces", "svc");
        settings.timeout = Some(Duration::from_millis(200));
        let telemetry = Telemetry::start(settings, Vec::new()).unwrap();
        let tracer = telemetry.tracer("test");
        let started = std::time::Instant::now();
        for _ in 0..10_000 {
            tracer.start("span").end();
        }
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "ending spans took {:?}",
            started.elapsed()
        );
        let started = std::time::Instant::now();
        tokio::task::spawn_blocking(move || telemetry.shutdown(Duration::from_millis(500)))
            .await
            .unwrap();
        assert!(started.elapsed() < Duration::from_secs(2));
    }
}
