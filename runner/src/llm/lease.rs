//! One attempt's permit of the pool-wide limiter and budgets (docs/runner.md, "Limits, budgets
//! and fallback"): asked for before the attempt — waiting, with the health saying why, while the
//! API answers `wait` — renewed every third of its lease time while the attempt runs, and
//! released when it ends (not on the turn's path: a task of its own with a few retries) with
//! what the call used, the provider's 429, or nothing. A permit dropped without a word (the call
//! cancelled, or dropped by a stop) is released with nothing used; a runner killed outright
//! leaves it to expire in the API.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ninetrix_proto::LeaseId;
use ninetrix_proto::api::{
    BudgetPolicy, LeaseRelease, LeaseRequest, LeaseResponse, MAX_LEASE_WAIT_MS, ModelLimits,
    RateLimited, SlotWait,
};
use ninetrix_proto::events::{ModelWaited, TraceEvent};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::LlmError;
use crate::backoff;
use crate::engine::CallUsage;
use crate::health::{Activity, Health};
use crate::limits::{PermitError, Permits};

/// How long one lease request waits in the API for a slot before it is answered `wait`.
pub(crate) const LEASE_WAIT_MS: u64 = 20_000;
/// A wait for a slot longer than this is traced (`model_waited`).
const TRACED_WAIT: Duration = Duration::from_secs(1);
/// Attempts at a release before it is left to the lease's expiry.
const RELEASE_ATTEMPTS: u32 = 5;
/// The longest `retry_after_ms` a release reports (the API's bound).
const MAX_RETRY_AFTER_MS: u64 = 3_600_000;

/// The permits a runner's model calls lease.
pub(crate) struct Leasing {
    permits: Arc<dyn Permits>,
    epoch: u64,
    budgets: Option<BudgetPolicy>,
    health: Health,
    /// For a session's calls: its replica's health, which shows the session's waits beside the
    /// replica's own activity (a session's own health has no status file).
    replica: Option<Health>,
    /// The API said it has no lease routes: said once, and nothing is asked after.
    unsupported: AtomicBool,
}

/// The limiter one attempt leases from.
pub(crate) struct Target<'a> {
    /// Its name.
    pub(crate) limiter: &'a str,
    /// The provider's name people read.
    pub(crate) provider: &'a str,
    /// Its numbers.
    pub(crate) limits: &'a ModelLimits,
}

impl Leasing {
    pub(crate) fn new(
        permits: Arc<dyn Permits>,
        epoch: u64,
        budgets: Option<BudgetPolicy>,
        health: Health,
    ) -> Leasing {
        Leasing {
            permits,
            epoch,
            budgets,
            health,
            replica: None,
            unsupported: AtomicBool::new(false),
        }
    }

    /// Shows this session's waits for a slot in its replica's health (`ps`'s line).
    pub(crate) fn showing_waits_on(mut self, replica: Option<Health>) -> Leasing {
        self.replica = replica;
        self
    }

    /// A permit for one attempt on `target`'s limiter, when it has limits or the agent has
    /// budgets (`None`: nothing to lease, no call made). While the API answers `wait` the
    /// health says what the call waits for and the request is made again (after the API's
    /// `retry_in_ms` at the latest); a wait of more than a second is traced before the call.
    /// A spent budget is [`LlmError::OverBudget`]; cancellation aborts the wait at once.
    pub(crate) async fn acquire(
        &self,
        target: Target<'_>,
        estimated_tokens: u64,
        cancel: &CancellationToken,
        on_event: &impl Fn(TraceEvent),
    ) -> Result<Option<Permit>, LlmError> {
        if !(target.limits.any() || self.budgets.is_some())
            || self.unsupported.load(Ordering::Relaxed)
        {
            return Ok(None);
        }
        let request = LeaseRequest {
            epoch: self.epoch,
            limiter: target.limiter.to_string(),
            provider: target.provider.to_string(),
            limits: target.limits.clone(),
            budgets: self.budgets.clone(),
            estimated_tokens,
            wait_ms: LEASE_WAIT_MS,
        };
        let started = Instant::now();
        let mut shown = Shown::new(&self.health);
        // A session's wait, in its replica's report; ends with this call's wait.
        let mut on_replica: Option<crate::health::SessionWait> = None;
        let mut last_wait: Option<SlotWait> = None;
        loop {
            let answer = tokio::select! {
                r = self.permits.acquire(&request) => r,
                () = cancel.cancelled() => return Err(LlmError::Cancelled),
            };
            match answer {
                Ok(LeaseResponse::Granted {
                    lease_id, ttl_ms, ..
                }) => {
                    drop(shown);
                    let waited = started.elapsed();
                    if let Some(wait) = last_wait.filter(|_| waited > TRACED_WAIT) {
                        on_event(TraceEvent::ModelWaited(ModelWaited {
                            provider: target.provider.to_string(),
                            waited_ms: waited.as_millis() as u64,
                            wait,
                        }));
                    }
                    return Ok(Some(Permit::new(self.permits.clone(), lease_id, ttl_ms)));
                }
                Ok(LeaseResponse::Wait { wait, retry_in_ms }) => {
                    let text = wait.text(target.provider);
                    match (&on_replica, &self.replica) {
                        (Some(shown), _) => shown.update(text.clone()),
                        (None, Some(replica)) => {
                            on_replica = Some(replica.session_waiting(text.clone()));
                        }
                        (None, None) => {}
                    }
                    shown.show(Activity::ModelSlot { wait: text });
                    last_wait = Some(wait);
                    let again = Duration::from_millis(retry_in_ms.min(MAX_LEASE_WAIT_MS));
                    tokio::select! {
                        () = tokio::time::sleep(again) => {}
                        () = cancel.cancelled() => return Err(LlmError::Cancelled),
                    }
                }
                Ok(LeaseResponse::OverBudget { spent }) => return Err(LlmError::OverBudget(spent)),
                Err(PermitError::Unsupported(why)) => {
                    if !self.unsupported.swap(true, Ordering::Relaxed) {
                        tracing::warn!(
                            "the checkpoint API does not offer model leases ({why}): runtime.limits \
                             and the budgets beyond one run are not enforced for this runner \
                             (upgrade the API)"
                        );
                    }
                    return Ok(None);
                }
                Err(e) => return Err(LlmError::Lease(e)),
            }
        }
    }
}

