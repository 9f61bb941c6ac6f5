//! Permits for model calls: the seam between a model call and the pool-wide limits and budgets
//! the checkpoint API keeps (docs/runner.md, "Limits, budgets and fallback").
//!
//! Before each attempt of a model call whose model has limits (`runtime.limits`,
//! `runtime.fallback[].limits`) or whose agent has budgets beyond one run, the runner asks for a
//! lease of the model's limiter ([`Permits::acquire`]); it renews the lease while the call runs
//! and releases it when the attempt ends, with what the call used or the provider's 429. This
//! module owns the seam ([`Permits`], [`PermitError`]), the limiter's name
//! ([`limiter_name`]: never the key itself) and [`MemoryPermits`], an in-process pool that
//! enforces `max_in_flight`, remembers a provider's 429 and keeps the budgets, for tests. The
//! checkpoint API's implementation is [`crate::checkpoints::HttpCheckpoints`]'s (the same
//! patience as every other API call); what a call does with a permit is `llm`'s.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use ninetrix_proto::LeaseId;
use ninetrix_proto::api::{
    BudgetScope, BudgetSpent, LeaseRelease, LeaseRenewed, LeaseRequest, LeaseResponse,
    MAX_LIMITER_LEN, SlotWait,
};
use sha2::{Digest, Sha256};
use tokio::sync::Notify;
use tokio::time::Instant;

/// What a [`Permits`] call returns.
pub type PermitFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, PermitError>> + Send + 'a>>;

/// Why a permit call failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PermitError {
    /// Another runner claimed the thread (409 `fenced`): this one must stop.
    #[error("fenced: another runner owns this thread now ({0})")]
    Fenced(String),
    /// The thread was purged (410 `purged`).
    #[error("thread purged: {0}")]
    Purged(String),
    /// The API does not know the lease (it expired and was forgotten, or was released): a
    /// renewal stops, the call goes on without it.
    #[error("unknown lease: {0}")]
    UnknownLease(String),
    /// The API has no model-lease routes (an older API): nothing can be enforced.
    #[error("the checkpoint API does not offer model leases: {0}")]
    Unsupported(String),
    /// The API refused the request.
    #[error("the checkpoint API refused the model lease: {0}")]
    Refused(String),
    /// The API could not be reached for longer than the runner's patience, or (for the one
    /// attempt of a renewal or a release) this time.
    #[error("the checkpoint API is unreachable: {0}")]
    Unreachable(String),
}

impl PermitError {
    /// Whether trying again later may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, PermitError::Unreachable(_))
    }
}

/// Where a runner gets its permits. Object-safe (boxed futures), so one model call holds an
/// `Arc<dyn Permits>` whatever the store behind it is.
pub trait Permits: Send + Sync {
    /// Asks for a lease: granted, a wait (after holding the request up to
    /// `request.wait_ms`), or a spent budget. Transient failures are retried with the API's
    /// patience.
    fn acquire<'a>(&'a self, request: &'a LeaseRequest) -> PermitFuture<'a, LeaseResponse>;
    /// Renews a lease (one attempt).
    fn renew(&self, lease: LeaseId) -> PermitFuture<'_, LeaseRenewed>;
    /// Releases a lease with what the call used (one attempt).
    fn release<'a>(&'a self, lease: LeaseId, release: &'a LeaseRelease) -> PermitFuture<'a, ()>;
}

/// The limiter of a model: `<provider>@<host[:port]>#<first 12 hex digits of SHA-256 of its
/// API key>` (`#none` without a key), at most [`MAX_LIMITER_LEN`] characters. The key itself
/// never appears: two runners with the same key at the same endpoint name the same limiter.
pub fn limiter_name(provider: &str, host: &str, key: Option<&str>) -> String {
    let digest = match key {
        Some(key) => Sha256::digest(key.as_bytes())
            .iter()
            .take(6)
            .map(|b| format!("{b:02x}"))
            .collect(),
        None => "none".to_string(),
    };
    let host: String = host.chars().filter(|c| !c.is_control()).collect();
    let tail = format!("#{digest}");
    let room = MAX_LIMITER_LEN.saturating_sub(provider.chars().count() + 1 + tail.len());
    let host: String = host.chars().take(room).collect();
    format!("{provider}@{host}{tail}")
}

/// How long a lease of [`MemoryPermits`] lasts unless renewed.
const MEMORY_TTL: Duration = Duration::from_secs(30);

