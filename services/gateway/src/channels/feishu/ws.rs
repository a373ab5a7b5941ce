//! The long connection under a lease, as 0.3.5's (lark-oapi's) client: every replica tries to
//! take [`keys::channel_connection`] of the app; the holder asks `POST {root}/callback/ws/endpoint`
//! (App ID and Secret in the body) for a WebSocket URL, connects, pings every `PingInterval`
//! seconds (a control frame with the URL's `service_id`; the pong may carry new settings),
//! reassembles split data frames and acknowledges each event after it was handled. A dropped or
//! silent connection is opened again with backoff while the lease is held.
//!
//! SIGKILL: the killed holder's socket is closed by the kernel and its lease expires; another
//! replica connects within `leaseSecs`. An event handled but not yet acknowledged when the
//! holder died is sent again by Feishu and found done in [`keys::channel_event`] (or dropped by
//! the stream's de-duplication): never a second inbound message. One received and not yet
//! published is redelivered by Feishu (it redelivers unacknowledged events).
//!
//! [`keys::channel_event`]: nanobot_proto::keys::channel_event

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{SinkExt as _, StreamExt as _};
use prost::Message as _;
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

use nanobot_proto::keys;
use nanobot_runtime::lease::Lease;

use super::frame::{CONTROL, DATA, Frame, Parts};
use super::{CHANNEL, FeishuChannel, receive};
use crate::channels::Inbound;
use crate::channels::backoff::Backoff;
use crate::channels::media;
use crate::channels::poison::{self, Failure};

/// Ping interval until Feishu says otherwise (lark-oapi's default, 2 minutes).
const DEFAULT_PING: Duration = Duration::from_secs(120);

/// Why a connection ended.
enum Ended {
    /// Shutdown, or the lease was lost: do not reconnect under it.
    Stop,
    /// Reconnect (dropped, closed or silent).
    Reconnect(String),
}

/// Connects while this replica holds the app's lease; otherwise keeps trying to take it.
pub(super) async fn run(
    ch: Arc<FeishuChannel>,
    inbound: Inbound,
    cancel: CancellationToken,
) -> anyhow::Result<()> {
    let app = media::safe_id(&ch.cfg.app_id);
    let key = keys::channel_connection(&ch.bot_id, CHANNEL, &app);
    let fence_key = keys::channel_connection_fence(&ch.bot_id, CHANNEL, &app);
    let retry = (ch.leases.ttl() / 4).min(Duration::from_secs(1));
    loop {
        match ch.leases.try_acquire(&key, &fence_key).await {
            Ok(Some(lease)) => {
                tracing::info!(bot = %ch.bot_id, app_id = %ch.cfg.app_id, fence = lease.fence().counter(), "feishu long connection lease taken");
                hold(&ch, &inbound, &lease, &cancel).await;
                let lost = !lease.is_held();
                lease.release().await;
                tracing::info!(bot = %ch.bot_id, lost, "feishu long connection closed");
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(bot = %ch.bot_id, error = %e, "feishu long connection lease unavailable")
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            _ = tokio::time::sleep(retry) => {}
        }
    }
}

/// Keeps a connection open while the lease is held, reconnecting with backoff.
async fn hold(ch: &FeishuChannel, inbound: &Inbound, lease: &Lease, cancel: &CancellationToken) {
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(30));
    loop {
        let error = match endpoint(ch).await {
            Ok((url, ping)) => match connection(ch, inbound, &url, ping, lease, cancel).await {
                Ok(Ended::Stop) => return,
                Ok(Ended::Reconnect(reason)) => {
                    tracing::info!(bot = %ch.bot_id, reason = %reason, "feishu long connection reconnecting");
                    backoff.reset();
                    reason
                }
                Err(e) => format!("{e:#}"),
            },
            Err(e) => format!("{e:#}"),
        };
        tracing::warn!(bot = %ch.bot_id, error = %error, retry_in = ?backoff.current(), "feishu long connection failed");
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = lease.lost().cancelled() => return,
            _ = backoff.sleep() => {}
        }
    }
}

/// Asks for a connection URL; returns it and the ping interval.
async fn endpoint(ch: &FeishuChannel) -> anyhow::Result<(String, Duration)> {
    let url = format!("{}/callback/ws/endpoint", ch.api.root());
    let response = reqwest::Client::new()
        .post(url)
        .header("locale", "zh")
        .timeout(Duration::from_secs(30))
        .json(&ch.api.credentials())
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("feishu ws endpoint: {}", e.without_url()))?;
    let status = response.status();
    let body: Value = response
        .json()
        .await
        .map_err(|_| anyhow::anyhow!("feishu ws endpoint: HTTP {status}"))?;
    let code = body["code"].as_i64().unwrap_or(-1);
    anyhow::ensure!(
        code == 0,
        "feishu ws endpoint refused: code {code}: {} (is the long connection enabled for the app?)",
        body["msg"].as_str().unwrap_or_default()
    );
    let url = body["data"]["URL"].as_str().unwrap_or_default().to_string();
    anyhow::ensure!(!url.is_empty(), "feishu ws endpoint returned no URL");
    Ok((
        url,
        ping_of(&body["data"]["ClientConfig"]).unwrap_or(DEFAULT_PING),
    ))
}

