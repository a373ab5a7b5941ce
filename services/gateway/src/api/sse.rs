//! The streaming answer: one `chat.completion.chunk` event per stream delta (in `seq` order),
//! the final text as one delta when nothing was streamed, then a `finish_reason: "stop"` chunk,
//! with `stream_options.include_usage` a chunk with empty `choices` and the turn's `usage`
//! (as OpenAI), and `data: [DONE]`. A failure ends the stream with an error event instead.

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;

use axum::http::HeaderValue;
use axum::http::header::CACHE_CONTROL;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};

use nanobot_proto::OutboundKind;
use nanobot_runtime::health::InFlight;

use super::completions::{Turn, Unregistered, completion_id, now_secs, usage_json};
use super::error::ApiError;
use crate::error::UserFacingError as _;

/// Returns the SSE response answering `turn`; `in_flight` is held until the stream ends.
pub(super) fn respond(turn: Turn, in_flight: InFlight) -> Response {
    let events = Events {
        turn,
        chunk_id: completion_id(),
        order: DeltaOrder::default(),
        queue: VecDeque::new(),
        emitted: false,
        done: false,
        _in_flight: in_flight,
    };
    let stream = futures::stream::unfold(events, |mut events| async move {
        let event = events.next().await?;
        Some((Ok::<_, Infallible>(event), events))
    });
    let mut response = Sse::new(stream).into_response();
    response
        .headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// The state of one streamed answer.
struct Events {
    turn: Turn,
    chunk_id: String,
    order: DeltaOrder,
    queue: VecDeque<Event>,
    /// Whether any delta text was sent.
    emitted: bool,
    /// Whether the last event is queued.
    done: bool,
    _in_flight: InFlight,
}

impl Events {
    async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(event) = self.queue.pop_front() {
                return Some(event);
            }
            if self.done {
                return None;
            }
            self.pull().await;
        }
    }

    /// Waits for the next reply and queues the events it produces.
    async fn pull(&mut self) {
        let next = tokio::time::timeout_at(self.turn.deadline, self.turn.waiter.recv()).await;
        let reply = match next {
            Err(_) => {
                return self.fail(ApiError::Timeout {
                    secs: self.turn.timeout_secs,
                });
            }
            Ok(None) => {
                return self.fail(ApiError::internal("wait for stream replies", Unregistered));
            }
            Ok(Some(reply)) => reply,
        };
        match reply.kind() {
            OutboundKind::StreamDelta => {
                for text in self.order.push(reply.seq, reply.content) {
                    self.delta(text);
                }
            }
            OutboundKind::Final => {
                for text in self.order.flush() {
                    self.delta(text);
                }
                if !self.emitted {
                    self.delta(reply.content);
                }
                nanobot_runtime::metrics::get().delivery(
                    &reply.bot,
                    crate::API_CHANNEL,
                    "delivered",
                );
                self.finish(reply.usage);
            }
            OutboundKind::Error => self.fail(ApiError::Agent(reply.content)),
            // A stream end only closes one generation segment; tools may follow.
            OutboundKind::StreamEnd | OutboundKind::Progress | OutboundKind::ToolHint => {}
        }
    }

    fn delta(&mut self, text: String) {
        if text.is_empty() {
            return;
        }
        self.emitted = true;
        let chunk = self.chunk(serde_json::json!({"content": text}), None);
        self.queue.push_back(chunk);
    }

    /// Queues the `finish_reason: "stop"` chunk, the usage chunk when the client asked for
    /// it (`stream_options.include_usage`: empty `choices`, as OpenAI), and `[DONE]`.
    fn finish(&mut self, usage: Option<nanobot_proto::Usage>) {
        let stop = self.chunk(serde_json::json!({}), Some("stop"));
        self.queue.push_back(stop);
        if self.turn.include_usage {
            let chunk = serde_json::json!({
                "id": self.chunk_id,
                "object": "chat.completion.chunk",
                "created": now_secs(),
                "model": self.turn.model,
                "choices": [],
                "usage": usage_json(usage),
            });
            self.queue
                .push_back(Event::default().data(chunk.to_string()));
        }
        self.queue.push_back(Event::default().data("[DONE]"));
        self.done = true;
    }

    fn fail(&mut self, error: ApiError) {
        let _span = self.turn.span.enter();
        match &error {
            ApiError::Internal { .. } => tracing::error!("failed to {error:#}"),
            _ => tracing::info!(kind = error.kind().as_str(), "completion stream failed"),
        }
        self.queue
            .push_back(Event::default().data(error.body().to_string()));
        self.done = true;
    }

    fn chunk(&self, delta: serde_json::Value, finish_reason: Option<&str>) -> Event {
        let chunk = serde_json::json!({
            "id": self.chunk_id,
            "object": "chat.completion.chunk",
            "created": now_secs(),
            "model": self.turn.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        });
        Event::default().data(chunk.to_string())
    }
}

/// Puts stream deltas back in `seq` order (1, 2, …); `seq` 0 means "unordered".
#[derive(Debug, Default)]
struct DeltaOrder {
    /// The last sequence number released.
    released: u32,
    held: BTreeMap<u32, String>,
}

impl DeltaOrder {
    /// Accepts one delta; returns the texts now in order.
    fn push(&mut self, seq: u32, text: String) -> Vec<String> {
        if seq == 0 {
            return vec![text];
        }
        if seq <= self.released {
            // A redelivered delta.
            return Vec::new();
        }
        self.held.insert(seq, text);
        let mut ready = Vec::new();
        while let Some(text) = self.held.remove(&(self.released + 1)) {
            self.released += 1;
            ready.push(text);
        }
        ready
    }

    /// Returns every held delta in order (the turn ended; missing ones will not come).
    fn flush(&mut self) -> Vec<String> {
        let held = std::mem::take(&mut self.held);
        if let Some(last) = held.keys().next_back() {
            self.released = *last;
        }
        held.into_values().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_are_released_in_sequence_order() {
        let mut order = DeltaOrder::default();
        assert_eq!(order.push(2, "b".into()), Vec::<String>::new());
        assert_eq!(order.push(1, "a".into()), vec!["a", "b"]);
        assert_eq!(order.push(1, "a".into()), Vec::<String>::new());
        assert_eq!(order.push(0, "x".into()), vec!["x"]);
        assert_eq!(order.push(5, "e".into()), Vec::<String>::new());
        assert_eq!(order.push(3, "c".into()), vec!["c"]);
        assert_eq!(order.flush(), vec!["e"]);
        assert_eq!(order.push(4, "late".into()), Vec::<String>::new());
    }
}
