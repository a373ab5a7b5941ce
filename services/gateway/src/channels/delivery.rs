//! Outbound delivery of a chat channel: one durable JetStream consumer per channel
//! ([`subjects::channel_outbound_consumer`]) shared by every gateway replica, so each reply is
//! handed to exactly one replica at a time, and acked only after the platform accepted it.
//!
//! Doubles: before sending, the replica reads the delivery's record
//! ([`keys::outbound_delivered`]): `done` means an earlier delivery got through (the ack was
//! lost) and the message is only acked; a number `n` means the first `n` parts (chunks of a
//! long reply) were accepted and sending resumes after them. The record is written right after
//! the platform accepts each part. The one window left: a replica that dies after the platform
//! accepted a part and before the record was written (one Redis round trip) makes the next
//! delivery send that one part again.
//!
//! Each replica also runs an ordered, non-durable consumer on the same subjects that shows every
//! message to [`Channel::observe`] (stream deltas, the end of a turn's typing indicator).

use std::hash::{DefaultHasher, Hash as _, Hasher as _};
use std::time::Duration;

use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, pull};
use async_nats::jetstream::{AckKind, Message};
use futures::StreamExt as _;
use nanobot_runtime::bus::work;
use nanobot_runtime::payloads;
use nanobot_runtime::store::Store;
use prost::Message as _;
use redis::AsyncCommands as _;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use nanobot_proto::{OutboundKind, OutboundMessage, keys, subjects};

use super::ChannelDeps;

/// How long a delivery record is kept (longer than the outbound stream keeps messages).
const RECORD_TTL_SECS: u64 = 2 * 24 * 3600;
/// Parallel delivery lanes per replica; messages of one chat always take the same lane.
const LANES: usize = 8;
/// How long JetStream waits for an ack before redelivering to another replica: the longest a
/// reply waits when the replica holding it dies.
const ACK_WAIT: Duration = Duration::from_secs(10);
/// How often a slow delivery (flood control, a large upload) tells JetStream it is still
/// working.
const KEEPALIVE: Duration = Duration::from_secs(3);
/// Deliveries of one message before it is given up (logged).
const MAX_DELIVER: i64 = 20;

/// A failed delivery.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// Worth retrying later (network, flood control, platform 5xx): redelivered.
    #[error("transient: {0}")]
    Transient(String),
    /// Never going to work (chat gone, bot blocked, bad request): dropped with a warning.
    #[error("permanent: {0}")]
    Permanent(String),
}

/// How far a delivery got: parts already accepted by the platform.
#[derive(Debug)]
pub struct Progress {
    redis: Store,
    key: String,
    done: usize,
}

impl Progress {
    /// Returns the number of parts accepted in earlier attempts (skip them).
    pub fn done(&self) -> usize {
        self.done
    }

    /// Records that one more part was accepted.
    pub async fn part_done(&mut self) {
        self.done += 1;
        let mut conn = self.redis.clone();
        let written: redis::RedisResult<()> = conn
            .set_ex(&self.key, self.done.to_string(), RECORD_TTL_SECS)
            .await;
        if let Err(e) = written {
            tracing::warn!(error = %e, parts = self.done, "failed to record a delivered part");
        }
    }
}

