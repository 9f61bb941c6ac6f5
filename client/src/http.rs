//! The HTTP client every ninetrix process uses: it works in a `FROM scratch` image (Mozilla's
//! roots bundled, DNS through hickory rather than NSS) and also trusts the system store when
//! there is one (`SSL_CERT_FILE` works for private gateways).

use std::time::Duration;

/// The one builder of every ninetrix HTTP client: the bundled web PKI roots merged with the
/// system store, DNS through hickory, connect timeout 10 s. A caller adds its own settings (the
/// OpenTelemetry exporter its request timeout).
pub fn builder() -> reqwest::ClientBuilder {
    let roots = webpki_root_certs::TLS_SERVER_ROOT_CERTS
        .iter()
        .filter_map(|der| reqwest::Certificate::from_der(der).ok());
    reqwest::Client::builder()
        .tls_certs_merge(roots)
        .hickory_dns(true)
        .connect_timeout(Duration::from_secs(10))
}

/// Builds the shared HTTP client (per-request timeouts are the caller's).
pub fn http_client() -> reqwest::Client {
    builder()
        .build()
        .or_else(|_| {
            reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(10))
                .build()
        })
        .expect("an HTTP client with default settings always builds")
}
