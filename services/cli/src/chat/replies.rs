//! The chat's reply feed: an ordered consumer of the chat's outbound subject that survives
//! broker restarts. It starts after the stream's last message at open time, remembers the
//! stream sequence of every message it reads, and when the consumer fails (a NATS restart
//! drops ephemeral consumers: "consumer not found", a closed stream, missed heartbeats) it
//! creates a new one from the next sequence, retrying until the caller's deadline. It does not
//! wait for the old consumer to notice (missed heartbeats take seconds): a reconnect of the
//! client is seen in its `connects` statistic and the consumer is replaced at once. Replies
//! published while the broker or the consumer was away are in the stream and are read then.

use std::sync::atomic::Ordering;
use std::time::Duration;

use async_nats::jetstream::{self, consumer::DeliverPolicy, consumer::pull::Ordered};
use futures::StreamExt as _;
use prost::Message as _;
use tokio::time::Instant;

use nanobot_proto::{OutboundKind, OutboundMessage, subjects};
use nanobot_runtime::payloads;

/// Why no reply came.
#[derive(Debug, thiserror::Error)]
pub enum WaitError {
    /// The deadline passed.
    #[error("no reply before the deadline")]
    Timeout,
}

/// Longest pause between two attempts to recreate the consumer.
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// How often the feed checks whether the client reconnected.
const RECONNECT_CHECK: Duration = Duration::from_millis(100);

/// An outbound subject read from a known stream sequence on.
pub(super) struct Replies {
    client: async_nats::Client,
    js: jetstream::Context,
    /// The client's connection count when the current consumer was created.
    connects: u64,
    subject: String,
    next_seq: u64,
    messages: Option<Ordered>,
    /// Consumers created so far (1 without broker trouble).
    pub(super) consumers: u32,
}

impl Replies {
    /// Opens the feed of `subject`, starting after the outbound stream's last message.
    pub(super) async fn open(
        client: async_nats::Client,
        js: jetstream::Context,
        subject: String,
    ) -> anyhow::Result<Self> {
        use anyhow::Context as _;
        let mut stream = js
            .get_stream(subjects::OUTBOUND_STREAM)
            .await
            .context("open outbound stream")?;
        let last = stream
            .info()
            .await
            .context("read outbound stream state")?
            .state
            .last_sequence;
        let mut replies = Self {
            client,
            js,
            connects: 0,
            subject,
            next_seq: last + 1,
            messages: None,
            consumers: 0,
        };
        replies
            .subscribe()
            .await
            .map_err(|e| anyhow::anyhow!("create reply consumer: {e}"))?;
        Ok(replies)
    }

    fn connects_now(&self) -> u64 {
        self.client.statistics().connects.load(Ordering::Relaxed)
    }

    async fn subscribe(&mut self) -> Result<(), async_nats::Error> {
        self.connects = self.connects_now();
        let stream = self.js.get_stream(subjects::OUTBOUND_STREAM).await?;
        let consumer = stream
            .create_consumer(jetstream::consumer::pull::OrderedConfig {
                filter_subject: self.subject.clone(),
                deliver_policy: DeliverPolicy::ByStartSequence {
                    start_sequence: self.next_seq,
                },
                ..Default::default()
            })
            .await?;
        self.messages = Some(consumer.messages().await?);
        self.consumers += 1;
        Ok(())
    }

    /// Returns the next decodable message, recreating the consumer after any failure, or
    /// [`WaitError::Timeout`] at `deadline`.
    pub(super) async fn next(&mut self, deadline: Instant) -> Result<OutboundMessage, WaitError> {
        let mut backoff = Duration::from_millis(100);
        loop {
            let Some(messages) = self.messages.as_mut() else {
                let attempt = tokio::time::timeout_at(deadline, self.subscribe()).await;
                match attempt {
                    Err(_) => return Err(WaitError::Timeout),
                    Ok(Ok(())) => {
                        tracing::info!(from_seq = self.next_seq, "reply consumer recreated");
                        backoff = Duration::from_millis(100);
                    }
                    Ok(Err(e)) => {
                        tracing::debug!(error = %e, retry_in = ?backoff, "reply consumer not recreated yet");
                        if Instant::now() + backoff >= deadline {
                            return Err(WaitError::Timeout);
                        }
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                    }
                }
                continue;
            };
            let next = tokio::select! {
                next = tokio::time::timeout_at(deadline, messages.next()) => next,
                _ = tokio::time::sleep(RECONNECT_CHECK) => {
                    if self.connects_now() != self.connects {
                        tracing::info!(from_seq = self.next_seq, "nats reconnected, recreating the reply consumer");
                        self.messages = None;
                    }
                    continue;
                }
            };
            let message = match next {
                Err(_) => return Err(WaitError::Timeout),
                Ok(Some(Ok(message))) => message,
                Ok(Some(Err(e))) => {
                    tracing::info!(error = %e, from_seq = self.next_seq, "reply consumer failed, recreating");
                    self.messages = None;
                    continue;
                }
                Ok(None) => {
                    tracing::info!(from_seq = self.next_seq, "reply consumer ended, recreating");
                    self.messages = None;
                    continue;
                }
            };
            if let Ok(info) = message.info() {
                self.next_seq = info.stream_sequence + 1;
            }
            match OutboundMessage::decode(message.payload.clone()) {
                Ok(mut out) => {
                    if let Err(e) = payloads::resolve(&self.js, &mut out).await {
                        tracing::warn!(error = %e, delivery_id = %out.id, "large reply unreadable");
                        out.kind = OutboundKind::Error as i32;
                        out.content = "The reply was too large and could not be loaded.".into();
                    }
                    return Ok(out);
                }
                Err(e) => {
                    tracing::warn!(error = %e, subject = %message.subject, "undecodable reply skipped")
                }
            }
        }
    }
}
