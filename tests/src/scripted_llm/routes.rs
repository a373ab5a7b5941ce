//! The HTTP routes: OpenAI chat completions, models and audio transcriptions, Anthropic
//! messages.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt as _;
use serde_json::{Value, json};

use super::reply::Resolved;
use super::{Shared, anthropic, openai};

/// Records the request, waits out the scripted delay and gate, and returns the request body with the
/// scripted turn, or the scripted error response.
async fn take_turn(
    shared: &Shared,
    uri: &Uri,
    headers: &HeaderMap,
    raw: &Bytes,
) -> Result<(Value, super::reply::Turn), Response> {
    let (body, hold, resolved) = shared.take(uri.path(), headers, raw);
    hold.wait().await;
    match resolved {
        Resolved::Turn(turn) => Ok((body, turn)),
        Resolved::Error {
            status,
            body,
            retry_after,
        } => Err(error(status, body, retry_after)),
    }
}

pub(super) async fn chat_completions(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    raw: Bytes,
) -> Response {
    let (body, turn) = match take_turn(&shared, &uri, &headers, &raw).await {
        Ok(taken) => taken,
        Err(response) => return response,
    };
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("test-model");
    let id = shared.response_id("chatcmpl-");
    let drip = shared.drip.load(Ordering::SeqCst);
    if body.get("stream").and_then(Value::as_bool) == Some(true) {
        let events = openai::stream(&turn, model, &id);
        let events = events.into_iter().map(|d| (None, d)).collect();
        return event_stream(events, turn.pace, drip);
    }
    json_body(&openai::completion(&turn, model, &id), drip)
}

pub(super) async fn messages(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    raw: Bytes,
) -> Response {
    let (body, turn) = match take_turn(&shared, &uri, &headers, &raw).await {
        Ok(taken) => taken,
        Err(response) => return response,
    };
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("test-model");
    let id = shared.response_id("msg_");
    let drip = shared.drip.load(Ordering::SeqCst);
    if body.get("stream").and_then(Value::as_bool) == Some(true) {
        let events = anthropic::stream(&turn, model, &id);
        let events = events
            .into_iter()
            .map(|(n, d)| (Some(n.to_string()), d))
            .collect();
        return event_stream(events, turn.pace, drip);
    }
    json_body(&anthropic::message(&turn, model, &id), drip)
}

/// Answers with `(event name, data)` pairs as SSE: as whole events, `pace` apart, or
/// dripped.
fn event_stream(
    events: Vec<(Option<String>, String)>,
    pace: Option<Duration>,
    drip: bool,
) -> Response {
    if drip {
        let mut raw = String::new();
        for (name, data) in &events {
            if let Some(name) = name {
                raw.push_str(&format!("event: {name}\n"));
            }
            raw.push_str(&format!("data: {data}\n\n"));
        }
        return crate::drip::response(raw.as_bytes(), "text/event-stream");
    }
    let events = events.into_iter().map(|(name, data)| match name {
        Some(name) => Event::default().event(name).data(data),
        None => Event::default().data(data),
    });
    Sse::new(paced(events.collect(), pace)).into_response()
}

fn json_body(value: &Value, drip: bool) -> Response {
    if drip {
        return crate::drip::response(value.to_string().as_bytes(), "application/json");
    }
    Json(value).into_response()
}

/// Streams `events`, waiting `pace` before each one after the first.
fn paced(
    events: Vec<Event>,
    pace: Option<Duration>,
) -> impl futures::Stream<Item = Result<Event, std::convert::Infallible>> {
    futures::stream::iter(events.into_iter().enumerate()).then(move |(i, event)| async move {
        if let Some(pace) = pace.filter(|_| i > 0) {
            tokio::time::sleep(pace).await;
        }
        Ok(event)
    })
}

pub(super) async fn models() -> Json<Value> {
    Json(json!({
        "object": "list",
        "data": [{"id": "test-model", "object": "model", "created": 0, "owned_by": "scripted"}],
    }))
}

fn error(status: u16, body: String, retry_after: Option<u64>) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let content_type = if serde_json::from_str::<Value>(&body).is_ok() {
        "application/json"
    } else {
        "text/plain; charset=utf-8"
    };
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if let Some(secs) = retry_after {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    response
}

/// `POST /v1/audio/transcriptions`: records the multipart body, answers the set transcript.
pub(super) async fn transcriptions(State(shared): State<Arc<Shared>>, raw: Bytes) -> Response {
    super::lock(&shared.transcriptions).push(String::from_utf8_lossy(&raw).into_owned());
    let text = super::lock(&shared.transcript).clone();
    Json(json!({"text": text})).into_response()
}
