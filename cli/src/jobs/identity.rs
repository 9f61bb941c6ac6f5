//! Who a bearer token stands for: the broker asks the checkpoint API
//! (`GET /v1/runners/threads/{id}/identity`) with the caller's own token, and keeps each answer
//! it was given for [`TTL`], keyed by SHA-256 of the token and the thread (never the token
//! itself). Refusals are not kept: a token the API refused is asked again next time.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ninetrix_client::{Client, ClientError, Token};
use ninetrix_proto::ThreadId;
use ninetrix_proto::api::ThreadLabels;
use sha2::{Digest as _, Sha256};

use super::error::BrokerError;

/// How long an identity the API gave is trusted without asking again.
pub(crate) const TTL: Duration = Duration::from_secs(60);

/// More entries than this and the expired ones are dropped.
const PRUNE_AT: usize = 1024;

/// The cache key of a token and thread: SHA-256(token) ‖ thread.
type Key = ([u8; 32], ThreadId);

/// The API and the identities it gave.
pub(crate) struct Identities {
    http: reqwest::Client,
    api_url: String,
    cache: Mutex<HashMap<Key, (Instant, ThreadLabels)>>,
}

impl Identities {
    /// Identities asked of the API at `api_url`.
    pub(crate) fn new(http: reqwest::Client, api_url: &str) -> Identities {
        Identities {
            http,
            api_url: api_url.to_string(),
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The labels of `thread`, as the API tells the holder of `token`.
    pub(crate) async fn labels(
        &self,
        token: &str,
        thread: ThreadId,
    ) -> Result<ThreadLabels, BrokerError> {
        let key: Key = (Sha256::digest(token.as_bytes()).into(), thread);
        let now = Instant::now();
        if let Some((at, labels)) = self.lock().get(&key)
            && now.duration_since(*at) < TTL
        {
            return Ok(labels.clone());
        }
        let client = Client::new(self.http.clone(), &self.api_url, Some(Token::new(token)))
            .with_timeout(Duration::from_secs(10));
        let labels = client
            .thread_identity(thread)
            .await
            .map_err(|e| refused(thread, &e))?;
        let mut cache = self.lock();
        if cache.len() >= PRUNE_AT {
            cache.retain(|_, (at, _)| now.duration_since(*at) < TTL);
        }
        cache.insert(key, (now, labels.clone()));
        Ok(labels)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, (Instant, ThreadLabels)>> {
        self.cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The broker's answer when the API did not confirm a token: a refusal (the token is not this
/// thread's, or the thread is gone) is 401; no answer, a server error or an unreadable answer is
/// 503, to be retried.
pub(crate) fn refused(thread: ThreadId, e: &ClientError) -> BrokerError {
    match e {
        ClientError::Api { status, code, .. } if (400..500).contains(status) && *status != 429 => {
            BrokerError::Unauthorized(format!(
                "the checkpoint API does not accept this token for thread {thread} ({status} \
                 {code}); send the thread's own runner token"
            ))
        }
        other => BrokerError::Unavailable(format!(
            "cannot check the token with the checkpoint API: {other}; try again"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ninetrix_client::ErrorCode;

    fn api(status: u16, code: ErrorCode) -> ClientError {
        ClientError::Api {
            status,
            code,
            message: "secret-looking message".into(),
            running: None,
        }
    }

    #[test]
    fn refusals_are_401_and_outages_503() {
        let t = ThreadId::new_v7();
        for e in [
            api(401, ErrorCode::Unauthorized),
            api(403, ErrorCode::Forbidden),
            api(404, ErrorCode::NotFound),
            api(410, ErrorCode::Purged),
        ] {
            assert!(
                matches!(refused(t, &e), BrokerError::Unauthorized(_)),
                "{e}"
            );
        }
        for e in [
            api(500, ErrorCode::Internal),
            api(503, ErrorCode::NotReady),
            api(429, ErrorCode::Other("slow_down".into())),
            ClientError::Unreachable {
                url: "http://api".into(),
                reason: "connection refused".into(),
            },
        ] {
            assert!(matches!(refused(t, &e), BrokerError::Unavailable(_)), "{e}");
        }
    }

    #[tokio::test]
    async fn an_unreachable_api_is_unavailable_and_nothing_is_kept() {
        let ids = Identities::new(reqwest::Client::new(), "http://127.0.0.1:1");
        let e = ids.labels("tok", ThreadId::new_v7()).await.unwrap_err();
        assert!(matches!(e, BrokerError::Unavailable(_)), "{e}");
        assert!(!e.to_string().contains("tok\""));
        assert!(ids.lock().is_empty());
    }
}
