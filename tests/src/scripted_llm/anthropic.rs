//! Renders a [`Turn`] as an Anthropic Messages response or SSE event stream.

use serde_json::{Value, json};

use super::reply::{Turn, pieces};

/// Pieces each streamed text is cut into.
const STREAM_PIECES: usize = 3;
/// Signature sent on thinking blocks (clients must send it back verbatim).
const SIGNATURE: &str = "scripted-signature";

/// Returns the non-streaming `message` body. Tool arguments that are not valid JSON are sent
/// as a JSON string in `input`, so clients see the malformed value.
pub(crate) fn message(turn: &Turn, model: &str, id: &str) -> Value {
    let mut content = Vec::new();
    if let Some(thinking) = &turn.reasoning {
        content.push(json!({"type": "thinking", "thinking": thinking, "signature": SIGNATURE}));
    }
    if let Some(text) = &turn.content {
        content.push(json!({"type": "text", "text": text}));
    }
    for call in &turn.tool_calls {
        let input = serde_json::from_str::<Value>(&call.arguments)
            .unwrap_or_else(|_| Value::String(call.arguments.clone()));
        content.push(json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input}));
    }
    json!({
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": turn.finish.anthropic(),
        "stop_sequence": null,
        "usage": {"input_tokens": turn.prompt_tokens, "output_tokens": turn.completion_tokens},
    })
}

/// Returns the `(event, data)` pairs of the SSE stream.
pub(crate) fn stream(turn: &Turn, model: &str, id: &str) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    let mut push = |event: &'static str, data: Value| out.push((event, data.to_string()));
    push(
        "message_start",
        json!({"type": "message_start", "message": {
            "id": id, "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": turn.prompt_tokens, "output_tokens": 1},
        }}),
    );
    push("ping", json!({"type": "ping"}));
    let mut index = 0;
    let mut block =
        |push: &mut dyn FnMut(&'static str, Value), start: Value, deltas: Vec<Value>| {
            push(
                "content_block_start",
                json!({"type": "content_block_start", "index": index, "content_block": start}),
            );
            for delta in deltas {
                push(
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": index, "delta": delta}),
                );
            }
            push(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": index}),
            );
            index += 1;
        };
    if let Some(thinking) = &turn.reasoning {
        let mut deltas: Vec<Value> = pieces(thinking, STREAM_PIECES)
            .into_iter()
            .map(|p| json!({"type": "thinking_delta", "thinking": p}))
            .collect();
        deltas.push(json!({"type": "signature_delta", "signature": SIGNATURE}));
        let start = json!({"type": "thinking", "thinking": "", "signature": ""});
        block(&mut push, start, deltas);
    }
    if let Some(text) = &turn.content {
        let deltas = pieces(text, STREAM_PIECES)
            .into_iter()
            .map(|p| json!({"type": "text_delta", "text": p}))
            .collect();
        block(&mut push, json!({"type": "text", "text": ""}), deltas);
    }
    for call in &turn.tool_calls {
        let deltas = pieces(&call.arguments, STREAM_PIECES)
            .into_iter()
            .map(|p| json!({"type": "input_json_delta", "partial_json": p}))
            .collect();
        let start = json!({"type": "tool_use", "id": call.id, "name": call.name, "input": {}});
        block(&mut push, start, deltas);
    }
    push(
        "message_delta",
        json!({
            "type": "message_delta",
            "delta": {"stop_reason": turn.finish.anthropic(), "stop_sequence": null},
            "usage": {"output_tokens": turn.completion_tokens},
        }),
    );
    push("message_stop", json!({"type": "message_stop"}));
    out
}

/// Returns the text of the last user message that carries text (tool-result-only user
/// messages are skipped, like OpenAI `tool` messages), and how many assistant messages
/// follow it.
pub(crate) fn last_user(body: &Value) -> Option<(String, usize)> {
    let messages = body.get("messages")?.as_array()?;
    let pos = messages.iter().rposition(|m| {
        m.get("role").and_then(Value::as_str) == Some("user")
            && m.get("content").is_some_and(|c| !text_of(c).is_empty())
    })?;
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
        Value::Array(blocks) => blocks
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}
