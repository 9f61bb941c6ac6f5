//! The provider table: the three providers ninetrix speaks, and the names of the public
//! Ninetrix's providers mapped onto them. One table used everywhere (validation, the runner's
//! key lookup, docs), so no provider is half-supported.

use serde::{Deserialize, Serialize};

/// The wire protocol an agent's model is reached through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Provider {
    /// Anthropic's Messages API.
    Anthropic,
    /// OpenAI's Chat Completions API, or any server compatible with it (`base_url`).
    Openai,
    /// A deterministic offline model that plays the agentfile's `runtime.script`.
    Scripted,
}

impl Provider {
    /// The base URL its API is called at unless `base_url` names another; `None` for
    /// `scripted`, which answers in process.
    pub fn default_base_url(self) -> Option<&'static str> {
        match self {
            Provider::Anthropic => Some("https://api.anthropic.com"),
            Provider::Openai => Some("https://api.openai.com/v1"),
            Provider::Scripted => None,
        }
    }

    /// The name used in agentfiles.
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Anthropic => "anthropic",
            Provider::Openai => "openai",
            Provider::Scripted => "scripted",
        }
    }
}

/// What a provider name in an agentfile resolves to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolution {
    /// A provider ninetrix speaks natively.
    Native {
        /// The provider.
        provider: Provider,
        /// The secret holding its API key, if it needs one.
        key_secret: Option<&'static str>,
    },
    /// A hosted service that speaks the OpenAI protocol.
    OpenaiCompatible {
        /// Its documented OpenAI-compatible base URL.
        base_url: &'static str,
        /// The secret holding its API key.
        key_secret: &'static str,
    },
    /// A provider that cannot be used; the text says what to do instead.
    Rejected(&'static str),
}

/// The OpenAI-compatible hosted providers: (agentfile name, base URL, API key secret).
pub const OPENAI_COMPATIBLE: &[(&str, &str, &str)] = &[
    ("groq", "https://api.groq.com/openai/v1", "GROQ_API_KEY"),
    (
        "together_ai",
        "https://api.together.xyz/v1",
        "TOGETHER_API_KEY",
    ),
    (
        "openrouter",
        "https://openrouter.ai/api/v1",
        "OPENROUTER_API_KEY",
    ),
    (
        "deepseek",
        "https://api.deepseek.com/v1",
        "DEEPSEEK_API_KEY",
    ),
    (
        "fireworks_ai",
        "https://api.fireworks.ai/inference/v1",
        "FIREWORKS_API_KEY",
    ),
    ("cerebras", "https://api.cerebras.ai/v1", "CEREBRAS_API_KEY"),
    ("mistral", "https://api.mistral.ai/v1", "MISTRAL_API_KEY"),
    (
        "google",
        "https://generativelanguage.googleapis.com/v1beta/openai",
        "GEMINI_API_KEY",
    ),
    ("minimax", "https://api.minimax.io/v1", "MINIMAX_API_KEY"),
    ("xai", "https://api.x.ai/v1", "XAI_API_KEY"),
];

/// Every name `runtime.provider` accepts, for suggestions and docs.
pub fn known_names() -> Vec<&'static str> {
    let mut names = vec!["anthropic", "openai", "scripted"];
    names.extend(OPENAI_COMPATIBLE.iter().map(|(name, _, _)| *name));
    names
}

/// Resolves a provider name from an agentfile. `None` means the name is unknown.
pub fn resolve(name: &str) -> Option<Resolution> {
    let native = |provider, key_secret| {
        Some(Resolution::Native {
            provider,
            key_secret,
        })
    };
    match name {
        "anthropic" => native(Provider::Anthropic, Some("ANTHROPIC_API_KEY")),
        "openai" => native(Provider::Openai, Some("OPENAI_API_KEY")),
        "scripted" => native(Provider::Scripted, None),
        "ollama" | "vllm" | "lmstudio" | "lm_studio" | "docker_model_runner" | "llamacpp" => {
            Some(Resolution::Rejected(
                "local model servers speak the OpenAI protocol: use `provider: openai` with \
                 `base_url: http://host.docker.internal:11434/v1` (Ollama's port; use your \
                 server's)",
            ))
        }
        "azure" => Some(Resolution::Rejected(
            "Azure OpenAI is reached through its OpenAI-compatible v1 endpoint: use \
             `provider: openai` with `base_url: https://<resource>.openai.azure.com/openai/v1` \
             and `api_key_secret: AZURE_OPENAI_API_KEY`",
        )),
        "bedrock" => Some(Resolution::Rejected(
            "AWS Bedrock is not supported yet (it needs AWS request signing); use `anthropic` \
             or an OpenAI-compatible gateway with `provider: openai` and `base_url`",
        )),
        _ => OPENAI_COMPATIBLE.iter().find(|(n, _, _)| *n == name).map(
            |(_, base_url, key_secret)| Resolution::OpenaiCompatible {
                base_url,
                key_secret,
            },
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_name_resolves_to_something_usable() {
        for name in known_names() {
            match resolve(name) {
                Some(Resolution::Native { .. } | Resolution::OpenaiCompatible { .. }) => {}
                other => panic!("{name} resolved to {other:?}"),
            }
        }
    }

    #[test]
    fn compatible_base_urls_are_https_without_a_trailing_slash() {
        for (name, url, key) in OPENAI_COMPATIBLE {
            assert!(
                url.starts_with("https://") && !url.ends_with('/'),
                "{name}: {url}"
            );
            assert!(key.ends_with("_API_KEY"), "{name}: {key}");
        }
    }

    #[test]
    fn local_servers_point_at_openai_with_base_url() {
        let Some(Resolution::Rejected(why)) = resolve("ollama") else {
            panic!("ollama must be rejected with advice")
        };
        assert!(why.contains("provider: openai") && why.contains("base_url"));
        assert_eq!(resolve("gpt"), None);
    }
}