/// Creates (or joins) the durable consumer of `name` and spawns the delivery lanes and the
/// observer into `tasks`.
pub(super) async fn start(
    name: &'static str,
    bots: super::LiveBots,
    deps: &ChannelDeps,
    cancel: CancellationToken,
    tasks: &mut JoinSet<()>,
) -> anyhow::Result<()> {
    let filter = subjects::outbound_channel_all_bots(name);
    let stream = deps.js.get_stream(subjects::OUTBOUND_STREAM).await?;
    let durable = subjects::channel_outbound_consumer(name);
    // Create or update: a consumer left by an older release takes this release's settings.
    let consumer = stream
        .create_consumer(pull::Config {
            durable_name: Some(durable.clone()),
            filter_subject: filter.clone(),
            ack_policy: AckPolicy::Explicit,
            ack_wait: ACK_WAIT,
            max_deliver: MAX_DELIVER,
            deliver_policy: DeliverPolicy::All,
            ..Default::default()
        })
        .await?;
    nanobot_runtime::metrics::watch_consumer(consumer.clone(), cancel.clone());
    let mut messages = consumer.messages().await?;
    let mut lanes = Vec::with_capacity(LANES);
    for _ in 0..LANES {
        let (tx, rx) = mpsc::channel::<Message>(16);
        lanes.push(tx);
        let lane_deps = Lane {
            redis: deps.redis.clone(),
            js: deps.js.clone(),
            channel: name,
        };
        tasks.spawn(lane(rx, bots.clone(), lane_deps));
    }
    let pull_cancel = cancel.clone();
    tasks.spawn(async move {
        loop {
            let next = tokio::select! {
                _ = pull_cancel.cancelled() => break,
                next = messages.next() => next,
            };
            match next {
                Some(Ok(msg)) => {
                    let mut h = DefaultHasher::new();
                    msg.subject.as_str().hash(&mut h);
                    let lane = &lanes[(h.finish() as usize) % LANES];
                    if lane.send(msg).await.is_err() {
                        break;
                    }
                }
                Some(Err(e)) => {
                    tracing::warn!(channel = name, error = %e, "outbound consumer error")
                }
                None => break,
            }
        }
        tracing::info!(channel = name, "outbound delivery stopped");
    });
    let observed = stream
        .create_consumer(pull::OrderedConfig {
            filter_subject: filter.clone(),
            deliver_policy: DeliverPolicy::New,
            // A consumer lost with its NATS node is re-created in seconds.
            max_expires: nanobot_runtime::bus::retry::ORDERED_MAX_EXPIRES,
            ..Default::default()
        })
        .await?;
    let mut observed = observed.messages().await?;
    tasks.spawn(async move {
        let mut repoll = tokio::time::interval(crate::outbound::REPOLL);
        loop {
            let next = tokio::select! {
                _ = cancel.cancelled() => break,
                _ = repoll.tick() => continue,
                next = observed.next() => next,
            };
            let Some(next) = next else { break };
            let Ok(msg) = next else { continue };
            let Ok(out) = OutboundMessage::decode(msg.payload.clone()) else {
                continue;
            };
            let channel = super::live_get(&bots, &out.bot);
            if let Some(channel) = channel {
                channel.observe(&out).await;
            }
        }
    });
    tracing::info!(channel = name, %filter, consumer = %durable, "outbound delivery started");
    Ok(())
}

/// What a delivery lane uses.
struct Lane {
    redis: Store,
    js: async_nats::jetstream::Context,
    channel: &'static str,
}

async fn lane(mut rx: mpsc::Receiver<Message>, bots: super::LiveBots, deps: Lane) {
    while let Some(msg) = rx.recv().await {
        let outcome = deliver(&msg, &bots, &deps)
            .instrument(delivery_span(&msg, deps.channel))
            .await;
        let acked = match outcome {
            Outcome::Done => msg.ack().await,
            Outcome::Retry(delay) => msg.ack_with(AckKind::Nak(Some(delay))).await,
            Outcome::Drop => msg.ack_with(AckKind::Term).await,
        };
        if let Err(e) = acked {
            tracing::warn!(subject = %msg.subject, error = %e, "outbound ack failed; it will be redelivered");
        }
    }
}

enum Outcome {
    Done,
    Retry(Duration),
    Drop,
}

/// Returns the span of one delivery attempt (`deliver {channel}`): the end of the turn's
/// trace, under the span that published the reply (the agent's turn). It holds the platform
/// calls of every part, edits included; each redelivery (a retry) is a span of its own.
fn delivery_span(msg: &Message, channel: &'static str) -> tracing::Span {
    let attempt = msg.info().map(|i| i.delivered).unwrap_or(1);
    let span = tracing::info_span!(
        "deliver",
        "otel.name" = %format_args!("deliver {channel}"),
        "otel.kind" = "client",
        "messaging.system" = channel,
        attempt,
        delivery_id = tracing::field::Empty,
        outcome = tracing::field::Empty,
    );
    nanobot_runtime::telemetry::set_parent_from(&span, msg.headers.as_ref());
    span
}

