//! Stream mode under a lease: every replica tries to take [`keys::channel_connection`] of the
//! app; the holder asks for a ticket (`connections/open`), connects to `{endpoint}?ticket=…`
//! and serves frames — JSON with `specVersion`, `type` (`SYSTEM`, `EVENT`, `CALLBACK`),
//! `headers` (`messageId`, `topic`, …) and `data` (a JSON string). Each frame is answered by
//! an ACK carrying its `messageId`: a SYSTEM `ping` with its own data, a robot message
//! (`CALLBACK` on [`BOT_MESSAGE_TOPIC`]) once it was handled ([`receive::handle`]). A SYSTEM
//! `disconnect` (DingTalk moving the connection) and a dropped socket reconnect at once, then
//! with backoff (to 30 s) while opening fails; credentials DingTalk refuses end the channel
//! with one error.
//!
//! A robot message is acknowledged only after its inbound message was published and marked
//! done, so one whose holder is SIGKILLed mid-way is not acknowledged and DingTalk delivers it
//! again (to the next holder), where the done-mark or the inbound id `dingtalk:{msgId}` (the
//! stream's de-duplication) keeps it from running twice.

use std::sync::Arc;
use std::time::Duration;

use futures::{SinkExt as _, StreamExt as _};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

use nanobot_proto::keys;
use nanobot_runtime::lease::Lease;

use super::api::{ApiError, BOT_MESSAGE_TOPIC};
use super::{CHANNEL, DingTalkChannel, receive};
use crate::channels::Inbound;
use crate::channels::backoff::Backoff;
use crate::channels::poison::{self, Failure};

/// A connection silent this long (pings included) is dropped and reopened.
const IDLE: Duration = Duration::from_secs(120);
/// How often the client pings the socket.
const PING: Duration = Duration::from_secs(30);

/// Why a connection ended.
enum Ended {
    /// Shutdown or the lease was lost.
    Stop,
    /// DingTalk asked to reconnect, or the socket dropped.
    Reconnect(String),
}

/// Holds the app's Stream connection while this replica holds its lease.
pub(super) async fn run(
    ch: Arc<DingTalkChannel>,
    inbound: Inbound,
    cancel: CancellationToken,
) -> anyhow::Result<()> {
    let key = keys::channel_connection(&ch.bot_id, CHANNEL, &ch.app_id);
    let fence_key = keys::channel_connection_fence(&ch.bot_id, CHANNEL, &ch.app_id);
    let retry = (ch.leases.ttl() / 4).min(Duration::from_secs(1));
    loop {
        match ch.leases.try_acquire(&key, &fence_key).await {
            Ok(Some(lease)) => {
                tracing::info!(bot = %ch.bot_id, app_id = %ch.app_id, fence = lease.fence().counter(), "dingtalk stream lease taken");
                let served = serve(&ch, &inbound, &lease, &cancel).await;
                let lost = !lease.is_held();
                lease.release().await;
                tracing::info!(bot = %ch.bot_id, app_id = %ch.app_id, lost, "dingtalk stream connection closed");
                served?;
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(bot = %ch.bot_id, error = %e, "dingtalk stream lease unavailable")
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            _ = tokio::time::sleep(retry) => {}
        }
    }
}

/// Connects and reconnects while the lease is held; an error when the credentials are refused.
async fn serve(
    ch: &DingTalkChannel,
    inbound: &Inbound,
    lease: &Lease,
    cancel: &CancellationToken,
) -> anyhow::Result<()> {
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(30));
    loop {
        let opened = tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            _ = lease.lost().cancelled() => return Ok(()),
            opened = ch.api.open_connection() => opened,
        };
        let error = match opened {
            Ok((endpoint, ticket)) => {
                match connection(ch, inbound, &endpoint, &ticket, lease, cancel).await {
                    Ok(Ended::Stop) => return Ok(()),
                    Ok(Ended::Reconnect(reason)) => {
                        tracing::info!(bot = %ch.bot_id, reason = %reason, "dingtalk stream reconnecting");
                        backoff.reset();
                        continue;
                    }
                    Err(e) => format!("{e:#}"),
                }
            }
            Err(ApiError::Rejected(why)) => anyhow::bail!(
                "dingtalk refused the clientId/clientSecret of bot {} (app {}): {why}; check channels.dingtalk",
                ch.bot_id,
                ch.cfg.client_id
            ),
            Err(e) => e.to_string(),
        };
        tracing::warn!(bot = %ch.bot_id, error = %error, retry_in = ?backoff.current(), "dingtalk stream connection failed");
        tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            _ = lease.lost().cancelled() => return Ok(()),
            _ = backoff.sleep() => {}
        }
    }
}

/// Returns `{endpoint}?ticket={ticket}` (the ticket form-encoded; never logged).
fn ticket_url(endpoint: &str, ticket: &str) -> String {
    let sep = if endpoint.contains('?') { '&' } else { '?' };
    let ticket: String = url::form_urlencoded::byte_serialize(ticket.as_bytes()).collect();
    format!("{endpoint}{sep}ticket={ticket}")
}

