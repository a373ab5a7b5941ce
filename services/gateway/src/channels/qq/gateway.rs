//! The gateway WebSocket under a lease: every replica tries to take
//! [`keys::channel_connection`]`(bot, "qq", appId)`; the holder connects (HELLO, then IDENTIFY
//! or, with a saved session, RESUME; heartbeats at HELLO's interval carrying the last
//! sequence number) and handles each C2C_MESSAGE_CREATE and GROUP_AT_MESSAGE_CREATE; the
//! others wait. A holder that loses the lease drops its connection at once; one SIGKILLed
//! leaves a lease that expires within `leaseSecs` and a saved session the next holder
//! resumes, so QQ replays the events it had not handled (the event record drops any it had).
//! Reconnects back off from 1 s to 60 s; RECONNECT (op 7) resumes at once, INVALID_SESSION
//! (op 9) and the session close codes start a new session.

use std::sync::Arc;
use std::time::Duration;

use futures::{SinkExt as _, StreamExt as _};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

use nanobot_proto::keys;
use nanobot_runtime::lease::Lease;

use super::session::Saved;
use super::{CHANNEL, QqChannel, receive};
use crate::channels::Inbound;
use crate::channels::backoff::Backoff;
use crate::channels::poison::{self, Failure};

/// Gateway opcodes.
mod op {
    pub const DISPATCH: i64 = 0;
    pub const HEARTBEAT: i64 = 1;
    pub const IDENTIFY: i64 = 2;
    pub const RESUME: i64 = 6;
    pub const RECONNECT: i64 = 7;
    pub const INVALID_SESSION: i64 = 9;
    pub const HELLO: i64 = 10;
    pub const HEARTBEAT_ACK: i64 = 11;
}

/// Longest wait for HELLO after connecting.
const HELLO_WAIT: Duration = Duration::from_secs(20);
/// Longest reconnect delay.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// How a connection ended.
#[derive(Debug)]
enum Ended {
    /// Shutdown or the lease was lost.
    Stop,
    /// Connect again at once (RESUME if a session is saved).
    Again,
    /// Connect again after the backoff.
    Failed(String),
}

