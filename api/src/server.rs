//! The server: configuration, building the shared state, binding, and graceful shutdown.

use axum::serve::ListenerExt as _;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::auth::{AuthConfig, Authenticator};
use crate::hub::Hub;
use crate::state::App;
use crate::store::{Store, StoreError, StoreOptions};

/// Everything `ninetrix api` needs to run.
#[derive(Clone, Debug)]
pub struct Config {
    /// Where to listen.
    pub listen: SocketAddr,
    /// `sqlite://PATH` or `postgres://…`.
    pub database_url: String,
    /// How requests are authenticated.
    pub auth: AuthConfig,
    /// Largest request body, in bytes.
    pub body_limit: usize,
    /// Longest long-poll wait a client may ask for.
    pub max_wait: Duration,
    /// Interval of SSE keep-alive comments.
    pub keep_alive: Duration,
    /// Store tuning.
    pub store: StoreOptions,
    /// How often the scheduler looks for due schedules (`None`: this process fires none — another
    /// replica does).
    pub scheduler_tick: Option<Duration>,
    /// Where the server spans of requests go (OpenTelemetry; `None`: no spans, no cost).
    pub telemetry: Option<crate::telemetry::Tracer>,
}

impl Config {
    /// Defaults for everything but the database and auth.
    pub fn new(database_url: impl Into<String>, auth: AuthConfig) -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            database_url: database_url.into(),
            auth,
            body_limit: 8 * 1024 * 1024,
            max_wait: Duration::from_secs(60),
            keep_alive: Duration::from_secs(15),
            store: StoreOptions::default(),
            scheduler_tick: Some(crate::scheduler::DEFAULT_TICK),
            telemetry: None,
        }
    }
}

/// Why the server could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The database could not be opened.
    #[error("cannot open the database")]
    Store(#[from] StoreError),
    /// The address could not be bound.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Serving failed.
    #[error("the server failed")]
    Io(#[from] std::io::Error),
    /// A configuration that is refused.
    #[error("{0}")]
    Config(String),
}

/// A bound, not yet running server.
pub struct Server {
    listener: TcpListener,
    app: App,
    router: axum::Router,
    scheduler_tick: Option<Duration>,
}

impl Server {
    /// Opens the store and binds the listener.
    pub async fn bind(config: Config) -> Result<Server, ServeError> {
        if matches!(config.auth, AuthConfig::InsecureDev) && !config.listen.ip().is_loopback() {
            return Err(ServeError::Config(format!(
                "--insecure-dev turns authentication off, so it only listens on a loopback address, not {}",
                config.listen
            )));
        }
        let store = Store::open(&config.database_url, &config.store).await?;
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| ServeError::Bind {
                    addr: config.listen,
                    source,
                })?;
        let app = App {
            store,
            auth: Arc::new(Authenticator::new(config.auth.clone())),
            hub: Arc::new(Hub::default()),
            hook_limits: Arc::default(),
            max_wait: config.max_wait,
            keep_alive: config.keep_alive,
            shutdown: CancellationToken::new(),
        };
        let router = crate::routes::router(app.clone(), config.body_limit, config.telemetry);
        Ok(Server {
            listener,
            app,
            router,
            scheduler_tick: config.scheduler_tick,
        })
    }

    /// The address it listens on (useful with port 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The store the server writes to (shared: what it does shows in [`Store::writer_stats`]).
    pub fn store(&self) -> &Store {
        &self.app.store
    }

    /// The storage backend's name.
    pub fn backend(&self) -> &'static str {
        self.app.store.backend()
    }

    /// Serves until `shutdown` completes, then stops taking connections, ends long-polls and
    /// streams, lets in-flight requests finish, and flushes the store.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServeError> {
        let cancel = self.app.shutdown.clone();
        let signal = async move {
            shutdown.await;
            cancel.cancel();
        };
        // Small writes (SSE events, long-poll answers) go out at once: without TCP_NODELAY,
        // Nagle's algorithm holds a write until the previous one is acknowledged, and the
        // peer's delayed ACK makes that ~40 ms.
        let listener = self.listener.tap_io(|tcp| {
            if let Err(e) = tcp.set_nodelay(true) {
                tracing::debug!("cannot set TCP_NODELAY on an accepted connection: {e}");
            }
        });
        let scheduler = self
            .scheduler_tick
            .map(|every| tokio::spawn(crate::scheduler::run(self.app.clone(), every)));
        let result = axum::serve(listener, self.router)
            .with_graceful_shutdown(signal)
            .await;
        // The scheduler stops at the same signal; its tick in flight finishes first.
        self.app.shutdown.cancel();
        if let Some(task) = scheduler {
            let _ = task.await;
        }
        self.app.store.close().await;
        result.map_err(ServeError::Io)
    }
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
