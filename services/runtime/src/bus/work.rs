//! Working JetStream messages one at a time with their ack deadline kept extended: a worker
//! pulls the next message only when it is free ([`pull_one`]), so nothing waits in it that
//! another worker could run, and while a message is worked on an in-progress ack every
//! [`progress_every`] of the ack wait tells the server it is alive ([`while_in_progress`]).
//!
//! Killed mid-way (SIGKILL), the in-progress acks stop and the message is redelivered once the
//! ack wait passes: to another worker, or to this one when it is back.

use std::future::Future;
use std::time::Duration;

use async_nats::jetstream::consumer::{PullConsumer, pull};
use async_nats::jetstream::{AckKind, Message};
use futures::StreamExt as _;
use tokio_util::sync::CancellationToken;

/// How long one pull waits for a message before it asks again.
const PULL_EXPIRES: Duration = Duration::from_secs(5);
/// The pause after a failed pull (a 503 while the consumer's leader is elected again).
const PULL_PAUSE: Duration = Duration::from_millis(500);

/// How often a message in progress extends an ack deadline of `ack_wait`: a third of it.
pub fn progress_every(ack_wait: Duration) -> Duration {
    ack_wait / 3
}

/// Pulls the next message of `consumer`; `None` once `cancel` fires. Failed pulls are logged
/// (as `what`) and retried after a pause.
pub async fn pull_one(
    consumer: &PullConsumer,
    cancel: &CancellationToken,
    what: &str,
) -> Option<Message> {
    loop {
        let batch = tokio::select! {
            biased;
            _ = cancel.cancelled() => return None,
            b = consumer.fetch().max_messages(1).expires(PULL_EXPIRES).messages() => b,
        };
        let mut batch: pull::Batch = match batch {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(error = %e, what, "failed to pull, retrying");
                tokio::time::sleep(PULL_PAUSE).await;
                continue;
            }
        };
        let next = tokio::select! {
            biased;
            _ = cancel.cancelled() => return None,
            n = batch.next() => n,
        };
        match next {
            Some(Ok(msg)) => return Some(msg),
            Some(Err(e)) => tracing::warn!(error = %e, what, "failed to receive"),
            None => {}
        }
    }
}

/// Runs `work`, acking `msg` as in progress every `every` until it is done; returns its output.
pub async fn while_in_progress<F: Future>(msg: &Message, every: Duration, work: F) -> F::Output {
    tokio::pin!(work);
    let mut tick = tokio::time::interval(every);
    tick.tick().await;
    loop {
        tokio::select! {
            out = &mut work => return out,
            _ = tick.tick() => {
                // A failed progress ack is not fatal: at worst the message is redelivered
                // and the delivery record / job lock answers the second copy.
                let _ = msg.ack_with(AckKind::Progress).await;
            }
        }
    }
}
