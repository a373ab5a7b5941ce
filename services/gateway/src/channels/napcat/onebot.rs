//! A OneBot v11 forward-WebSocket client: one socket carries the implementation's events and
//! our API calls (`{"action","params","echo"}`, answered by `{"status","retcode","data","echo"}`
//! with the same `echo`). The access token goes in `Authorization: Bearer …` (never in the URL
//! or a log). A socket silent for [`IDLE`] (the client pings every [`PING`]) is taken as dead.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{SinkExt as _, StreamExt as _};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_util::sync::CancellationToken;
use url::Url;

/// How long an API call waits for its answer (0.3.5's 20 s).
pub(super) const CALL_TIMEOUT: Duration = Duration::from_secs(20);
/// How long the WebSocket handshake may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// How often the client pings.
const PING: Duration = Duration::from_secs(20);
/// A socket with no frame for this long is dropped.
const IDLE: Duration = Duration::from_secs(60);

/// Why a connection could not be opened.
#[derive(Debug, thiserror::Error)]
pub(super) enum ConnectError {
    /// The implementation refused the access token at the handshake (HTTP 401/403, the
    /// spec's way; NapCat's way is [`Conn::was_refused`]).
    #[error("the access token was refused")]
    Unauthorized,
    /// Anything else (network, handshake): worth retrying.
    #[error("{0}")]
    Other(String),
}

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum CallError {
    /// The socket closed or the answer did not come in time: the action may or may not have
    /// run.
    #[error("{0}")]
    Lost(String),
    /// The implementation answered with a failure.
    #[error("{action} failed: status {status}, retcode {retcode}: {message}")]
    Failed {
        action: String,
        status: String,
        retcode: i64,
        message: String,
    },
}

type Pending = Arc<Mutex<HashMap<String, oneshot::Sender<Value>>>>;

/// An open connection; cloning shares it. Closed when every clone is dropped or the socket
/// ends.
#[derive(Clone)]
pub(super) struct Conn {
    out: mpsc::Sender<Message>,
    pending: Pending,
    closed: CancellationToken,
    refused: Arc<AtomicBool>,
    next: Arc<AtomicU64>,
    _guard: Arc<tokio_util::sync::DropGuard>,
}

impl Conn {
    /// Connects to `url`; events (frames with a `post_type`) go to `events` when given, else
    /// are dropped.
    pub(super) async fn open(
        url: &str,
        token: &str,
        events: Option<mpsc::Sender<Value>>,
    ) -> Result<Self, ConnectError> {
        let mut request = url
            .into_client_request()
            .map_err(|e| ConnectError::Other(format!("bad wsUrl: {e}")))?;
        if !token.is_empty() {
            let value = format!("Bearer {token}").parse().map_err(|_| {
                ConnectError::Other("the access token is not a header value".into())
            })?;
            request.headers_mut().insert("authorization", value);
        }
        let connected =
            tokio::time::timeout(CONNECT_TIMEOUT, tokio_tungstenite::connect_async(request)).await;
        let (socket, _) = match connected {
            Err(_) => return Err(ConnectError::Other("handshake timed out".into())),
            Ok(Err(tungstenite::Error::Http(response)))
                if matches!(response.status().as_u16(), 401 | 403) =>
            {
                return Err(ConnectError::Unauthorized);
            }
            Ok(Err(e)) => return Err(ConnectError::Other(e.to_string())),
            Ok(Ok(ok)) => ok,
        };
        let (out, out_rx) = mpsc::channel(64);
        let pending: Pending = Arc::default();
        let closed = CancellationToken::new();
        let refused = Arc::new(AtomicBool::new(false));
        tokio::spawn(pump(
            socket,
            out_rx,
            pending.clone(),
            events,
            closed.clone(),
            refused.clone(),
        ));
        Ok(Self {
            out,
            pending,
            _guard: Arc::new(closed.clone().drop_guard()),
            closed,
            refused,
            next: Arc::default(),
        })
    }

    /// Opens an API-only connection (`{wsUrl}/api`, which gets no events: the spec's and
    /// NapCat's); an implementation without that path gets `wsUrl` itself, its events dropped.
    pub(super) async fn open_api(url: &str, token: &str) -> Result<Self, ConnectError> {
        match api_url(url) {
            Some(api) => match Self::open(&api, token, None).await {
                Err(ConnectError::Other(e)) => {
                    tracing::debug!(error = %e, "napcat /api connection failed; using wsUrl");
                    Self::open(url, token, None).await
                }
                other => other,
            },
            None => Self::open(url, token, None).await,
        }
    }

    /// Returns whether the implementation refused the access token on this socket (NapCat
    /// accepts the upgrade, then sends retcode 1403 and closes).
    pub(super) fn was_refused(&self) -> bool {
        self.refused.load(Ordering::Relaxed)
    }

