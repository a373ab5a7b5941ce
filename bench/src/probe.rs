//! Timestamp probes for the per-hop breakdown: an instant OpenAI-compatible LLM that records
//! when each request arrived and was answered, NATS subscribers that see the fleet's
//! inbound, outbound and tool-call messages, and a Redis `MONITOR` reader.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse as _, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures::StreamExt as _;
use prost::Message as _;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};

use nanobot_proto::{OutboundKind, OutboundMessage, subjects};

use crate::servers::TOOL_FILE;

/// A shared, append-only list of timestamped events.
pub type Log<T> = Arc<Mutex<Vec<T>>>;

fn push<T>(log: &Log<T>, item: T) {
    log.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(item);
}

/// Returns a copy of the events so far.
pub fn snapshot<T: Clone>(log: &Log<T>) -> Vec<T> {
    log.lock().unwrap_or_else(PoisonError::into_inner).clone()
}

/// One LLM request as the probe saw it.
#[derive(Debug, Clone, Copy)]
pub struct LlmCall {
    /// When the request body had arrived.
    pub start: SystemTime,
    /// When the reply was handed back to the HTTP server.
    pub end: SystemTime,
    /// Request body size in bytes (the prompt the system built).
    pub bytes: usize,
}

#[derive(Debug, Clone)]
struct ProbeState {
    calls: Log<LlmCall>,
    tool_calls: usize,
}

/// A running probe LLM; it stops when dropped.
#[derive(Debug)]
pub struct ProbeLlm {
    /// OpenAI base URL, `http://127.0.0.1:PORT/v1`.
    pub base_url: String,
    /// Every request, in arrival order.
    pub calls: Log<LlmCall>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ProbeLlm {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ProbeLlm {
    /// Starts the probe; each turn gets `tool_calls` sequential tool calls, then a text reply.
    pub async fn start(tool_calls: usize) -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .context("bind the probe llm")?;
        let addr = listener.local_addr().context("read the probe address")?;
        let calls: Log<LlmCall> = Arc::default();
        let state = ProbeState {
            calls: calls.clone(),
            tool_calls,
        };
        let app = Router::new()
            .route("/v1/chat/completions", post(complete))
            .route("/v1/models", get(models))
            .with_state(state);
        let task = tokio::spawn(async move {
            // The probe lives as long as the breakdown; a failed server shows up as errors.
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self {
            base_url: format!("http://{addr}/v1"),
            calls,
            task,
        })
    }
}

async fn models() -> Json<Value> {
    Json(json!({"object": "list", "data": [{"id": "test-model", "object": "model"}]}))
}

async fn complete(State(state): State<ProbeState>, body: axum::body::Bytes) -> Response {
    let start = SystemTime::now();
    let parsed: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let step = step_in_turn(&parsed);
    let model = parsed.get("model").cloned().unwrap_or(json!("test-model"));
    let call = (step < state.tool_calls).then(|| {
        let (name, args) = if step.is_multiple_of(2) {
            ("read_file", json!({"path": TOOL_FILE}))
        } else {
            ("list_dir", json!({"path": "."}))
        };
        json!({
            "id": format!("call_{}", uuid_like(start)),
            "type": "function",
            "function": {"name": name, "arguments": args.to_string()},
        })
    });
    let usage = json!({"prompt_tokens": body.len() / 4, "completion_tokens": 4,
                       "total_tokens": body.len() / 4 + 4});
    let streamed = parsed.get("stream").and_then(Value::as_bool) == Some(true);
    let response = if streamed {
        sse(&model, call, usage)
    } else {
        let message = match call {
            Some(call) => json!({"role": "assistant", "content": null, "tool_calls": [call]}),
            None => json!({"role": "assistant", "content": PROBE_REPLY}),
        };
        let finish = if message.get("tool_calls").is_some() {
            "tool_calls"
        } else {
            "stop"
        };
        Json(json!({
            "id": "chatcmpl-probe",
            "object": "chat.completion",
            "created": 0,
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage,
        }))
        .into_response()
    };
    push(
        &state.calls,
        LlmCall {
            start,
            end: SystemTime::now(),
            bytes: body.len(),
        },
    );
    response
}

/// The probe's final text (the load generator checks replies mention "benchmark turn").
const PROBE_REPLY: &str = "probe reply to the benchmark turn";

/// Returns the whole reply as one server-sent event stream (upstream always streams).
fn sse(model: &Value, call: Option<Value>, usage: Value) -> Response {
    let chunk = |delta: Value, finish: Value| {
        json!({
            "id": "chatcmpl-probe",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        })
    };
    let finish = if call.is_some() { "tool_calls" } else { "stop" };
    let body_delta = match call {
        Some(mut call) => {
            call["index"] = json!(0);
            json!({"tool_calls": [call]})
        }
        None => json!({"content": PROBE_REPLY}),
    };
    let events = [
        chunk(json!({"role": "assistant", "content": ""}), Value::Null),
        chunk(body_delta, Value::Null),
        chunk(json!({}), json!(finish)),
        json!({"id": "chatcmpl-probe", "object": "chat.completion.chunk", "created": 0,
               "model": model, "choices": [], "usage": usage}),
    ];
    let mut text = String::new();
    for event in events {
        text.push_str(&format!("data: {event}\n\n"));
    }
    text.push_str("data: [DONE]\n\n");
    ([(header::CONTENT_TYPE, "text/event-stream")], text).into_response()
}

/// Returns how many assistant messages follow the last user message.
fn step_in_turn(body: &Value) -> usize {
    let Some(messages) = body.get("messages").and_then(Value::as_array) else {
        return 0;
    };
    let role = |m: &Value| m.get("role").and_then(Value::as_str).map(str::to_string);
    let Some(last_user) = messages
        .iter()
        .rposition(|m| role(m).as_deref() == Some("user"))
    else {
        return 0;
    };
    messages[last_user + 1..]
        .iter()
        .filter(|m| role(m).as_deref() == Some("assistant"))
        .count()
}

fn uuid_like(at: SystemTime) -> u128 {
    at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos())
}

/// What a NATS observer saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BusEvent {
    /// An inbound message published by the gateway.
    Inbound,
    /// A final reply published by an agent.
    Final,
    /// A tool-call request sent by an agent.
    ToolCall,
}

