//! The OpenAI-compatible HTTP API, the same contract as upstream `nanobot serve`:
//! `POST /v1/chat/completions` (one user message, `session_id` → session `api:<id>`, SSE when
//! `stream: true`), `GET /v1/models`, `GET /health`; and the fleet's admin endpoints, which
//! need the API key and are refused without one: `/v1/bots` (the bot registry, [`bots`]) and
//! `GET /v1/usage` (token usage, [`usage`]).
//!
//! A completion becomes an [`InboundMessage`](nanobot_proto::InboundMessage) on
//! [`subjects::inbound`](nanobot_proto::subjects::inbound)`(bot, "api")`; its reply comes
//! back through [`crate::outbound`]. The bot is the first configured one, or the one named by
//! the `X-Nanobot-Bot` header.

mod admin;
mod auth;
mod bots;
mod completions;
mod error;
mod request;
mod serve;
mod session_lock;
mod sse;
mod usage;

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::HeaderMap;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::Value;

use nanobot_runtime::config::{BotSpec, Config};
use nanobot_runtime::health::Health;

use self::session_lock::SessionLocks;
use crate::outbound::Pending;

pub(crate) use self::auth::constant_time_eq;
pub use self::error::ApiError;
pub use self::serve::serve;

/// Header choosing the bot of a request (default: the first configured bot).
pub const BOT_HEADER: &str = "x-nanobot-bot";
/// Largest request body accepted, as upstream (20 MB).
pub const MAX_BODY_BYTES: usize = 20 * 1024 * 1024;
/// Reply deadline used when `api.timeout` is not a usable number of seconds.
const FALLBACK_TIMEOUT: Duration = Duration::from_secs(120);

/// What the API handlers share.
#[derive(Clone, Debug)]
pub struct AppState {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    bots: Vec<BotSpec>,
    api_key: String,
    timeout: Duration,
    timeout_secs: f64,
    read_timeout: Duration,
    js: jetstream::Context,
    pending: Arc<Pending>,
    locks: Arc<SessionLocks>,
    health: Arc<Health>,
    admin: admin::Admin,
}

impl AppState {
    /// Returns the API state for `cfg`'s bots and `api` section; replies arrive via `pending`.
    pub fn new(
        cfg: &Config,
        js: jetstream::Context,
        pending: Arc<Pending>,
        health: Arc<Health>,
    ) -> Self {
        let timeout = Duration::try_from_secs_f64(cfg.api.timeout)
            .ok()
            .filter(|t| !t.is_zero())
            .unwrap_or(FALLBACK_TIMEOUT);
        let inner = Inner {
            bots: cfg.bots(),
            api_key: cfg.api.api_key.clone(),
            timeout,
            timeout_secs: cfg.api.timeout,
            read_timeout: cfg.api.read_timeout(),
            js,
            pending,
            locks: Arc::default(),
            health,
            admin: admin::Admin::new(cfg),
        };
        Self {
            inner: Arc::new(inner),
        }
    }

    /// Seeds the bot registry with `bots` (the config's `bots` as written, `${VAR}`
    /// references unresolved) before the first admin request, create-if-absent as
    /// `nanobot bots` does. Call before the state is shared.
    pub fn seeding(mut self, bots: std::collections::BTreeMap<String, Value>) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.admin.set_seed(bots);
        }
        self
    }

    /// Returns the bot named by [`BOT_HEADER`], or the first configured bot.
    fn bot(&self, headers: &HeaderMap) -> Result<&BotSpec, ApiError> {
        let Some(value) = headers.get(BOT_HEADER) else {
            return self
                .inner
                .bots
                .first()
                .ok_or_else(|| ApiError::UnknownBot(String::new()));
        };
        let name = String::from_utf8_lossy(value.as_bytes());
        self.inner
            .bots
            .iter()
            .find(|b| b.id == name)
            .ok_or_else(|| ApiError::UnknownBot(name.into_owned()))
    }

    fn authorize(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        auth::check(headers, &self.inner.api_key)
    }
}

/// Returns the API routes over `state`.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(completions::handle))
        .route("/v1/models", get(models))
        .route("/v1/bots", get(bots::list).post(bots::add))
        .route(
            "/v1/bots/{id}",
            get(bots::show)
                .put(bots::replace)
                .patch(bots::patch)
                .delete(bots::remove),
        )
        .route("/v1/usage", get(usage::handle))
        .route("/health", get(health))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

async fn models(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<serde_json::Value>, ApiError> {
    state.authorize(&headers)?;
    let bot = state.bot(&headers)?;
    Ok(Json(serde_json::json!({
        "object": "list",
        "data": [{"id": bot.model, "object": "model", "created": 0, "owned_by": "nanobot"}],
    })))
}

async fn health() -> Json<serde_json::Value> {
    Json(serde_json::json!({"status": "ok"}))
}
