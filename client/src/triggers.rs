//! The trigger routes (issue 17), all with the admin token: registering a pool's whole set of
//! schedules and webhooks (`PUT /v1/pools/{pool}/triggers`, as `up` and `down` do), listing them,
//! reading one's history, and firing one now. Pool and trigger names are percent-encoded as path
//! segments.

use ninetrix_proto::api::{FireRequest, Trigger, TriggerEvent, TriggerSet, TriggersApplied};
use reqwest::Method;

use crate::runner::segment;
use crate::{Client, ClientError};

/// `/v1/pools/{pool}/triggers/{name}{rest}`.
fn trigger_path(pool: &str, name: &str, rest: &str) -> String {
    format!(
        "/v1/pools/{}/triggers/{}{rest}",
        segment(pool),
        segment(name)
    )
}

impl Client {
    /// `PUT /v1/pools/{pool}/triggers`: the pool's whole set of triggers. Those not in `set` are
    /// removed (an empty set removes them all); the answer names what was created, updated, left
    /// unchanged and removed.
    pub async fn put_triggers(
        &self,
        pool: &str,
        set: &TriggerSet,
    ) -> Result<TriggersApplied, ClientError> {
        let p = format!("/v1/pools/{}/triggers", segment(pool));
        self.call(Method::PUT, &p, &[], Some(set), None).await
    }

    /// `GET /v1/triggers`: the triggers, ordered by pool and name — of one pool and with one
    /// name when given.
    pub async fn triggers(
        &self,
        pool: Option<&str>,
        name: Option<&str>,
    ) -> Result<Vec<Trigger>, ClientError> {
        let mut pairs = Vec::new();
        if let Some(pool) = pool {
            pairs.push(("pool", pool.to_string()));
        }
        if let Some(name) = name {
            pairs.push(("name", name.to_string()));
        }
        self.call::<(), _>(Method::GET, "/v1/triggers", &pairs, None, None)
            .await
    }

    /// `GET /v1/pools/{pool}/triggers/{name}/history`: the newest `limit` entries (the server's
    /// default when `None`) with a seq below `before` (any when `None`), oldest first. An unknown
    /// trigger is `not_found`.
    pub async fn trigger_history(
        &self,
        pool: &str,
        name: &str,
        before: Option<u64>,
        limit: Option<u32>,
    ) -> Result<Vec<TriggerEvent>, ClientError> {
        let mut pairs = Vec::new();
        if let Some(limit) = limit {
            pairs.push(("limit", limit.to_string()));
        }
        if let Some(before) = before {
            pairs.push(("before", before.to_string()));
        }
        let p = trigger_path(pool, name, "/history");
        self.call::<(), _>(Method::GET, &p, &pairs, None, None)
            .await
    }

    /// `POST /v1/pools/{pool}/triggers/{name}/fire`: fires the trigger now (a webhook's templates
    /// render `request.body`). The entry it recorded says which session's inbox holds the
    /// message. An unknown trigger is `not_found`; a body the templates do not fit is
    /// `template_failed`.
    pub async fn fire_trigger(
        &self,
        pool: &str,
        name: &str,
        request: &FireRequest,
    ) -> Result<TriggerEvent, ClientError> {
        let p = trigger_path(pool, name, "/fire");
        self.call(Method::POST, &p, &[], Some(request), None).await
    }
}
