//! Name rules for pools, agents, environment variables and secrets, and the pool name derived
//! from a directory (as Compose derives a project name).

/// Longest agent or pool name: container names (`ninetrix-<pool>-<agent>-<n>`) and hostnames
/// (`<agent>-<n>`, at most 63 characters) must stay valid.
pub const MAX_NAME_LEN: usize = 48;

/// Whether `name` is a valid pool or agent name: `[a-z0-9][a-z0-9_-]*`, at most 48 characters.
pub fn is_valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_lowercase() || c.is_ascii_digit())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
        && name.len() <= MAX_NAME_LEN
}

/// The closest valid name to `name` (lower-cased, other characters turned into `-`), if any.
pub fn normalize_name(name: &str) -> Option<String> {
    let mapped: String = name
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let trimmed = mapped.trim_start_matches(['-', '_']);
    let cut: String = trimmed.chars().take(MAX_NAME_LEN).collect();
    let cut = cut.trim_end_matches('-').to_string();
    is_valid_name(&cut).then_some(cut)
}

/// Whether `name` is a valid environment variable name: `[A-Za-z_][A-Za-z0-9_]*`.
pub fn is_valid_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Whether `name` is a valid secret name: `[A-Z_][A-Z0-9_]*`.
pub fn is_valid_secret_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_uppercase() || c == '_')
        && chars.all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

/// Whether `text` is a Docker image reference, `[registry[:port]/]path[:tag][@digest]`, by the
/// grammar of `distribution/reference`: path components of lower-case letters and digits joined
/// by `.`, `_`, `__` or dashes; the first component is a registry when it holds `.` or `:` or is
/// `localhost`; a tag of at most 128 word characters, `.` and `-` (not starting with either); a
/// digest `algorithm:hex` with at least 32 hex digits; a name of at most 255 characters.
pub fn is_image_reference(text: &str) -> bool {
    let (rest, digest) = match text.split_once('@') {
        Some((rest, digest)) => (rest, Some(digest)),
        None => (text, None),
    };
    if digest.is_some_and(|d| !is_digest(d)) {
        return false;
    }
    // A tag is after the last `:` of the last path component (a registry's port is not a tag).
    let last = rest.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match rest[last..].rfind(':') {
        Some(i) => (&rest[..last + i], Some(&rest[last + i + 1..])),
        None => (rest, None),
    };
    if tag.is_some_and(|t| !is_tag(t)) || name.is_empty() || name.len() > 255 {
        return false;
    }
    let mut parts: Vec<&str> = name.split('/').collect();
    if parts.len() > 1 && (parts[0].contains(['.', ':']) || parts[0] == "localhost") {
        if !is_registry(parts[0]) {
            return false;
        }
        parts.remove(0);
    }
    parts.iter().all(|p| is_path_component(p))
}

/// `[a-z0-9]+` runs joined by `.`, `_`, `__` or one or more `-`.
fn is_path_component(part: &str) -> bool {
    let bytes = part.as_bytes();
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    if !bytes.first().is_some_and(alnum) || !bytes.last().is_some_and(alnum) {
        return false;
    }
    let mut separator = String::new();
    for &b in bytes {
        if alnum(&b) {
            if !(separator.is_empty()
                || matches!(separator.as_str(), "." | "_" | "__")
                || separator.bytes().all(|c| c == b'-'))
            {
                return false;
            }
            separator.clear();
        } else if matches!(b, b'.' | b'_' | b'-') {
            separator.push(b as char);
        } else {
            return false;
        }
    }
    true
}

/// A registry host, with an optional port: DNS labels joined by `.`, or `[IPv6]`.
fn is_registry(domain: &str) -> bool {
    let (host, port) = match domain.rsplit_once(':') {
        Some((host, port)) if !domain.ends_with(']') => (host, Some(port)),
        _ => (domain, None),
    };
    if port.is_some_and(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit())) {
        return false;
    }
    if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return !v6.is_empty() && v6.bytes().all(|b| b.is_ascii_hexdigit() || b == b':');
    }
    !host.is_empty()
        && host.split('.').all(|label| {
            let b = label.as_bytes();
            b.first().is_some_and(u8::is_ascii_alphanumeric)
                && b.last().is_some_and(u8::is_ascii_alphanumeric)
                && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-')
        })
}

