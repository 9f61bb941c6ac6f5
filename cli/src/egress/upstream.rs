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
    /// The container at `ip`, as Docker's embedded DNS names it (`<container>.<network>`: the
    /// part before the first dot); `None` when nothing answers within a second.
    pub(crate) async fn container_of(&self, ip: IpAddr) -> Option<String> {
        let resolver = self.resolver().await.ok()?;
        let lookup = tokio::time::timeout(Duration::from_secs(1), resolver.reverse_lookup(ip))
            .await
            .ok()?
            .ok()?;
        let name = lookup
            .answers()
            .iter()
            .find_map(|record| match &record.data {
                hickory_resolver::proto::rr::RData::PTR(ptr) => Some(ptr.0.to_string()),
                _ => None,
            })?;
        let first = name.split('.').next().unwrap_or_default();
        (!first.is_empty()).then(|| first.to_string())
    }

    async fn resolver(&self) -> Result<&TokioResolver, String> {
        self.cell
            .get_or_init(|| async {
                TokioResolver::builder_tokio()
                    .and_then(|b| b.build())
                    .map_err(|e| e.to_string())
            })
            .await
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The addresses of `target`: its IP literal, or what its name resolves to.
    async fn addresses(&self, target: &Target) -> Result<Vec<IpAddr>, UpstreamError> {
        if let Some(ip) = target.ip() {
            return Ok(vec![ip]);
        }
        let resolver = self
            .resolver()
            .await
            .map_err(|reason| UpstreamError::NoResolver {
                host: target.host.clone(),
                reason,
            })?;
        // The container's hosts file first, as the C library would: Docker writes `extra_hosts`
        // there (`host.docker.internal`), and its embedded DNS does not serve them.
        let hosts = std::fs::read_to_string(HOSTS_FILE).unwrap_or_default();
        let listed = hosts_lookup(&hosts, &target.host);
        if !listed.is_empty() {
            return Ok(listed);
        }
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

/// The hosts file the proxy reads before DNS.
const HOSTS_FILE: &str = "/etc/hosts";

/// The addresses `hosts` (a hosts file's text) gives `name` (case-insensitive, a trailing dot
/// ignored), in file order.
fn hosts_lookup(hosts: &str, name: &str) -> Vec<IpAddr> {
    let name = name.trim_end_matches('.');
    hosts
        .lines()
        .map(|l| l.split('#').next().unwrap_or_default())
        .filter_map(|l| {
            let mut fields = l.split_whitespace();
            let ip: IpAddr = fields.next()?.parse().ok()?;
            fields
                .any(|n| n.trim_end_matches('.').eq_ignore_ascii_case(name))
                .then_some(ip)
        })
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hosts_file_names_the_hosts_docker_adds() {
        let hosts = "127.0.0.1\tlocalhost\n# comment\n172.17.0.1\thost.docker.internal\n\
                     10.0.0.5 a.example A2.example # trailing\n";
        assert_eq!(
            hosts_lookup(hosts, "host.docker.internal."),
            ["172.17.0.1".parse::<IpAddr>().unwrap()]
        );
        assert_eq!(hosts_lookup(hosts, "a2.example").len(), 1);
        assert!(hosts_lookup(hosts, "comment").is_empty());
        assert!(hosts_lookup(hosts, "elsewhere.example").is_empty());
    }
}
