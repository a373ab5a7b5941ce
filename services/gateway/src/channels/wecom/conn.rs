//! The long connection under a lease: every replica tries to take the bot's
//! [`keys::channel_connection`]; the holder connects, subscribes and keeps the connection
//! (heartbeats, reconnects with backoff) until it loses the lease or shuts down; the others
//! wait. Callbacks are handed in order to [`receive`] on their own task, so the reader keeps
//! matching WeCom's answers while a message is handled.
//!
//! SIGKILL: the killed holder's socket is closed by the kernel (WeCom drops the subscription)
//! and its lease expires; another replica connects within `leaseSecs`. Callbacks WeCom pushed
//! to the dead connection and not yet published are lost (WeCom does not push them again to a
//! new connection): the cost of one connection per bot.

use std::sync::Arc;
use std::time::Duration;

use futures::{SinkExt as _, StreamExt as _};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_util::sync::CancellationToken;

use nanobot_proto::keys;
use nanobot_runtime::lease::Lease;

use super::frame::{self, Frame};
use super::link::Link;
use super::{CHANNEL, WeComChannel, receive};
use crate::channels::Inbound;
use crate::channels::backoff::Backoff;

/// Heartbeat period (0.3.5's SDK: 30 s).
const HEARTBEAT: Duration = Duration::from_secs(30);
/// Heartbeats left unanswered before the connection is given up.
const MAX_MISSED: u32 = 2;
/// Longest wait for the connection and for the subscribe answer.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// First reconnect delay, doubled up to [`MAX_BACKOFF`] (0.3.5's SDK: 1 s to 30 s).
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// Longest reconnect delay.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Wait before trying again after WeCom refused the credentials.
const REJECTED_PAUSE: Duration = Duration::from_secs(60);

