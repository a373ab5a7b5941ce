//! Liveness and readiness: an HTTP probe (`GET /health`, `GET /ready`, and `GET /metrics`, the
//! role's Prometheus text, see [`crate::metrics`]) and an answer on the fleet status subject, so `nanobot status` can list live replicas.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Instant;

use axum::http::StatusCode;
use axum::{Json, Router, extract::State, routing::get};
use futures::StreamExt as _;
use tokio_util::sync::CancellationToken;

use nanobot_proto::{ServiceStatus, subjects};

/// Shared health state of one service instance.
pub struct Health {
    /// Role name (`agent`, `tools`, ...).
    pub role: &'static str,
    /// Unique instance id.
    pub instance: String,
    started: Instant,
    ready: AtomicBool,
    in_flight: AtomicU32,
    detail: std::sync::Mutex<Option<DetailFn>>,
}

/// Produces a role's extra status figures (`ServiceStatus.detail_json`).
pub type DetailFn = Box<dyn Fn() -> serde_json::Value + Send + Sync>;

impl std::fmt::Debug for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Health")
            .field("role", &self.role)
            .field("instance", &self.instance)
            .finish_non_exhaustive()
    }
}

impl Health {
    /// Returns a new, not yet ready, health state.
    pub fn new(role: &'static str) -> Arc<Self> {
        let short = uuid::Uuid::new_v4().simple().to_string();
        Arc::new(Self {
            role,
            instance: format!("{role}-{}", &short[..8]),
            started: Instant::now(),
            ready: AtomicBool::new(false),
            in_flight: AtomicU32::new(0),
            detail: std::sync::Mutex::new(None),
        })
    }

    /// Marks the instance ready (or not).
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::SeqCst);
    }

    /// Returns whether the instance is ready.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }

    /// Counts one unit of work in flight until the guard drops.
    pub fn track(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(self.clone())
    }

    /// Returns the work in flight.
    pub fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// Sets the function reporting this role's extra status figures.
    pub fn set_detail(&self, f: DetailFn) {
        *self.detail.lock().unwrap_or_else(|e| e.into_inner()) = Some(f);
    }

    /// Returns this instance's status record.
    pub fn status(&self) -> ServiceStatus {
        ServiceStatus {
            role: self.role.into(),
            instance: self.instance.clone(),
            version: crate::VERSION.into(),
            uptime_ms: u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            in_flight: self.in_flight(),
            ready: self.is_ready(),
            detail_json: self
                .detail
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
                .map(|f| f().to_string())
                .unwrap_or_default(),
        }
    }
}

/// Decrements the in-flight count on drop.
#[derive(Debug)]
pub struct InFlight(Arc<Health>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn health(State(h): State<Arc<Health>>) -> Json<serde_json::Value> {
    Json(serde_json::json!({"status": "ok", "role": h.role, "instance": h.instance}))
}

async fn ready(State(h): State<Arc<Health>>) -> (StatusCode, Json<serde_json::Value>) {
    let code = if h.is_ready() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        code,
        Json(serde_json::json!({"ready": h.is_ready(), "inFlight": h.in_flight()})),
    )
}

async fn metrics() -> impl axum::response::IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            crate::metrics::CONTENT_TYPE,
        )],
        crate::metrics::get().render() + &crate::dependency_metrics::get().render(),
    )
}

/// Serves the HTTP probe on `addr` until `cancel`; returns the bound address.
pub async fn serve_http(
    addr: SocketAddr,
    health_state: Arc<Health>,
    cancel: CancellationToken,
) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let app = Router::new()
        .route("/health", get(health))
        .route("/ready", get(ready))
        .route("/metrics", get(metrics))
        .with_state(health_state);
    tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(async move { cancel.cancelled().await })
            .await;
        if let Err(e) = served {
            tracing::warn!(error = %e, "health endpoint stopped");
        }
    });
    tracing::info!(addr = %bound, "health probe listening");
    Ok(bound)
}

/// Answers fleet status probes on [`subjects::STATUS`] until `cancel`.
pub async fn serve_status(
    client: async_nats::Client,
    health_state: Arc<Health>,
    cancel: CancellationToken,
) -> Result<(), async_nats::SubscribeError> {
    let mut sub = client.subscribe(subjects::STATUS).await?;
    tokio::spawn(async move {
        loop {
            tokio::select! {
                biased;
                _ = cancel.cancelled() => break,
                msg = sub.next() => match msg {
                    Some(msg) => crate::bus::reply(&client, msg.reply, &health_state.status()).await,
                    None => break,
                },
            }
        }
    });
    Ok(())
}
