//! Replies larger than the broker's message limit. NATS refuses a message over `max_payload`
//! (1 MB by default), and a reply that can never be published would wedge its session. So an
//! outbound message whose encoding would not fit is published with its text moved into the
//! JetStream object store [`subjects::PAYLOADS_BUCKET`] (chunked, replicated like the streams)
//! under its delivery id, and `content_ref` naming it; readers call [`resolve`] after decoding.
//! A redone publish overwrites the object with the same text, so it stays idempotent.

use async_nats::jetstream::{self, object_store};
use tokio::io::AsyncReadExt as _;

use nanobot_proto::{OutboundMessage, subjects};

use crate::bus::{self, BusError};

/// Room left under the broker's limit for headers and the message's other fields.
const HEADROOM: usize = 64 * 1024;
/// How long a stored reply is kept (as long as the outbound stream keeps messages).
pub const MAX_AGE: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// Returns the object store config of the fleet, with `replicas` replicas.
pub fn bucket_config(replicas: usize) -> object_store::Config {
    object_store::Config {
        bucket: subjects::PAYLOADS_BUCKET.into(),
        description: Some("outbound contents over the broker's message limit".into()),
        max_age: MAX_AGE,
        storage: jetstream::stream::StorageType::File,
        num_replicas: replicas,
        ..Default::default()
    }
}

/// Publishes `msg` on its chat's subject with its delivery id, moving its content into the
/// payload store first when it would not fit in one broker message.
pub async fn publish_outbound(
    js: &jetstream::Context,
    msg: &OutboundMessage,
) -> Result<(), BusError> {
    let subject = subjects::outbound(&msg.bot, &msg.channel, &msg.chat_id);
    let limit = js.client().server_info().max_payload;
    if limit == 0 || prost::Message::encoded_len(msg) + HEADROOM <= limit {
        return bus::publish(js, subject, Some(&msg.id), msg).await;
    }
    store(js, &msg.id, msg.content.clone().into_bytes()).await?;
    tracing::info!(delivery_id = %msg.id, bytes = msg.content.len(), "large reply stored in the payload store");
    let reference = OutboundMessage {
        content: String::new(),
        content_ref: msg.id.clone(),
        ..msg.clone()
    };
    bus::publish(js, subject, Some(&msg.id), &reference).await
}

/// Stores `bytes` under `name` in the payload store.
async fn store(js: &jetstream::Context, name: &str, bytes: Vec<u8>) -> Result<(), BusError> {
    let store = js
        .get_object_store(subjects::PAYLOADS_BUCKET)
        .await
        .map_err(|e| store_error("open payload store", e))?;
    let mut reader = std::io::Cursor::new(bytes);
    store
        .put(name, &mut reader)
        .await
        .map_err(|e| store_error("store a large reply", e))?;
    Ok(())
}

/// Loads the content of a message published by [`publish_outbound`] with its text stored
/// aside; a message carrying its content is left as it is.
pub async fn resolve(js: &jetstream::Context, msg: &mut OutboundMessage) -> Result<(), BusError> {
    if msg.content_ref.is_empty() {
        return Ok(());
    }
    let store = js
        .get_object_store(subjects::PAYLOADS_BUCKET)
        .await
        .map_err(|e| store_error("open payload store", e))?;
    let mut object = store
        .get(msg.content_ref.as_str())
        .await
        .map_err(|e| store_error("read a large reply", e))?;
    let mut bytes = Vec::new();
    object
        .read_to_end(&mut bytes)
        .await
        .map_err(|e| store_error("read a large reply", e))?;
    msg.content = String::from_utf8(bytes).map_err(|e| store_error("decode a large reply", e))?;
    msg.content_ref.clear();
    Ok(())
}

fn store_error(op: &'static str, e: impl std::fmt::Display) -> BusError {
    BusError::JetStream {
        op,
        cause: e.to_string(),
    }
}
