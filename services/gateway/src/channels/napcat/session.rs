//! The event connection under a lease: every replica tries to take
//! [`keys::channel_connection`]; the holder connects to `wsUrl`, checks the login
//! (`get_login_info`, as 0.3.5) and handles each event in order; the others wait. While it
//! holds the lease the holder reconnects with backoff (1 s doubling to 30 s; 0.3.5 waited 5,
//! 10, then 30 s). A holder that loses the lease (taken over after a Redis stall) drops its
//! connection at once; one that is SIGKILLed leaves a TCP connection NapCat closes and a lease
//! that expires, and another replica connects within `leaseSecs`. A message being handled when
//! the holder dies is lost (NapCat replays nothing to a new connection).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use nanobot_proto::keys;
use nanobot_runtime::lease::Lease;

use super::onebot::{Conn, ConnectError};
use super::{CHANNEL, NapcatChannel, receive};
use crate::channels::Inbound;
use crate::channels::backoff::Backoff;
use crate::channels::poison::{self, Failure};

/// First reconnect delay; doubled per failure up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// Longest reconnect delay.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Connects while this replica holds the lease; otherwise keeps trying to take it. Ends with an
/// error when NapCat refuses the access token.
pub(super) async fn run(
    ch: Arc<NapcatChannel>,
    inbound: Inbound,
    cancel: CancellationToken,
) -> anyhow::Result<()> {
    let key = keys::channel_connection(&ch.bot_id, CHANNEL, &ch.conn_id);
    let fence_key = keys::channel_connection_fence(&ch.bot_id, CHANNEL, &ch.conn_id);
    let retry = (ch.leases.ttl() / 4).min(Duration::from_secs(1));
    loop {
        match ch.leases.try_acquire(&key, &fence_key).await {
            Ok(Some(lease)) => {
                tracing::info!(bot = %ch.bot_id, fence = lease.fence().counter(), "napcat connection lease taken");
                let refused = hold(&ch, &inbound, &lease, &cancel).await;
                ch.set_events_conn(None);
                let lost = !lease.is_held();
                lease.release().await;
                tracing::info!(bot = %ch.bot_id, lost, "napcat connection lease released");
                if refused {
                    anyhow::bail!(
                        "napcat at {} refused the access token of bot {}: check channels.napcat.accessToken",
                        ch.url_for_logs,
                        ch.bot_id
                    );
                }
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(bot = %ch.bot_id, error = %e, "napcat connection lease unavailable")
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            _ = tokio::time::sleep(retry) => {}
        }
    }
}

/// Connects and reconnects with backoff while the lease is held; true when the token was
/// refused.
async fn hold(
    ch: &NapcatChannel,
    inbound: &Inbound,
    lease: &Lease,
    cancel: &CancellationToken,
) -> bool {
    let mut backoff = Backoff::new(FIRST_BACKOFF, MAX_BACKOFF);
    loop {
        let (tx, rx) = mpsc::channel(256);
        let opened = tokio::select! {
            _ = cancel.cancelled() => return false,
            _ = lease.lost().cancelled() => return false,
            opened = Conn::open(&ch.cfg.ws_url, &ch.cfg.access_token, Some(tx)) => opened,
        };
        match opened {
            Ok(conn) => match serve(ch, inbound, lease, cancel, conn, rx).await {
                Served::LoggedIn => backoff.reset(),
                Served::Failed => {}
                Served::Refused => return true,
            },
            Err(ConnectError::Unauthorized) => return true,
            Err(ConnectError::Other(e)) => {
                tracing::warn!(bot = %ch.bot_id, ws_url = %ch.url_for_logs, error = %e, retry_in = ?backoff.current(), "napcat connection failed");
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return false,
            _ = lease.lost().cancelled() => return false,
            _ = backoff.sleep() => {}
        }
    }
}

/// How a connection ended.
enum Served {
    /// It logged in, then ended (the backoff starts over).
    LoggedIn,
    /// The login failed.
    Failed,
    /// The implementation refused the access token.
    Refused,
}

/// Serves one connection until it closes, the lease is lost, or shutdown.
async fn serve(
    ch: &NapcatChannel,
    inbound: &Inbound,
    lease: &Lease,
    cancel: &CancellationToken,
    conn: Conn,
    mut events: mpsc::Receiver<Value>,
) -> Served {
    let login = match conn.call("get_login_info", json!({})).await {
        Ok(login) => login,
        Err(_) if conn.was_refused() => return Served::Refused,
        Err(e) => {
            tracing::warn!(bot = %ch.bot_id, error = %e, "napcat get_login_info failed");
            return Served::Failed;
        }
    };
    tracing::info!(bot = %ch.bot_id, user_id = %login["user_id"], nickname = %login["nickname"].as_str().unwrap_or_default(), "napcat connected");
    let me = match &login["user_id"] {
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        _ => String::new(),
    };
    ch.set_events_conn(Some(conn.clone()));
    loop {
        let event = tokio::select! {
            _ = cancel.cancelled() => break,
            _ = lease.lost().cancelled() => break,
            _ = conn.closed().cancelled() => {
                tracing::warn!(bot = %ch.bot_id, "napcat connection lost");
                break;
            }
            event = events.recv() => match event { Some(e) => e, None => break },
        };
        if !handle(ch, inbound, &conn, &me, &event, lease, cancel).await {
            break;
        }
    }
    ch.set_events_conn(None);
    Served::LoggedIn
}

/// Handles one event, retrying until it is done (a closed connection does not stop it: only
/// the pairing reply and reply lookups use it); false when the lease was lost or shutdown began
/// first.
async fn handle(
    ch: &NapcatChannel,
    inbound: &Inbound,
    conn: &Conn,
    me: &str,
    event: &Value,
    lease: &Lease,
    cancel: &CancellationToken,
) -> bool {
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(10));
    let message_id = &event["message_id"];
    loop {
        match poison::guard(receive::handle(ch, inbound, conn, me, event)).await {
            Ok(()) => return true,
            Err(Failure::Poison(why)) => {
                tracing::error!(bot = %ch.bot_id, message_id = %message_id, error = %why, "napcat event cannot be handled; skipped");
                return true;
            }
            Err(Failure::Retry(e)) => {
                tracing::warn!(bot = %ch.bot_id, message_id = %message_id, error = format!("{e:#}"), retry_in = ?backoff.current(), "napcat event not handled yet");
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return false,
            _ = lease.lost().cancelled() => return false,
            _ = backoff.sleep() => {}
        }
    }
}
