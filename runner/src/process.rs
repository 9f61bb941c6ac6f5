//! The runner process: its own thread, served by the driver, and beside it — for a replica with
//! the agent token — the sessions it owns (`sessions`), which stop when it does. This sits above
//! both: the sessions call the driver, the driver knows nothing of sessions.

use ninetrix_client::http_client;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::driver::{self, Exit};
use crate::health::Health;
use crate::sessions::Service;

/// Runs the runner until shutdown, fencing, a batch job's end, or a failure: against the
/// checkpoint API when one is configured, else (a batch job) against a thread kept in memory.
pub async fn run(config: Config, shutdown: CancellationToken) -> Exit {
    let http = http_client();
    let health = Health::new(Some(config.health_file.clone()));
    health.heartbeat();
    // With the agent token, the replica also serves the sessions it owns; they stop when it does.
    // (`Service::new` answers `None` without the checkpoint API.)
    let sessions_stop = shutdown.child_token();
    let sessions = Service::new(&config, &http, &health)
        .map(|service| tokio::spawn(service.serve(sessions_stop.clone())));
    let exit = driver::run_thread(config, http, health, shutdown).await;
    sessions_stop.cancel();
    if let Some(sessions) = sessions {
        let _ = sessions.await;
    }
    exit
}
