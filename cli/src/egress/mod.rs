//! The egress proxy (`ninetrix egress-proxy`, issue 39): the one way out of an agent's
//! `--internal` Docker network. It tunnels `CONNECT host:port` and forwards absolute-form
//! plain-HTTP requests to the destinations the agent's allow-list names
//! ([`ninetrix_agentfile::egress`]), and refuses, logs and counts everything else.
//!
//! `request` reads the request head and writes the proxy's own answers (pure), `upstream`
//! resolves and connects to a destination, `status` is the log line per decision and the status
//! file `ps` reads, and `proxy` is the server that uses them.

mod proxy;
mod request;
pub(crate) mod status;
mod upstream;

#[cfg(test)]
mod tests;

pub(crate) use proxy::serve;
