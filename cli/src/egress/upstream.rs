//! Reaching the destination of an allowed request: an IP literal directly, a name through
//! hickory with the system's resolver configuration (`/etc/resolv.conf`: Docker's embedded DNS
//! in a container — a `FROM scratch` image has no NSS for `getaddrinfo`), each address in turn,
//! the whole within the connect timeout.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hickory_resolver::TokioResolver;
use tokio::net::TcpStream;
use tokio::sync::OnceCell;

use super::request::Target;

/// Why the upstream could not be reached: the 502's message.
#[derive(Debug, thiserror::Error)]
pub(crate) enum UpstreamError {
    /// No resolver could be built from the system's configuration.
    #[error("cannot resolve {host}: no DNS configuration ({reason})")]
    NoResolver {
        /// The name.
        host: String,
        /// Why.
        reason: String,
    },
    /// The name did not resolve.
    #[error("cannot resolve {host}: {reason}")]
    Resolve {
        /// The name.
        host: String,
        /// Why.
        reason: String,
    },
    /// Every address refused or failed.
    #[error("cannot connect to {target} ({address}): {error}")]
    Connect {
        /// The destination as asked.
        target: String,
        /// The last address tried.
        address: SocketAddr,
        /// Why.
        error: io::Error,
    },
    /// Nothing answered in time.
    #[error("cannot connect to {target}: no answer within {} s", timeout.as_secs())]
    Timeout {
        /// The destination as asked.
        target: String,
        /// The connect timeout.
        timeout: Duration,
    },
}

/// The proxy's resolver, built on first use (an IP-only allow-list never reads resolv.conf).
#[derive(Default)]
pub(crate) struct Resolver {
    cell: OnceCell<Result<TokioResolver, String>>,
}

impl Resolver {
    /// The addresses of `target`: its IP literal, or what its name resolves to.
    async fn addresses(&self, target: &Target) -> Result<Vec<IpAddr>, UpstreamError> {
        if let Some(ip) = target.ip() {
            return Ok(vec![ip]);
        }
        let resolver = self
            .cell
            .get_or_init(|| async {
                TokioResolver::builder_tokio()
                    .and_then(|b| b.build())
                    .map_err(|e| e.to_string())
            })
            .await
            .as_ref()
            .map_err(|reason| UpstreamError::NoResolver {
                host: target.host.clone(),
                reason: reason.clone(),
            })?;
        // A name with a dot is looked up as written (a trailing dot makes it absolute): the
        // allow-list matched exactly this name, so search domains must not turn it into another.
        // A one-label name (`my-service`) is a local name and goes through the search list.
        let name = if target.host.contains('.') {
            format!("{}.", target.host)
        } else {
            target.host.clone()
        };
        let lookup =
            resolver
                .lookup_ip(name.as_str())
                .await
                .map_err(|e| UpstreamError::Resolve {
                    host: target.host.clone(),
                    reason: e.to_string(),
                })?;
        Ok(lookup.iter().collect())
    }
}

/// Connects to `target` within `timeout`: resolves it, then tries each address in turn.
pub(crate) async fn connect(
    resolver: &Resolver,
    target: &Target,
    timeout: Duration,
) -> Result<TcpStream, UpstreamError> {
    let attempt = async {
        let addresses = resolver.addresses(target).await?;
        let mut last = None;
        for ip in addresses {
            let address = SocketAddr::new(ip, target.port);
            match TcpStream::connect(address).await {
                Ok(stream) => return Ok(stream),
                Err(error) => last = Some((address, error)),
            }
        }
        Err(match last {
            Some((address, error)) => UpstreamError::Connect {
                target: target.to_string(),
                address,
                error,
            },
            None => UpstreamError::Resolve {
                host: target.host.clone(),
                reason: "no addresses".to_string(),
            },
        })
    };
    tokio::time::timeout(timeout, attempt)
        .await
        .unwrap_or_else(|_| {
            Err(UpstreamError::Timeout {
                target: target.to_string(),
                timeout,
            })
        })
}
