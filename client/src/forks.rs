//! Going back in a conversation (issue 41): the admin's fork, rewind, turn list and diff
//! (`/v1/threads/{id}/…`), and the runner's side — the turn a rewind goes back to and the
//! content-addressed objects of workspace snapshots (`/v1/runners/threads/{id}/…`). Objects
//! travel as raw bytes (`application/octet-stream`), not JSON.

use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{
    ForkRequest, ForkResponse, MissingObjectsRequest, MissingObjectsResponse, RewindQueued,
    RewindRequest, TurnDiff, TurnList, TurnPoint,
};
use ninetrix_proto::snapshots::{ObjectId, ObjectKind};
use reqwest::Method;

use crate::{Client, ClientError, Limit};

impl Client {
    /// `POST /v1/threads/{id}/fork`: a new thread (a session of the same agent) whose history
    /// is this one's up to the end of `at_turn`.
    pub async fn fork(
        &self,
        thread: ThreadId,
        request: &ForkRequest,
    ) -> Result<ForkResponse, ClientError> {
        let p = format!("/v1/threads/{thread}/fork");
        self.call(Method::POST, &p, &[], Some(request), None).await
    }

    /// `POST /v1/threads/{id}/rewind`: queues the thread's return to the end of `to_turn`
    /// (carried out by its runner between turns; `rewound` or `rewind_failed` says how it went).
    pub async fn rewind(
        &self,
        thread: ThreadId,
        request: &RewindRequest,
    ) -> Result<RewindQueued, ClientError> {
        let p = format!("/v1/threads/{thread}/rewind");
        self.call(Method::POST, &p, &[], Some(request), None).await
    }

    /// `GET /v1/threads/{id}/turns`: every turn the thread ended, with its snapshot, the fork
    /// it came from and the forks made from it.
    pub async fn turns(&self, thread: ThreadId) -> Result<TurnList, ClientError> {
        let p = format!("/v1/threads/{thread}/turns");
        self.call::<(), _>(Method::GET, &p, &[], None, None).await
    }

    /// `GET /v1/threads/{id}/turns/{n}/diff`: the files turn `n` changed.
    pub async fn turn_diff(&self, thread: ThreadId, turn: u64) -> Result<TurnDiff, ClientError> {
        let p = format!("/v1/threads/{thread}/turns/{turn}/diff");
        self.call::<(), _>(Method::GET, &p, &[], None, None).await
    }

    /// `GET /v1/runners/threads/{id}/turns/{n}`: the history, state and snapshot at the end of
    /// turn `n`, and the later effects going back does not undo.
    pub async fn turn_point(&self, thread: ThreadId, turn: u64) -> Result<TurnPoint, ClientError> {
        let p = format!("/v1/runners/threads/{thread}/turns/{turn}");
        self.call::<(), _>(Method::GET, &p, &[], None, None).await
    }

    /// `POST /v1/runners/threads/{id}/objects/missing`: which of `ids` the store lacks (at most
    /// [`ninetrix_proto::snapshots::MAX_IDS_PER_REQUEST`] per call).
    pub async fn missing_objects(
        &self,
        thread: ThreadId,
        ids: Vec<ObjectId>,
    ) -> Result<Vec<ObjectId>, ClientError> {
        let p = format!("/v1/runners/threads/{thread}/objects/missing");
        let body = MissingObjectsRequest { ids };
        let r: MissingObjectsResponse = self.call(Method::POST, &p, &[], Some(&body), None).await?;
        Ok(r.missing)
    }

    /// `PUT /v1/runners/threads/{id}/objects/{object}?kind=…`: stores one object (its ID must be
    /// the SHA-256 of `bytes`; a node's objects must be stored first). Storing one again is
    /// harmless.
    pub async fn put_object(
        &self,
        thread: ThreadId,
        id: &ObjectId,
        kind: ObjectKind,
        bytes: Vec<u8>,
    ) -> Result<(), ClientError> {
        let p = format!("/v1/runners/threads/{thread}/objects/{id}");
        let req = self
            .request(
                Method::PUT,
                &p,
                &[("kind", kind.as_str().to_string())],
                Limit::Default,
            )
            .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
            .body(bytes);
        self.finish(req).await.map(drop)
    }

    /// `GET /v1/runners/threads/{id}/objects/{object}`: one object's bytes (an object of the
    /// thread's pool).
    pub async fn get_object(
        &self,
        thread: ThreadId,
        id: &ObjectId,
    ) -> Result<Vec<u8>, ClientError> {
        let p = format!("/v1/runners/threads/{thread}/objects/{id}");
        let resp = self
            .finish(self.request(Method::GET, &p, &[], Limit::Default))
            .await?;
        resp.bytes()
            .await
            .map(|b| b.to_vec())
            .map_err(|e| ClientError::unreachable(self.base_url(), &e))
    }
}
