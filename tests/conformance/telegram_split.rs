//! Telegram: splitting a long raw-Markdown reply into messages
//! (`render::telegram::split_markdown`, upstream's `_split_telegram_markdown`), against
//! `telegram_split.json`: upstream's tests from
//! `nanobot/channels/telegram/tests/test_telegram_channel.py`, then Chinese, RTL, combining
//! marks, emoji and fenced-code replies.
//!
//! We count UTF-16 code units (Telegram's unit), 0.3.5 counts Python characters: the two agree
//! except on astral-plane characters (most emoji) near the limit. Those cases are marked
//! `"deliberate": "counts UTF-16"` and checked here: 0.3.5 sends a chunk Telegram measures as
//! over the limit, ours never does.

use serde_json::Value;

use nanobot_gateway::render::telegram::split_markdown;

use crate::harness::{self, Case};

const TABLE: &str = include_str!("telegram_split.json");

fn call(case: &Case) -> Result<Value, String> {
    match case.function.as_str() {
        "split_markdown" => {
            let (content, limit) = case.text_and_limit();
            Ok(split_markdown(content, limit).into())
        }
        other => Err(format!("no Rust function for {other}")),
    }
}

fn utf16_len(text: &str) -> usize {
    text.encode_utf16().count()
}

/// The text without whitespace (which both drop where they cut).
fn visible(chunks: &[String]) -> String {
    chunks.concat().split_whitespace().collect()
}

#[test]
fn long_replies_split_exactly_as_0_3_5() {
    harness::check(TABLE, call);
}

#[test]
fn where_0_3_5_overflows_in_utf16_units_our_chunks_fit() {
    let table = harness::parse(TABLE);
    let deliberate: Vec<&Case> = table
        .cases
        .iter()
        .filter(|case| case.deliberate.as_deref() == Some("counts UTF-16"))
        .collect();
    assert!(
        deliberate.len() >= 2,
        "{} deliberate cases",
        deliberate.len()
    );
    for case in deliberate {
        let (content, limit) = case.text_and_limit();
        let theirs: Vec<String> = serde_json::from_value(case.expected.clone()).expect("chunks");
        let ours = split_markdown(content, limit);
        assert!(
            theirs.iter().any(|chunk| utf16_len(chunk) > limit),
            "{}: 0.3.5 fits too, so the case is not a deliberate difference",
            case.name
        );
        assert!(
            ours.iter().all(|chunk| utf16_len(chunk) <= limit),
            "{}: {ours:?}",
            case.name
        );
        assert_eq!(visible(&ours), visible(&theirs), "{}: text lost", case.name);
    }
}
