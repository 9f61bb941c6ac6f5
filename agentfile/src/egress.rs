//! The egress allow-list's patterns (issue 39): which hosts and ports an agent's container may
//! reach through the egress proxy. An [`EgressRule`] is parsed from the text a user writes
//! (`api.example.com`, `*.example.com:8443`, `10.0.0.5:*`, `[::1]:8080`) and printed back in
//! its canonical form; [`allows`] is the proxy's one decision. Pure: no DNS, no I/O — a name
//! rule matches names and an IP rule matches IP literals, never one through the other.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// The ports a rule without `:PORT` allows: HTTPS and HTTP.
pub const DEFAULT_PORTS: [u16; 2] = [443, 80];

/// Longest host name (RFC 1035, without the trailing dot).
const MAX_NAME_LEN: usize = 253;
/// Longest label of a host name.
const MAX_LABEL_LEN: usize = 63;

/// One allow-list pattern: a host (a name, every subdomain of a name, or an IP literal) and the
/// ports allowed on it. Serialized as the text it was parsed from, in canonical form (lower-case,
/// no trailing dot).
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct EgressRule {
    host: HostPattern,
    port: PortPattern,
}

/// The host half of a rule.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum HostPattern {
    /// Exactly this name (lower-case, no trailing dot).
    Name(String),
    /// Any subdomain of this name, at any depth; not the name itself.
    Subdomains(String),
    /// This IP literal.
    Ip(IpAddr),
}

/// The port half of a rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum PortPattern {
    /// No port written: [`DEFAULT_PORTS`].
    Default,
    /// `:PORT`.
    One(u16),
    /// `:*`.
    Any,
}

/// Why a text is not an egress rule. Each message quotes the text and says what to write.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EgressRuleError {
    /// Nothing was written.
    #[error(
        "an egress rule is empty; write a host such as `api.example.com`, `*.example.com` or \
         `10.0.0.5:8080`"
    )]
    Empty,
    /// A URL instead of a host.
    #[error("`{text}` is a URL; write the host only: `{host}`")]
    Url {
        /// What was written.
        text: String,
        /// The host (and port) of the URL, as a rule.
        host: String,
    },
    /// A host followed by a path.
    #[error("`{text}` has a path; a rule names a host, not a path: write `{host}`")]
    Path {
        /// What was written.
        text: String,
        /// The part before the path.
        host: String,
    },
    /// `*` alone (with or without a port): every host.
    #[error(
        "`{text}` would allow every host, which is no allow-list; list the hosts instead \
         (`*.example.com` allows every subdomain of example.com)"
    )]
    Everything {
        /// What was written.
        text: String,
    },
    /// `*` somewhere other than as the whole first label.
    #[error(
        "`{text}`: `*` is only allowed as the whole first label, as in `*.example.com` (any \
         subdomain of example.com)"
    )]
    Wildcard {
        /// What was written.
        text: String,
    },
    /// Not a valid host name.
    #[error(
        "`{text}` is not a valid host name ({reason}); write labels of letters, digits and `-` \
         (1 to 63 characters each, not starting or ending with `-`) separated by dots, such as \
         `api.example.com`"
    )]
    Name {
        /// What was written.
        text: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Numbers and dots that are not an IPv4 address.
    #[error(
        "`{text}` is not an IPv4 address; write four numbers from 0 to 255, such as `10.0.0.5`"
    )]
    Ipv4 {
        /// What was written.
        text: String,
    },
    /// An IPv6 address without brackets (its colons read as a port).
    #[error("`{text}` is an IPv6 address without brackets; write `[{text}]` (or `[{text}]:PORT`)")]
    UnbracketedIpv6 {
        /// What was written.
        text: String,
    },
    /// Brackets around something that is not an IPv6 address, or unbalanced brackets.
    #[error(
        "`{text}` is not a bracketed IPv6 address; write one such as `[fd00::5]` or `[::1]:8080`"
    )]
    Ipv6 {
        /// What was written.
        text: String,
    },
    /// A port that is not a number from 1 to 65535 or `*`.
    #[error(
        "`{text}`: the port `{port}` is not a number from 1 to 65535; write `{host}:8443`, \
         `{host}:*` for any port, or `{host}` for 443 and 80"
    )]
    Port {
        /// What was written.
        text: String,
        /// The host part, to show the right forms.
        host: String,
        /// The port part.
        port: String,
    },
}

