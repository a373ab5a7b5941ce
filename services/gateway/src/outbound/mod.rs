//! Outbound delivery for request/response channels (the HTTP API): every gateway replica
//! reads a channel's replies of all bots from [`subjects::OUTBOUND_STREAM`] through one
//! ephemeral ordered consumer and hands each to the request of this replica that waits for it
//! ([`Pending`]). Replies for requests held by other replicas are ignored here.

mod pending;

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::consumer::{DeliverPolicy, pull};
use async_nats::jetstream::{self, Message};
use futures::StreamExt as _;
use prost::Message as _;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use nanobot_proto::{OutboundKind, OutboundMessage, subjects};
use nanobot_runtime::bus::BusError;
use nanobot_runtime::payloads;

pub use self::pending::{Pending, Waiter};

/// Creates the consumer of `channel`'s replies (only those published from now on) and spawns
/// the loop routing them into `pending` until `cancel`. Returns once the consumer exists, so a
/// request published afterwards cannot miss its reply.
pub async fn start(
    js: &jetstream::Context,
    channel: &'static str,
    pending: Arc<Pending>,
    cancel: CancellationToken,
) -> Result<JoinHandle<()>, BusError> {
    let filter = subjects::outbound_channel_all_bots(channel);
    let messages = subscribe(js, &filter, DeliverPolicy::New).await?;
    tracing::info!(%filter, "outbound consumer started");
    let router = Router {
        js: js.clone(),
        filter,
        pending,
        cancel,
        last_sequence: None,
    };
    Ok(tokio::spawn(router.run(messages)))
}

async fn subscribe(
    js: &jetstream::Context,
    filter: &str,
    deliver_policy: DeliverPolicy,
) -> Result<pull::Ordered, BusError> {
    let config = pull::OrderedConfig {
        filter_subject: filter.to_string(),
        deliver_policy,
        // A consumer lost with its NATS node is re-created in seconds.
        max_expires: nanobot_runtime::bus::retry::ORDERED_MAX_EXPIRES,
        ..Default::default()
    };
    let consumer = js
        .create_consumer_on_stream(config, subjects::OUTBOUND_STREAM)
        .await
        .map_err(|e| BusError::JetStream {
            op: "create outbound consumer",
            cause: e.to_string(),
        })?;
    consumer.messages().await.map_err(|e| BusError::JetStream {
        op: "consume outbound",
        cause: e.to_string(),
    })
}

/// How often the ordered consumer is polled even when idle: async-nats arms its second
/// missed-heartbeat check only when polled again, so without this a consumer lost with its
/// NATS node was noticed only when something else woke it (75 s in the chaos test), not after
/// two heartbeats ([`nanobot_runtime::bus::retry::ORDERED_MAX_EXPIRES`]).
pub(crate) const REPOLL: Duration = Duration::from_secs(1);

struct Router {
    js: jetstream::Context,
    filter: String,
    pending: Arc<Pending>,
    cancel: CancellationToken,
    /// Stream sequence of the last message seen, to resume after it if the consumer ends.
    last_sequence: Option<u64>,
}

impl Router {
    async fn run(mut self, mut messages: pull::Ordered) {
        let mut repoll = tokio::time::interval(REPOLL);
        loop {
            tokio::select! {
                biased;
                _ = self.cancel.cancelled() => break,
                _ = repoll.tick() => {}
                next = messages.next() => match next {
                    Some(Ok(msg)) => self.on_message(&msg).await,
                    Some(Err(e)) => tracing::warn!(error = %e, filter = %self.filter, "outbound consumer error"),
                    None => match self.resubscribe().await {
                        Some(fresh) => messages = fresh,
                        None => break,
                    },
                },
            }
        }
        tracing::info!(waiting = self.pending.len(), "outbound consumer stopped");
    }

    async fn on_message(&mut self, msg: &Message) {
        if let Ok(info) = msg.info() {
            self.last_sequence = Some(info.stream_sequence);
        }
        let mut reply = match OutboundMessage::decode(msg.payload.clone()) {
            Ok(reply) => reply,
            Err(e) => {
                tracing::warn!(subject = %msg.subject, error = %e, "undecodable outbound message skipped");
                return;
            }
        };
        if !reply.content_ref.is_empty()
            && self.pending.waits_for(&reply)
            && let Err(e) = payloads::resolve(&self.js, &mut reply).await
        {
            tracing::warn!(delivery_id = %reply.id, error = %e, "large reply unreadable");
            reply.kind = OutboundKind::Error as i32;
            reply.content = "The reply was too large and could not be loaded.".into();
        }
        let reply_to = reply.reply_to.clone();
        if self.pending.route(reply) {
            tracing::trace!(%reply_to, "reply routed");
        } else {
            tracing::trace!(%reply_to, "reply for another replica ignored");
        }
    }

    /// Re-creates the consumer after the message stream ended, resuming after the last message
    /// seen. Returns `None` when cancelled first.
    async fn resubscribe(&mut self) -> Option<pull::Ordered> {
        let mut delay = Duration::from_millis(100);
        loop {
            let policy = match self.last_sequence {
                Some(seq) => DeliverPolicy::ByStartSequence {
                    start_sequence: seq + 1,
                },
                None => DeliverPolicy::New,
            };
            match subscribe(&self.js, &self.filter, policy).await {
                Ok(messages) => {
                    tracing::info!(filter = %self.filter, "outbound consumer re-created");
                    return Some(messages);
                }
                Err(e) => tracing::warn!(error = %e, retry_in = ?delay, "outbound consumer ended"),
            }
            tokio::select! {
                _ = self.cancel.cancelled() => return None,
                _ = tokio::time::sleep(delay) => {}
            }
            delay = (delay * 2).min(Duration::from_secs(5));
        }
    }
}
