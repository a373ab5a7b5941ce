//! The memory workers' side of the bot registry ([`nanobot_runtime::bot_registry`]): a bot
//! added or changed there gets its consolidation, AutoCompact scans and Dream runs here within
//! a second; a removed one gets no new job (a job of it still queued is dropped as a job of
//! an unknown bot), while a job already running keeps the bot's state it started with and
//! finishes.
//!
//! SIGKILL: nothing is kept here; a restarted worker lays the registry's bots over its config
//! before it takes a job ([`nanobot_runtime::bot_registry::Follower::catch_up`]).

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use nanobot_runtime::bot_registry::{Change, Follower};

use crate::bots;
use crate::jobs::Deps;

/// Opens the registry and lays its bots over `cfg`: the config to build the worker from,
/// and the follower to hand [`follow`] (`None` without a registry).
pub async fn open(
    js: &async_nats::jetstream::Context,
    cfg: nanobot_runtime::config::Config,
) -> (nanobot_runtime::config::Config, Option<Follower>) {
    let Some(mut follower) = Follower::open(js, cfg.clone()).await else {
        return (cfg, None);
    };
    if let Err(e) = follower.catch_up().await {
        tracing::warn!(
            error = format!("{e:#}"),
            "bot registry not read; its changes follow"
        );
    }
    (follower.config().clone(), Some(follower))
}

/// Applies each registry change to `deps.bots` until `cancel`.
pub async fn follow(deps: Arc<Deps>, mut follower: Follower, cancel: CancellationToken) {
    loop {
        let next = tokio::select! {
            _ = cancel.cancelled() => break,
            next = follower.next() => next,
        };
        let Some(applied) = next else { break };
        if !applied.changed {
            continue;
        }
        let id = applied.change.bot().to_string();
        let spec = follower.config().bots().into_iter().find(|b| b.id == id);
        let mut live = deps.bots.write().unwrap_or_else(|e| e.into_inner());
        match (&applied.change, spec) {
            (Change::Put(..), Some(spec)) => {
                let bot = bots::build_one(follower.config(), spec, &deps.nats, &deps.redis);
                live.insert(id.clone(), Arc::new(bot));
                tracing::info!(bot = %id, "bot added or changed from the registry: its memory jobs run here");
            }
            _ => {
                live.remove(&id);
                tracing::info!(bot = %id, "bot removed from the registry: no new memory jobs");
            }
        }
    }
}
