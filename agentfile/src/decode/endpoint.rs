//! Provider endpoints: what a `provider:` name, a `base_url` and an `api_key_secret` resolve to
//! — the protocol, the OpenAI-compatible service, the URL and the secret holding the key. One
//! rule for an agent's `runtime`, its `runtime.fallback` entries and the top-level `limits:`
//! entries, so an entry names a provider key exactly as the models it limits do
//! ([`ProviderKey`]).

use super::*;

/// What a provider name resolves to.
pub(super) struct ProviderIn {
    pub(super) provider: Provider,
    /// The OpenAI-compatible service reached through the `openai` provider, if any.
    pub(super) via: Option<String>,
    /// The secret holding the provider's API key when `api_key_secret` is not given.
    default_secret: Option<&'static str>,
    /// The service's URL when `base_url` is not given.
    default_url: Option<&'static str>,
}

/// A resolved provider with its URL and key: where a model's calls go and what they spend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Endpoint {
    pub(super) provider: Provider,
    /// The OpenAI-compatible service `provider:` named, if any.
    pub(super) via: Option<String>,
    /// The base URL; `None`: the provider's own.
    pub(super) base_url: Option<String>,
    /// The secret holding the API key; `None`: no key.
    pub(super) key_secret: Option<String>,
}

impl ProviderIn {
    /// The endpoint of this provider with `base_url` and `api_key_secret` as written (`None`
    /// when absent): the service's URL and the provider's key secret fill the gaps, except that
    /// the plain `openai` provider with a `base_url` of its own (usually a local server) has no
    /// key unless one is named.
    pub(super) fn endpoint(
        self,
        base_url: Option<String>,
        api_key_secret: Option<String>,
    ) -> Endpoint {
        let local_openai =
            self.provider == Provider::Openai && self.via.is_none() && base_url.is_some();
        let key_secret = api_key_secret.or_else(|| {
            (!local_openai)
                .then(|| self.default_secret.map(str::to_string))
                .flatten()
        });
        Endpoint {
            provider: self.provider,
            base_url: base_url.or_else(|| self.default_url.map(str::to_string)),
            via: self.via,
            key_secret,
        }
    }
}

/// One provider key at one endpoint: the identity of a pool-wide limiter as the agentfile sees
/// it. Models with the same one share the pool's limits for it (the runner names the limiter
/// from the same parts: the provider, the URL's host and a digest of the key). Which service
/// name led there (`groq`, or `openai` with Groq's URL and key) does not matter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ProviderKey {
    provider: Provider,
    base_url: Option<String>,
    key_secret: Option<String>,
}

impl ProviderKey {
    /// The key an endpoint's calls use.
    pub(super) fn of(endpoint: &Endpoint) -> Self {
        Self {
            provider: endpoint.provider,
            base_url: endpoint.base_url.clone(),
            key_secret: endpoint.key_secret.clone(),
        }
    }

    /// The key an agent's primary model uses.
    pub(super) fn of_runtime(r: &Runtime) -> Self {
        Self {
            provider: r.provider,
            base_url: r.base_url.clone(),
            key_secret: r.api_key_secret.clone(),
        }
    }

    /// The key a fallback model uses.
    pub(super) fn of_fallback(f: &FallbackModel) -> Self {
        Self {
            provider: f.provider,
            base_url: f.base_url.clone(),
            key_secret: f.api_key_secret.clone(),
        }
    }
}

/// `` `openai` at https://api.groq.com/openai/v1 with key `GROQ_API_KEY` ``, `` `anthropic` at
/// its default URL with key `ANTHROPIC_API_KEY` ``, `` … with no key ``.
impl std::fmt::Display for ProviderKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`{}` at ", self.provider.as_str())?;
        match &self.base_url {
            Some(url) => write!(f, "{url}")?,
            None => write!(f, "its default URL")?,
        }
        match &self.key_secret {
            Some(secret) => write!(f, " with key `{secret}`"),
            None => write!(f, " with no key"),
        }
    }
}

