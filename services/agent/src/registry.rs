//! The runner's side of the bot registry ([`nanobot_runtime::bot_registry`]): a bot added or
//! changed there gets its workspace, models and tools here within a second; a removed one is
//! taken out, so its next messages are refused (terminated, logged). Turns already running
//! keep the bot state they started with.
//!
//! SIGKILL: nothing is kept here; a restarted runner builds the config's bots and replays
//! the latest revision of every registry key.

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt as _;
use nanobot_core::tools::Replies;

use nanobot_runtime::bot_registry::{self, Change};

use crate::bots;
use crate::handlers::Deps;

/// Follows the registry until shutdown, changing `deps.bots`. Without the registry bucket
/// the runner serves its config's bots only (logged).
pub async fn follow(deps: Arc<Deps>) {
    let store = match bot_registry::open(&deps.js).await {
        Ok(store) => store,
        Err(e) => {
            tracing::warn!(
                error = format!("{e:#}"),
                "no bot registry; serving the config's bots only"
            );
            return;
        }
    };
    let mut watch = match bot_registry::watch(&store).await {
        Ok(w) => w,
        Err(e) => {
            tracing::error!(
                error = format!("{e:#}"),
                "bot registry watch failed; serving the config's bots only"
            );
            return;
        }
    };
    let env: HashMap<String, String> = std::env::vars().collect();
    let replies = Replies::new(deps.nats.clone());
    let mut cfg = deps.cfg.clone();
    loop {
        let next = tokio::select! {
            _ = deps.cancel.cancelled() => break,
            next = watch.next() => next,
        };
        let Some(Ok(entry)) = next else {
            if next.is_none() {
                break;
            }
            continue;
        };
        let Some(change) = bot_registry::change(&entry) else {
            continue;
        };
        let id = change.bot().to_string();
        let next_cfg = match bot_registry::apply(&cfg, &change, &env) {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(bot = %id, error = %e, "bot registry entry not applied");
                continue;
            }
        };
        if next_cfg.bots.get(&id) == cfg.bots.get(&id) {
            continue;
        }
        cfg = next_cfg;
        let mut live = deps.bots.write().unwrap_or_else(|e| e.into_inner());
        match (&change, cfg.bot(&id)) {
            (Change::Put(..), Some(spec)) => {
                let bot = bots::build_one(&cfg, spec, &deps.nats, &deps.redis, &replies);
                live.insert(id.clone(), Arc::new(bot));
                tracing::info!(bot = %id, "bot added or changed from the registry");
            }
            _ => {
                live.remove(&id);
                tracing::info!(bot = %id, "bot removed from the registry: its messages are refused");
            }
        }
    }
}