/// Subscribes to the inbound, outbound and tool-call subjects and records what passes.
pub async fn observe_bus(nats_url: &str) -> anyhow::Result<(Log<(SystemTime, BusEvent)>, Guard)> {
    let client = async_nats::connect(nats_url)
        .await
        .with_context(|| format!("connect to {nats_url}"))?;
    let mut inbound = client.subscribe(subjects::INBOUND_ALL).await?;
    let mut outbound = client.subscribe(subjects::OUTBOUND_ALL).await?;
    let mut tools = client.subscribe(subjects::TOOL_CALL_ALL).await?;
    client
        .flush()
        .await
        .context("flush the observer subscriptions")?;
    let log: Log<(SystemTime, BusEvent)> = Arc::default();
    let sink = log.clone();
    let task = tokio::spawn(async move {
        let _keep = client;
        loop {
            let event = tokio::select! {
                Some(_) = inbound.next() => Some(BusEvent::Inbound),
                Some(msg) = outbound.next() => {
                    let kind = OutboundMessage::decode(msg.payload).map(|m| m.kind());
                    (kind.ok() == Some(OutboundKind::Final)).then_some(BusEvent::Final)
                }
                Some(_) = tools.next() => Some(BusEvent::ToolCall),
                else => break,
            };
            if let Some(event) = event {
                push(&sink, (SystemTime::now(), event));
            }
        }
    });
    Ok((log, Guard(task)))
}

/// Reads `MONITOR` from Redis and records each command's server timestamp and name.
pub async fn monitor_redis(redis_url: &str) -> anyhow::Result<(Log<(SystemTime, String)>, Guard)> {
    let addr = redis_url
        .trim_start_matches("redis://")
        .trim_end_matches('/');
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .with_context(|| format!("connect to redis at {addr}"))?;
    stream.write_all(b"MONITOR\r\n").await?;
    let mut lines = BufReader::new(stream).lines();
    let first = tokio::time::timeout(Duration::from_secs(5), lines.next_line())
        .await
        .context("redis did not answer MONITOR")??;
    anyhow::ensure!(
        first.as_deref() == Some("+OK"),
        "MONITOR refused: {first:?}"
    );
    let log: Log<(SystemTime, String)> = Arc::default();
    let sink = log.clone();
    let task = tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(entry) = parse_monitor_line(&line) {
                push(&sink, entry);
            }
        }
    });
    Ok((log, Guard(task)))
}

/// Parses `+1700000000.123456 [0 127.0.0.1:5000] "SET" "k" "v"` into time and command.
fn parse_monitor_line(line: &str) -> Option<(SystemTime, String)> {
    let rest = line.strip_prefix('+')?;
    let (stamp, rest) = rest.split_once(' ')?;
    let (secs, micros) = stamp.split_once('.')?;
    let at = UNIX_EPOCH
        + Duration::from_secs(secs.parse().ok()?)
        + Duration::from_micros(micros.parse().ok()?);
    let command = rest
        .split_once("] ")?
        .1
        .split(' ')
        .next()?
        .trim_matches('"');
    Some((at, command.to_uppercase()))
}

/// Aborts a background observer when dropped.
#[derive(Debug)]
pub struct Guard(tokio::task::JoinHandle<()>);

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monitor_lines_and_turn_steps_are_parsed() {
        let (at, cmd) =
            parse_monitor_line(r#"+1700000000.000250 [0 127.0.0.1:5000] "hset" "k" "v""#).unwrap();
        assert_eq!(cmd, "HSET");
        let since = at.duration_since(UNIX_EPOCH).unwrap();
        assert_eq!(
            (since.as_secs(), since.subsec_micros()),
            (1_700_000_000, 250)
        );
        assert!(parse_monitor_line("+OK").is_none());
        let body = json!({"messages": [
            {"role": "system", "content": "s"}, {"role": "user", "content": "u"},
            {"role": "assistant", "tool_calls": []}, {"role": "tool", "content": "t"},
        ]});
        assert_eq!(step_in_turn(&body), 1);
        assert_eq!(step_in_turn(&json!({})), 0);
    }
}
