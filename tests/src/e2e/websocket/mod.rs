//! The WebSocket channel end to end: the fleet's processes, a real WebSocket client
//! (tokio-tungstenite) speaking the channel's JSON protocol, the scripted LLM, and the web chat
//! page driven in a headless Chromium over the DevTools protocol.

mod browser;
mod cdp;
mod limits;
mod owners;
mod protocol;
mod replicas;

use std::time::Duration;

use futures::{SinkExt as _, StreamExt as _};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::harness::{Fleet, FleetBuilder, free_port};

use super::TURN;

/// The token of the test fleets.
pub(crate) const TOKEN: &str = "ws-test-token-3f9a";

/// Starts a fleet (gateway, agent, tools) serving `channels.websocket` on a free port with
/// [`TOKEN`], `extra` laid over that section; returns it and the port.
pub(crate) async fn ws_fleet(extra: Value) -> (Fleet, u16) {
    ws_fleet_from(Fleet::builder(), extra).await
}

/// [`ws_fleet`] from a builder with more settings.
pub(crate) async fn ws_fleet_from(builder: FleetBuilder, extra: Value) -> (Fleet, u16) {
    let port = free_port().expect("free port");
    let mut section = json!({"port": port, "token": TOKEN});
    if let (Value::Object(base), Value::Object(extra)) = (&mut section, extra) {
        base.extend(extra);
    }
    let fleet = builder
        .roles(&["gateway", "agent", "tools"])
        .config(json!({"channels": {"websocket": section}}))
        .start()
        .await
        .expect("fleet");
    (fleet, port)
}

/// Returns the upgrade URL of the channel on `port`.
pub(crate) fn ws_url(port: u16, client_id: &str, token: Option<&str>) -> String {
    let mut url = format!("ws://127.0.0.1:{port}/?client_id={client_id}");
    if let Some(token) = token {
        url.push_str(&format!("&token={token}"));
    }
    url
}

/// A protocol client recording every frame it received.
pub(crate) struct WsClient {
    socket: WebSocketStream<MaybeTlsStream<TcpStream>>,
    /// Every frame received so far, in order.
    pub frames: Vec<Value>,
}

impl WsClient {
    /// Connects as `client_id` with [`TOKEN`] and reads the `ready` frame.
    pub(crate) async fn connect(port: u16, client_id: &str) -> Self {
        let url = ws_url(port, client_id, Some(TOKEN));
        let (socket, _) = tokio_tungstenite::connect_async(url)
            .await
            .expect("websocket connect");
        Self::from_socket(socket, client_id).await
    }

    /// Wraps a connected `socket` and reads its `ready` frame, which must name `client_id`.
    pub(crate) async fn from_socket(
        socket: WebSocketStream<MaybeTlsStream<TcpStream>>,
        client_id: &str,
    ) -> Self {
        let mut client = Self {
            socket,
            frames: Vec::new(),
        };
        let ready = client.until(|f| f["event"] == "ready").await;
        assert_eq!(ready["client_id"], client_id, "{ready}");
        client
    }

    /// Sends one JSON frame.
    pub(crate) async fn send(&mut self, frame: Value) {
        self.socket
            .send(Message::text(frame.to_string()))
            .await
            .expect("websocket send");
    }

    /// Sends one JSON frame as a text message cut into WebSocket fragments of 1 to 3 bytes
    /// ([`crate::drip::pieces`]), so the server reassembles characters cut mid-way.
    pub(crate) async fn send_fragmented(&mut self, frame: Value) {
        use tokio_tungstenite::tungstenite::protocol::frame::Frame;
        use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
        let pieces = crate::drip::pieces(frame.to_string().as_bytes());
        let last = pieces.len().saturating_sub(1);
        for (i, piece) in pieces.into_iter().enumerate() {
            let opcode = OpCode::Data(if i == 0 { Data::Text } else { Data::Continue });
            self.socket
                .send(Message::Frame(Frame::message(piece, opcode, i == last)))
                .await
                .expect("websocket send a fragment");
        }
    }

    /// Sends the message `text` with the client's id `id` on `chat`.
    pub(crate) async fn say(&mut self, chat: &str, id: &str, text: &str) {
        self.send(json!({"type": "message", "chat_id": chat, "text": text, "id": id}))
            .await;
    }

    /// Reads frames until one matches `pred` (within [`TURN`]) and returns it.
    pub(crate) async fn until(&mut self, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + TURN;
        loop {
            let next = tokio::time::timeout_at(deadline, self.socket.next())
                .await
                .unwrap_or_else(|_| {
                    panic!("no matching frame within {TURN:?}; got {:#?}", self.frames)
                });
            let frame = match next {
                Some(Ok(Message::Text(text))) => {
                    serde_json::from_str::<Value>(&text).expect("JSON frame")
                }
                Some(Ok(_)) => continue,
                other => panic!("socket ended: {other:?}; got {:#?}", self.frames),
            };
            self.frames.push(frame.clone());
            if pred(&frame) {
                return frame;
            }
        }
    }

    /// Returns the final reply to the client's message `msg_id`, waiting for it unless it
    /// already came.
    pub(crate) async fn final_for(&mut self, msg_id: &str) -> Value {
        if let Some(done) = self.replies(msg_id, "final").first() {
            return (*done).clone();
        }
        self.until(|f| f["event"] == "message" && f["kind"] == "final" && f["reply_to"] == msg_id)
            .await
    }

    /// Returns the frames received so far that answer `msg_id` with `kind`.
    pub(crate) fn replies(&self, msg_id: &str, kind: &str) -> Vec<&Value> {
        self.frames
            .iter()
            .filter(|f| f["event"] == "message" && f["kind"] == kind && f["reply_to"] == msg_id)
            .collect()
    }

    /// Closes the connection.
    pub(crate) async fn close(mut self) {
        let _ = self.socket.close(None).await;
    }
}

/// A bound generous enough for a refused upgrade to be answered.
pub(crate) const REFUSAL: Duration = Duration::from_secs(10);
