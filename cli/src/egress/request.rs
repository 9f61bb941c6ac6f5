//! The HTTP/1 text the egress proxy reads and writes: where a client's request head ends, what
//! it asks for — a `CONNECT host:port` tunnel, or an absolute-form plain-HTTP request
//! (`GET http://host/path`), rewritten here to the origin-form head the upstream gets — and the
//! proxy's own short answers. Pure: bytes in, values out.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};

/// What a proxy client asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Request {
    /// `CONNECT host:port`: a tunnel.
    Connect(Target),
    /// An absolute-form plain-HTTP request. `head` is what the upstream gets: the request line in
    /// origin-form, `Host` set from the URL (RFC 9112 §3.2.2), `Connection: close`,
    /// `Proxy-Authorization`, `Proxy-Connection` and `Keep-Alive` dropped, the other headers as
    /// sent.
    ///
    /// `Connection: close` because the proxy splices the client to this one upstream: a client
    /// that reuses a proxy connection for another host (curl and Python's urllib3 pool plain
    /// HTTP per proxy, not per destination) must not have its next request sent here. The
    /// server closes after its response, so the client opens a new connection for the next one.
    Forward {
        /// Where it goes.
        target: Target,
        /// The rewritten head, ending with the blank line.
        head: Vec<u8>,
    },
}

impl Request {
    /// Where the request goes.
    pub(crate) fn target(&self) -> &Target {
        match self {
            Request::Connect(target) | Request::Forward { target, .. } => target,
        }
    }
}

/// A destination: host and port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Target {
    /// A name (lower-case, no trailing dot), an IPv4 literal, or an IPv6 literal in brackets.
    pub(crate) host: String,
    /// The port.
    pub(crate) port: u16,
}

impl Target {
    /// The host as an IP address, when it is a literal (no DNS needed).
    pub(crate) fn ip(&self) -> Option<IpAddr> {
        let bare = self
            .host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(&self.host);
        bare.parse().ok()
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// Why a request head is not one the proxy serves: the text of the 400 answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BadRequest {
    /// The first line is not `METHOD TARGET HTTP/1.x` in ASCII.
    #[error("the request line is not `METHOD TARGET HTTP/1.1`")]
    RequestLine,
    /// Not HTTP/1.0 or HTTP/1.1.
    #[error("`{0}` is not supported; speak HTTP/1.1")]
    Version(String),
    /// An origin-form (`GET /path`) or asterisk-form request: meant for a server, not a proxy.
    #[error(
        "`{method} {target}` is not a proxy request; send `CONNECT host:port` or an absolute URL \
         (`{method} http://host{target}`)"
    )]
    OriginForm {
        /// The method.
        method: String,
        /// The target as sent.
        target: String,
    },
    /// An absolute `https://` URL outside a tunnel.
    #[error("`https://` URLs go through a tunnel: send `CONNECT host:443`")]
    Https,
    /// A URL of another scheme.
    #[error("only `http://` URLs are forwarded; send `CONNECT host:port` for anything else")]
    Scheme,
    /// A host and port that cannot be reached as written.
    #[error("`{authority}` is not `host:port` ({reason})")]
    Authority {
        /// What was sent.
        authority: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A header line without a name and `:`, or folded onto the line before.
    #[error("a header line is malformed (a name, `:`, a value; no folding)")]
    Header,
}

/// Where the head in `buf` ends: the index just after its blank line (`\r\n\r\n`), if it has
/// arrived. Searching starts at `from` (a caller that appends passes the old length minus 3).
pub(crate) fn head_end(buf: &[u8], from: usize) -> Option<usize> {
    buf.get(from..)?
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| from + i + 4)
}

