//! OpenTelemetry export for ninetrix (issue 18): the OTLP/HTTP protobuf span exporter, configured
//! from the standard `OTEL_*` variables, shared by the runner and the checkpoint API.