/// Connects while this replica holds the bot's lease; otherwise keeps trying to take it.
pub(super) async fn run(
    ch: Arc<WeComChannel>,
    inbound: Inbound,
    cancel: CancellationToken,
) -> anyhow::Result<()> {
    let key = keys::channel_connection(&ch.bot_id, CHANNEL, &ch.conn_id);
    let fence_key = keys::channel_connection_fence(&ch.bot_id, CHANNEL, &ch.conn_id);
    let retry = (ch.leases.ttl() / 4).min(Duration::from_secs(1));
    loop {
        let mut pause = retry;
        match ch.leases.try_acquire(&key, &fence_key).await {
            Ok(Some(lease)) => {
                tracing::info!(bot = %ch.bot_id, wecom_bot_id = %ch.cfg.bot_id, fence = lease.fence().counter(), "wecom connection lease taken");
                if hold(&ch, &inbound, &lease, &cancel).await {
                    pause = REJECTED_PAUSE;
                }
                let lost = !lease.is_held();
                lease.release().await;
                tracing::info!(bot = %ch.bot_id, lost, "wecom connection released");
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(bot = %ch.bot_id, error = %e, "wecom connection lease unavailable")
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            _ = tokio::time::sleep(pause) => {}
        }
    }
}

/// How a connection ended.
enum Ended {
    /// Shutdown or the lease was lost.
    Stopped,
    /// WeCom refused the bot id or secret.
    Rejected(String),
    /// The connection failed or closed; `subscribed` when it had been working.
    Dropped { subscribed: bool, why: String },
}

/// Keeps a connection open while the lease is held, reconnecting with backoff; true when
/// WeCom refused the credentials.
async fn hold(
    ch: &Arc<WeComChannel>,
    inbound: &Inbound,
    lease: &Lease,
    cancel: &CancellationToken,
) -> bool {
    let mut backoff = Backoff::new(FIRST_BACKOFF, MAX_BACKOFF);
    loop {
        match session(ch, inbound, lease, cancel).await {
            Ended::Stopped => return false,
            Ended::Rejected(why) => {
                tracing::error!(channel = CHANNEL, bot = %ch.bot_id, wecom_bot_id = %ch.cfg.bot_id, reason = %why, "wecom rejected the bot id or secret: check channels.wecom.botId and secret");
                return true;
            }
            Ended::Dropped { subscribed, why } => {
                if subscribed {
                    backoff.reset();
                }
                tracing::warn!(bot = %ch.bot_id, reason = %why, retry_in = ?backoff.current(), "wecom connection lost; reconnecting");
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return false,
            _ = lease.lost().cancelled() => return false,
            _ = backoff.sleep() => {}
        }
    }
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Opens the socket and subscribes; the answer's error when refused.
async fn open(ch: &WeComChannel) -> Result<Socket, Ended> {
    let dropped = |why: String| Ended::Dropped {
        subscribed: false,
        why,
    };
    let connect = tokio_tungstenite::connect_async(ch.cfg.ws_url.as_str());
    let (mut ws, _) = match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
        Ok(Ok(ws)) => ws,
        Ok(Err(e)) => return Err(dropped(format!("connect: {e}"))),
        Err(_) => return Err(dropped("connect: timed out".into())),
    };
    let sub_id = format!("{}_{}", frame::SUBSCRIBE, uuid::Uuid::new_v4().simple());
    let body = frame::subscribe(&ch.cfg.bot_id, &ch.cfg.secret);
    let request = frame::request(frame::SUBSCRIBE, &sub_id, Some(body));
    if let Err(e) = ws.send(WsMessage::text(request)).await {
        return Err(dropped(format!("subscribe: {e}")));
    }
    let answer = tokio::time::timeout(CONNECT_TIMEOUT, async {
        while let Some(msg) = ws.next().await {
            let Ok(WsMessage::Text(text)) = msg else {
                if msg.is_err() || matches!(msg, Ok(WsMessage::Close(_))) {
                    return None;
                }
                continue;
            };
            match Frame::parse(&text) {
                Ok(f) if f.headers.req_id == sub_id => return Some(f),
                _ => continue,
            }
        }
        None
    })
    .await;
    match answer {
        Ok(Some(f)) if f.errcode == Some(0) => Ok(ws),
        Ok(Some(f)) => Err(Ended::Rejected(format!(
            "errcode {}, {}",
            f.errcode.unwrap_or(-1),
            f.errmsg
        ))),
        Ok(None) => Err(dropped("closed before the subscribe answer".into())),
        Err(_) => Err(dropped("no subscribe answer".into())),
    }
}

/// Runs one connection until shutdown, the lease is lost, or it fails.
async fn session(
    ch: &Arc<WeComChannel>,
    inbound: &Inbound,
    lease: &Lease,
    cancel: &CancellationToken,
) -> Ended {
    let ws = match open(ch).await {
        Ok(ws) => ws,
        Err(ended) => return ended,
    };
    tracing::info!(bot = %ch.bot_id, wecom_bot_id = %ch.cfg.bot_id, "wecom connection subscribed");
    let (mut write, mut read) = ws.split();
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<String>();
    let link = Arc::new(Link::new(out_tx));
    ch.set_link(Some(link.clone()));
    let (cb_tx, cb_rx) = mpsc::unbounded_channel::<Frame>();
    let handler = tokio::spawn(receive::handle_all(
        ch.clone(),
        inbound.clone(),
        link.clone(),
        cb_rx,
        cancel.clone(),
    ));
    let mut heartbeat =
        tokio::time::interval_at(tokio::time::Instant::now() + HEARTBEAT, HEARTBEAT);
    let mut missed = 0u32;
    let ended = loop {
        tokio::select! {
            _ = cancel.cancelled() => break Ended::Stopped,
            _ = lease.lost().cancelled() => break Ended::Stopped,
            out = out_rx.recv() => {
                let Some(out) = out else { continue };
                if let Err(e) = write.send(WsMessage::text(out)).await {
                    break Ended::Dropped { subscribed: true, why: format!("write: {e}") };
                }
            }
            _ = heartbeat.tick() => {
                if missed >= MAX_MISSED {
                    break Ended::Dropped { subscribed: true, why: format!("{missed} heartbeats unanswered") };
                }
                missed += 1;
                let ping = frame::request(frame::PING, &format!("ping_{}", uuid::Uuid::new_v4().simple()), None);
                if let Err(e) = write.send(WsMessage::text(ping)).await {
                    break Ended::Dropped { subscribed: true, why: format!("heartbeat: {e}") };
                }
            }
            msg = read.next() => {
                let text = match msg {
                    Some(Ok(WsMessage::Text(text))) => text,
                    Some(Ok(WsMessage::Close(close))) => {
                        break Ended::Dropped { subscribed: true, why: format!("closed by WeCom: {close:?}") };
                    }
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => break Ended::Dropped { subscribed: true, why: format!("read: {e}") },
                    None => break Ended::Dropped { subscribed: true, why: "closed".into() },
                };
                let Ok(f) = Frame::parse(&text) else {
                    tracing::warn!(bot = %ch.bot_id, bytes = text.len(), "unreadable wecom frame ignored");
                    continue;
                };
                if f.headers.req_id.starts_with("ping_") && f.cmd.is_empty() {
                    missed = 0;
                    continue;
                }
                if f.event_type() == Some("disconnected_event") {
                    break Ended::Dropped { subscribed: true, why: "another connection of the bot took over".into() };
                }
                if f.cmd == frame::MSG_CALLBACK || f.cmd == frame::EVENT_CALLBACK {
                    let _ = cb_tx.send(f);
                } else if !link.answer(f) {
                    tracing::debug!(bot = %ch.bot_id, "wecom frame nobody waits for ignored");
                }
            }
        }
    };
    ch.set_link(None);
    drop(cb_tx);
    if matches!(ended, Ended::Stopped) && cancel.is_cancelled() {
        handler.abort();
    }
    // A normal close lets WeCom drop the subscription at once; bounded so a dead link cannot
    // hold the lease's release.
    let _ = tokio::time::timeout(Duration::from_secs(1), write.send(WsMessage::Close(None))).await;
    ended
}
