//! The gateway's side of the bot registry ([`nanobot_runtime::bot_registry`]): a bot added
//! or changed there gets its channels (re)started on this replica within a second, a removed
//! one has its receivers stopped and leaves delivery; other bots' channels keep running.
//!
//! SIGKILL: nothing is kept here; a restarted gateway starts from the config's bots and
//! replays the latest revision of every registry key before serving changes.

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use nanobot_runtime::bot_registry::{self, Change, Follower};
use nanobot_runtime::config::Config;

use crate::channels::{ChannelDeps, Channels};

/// Follows the registry until `cancel`, applying each change to `channels`; then waits for
/// the receivers and deliveries it started. A fleet without the registry bucket serves its
/// config's bots only (logged).
pub async fn follow(
    cfg: Config,
    mut channels: Channels,
    deps: ChannelDeps,
    cancel: CancellationToken,
) {
    let mut tasks = JoinSet::new();
    let Some(mut follower) = Follower::open(&deps.js, cfg).await else {
        return;
    };
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
        match applied.change {
            Change::Removed(_) => {
                channels.stop_bot(&id);
                tracing::info!(bot = %id, "bot removed: its channels stopped");
            }
            Change::Put(..) => {
                let one = bot_registry::only(follower.config(), &id);
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
