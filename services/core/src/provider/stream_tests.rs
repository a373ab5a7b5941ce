//! Streamed replies read byte-exact however the network cuts them: every provider's stream
//! reader is fed a body split at every byte offset, in 1–3 byte drips and at random offsets.

use std::sync::Mutex;

use proptest::prelude::*;
use serde_json::{Value, json};

use super::{ChatResponse, anthropic_stream, openai};

const CORPUS: &[&str] = &[
    "你好，世界！🐈 naïve café",
    "👩‍👩‍👧‍👦 family, 👍🏽 thumbs, 🏳️‍🌈 flag, 🇨🇳🇺🇸🇯🇵 flags",
    "e\u{301}te\u{301} a\u{30a}ngstro\u{308}m",
    "مرحبا بالعالم — שלום עולם",
    "𝕬𝖑𝖕𝖍𝖆 𠀀𠀁 日本語 한국어",
];

/// The reply split into deltas the way providers do: a few characters each.
fn deltas(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(3).map(|c| c.iter().collect()).collect()
}

fn openai_body(text: &str, file: &str) -> Vec<u8> {
    let mut out = String::new();
    let mut push = |v: Value| out.push_str(&format!("data: {v}\n\n"));
    for d in deltas(text) {
        push(json!({"choices": [{"index": 0, "delta": {"content": d}, "finish_reason": null}]}));
    }
    let args = json!({"path": file}).to_string();
    push(json!({"choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "id": "call_1", "function": {"name": "read_file", "arguments": ""}}]}}]}));
    for d in deltas(&args) {
        push(json!({"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "function": {"arguments": d}}]}}]}));
    }
    push(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}));
    out.push_str("data: [DONE]\n\n");
    out.into_bytes()
}

fn anthropic_body(text: &str) -> Vec<u8> {
    let mut out = String::new();
    let mut push = |name: &str, v: Value| out.push_str(&format!("event: {name}\ndata: {v}\n\n"));
    push(
        "message_start",
        json!({"type": "message_start", "message": {"usage": {"input_tokens": 3}}}),
    );
    push(
        "content_block_start",
        json!({"type": "content_block_start", "index": 0,
        "content_block": {"type": "text", "text": ""}}),
    );
    for d in deltas(text) {
        push(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": d}}),
        );
    }
    push(
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 0}),
    );
    push(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}}),
    );
    push("message_stop", json!({"type": "message_stop"}));
    out.into_bytes()
}

fn response(chunks: Vec<Vec<u8>>) -> reqwest::Response {
    let stream = futures::stream::iter(chunks.into_iter().map(Ok::<_, std::io::Error>));
    let body = reqwest::Body::wrap_stream(stream);
    reqwest::Response::from(http::Response::new(body))
}

fn cut(bytes: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    points.sort_unstable();
    let mut out = Vec::new();
    let mut start = 0;
    for p in points.into_iter().chain([bytes.len()]) {
        out.push(bytes[start..p].to_vec());
        start = p;
    }
    out
}

fn drip(bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut start = 0;
    for size in [1, 2, 3].into_iter().cycle() {
        if start >= bytes.len() {
            break;
        }
        let end = (start + size).min(bytes.len());
        out.push(bytes[start..end].to_vec());
        start = end;
    }
    out
}

/// Reads `chunks` with the provider's stream reader; returns the reply and the deltas shown.
fn read_openai(chunks: Vec<Vec<u8>>) -> (ChatResponse, String) {
    let shown = Mutex::new(String::new());
    let on_delta = |d: &str| shown.lock().unwrap().push_str(d);
    let reply = block_on(openai::read_stream(response(chunks), &on_delta)).expect("a reply");
    (reply, shown.into_inner().unwrap())
}

fn read_anthropic(chunks: Vec<Vec<u8>>) -> (ChatResponse, String) {
    let shown = Mutex::new(String::new());
    let on_delta = |d: &str| shown.lock().unwrap().push_str(d);
    let reply = block_on(anthropic_stream::read(response(chunks), &on_delta)).expect("a reply");
    (reply, shown.into_inner().unwrap())
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime")
        .block_on(f)
}

const FILE: &str = "笔记/日记 📔.md";

#[test]
fn an_openai_stream_split_at_every_byte_offset_is_read_byte_exact() {
    for text in CORPUS {
        let body = openai_body(text, FILE);
        for at in 0..=body.len() {
            let (reply, shown) = read_openai(cut(&body, &[at]));
            assert_eq!(shown, *text, "split at {at}");
            assert_eq!(reply.content.as_deref(), Some(*text), "split at {at}");
            let args: Value = serde_json::from_str(&reply.tool_calls[0].arguments).unwrap();
            assert_eq!(args["path"], FILE, "split at {at}");
        }
    }
}

#[test]
fn an_anthropic_stream_split_at_every_byte_offset_is_read_byte_exact() {
    for text in CORPUS {
        let body = anthropic_body(text);
        for at in 0..=body.len() {
            let (reply, shown) = read_anthropic(cut(&body, &[at]));
            assert_eq!(shown, *text, "split at {at}");
            assert_eq!(reply.content.as_deref(), Some(*text), "split at {at}");
        }
    }
}

#[test]
fn streams_dripped_one_to_three_bytes_at_a_time_are_read_byte_exact() {
    let text = CORPUS.join("\n");
    let (reply, shown) = read_openai(drip(&openai_body(&text, FILE)));
    assert_eq!(
        (reply.content.as_deref(), shown.as_str()),
        (Some(text.as_str()), text.as_str())
    );
    let (reply, shown) = read_anthropic(drip(&anthropic_body(&text)));
    assert_eq!(
        (reply.content.as_deref(), shown.as_str()),
        (Some(text.as_str()), text.as_str())
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn any_text_split_anywhere_reaches_the_reply_unchanged(
        text in "\\PC{1,80}",
        cuts in proptest::collection::vec(any::<usize>(), 0..30),
    ) {
        let (reply, shown) = read_openai(cut(&openai_body(&text, &text), &cuts));
        prop_assert_eq!(reply.content.as_deref(), Some(text.as_str()));
        prop_assert_eq!(&shown, &text);
        let (reply, shown) = read_anthropic(cut(&anthropic_body(&text), &cuts));
        prop_assert_eq!(reply.content.as_deref(), Some(text.as_str()));
        prop_assert_eq!(&shown, &text);
    }
}

#[test]
fn a_body_that_breaks_mid_stream_is_a_transport_error() {
    let chunks = vec![
        Ok(b"data: {\"choices\":[]}\n\n".to_vec()),
        Err(std::io::Error::other("reset")),
    ];
    let body = reqwest::Body::wrap_stream(futures::stream::iter(chunks));
    let response = reqwest::Response::from(http::Response::new(body));
    let result = block_on(anthropic_stream::read(response, &|_| {}));
    assert!(
        matches!(result, Err(super::LlmError::Transport(_))),
        "{result:?}"
    );
}
