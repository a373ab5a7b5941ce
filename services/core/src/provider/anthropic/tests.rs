use std::sync::Mutex;

use serde_json::json;

use super::*;
use crate::provider::anthropic_stream::StreamState;

fn req(messages: Vec<Value>, tools: Vec<Value>) -> ChatRequest<'static> {
    ChatRequest {
        model: "claude-x".into(),
        messages: messages.into(),
        tools: tools.into(),
        max_tokens: 100,
        temperature: 0.1,
        reasoning_effort: None,
        tool_choice: None,
    }
}

#[test]
fn openai_transcripts_become_anthropic_blocks_with_cache_markers() {
    let messages = vec![
        json!({"role": "system", "content": "You are nanobot."}),
        json!({"role": "user", "content": "list files"}),
        json!({"role": "assistant", "content": "Looking.", "thinking_blocks": [{"type": "thinking", "thinking": "hm", "signature": "sig"}],
               "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "list_dir", "arguments": "{\"path\": \".\"}"}},
                              {"id": "t2", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\": \"a\","}}]}),
        json!({"role": "tool", "tool_call_id": "t1", "name": "list_dir", "content": "a"}),
        json!({"role": "tool", "tool_call_id": "t2", "name": "read_file", "content": "x"}),
        json!({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA"}}, {"type": "text", "text": "and this?"}]}),
    ];
    let tools = vec![
        json!({"type": "function", "function": {"name": "list_dir", "description": "d", "parameters": {"type": "object"}}}),
        json!({"type": "function", "function": {"name": "read_file", "description": "r", "parameters": {"type": "object"}}}),
    ];
    let body = request_body(&req(messages, tools), false);
    assert_eq!(
        body["system"],
        json!([{"type": "text", "text": "You are nanobot.", "cache_control": {"type": "ephemeral"}}])
    );
    let msgs = body["messages"].as_array().unwrap();
    assert_eq!(
        msgs.len(),
        3,
        "tool results and the next user text merge: {msgs:#?}"
    );
    assert_eq!(msgs[1]["role"], "assistant");
    assert_eq!(msgs[1]["content"][0]["type"], "thinking");
    assert_eq!(msgs[1]["content"][0]["signature"], "sig");
    assert_eq!(
        msgs[1]["content"][1],
        json!({"type": "text", "text": "Looking."})
    );
    assert_eq!(
        msgs[1]["content"][2],
        json!({"type": "tool_use", "id": "t1", "name": "list_dir", "input": {"path": "."}})
    );
    assert_eq!(
        msgs[1]["content"][3]["input"],
        json!({"path": "a"}),
        "broken argument JSON is repaired for replay"
    );
    assert_eq!(
        msgs[1]["content"][3]["cache_control"],
        json!({"type": "ephemeral"}),
        "second-to-last message is cache-marked"
    );
    let user = msgs[2]["content"].as_array().unwrap();
    assert_eq!(
        user[0],
        json!({"type": "tool_result", "tool_use_id": "t1", "content": "a"})
    );
    assert_eq!(user[1]["tool_use_id"], "t2");
    assert_eq!(
        user[2]["source"],
        json!({"type": "base64", "media_type": "image/png", "data": "AAA"})
    );
    assert_eq!(user[3], json!({"type": "text", "text": "and this?"}));
    let tools = body["tools"].as_array().unwrap();
    assert_eq!(tools[0]["input_schema"], json!({"type": "object"}));
    assert!(tools[0].get("cache_control").is_none());
    assert_eq!(tools[1]["cache_control"], json!({"type": "ephemeral"}));
    assert!(body.get("stream").is_none());
}

#[test]
fn messages_parse_with_thinking_tool_use_and_usage() {
    let r = parse_message(&json!({
        "content": [
            {"type": "thinking", "thinking": "plan", "signature": "s1"},
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "tu1", "name": "read_file", "input": {"path": "a"}},
            {"type": "tool_use", "id": "tu2", "input": {}}
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 10, "cache_read_input_tokens": 90, "output_tokens": 5}
    }))
    .unwrap();
    assert_eq!(r.content.as_deref(), Some("Let me look."));
    assert_eq!(r.finish_reason, "tool_calls");
    assert_eq!(r.reasoning_content.as_deref(), Some("plan"));
    assert_eq!(
        r.thinking_blocks,
        vec![json!({"type": "thinking", "thinking": "plan", "signature": "s1"})]
    );
    assert_eq!(r.tool_calls[0].arguments, "{\"path\":\"a\"}");
    assert_eq!(r.malformed_tool_calls, 1);
    assert_eq!(
        (
            r.usage.prompt_tokens,
            r.usage.completion_tokens,
            r.usage.cached_tokens
        ),
        (100, 5, 90)
    );
    assert_eq!(finish_reason("max_tokens"), "length");
}

#[test]
fn stream_events_assemble_the_message_and_forward_text_deltas() {
    let seen = Mutex::new(Vec::<String>::new());
    let sink = |d: &str| seen.lock().unwrap().push(d.to_string());
    let mut state = StreamState::default();
    let events = [
        json!({"type": "message_start", "message": {"usage": {"input_tokens": 7, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hm"}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "sg"}}),
        json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Hel"}}),
        json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "lo"}}),
        json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "tu", "name": "exec", "input": {}}}),
        json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{\"command\":"}}),
        json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "\"ls\"}"}}),
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 12}}),
    ];
    for e in &events {
        state.apply(e, &sink).unwrap();
    }
    let r = state.finish();
    assert_eq!(*seen.lock().unwrap(), vec!["Hel", "lo"]);
    assert_eq!(r.content.as_deref(), Some("Hello"));
    assert_eq!(r.finish_reason, "tool_calls");
    assert_eq!(
        r.thinking_blocks,
        vec![json!({"type": "thinking", "thinking": "hm", "signature": "sg"})]
    );
    assert_eq!(
        r.tool_calls,
        vec![ToolCall {
            id: "tu".into(),
            name: "exec".into(),
            arguments: "{\"command\":\"ls\"}".into()
        }]
    );
    assert_eq!((r.usage.prompt_tokens, r.usage.completion_tokens), (7, 12));
    let err = StreamState::default()
        .apply(
            &json!({"type": "error", "error": {"type": "overloaded_error"}}),
            &sink,
        )
        .unwrap_err();
    assert!(err.retryable());
}
