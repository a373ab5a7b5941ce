//! NATS: connection with credentials and retry, the JetStream streams, and helpers that carry
//! the W3C trace context in headers on every publish and request.

use std::time::Duration;

use async_nats::jetstream::{self, stream};
use async_nats::{Client, HeaderMap, ServerAddr};
use bytes::Bytes;
use prost::Message as _;
use tokio_util::sync::CancellationToken;

use nanobot_proto::{ERROR_CODE_HEADER, ERROR_HEADER, ErrorCode, Rpc, subjects};

use crate::config::BusConfig;
use crate::telemetry;

pub mod retry;
pub mod work;

/// Header with the JetStream de-duplication id (publish idempotency).
pub const MSG_ID_HEADER: &str = "Nats-Msg-Id";

/// NATS errors.
#[derive(Debug, thiserror::Error)]
pub enum BusError {
    /// The server URL is invalid.
    #[error("invalid nats url {url:?}: {source}")]
    Url { url: String, source: std::io::Error },
    /// Shut down before NATS became reachable.
    #[error("cancelled while waiting for nats")]
    Cancelled,
    /// The credentials file could not be read.
    #[error("read nats credentials {path}: {source}")]
    Creds {
        path: String,
        source: std::io::Error,
    },
    /// A JetStream operation failed.
    #[error("jetstream {op} failed: {cause}")]
    JetStream { op: &'static str, cause: String },
}

/// A connected client and its JetStream context.
#[derive(Clone, Debug)]
pub struct Bus {
    /// Core NATS client.
    pub client: Client,
    /// JetStream context.
    pub js: jetstream::Context,
}

async fn options(
    cfg: &BusConfig,
    role: subjects::Role,
    name: &str,
) -> Result<async_nats::ConnectOptions, BusError> {
    let mut opts = async_nats::ConnectOptions::new()
        .name(name)
        // Replies come to the role's own inboxes, the only ones its NATS user may read.
        .custom_inbox_prefix(subjects::inbox_prefix(role))
        .connection_timeout(Duration::from_secs(5))
        // JetStream API calls and reads wait this long at most: one sent to a node that died is
        // never answered, and its caller retries on the nodes left (seconds, not 30 s).
        .request_timeout(Some(Duration::from_secs(10)))
        // A server that vanished without closing the connection (a lost host) is noticed
        // after two missed pings, 10 s, not the default 2 minutes.
        .ping_interval(Duration::from_secs(5))
        .event_callback(|event| async move {
            match event {
                async_nats::Event::Disconnected => {
                    crate::dependency_metrics::get().bus_connected.set(0);
                    tracing::warn!("nats disconnected");
                }
                async_nats::Event::Connected => {
                    crate::dependency_metrics::get().bus_connected.set(1);
                    tracing::info!("nats connected");
                }
                other => tracing::debug!(event = %other, "nats event"),
            }
        });
    if let (Some(user), Some(password)) = (&cfg.user, &cfg.password) {
        opts = opts.user_and_password(user.clone(), password.clone());
    }
    if let Some(token) = &cfg.token {
        opts = opts.token(token.clone());
    }
    if let Some(seed) = &cfg.nkey_seed {
        opts = opts.nkey(seed.clone());
    }
    if let Some(path) = &cfg.creds_file {
        opts = opts
            .credentials_file(path)
            .await
            .map_err(|source| BusError::Creds {
                path: path.clone(),
                source,
            })?;
    }
    Ok(opts)
}

/// Connects to NATS as `role` (its reply inboxes are `role`'s: see
/// [`subjects::inbox_prefix`]), retrying with backoff until it answers or `cancel` fires.
/// Streams are not touched: `nanobot bus init` creates them ([`init_streams`]); roles check
/// them with [`verify_streams`].
pub async fn connect(
    cfg: &BusConfig,
    role: subjects::Role,
    name: &str,
    cancel: &CancellationToken,
) -> Result<Bus, BusError> {
    let mut addrs = Vec::new();
    for url in cfg.url.split(',') {
        let addr: ServerAddr = url.trim().parse().map_err(|source| BusError::Url {
            url: crate::config::redact_url(url),
            source,
        })?;
        addrs.push(addr);
    }
    let mut delay = Duration::from_millis(100);
    let client = loop {
        match options(cfg, role, name).await?.connect(addrs.clone()).await {
            Ok(client) => break client,
            Err(e) => tracing::warn!(error = %e, retry_in = ?delay, "nats not reachable"),
        }
        tokio::select! {
            _ = cancel.cancelled() => return Err(BusError::Cancelled),
            _ = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(Duration::from_secs(5));
    };
    if client.connection_state() == async_nats::connection::State::Connected {
        crate::dependency_metrics::get().bus_connected.set(1);
    }
    let js = jetstream::new(client.clone());
    Ok(Bus { client, js })
}

/// The fleet's streams with this version's settings (file storage, so accepted messages
/// survive), each with `replicas` replicas.
fn stream_configs(replicas: usize) -> Vec<stream::Config> {
    let day = Duration::from_secs(24 * 3600);
    let streams = [
        // Inbound is the sessions' mailbox: a work queue (a message leaves once its turn is
        // answered) that runners read per session subject with direct gets.
        stream::Config {
            name: subjects::INBOUND_STREAM.into(),
            subjects: vec![subjects::INBOUND_ALL.into()],
            storage: stream::StorageType::File,
            retention: stream::RetentionPolicy::WorkQueue,
            allow_direct: true,
            max_age: 7 * day,
            duplicate_window: Duration::from_secs(120),
            ..Default::default()
        },
        stream::Config {
            name: subjects::OUTBOUND_STREAM.into(),
            subjects: vec![subjects::OUTBOUND_ALL.into()],
            storage: stream::StorageType::File,
            max_age: day,
            duplicate_window: Duration::from_secs(120),
            ..Default::default()
        },
        stream::Config {
            name: subjects::JOBS_STREAM.into(),
            subjects: vec![subjects::JOBS_ALL.into()],
            storage: stream::StorageType::File,
            retention: stream::RetentionPolicy::WorkQueue,
            max_age: 7 * day,
            duplicate_window: Duration::from_secs(120),
            ..Default::default()
        },
    ];
    streams
        .into_iter()
        .map(|c| stream::Config {
            num_replicas: replicas,
            ..c
        })
        .collect()
}

/// Checks that every stream the fleet needs exists with this version's retention; the error
/// says to run `nanobot bus init` otherwise. Roles call this at start; only `bus init` creates
/// or changes streams.
pub async fn verify_streams(js: &jetstream::Context) -> Result<(), BusError> {
    for config in stream_configs(1) {
        let mut existing = js
            .get_stream(&config.name)
            .await
            .map_err(|e| BusError::JetStream {
                op: "check stream",
                cause: format!(
                    "stream {} is missing or unreadable ({e}); create the streams with \
                     `nanobot bus init`",
                    config.name
                ),
            })?;
        let info = existing.info().await.map_err(|e| BusError::JetStream {
            op: "read stream info",
            cause: e.to_string(),
        })?;
        if info.config.retention != config.retention
            || info.config.allow_direct != config.allow_direct
        {
            return Err(BusError::JetStream {
                op: "check stream",
                cause: format!(
                    "stream {} has settings of another version; update it with `nanobot bus init`",
                    config.name
                ),
            });
        }
    }
    js.get_object_store(subjects::PAYLOADS_BUCKET)
        .await
        .map_err(|e| BusError::JetStream {
            op: "check payload store",
            cause: format!(
                "object store {} is missing or unreadable ({e}); create it with `nanobot bus init`",
                subjects::PAYLOADS_BUCKET
            ),
        })?;
    Ok(())
}

/// Creates the fleet's streams and the payload store ([`crate::payloads`]), or updates the
/// streams to this version's settings (idempotent):
/// `nanobot bus init`, also run by `nanobot up`. A fully consumed stream with another
/// retention is recreated; one that still holds work is refused.
pub async fn init_streams(js: &jetstream::Context, replicas: usize) -> Result<(), BusError> {
    for config in stream_configs(replicas) {
        let mut existing =
            js.get_or_create_stream(config.clone())
                .await
                .map_err(|e| BusError::JetStream {
                    op: "create stream",
                    cause: e.to_string(),
                })?;
        let info = existing
            .info()
            .await
            .map_err(|e| BusError::JetStream {
                op: "read stream info",
                cause: e.to_string(),
            })?
            .clone();
        if info.config.retention != config.retention && all_consumed(&mut existing).await {
            // A stream from an older version whose every message was already processed:
            // recreate it with this version's settings.
            tracing::info!(stream = %config.name, "recreating a fully consumed stream with new retention");
            js.delete_stream(&config.name)
                .await
                .map_err(|e| BusError::JetStream {
                    op: "delete stream",
                    cause: e.to_string(),
                })?;
            js.create_stream(config.clone())
                .await
                .map_err(|e| BusError::JetStream {
                    op: "create stream",
                    cause: e.to_string(),
                })?;
            continue;
        }
        if info.config.retention != config.retention {
            return Err(BusError::JetStream {
                op: "check stream",
                cause: format!(
                    "stream {} exists with retention {:?} but this version needs {:?}; \
                     drain it and delete it (`nats stream rm {}`) so it is recreated",
                    config.name, info.config.retention, config.retention, config.name
                ),
            });
        }
        if info.config.allow_direct != config.allow_direct
            || info.config.num_replicas != config.num_replicas
        {
            js.update_stream(config)
                .await
                .map_err(|e| BusError::JetStream {
                    op: "update stream",
                    cause: e.to_string(),
                })?;
        }
    }
    if js
        .get_object_store(subjects::PAYLOADS_BUCKET)
        .await
        .is_err()
    {
        js.create_object_store(crate::payloads::bucket_config(replicas))
            .await
            .map_err(|e| BusError::JetStream {
                op: "create payload store",
                cause: e.to_string(),
            })?;
    }
    crate::bot_registry::init(js, replicas)
        .await
        .map_err(|e| BusError::JetStream {
            op: "create the bot registry",
            cause: format!("{e:#}"),
        })?;
    Ok(())
}

/// Whether no consumer of `stream` has anything left to process (and, without consumers,
/// whether the stream is empty).
async fn all_consumed(stream: &mut jetstream::stream::Stream) -> bool {
    use futures::StreamExt as _;
    let mut consumers = stream.consumers();
    let mut any = false;
    while let Some(c) = consumers.next().await {
        let Ok(c) = c else { return false };
        any = true;
        if c.num_pending > 0 || c.num_ack_pending > 0 {
            return false;
        }
    }
    any || stream.info().await.is_ok_and(|i| i.state.messages == 0)
}

/// Returns headers holding the current trace context and, when given, a de-duplication id.
pub fn headers(msg_id: Option<&str>) -> HeaderMap {
    let mut headers = HeaderMap::new();
    telemetry::inject_current(&mut headers);
    if let Some(id) = msg_id {
        headers.insert(MSG_ID_HEADER, id);
    }
    headers
}

/// Publishes `msg` to JetStream and waits for the stream's ack. `msg_id` de-duplicates
/// re-publishes within the stream's duplicate window; with it, transient errors (a stream
/// leader being elected, a reconnection) are retried for up to [`retry::RETRY_FOR`], and
/// the message is still stored once ([`retry`]). Without it, one attempt.
pub async fn publish<M: prost::Message>(
    js: &jetstream::Context,
    subject: String,
    msg_id: Option<&str>,
    msg: &M,
) -> Result<(), BusError> {
    let payload = Bytes::from(msg.encode_to_vec());
    let retry_for = match msg_id {
        Some(_) => retry::RETRY_FOR,
        None => Duration::ZERO,
    };
    retry::publish_acked(js, &subject, headers(msg_id), payload, retry_for)
        .await
        .map_err(|e| BusError::JetStream {
            op: "publish",
            cause: e.to_string(),
        })
}

/// Failure of a typed request.
#[derive(Debug, thiserror::Error)]
pub enum RpcError {
    /// Nobody serves the subject.
    #[error("no service answers {subject}")]
    NoResponders { subject: String },
    /// The deadline passed.
    #[error("{subject} did not answer within {timeout:?}")]
    Timeout { subject: String, timeout: Duration },
    /// The service answered with an error.
    #[error("{subject} failed ({}): {message}", code.as_str())]
    Service {
        subject: String,
        code: ErrorCode,
        message: String,
    },
    /// The reply could not be decoded, or the transport failed.
    #[error("{subject}: {cause}")]
    Transport { subject: String, cause: String },
}

/// Sends a typed request and decodes its typed reply, carrying the trace context.
pub async fn request<R: Rpc>(
    client: &Client,
    msg: &R,
    timeout: Duration,
) -> Result<R::Response, RpcError> {
    let subject = msg.subject();
    let request = async_nats::Request::new()
        .payload(Bytes::from(msg.encode_to_vec()))
        .headers(headers(None))
        .timeout(Some(timeout));
    let reply = client
        .send_request(subject.clone(), request)
        .await
        .map_err(|e| {
            use async_nats::RequestErrorKind as K;
            match e.kind() {
                K::NoResponders => RpcError::NoResponders {
                    subject: subject.clone(),
                },
                K::TimedOut => RpcError::Timeout {
                    subject: subject.clone(),
                    timeout,
                },
                _ => RpcError::Transport {
                    subject: subject.clone(),
                    cause: e.to_string(),
                },
            }
        })?;
    if let Some(code) = reply
        .headers
        .as_ref()
        .and_then(|h| h.get(ERROR_CODE_HEADER))
    {
        let message = reply
            .headers
            .as_ref()
            .and_then(|h| h.get(ERROR_HEADER))
            .map(|v| v.as_str().to_string())
            .unwrap_or_default();
        return Err(RpcError::Service {
            subject,
            code: ErrorCode::parse(code.as_str()),
            message,
        });
    }
    R::Response::decode(reply.payload).map_err(|e| RpcError::Transport {
        subject,
        cause: e.to_string(),
    })
}

/// Answers a request with a message.
pub async fn reply<M: prost::Message>(
    client: &Client,
    reply_to: Option<async_nats::Subject>,
    msg: &M,
) {
    let Some(reply_to) = reply_to else { return };
    let payload = Bytes::from(msg.encode_to_vec());
    if let Err(e) = client
        .publish_with_headers(reply_to, headers(None), payload)
        .await
    {
        tracing::warn!(error = %e, "failed to send reply");
    }
}

/// Answers a request with an error code and text in headers.
pub async fn reply_error(
    client: &Client,
    reply_to: Option<async_nats::Subject>,
    code: ErrorCode,
    message: &str,
) {
    let Some(reply_to) = reply_to else { return };
    let mut h = headers(None);
    h.insert(ERROR_CODE_HEADER, code.as_str());
    h.insert(ERROR_HEADER, message);
    if let Err(e) = client.publish_with_headers(reply_to, h, Bytes::new()).await {
        tracing::warn!(error = %e, "failed to send error reply");
    }
}
