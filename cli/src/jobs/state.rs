//! What the broker's routes and its reaper share: the configuration, the Docker connection, the
//! identities the API gave, the lock that makes counting and creating one step, and the token
//! that says the broker is stopping.

use bollard::Docker;
use tokio_util::sync::CancellationToken;

use super::config::BrokerConfig;
use super::identity::Identities;

/// The broker.
pub(crate) struct Broker {
    /// The pool's agents with job tools.
    pub config: BrokerConfig,
    /// The Docker Engine.
    pub docker: Docker,
    /// Who tokens stand for.
    pub identities: Identities,
    /// Held while a create counts an agent's jobs and makes one, so two creates never both
    /// take the last place.
    pub creating: tokio::sync::Mutex<()>,
    /// Cancelled when the broker stops: waits answer at once.
    pub shutdown: CancellationToken,
}
