//! The state every request handler shares ([`App`]): the store, the authenticator, the wake-up
//! hub, the queues of model-lease requests, the webhook rate limits, the server's limits, its
//! public URL (A2A cards) and its shutdown signal. It lives apart from `server` so that the
//! handlers (`routes`) and the extractors (`auth`) depend on it without depending on the server
//! that builds it.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::FromRef;
use tokio_util::sync::CancellationToken;

use crate::auth::Authenticator;
use crate::hook_guard::{PeerGate, RefusalSampler};
use crate::hub::Hub;
use crate::lease_queue::LeaseQueues;
use crate::store::Store;
use crate::trigger_rules::RateLimiter;

/// State shared by every request.
#[derive(Clone)]
pub(crate) struct App {
    /// Where threads, versions, the ledger, the inbox and events are stored.
    pub(crate) store: Store,
    /// Checks bearer tokens and mints runner tokens.
    pub(crate) auth: Arc<Authenticator>,
    /// Wakes long-polls and event streams when a thread's inbox or events change.
    pub(crate) hub: Arc<Hub>,
    /// The longest inbox long-poll a client may ask for.
    pub(crate) max_wait: Duration,
    /// The lease requests of this process waiting on a limiter, in arrival order.
    pub(crate) leases: Arc<LeaseQueues>,
    /// How long a model lease lasts unless renewed (`--model-lease-ttl`).
    pub(crate) lease_ttl: Duration,
    /// Interval of SSE keep-alive comments.
    pub(crate) keep_alive: Duration,
    /// The webhook triggers' delivery rate limits (this process's counts).
    pub(crate) hook_limits: Arc<RateLimiter>,
    /// Webhook deliveries in flight per source address.
    pub(crate) hook_peers: Arc<PeerGate>,
    /// Refusals of unproven webhook deliveries, sampled into the history.
    pub(crate) hook_refusals: Arc<RefusalSampler>,
    /// The deadline for a whole webhook body.
    pub(crate) hook_body_timeout: Duration,
    /// The largest request body (`--body-limit`): no trigger's `max_body` may be above it.
    pub(crate) body_limit: usize,
    /// Cancelled when the server starts shutting down: long-polls and streams end early.
    pub(crate) shutdown: CancellationToken,
    /// What callers outside reach the API by (`NINETRIX_PUBLIC_URL`), for A2A agent cards;
    /// `None`: `http://` and the request's `Host`.
    pub(crate) public_url: Option<String>,
}

impl FromRef<App> for Arc<Authenticator> {
    fn from_ref(app: &App) -> Self {
        app.auth.clone()
    }
}