impl EgressRule {
    /// Parses one rule (surrounding whitespace ignored).
    pub fn parse(text: &str) -> Result<EgressRule, EgressRuleError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(EgressRuleError::Empty);
        }
        if let Some((_, rest)) = text.split_once("://") {
            let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
            let host = host.rsplit('@').next().unwrap_or_default();
            return Err(EgressRuleError::Url {
                text: text.to_string(),
                host: if host.is_empty() { "example.com" } else { host }.to_string(),
            });
        }
        if let Some(cut) = text.find(['/', '?', '#']) {
            return Err(EgressRuleError::Path {
                text: text.to_string(),
                host: if cut == 0 {
                    "example.com"
                } else {
                    &text[..cut]
                }
                .to_string(),
            });
        }
        let (host, port) = split_port(text)?;
        let port = match port {
            None => PortPattern::Default,
            Some("*") => PortPattern::Any,
            Some(p) => match p.parse::<u16>() {
                Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => PortPattern::One(n),
                _ => {
                    return Err(EgressRuleError::Port {
                        text: text.to_string(),
                        host: host.to_string(),
                        port: p.to_string(),
                    });
                }
            },
        };
        Ok(EgressRule {
            host: parse_host(text, host)?,
            port,
        })
    }

    /// Whether this rule allows a connection to `host` on `port`. `host` is a name (compared
    /// case-insensitively, a trailing dot ignored) or an IP literal (IPv6 with or without
    /// brackets); a name never matches an IP rule nor an IP a name rule. A `host` that is neither
    /// a valid name nor an IP literal matches nothing.
    pub fn allows(&self, host: &str, port: u16) -> bool {
        Destination::of(host).is_some_and(|d| self.allows_destination(&d, port))
    }

    fn allows_destination(&self, destination: &Destination, port: u16) -> bool {
        let port_ok = match self.port {
            PortPattern::Default => DEFAULT_PORTS.contains(&port),
            PortPattern::One(p) => p == port,
            PortPattern::Any => true,
        };
        port_ok
            && match (&self.host, destination) {
                (HostPattern::Name(name), Destination::Name(host)) => name == host,
                (HostPattern::Subdomains(parent), Destination::Name(host)) => host
                    .strip_suffix(parent.as_str())
                    .and_then(|rest| rest.strip_suffix('.'))
                    .is_some_and(|sub| !sub.is_empty()),
                (HostPattern::Ip(ip), Destination::Ip(host)) => ip == host,
                _ => false,
            }
    }
}

/// Whether any of `rules` allows a connection to `host` on `port` (see [`EgressRule::allows`]).
/// No rules allow nothing.
pub fn allows(rules: &[EgressRule], host: &str, port: u16) -> bool {
    match Destination::of(host) {
        Some(d) => rules.iter().any(|r| r.allows_destination(&d, port)),
        None => false,
    }
}

/// A host a client asked for, normalised for matching.
enum Destination {
    /// A valid name: lower-case, no trailing dot.
    Name(String),
    /// An IP literal.
    Ip(IpAddr),
}

impl Destination {
    fn of(host: &str) -> Option<Destination> {
        let bare = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if let Ok(ip) = bare.parse::<IpAddr>() {
            return Some(Destination::Ip(ip));
        }
        let name = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
        check_name(&name).ok()?;
        Some(Destination::Name(name))
    }
}

/// Splits `host[:port]` (the host possibly a bracketed IPv6 literal). A host with more than one
/// colon outside brackets is an unbracketed IPv6 address (or nonsense).
fn split_port(text: &str) -> Result<(&str, Option<&str>), EgressRuleError> {
    if text.starts_with('[') {
        let Some(close) = text.find(']') else {
            return Err(EgressRuleError::Ipv6 {
                text: text.to_string(),
            });
        };
        let (host, rest) = text.split_at(close + 1);
        return match rest {
            "" => Ok((host, None)),
            _ => match rest.strip_prefix(':') {
                Some(port) => Ok((host, Some(port))),
                None => Err(EgressRuleError::Ipv6 {
                    text: text.to_string(),
                }),
            },
        };
    }
    match text.matches(':').count() {
        0 => Ok((text, None)),
        1 => {
            let (host, port) = text.split_once(':').unwrap_or((text, ""));
            Ok((host, Some(port)))
        }
        _ if text.parse::<Ipv6Addr>().is_ok() => Err(EgressRuleError::UnbracketedIpv6 {
            text: text.to_string(),
        }),
        _ => Err(EgressRuleError::Name {
            text: text.to_string(),
            reason: "more than one `:`".to_string(),
        }),
    }
}