/// Reads a request head (with or without its blank line).
pub(crate) fn parse(head: &[u8]) -> Result<Request, BadRequest> {
    let mut lines = head
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let first = lines.next().unwrap_or_default();
    let first = std::str::from_utf8(first)
        .ok()
        .filter(|l| l.is_ascii())
        .ok_or(BadRequest::RequestLine)?;
    let mut parts = first.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(BadRequest::RequestLine);
    };
    if method.is_empty() || !method.bytes().all(is_token_byte) || target.is_empty() {
        return Err(BadRequest::RequestLine);
    }
    if version != "HTTP/1.1" && version != "HTTP/1.0" {
        return Err(BadRequest::Version(version.to_string()));
    }
    let mut headers = Vec::new();
    for line in lines.take_while(|l| !l.is_empty()) {
        headers.push(header(line)?);
    }
    if method == "CONNECT" {
        return Ok(Request::Connect(authority(target, None)?));
    }
    if target.starts_with('/') || target == "*" {
        return Err(BadRequest::OriginForm {
            method: method.to_string(),
            target: target.to_string(),
        });
    }
    let scheme_end = target.find("://").ok_or(BadRequest::RequestLine)?;
    match target[..scheme_end].to_ascii_lowercase().as_str() {
        "http" => {}
        "https" => return Err(BadRequest::Https),
        _ => return Err(BadRequest::Scheme),
    }
    let rest = &target[scheme_end + 3..];
    let (authority_text, path) = rest.split_at(rest.find(['/', '?', '#']).unwrap_or(rest.len()));
    let forward_to = authority(authority_text, Some(80))?;
    let path = path.split('#').next().unwrap_or_default();
    let origin = match path.as_bytes().first() {
        None => "/".to_string(),
        Some(b'?') => format!("/{path}"),
        Some(_) => path.to_string(),
    };
    let mut out =
        format!("{method} {origin} {version}\r\nHost: {authority_text}\r\nConnection: close\r\n")
            .into_bytes();
    for (name, line) in headers {
        if [
            "host",
            "connection",
            "keep-alive",
            "proxy-authorization",
            "proxy-connection",
        ]
        .iter()
        .any(|drop| name.eq_ignore_ascii_case(drop))
        {
            continue;
        }
        out.extend_from_slice(line);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    Ok(Request::Forward {
        target: forward_to,
        head: out,
    })
}

/// Checks a header line (a token name, `:`, a value without a stray CR) and returns its name
/// with the line.
fn header(line: &[u8]) -> Result<(&str, &[u8]), BadRequest> {
    let colon = line
        .iter()
        .position(|&b| b == b':')
        .ok_or(BadRequest::Header)?;
    let name = &line[..colon];
    if name.is_empty() || !name.iter().copied().all(is_token_byte) || line.contains(&b'\r') {
        return Err(BadRequest::Header);
    }
    let name = std::str::from_utf8(name).map_err(|_| BadRequest::Header)?;
    Ok((name, line))
}

/// An RFC 9110 `tchar`: what methods and header names are made of.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Parses `host[:port]` (an IPv6 host in brackets). Without a port, `default` applies; `None`
/// makes the port required (CONNECT).
fn authority(text: &str, default: Option<u16>) -> Result<Target, BadRequest> {
    let bad = |reason| BadRequest::Authority {
        authority: text.to_string(),
        reason,
    };
    if text.contains('@') {
        return Err(bad("no user name or password in proxy requests"));
    }
    let (host, port) = if let Some(inner) = text.strip_prefix('[') {
        let (ip, rest) = inner
            .split_once(']')
            .ok_or_else(|| bad("an unclosed `[`"))?;
        let ip: Ipv6Addr = ip.parse().map_err(|_| bad("not an IPv6 address"))?;
        let port = match rest {
            "" => None,
            _ => Some(
                rest.strip_prefix(':')
                    .ok_or_else(|| bad("text after `]`"))?,
            ),
        };
        (format!("[{ip}]"), port)
    } else {
        let (host, port) = match text.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        };
        if host.contains(':') {
            return Err(bad("an IPv6 address needs brackets"));
        }
        let host = host.strip_suffix('.').unwrap_or(host);
        if host.is_empty()
            || !host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
        {
            return Err(bad("not a host name or IP address"));
        }
        (host.to_ascii_lowercase(), port)
    };
    let port = match (port, default) {
        (None | Some(""), Some(default)) => default,
        (None | Some(""), None) => return Err(bad("the port is missing")),
        (Some(p), _) => p
            .parse::<u16>()
            .ok()
            .filter(|&n| n > 0 && p.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| bad("the port is not a number from 1 to 65535"))?,
    };
    Ok(Target { host, port })
}

/// What the proxy answers a CONNECT it tunnels.
pub(crate) const ESTABLISHED: &[u8] = b"HTTP/1.1 200 Connection established\r\n\r\n";

/// The proxy's own answers, each ending the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// 400: not a request the proxy serves.
    BadRequest,
    /// 403: not on the allow-list.
    Forbidden,
    /// 408: the head did not arrive in time.
    Timeout,
    /// 502: the upstream could not be reached.
    BadGateway,
}

