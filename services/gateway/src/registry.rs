//! The gateway's side of the bot registry ([`nanobot_runtime::bot_registry`]): a bot added
//! or changed there gets its channels (re)started on this replica within a second, a removed
//! one has its receivers stopped and leaves delivery; other bots' channels keep running.
//!
//! SIGKILL: nothing is kept here; a restarted gateway starts from the config's bots and
//! replays the latest revision of every registry key before serving changes.

use std::collections::HashMap;

use futures::StreamExt as _;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use nanobot_runtime::bot_registry::{self, Change};
use nanobot_runtime::config::Config;

use crate::channels::{ChannelDeps, Channels};

/// Follows the registry until `cancel`, applying each change to `channels`; then waits for
/// the receivers and deliveries it started. A fleet without the registry bucket serves its
/// config's bots only (logged).
pub async fn follow(
    mut cfg: Config,
    mut channels: Channels,
    deps: ChannelDeps,
    cancel: CancellationToken,
) {
    let mut tasks = JoinSet::new();
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
    loop {
        let next = tokio::select! {
            _ = cancel.cancelled() => break,
            next = watch.next() => next,
        };
        let Some(entry) = next else { break };
        let Ok(entry) = entry else { continue };
        let Some(change) = bot_registry::change(&entry) else {
            continue;
        };
        let next_cfg = match bot_registry::apply(&cfg, &change, &env) {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(bot = %change.bot(), error = %e, "bot registry entry not applied");
                continue;
            }
        };
        let id = change.bot().to_string();
        if next_cfg.bots.get(&id) == cfg.bots.get(&id) {
            continue;
        }
        cfg = next_cfg;
        match change {
            Change::Removed(_) => {
                channels.stop_bot(&id);
                tracing::info!(bot = %id, "bot removed: its channels stopped");
            }
            Change::Put(..) => {
                let one = bot_registry::only(&cfg, &id);
                match channels
                    .start_bot(&one, &id, &deps, &cancel, &mut tasks)
                    .await
                {
                    Ok(()) => {
                        tracing::info!(bot = %id, channels = ?channels, "bot channels started")
                    }
                    Err(e) => {
                        tracing::error!(bot = %id, error = format!("{e:#}"), "bot channels not started")
                    }
                }
            }
        }
    }
    while tasks.join_next().await.is_some() {}
}