impl Cx {
    /// Resolves a provider name at `path` (its parent's path; the value is at `loc`),
    /// reporting unknown and rejected names.
    pub(super) fn provider(&mut self, name: &str, loc: Loc, path: &str) -> Option<ProviderIn> {
        let path = join(path, "provider");
        match providers::resolve(name) {
            Some(Resolution::Native {
                provider,
                key_secret,
            }) => Some(ProviderIn {
                provider,
                via: None,
                default_secret: key_secret,
                default_url: None,
            }),
            Some(Resolution::OpenaiCompatible {
                base_url,
                key_secret,
            }) => Some(ProviderIn {
                provider: Provider::Openai,
                via: Some(name.to_string()),
                default_secret: Some(key_secret),
                default_url: Some(base_url),
            }),
            Some(Resolution::Rejected(why)) => {
                self.report(&path, loc, Problem::UnsupportedProvider { name, why });
                None
            }
            None => {
                let known = providers::known_names();
                let closest = closest(name, &known);
                self.report(&path, loc, Problem::UnknownProvider { name, closest });
                None
            }
        }
    }

    /// `base_url`: an http(s) URL without its trailing `/`, or `null` for none.
    pub(super) fn base_url(&mut self, f: &Field<'_>) -> Option<Option<String>> {
        let Some(url) = self.nullable_string(f)? else {
            return Some(None);
        };
        if !(url.starts_with("http://") || url.starts_with("https://")) || url.len() < 10 {
            self.report(&f.path, f.value.loc, Problem::InvalidUrl(&url));
            return None;
        }
        Some(Some(url.trim_end_matches('/').to_string()))
    }

    /// `api_key_secret`: a secret name (a value found here is reported, never repeated).
    pub(super) fn api_key_secret(&mut self, f: &Field<'_>) -> Option<String> {
        let name = self.string(f.value, &f.path)?;
        if !names::is_valid_secret_name(&name) {
            self.secret_name_error(&f.path, f.value.loc, &name);
            return None;
        }
        Some(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(name: &str, base_url: Option<&str>, secret: Option<&str>) -> Endpoint {
        let mut cx = Cx::default();
        let resolved = cx.provider(name, Loc::START, "runtime").expect("known");
        resolved.endpoint(base_url.map(String::from), secret.map(String::from))
    }

    #[test]
    fn a_service_name_and_openai_with_its_url_and_key_are_one_key() {
        let groq = endpoint("groq", None, None);
        assert_eq!(groq.via.as_deref(), Some("groq"));
        let spelled_out = endpoint(
            "openai",
            Some("https://api.groq.com/openai/v1"),
            Some("GROQ_API_KEY"),
        );
        assert_eq!(spelled_out.via, None);
        assert_eq!(ProviderKey::of(&groq), ProviderKey::of(&spelled_out));
        // Without the key, `openai` with a URL of its own is a keyless (local) server.
        let keyless = endpoint("openai", Some("https://api.groq.com/openai/v1"), None);
        assert_eq!(keyless.key_secret, None);
        assert_ne!(ProviderKey::of(&groq), ProviderKey::of(&keyless));
    }

    #[test]
    fn defaults_fill_the_gaps() {
        let openai = endpoint("openai", None, None);
        assert_eq!(
            (openai.base_url.as_deref(), openai.key_secret.as_deref()),
            (None, Some("OPENAI_API_KEY"))
        );
        let other_key = endpoint("anthropic", None, Some("TEAM_KEY"));
        assert_eq!(other_key.key_secret.as_deref(), Some("TEAM_KEY"));
        assert_eq!(
            ProviderKey::of(&other_key).to_string(),
            "`anthropic` at its default URL with key `TEAM_KEY`"
        );
        assert_eq!(
            ProviderKey::of(&endpoint("groq", None, None)).to_string(),
            "`openai` at https://api.groq.com/openai/v1 with key `GROQ_API_KEY`"
        );
        assert_eq!(
            ProviderKey::of(&endpoint("openai", Some("http://127.0.0.1:9/v1"), None)).to_string(),
            "`openai` at http://127.0.0.1:9/v1 with no key"
        );
    }
}