impl Answer {
    /// The whole response: status line, `Content-Type: text/plain`, `Content-Length`,
    /// `Connection: close`, and `ninetrix egress proxy: <message>` as the body.
    pub(crate) fn render(self, message: &str) -> Vec<u8> {
        let status = match self {
            Answer::BadRequest => "400 Bad Request",
            Answer::Forbidden => "403 Forbidden",
            Answer::Timeout => "408 Request Timeout",
            Answer::BadGateway => "502 Bad Gateway",
        };
        let body = format!("ninetrix egress proxy: {message}\n");
        format!(
            "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    }
}

/// The 403's message: which destination, and where the allow-list is written.
pub(crate) fn refusal(target: &Target) -> String {
    format!("{target} is not on this agent's allow-list (network.egress)")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(host: &str, port: u16) -> Target {
        Target {
            host: host.into(),
            port,
        }
    }

    fn forward(head: &str) -> (Target, String) {
        match parse(head.as_bytes()) {
            Ok(Request::Forward { target, head }) => (target, String::from_utf8(head).unwrap()),
            other => panic!("{head:?}: {other:?}"),
        }
    }

    #[test]
    fn the_head_ends_after_the_blank_line() {
        let buf = b"CONNECT a:1 HTTP/1.1\r\nHost: a\r\n\r\nearly";
        assert_eq!(head_end(buf, 0), Some(buf.len() - 5));
        assert_eq!(head_end(buf, 20), Some(buf.len() - 5));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: a\r\n", 0), None);
        assert_eq!(head_end(b"", 0), None);
        assert_eq!(head_end(b"ab", 5), None);
    }

    #[test]
    fn connect_names_host_and_port() {
        let req = parse(b"CONNECT API.Example.com.:443 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        assert_eq!(req, Request::Connect(target("api.example.com", 443)));
        let req = parse(b"CONNECT [::1]:8443 HTTP/1.0\r\n\r\n").unwrap();
        assert_eq!(req, Request::Connect(target("[::1]", 8443)));
        assert_eq!(req.target().ip(), Some("::1".parse().unwrap()));
        let req = parse(b"CONNECT 10.0.0.5:5432 HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!(req.target().ip(), Some("10.0.0.5".parse().unwrap()));
        assert_eq!(req.target().to_string(), "10.0.0.5:5432");
        assert_eq!(
            parse(b"CONNECT example.com:443 HTTP/1.1\r\n\r\n")
                .unwrap()
                .target()
                .ip(),
            None
        );
    }

    #[test]
    fn connect_needs_a_valid_host_and_port() {
        for (head, reason) in [
            (
                "CONNECT example.com HTTP/1.1\r\n\r\n",
                "the port is missing",
            ),
            (
                "CONNECT example.com: HTTP/1.1\r\n\r\n",
                "the port is missing",
            ),
            ("CONNECT example.com:0 HTTP/1.1\r\n\r\n", "1 to 65535"),
            ("CONNECT example.com:70000 HTTP/1.1\r\n\r\n", "1 to 65535"),
            ("CONNECT example.com:+1 HTTP/1.1\r\n\r\n", "1 to 65535"),
            ("CONNECT ::1:443 HTTP/1.1\r\n\r\n", "needs brackets"),
            ("CONNECT [::1:443 HTTP/1.1\r\n\r\n", "unclosed"),
            ("CONNECT [nope]:443 HTTP/1.1\r\n\r\n", "not an IPv6"),
            ("CONNECT [::1]x:443 HTTP/1.1\r\n\r\n", "after `]`"),
            (
                "CONNECT u:p@example.com:443 HTTP/1.1\r\n\r\n",
                "no user name",
            ),
            (
                "CONNECT ex%61mple.com:443 HTTP/1.1\r\n\r\n",
                "not a host name",
            ),
            ("CONNECT :443 HTTP/1.1\r\n\r\n", "not a host name"),
        ] {
            match parse(head.as_bytes()) {
                Err(BadRequest::Authority { reason: r, .. }) => {
                    assert!(r.contains(reason), "{head:?}: {r}")
                }
                other => panic!("{head:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn absolute_form_is_rewritten_to_origin_form() {
        let (to, head) = forward(
            "POST http://Example.com:8080/v1/items?x=1#frag HTTP/1.1\r\n\
             Host: wrong.example\r\n\
             Proxy-Authorization: Basic dTpw\r\n\
             proxy-connection: keep-alive\r\n\
             Connection: keep-alive\r\n\
             Keep-Alive: timeout=5\r\n\
             Content-Length: 2\r\n\
             X-Odd:  spaced value \r\n\r\n",
        );
        assert_eq!(to, target("example.com", 8080));
        assert_eq!(
            head,
            "POST /v1/items?x=1 HTTP/1.1\r\nHost: Example.com:8080\r\nConnection: close\r\n\
             Content-Length: 2\r\n\
             X-Odd:  spaced value \r\n\r\n"
        );
    }

    #[test]
    fn absolute_form_defaults_port_80_and_path_slash() {
        let (to, head) = forward("GET http://example.com HTTP/1.1\r\n\r\n");
        assert_eq!(to, target("example.com", 80));
        assert_eq!(
            head,
            "GET / HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n"
        );
        let (_, head) = forward("GET HTTP://example.com?q HTTP/1.0\r\n\r\n");
        assert!(head.starts_with("GET /?q HTTP/1.0\r\n"), "{head}");
        let (to, _) = forward("GET http://[fd00::5]/ HTTP/1.1\r\n\r\n");
        assert_eq!(to, target("[fd00::5]", 80));
        let (to, _) = forward("GET http://10.0.0.5:/ HTTP/1.1\r\n\r\n");
        assert_eq!(to, target("10.0.0.5", 80));
    }

    #[test]
    fn what_is_not_a_proxy_request_is_refused() {
        for (head, expected) in [
            (
                "GET /path HTTP/1.1\r\n\r\n",
                BadRequest::OriginForm {
                    method: "GET".into(),
                    target: "/path".into(),
                },
            ),
            (
                "OPTIONS * HTTP/1.1\r\n\r\n",
                BadRequest::OriginForm {
                    method: "OPTIONS".into(),
                    target: "*".into(),
                },
            ),
            (
                "GET https://example.com/ HTTP/1.1\r\n\r\n",
                BadRequest::Https,
            ),
            (
                "GET ftp://example.com/ HTTP/1.1\r\n\r\n",
                BadRequest::Scheme,
            ),
            ("GET example.com HTTP/1.1\r\n\r\n", BadRequest::RequestLine),
            (
                "GET http://a/ HTTP/2.0\r\n\r\n",
                BadRequest::Version("HTTP/2.0".into()),
            ),
            ("GET http://a/\r\n\r\n", BadRequest::RequestLine),
            ("GET  http://a/ HTTP/1.1\r\n\r\n", BadRequest::RequestLine),
            ("GET http://a/ HTTP/1.1 x\r\n\r\n", BadRequest::RequestLine),
            ("G@T http://a/ HTTP/1.1\r\n\r\n", BadRequest::RequestLine),
            ("\u{16}\u{3}\u{1}garbage\r\n\r\n", BadRequest::RequestLine),
            ("GET http://ä/ HTTP/1.1\r\n\r\n", BadRequest::RequestLine),
            ("", BadRequest::RequestLine),
            (
                "GET http://a/ HTTP/1.1\r\nno colon\r\n\r\n",
                BadRequest::Header,
            ),
            (
                "GET http://a/ HTTP/1.1\r\n: empty name\r\n\r\n",
                BadRequest::Header,
            ),
            (
                "GET http://a/ HTTP/1.1\r\nBad Name: x\r\n\r\n",
                BadRequest::Header,
            ),
            (
                "GET http://a/ HTTP/1.1\r\nA: b\r\n folded\r\n\r\n",
                BadRequest::Header,
            ),
            (
                "CONNECT a:1 HTTP/1.1\r\nno colon\r\n\r\n",
                BadRequest::Header,
            ),
            (
                "GET http://a/ HTTP/1.1\r\nA: b\rc\r\n\r\n",
                BadRequest::Header,
            ),
        ] {
            assert_eq!(parse(head.as_bytes()), Err(expected), "{head:?}");
        }
        let text = BadRequest::OriginForm {
            method: "GET".into(),
            target: "/x".into(),
        }
        .to_string();
        assert!(text.contains("`GET http://host/x`"), "{text}");
    }

    #[test]
    fn answers_close_the_connection_and_say_why() {
        let text =
            String::from_utf8(Answer::Forbidden.render(&refusal(&target("evil.example", 443))))
                .unwrap();
        let body = "ninetrix egress proxy: evil.example:443 is not on this agent's allow-list \
                    (network.egress)\n";
        assert_eq!(
            text,
            format!(
                "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{body}",
                body.len()
            )
        );
        for (answer, status) in [
            (Answer::BadRequest, "HTTP/1.1 400 "),
            (Answer::Timeout, "HTTP/1.1 408 "),
            (Answer::BadGateway, "HTTP/1.1 502 "),
        ] {
            assert!(
                String::from_utf8(answer.render("x"))
                    .unwrap()
                    .starts_with(status)
            );
        }
    }
}
