//! What the admin endpoints (`/v1/bots`, `/v1/usage`) share: their gate and their stores.
//!
//! The gate is safer than the chat endpoints': with no `api.apiKey` configured they are
//! refused (403) instead of open, and a per-bot gateway (`--bot`) refuses them too (its NATS
//! user may not write the registry). The stores are opened on first use: the bot registry
//! (seeded from the config's `bots` first, create-if-absent, as `nanobot bots` does) and a
//! Redis connection for the usage counters (the gateway's Redis user reads them, read-only).

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::jetstream::{self, kv};
use axum::http::HeaderMap;
use serde_json::Value;
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

use nanobot_runtime::bot_registry::{self, admin::AdminError};
use nanobot_runtime::config::{Config, StoreConfig};
use nanobot_runtime::store::{self, Store};

use super::error::ApiError;
use super::{AppState, auth};

/// How long the first usage request waits for Redis.
const REDIS_CONNECT: Duration = Duration::from_secs(5);

/// The admin endpoints' part of the API state.
#[derive(Default)]
pub(super) struct Admin {
    /// The bot this gateway alone serves (`--bot`), if any.
    scope: Option<String>,
    /// The config's bots as written (references unresolved), seeded into the registry.
    seed: BTreeMap<String, Value>,
    /// The config's bot ids (the usage report's bots besides the registry's).
    config_bots: Vec<String>,
    store_cfg: StoreConfig,
    registry: OnceCell<kv::Store>,
    redis: OnceCell<Store>,
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admin")
            .field("scope", &self.scope)
            .field("seed", &self.seed.keys().collect::<Vec<_>>())
            .field("registry_open", &self.registry.initialized())
            .field("redis_open", &self.redis.initialized())
            .finish_non_exhaustive()
    }
}

impl Admin {
    pub(super) fn new(cfg: &Config) -> Self {
        Self {
            scope: cfg.scope.clone(),
            config_bots: cfg.bots().into_iter().map(|b| b.id).collect(),
            store_cfg: cfg.store.clone(),
            ..Self::default()
        }
    }

    pub(super) fn set_seed(&mut self, seed: BTreeMap<String, Value>) {
        self.seed = seed;
    }
}

impl AppState {
    /// Lets an admin request through: an API key must be configured (403 otherwise) and
    /// given (401), and this gateway must serve the whole fleet (403).
    pub(super) fn authorize_admin(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        if self.inner.api_key.is_empty() {
            return Err(ApiError::Forbidden(
                "Admin endpoints are disabled: no API key is configured. Set api.apiKey \
                 and send it as Authorization: Bearer <api_key>"
                    .into(),
            ));
        }
        auth::check(headers, &self.inner.api_key)?;
        if let Some(bot) = &self.inner.admin.scope {
            return Err(ApiError::Forbidden(format!(
                "This gateway serves bot '{bot}' only; manage bots through a fleet-wide \
                 gateway or `nanobot bots`"
            )));
        }
        Ok(())
    }

    /// The bot registry, opened (and seeded from the config) on first use.
    pub(super) async fn registry(&self) -> Result<&kv::Store, ApiError> {
        let admin = &self.inner.admin;
        admin
            .registry
            .get_or_try_init(|| open_registry(&self.inner.js, &admin.seed))
            .await
    }

    /// The Redis connection of the usage counters, opened on first use.
    pub(super) async fn usage_store(&self) -> Result<Store, ApiError> {
        let admin = &self.inner.admin;
        let redis = admin
            .redis
            .get_or_try_init(|| async {
                let cancel = CancellationToken::new();
                let connect = store::connect(&admin.store_cfg, &cancel);
                match tokio::time::timeout(REDIS_CONNECT, connect).await {
                    Ok(Ok(redis)) => Ok(redis),
                    Ok(Err(e)) => {
                        tracing::warn!(error = %e, "usage store not reachable");
                        Err(unavailable_redis())
                    }
                    Err(_) => Err(unavailable_redis()),
                }
            })
            .await?;
        Ok(redis.clone())
    }

    /// The bots a usage report covers: `bot` when given, else the config's and the
    /// registry's (a fleet without the registry: the config's).
    pub(super) async fn usage_bots(&self, bot: Option<&str>) -> Result<Vec<String>, ApiError> {
        if let Some(bot) = bot {
            bot_registry::check_id(bot).map_err(ApiError::BadRequest)?;
            return Ok(vec![bot.to_string()]);
        }
        let config_bots = self.inner.admin.config_bots.clone();
        let registry = self.registry().await.ok();
        nanobot_runtime::usage::report_bots(config_bots, registry)
            .await
            .map_err(|e| ApiError::internal("list the registry's bots", e))
    }
}

fn unavailable_redis() -> ApiError {
    ApiError::Unavailable("The usage store (Redis) is not reachable; try again".into())
}

async fn open_registry(
    js: &jetstream::Context,
    seed: &BTreeMap<String, Value>,
) -> Result<kv::Store, ApiError> {
    let store = bot_registry::open(js).await.map_err(|e| {
        tracing::warn!(error = format!("{e:#}"), "bot registry not available");
        ApiError::Unavailable("No bot registry: run `nanobot bus init` first".into())
    })?;
    bot_registry::seed(&store, seed)
        .await
        .map_err(|e| ApiError::internal("seed the bot registry", e))?;
    Ok(store)
}

impl From<AdminError> for ApiError {
    fn from(e: AdminError) -> Self {
        match e {
            AdminError::Invalid(text) => ApiError::BadRequest(text),
            AdminError::NotFound(id) => ApiError::UnknownBot(id),
            AdminError::Exists(id) => ApiError::Conflict(format!(
                "Bot '{id}' exists; change it with PUT or PATCH /v1/bots/{id}"
            )),
            e @ AdminError::Changed(_) => ApiError::Conflict(e.to_string()),
            AdminError::Store { context, cause } => ApiError::internal(context, cause),
        }
    }
}