fn ping_of(config: &Value) -> Option<Duration> {
    config["PingInterval"]
        .as_u64()
        .filter(|s| *s > 0)
        .map(Duration::from_secs)
}

/// Returns the `service_id` query parameter of a connection URL.
fn service_of(url: &str) -> i32 {
    url::Url::parse(url)
        .ok()
        .and_then(|u| {
            u.query_pairs()
                .find(|(k, _)| k == "service_id")
                .and_then(|(_, v)| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Serves one connection until it drops, goes silent, the lease is lost or `cancel`.
async fn connection(
    ch: &FeishuChannel,
    inbound: &Inbound,
    url: &str,
    mut every: Duration,
    lease: &Lease,
    cancel: &CancellationToken,
) -> anyhow::Result<Ended> {
    let (ws, _) = tokio_tungstenite::connect_async_tls_with_config(url, None, false, Some(tls()))
        .await
        .map_err(|e| anyhow::anyhow!("connect the feishu long connection: {e}"))?;
    let service = service_of(url);
    tracing::info!(bot = %ch.bot_id, service, "feishu long connection connected");
    let (mut tx, mut rx) = ws.split();
    let mut parts = Parts::default();
    let mut ping = tokio::time::interval(every);
    ping.tick().await;
    tx.send(Message::Binary(Frame::ping(service).encode_to_vec().into()))
        .await?;
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
                tx.send(Message::Binary(Frame::ping(service).encode_to_vec().into())).await?;
                continue;
            }
            next = tokio::time::timeout(every * 3, rx.next()) => next,
        };
        let bytes = match next {
            Err(_) => return Ok(Ended::Reconnect("connection silent".into())),
            Ok(None) => return Ok(Ended::Reconnect("connection closed".into())),
            Ok(Some(Err(e))) => return Ok(Ended::Reconnect(format!("connection failed: {e}"))),
            Ok(Some(Ok(Message::Binary(b)))) => b,
            Ok(Some(Ok(Message::Close(_)))) => {
                return Ok(Ended::Reconnect("closed by Feishu".into()));
            }
            Ok(Some(Ok(_))) => continue,
        };
        let Ok(frame) = Frame::decode(bytes.as_ref()) else {
            tracing::warn!(bot = %ch.bot_id, "undecodable feishu frame ignored");
            continue;
        };
        match frame.method {
            CONTROL => {
                if frame.header("type") == Some("pong")
                    && let Some(p) = frame.payload.as_deref()
                    && let Ok(config) = serde_json::from_slice::<Value>(p)
                    && let Some(new) = ping_of(&config)
                    && new != every
                {
                    every = new;
                    ping = tokio::time::interval(every);
                    ping.tick().await;
                }
            }
            DATA => {
                let started = Instant::now();
                let Some(payload) = parts.add(&frame) else {
                    continue;
                };
                if frame.header("type") == Some("event")
                    && !handle(ch, inbound, &payload, lease, cancel).await
                {
                    return Ok(Ended::Stop);
                }
                let ack = frame.ack(started.elapsed().as_millis());
                tx.send(Message::Binary(ack.encode_to_vec().into())).await?;
            }
            _ => {}
        }
    }
}

/// Handles one event payload, retrying until its inbound message is published; false when
/// the lease was lost or shutdown began first (the event stays unacknowledged).
async fn handle(
    ch: &FeishuChannel,
    inbound: &Inbound,
    payload: &[u8],
    lease: &Lease,
    cancel: &CancellationToken,
) -> bool {
    let Ok(doc) = serde_json::from_slice::<Value>(payload) else {
        tracing::warn!(bot = %ch.bot_id, "undecodable feishu event acknowledged and dropped");
        return true;
    };
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(10));
    loop {
        match poison::guard(receive::handle(ch, inbound, &doc)).await {
            Ok(()) => return true,
            Err(Failure::Poison(why)) => {
                tracing::error!(bot = %ch.bot_id, error = %why, "feishu event cannot be handled; acknowledged and skipped");
                return true;
            }
            Err(Failure::Retry(e)) => {
                tracing::warn!(bot = %ch.bot_id, error = format!("{e:#}"), retry_in = ?backoff.current(), "feishu event not handled yet");
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return false,
            _ = lease.lost().cancelled() => return false,
            _ = backoff.sleep() => {}
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_service_id_and_ping_interval_come_from_the_endpoint() {
        assert_eq!(
            service_of(
                "wss://msg-frontier.feishu.cn/ws/v2?fpid=493&device_id=7&service_id=33554678"
            ),
            33554678
        );
        assert_eq!(service_of("ws://127.0.0.1:1/ws"), 0);
        assert_eq!(
            ping_of(&serde_json::json!({"PingInterval": 90, "ReconnectCount": -1})),
            Some(Duration::from_secs(90))
        );
        assert_eq!(ping_of(&serde_json::json!({})), None);
    }
}