/// A pool's permits kept in this process, for tests: `max_in_flight` per limiter (a request
/// waits up to its `wait_ms` for a slot, then is answered `wait`), a provider's 429 reported on
/// a release (every request of the limiter waits until it passes), and the budgets (the spend of
/// the releases against the request's [`ninetrix_proto::api::BudgetPolicy`], plus what
/// [`MemoryPermits::raise`] added). Leases expire after 30 s unless renewed. Time is tokio's, so
/// a paused clock works.
#[derive(Clone, Default)]
pub struct MemoryPermits {
    inner: Arc<Mutex<Pool>>,
    freed: Arc<Notify>,
}

#[derive(Default)]
struct Pool {
    leases: HashMap<LeaseId, Held>,
    /// Limiter → until when a provider's 429 holds every call back.
    rate_limited: HashMap<String, (Instant, DateTime<Utc>)>,
    /// The thread's spend (the session's and, for one thread, the day's too).
    spent_usd: f64,
    /// Scope → what people approved on top of the agentfile's amount.
    raised: HashMap<BudgetScope, f64>,
    /// Every request and release, in order.
    requests: Vec<LeaseRequest>,
    releases: Vec<LeaseRelease>,
    /// Limiter → the most leases it ever had at once.
    peak: HashMap<String, u32>,
    /// Requests answered `wait`.
    waits: u64,
}

struct Held {
    limiter: String,
    expires: Instant,
}

impl Pool {
    fn in_flight(&mut self, limiter: &str) -> u32 {
        let now = Instant::now();
        self.leases.retain(|_, h| h.expires > now);
        self.leases
            .values()
            .filter(|h| h.limiter == limiter)
            .count() as u32
    }

    /// The first budget of `request` with no room left.
    fn spent(&self, request: &LeaseRequest) -> Option<BudgetSpent> {
        let policy = request.budgets.as_ref()?;
        let day = Utc::now().format("%Y-%m-%d").to_string();
        let scopes = [
            (BudgetScope::Session, policy.per_session_usd),
            (
                BudgetScope::AgentDay { day: day.clone() },
                policy.per_day_usd,
            ),
            (BudgetScope::PoolDay { day }, policy.pool_per_day_usd),
        ];
        scopes.into_iter().find_map(|(scope, amount)| {
            let raised = self.raised.get(&scope).copied().unwrap_or(0.0);
            let limit = amount? + raised;
            (self.spent_usd >= limit).then_some(BudgetSpent {
                scope,
                limit_usd: limit,
                spent_usd: self.spent_usd,
                raised_usd: raised,
            })
        })
    }

    /// The answer to `request` now, if it is not "wait for a slot to free".
    fn decide(&mut self, request: &LeaseRequest) -> Option<LeaseResponse> {
        if let Some(spent) = self.spent(request) {
            return Some(LeaseResponse::OverBudget { spent });
        }
        if let Some((until, at)) = self.rate_limited.get(&request.limiter).copied()
            && until > Instant::now()
        {
            self.waits += 1;
            return Some(LeaseResponse::Wait {
                wait: SlotWait::RateLimited { until: at },
                retry_in_ms: until.duration_since(Instant::now()).as_millis() as u64,
            });
        }
        let in_flight = self.in_flight(&request.limiter);
        if request
            .limits
            .max_in_flight
            .is_some_and(|max| in_flight >= max)
        {
            return None;
        }
        let lease = LeaseId::new_v7();
        self.leases.insert(
            lease,
            Held {
                limiter: request.limiter.clone(),
                expires: Instant::now() + MEMORY_TTL,
            },
        );
        let peak = self.peak.entry(request.limiter.clone()).or_default();
        *peak = (*peak).max(in_flight + 1);
        Some(LeaseResponse::Granted {
            lease_id: lease,
            expires_at: Utc::now() + MEMORY_TTL,
            ttl_ms: MEMORY_TTL.as_millis() as u64,
        })
    }
}

