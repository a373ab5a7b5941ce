//! How a reply looks on Feishu, as 0.3.5 renders it ([`super::format`]): one message type per
//! reply ([`format_of`]: `text` for short plain text, `post` for text with links, cards for
//! anything with markdown or longer than 2,000 characters), the cards' headings and tables as
//! Feishu elements ([`messages_of`]). Deliberately safer than 0.3.5 (which sends any length
//! whole): a reply is first cut in chunks whose JSON-escaped UTF-8 fits Feishu's byte limits
//! ([`split_within_bytes`]: between grapheme clusters, code fences balanced).

use serde_json::{Value, json};

pub use super::format::format_of;
use super::format::{by_table_limit, card_elements, post_of};
use crate::render::measure::Limit;
use crate::render::split::split_markdown;

/// Most bytes of one chunk's JSON-escaped text (a card may be 30 KB; the rest is its frame).
pub const MAX_CONTENT_BYTES: usize = 28_000;

/// Returns `text` in chunks whose JSON-escaped UTF-8 is at most `max_bytes`, cut as
/// [`split_markdown`] cuts (between grapheme clusters, fences balanced).
pub fn split_within_bytes(text: &str, max_bytes: usize) -> Vec<String> {
    let mut out = Vec::new();
    for chunk in split_markdown(text, Limit::code_points(max_bytes)) {
        split_chunk(chunk, max_bytes, &mut out);
    }
    out
}

fn split_chunk(chunk: String, max_bytes: usize, out: &mut Vec<String>) {
    let bytes = escaped_len(&chunk);
    let chars = chunk.chars().count();
    if bytes <= max_bytes || chars <= 1 {
        out.push(chunk);
        return;
    }
    // Fewer characters in proportion to the overshoot; strictly fewer, so this ends.
    let fewer = (chars * max_bytes / bytes).clamp(1, chars - 1);
    for piece in split_markdown(&chunk, Limit::code_points(fewer)) {
        split_chunk(piece, max_bytes, out);
    }
}

/// Bytes of `text` inside a JSON string.
fn escaped_len(text: &str) -> usize {
    serde_json::to_string(text).map_or(text.len(), |s| s.len() - 2)
}

/// Returns the messages `(msg_type, content JSON)` one chunk becomes when sent as `format`
/// ([`format_of`]): a `text`, a `post`, or (as 0.3.5) one card per table, its headings bold
/// `div` lines, its tables Feishu `table` elements. Cards are updatable (`update_multi`), so a
/// streaming preview can become the reply; otherwise as 0.3.5's `{"wide_screen_mode": true}`.
pub(super) fn messages_of(format: &str, chunk: &str) -> Vec<(&'static str, String)> {
    match format {
        "text" => {
            let text = chunk.trim_matches(crate::render::message::is_py_space);
            vec![("text", json!({"text": text}).to_string())]
        }
        "post" => vec![("post", post_of(chunk).to_string())],
        _ => by_table_limit(card_elements(chunk))
            .into_iter()
            .map(|elements| ("interactive", card(elements).to_string()))
            .collect(),
    }
}

fn card(elements: Vec<Value>) -> Value {
    json!({"config": {"wide_screen_mode": true, "update_multi": true}, "elements": elements})
}

/// A markdown card (a streaming preview).
pub(super) fn card_of(markdown: &str) -> Value {
    card(vec![json!({"tag": "markdown", "content": markdown})])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_stay_within_the_byte_limit_and_never_cut_a_character_or_grapheme() {
        let family = "👩‍👩‍👧‍👦";
        let text = format!("{}\n{}", "飞书消息测试。".repeat(3000), family.repeat(2000));
        let chunks = split_within_bytes(&text, MAX_CONTENT_BYTES);
        assert!(chunks.len() >= 3, "{}", chunks.len());
        for c in &chunks {
            assert!(escaped_len(c) <= MAX_CONTENT_BYTES, "{}", escaped_len(c));
            assert!(
                !c.starts_with('\u{200d}') && !c.ends_with('\u{200d}'),
                "a ZWJ family was cut"
            );
        }
        let joined: String = chunks.concat();
        assert_eq!(
            joined.replace(char::is_whitespace, ""),
            text.replace(char::is_whitespace, "")
        );
        // Escapes count: a text of quotes needs twice its length in the JSON.
        let quotes = "\"".repeat(100);
        assert!(
            split_within_bytes(&quotes, 60)
                .iter()
                .all(|c| escaped_len(c) <= 60)
        );
        assert_eq!(split_within_bytes("短 👍", 60), ["短 👍"]);
    }

    #[test]
    fn the_message_type_follows_035() {
        assert_eq!(format_of("你好 👋"), "text");
        assert_eq!(format_of("see [文档](https://x.io)"), "post");
        assert_eq!(format_of(&"长".repeat(300)), "post");
        assert_eq!(format_of(&"长".repeat(2001)), "interactive");
        for md in [
            "**粗体**",
            "# 标题",
            "```\ncode\n```",
            "- 一\n- 二",
            "1. 一",
            "| a |\n|---|",
        ] {
            assert_eq!(format_of(md), "interactive", "{md}");
        }
        let [(kind, content)] = &messages_of("post", "看 [文档](https://x.io) 吧")[..] else {
            panic!("one message");
        };
        assert_eq!(*kind, "post");
        let post: Value = serde_json::from_str(content).unwrap();
        assert_eq!(
            post["zh_cn"]["content"][0],
            json!([{"tag": "text", "text": "看 "}, {"tag": "a", "text": "文档", "href": "https://x.io"},
                {"tag": "text", "text": " 吧"}])
        );
    }
}
