//! The cron scheduler's side of the bot registry ([`nanobot_runtime::bot_registry`]): the
//! leader fires the jobs (heartbeat and Dream included) of the bots the registry holds now. A
//! bot added there has its `cron/jobs.json` read from the next tick (half a second); a
//! removed one's jobs stop firing and stay in the file (`nanobot bots remove --purge` deletes
//! them).
//!
//! SIGKILL: nothing is kept here; a restarted replica lays the registry's bots over its config
//! before its first tick.

use std::sync::{Arc, RwLock};

use tokio_util::sync::CancellationToken;

use nanobot_runtime::bot_registry::Follower;
use nanobot_runtime::config::Config;

/// The config as the registry has it now; cheap to read on every tick.
#[derive(Debug, Clone)]
pub struct Live(Arc<RwLock<Arc<Config>>>);

impl Live {
    /// Returns the config now.
    pub fn now(&self) -> Arc<Config> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Lays the registry's bots over `cfg` and follows the registry until `cancel` (a fleet
    /// without the registry keeps `cfg`).
    pub async fn start(
        js: &async_nats::jetstream::Context,
        cfg: Config,
        cancel: &CancellationToken,
    ) -> Live {
        let Some(mut follower) = Follower::open(js, cfg.clone()).await else {
            return Live(Arc::new(RwLock::new(Arc::new(cfg))));
        };
        if let Err(e) = follower.catch_up().await {
            tracing::warn!(
                error = format!("{e:#}"),
                "bot registry not read; its changes follow"
            );
        }
        let live = Live(Arc::new(RwLock::new(Arc::new(follower.config().clone()))));
        tokio::spawn(follow(live.clone(), follower, cancel.clone()));
        live
    }
}

async fn follow(live: Live, mut follower: Follower, cancel: CancellationToken) {
    loop {
        let next = tokio::select! {
            _ = cancel.cancelled() => break,
            next = follower.next() => next,
        };
        let Some(applied) = next else { break };
        if !applied.changed {
            continue;
        }
        *live.0.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(follower.config().clone());
        let bot = applied.change.bot();
        match applied.change {
            nanobot_runtime::bot_registry::Change::Put(..) => {
                tracing::info!(%bot, "bot added or changed from the registry: its cron jobs fire")
            }
            nanobot_runtime::bot_registry::Change::Removed(_) => {
                tracing::info!(%bot, "bot removed from the registry: its cron jobs stop firing")
            }
        }
    }
}