    /// Returns whether the socket is still open.
    pub(super) fn is_open(&self) -> bool {
        !self.closed.is_cancelled()
    }

    /// Cancelled when the socket ends.
    pub(super) fn closed(&self) -> &CancellationToken {
        &self.closed
    }

    /// Calls `action` and returns the answer's `data`.
    pub(super) async fn call(&self, action: &str, params: Value) -> Result<Value, CallError> {
        let echo = format!("nb-{}", self.next.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(echo.clone(), tx);
        let frame = json!({"action": action, "params": params, "echo": echo}).to_string();
        let lost = |why: &str| CallError::Lost(format!("{action}: {why}"));
        if self.out.send(Message::text(frame)).await.is_err() {
            lock(&self.pending).remove(&echo);
            return Err(lost("connection closed"));
        }
        let answer = tokio::select! {
            _ = self.closed.cancelled() => Err(lost("connection closed")),
            answer = tokio::time::timeout(CALL_TIMEOUT, rx) => match answer {
                Ok(Ok(answer)) => Ok(answer),
                Ok(Err(_)) => Err(lost("connection closed")),
                Err(_) => Err(lost("no answer in time")),
            },
        };
        lock(&self.pending).remove(&echo);
        let answer = answer?;
        let status = answer["status"].as_str().unwrap_or("ok");
        let retcode = answer["retcode"].as_i64().unwrap_or(0);
        if status != "ok" || retcode != 0 {
            return Err(CallError::Failed {
                action: action.to_string(),
                status: status.to_string(),
                retcode,
                message: answer["message"]
                    .as_str()
                    .or(answer["wording"].as_str())
                    .unwrap_or_default()
                    .to_string(),
            });
        }
        Ok(answer["data"].clone())
    }
}

/// Returns `url` with `/api` appended to its path (`ws://h:3001` → `ws://h:3001/api`).
fn api_url(url: &str) -> Option<String> {
    let mut parsed = Url::parse(url).ok()?;
    let path = format!("{}/api", parsed.path().trim_end_matches('/'));
    parsed.set_path(&path);
    Some(parsed.to_string())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Moves frames both ways until the socket ends or every [`Conn`] is dropped.
async fn pump(
    socket: Socket,
    mut out_rx: mpsc::Receiver<Message>,
    pending: Pending,
    events: Option<mpsc::Sender<Value>>,
    closed: CancellationToken,
    refused: Arc<AtomicBool>,
) {
    let (mut sink, mut stream) = socket.split();
    let mut ping = tokio::time::interval(PING);
    ping.reset();
    loop {
        tokio::select! {
            _ = closed.cancelled() => break,
            _ = ping.tick() => {
                if sink.send(Message::Ping(Vec::new().into())).await.is_err() { break; }
            }
            frame = out_rx.recv() => match frame {
                Some(frame) => if sink.send(frame).await.is_err() { break; },
                None => break,
            },
            frame = tokio::time::timeout(IDLE, stream.next()) => match frame {
                Ok(Some(Ok(Message::Text(text)))) => {
                    let Ok(value) = serde_json::from_str::<Value>(&text) else {
                        tracing::debug!("napcat frame that is not JSON dropped");
                        continue;
                    };
                    if !dispatch(value, &pending, events.as_ref(), &refused).await { break; }
                }
                Ok(Some(Ok(Message::Close(_)))) | Ok(None) | Ok(Some(Err(_))) | Err(_) => break,
                Ok(Some(Ok(_))) => {}
            },
        }
    }
    closed.cancel();
    lock(&pending).clear();
    let _ = tokio::time::timeout(Duration::from_secs(1), sink.close()).await;
}

/// Routes one frame: an answer to its caller, an event to `events`; false to stop.
async fn dispatch(
    value: Value,
    pending: &Pending,
    events: Option<&mpsc::Sender<Value>>,
    refused: &AtomicBool,
) -> bool {
    if value.get("post_type").is_none() {
        let echo = value["echo"].as_str().unwrap_or_default();
        if let Some(caller) = lock(pending).remove(echo) {
            let _ = caller.send(value);
        } else if value["retcode"].as_i64() == Some(1403) {
            refused.store(true, Ordering::Relaxed);
            return false;
        }
        return true;
    }
    match events {
        Some(events) => events.send(value).await.is_ok(),
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_connection_appends_api_to_the_path_and_keeps_the_query() {
        assert_eq!(
            api_url("ws://127.0.0.1:3001").unwrap(),
            "ws://127.0.0.1:3001/api"
        );
        assert_eq!(
            api_url("wss://q.example/onebot/?access_token=x").unwrap(),
            "wss://q.example/onebot/api?access_token=x"
        );
        assert_eq!(api_url("not a url"), None);
    }
}