/// Connects while this replica holds the app's lease; otherwise keeps trying to take it.
pub(super) async fn run(ch: Arc<QqChannel>, inbound: Inbound, cancel: CancellationToken) {
    let key = keys::channel_connection(&ch.bot_id, CHANNEL, &ch.cfg.app_id);
    let fence_key = keys::channel_connection_fence(&ch.bot_id, CHANNEL, &ch.cfg.app_id);
    let retry = (ch.leases.ttl() / 4).min(Duration::from_secs(1));
    loop {
        match ch.leases.try_acquire(&key, &fence_key).await {
            Ok(Some(lease)) => {
                tracing::info!(bot = %ch.bot_id, app_id = %ch.cfg.app_id, fence = lease.fence().counter(), "qq gateway lease taken");
                hold(&ch, &inbound, &lease, &cancel).await;
                let lost = !lease.is_held();
                lease.release().await;
                tracing::info!(bot = %ch.bot_id, app_id = %ch.cfg.app_id, lost, "qq gateway connection closed");
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(bot = %ch.bot_id, error = %e, "qq gateway lease unavailable")
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(retry) => {}
        }
    }
}

/// Connects and reconnects (with backoff) while the lease is held.
async fn hold(ch: &QqChannel, inbound: &Inbound, lease: &Lease, cancel: &CancellationToken) {
    let mut backoff = Backoff::new(Duration::from_secs(1), MAX_BACKOFF);
    loop {
        let mut ready = false;
        let ended = tokio::select! {
            _ = cancel.cancelled() => Ended::Stop,
            _ = lease.lost().cancelled() => Ended::Stop,
            ended = connection(ch, inbound, lease, cancel, &mut ready) => ended.unwrap_or_else(|e| Ended::Failed(format!("{e:#}"))),
        };
        if ready {
            // A session that got going starts the backoff over.
            backoff.reset();
        }
        let wait = match ended {
            Ended::Stop => return,
            Ended::Again => {
                backoff.reset();
                Duration::ZERO
            }
            Ended::Failed(why) => {
                tracing::warn!(bot = %ch.bot_id, error = %why, retry_in = ?backoff.current(), "qq gateway connection failed");
                backoff.next_wait()
            }
        };
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = lease.lost().cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// Runs one WebSocket connection until it ends; `ready` is set once QQ answered READY or
/// RESUMED.
async fn connection(
    ch: &QqChannel,
    inbound: &Inbound,
    lease: &Lease,
    cancel: &CancellationToken,
    ready: &mut bool,
) -> anyhow::Result<Ended> {
    let token = ch.api.token().await?;
    let url = match ch.cfg.gateway_url.is_empty() {
        true => ch.api.gateway_url().await?,
        false => ch.cfg.gateway_url.clone(),
    };
    let (ws, _) = tokio_tungstenite::connect_async_tls_with_config(
        url.as_str(),
        None,
        false,
        Some(super::tls()),
    )
    .await?;
    let (mut tx, mut rx) = ws.split();
    let hello = tokio::time::timeout(HELLO_WAIT, next_payload(&mut rx))
        .await
        .map_err(|_| anyhow::anyhow!("no HELLO within {HELLO_WAIT:?}"))?;
    let hello = match hello {
        Ok(hello) => hello,
        Err(Closed(code)) => return Ok(closed(ch, code).await),
    };
    let Some(hello) = hello.filter(|p| p["op"] == op::HELLO) else {
        anyhow::bail!("the gateway did not start with HELLO");
    };
    let interval = hello["d"]["heartbeat_interval"].as_u64().unwrap_or(41_250);
    let mut saved = ch.sessions.load().await?;
    let auth = format!("QQBot {token}");
    let first = match &saved {
        Some(s) => {
            json!({"op": op::RESUME, "d": {"token": auth, "session_id": s.session_id, "seq": s.seq}})
        }
        None => json!({"op": op::IDENTIFY, "d": {"token": auth, "intents": ch.cfg.intents,
            "shard": [0, 1], "properties": {"$os": std::env::consts::OS, "$browser": "nanobot", "$device": "nanobot"}}}),
    };
    tx.send(Message::Text(first.to_string().into())).await?;
    let mut heartbeat = tokio::time::interval(Duration::from_millis(interval.max(1000)));
    heartbeat.tick().await;
    let mut acked = true;
    loop {
        let next = tokio::select! {
            _ = cancel.cancelled() => { let _ = tx.send(Message::Close(None)).await; return Ok(Ended::Stop) }
            _ = lease.lost().cancelled() => { let _ = tx.send(Message::Close(None)).await; return Ok(Ended::Stop) }
            _ = heartbeat.tick() => {
                if !acked {
                    return Ok(Ended::Failed("heartbeat not acknowledged".into()));
                }
                acked = false;
                let seq = saved.as_ref().map(|s| json!(s.seq)).unwrap_or(Value::Null);
                tx.send(Message::Text(json!({"op": op::HEARTBEAT, "d": seq}).to_string().into())).await?;
                continue;
            }
            next = next_payload(&mut rx) => next,
        };
        let payload = match next {
            Ok(Some(p)) => p,
            Ok(None) => return Ok(Ended::Failed("connection closed".into())),
            Err(Closed(code)) => return Ok(closed(ch, code).await),
        };
        match payload["op"].as_i64().unwrap_or(-1) {
            op::HEARTBEAT_ACK => acked = true,
            op::HEARTBEAT => {
                let seq = saved.as_ref().map(|s| json!(s.seq)).unwrap_or(Value::Null);
                let beat = json!({"op": op::HEARTBEAT, "d": seq});
                tx.send(Message::Text(beat.to_string().into())).await?;
            }
            op::RECONNECT => return Ok(Ended::Again),
            op::INVALID_SESSION => {
                tracing::info!(bot = %ch.bot_id, resumed = saved.is_some(), "qq gateway session invalid; identifying anew");
                ch.sessions.clear().await?;
                return Ok(Ended::Failed("invalid session".into()));
            }
            op::DISPATCH => {
                *ready |= matches!(payload["t"].as_str(), Some("READY" | "RESUMED"));
                if !dispatch(ch, inbound, lease, cancel, &payload, &mut saved).await {
                    return Ok(Ended::Stop);
                }
            }
            _ => {}
        }
    }
}

/// Handles one DISPATCH and saves the session after it; false when the lease was lost or
/// shutdown began before the event was handled.
async fn dispatch(
    ch: &QqChannel,
    inbound: &Inbound,
    lease: &Lease,
    cancel: &CancellationToken,
    payload: &Value,
    saved: &mut Option<Saved>,
) -> bool {
    let kind = payload["t"].as_str().unwrap_or_default();
    let seq = payload["s"].as_u64();
    match kind {
        "READY" => {
            let session_id = payload["d"]["session_id"].as_str().unwrap_or_default();
            tracing::info!(bot = %ch.bot_id, app_id = %ch.cfg.app_id, "qq gateway session ready");
            *saved = Some(Saved {
                session_id: session_id.to_string(),
                seq: seq.unwrap_or(0),
            });
        }
        "RESUMED" => {
            tracing::info!(bot = %ch.bot_id, app_id = %ch.cfg.app_id, "qq gateway session resumed")
        }
        "C2C_MESSAGE_CREATE" | "GROUP_AT_MESSAGE_CREATE" => {
            let group = kind == "GROUP_AT_MESSAGE_CREATE";
            if !handle(ch, inbound, lease, cancel, &payload["d"], group).await {
                return false;
            }
        }
        _ => {}
    }
    if let (Some(s), Some(seq)) = (saved.as_mut(), seq) {
        s.seq = s.seq.max(seq);
        if let Err(e) = ch.sessions.save(&lease.fence(), s).await {
            tracing::warn!(bot = %ch.bot_id, error = %e, "qq gateway session not saved");
        }
    }
    true
}

/// Handles one message event, retrying until its inbound message is published.
async fn handle(
    ch: &QqChannel,
    inbound: &Inbound,
    lease: &Lease,
    cancel: &CancellationToken,
    event: &Value,
    group: bool,
) -> bool {
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(10));
    loop {
        match poison::guard(receive::handle(ch, inbound, event, group)).await {
            Ok(()) => return true,
            Err(Failure::Poison(why)) => {
                tracing::error!(bot = %ch.bot_id, message_id = %event["id"], error = %why, "qq message cannot be handled; skipped");
                return true;
            }
            Err(Failure::Retry(e)) => {
                tracing::warn!(bot = %ch.bot_id, message_id = %event["id"], error = format!("{e:#}"), retry_in = ?backoff.current(), "qq message not handled yet");
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return false,
            _ = lease.lost().cancelled() => return false,
            _ = backoff.sleep() => {}
        }
    }
}

/// What a close code means: 4004 (token) fetches a token again; 4006, 4007 and 4900-4913
/// (session invalid, bad seq, QQ's internal errors) identify anew; 4914/4915 (bot offline or
/// banned) are logged as errors; anything else (4008 too fast, 4009 session timed out, a
/// dropped link) resumes.
async fn closed(ch: &QqChannel, code: u16) -> Ended {
    match code {
        4004 => ch.api.forget_token().await,
        4006 | 4007 | 4900..=4913 => {
            if let Err(e) = ch.sessions.clear().await {
                tracing::warn!(bot = %ch.bot_id, error = %e, "qq gateway session not cleared");
            }
        }
        4914 | 4915 => {
            tracing::error!(bot = %ch.bot_id, app_id = %ch.cfg.app_id, code, "qq closed the gateway: the bot is offline or banned (check q.qq.com)");
        }
        _ => {}
    }
    Ended::Failed(format!("closed by QQ with code {code}"))
}

/// A close frame's code.
struct Closed(u16);

/// Reads the next JSON payload: `Ok(None)` when the connection ended without a close code.
async fn next_payload<S>(rx: &mut S) -> Result<Option<Value>, Closed>
where
    S: futures::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    loop {
        match rx.next().await {
            None | Some(Err(_)) => return Ok(None),
            Some(Ok(Message::Text(text))) => match serde_json::from_str::<Value>(&text) {
                Ok(v) => return Ok(Some(v)),
                Err(_) => continue,
            },
            Some(Ok(Message::Close(frame))) => {
                return match frame {
                    Some(f) => Err(Closed(f.code.into())),
                    None => Ok(None),
                };
            }
            Some(Ok(_)) => continue,
        }
    }
}
