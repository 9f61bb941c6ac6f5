//! A2A (issue 43, docs/a2a.md): minting the tokens that call a pool's agents over A2A
//! (`POST /v1/tokens/a2a`), and where an agent's card is served. An agent's card itself is
//! recorded with its replicas (`Client::set_replicas`).

use ninetrix_proto::api::{A2aTokenRequest, A2aTokenResponse};
use reqwest::Method;

use crate::{Client, ClientError};

impl Client {
    /// `POST /v1/tokens/a2a`: mints a token that calls the A2A endpoints of one pool's agents.
    pub async fn mint_a2a_token(
        &self,
        request: &A2aTokenRequest,
    ) -> Result<A2aTokenResponse, ClientError> {
        self.call(Method::POST, "/v1/tokens/a2a", &[], Some(request), None)
            .await
    }

    /// The URL of the agent card of `agent` of `pool` on this API
    /// (`/a2a/{pool}/{agent}/.well-known/agent-card.json`, public).
    pub fn a2a_card_url(&self, pool: &str, agent: &str) -> String {
        format!(
            "{}/a2a/{pool}/{agent}/.well-known/agent-card.json",
            self.base
        )
    }
}
