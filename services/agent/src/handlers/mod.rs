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

use std::future::Future;
use std::time::Duration;

use async_nats::jetstream::{self, AckKind};
use nanobot_runtime::bus::work;

use crate::base::deps::Deps;

/// Runs `work` with `msg`'s ack deadline (`ack_wait`) kept extended by an in-progress ack
/// every third of it (`nanobot_runtime::bus::work`, as memory and the gateway's delivery do);
/// a failed progress ack is skipped and the next one tried. Killed mid-way (SIGKILL), the
/// acks stop and the message is redelivered once the ack wait passes.
pub async fn keep_alive<F: Future>(
    msg: &jetstream::Message,
    ack_wait: Duration,
    work: F,
) -> F::Output {
    work::while_in_progress(msg, work::progress_every(ack_wait), work).await
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
