//! Socket Mode: `apps.connections.open` (app-level token) hands out a WebSocket URL; Slack
//! sends `hello`, then envelopes (`events_api`, `slash_commands`, `interactive`) each carrying
//! an `envelope_id` that must be acknowledged by sending `{"envelope_id": …}` back, and
//! `disconnect` when it wants the client to reconnect (about hourly, and before maintenance).
//!
//! Every gateway replica holds its own connection; Slack gives each event to one of them. An
//! `events_api` envelope is acknowledged after its event was handled ([`receive::handle`]): a
//! replica killed mid-way leaves it unacknowledged and Slack redelivers it (to any
//! connection). Envelopes of other types are acknowledged and ignored. Events of one
//! connection are handled in order.

use std::sync::Arc;
use std::time::Duration;

use futures::{SinkExt as _, StreamExt as _};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

use super::{SlackChannel, receive};
use crate::channels::Inbound;
use crate::channels::backoff::Backoff;
use crate::channels::poison::{self, Failure};

/// A connection silent for this long (Slack pings about every 10 s) is dropped and reopened.
const IDLE: Duration = Duration::from_secs(90);
/// How often the client pings (keeps proxies from closing an idle socket).
const PING: Duration = Duration::from_secs(30);

/// Why a connection ended.
enum Ended {
    Cancelled,
    Reconnect(String),
}

/// Keeps a Socket Mode connection open until `cancel`, reconnecting with backoff.
pub(super) async fn run(
    ch: Arc<SlackChannel>,
    inbound: Inbound,
    cancel: CancellationToken,
) -> anyhow::Result<()> {
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(30));
    let no_args = json!({});
    loop {
        let opened = tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            opened = ch.app_api.call("apps.connections.open", &no_args) => opened,
        };
        let error = match opened {
            Ok(answer) => match answer["url"].as_str() {
                Some(url) => match connection(&ch, &inbound, url, &cancel).await {
                    Ok(Ended::Cancelled) => return Ok(()),
                    Ok(Ended::Reconnect(reason)) => {
                        tracing::info!(bot = %ch.bot_id, reason = %reason, "slack socket mode reconnecting");
                        backoff.reset();
                        continue;
                    }
                    Err(e) => format!("{e:#}"),
                },
                None => "apps.connections.open returned no url".to_string(),
            },
            Err(e) if e.is_bad_credentials() || !e.is_transient() => {
                anyhow::bail!(
                    "slack refused channels.slack.appToken of bot {} ({e}); Socket Mode needs an app-level token with connections:write",
                    ch.bot_id
                );
            }
            Err(e) => e.to_string(),
        };
        tracing::warn!(bot = %ch.bot_id, error = %error, retry_in = ?backoff.current(), "slack socket mode connection failed");
        tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            _ = backoff.sleep() => {}
        }
    }
}

/// Serves one connection until Slack asks to reconnect, the socket drops, or `cancel`.
async fn connection(
    ch: &SlackChannel,
    inbound: &Inbound,
    url: &str,
    cancel: &CancellationToken,
) -> anyhow::Result<Ended> {
    let (ws, _) =
        tokio_tungstenite::connect_async_tls_with_config(url, None, false, Some(tls())).await?;
    tracing::info!(bot = %ch.bot_id, "slack socket mode connected");
    let (mut tx, mut rx) = ws.split();
    let mut ping = tokio::time::interval(PING);
    ping.tick().await;
    loop {
        let next = tokio::select! {
            _ = cancel.cancelled() => {
                let _ = tx.send(Message::Close(None)).await;
                return Ok(Ended::Cancelled);
            }
            _ = ping.tick() => {
                tx.send(Message::Ping(Vec::new().into())).await?;
                continue;
            }
            next = tokio::time::timeout(IDLE, rx.next()) => next,
        };
        let frame = match next {
            Err(_) => return Ok(Ended::Reconnect("connection idle".into())),
            Ok(None) => return Ok(Ended::Reconnect("connection closed".into())),
            Ok(Some(frame)) => frame?,
        };
        let text = match frame {
            Message::Text(t) => t,
            Message::Close(_) => return Ok(Ended::Reconnect("closed by Slack".into())),
            _ => continue,
        };
        let Ok(envelope) = serde_json::from_str::<Value>(&text) else {
            tracing::warn!(bot = %ch.bot_id, "undecodable slack socket message ignored");
            continue;
        };
        match envelope["type"].as_str().unwrap_or_default() {
            "hello" => continue,
            "disconnect" => {
                let reason = envelope["reason"].as_str().unwrap_or("disconnect");
                return Ok(Ended::Reconnect(format!("disconnect: {reason}")));
            }
            _ => {}
        }
        let Some(envelope_id) = envelope["envelope_id"].as_str() else {
            continue;
        };
        if envelope["type"] == "events_api" {
            let payload = &envelope["payload"];
            let event_id = payload["event_id"].as_str().unwrap_or(envelope_id);
            match poison::guard(receive::handle(ch, inbound, event_id, &payload["event"])).await {
                Ok(()) => {}
                Err(Failure::Poison(why)) => {
                    tracing::error!(bot = %ch.bot_id, event_id, error = %why, "slack event cannot be handled; acknowledged and skipped");
                }
                Err(Failure::Retry(e)) => {
                    // Not acknowledged: Slack redelivers it.
                    tracing::warn!(bot = %ch.bot_id, event_id, error = format!("{e:#}"), "slack event not handled; Slack will deliver it again");
                    continue;
                }
            }
        }
        let ack = json!({"envelope_id": envelope_id}).to_string();
        tx.send(Message::Text(ack.into())).await?;
    }
}

/// TLS for `wss://` with the webpki roots through ring (rustls has more than one provider in
/// this build, so none is picked implicitly).
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
