//! What `ninetrix job-broker` reads from its environment: the pool's [`BrokerConfig`]
//! (`AGENTFILE_JOBS_CONFIG`, JSON) and the checkpoint API's URL (`AGENTFILE_API_URL`), read
//! through a lookup so the rules are tested without touching the process's environment.

use super::config::{BrokerConfig, CONFIG_VAR};

/// The variable naming the checkpoint API.
pub(crate) const API_URL_VAR: &str = "AGENTFILE_API_URL";

/// The broker's settings.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Settings {
    /// The pool's agents with job tools.
    pub config: BrokerConfig,
    /// The checkpoint API the broker checks tokens with.
    pub api_url: String,
}

/// A variable missing or unreadable.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum SettingsError {
    /// Not set.
    #[error("{0} is not set; `ninetrix up` sets it on the pool's job broker")]
    Missing(&'static str),
    /// Not a broker configuration.
    #[error(
        "{CONFIG_VAR} is not a job broker configuration ({0}); run `ninetrix up` again to write it"
    )]
    BadConfig(String),
    /// Not an HTTP URL.
    #[error("{API_URL_VAR} {0:?} is not an http:// or https:// URL of the checkpoint API")]
    BadUrl(String),
}

/// Reads the settings through `var` (the process's environment in `ninetrix job-broker`).
pub(crate) fn read(var: impl Fn(&str) -> Option<String>) -> Result<Settings, SettingsError> {
    let text = var(CONFIG_VAR)
        .filter(|t| !t.trim().is_empty())
        .ok_or(SettingsError::Missing(CONFIG_VAR))?;
    let config: BrokerConfig =
        serde_json::from_str(&text).map_err(|e| SettingsError::BadConfig(e.to_string()))?;
    if !ninetrix_agentfile::names::is_valid_name(&config.pool) {
        return Err(SettingsError::BadConfig(format!(
            "pool {:?} is not a pool name",
            config.pool
        )));
    }
    let api_url = var(API_URL_VAR)
        .filter(|t| !t.trim().is_empty())
        .ok_or(SettingsError::Missing(API_URL_VAR))?;
    if !(api_url.starts_with("http://") || api_url.starts_with("https://")) {
        return Err(SettingsError::BadUrl(api_url));
    }
    Ok(Settings { config, api_url })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(name, _)| *name == k)
                .map(|(_, v)| (*v).to_string())
        }
    }

    #[test]
    fn the_config_and_the_api_are_read_and_a_bad_value_names_its_variable() {
        let good = r#"{"pool":"p","agents":{}}"#;
        let s = read(env(&[(CONFIG_VAR, good), (API_URL_VAR, "http://api:8080")])).unwrap();
        assert_eq!(
            (s.config.pool.as_str(), s.api_url.as_str()),
            ("p", "http://api:8080")
        );
        let e = read(env(&[(API_URL_VAR, "http://api:8080")])).unwrap_err();
        assert_eq!(e, SettingsError::Missing(CONFIG_VAR));
        let e = read(env(&[(CONFIG_VAR, "{nope"), (API_URL_VAR, "http://a")])).unwrap_err();
        assert!(
            e.to_string().starts_with("AGENTFILE_JOBS_CONFIG is not"),
            "{e}"
        );
        let e = read(env(&[
            (CONFIG_VAR, r#"{"pool":"p","agents":{},"x":1}"#),
            (API_URL_VAR, "http://a"),
        ]))
        .unwrap_err();
        assert!(e.to_string().contains("AGENTFILE_JOBS_CONFIG"), "{e}");
        let e = read(env(&[(CONFIG_VAR, good)])).unwrap_err();
        assert_eq!(e, SettingsError::Missing(API_URL_VAR));
        let e = read(env(&[(CONFIG_VAR, good), (API_URL_VAR, "api:8080")])).unwrap_err();
        assert!(e.to_string().contains("AGENTFILE_API_URL"), "{e}");
    }
}