/// Serves one connection until DingTalk asks to reconnect, the socket drops, or stop.
async fn connection(
    ch: &DingTalkChannel,
    inbound: &Inbound,
    endpoint: &str,
    ticket: &str,
    lease: &Lease,
    cancel: &CancellationToken,
) -> anyhow::Result<Ended> {
    let url = ticket_url(endpoint, ticket);
    let (ws, _) = tokio_tungstenite::connect_async_tls_with_config(url, None, false, Some(tls()))
        .await
        .map_err(|e| anyhow::anyhow!("connect to the stream endpoint: {e}"))?;
    tracing::info!(bot = %ch.bot_id, "dingtalk stream connected");
    let (mut tx, mut rx) = ws.split();
    let mut ping = tokio::time::interval(PING);
    ping.tick().await;
    loop {
        let next = tokio::select! {
            _ = cancel.cancelled() => {
                let _ = tx.send(Message::Close(None)).await;
                return Ok(Ended::Stop);
            }
            _ = lease.lost().cancelled() => {
                let _ = tx.send(Message::Close(None)).await;
                return Ok(Ended::Stop);
            }
            _ = ping.tick() => {
                tx.send(Message::Ping(Vec::new().into())).await?;
                continue;
            }
            next = tokio::time::timeout(IDLE, rx.next()) => next,
        };
        let text = match next {
            Err(_) => return Ok(Ended::Reconnect("connection idle".into())),
            Ok(None) => return Ok(Ended::Reconnect("connection closed".into())),
            Ok(Some(frame)) => match frame? {
                Message::Text(t) => t,
                Message::Close(_) => return Ok(Ended::Reconnect("closed by DingTalk".into())),
                _ => continue,
            },
        };
        let Ok(frame) = serde_json::from_str::<Value>(&text) else {
            tracing::warn!(bot = %ch.bot_id, bytes = text.len(), "undecodable dingtalk stream frame ignored");
            continue;
        };
        let Some(ack) = answer(ch, inbound, &frame, lease, cancel).await else {
            return Ok(Ended::Stop);
        };
        if let Some(ack) = ack {
            tx.send(Message::Text(ack.to_string().into())).await?;
        }
        if frame["type"] == "SYSTEM" && frame["headers"]["topic"] == "disconnect" {
            let _ = tx.send(Message::Close(None)).await;
            return Ok(Ended::Reconnect("disconnect asked by DingTalk".into()));
        }
    }
}

/// Returns the ACK of one frame (`Some(None)`: no ACK), or `None` when stop came first.
async fn answer(
    ch: &DingTalkChannel,
    inbound: &Inbound,
    frame: &Value,
    lease: &Lease,
    cancel: &CancellationToken,
) -> Option<Option<Value>> {
    let headers = &frame["headers"];
    let message_id = headers["messageId"].as_str().unwrap_or_default();
    let data = frame["data"].as_str().unwrap_or("{}");
    match (frame["type"].as_str(), headers["topic"].as_str()) {
        (Some("SYSTEM"), _) => Some(Some(ack(message_id, "OK", data))),
        (Some("CALLBACK"), Some(BOT_MESSAGE_TOPIC)) => {
            let Ok(message) = serde_json::from_str::<Value>(data) else {
                tracing::warn!(bot = %ch.bot_id, message_id, "dingtalk robot message undecodable; acknowledged and skipped");
                return Some(Some(ack(message_id, "OK", r#"{"response":"Error"}"#)));
            };
            if !handle(ch, inbound, message_id, &message, lease, cancel).await {
                return None;
            }
            Some(Some(ack(message_id, "OK", r#"{"response":"OK"}"#)))
        }
        (kind, topic) => {
            tracing::debug!(bot = %ch.bot_id, ?kind, ?topic, "dingtalk stream frame of another kind acknowledged");
            (!message_id.is_empty()).then(|| Some(ack(message_id, "OK", data)))
        }
    }
}

/// An ACK frame (code 200) for `message_id` carrying `data`.
fn ack(message_id: &str, message: &str, data: &str) -> Value {
    json!({
        "code": 200,
        "headers": {"contentType": "application/json", "messageId": message_id},
        "message": message,
        "data": data,
    })
}

/// Handles one robot message, retrying until handled; false when stop came first (not
/// acknowledged: DingTalk delivers it again).
async fn handle(
    ch: &DingTalkChannel,
    inbound: &Inbound,
    message_id: &str,
    message: &Value,
    lease: &Lease,
    cancel: &CancellationToken,
) -> bool {
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(10));
    loop {
        match poison::guard(receive::handle(ch, inbound, message)).await {
            Ok(()) => return true,
            Err(Failure::Poison(why)) => {
                tracing::error!(bot = %ch.bot_id, message_id, error = %why, "dingtalk message cannot be handled; skipped");
                return true;
            }
            Err(Failure::Retry(e)) => {
                tracing::warn!(bot = %ch.bot_id, message_id, error = format!("{e:#}"), retry_in = ?backoff.current(), "dingtalk message not handled yet");
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return false,
            _ = lease.lost().cancelled() => return false,
            _ = backoff.sleep() => {}
        }
    }
}

/// TLS for `wss://` with the webpki roots through ring.
fn tls() -> tokio_tungstenite::Connector {
    let roots = rustls::RootCertStore::from_iter(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("ring supports the default TLS versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    tokio_tungstenite::Connector::Rustls(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ticket_is_form_encoded_onto_the_endpoint() {
        assert_eq!(
            ticket_url(
                "wss://wss-open-connection.dingtalk.com:443/connect",
                "a+b/c="
            ),
            "wss://wss-open-connection.dingtalk.com:443/connect?ticket=a%2Bb%2Fc%3D"
        );
        assert_eq!(ticket_url("ws://h/c?x=1", "t"), "ws://h/c?x=1&ticket=t");
    }

    #[test]
    fn an_ack_carries_the_frames_message_id_and_data() {
        let a = ack("m-1", "OK", r#"{"opaque":"钉钉"}"#);
        assert_eq!(a["code"], 200);
        assert_eq!(a["headers"]["messageId"], "m-1");
        assert_eq!(a["data"], r#"{"opaque":"钉钉"}"#);
    }
}