/// Parses the host half of a rule; `text` is the whole rule, for messages.
fn parse_host(text: &str, host: &str) -> Result<HostPattern, EgressRuleError> {
    if let Some(inner) = host.strip_prefix('[') {
        let inner = inner.strip_suffix(']').unwrap_or(inner);
        return inner
            .parse::<Ipv6Addr>()
            .map(|ip| HostPattern::Ip(IpAddr::V6(ip)))
            .map_err(|_| EgressRuleError::Ipv6 {
                text: text.to_string(),
            });
    }
    let name = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    if name == "*" {
        return Err(EgressRuleError::Everything {
            text: text.to_string(),
        });
    }
    let (wildcard, name) = match name.strip_prefix("*.") {
        Some(parent) => (true, parent.to_string()),
        None => (false, name),
    };
    if name.contains('*') {
        return Err(EgressRuleError::Wildcard {
            text: text.to_string(),
        });
    }
    if !name.is_empty()
        && name
            .split('.')
            .all(|l| l.bytes().all(|b| b.is_ascii_digit()))
    {
        return match (wildcard, name.parse::<Ipv4Addr>()) {
            (false, Ok(ip)) => Ok(HostPattern::Ip(IpAddr::V4(ip))),
            (true, Ok(_)) => Err(EgressRuleError::Wildcard {
                text: text.to_string(),
            }),
            (_, Err(_)) => Err(EgressRuleError::Ipv4 {
                text: text.to_string(),
            }),
        };
    }
    check_name(&name).map_err(|reason| EgressRuleError::Name {
        text: text.to_string(),
        reason,
    })?;
    Ok(if wildcard {
        HostPattern::Subdomains(name)
    } else {
        HostPattern::Name(name)
    })
}

/// Checks a lower-case host name without its trailing dot; the error says what is wrong.
fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("no name".to_string());
    }
    if name.len() > MAX_NAME_LEN {
        return Err(format!(
            "{} characters, the limit is {MAX_NAME_LEN}",
            name.len()
        ));
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Err("an empty label (two dots in a row, or a leading dot)".to_string());
        }
        if label.len() > MAX_LABEL_LEN {
            return Err(format!(
                "the label `{label}` is {} characters, the limit is {MAX_LABEL_LEN}",
                label.len()
            ));
        }
        if let Some(c) = label
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || *c == '-'))
        {
            return Err(format!("`{c}` is not allowed in a host name"));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(format!("the label `{label}` starts or ends with `-`"));
        }
    }
    Ok(())
}

impl fmt::Display for EgressRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            HostPattern::Name(name) => f.write_str(name)?,
            HostPattern::Subdomains(parent) => write!(f, "*.{parent}")?,
            HostPattern::Ip(IpAddr::V4(ip)) => write!(f, "{ip}")?,
            HostPattern::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]")?,
        }
        match self.port {
            PortPattern::Default => Ok(()),
            PortPattern::One(port) => write!(f, ":{port}"),
            PortPattern::Any => f.write_str(":*"),
        }
    }
}

impl FromStr for EgressRule {
    type Err = EgressRuleError;

    fn from_str(text: &str) -> Result<EgressRule, EgressRuleError> {
        EgressRule::parse(text)
    }
}

impl TryFrom<String> for EgressRule {
    type Error = EgressRuleError;

    fn try_from(text: String) -> Result<EgressRule, EgressRuleError> {
        EgressRule::parse(&text)
    }
}

