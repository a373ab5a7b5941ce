//! The top layer: receiving bus messages. One handler per message type (a chat message, a
//! cron fire, the heartbeat, a subagent task), dispatched by the consumer loops in `lib.rs`,
//! and the registry watcher; while a message is worked on its ack deadline is kept extended
//! ([`keep_alive`]), and when it is done it is acknowledged or redelivered ([`settle`]).
//!
//! May import: `crate::session` (who runs a message, and when), `crate::turn` (the subagent
//! runs, the priority commands' answers), `crate::base`. Nothing below imports this layer.

pub mod cron_fire;
pub mod heartbeat;
pub mod inbound;
pub mod registry;
pub mod subagent;

use std::time::Duration;

use async_nats::jetstream::{self, AckKind};

use crate::base::deps::Deps;

/// How often an in-progress message extends its JetStream ack deadline, as a fraction of it.
const PROGRESS_FRACTION: u32 = 3;

/// Keeps a JetStream message's ack deadline extended until dropped.
pub fn keep_alive(msg: &jetstream::Message, ack_wait: Duration) -> tokio::task::JoinHandle<()> {
    let acker = msg.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(ack_wait / PROGRESS_FRACTION);
        tick.tick().await;
        loop {
            tick.tick().await;
            if acker.ack_with(AckKind::Progress).await.is_err() {
                break;
            }
        }
    })
}

/// Terminates a message that can never be processed (undecodable, unknown bot).
pub async fn terminate(msg: &jetstream::Message, why: &str) {
    tracing::warn!(subject = %msg.subject, reason = why, "dropping message");
    if let Err(e) = msg.ack_with(AckKind::Term).await {
        tracing::warn!(error = %e, "failed to terminate message");
    }
}

/// Acknowledges `msg` after `outcome`: acked when answered, otherwise redelivered soon (on
/// shutdown at once, to another runner).
pub async fn settle(deps: &Deps, msg: &jetstream::Message, outcome: anyhow::Result<()>) {
    let result = match outcome {
        Ok(()) => msg.ack().await,
        Err(e) => {
            let delay = if deps.cancel.is_cancelled() {
                Duration::ZERO
            } else {
                tracing::warn!("message not answered yet, redelivering later: {e:#}");
                Duration::from_secs(1)
            };
            msg.ack_with(AckKind::Nak(Some(delay))).await
        }
    };
    if let Err(e) = result {
        tracing::warn!(error = %e, "failed to acknowledge message");
    }
}