/// What the health showed for a wait, put back when the wait ends (or is dropped), unless
/// something else took over meanwhile.
struct Shown<'a> {
    health: &'a Health,
    before: Option<Activity>,
    now: Option<Activity>,
}

impl<'a> Shown<'a> {
    fn new(health: &'a Health) -> Shown<'a> {
        Shown {
            health,
            before: None,
            now: None,
        }
    }

    fn show(&mut self, activity: Activity) {
        let before = self.before.get_or_insert_with(|| self.health.activity());
        match &self.now {
            Some(now) => self.health.set_if(now, activity.clone()),
            None if *before == activity => {}
            None => self.health.set(activity.clone()),
        }
        self.now = Some(activity);
    }
}

impl Drop for Shown<'_> {
    fn drop(&mut self) {
        if let (Some(before), Some(now)) = (self.before.take(), self.now.take()) {
            self.health.set_if(&now, before);
        }
    }
}

/// A granted lease for one attempt: renewed while it lives, released when it is dropped (with
/// what [`Permit::used`] or [`Permit::failed`] said, else nothing used).
pub(crate) struct Permit {
    permits: Arc<dyn Permits>,
    lease: LeaseId,
    renewer: tokio::task::JoinHandle<()>,
    release: LeaseRelease,
}

impl Permit {
    fn new(permits: Arc<dyn Permits>, lease: LeaseId, ttl_ms: u64) -> Permit {
        let every = Duration::from_millis((ttl_ms / 3).max(100));
        let renewer = tokio::spawn(renew(permits.clone(), lease, every));
        Permit {
            permits,
            lease,
            renewer,
            release: LeaseRelease::default(),
        }
    }

    /// The attempt was answered: released with its tokens and cost.
    pub(crate) fn used(mut self, usage: &CallUsage) {
        self.release = LeaseRelease {
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            cost_usd: usage.cost_usd.max(0.0),
            rate_limited: None,
        };
    }

    /// The attempt failed: released with nothing used, and with `rate_limited` (the provider's
    /// `retry-after`, else the runner's backoff) when the provider refused it as over its rate
    /// limit — then the whole pool backs off.
    pub(crate) fn failed(mut self, rate_limited: Option<Duration>) {
        self.release.rate_limited = rate_limited.map(|wait| RateLimited {
            retry_after_ms: (wait.as_millis() as u64).min(MAX_RETRY_AFTER_MS),
        });
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.renewer.abort();
        let release = std::mem::take(&mut self.release);
        let (permits, lease) = (self.permits.clone(), self.lease);
        // Off the turn's path; without a runtime (the process is ending) the lease expires.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(release_patiently(permits, lease, release));
        }
    }
}

/// Renews `lease` every `every` until the task is aborted; a lease the API no longer knows is
/// not renewed again (the call goes on without it).
async fn renew(permits: Arc<dyn Permits>, lease: LeaseId, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        match permits.renew(lease).await {
            Ok(_) => {}
            Err(
                e
                @ (PermitError::UnknownLease(_) | PermitError::Fenced(_) | PermitError::Purged(_)),
            ) => {
                tracing::debug!(
                    "lease {lease} is not renewed any more ({e}): the call goes on without it"
                );
                return;
            }
            Err(e) => tracing::debug!("renewing lease {lease} failed ({e}); trying again"),
        }
    }
}

/// Releases `lease`, retrying a transient failure a few times.
async fn release_patiently(permits: Arc<dyn Permits>, lease: LeaseId, release: LeaseRelease) {
    for attempt in 1..=RELEASE_ATTEMPTS {
        match permits.release(lease, &release).await {
            Ok(()) => return,
            Err(e) if e.is_transient() && attempt < RELEASE_ATTEMPTS => {
                tokio::time::sleep(backoff::API.delay(attempt, backoff::jitter())).await;
            }
            Err(e) => {
                tracing::warn!(
                    "could not release model lease {lease} ({e}): it frees itself when its lease time ends"
                );
                return;
            }
        }
    }
}