impl From<EgressRule> for String {
    fn from(rule: EgressRule) -> String {
        rule.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(text: &str) -> EgressRule {
        EgressRule::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn refused(text: &str) -> EgressRuleError {
        match EgressRule::parse(text) {
            Ok(r) => panic!("{text} was accepted as {r}"),
            Err(e) => e,
        }
    }

    #[test]
    fn accepted_forms_print_back_in_canonical_form() {
        for (text, canonical) in [
            ("example.com", "example.com"),
            ("API.Example.COM.", "api.example.com"),
            ("  example.com  ", "example.com"),
            ("*.example.com", "*.example.com"),
            ("*.Example.com.:8443", "*.example.com:8443"),
            ("example.com:8080", "example.com:8080"),
            ("example.com:*", "example.com:*"),
            ("localhost", "localhost"),
            ("my-service", "my-service"),
            ("10.0.0.5", "10.0.0.5"),
            ("10.0.0.5:5432", "10.0.0.5:5432"),
            ("10.0.0.5:*", "10.0.0.5:*"),
            ("[::1]", "[::1]"),
            ("[FD00:0::5]:8080", "[fd00::5]:8080"),
            ("[::1]:*", "[::1]:*"),
            ("example.com:65535", "example.com:65535"),
            ("example.com:1", "example.com:1"),
            ("3com.com", "3com.com"),
        ] {
            assert_eq!(rule(text).to_string(), canonical, "{text}");
        }
    }

    #[test]
    fn a_name_allows_itself_on_443_and_80_only_without_a_port() {
        let r = rule("example.com");
        assert!(r.allows("example.com", 443));
        assert!(r.allows("example.com", 80));
        assert!(r.allows("EXAMPLE.com.", 443));
        assert!(!r.allows("example.com", 8443));
        assert!(!r.allows("api.example.com", 443));
        assert!(!r.allows("example.com.evil", 443));
        assert!(!r.allows("notexample.com", 443));
    }

    #[test]
    fn a_port_or_star_replaces_the_default_ports() {
        let r = rule("example.com:8443");
        assert!(r.allows("example.com", 8443));
        assert!(!r.allows("example.com", 443));
        assert!(!r.allows("example.com", 80));
        let any = rule("example.com:*");
        assert!(any.allows("example.com", 1));
        assert!(any.allows("example.com", 65535));
        assert!(any.allows("example.com", 443));
    }

    #[test]
    fn a_wildcard_allows_subdomains_at_any_depth_but_not_the_parent() {
        let r = rule("*.example.com");
        assert!(r.allows("api.example.com", 443));
        assert!(r.allows("a.b.c.Example.COM.", 80));
        assert!(!r.allows("example.com", 443));
        assert!(!r.allows("badexample.com", 443));
        assert!(!r.allows("api.example.com.evil", 443));
        assert!(!r.allows("api.example.com", 22));
        assert!(!r.allows(".example.com", 443));
    }

    #[test]
    fn ip_rules_match_ip_literals_only_and_names_never_match_ips() {
        let v4 = rule("10.0.0.5");
        assert!(v4.allows("10.0.0.5", 443));
        assert!(!v4.allows("10.0.0.6", 443));
        assert!(!v4.allows("10.0.0.5", 22));
        let v6 = rule("[fd00::5]:8080");
        assert!(v6.allows("fd00::5", 8080));
        assert!(v6.allows("[FD00:0:0::5]", 8080));
        assert!(!v6.allows("fd00::6", 8080));
        let name = rule("localhost:*");
        assert!(!name.allows("127.0.0.1", 80));
        assert!(!name.allows("::1", 80));
        let wildcard = rule("*.example.com");
        assert!(!wildcard.allows("10.0.0.5", 443));
        assert!(!v4.allows("localhost", 443));
    }

    #[test]
    fn hosts_that_are_not_names_or_ips_match_nothing() {
        let r = rule("*.example.com:*");
        for host in [
            "",
            "a..example.com",
            "evil/x.example.com",
            "a b.example.com",
            "x_y.example.com",
        ] {
            assert!(!r.allows(host, 443), "{host:?}");
        }
    }

    #[test]
    fn the_list_allows_what_any_rule_allows_and_nothing_when_empty() {
        let rules = [rule("api.example.com"), rule("10.0.0.5:5432")];
        assert!(allows(&rules, "api.example.com", 443));
        assert!(allows(&rules, "10.0.0.5", 5432));
        assert!(!allows(&rules, "10.0.0.5", 443));
        assert!(!allows(&rules, "evil.example", 443));
        assert!(!allows(&[], "api.example.com", 443));
    }

    #[test]
    fn urls_and_paths_are_refused_with_the_host_to_write() {
        let e = refused("https://api.example.com/v1/chat");
        assert_eq!(
            e,
            EgressRuleError::Url {
                text: "https://api.example.com/v1/chat".into(),
                host: "api.example.com".into()
            }
        );
        assert!(
            e.to_string()
                .contains("write the host only: `api.example.com`")
        );
        assert!(
            refused("http://user@example.com:8080")
                .to_string()
                .contains("`example.com:8080`")
        );
        let e = refused("example.com/v1");
        assert!(matches!(e, EgressRuleError::Path { ref host, .. } if host == "example.com"));
        assert!(e.to_string().contains("write `example.com`"), "{e}");
        assert!(matches!(refused("/v1"), EgressRuleError::Path { .. }));
    }

    #[test]
    fn empty_and_star_alone_are_refused() {
        assert_eq!(refused(""), EgressRuleError::Empty);
        assert_eq!(refused("   "), EgressRuleError::Empty);
        for text in ["*", "*.", "*:443", "*:*"] {
            assert!(
                matches!(refused(text), EgressRuleError::Everything { .. }),
                "{text}"
            );
        }
    }

    #[test]
    fn a_star_anywhere_but_the_whole_first_label_is_refused() {
        for text in [
            "foo*.com",
            "a.*.com",
            "*example.com",
            "example.*",
            "**.example.com",
            "*.*.example.com",
            "*.10.0.0.5",
        ] {
            let e = refused(text);
            assert!(matches!(e, EgressRuleError::Wildcard { .. }), "{text}: {e}");
            assert!(e.to_string().contains("`*.example.com`"), "{e}");
        }
    }

    #[test]
    fn bad_names_are_refused_saying_what_is_wrong() {
        let long_label = format!("{}.com", "a".repeat(64));
        let long_name = format!("{}.com", vec!["a".repeat(60); 5].join("."));
        for (text, reason) in [
            ("exa_mple.com", "`_` is not allowed"),
            ("exa mple.com", "` ` is not allowed"),
            ("ex@mple.com", "`@` is not allowed"),
            ("a..com", "empty label"),
            (".example.com", "empty label"),
            ("-a.com", "starts or ends with `-`"),
            ("a-.com", "starts or ends with `-`"),
            (".", "no name"),
            ("*..", "no name"),
            ("bücher.de", "`ü` is not allowed"),
            (long_label.as_str(), "is 64 characters"),
            (long_name.as_str(), "the limit is 253"),
            ("a:b:c", "more than one `:`"),
        ] {
            match refused(text) {
                EgressRuleError::Name { reason: r, .. } => {
                    assert!(r.contains(reason), "{text}: {r}")
                }
                e => panic!("{text}: {e}"),
            }
        }
        let e = refused("exa_mple.com");
        assert!(e.to_string().contains("`exa_mple.com`"), "{e}");
        assert!(e.to_string().contains("such as `api.example.com`"), "{e}");
    }

    #[test]
    fn numbers_that_are_not_ipv4_are_refused() {
        for text in ["10.0.0.256", "10.0.0", "1.2.3.4.5", "010.0.0.1"] {
            let e = refused(text);
            assert!(matches!(e, EgressRuleError::Ipv4 { .. }), "{text}: {e}");
            assert!(e.to_string().contains("such as `10.0.0.5`"), "{e}");
        }
    }

    #[test]
    fn bad_ports_are_refused_with_the_forms_to_write() {
        for (text, port) in [
            ("example.com:0", "0"),
            ("example.com:65536", "65536"),
            ("example.com:https", "https"),
            ("example.com:", ""),
            ("example.com:+443", "+443"),
            ("10.0.0.5:99999", "99999"),
            ("[::1]:0", "0"),
        ] {
            match refused(text) {
                EgressRuleError::Port { port: p, .. } => assert_eq!(p, port, "{text}"),
                e => panic!("{text}: {e}"),
            }
        }
        let e = refused("example.com:0").to_string();
        assert!(e.contains("`example.com:8443`"), "{e}");
        assert!(e.contains("`example.com:*`"), "{e}");
    }

    #[test]
    fn ipv6_needs_brackets_and_brackets_need_ipv6() {
        let e = refused("::1");
        assert!(matches!(e, EgressRuleError::UnbracketedIpv6 { .. }), "{e}");
        assert!(e.to_string().contains("write `[::1]`"), "{e}");
        assert!(matches!(
            refused("fd00::5"),
            EgressRuleError::UnbracketedIpv6 { .. }
        ));
        for text in ["[example.com]", "[::1", "[::1]x", "[10.0.0.5]", "[]"] {
            assert!(
                matches!(refused(text), EgressRuleError::Ipv6 { .. }),
                "{text}"
            );
        }
    }

    #[test]
    fn serde_reads_and_writes_the_text() {
        let rules: Vec<EgressRule> =
            serde_json::from_str(r#"["API.example.com", "*.example.com:*", "[::1]:8080"]"#)
                .unwrap();
        assert_eq!(
            serde_json::to_string(&rules).unwrap(),
            r#"["api.example.com","*.example.com:*","[::1]:8080"]"#
        );
        let e = serde_json::from_str::<EgressRule>(r#""https://example.com""#).unwrap_err();
        assert!(e.to_string().contains("write the host only"), "{e}");
        assert_eq!(
            "example.com".parse::<EgressRule>().unwrap(),
            rule("example.com")
        );
    }
}
