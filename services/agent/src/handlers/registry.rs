//! The runner's side of the bot registry ([`nanobot_runtime::bot_registry`]): a bot added or
//! changed there gets its workspace, models, tools and limits here within a second; a removed one is
//! taken out, so its next messages are refused (terminated, logged). Turns already running
//! keep the bot state they started with.
//!
//! SIGKILL: nothing is kept here; a restarted runner builds the config's bots and replays
//! the latest revision of every registry key.

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt as _;
use nanobot_core::tools::Replies;
use nanobot_proto::{InboundMessage, OutboundKind};

use nanobot_runtime::bot_registry::{self, Change};

use crate::base::bots;
use crate::base::deps::Deps;
use crate::base::outbox::Outbox;

/// The reply to a message for a bot removed from the registry.
pub const REMOVED_REPLY: &str = "This bot has been removed and no longer takes messages.";

/// Returns whether `bot` was removed from the registry.
pub fn is_removed(deps: &Deps, bot: &str) -> bool {
    deps.removed
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .contains(bot)
}

/// Answers `msg`, addressed to a removed bot, with [`REMOVED_REPLY`].
pub async fn refuse(deps: &Deps, msg: &InboundMessage) {
    let outbox = Outbox::for_message(&deps.js, msg);
    if let Err(e) = outbox.send(OutboundKind::Error, REMOVED_REPLY, 0).await {
        tracing::warn!(bot = %msg.bot, error = %e, "removed-bot reply not sent");
    }
}

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
        if let Change::Removed(_) = &change {
            // Also a bot added and removed before this runner started.
            deps.removed
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .insert(id.clone());
        }
        if next_cfg.bots.get(&id) == cfg.bots.get(&id) {
            continue;
        }
        cfg = next_cfg;
        let mut live = deps.bots.write().unwrap_or_else(|e| e.into_inner());
        let mut removed = deps.removed.write().unwrap_or_else(|e| e.into_inner());
        match (&change, cfg.bot(&id)) {
            (Change::Put(..), Some(spec)) => {
                let bot = bots::build_one(&cfg, spec, &deps.nats, &deps.redis, &replies);
                live.insert(id.clone(), Arc::new(bot));
                removed.remove(&id);
                tracing::info!(bot = %id, "bot added or changed from the registry");
            }
            _ => {
                live.remove(&id);
                removed.insert(id.clone());
                tracing::info!(bot = %id, "bot removed from the registry: its messages are refused");
            }
        }
    }
}
