//! The job broker (`ninetrix job-broker`, hidden): the one process of a pool on one host that
//! creates, starts, inspects, reads, waits for and kills background-job containers for its
//! runners, which never hold the Docker socket. Its configuration (`config`) is written by `up`;
//! the wire types between it and the runners are `ninetrix_proto::jobs`.
//!
//! - `settings`: what it reads from its environment;
//! - `identity`: who a token stands for (the checkpoint API's answer, kept a minute);
//! - `caller`: whether that thread may have jobs here, on which replica, in which directory (pure);
//! - `spec`: the container a job gets (pure); `view`: a job as runners see it (pure);
//!   `output`: which lines an output read gets (pure);
//! - `engine`: the Docker calls; `routes`: the HTTP routes; `reaper`: deadlines kept;
//! - `error`: every refusal; `state`: what routes and reaper share.

mod caller;
pub(crate) mod config;
mod engine;
mod error;
mod identity;
mod output;
mod reaper;
mod routes;
pub(crate) mod settings;
mod spec;
mod state;
mod view;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

/// Serves the broker on `listener` until `shutdown`: the routes and the reaper.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    settings: settings::Settings,
    docker: bollard::Docker,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let broker = Arc::new(state::Broker {
        identities: identity::Identities::new(ninetrix_client::http_client(), &settings.api_url),
        config: settings.config,
        docker,
        creating: tokio::sync::Mutex::new(()),
        shutdown: shutdown.clone(),
    });
    let reaper = tokio::spawn(reaper::run(broker.clone()));
    let served = axum::serve(listener, routes::router(broker))
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await;
    let _ = reaper.await;
    served
}