/// `[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`.
fn is_tag(tag: &str) -> bool {
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    tag.len() <= 128
        && tag.bytes().next().is_some_and(word)
        && tag.bytes().all(|b| word(b) || b == b'.' || b == b'-')
}

/// `algorithm:encoded`: the algorithm lower-case letters and digits joined by `+`, `.`, `_` or
/// `-`; at least 32 characters of `[A-Za-z0-9=_-]` (hex, for sha256).
fn is_digest(digest: &str) -> bool {
    let Some((algorithm, encoded)) = digest.split_once(':') else {
        return false;
    };
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    !algorithm.is_empty()
        && algorithm
            .split(['+', '.', '_', '-'])
            .all(|part| !part.is_empty() && part.chars().all(alnum))
        && encoded.len() >= 32
        && encoded
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '=' || c == '_' || c == '-')
}

/// Whether a value looks like a credential (an API key or token), so it must not sit in
/// plain `env:` or be printed.
pub fn looks_like_secret_value(value: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "sk-",
        "sk_live_",
        "sk_test_",
        "rk_live_",
        "ghp_",
        "gho_",
        "ghs_",
        "github_pat_",
        "glpat-",
        "xoxb-",
        "xoxp-",
        "xapp-",
        "AKIA",
        "ASIA",
        "AIza",
        "hf_",
        "gsk_",
        "pplx-",
        "nvapi-",
    ];
    let value = value.trim();
    PREFIXES
        .iter()
        .any(|p| value.starts_with(p) && value.len() >= p.len() + 8)
}

/// Whether an environment variable's name says it holds a credential.
pub fn looks_like_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    [
        "_API_KEY",
        "_TOKEN",
        "_SECRET",
        "_PASSWORD",
        "_ACCESS_KEY",
        "_PRIVATE_KEY",
    ]
    .iter()
    .any(|suffix| upper.ends_with(suffix))
        || upper == "API_KEY"
        || upper == "PASSWORD"
        || upper.contains("SECRET")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for ok in ["researcher", "a", "web-2", "data_pipeline", "0x"] {
            assert!(is_valid_name(ok), "{ok}");
        }
        for bad in ["", "Researcher", "-a", "_a", "a.b", "a b", &"a".repeat(49)] {
            assert!(!is_valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn image_references() {
        let digest = format!("sha256:{}", "a".repeat(64));
        for ok in [
            "python",
            "python:3.12-slim",
            "library/python:3.12",
            "ghcr.io/acme/builder:1.4",
            "localhost:5000/tools",
            "localhost/tools:latest",
            "registry.example.com:443/a/b/c:v_1.0-rc",
            "my-org/my__image.x:TAG",
            "[::1]:5000/img",
            "[fe80::1]/img",
            &format!("python@{digest}"),
            &format!("ghcr.io/acme/builder:1.4@{digest}"),
        ] {
            assert!(is_image_reference(ok), "{ok}");
        }
        for bad in [
            "",
            "Python",
            "python:",
            "python:-x",
            "python:3 12",
            " python",
            "acme/Builder",
            "a//b",
            "-a",
            "a-",
            "a..b",
            "a___b",
            "ghcr.io/",
            "ghcr.io:/x",
            "ghcr.io:port/x",
            "python@sha256:abc",
            "python@",
            "https://ghcr.io/acme/x",
            &format!("python:{}", "t".repeat(129)),
        ] {
            assert!(!is_image_reference(bad), "{bad}");
        }
    }

    #[test]
    fn directory_names_become_pool_names() {
        assert_eq!(normalize_name("My Project").as_deref(), Some("my-project"));
        assert_eq!(normalize_name("_tmp.dir").as_deref(), Some("tmp-dir"));
        assert_eq!(normalize_name("...").as_deref(), None);
    }

    #[test]
    fn secret_detection() {
        assert!(looks_like_secret_value("sk-ant-api03-abcdefghijkl"));
        assert!(!looks_like_secret_value("sk-"));
        assert!(!looks_like_secret_value("info"));
        assert!(looks_like_secret_name("OPENAI_API_KEY"));
        assert!(looks_like_secret_name("db_password"));
        assert!(!looks_like_secret_name("LOG_LEVEL"));
        assert!(is_valid_secret_name("ANTHROPIC_API_KEY"));
        assert!(!is_valid_secret_name("anthropic_api_key"));
        assert!(is_valid_env_name("log_level") && !is_valid_env_name("1X"));
    }
}
