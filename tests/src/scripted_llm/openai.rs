//! Renders a [`Turn`] as an OpenAI Chat Completions response or SSE chunk stream.

use serde_json::{Map, Value, json};

use super::reply::{Turn, pieces};

/// Pieces each streamed text is cut into.
pub(super) const STREAM_PIECES: usize = 3;

/// Returns the non-streaming `chat.completion` body.
pub(crate) fn completion(turn: &Turn, model: &str, id: &str) -> Value {
    let mut message = Map::new();
    message.insert("role".into(), json!("assistant"));
    message.insert("content".into(), json!(turn.content));
    if let Some(reasoning) = &turn.reasoning {
        message.insert("reasoning_content".into(), json!(reasoning));
    }
    if !turn.tool_calls.is_empty() {
        let calls: Vec<Value> = turn
            .tool_calls
            .iter()
            .map(|c| {
                json!({
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                })
            })
            .collect();
        message.insert("tool_calls".into(), Value::Array(calls));
    }
    json!({
        "id": id,
        "object": "chat.completion",
        "created": super::unix_now(),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": turn.finish.openai()}],
        "usage": usage(turn),
    })
}

/// Returns the `data:` payloads of the SSE stream, ending with `[DONE]`.
pub(crate) fn stream(turn: &Turn, model: &str, id: &str) -> Vec<String> {
    let created = super::unix_now();
    let chunk = |delta: Value, finish: Value| {
        json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        })
        .to_string()
    };
    let mut out = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    if let Some(reasoning) = &turn.reasoning {
        for piece in pieces(reasoning, STREAM_PIECES) {
            out.push(chunk(json!({"reasoning_content": piece}), Value::Null));
        }
    }
    if let Some(content) = &turn.content {
        for piece in pieces(content, STREAM_PIECES) {
            out.push(chunk(json!({"content": piece}), Value::Null));
        }
    }
    for (index, call) in turn.tool_calls.iter().enumerate() {
        let head = json!({"tool_calls": [{
            "index": index,
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }]});
        out.push(chunk(head, Value::Null));
        for piece in pieces(&call.arguments, STREAM_PIECES) {
            let delta = json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]});
            out.push(chunk(delta, Value::Null));
        }
    }
    out.push(chunk(json!({}), json!(turn.finish.openai())));
    let usage_chunk = json!({
        "id": id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [],
        "usage": usage(turn),
    });
    out.push(usage_chunk.to_string());
    out.push("[DONE]".into());
    out
}

fn usage(turn: &Turn) -> Value {
    json!({
        "prompt_tokens": turn.prompt_tokens,
        "completion_tokens": turn.completion_tokens,
        "total_tokens": turn.prompt_tokens + turn.completion_tokens,
    })
}

/// Returns the text of the last `user` message (string content or joined text parts), and
/// how many assistant messages follow it (the step within the current turn).
pub(crate) fn last_user(body: &Value) -> Option<(String, usize)> {
    let messages = body.get("messages")?.as_array()?;
    let pos = messages
        .iter()
        .rposition(|m| m.get("role").and_then(Value::as_str) == Some("user"))?;
    let text = text_of(messages[pos].get("content")?);
    let step = messages[pos + 1..]
        .iter()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
        .count();
    Some((text, step))
}

fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}
