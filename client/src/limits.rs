//! The model-lease routes (`/v1/runners/threads/{id}/model-leases…`): a permit of the pool-wide
//! limiter before each model call, its renewal while the call runs, and its release (with what
//! the call used, cost, or a provider's 429) when it ends. Called with the thread's runner
//! token (or the admin token). And what a thread and its agent have spent.

use std::time::Duration;

use ninetrix_proto::api::{LeaseRelease, LeaseRenewed, LeaseRequest, LeaseResponse, Spend};
use ninetrix_proto::{LeaseId, ThreadId};
use reqwest::Method;

use crate::{Client, ClientError};

fn path(thread: ThreadId, rest: &str) -> String {
    format!("/v1/runners/threads/{thread}/model-leases{rest}")
}

impl Client {
    /// `POST …/model-leases`: a lease, a wait (after holding the request up to
    /// `request.wait_ms`), or a spent budget.
    pub async fn lease_model(
        &self,
        thread: ThreadId,
        request: &LeaseRequest,
    ) -> Result<LeaseResponse, ClientError> {
        let timeout = Duration::from_millis(request.wait_ms) + Duration::from_secs(15);
        self.call(
            Method::POST,
            &path(thread, ""),
            &[],
            Some(request),
            Some(timeout),
        )
        .await
    }

    /// `POST …/model-leases/{lease}/renew`: the lease lasts another lease time.
    pub async fn renew_model_lease(
        &self,
        thread: ThreadId,
        lease: LeaseId,
    ) -> Result<LeaseRenewed, ClientError> {
        let p = path(thread, &format!("/{lease}/renew"));
        self.call::<(), _>(Method::POST, &p, &[], None, None).await
    }

    /// `POST …/model-leases/{lease}/release`: the call ended. Releasing a lease that expired or
    /// was released before still records the spend and the 429.
    pub async fn release_model_lease(
        &self,
        thread: ThreadId,
        lease: LeaseId,
        release: &LeaseRelease,
    ) -> Result<(), ClientError> {
        let p = path(thread, &format!("/{lease}/release"));
        self.send(Method::POST, &p, &[], Some(release), crate::Limit::Default)
            .await
            .map(drop)
    }

    /// `GET /v1/threads/{id}/spend?timezone=TZ`: what the thread, its agent and its pool have
    /// spent (the day in `timezone`, UTC when `None`).
    pub async fn spend(
        &self,
        thread: ThreadId,
        timezone: Option<&str>,
    ) -> Result<Spend, ClientError> {
        let query: Vec<(&str, String)> = timezone
            .map(|tz| ("timezone", tz.to_string()))
            .into_iter()
            .collect();
        self.call::<(), _>(
            Method::GET,
            &format!("/v1/threads/{thread}/spend"),
            &query,
            None,
            None,
        )
        .await
    }
}
