//! `ninetrix mcp-bridge`: serves a stdio MCP server over streamable HTTP and restarts the server
//! process when it dies — the job Docker's MCP Gateway does, offline and in the one binary.
//!
//! Each `tools/call` is forwarded to the child with the caller's `_meta` (the ledger key
//! included). When the child dies with a call in flight, the caller gets an error marked
//! `outcome: unknown`; when no child is running, `outcome: not_run` — so the runner's ledger
//! can tell a write that may have happened from one that certainly did not.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult,
    PaginatedRequestParams, RequestMetaObject, ServerCapabilities, ServerConfig,
};
use rmcp::service::{Peer, RequestContext};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleClient, RoleServer, ServerHandler, ServiceError, ServiceExt};
use serde_json::json;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::OUTCOME_META_KEY;
use crate::client::StdioServer;

/// The JSON-RPC error code of a call the bridge could not complete (in the range JSON-RPC
/// leaves to servers).
pub const BRIDGE_ERROR_CODE: i32 = -32001;

/// How long a call waits for a restarting server before it is refused as not run.
const WAIT_FOR_SERVER: Duration = Duration::from_secs(10);

/// Why the bridge could not start.
#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Serving failed.
    #[error("serving MCP over HTTP failed: {0}")]
    Serve(#[source] std::io::Error),
    /// The command is empty.
    #[error("no server command given (`ninetrix mcp-bridge --listen ADDR -- COMMAND [ARGS…]`)")]
    NoCommand,
}

/// The running child server, as seen by calls.
type Slot = watch::Receiver<Option<Peer<RoleClient>>>;

/// The HTTP side: forwards the caller's requests to the current child.
#[derive(Clone)]
struct Forward {
    upstream: Slot,
}

fn bridge_error(message: String, outcome: &str) -> ErrorData {
    ErrorData::new(
        rmcp::model::ErrorCode(BRIDGE_ERROR_CODE),
        message,
        Some(json!({ OUTCOME_META_KEY: outcome })),
    )
}

impl Forward {
    /// The running child, waiting a while for one that is restarting.
    async fn peer(&self) -> Result<Peer<RoleClient>, ErrorData> {
        let mut rx = self.upstream.clone();
        let wait = rx.wait_for(|p| p.as_ref().is_some_and(|p| !p.is_transport_closed()));
        match tokio::time::timeout(WAIT_FOR_SERVER, wait).await {
            Ok(Ok(peer)) => Ok(peer.clone().expect("waited for a peer")),
            _ => Err(bridge_error(
                "the MCP server process is not running (the bridge is restarting it); the call \
                 was not made"
                    .into(),
                "not_run",
            )),
        }
    }
}

fn forwarded_error(e: ServiceError) -> ErrorData {
    match e {
        ServiceError::McpError(e) => e,
        ServiceError::TransportClosed => bridge_error(
            "the MCP server process exited before it answered; whether the call took effect is \
             unknown"
                .into(),
            "unknown",
        ),
        other => bridge_error(format!("the MCP server process: {other}"), "unknown"),
    }
}

impl ServerHandler for Forward {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build()).with_server_info(
            Implementation::new("ninetrix-mcp-bridge", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let peer = self.peer().await?;
        let tools = peer.list_all_tools().await.map_err(forwarded_error)?;
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let peer = self.peer().await?;
        let mut params = CallToolRequestParams::new(request.name.clone());
        params.arguments = request.arguments;
        let mut meta = RequestMetaObject::new();
        for (k, v) in context.meta.iter() {
            if !k.starts_with("io.modelcontextprotocol/") && k != "progressToken" {
                meta.insert(k.clone(), v.clone());
            }
        }
        if !meta.is_empty() {
            params.meta = Some(meta);
        }
        tokio::select! {
            // Dropping the call sends `notifications/cancelled` to the child.
            result = peer.call_tool(params) => result.map(CallToolResponse::from).map_err(forwarded_error),
            () = context.ct.cancelled() => Err(bridge_error("cancelled by the caller".into(), "unknown")),
        }
    }
}

