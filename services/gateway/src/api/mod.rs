//! The OpenAI-compatible HTTP API, the same contract as upstream `nanobot serve`:
//! `POST /v1/chat/completions` (one user message, `session_id` → session `api:<id>`, SSE when
//! `stream: true`), `GET /v1/models`, `GET /health`; and the fleet's admin endpoints, which
//! need the API key and are refused without one: `/v1/bots` (the bot registry, [`bots`]) and
//! `GET /v1/usage` (token usage, [`usage`]).
//!
//! A completion becomes an [`InboundMessage`](nanobot_proto::InboundMessage) on
//! [`subjects::inbound`](nanobot_proto::subjects::inbound)`(bot, "api")`; its reply comes
//! back through [`crate::outbound`]. The bot is the first configured one, or the one named by
//! the `X-Nanobot-Bot` header: a bot of the config or of the bot registry, read from a
//! [`LiveConfig`] that follows the registry, so a bot added over `/v1/bots` or `nanobot bots`
//! answers here within a second of its change and a removed one is unknown as soon.

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

use nanobot_runtime::bot_registry::LiveConfig;
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
    bots: LiveConfig,
    /// The config's first bot: the bot of requests without [`BOT_HEADER`] while it is served.
    default_bot: Option<String>,
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
            bots: LiveConfig::fixed(cfg.clone()),
            default_bot: cfg.bots().into_iter().next().map(|b| b.id),
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

    /// Serves the bots `live` has (the config's and the registry's, followed) instead of the
    /// config's alone. Call before the state is shared.
    pub fn following(mut self, live: LiveConfig) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.bots = live;
        }
        self
    }

    /// Returns the bot named by [`BOT_HEADER`], or the config's first bot (once that is
    /// removed, the first bot served), as the bots are now.
    fn bot(&self, headers: &HeaderMap) -> Result<BotSpec, ApiError> {
        let cfg = self.inner.bots.now();
        let Some(value) = headers.get(BOT_HEADER) else {
            return self
                .inner
                .default_bot
                .as_deref()
                .and_then(|id| cfg.bot(id))
                .or_else(|| cfg.bots().into_iter().next())
                .ok_or_else(|| ApiError::UnknownBot(String::new()));
        };
        let name = String::from_utf8_lossy(value.as_bytes());
        cfg.bot(&name)
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