impl MemoryPermits {
    /// An empty pool.
    pub fn new() -> MemoryPermits {
        MemoryPermits::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pool> {
        // Every update is a few assignments: a poisoned lock is still consistent.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sets what the thread has spent (as if earlier calls had been released).
    pub fn set_spent(&self, usd: f64) {
        self.lock().spent_usd = usd;
    }

    /// Adds an approved raise to a budget's allowance.
    pub fn raise(&self, scope: BudgetScope, usd: f64) {
        *self.lock().raised.entry(scope).or_default() += usd;
    }

    /// Every lease request so far.
    pub fn requests(&self) -> Vec<LeaseRequest> {
        self.lock().requests.clone()
    }

    /// Every release so far.
    pub fn releases(&self) -> Vec<LeaseRelease> {
        self.lock().releases.clone()
    }

    /// Leases of `limiter` held now.
    pub fn in_flight(&self, limiter: &str) -> u32 {
        self.lock().in_flight(limiter)
    }

    /// The most leases `limiter` ever had at once.
    pub fn peak(&self, limiter: &str) -> u32 {
        self.lock().peak.get(limiter).copied().unwrap_or(0)
    }

    /// How many requests were answered `wait`.
    pub fn waits(&self) -> u64 {
        self.lock().waits
    }

    async fn acquire_now(&self, request: &LeaseRequest) -> LeaseResponse {
        self.lock().requests.push(request.clone());
        let deadline = Instant::now() + Duration::from_millis(request.wait_ms);
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if let Some(answer) = self.lock().decide(request) {
                return answer;
            }
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                let mut pool = self.lock();
                if let Some(answer) = pool.decide(request) {
                    return answer;
                }
                pool.waits += 1;
                let max_in_flight = request.limits.max_in_flight.unwrap_or(0);
                return LeaseResponse::Wait {
                    wait: SlotWait::InFlight {
                        in_flight: pool.in_flight(&request.limiter),
                        max_in_flight,
                    },
                    retry_in_ms: 0,
                };
            }
        }
    }
}

impl Permits for MemoryPermits {
    fn acquire<'a>(&'a self, request: &'a LeaseRequest) -> PermitFuture<'a, LeaseResponse> {
        Box::pin(async move { Ok(self.acquire_now(request).await) })
    }

