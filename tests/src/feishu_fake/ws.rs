//! The long connection of the fake: Feishu's `pbbp2` frames (protobuf, proto2: the four leading
//! fields always written), written from the open platform's public description of the
//! protocol. Data frames go out to one open connection; the client's pings are answered with
//! pongs carrying a `ClientConfig`; its acknowledgements (the data frame sent back with a
//! `{"code":200}` payload) are recorded by the frame's `message_id`.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::response::Response;
use futures::{SinkExt as _, StreamExt as _};
use prost::Message as _;
use tokio::sync::mpsc;

use super::Shared;

/// One header of a [`Frame`].
#[derive(Clone, PartialEq, prost::Message)]
pub struct Header {
    /// Name.
    #[prost(string, required, tag = "1")]
    pub key: String,
    /// Value.
    #[prost(string, required, tag = "2")]
    pub value: String,
}

/// One frame.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Frame {
    /// SeqID.
    #[prost(uint64, required, tag = "1")]
    pub seq_id: u64,
    /// LogID.
    #[prost(uint64, required, tag = "2")]
    pub log_id: u64,
    /// The connection's service id.
    #[prost(int32, required, tag = "3")]
    pub service: i32,
    /// 0 control, 1 data.
    #[prost(int32, required, tag = "4")]
    pub method: i32,
    /// Headers.
    #[prost(message, repeated, tag = "5")]
    pub headers: Vec<Header>,
    /// Payload encoding.
    #[prost(string, optional, tag = "6")]
    pub payload_encoding: Option<String>,
    /// Payload type.
    #[prost(string, optional, tag = "7")]
    pub payload_type: Option<String>,
    /// Payload.
    #[prost(bytes = "vec", optional, tag = "8")]
    pub payload: Option<Vec<u8>>,
    /// LogIDNew.
    #[prost(string, optional, tag = "9")]
    pub log_id_new: Option<String>,
}

impl Frame {
    /// Returns header `key`.
    pub fn header(&self, key: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|h| h.key == key)
            .map(|h| h.value.as_str())
    }
}

/// The service id the fake's connection URLs carry.
pub const SERVICE_ID: i32 = 33554678;

fn header(key: &str, value: &str) -> Header {
    Header {
        key: key.into(),
        value: value.into(),
    }
}

/// Returns the data frames of one event payload cut into `parts` pieces (bytes, so a piece may
/// end inside a character).
pub fn data_frames(message_id: &str, payload: &[u8], parts: usize) -> Vec<Vec<u8>> {
    let parts = parts.clamp(1, payload.len().max(1));
    let size = payload.len().div_ceil(parts).max(1);
    let pieces: Vec<&[u8]> = payload.chunks(size).collect();
    pieces
        .iter()
        .enumerate()
        .map(|(seq, piece)| {
            Frame {
                seq_id: seq as u64,
                log_id: 1,
                service: SERVICE_ID,
                method: 1,
                headers: vec![
                    header("type", "event"),
                    header("message_id", message_id),
                    header("sum", &pieces.len().to_string()),
                    header("seq", &seq.to_string()),
                    header("trace_id", "fake-trace"),
                ],
                payload: Some(piece.to_vec()),
                ..Default::default()
            }
            .encode_to_vec()
        })
        .collect()
}

pub(super) async fn upgrade(State(s): State<Arc<Shared>>, ws: WebSocketUpgrade) -> Response {
    ws.on_upgrade(move |socket| serve(s, socket))
}

async fn serve(s: Arc<Shared>, socket: WebSocket) {
    let (mut tx, mut rx) = socket.split();
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<Vec<u8>>();
    let id = s.connections.fetch_add(1, Ordering::SeqCst);
    let open = {
        let mut sockets = s.sockets.lock().unwrap();
        sockets.push((id, out_tx));
        sockets.len()
    };
    s.peak.fetch_max(open, Ordering::SeqCst);
    s.bump();
    loop {
        tokio::select! {
            out = out_rx.recv() => {
                let Some(out) = out else { break };
                if tx.send(Message::Binary(out.into())).await.is_err() {
                    break;
                }
            }
            frame = rx.next() => match frame {
                Some(Ok(Message::Binary(bytes))) => {
                    let Ok(frame) = Frame::decode(bytes.as_ref()) else { break };
                    if frame.method == 0 && frame.header("type") == Some("ping") {
                        s.pings.fetch_add(1, Ordering::SeqCst);
                        let pong = Frame {
                            service: frame.service,
                            method: 0,
                            headers: vec![header("type", "pong")],
                            payload: Some(br#"{"PingInterval":120,"ReconnectCount":-1,"ReconnectInterval":120,"ReconnectNonce":30}"#.to_vec()),
                            ..Default::default()
                        };
                        if tx.send(Message::Binary(pong.encode_to_vec().into())).await.is_err() {
                            break;
                        }
                    } else if frame.method == 1
                        && frame.payload.as_deref() == Some(br#"{"code":200}"#)
                        && let Some(mid) = frame.header("message_id")
                    {
                        s.acks.lock().unwrap().push(mid.to_string());
                    }
                    s.bump();
                }
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
                Some(Ok(_)) => {}
            }
        }
    }
    s.sockets.lock().unwrap().retain(|(i, _)| *i != id);
    s.bump();
}
