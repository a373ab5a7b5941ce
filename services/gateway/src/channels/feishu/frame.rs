//! The long connection's wire format: every WebSocket message is one binary protobuf `Frame` of
//! Feishu's `pbbp2` schema (proto2, so the four leading fields are always written).
//!
//! - `method` 0 is a control frame (`type` header `ping` from the client, `pong` from Feishu,
//!   whose payload may carry a new `ClientConfig`), 1 a data frame (`type` `event` or `card`).
//! - A data frame's payload is an event's JSON, the same document the HTTP callback receives
//!   in clear; a large one comes in `sum` parts (`seq` 0..sum) under one `message_id`.
//! - Each data frame is acknowledged by sending it back with the payload replaced by
//!   `{"code":200}` and a `biz_rt` header (milliseconds spent).

use std::collections::HashMap;

/// Control frame (`method`).
pub(super) const CONTROL: i32 = 0;
/// Data frame (`method`).
pub(super) const DATA: i32 = 1;

/// One header of a [`Frame`].
#[derive(Clone, PartialEq, prost::Message)]
pub struct Header {
    /// Name (`type`, `message_id`, `sum`, `seq`, `trace_id`, `biz_rt`).
    #[prost(string, required, tag = "1")]
    pub key: String,
    /// Value.
    #[prost(string, required, tag = "2")]
    pub value: String,
}

/// One frame of the long connection.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Frame {
    /// Sequence id.
    #[prost(uint64, required, tag = "1")]
    pub seq_id: u64,
    /// Log id.
    #[prost(uint64, required, tag = "2")]
    pub log_id: u64,
    /// The connection's `service_id` (from its URL).
    #[prost(int32, required, tag = "3")]
    pub service: i32,
    /// [`CONTROL`] or [`DATA`].
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
    /// Payload (JSON for events, pongs and acknowledgements).
    #[prost(bytes = "vec", optional, tag = "8")]
    pub payload: Option<Vec<u8>>,
    /// Log id (new form).
    #[prost(string, optional, tag = "9")]
    pub log_id_new: Option<String>,
}

impl Frame {
    /// Returns the value of header `key`.
    pub fn header(&self, key: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|h| h.key == key)
            .map(|h| h.value.as_str())
    }

    /// Returns a ping of the connection `service`.
    pub fn ping(service: i32) -> Self {
        Self {
            service,
            method: CONTROL,
            headers: vec![header("type", "ping")],
            ..Default::default()
        }
    }

    /// Returns the acknowledgement of this data frame (`code` 200), handled in `biz_rt_ms`.
    pub fn ack(&self, biz_rt_ms: u128) -> Self {
        let mut ack = self.clone();
        ack.headers.push(header("biz_rt", &biz_rt_ms.to_string()));
        ack.payload = Some(br#"{"code":200}"#.to_vec());
        ack
    }
}

fn header(key: &str, value: &str) -> Header {
    Header {
        key: key.into(),
        value: value.into(),
    }
}

/// Collects the parts of split data frames (`sum` > 1) until each is whole.
#[derive(Debug, Default)]
pub(super) struct Parts {
    pending: HashMap<String, Vec<Option<Vec<u8>>>>,
}

/// Most split messages held at once (a connection sending only first parts cannot grow it).
const MAX_PENDING: usize = 64;

impl Parts {
    /// Adds `frame`'s payload; returns the whole payload once every part arrived.
    pub(super) fn add(&mut self, frame: &Frame) -> Option<Vec<u8>> {
        let payload = frame.payload.clone().unwrap_or_default();
        let sum: usize = frame
            .header("sum")
            .and_then(|s| s.parse().ok())
            .unwrap_or(1);
        let seq: usize = frame
            .header("seq")
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        if sum <= 1 {
            return Some(payload);
        }
        if seq >= sum || sum > 1024 {
            return None;
        }
        let id = frame.header("message_id").unwrap_or_default().to_string();
        if !self.pending.contains_key(&id) && self.pending.len() >= MAX_PENDING {
            self.pending.clear();
        }
        let parts = self
            .pending
            .entry(id.clone())
            .or_insert_with(|| vec![None; sum]);
        if parts.len() != sum {
            *parts = vec![None; sum];
        }
        parts[seq] = Some(payload);
        if parts.iter().any(Option::is_none) {
            return None;
        }
        let parts = self.pending.remove(&id)?;
        Some(parts.into_iter().flatten().flatten().collect())
    }
}

#[cfg(test)]
mod tests {
    use prost::Message as _;

    use super::*;

    fn part(id: &str, sum: usize, seq: usize, payload: &[u8]) -> Frame {
        Frame {
            method: DATA,
            headers: vec![
                header("type", "event"),
                header("message_id", id),
                header("sum", &sum.to_string()),
                header("seq", &seq.to_string()),
            ],
            payload: Some(payload.to_vec()),
            ..Default::default()
        }
    }

    #[test]
    fn a_split_event_is_whole_once_every_part_arrived_in_any_order() {
        let text = "飞书 👍🏽 事件".as_bytes();
        let (a, b) = text.split_at(5); // inside a character: parts are bytes
        let mut parts = Parts::default();
        assert_eq!(parts.add(&part("m1", 2, 1, b)), None);
        assert_eq!(parts.add(&part("m2", 1, 0, b"{}")), Some(b"{}".to_vec()));
        assert_eq!(parts.add(&part("m1", 2, 0, a)), Some(text.to_vec()));
        assert_eq!(parts.add(&part("m3", 2, 5, a)), None, "seq out of range");
    }

    #[test]
    fn required_fields_are_written_even_when_zero_and_an_ack_keeps_the_headers() {
        let ping = Frame::ping(0);
        let bytes = ping.encode_to_vec();
        // Fields 1-4 as varints (tags 0x08, 0x10, 0x18, 0x20), each 0.
        assert_eq!(&bytes[..8], &[0x08, 0, 0x10, 0, 0x18, 0, 0x20, 0]);
        assert_eq!(Frame::decode(bytes.as_slice()).unwrap(), ping);
        let ack = part("m1", 1, 0, b"{\"x\":1}").ack(12);
        assert_eq!(ack.header("message_id"), Some("m1"));
        assert_eq!(ack.header("biz_rt"), Some("12"));
        assert_eq!(ack.payload.as_deref(), Some(&br#"{"code":200}"#[..]));
    }
}