    fn renew(&self, lease: LeaseId) -> PermitFuture<'_, LeaseRenewed> {
        Box::pin(async move {
            let mut pool = self.lock();
            let now = Instant::now();
            match pool.leases.get_mut(&lease) {
                Some(held) if held.expires > now => {
                    held.expires = now + MEMORY_TTL;
                    Ok(LeaseRenewed {
                        expires_at: Utc::now() + MEMORY_TTL,
                    })
                }
                _ => Err(PermitError::UnknownLease(format!("lease {lease}"))),
            }
        })
    }

    fn release<'a>(&'a self, lease: LeaseId, release: &'a LeaseRelease) -> PermitFuture<'a, ()> {
        Box::pin(async move {
            {
                let mut pool = self.lock();
                let limiter = pool.leases.remove(&lease).map(|h| h.limiter);
                pool.spent_usd += release.cost_usd.max(0.0);
                if let (Some(limiter), Some(limited)) = (limiter, &release.rate_limited) {
                    let wait = Duration::from_millis(limited.retry_after_ms);
                    let until = (
                        Instant::now() + wait,
                        Utc::now() + chrono::Duration::milliseconds(limited.retry_after_ms as i64),
                    );
                    pool.rate_limited.insert(limiter, until);
                }
                pool.releases.push(release.clone());
            }
            self.freed.notify_waiters();
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ninetrix_proto::api::{BudgetPolicy, ModelLimits, RateLimited};

    fn request(limiter: &str, max_in_flight: Option<u32>, wait_ms: u64) -> LeaseRequest {
        LeaseRequest {
            epoch: 1,
            limiter: limiter.into(),
            provider: "openai".into(),
            limits: ModelLimits {
                max_in_flight,
                ..ModelLimits::default()
            },
            budgets: None,
            estimated_tokens: 10,
            wait_ms,
        }
    }

    #[test]
    fn a_limiter_names_the_provider_the_host_and_a_digest_of_the_key_never_the_key() {
        let named = limiter_name("openai", "api.openai.com", Some("sk-secret-123"));
        assert!(named.starts_with("openai@api.openai.com#"), "{named}");
        let digest = named.rsplit('#').next().unwrap();
        assert_eq!(digest.len(), 12);
        assert!(digest.chars().all(|c| c.is_ascii_hexdigit()));
        assert!(!named.contains("sk-secret"));
        assert_eq!(
            named,
            limiter_name("openai", "api.openai.com", Some("sk-secret-123")),
            "the same key names the same limiter"
        );
        assert_ne!(
            named,
            limiter_name("openai", "api.openai.com", Some("sk-other"))
        );
        assert_eq!(
            limiter_name("anthropic", "127.0.0.1:8080", None),
            "anthropic@127.0.0.1:8080#none"
        );
        let long = limiter_name("openai", &"h".repeat(500), Some("k"));
        assert_eq!(long.chars().count(), MAX_LIMITER_LEN);
        let tail = long.rsplit('#').next().unwrap();
        assert_eq!(tail.len(), 12, "the digest survives a long host: {long}");
    }

    #[tokio::test(start_paused = true)]
    async fn memory_permits_hold_max_in_flight_and_hand_a_freed_slot_to_a_waiter() {
        let permits = MemoryPermits::new();
        let r = request("openai@x#none", Some(2), 5_000);
        let mut leases = Vec::new();
        for _ in 0..2 {
            match permits.acquire(&r).await.unwrap() {
                LeaseResponse::Granted { lease_id, .. } => leases.push(lease_id),
                other => panic!("{other:?}"),
            }
        }
        // Full: a short wait is answered `wait` with the counts.
        let short = request("openai@x#none", Some(2), 100);
        let answer = permits.acquire(&short).await.unwrap();
        assert_eq!(
            answer,
            LeaseResponse::Wait {
                wait: SlotWait::InFlight {
                    in_flight: 2,
                    max_in_flight: 2
                },
                retry_in_ms: 0
            }
        );
        // A waiter gets the slot a release frees.
        let waiter = {
            let permits = permits.clone();
            let r = r.clone();
            tokio::spawn(async move { permits.acquire(&r).await.unwrap() })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!waiter.is_finished(), "it waits for a slot");
        permits
            .release(leases[0], &LeaseRelease::default())
            .await
            .unwrap();
        assert!(matches!(
            waiter.await.unwrap(),
            LeaseResponse::Granted { .. }
        ));
        assert_eq!(permits.peak("openai@x#none"), 2);
        // Another limiter is not held back.
        let other = request("anthropic@y#none", Some(2), 0);
        assert!(matches!(
            permits.acquire(&other).await.unwrap(),
            LeaseResponse::Granted { .. }
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn an_expired_lease_frees_its_slot_and_cannot_be_renewed() {
        let permits = MemoryPermits::new();
        let r = request("l", Some(1), 0);
        let LeaseResponse::Granted { lease_id, .. } = permits.acquire(&r).await.unwrap() else {
            panic!()
        };
        assert!(permits.renew(lease_id).await.is_ok());
        tokio::time::sleep(MEMORY_TTL + Duration::from_secs(1)).await;
        assert_eq!(
            permits.in_flight("l"),
            0,
            "a killed runner's lease comes back"
        );
        assert!(matches!(
            permits.renew(lease_id).await,
            Err(PermitError::UnknownLease(_))
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_providers_429_holds_the_whole_limiter_back() {
        let permits = MemoryPermits::new();
        let r = request("l", None, 0);
        let LeaseResponse::Granted { lease_id, .. } = permits.acquire(&r).await.unwrap() else {
            panic!()
        };
        let release = LeaseRelease {
            rate_limited: Some(RateLimited {
                retry_after_ms: 3_000,
            }),
            ..LeaseRelease::default()
        };
        permits.release(lease_id, &release).await.unwrap();
        let LeaseResponse::Wait { wait, retry_in_ms } = permits.acquire(&r).await.unwrap() else {
            panic!()
        };
        assert!(matches!(wait, SlotWait::RateLimited { .. }));
        assert_eq!(retry_in_ms, 3_000);
        tokio::time::sleep(Duration::from_millis(3_001)).await;
        assert!(matches!(
            permits.acquire(&r).await.unwrap(),
            LeaseResponse::Granted { .. }
        ));
    }

    #[tokio::test]
    async fn a_spent_budget_refuses_the_call_until_it_is_raised() {
        let permits = MemoryPermits::new();
        let mut r = request("l", None, 0);
        r.budgets = Some(BudgetPolicy {
            per_session_usd: Some(1.0),
            per_day_usd: None,
            pool_per_day_usd: None,
            timezone: "UTC".into(),
        });
        assert!(matches!(
            permits.acquire(&r).await.unwrap(),
            LeaseResponse::Granted { .. }
        ));
        permits.set_spent(1.02);
        let LeaseResponse::OverBudget { spent } = permits.acquire(&r).await.unwrap() else {
            panic!()
        };
        assert_eq!(spent.scope, BudgetScope::Session);
        assert_eq!((spent.limit_usd, spent.spent_usd), (1.0, 1.02));
        permits.raise(BudgetScope::Session, 1.0);
        assert!(matches!(
            permits.acquire(&r).await.unwrap(),
            LeaseResponse::Granted { .. }
        ));
    }
}