async fn deliver(msg: &Message, bots: &super::LiveBots, deps: &Lane) -> Outcome {
    let redis = &deps.redis;
    let mut out = match OutboundMessage::decode(msg.payload.clone()) {
        Ok(out) => out,
        Err(e) => {
            tracing::warn!(subject = %msg.subject, error = %e, "undecodable outbound message dropped");
            return Outcome::Drop;
        }
    };
    tracing::Span::current().record("delivery_id", out.id.as_str());
    let Some(channel) = super::live_get(bots, &out.bot) else {
        tracing::warn!(bot = %out.bot, subject = %msg.subject, "outbound message for a bot this gateway does not serve dropped");
        return Outcome::Drop;
    };
    let settings = channel.settings();
    let wanted = match OutboundKind::try_from(out.kind) {
        Ok(OutboundKind::Final | OutboundKind::Error) => true,
        Ok(OutboundKind::Progress) => settings.send_progress,
        Ok(OutboundKind::ToolHint) => settings.send_tool_hints,
        // Deltas are shown by the observer; nothing to deliver durably.
        Ok(OutboundKind::StreamDelta | OutboundKind::StreamEnd) | Err(_) => false,
    };
    if !wanted || out.content.is_empty() && out.media.is_empty() {
        return Outcome::Done;
    }
    if let Err(e) = payloads::resolve(&deps.js, &mut out).await {
        tracing::warn!(delivery_id = %out.id, error = %e, "large reply unreadable; retrying later");
        return Outcome::Retry(Duration::from_secs(1));
    }
    let key = keys::outbound_delivered(&out.bot, &out.id);
    let mut conn = redis.clone();
    let record: Option<String> = match conn.get(&key).await {
        Ok(record) => record,
        Err(e) => {
            tracing::warn!(error = %e, "delivery record unreadable; retrying later");
            return Outcome::Retry(Duration::from_secs(1));
        }
    };
    if record.as_deref() == Some("done") {
        tracing::info!(delivery_id = %out.id, "already delivered; acking the redelivery");
        return Outcome::Done;
    }
    let mut progress = Progress {
        redis: redis.clone(),
        key: key.clone(),
        done: record.and_then(|r| r.parse().ok()).unwrap_or(0),
    };
    let sent = work::while_in_progress(msg, KEEPALIVE, channel.send(&out, &mut progress)).await;
    let metrics = nanobot_runtime::metrics::get();
    let span = tracing::Span::current();
    match sent {
        Ok(()) => {
            span.record("outcome", "delivered");
            metrics.delivery(&out.bot, &out.channel, "delivered");
            let written: redis::RedisResult<()> = conn.set_ex(&key, "done", RECORD_TTL_SECS).await;
            if let Err(e) = written {
                tracing::warn!(error = %e, delivery_id = %out.id, "failed to record a delivery");
            }
            Outcome::Done
        }
        Err(SendError::Transient(e)) => {
            let attempt = msg.info().map(|i| i.delivered).unwrap_or(1).max(1);
            let delay = Duration::from_millis(500u64 << attempt.min(6) as u64);
            tracing::warn!(delivery_id = %out.id, attempt, retry_in = ?delay, error = %e, "delivery failed; retrying");
            span.record("outcome", "retried");
            metrics.delivery(&out.bot, &out.channel, "retried");
            Outcome::Retry(delay.min(Duration::from_secs(30)))
        }
        Err(SendError::Permanent(e)) => {
            span.record("outcome", "dropped");
            metrics.delivery(&out.bot, &out.channel, "dropped");
            tracing::warn!(delivery_id = %out.id, error = %e, "delivery refused by the platform; dropped");
            Outcome::Drop
        }
    }
}
