//! Replays and evals (issue 42): the admin's replay of a thread's recorded turns in a scratch
//! thread (`POST /v1/threads/{id}/replays`), one turn as it was recorded
//! (`GET /v1/threads/{id}/turns/{n}/record`), and eval suites with their runs (`/v1/evals/…`).

use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{
    EvalMember, EvalMemberRequest, EvalRunRequest, EvalRunStored, EvalSuite, EvalSuiteList,
    RecordedTurn, ReplayCreated, ReplayRequest,
};
use reqwest::Method;

use crate::{Client, ClientError, Limit};

impl Client {
    /// `POST /v1/threads/{id}/replays`: makes the scratch thread that replays turns
    /// `from_turn..=to_turn` of `thread` (or finds the one made before with the same key).
    pub async fn replay(
        &self,
        thread: ThreadId,
        request: &ReplayRequest,
    ) -> Result<ReplayCreated, ClientError> {
        let p = format!("/v1/threads/{thread}/replays");
        self.call(Method::POST, &p, &[], Some(request), None).await
    }

    /// `GET /v1/threads/{id}/turns/{n}/record`: turn `n` as it happened — its input, its calls
    /// with their results, its answer, cost and latency.
    pub async fn recorded_turn(
        &self,
        thread: ThreadId,
        turn: u64,
    ) -> Result<RecordedTurn, ClientError> {
        let p = format!("/v1/threads/{thread}/turns/{turn}/record");
        self.call::<(), _>(Method::GET, &p, &[], None, None).await
    }

    /// `GET /v1/evals`: every eval suite.
    pub async fn eval_suites(&self) -> Result<EvalSuiteList, ClientError> {
        self.call::<(), _>(Method::GET, "/v1/evals", &[], None, None)
            .await
    }

    /// `GET /v1/evals/{suite}`: a suite's members and its last run (404 `not_found` for a
    /// suite nobody named).
    pub async fn eval_suite(&self, suite: &str) -> Result<EvalSuite, ClientError> {
        let p = format!("/v1/evals/{suite}");
        self.call::<(), _>(Method::GET, &p, &[], None, None).await
    }

    /// `POST /v1/evals/{suite}/members`: marks a thread (and a range of its turns) into a suite.
    pub async fn add_eval_member(
        &self,
        suite: &str,
        request: &EvalMemberRequest,
    ) -> Result<EvalMember, ClientError> {
        let p = format!("/v1/evals/{suite}/members");
        self.call(Method::POST, &p, &[], Some(request), None).await
    }

    /// `DELETE /v1/evals/{suite}/members/{id}`: unmarks one (true when it was there).
    pub async fn remove_eval_member(&self, suite: &str, id: u64) -> Result<bool, ClientError> {
        let p = format!("/v1/evals/{suite}/members/{id}");
        match self
            .send::<()>(Method::DELETE, &p, &[], None, Limit::Default)
            .await
        {
            Ok(_) => Ok(true),
            Err(ClientError::Api {
                code: crate::ErrorCode::NotFound,
                ..
            }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// `POST /v1/evals/{suite}/runs`: stores one run of a suite (the same key stores nothing
    /// new).
    pub async fn store_eval_run(
        &self,
        suite: &str,
        request: &EvalRunRequest,
    ) -> Result<EvalRunStored, ClientError> {
        let p = format!("/v1/evals/{suite}/runs");
        self.call(Method::POST, &p, &[], Some(request), None).await
    }
}
