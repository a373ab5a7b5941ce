//! A session's mailbox is its subject in the inbound work-queue stream
//! (`subjects::inbound(bot, channel, session)`): the lease holder reads the session's messages
//! in stream order with direct gets past the session's cursor, so turns run in arrival order
//! whichever runner received each message, and follow-ups are read from there mid-turn.

use async_nats::jetstream::{
    self,
    stream::{DirectGetError, DirectGetErrorKind},
};

use nanobot_proto::subjects;
use nanobot_runtime::bus::retry;

use super::input::Incoming;

/// How long one mailbox read waits: a direct get answered by a node that then died is never
/// answered, and is asked again of the nodes left.
const READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Reads sessions' messages from the inbound stream.
#[derive(Debug, Clone)]
pub struct Mailbox {
    stream: jetstream::stream::Stream,
}

/// One message of a session's mailbox.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Stream sequence.
    pub seq: u64,
    /// The message; `None` when it cannot be decoded (it is skipped).
    pub incoming: Option<Incoming>,
    /// Its NATS headers: the W3C trace context of whoever published it.
    pub headers: Option<async_nats::HeaderMap>,
    /// When the stream stored it (the start of its queue wait).
    pub stored: Option<std::time::SystemTime>,
}

impl Mailbox {
    /// Opens the inbound stream.
    pub async fn open(js: &jetstream::Context) -> anyhow::Result<Self> {
        let stream = js.get_stream(subjects::INBOUND_STREAM).await?;
        Ok(Self { stream })
    }

    /// Returns the first message on `subject` with a sequence above `after`. A read lost with a
    /// node that died (no answer within [`READ_TIMEOUT`], no responders, 503 while a leader is
    /// elected) is repeated on the nodes left for up to [`retry::RETRY_FOR`].
    pub async fn next_after(&self, subject: &str, after: u64) -> anyhow::Result<Option<Entry>> {
        let read = || async {
            let get = self
                .stream
                .direct_get_next_for_subject(subject, Some(after + 1));
            match tokio::time::timeout(READ_TIMEOUT, get).await {
                Ok(got) => got,
                Err(_) => Err(DirectGetErrorKind::TimedOut.into()),
            }
        };
        let transient = |e: &DirectGetError| match e.kind() {
            DirectGetErrorKind::TimedOut | DirectGetErrorKind::Request => true,
            DirectGetErrorKind::ErrorResponse(status, _) => status.as_u16() == 503,
            _ => false,
        };
        match retry::retry_transient(subject, retry::RETRY_FOR, read, transient).await {
            Ok(m) => Ok(Some(Entry {
                seq: m.sequence,
                incoming: Incoming::decode(m.payload).ok(),
                headers: Some(m.headers),
                stored: Some(m.time.into()),
            })),
            Err(e) if e.kind() == DirectGetErrorKind::NotFound => Ok(None),
            Err(e) => Err(anyhow::anyhow!("read session mailbox {subject}: {e}")),
        }
    }
}
