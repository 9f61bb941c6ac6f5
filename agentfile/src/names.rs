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