/// Serves `config`'s stdio server at `http://<listener>/mcp` until `shutdown`; `GET /health`
/// answers 200 while the server process runs and 503 while it is being restarted.
pub async fn serve(
    listener: tokio::net::TcpListener,
    server: StdioServer,
    shutdown: CancellationToken,
) -> Result<(), BridgeError> {
    if server.command.first().is_none_or(|c| c.is_empty()) {
        return Err(BridgeError::NoCommand);
    }
    let (tx, rx) = watch::channel(None);
    let supervisor = tokio::spawn(supervise(server, tx, shutdown.clone()));
    let forward = Forward {
        upstream: rx.clone(),
    };
    let service = StreamableHttpService::new(
        move || Ok(forward.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default()
            .with_cancellation_token(shutdown.child_token())
            // Reached by its service name on the pool network, not only as localhost.
            .disable_allowed_hosts(),
    );
    let health = rx;
    let router = axum::Router::new().nest_service("/mcp", service).route(
        "/health",
        axum::routing::get(move || {
            let up = health
                .borrow()
                .as_ref()
                .is_some_and(|p| !p.is_transport_closed());
            async move {
                if up {
                    (axum::http::StatusCode::OK, "up")
                } else {
                    (axum::http::StatusCode::SERVICE_UNAVAILABLE, "restarting")
                }
            }
        }),
    );
    let stop = shutdown.clone();
    let served = axum::serve(listener, router)
        .with_graceful_shutdown(async move { stop.cancelled().await })
        .await;
    shutdown.cancel();
    let _ = supervisor.await;
    served.map_err(BridgeError::Serve)
}

/// Binds `addr` and [`serve`]s.
pub async fn run(
    addr: SocketAddr,
    server: StdioServer,
    shutdown: CancellationToken,
) -> Result<(), BridgeError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| BridgeError::Listen { addr, source })?;
    tracing::info!(
        "mcp-bridge listening on http://{}/mcp for `{}`",
        listener.local_addr().unwrap_or(addr),
        server.command.join(" ")
    );
    serve(listener, server, shutdown).await
}

/// Keeps one child server running: starts it, publishes it, waits for it to exit, and starts
/// it again after a backoff (0.5 s doubling to 30 s; reset once it has run for a minute).
async fn supervise(
    server: StdioServer,
    slot: watch::Sender<Option<Peer<RoleClient>>>,
    shutdown: CancellationToken,
) {
    let mut backoff = Duration::from_millis(500);
    let describe = server.command.join(" ");
    while !shutdown.is_cancelled() {
        let started = tokio::time::Instant::now();
        // `serve` refused an empty command line.
        let Some(spawned) = server.spawn() else {
            break;
        };
        match spawned {
            Ok(transport) => {
                let handshake = ().serve_with_ct(transport, shutdown.child_token());
                match tokio::time::timeout(Duration::from_secs(60), handshake).await {
                    Ok(Ok(client)) => {
                        tracing::info!("MCP server `{describe}` is up");
                        slot.send_replace(Some(client.peer().clone()));
                        let reason = client.waiting().await;
                        slot.send_replace(None);
                        if shutdown.is_cancelled() {
                            break;
                        }
                        tracing::warn!("MCP server `{describe}` exited ({reason:?}); restarting");
                    }
                    Ok(Err(e)) => tracing::warn!("MCP server `{describe}` failed to start: {e}"),
                    Err(_) => {
                        tracing::warn!(
                            "MCP server `{describe}` did not finish its handshake in 60s"
                        )
                    }
                }
            }
            Err(e) => tracing::warn!("cannot start MCP server `{describe}`: {e}"),
        }
        if started.elapsed() > Duration::from_secs(60) {
            backoff = Duration::from_millis(500);
        }
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            () = shutdown.cancelled() => break,
        }
        backoff = (backoff * 2).min(Duration::from_secs(30));
    }
    slot.send_replace(None);
}
